// Package chunkstore keeps chunk replicas on one local disk for a chunk
// server (DESIGN §6). It knows nothing of the network, leases or replica
// groups: a chunk is a handle, a version and up to ChunkSize bytes.
//
// # Contract
//
//   - Lazy allocation: a chunk's data file holds only the bytes written; a
//     10-byte chunk uses one file-system block, and Pad (record-append
//     padding) writes no data at all.
//   - Integrity: every 64 KiB block has a CRC32C (Castagnoli) covering the
//     block's bytes below the chunk length. Read verifies every block it
//     touches and returns *CorruptError for a bad one; Scrub walks all of
//     them; RepairBlock puts back a good copy from another replica.
//   - Versions only grow: every mutation carries a version that must be
//     above the chunk's (ErrStaleVersion otherwise, nothing changed).
//   - Atomic, durable mutations: Write, Append, Pad, Truncate and
//     SetVersion either happen completely (bytes, length and version) or
//     not at all, even if the process is killed or the power fails at any
//     point; they return only once the result is durable. An error return
//     means "not applied": if a step fails after the commit point,
//     recovery runs at once and the call succeeds if it completed the
//     mutation. Only if recovery itself fails is the outcome unknown (the
//     error says so) until a later operation's recovery succeeds.
//   - Truncate cuts for good: bytes cut by a shrinking Truncate never
//     reappear, not through a later write that leaves a gap, not through
//     Pad, not after a crash at any step. The shorter metadata commits
//     first, then the data file is cut and fsynced; recovery cuts any
//     data file longer than its committed length, so a crash in between
//     ends the same way. Cutting inside a block re-checksums its prefix
//     after verifying the old bytes (a corrupt block refuses the cut).
//   - A full disk fails the mutation with an error wrapping
//     syscall.ENOSPC before its commit point, so stored data and versions
//     are untouched: space for new bytes is reserved with fallocate(2),
//     journals and new metadata files are written before the commit, and
//     metadata slots are preallocated, so nothing after a commit point
//     needs new disk space.
//   - Bad input (negative offsets, zero-length writes: EINVAL; ranges past
//     the chunk size: EFBIG; stale versions; unknown handles: ErrNotFound)
//     gets an error and changes nothing.
//   - A directory initialized by another cluster, or with another chunk
//     size, is refused at Open; a directory is used by one process at a
//     time (flock on LOCK).
//
// # On-disk format (format 2)
//
//	Dir/LOCK                      flock'd while a Store is open
//	Dir/CLEAN                     written by Close when every write is synced; removed by Open
//	Dir/store.json                {"format":2,"cluster_id":..,"chunk_size":..,"store_id":..}
//	Dir/chunks/<h>.data           chunk bytes at their offsets (sparse)
//	Dir/chunks/<h>.meta           two metadata slots; a chunk exists iff this exists
//	Dir/chunks/<h>.jnl            the chunk's last overwrite (redo record), kept for the next
//	Dir/chunks/<h>.meta.tmp       a new metadata file before its rename; removed by recovery
//	Dir/chunks/<h>.jnl.tmp        format 1 only: an uncommitted journal; removed by recovery
//
// <h> is the handle in 16 lower-case hex digits. Integers are
// little-endian. A metadata record is "GVCM" | format u16 | 0 u16 |
// handle u64 | version u64 | length u64 | nblocks u32 | nblocks CRC32C u32
// | CRC32C of everything before it. A .meta file is two slots of S bytes
// each, S the largest record for the chunk size rounded up to 4 KiB (4 KiB
// for 1 MiB chunks, 8 KiB for 64 MiB): each slot holds a record followed
// by padding. The valid record with the higher version is the committed
// metadata; the other slot holds the one before it, or a torn write. A
// .jnl file starts with a journal record: "GVCJ" | format u16 | 0 u16 |
// handle u64 | base version u64 | offset u64 | data length u64 | meta
// length u32 | the new metadata record | the data | CRC32C of everything
// before it; bytes of an earlier, longer record may follow it.
//
// INVARIANT: bytes of a data file at or beyond the chunk's committed
// length are zero (or absent). Writes that leave a gap, Pad and growing
// Truncates rely on it to write nothing for the gap; recovery restores it
// by truncating the data file to the length.
//
// # Atomicity
//
// A write whose bytes all lie at or above the committed length (appends,
// first writes: the common case) writes them straight into the data file,
// where no reader looks, fdatasyncs it, and commits by writing the new
// record over the older metadata slot and fdatasyncing the metadata file:
// two syncs, and no directory operation, so neither sync needs more than
// the data's own file-system journal commit. A write that overwrites
// committed bytes is a redo log of one record: data and new metadata are
// written over the chunk's journal in place and fdatasynced (a whole,
// checksummed record is the commit point; a torn one is no commit), then
// the data file is patched and fdatasynced and the metadata slot written
// and fdatasynced: three syncs. Pad, SetVersion and a growing Truncate
// write only a slot (one sync); a shrinking Truncate writes the slot, then
// cuts the data file and fsyncs it. A new chunk (and a format-1 chunk's
// first mutation, see below) gets its metadata file as a temp file that
// is fsynced and renamed into place, with a directory fsync; a new journal
// or data file of an existing chunk costs one directory fsync too, once
// (owed by the chunk until paid, even across a failed mutation).
//
// Open recovers every chunk: temp files are deleted, the committed slot
// is chosen, a journal whose base version is the committed one is
// replayed (idempotently), one the metadata has passed and a torn one
// are ignored, one that follows neither marks the chunk damaged, and the
// data file is truncated to the committed length, which discards an
// uncommitted fresh write. Unless the store was closed cleanly (CLEAN),
// Open then calls sync(2) once, so that what recovery accepted from the
// page cache of a killed process (written but not yet fsynced) is durable
// before it is served. The same recovery runs in process when a step
// fails, so the error path and the crash path are one; there it also
// rewrites the committed slot with the same bytes and fdatasyncs it,
// because after a failed fsync the kernel may keep a page readable but
// never write it.
//
// Why these choices: a per-chunk journal keeps the common append path at
// one data write (no double write) while overwrites pay a second copy;
// copy-on-write blocks would avoid that copy but need a block map and
// free-space management per chunk. Two fixed metadata slots rewritten in
// place replace format 1's temp file, rename and directory fsync per
// mutation (each a file-system journal commit, which the three replicas
// of a group on one disk serialize on) by one fdatasync of blocks that are
// already allocated. Journals are likewise rewritten in place and kept
// (cut to empty after an overwrite larger than 2 MiB, so whole-chunk
// rewrites do not pin a chunk's worth of disk). Data must be durable
// before the slot that covers it is written, hence two syncs for an
// append: one sync would need every chunk's last write to be verified
// against its checksums at Open to undo an append whose data did not
// reach the disk. The CRC of a partial last block covers only its valid
// prefix so that an append can extend it with crc32.Update, without
// reading the block back; a partial overwrite reads and verifies the old
// block first, so corruption is never laundered into a fresh, matching
// CRC.
//
// Format 1 (one metadata record per file, replaced by rename; journals
// renamed into place after their fsync and unlinked once applied) is
// still read: Open of a format-1 store rewrites store.json as format 2
// first (so an older binary, which reads only format 1, then refuses the
// store with "has format 2" rather than misreading it), recovers format-1
// chunks and journals with format-1 rules, and each chunk's metadata file
// is rewritten in format 2, by rename, just before its next mutation.
// Stores of a later format are refused with a message naming it.
//
// The crash tests simulate a process kill (TestingKnobs.BeforeStep
// panicking at each step, with torn writes) and check that reopening
// yields exactly the old or the new chunk, for every step of every kind
// of mutation, on format-2 and format-1 chunks. The power-loss tests cut
// the power before every step and after the call returns, keeping only
// what was synced (file contents as of each file's last fsync or
// fdatasync, names as of the directory's last fsync; TestingKnobs.
// AfterSync), and check the old or the new chunk, the new one once its
// commit was synced, always the new one once the call returned; they
// fail if any of the syncs is left out. Real power loss additionally
// relies on fsync, fdatasync and rename semantics of the file system
// (ext4, xfs): fdatasync persists a file's size and block map along with
// its data, sector writes within a slot may tear but never touch the
// other slot (slots are 4 KiB aligned), and a rename is durable after a
// directory fsync. On a copy-on-write file system fallocate does not
// guarantee later writes.
//
// # Concurrency
//
// A Store is safe for concurrent use. Each handle has a RWMutex: reads
// share it, mutations of one chunk are serialized, different chunks
// proceed in parallel. Close waits for operations in flight.
//
// Data files stay open in a bounded cache (Config.OpenFiles, least
// recently used closed first), so a read is one pread of the blocks it
// touches plus their CRC32C; small reads verify in a pooled buffer and
// copy out only the bytes asked for. INVARIANT: a cached file is the
// chunk's current data file: Delete and recovery (the only code that
// removes data files) drop it from the cache under the chunk's exclusive
// lock, and every user holds the chunk's lock while it uses the file.
// Scrub opens files itself so that a pass over the disk does not evict
// the files clients are reading.
package chunkstore
