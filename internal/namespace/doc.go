// Package namespace is the ministry state machine: it applies replicated
// ministry commands (wire.Command) to a group's key space and answers the
// read queries of that key space. It is pure and deterministic: no
// goroutines, clocks, randomness, network or files. Time comes from the
// command (Command.now_ns, stamped by the proposer), and nothing depends on
// map iteration order, so every replica that applies the same log reaches
// byte-identical state.
//
// # Contract
//
// Apply is called with an engine.ReadWriter that is already limited to the
// group's state prefix and that is an indexed batch (reads see earlier
// writes of the same batch). A POSIX failure (ENOENT, EEXIST, ...) is a
// normal outcome reported in Result.errno; it changes nothing except the
// dedup table. The error return is only for storage failures and for
// commands of an unknown format (Command.version != 1); the caller must
// treat it as fatal for the replica, because skipping a log entry would
// make replicas diverge.
//
// NB: every operation checks all its inputs before it writes anything. The
// writes of an operation are buffered in a tx and flushed only when the
// operation succeeded, so a late check can never leave half an operation
// behind.
//
// # Key layout
//
// Integers are big-endian 8 bytes so keys sort numerically; names are raw
// bytes (ValidateName guarantees no '/' or NUL).
//
//	"i" <ino>                 wire.Inode (attr + symlink target)
//	"d" <parent ino> <name>   wire.Dirent (child ino, type, referral ministry)
//	"p" <dir ino>             parent ino of a directory (8 bytes); absent for
//	                          the ministry root. Kept on mkdir, rename and
//	                          rmdir; used by the rename loop check.
//	"x" <ino> <name>          extended attribute value
//	"c" <ino> <chunk index>   chunk table (DESIGN §3): wire.ChunkRef (handle,
//	                          replica group), see chunks.go
//	"m" "inodes"              granted inode ranges, see below
//	"r" <client> <seq>        wire.Result remembered for dedup
//	"k" <client>              dedup client record: last use (8, time key
//	                          encoding) + seq watermark (8)
//	"t" <last use> <client>   empty; index of clients by last use, for expiry
//	"e"                       u64 minute (command time) of the last expiry run
//	"l" <dir ino>             empty; the directory was given a directory
//	                          lease (MarkDirLeaseOp); removed with it
//	"s" <client>              empty; the client has a lease session
//	                          (LeaseSessionOp, sessions.go)
//	"v" <client>              inode numbers reserved by the client
//	                          (ReserveInodesOp): next u64, end u64; see
//	                          async.go
//
// Times in keys are int64 nanoseconds with the sign bit flipped, so that
// they sort in time order as unsigned bytes.
//
// # Inode numbers
//
// The president grants ranges [start, end) through GrantInodesOp, in
// increasing order (its allocator only moves forward, and ranges of
// different ministries never overlap). The "m" record holds the end of the
// highest grant, the next number to hand out, and the ranges not used up
// yet: granted-end u64, next u64, then (start u64, end u64) pairs. A grant
// starting below granted-end is a duplicate delivery and is ignored; used
// ranges are dropped, so the record stays a few dozen bytes however many
// grants there were. Numbers are handed out in order and never reused;
// the root (inode 1) is never inside a grant.
//
// # Invariants
//
//   - Every dirent without a referral names an existing inode of its type.
//   - A directory has nlink 2 + its number of subdirectories (referrals
//     included, since the child directory still has ".." here from the
//     client's view); a non-directory has nlink = number of dirents naming
//     it. An inode is deleted, with its xattrs, when its nlink reaches 0.
//   - Every directory except the ministry root has a "p" record, and
//     following "p" from any directory ends at the root without a cycle.
//   - Attr.version grows by exactly one per applied command that changes
//     the inode; a directory counts as changed when its entries change.
//
// Referrals (dirents whose Ministry is non-zero) point into another
// ministry. Operations that would need that ministry's agreement (unlink or
// rename of a referral, rename onto one) fail with EXDEV until the
// cross-ministry protocol exists.
//
// # Exactly-once
//
// A command with a RequestID whose client_id is non-zero is applied at
// most once. Its Result is stored under "r" <client> <seq>; a later copy of
// the same request returns the stored Result without applying. A client's
// answers below max(first_incomplete, seq-1024) are dropped and that bound
// is remembered as the client's watermark: a request below the watermark
// (a delayed duplicate whose answer was already forgotten) is refused with
// EINVAL instead of being applied a second time. Clients idle for more than
// an hour (measured in command time) are forgotten, at most 8 per Apply, so
// the table is bounded by the number of clients active in the last hour.
package namespace
