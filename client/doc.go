// Package client is the public Go library for GovFS: a path and inode API
// over the Meta gRPC service (internal/wire/govfs.proto), and file
// contents over the data protocol (internal/dataproto) to chunk servers.
//
// Contract:
//
//   - Errors. POSIX failures are returned as *Error values whose Err wraps a
//     syscall.Errno, so errors.Is(err, syscall.ENOENT) works. A malformed
//     request (server code INVALID) wraps syscall.EINVAL with the server's
//     message; a server bug (INTERNAL) wraps syscall.EIO; a node of another
//     cluster wraps ErrWrongCluster; running out of the retry budget
//     (Config.OpTimeout) wraps syscall.ETIMEDOUT; a cancelled or expired
//     caller context wraps ctx.Err(). Errno maps any error to one errno.
//
//   - Exactly-once mutations. Every mutation is one wire.Command with a
//     RequestID {client_id, seq, first_incomplete} and a proposer timestamp,
//     built once and retried unchanged (same RequestID, same now_ns), so the
//     server's dedup table answers a retry instead of applying it twice. The
//     client id is random (crypto/rand) and non-zero; seq grows by one per
//     mutation; first_incomplete is the lowest seq still in flight.
//
//   - Routing. Mutations go to the leader of the owning group; the client
//     remembers the leader per group, follows NOT_LEADER hints, and moves to
//     another member on NOT_LEADER without a hint, UNAVAILABLE,
//     UNKNOWN_GROUP, gRPC Unavailable or a per-call deadline. Reads go to
//     any member: each Client picks a preferred member at random and sticks
//     to it until it fails. Retries back off exponentially (10ms doubling to
//     1s, full jitter) within Config.OpTimeout.
//
//   - Ministries. Which ministry (group) owns an inode is learned from
//     Lookup and Readdir answers (ministry 0 = same as the parent) and from
//     REDIRECT statuses, and kept in a bounded cache; unknown inodes go to
//     the root ministry (group 1).
//
//   - Consistency. Reads are session consistent by default: each request
//     carries the highest applied index this Client has seen for the group
//     (from any Mutate or Read answer), so a Client reads its own writes
//     and never goes back in time. Config.Consistency = LINEARIZABLE, or
//     the Linearizable call option, asks for linearizable reads instead.
//
//   - Paths are absolute, '/'-separated and cleaned lexically (so "/a/../b"
//     is "/b"). Empty or relative paths give EINVAL, paths over 4096 bytes
//     or components over 255 bytes ENAMETOOLONG, before any RPC. Resolution
//     walks from the root inode with one Lookup per component and follows
//     no symlinks: the last component has lstat semantics, and a symlink in
//     the middle of a path gives ENOTDIR.
//
//   - Data. A file's bytes live in chunks of the cluster's chunk size (64
//     MiB by default), each recorded in the ministry (index → handle,
//     replica group) and stored on every member of its group. WriteFile
//     and ReadFile move whole files; Open returns a File with ReadAt,
//     WriteAt, Append (record append: the primary picks the offset) and
//     Truncate. Data requests are at most 1 MiB and a few run in parallel;
//     a write is acknowledged once every member has it durably, and only
//     then does the ministry's size grow (SETATTR_SIZE_GROW), so a reader
//     never sees a size whose bytes are not stored. Files are at most
//     MaxFileSize (2^50) bytes. See file.go for the consistency of a File
//     (close-to-open) and docs/dataplane.md for what is not built yet.
//
//   - Leases. AcquireLease and OpenRange (lease.go, rangefile.go) take
//     byte-range read and write leases from the minister, renewed in the
//     background by one long-poll keepalive per ministry; see
//     docs/leases.md.
//
// A Client is safe for concurrent use.
package client
