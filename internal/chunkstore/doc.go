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
//     not at all, even if the process is killed at any point; they return
//     after fsync. An
//     error return means "not applied": if a step fails after the commit
//     point, recovery runs at once and the call succeeds if it completed
//     the mutation. Only if recovery itself fails is the outcome unknown
//     (the error says so) until a later operation's recovery succeeds.
//   - Truncate cuts for good: bytes cut by a shrinking Truncate never
//     reappear, not through a later write that leaves a gap, not through
//     Pad, not after a crash at any step. The shorter metadata commits
//     first, then the data file is cut and fsynced; recovery cuts any
//     data file longer than its committed length, so a crash in between
//     ends the same way. Cutting inside a block re-checksums its prefix
//     after verifying the old bytes (a corrupt block refuses the cut).
//   - A full disk fails the mutation with an error wrapping
//     syscall.ENOSPC before its commit point, so stored data and versions
//     are untouched: space for new bytes is reserved with fallocate(2)
//     and the metadata temp file is written before the commit.
//   - Bad input (negative offsets, zero-length writes: EINVAL; ranges past
//     the chunk size: EFBIG; stale versions; unknown handles: ErrNotFound)
//     gets an error and changes nothing.
//   - A directory initialized by another cluster, or with another chunk
//     size, is refused at Open; a directory is used by one process at a
//     time (flock on LOCK).
//
// # On-disk format
//
//	Dir/LOCK                      flock'd while a Store is open
//	Dir/store.json                {"format":1,"cluster_id":..,"chunk_size":..,"store_id":..}
//	Dir/chunks/<h>.data           chunk bytes at their offsets (sparse)
//	Dir/chunks/<h>.meta           committed metadata; a chunk exists iff this exists
//	Dir/chunks/<h>.jnl            committed overwrite not yet known to be applied
//	Dir/chunks/<h>.meta.tmp, .jnl.tmp   uncommitted; removed by recovery
//
// <h> is the handle in 16 lower-case hex digits. Integers are
// little-endian. A .meta file is "GVCM" | format u16 | 0 u16 | handle u64
// | version u64 | length u64 | nblocks u32 | nblocks CRC32C u32 | CRC32C of
// everything before it. A .jnl file is "GVCJ" | format u16 | 0 u16 |
// handle u64 | base version u64 | offset u64 | data length u64 | meta
// length u32 | the new .meta image | the data | CRC32C of everything
// before it.
//
// INVARIANT: bytes of a data file at or beyond the chunk's committed
// length are zero (or absent). Writes that leave a gap and Pad rely on it
// to write nothing for the gap; recovery restores it by truncating the
// data file to the length.
//
// # Atomicity
//
// A write whose bytes all lie at or above the committed length (appends,
// first writes: the common case) writes them straight into the data file,
// where no reader looks, fsyncs it, and commits by writing <h>.meta.tmp,
// fsyncing, renaming it over <h>.meta and fsyncing the directory. A write
// that overwrites committed bytes is a redo log of one record: data and
// new metadata go to <h>.jnl.tmp (fsync), the metadata to <h>.meta.tmp
// (fsync), and renaming the journal to <h>.jnl (directory fsync) commits;
// then the data file is patched and fsynced, the metadata renamed into
// place (directory fsync) and the journal unlinked. Open recovers every
// chunk: temp files are deleted, a journal whose base version is the
// metadata's is replayed (idempotently) and one the metadata has passed
// is dropped, and the data file is truncated to the committed length,
// which discards an uncommitted fresh write. The same recovery runs in
// process when a step fails, so the error path and the crash path are one.
//
// Why these choices: a per-chunk journal keeps the common append path at
// one data write (no double write) while overwrites pay a second copy;
// copy-on-write blocks would avoid that copy but need a block map and
// free-space management per chunk. One metadata file per chunk is
// rewritten whole (at most 4 KiB for a 64 MiB chunk), which keeps the
// format trivial at the cost of a rename and a directory fsync per
// mutation. The CRC of a partial last block covers only its valid prefix
// so that an append can extend it with crc32.Update, without reading the
// block back; a partial overwrite reads and verifies the old block first,
// so corruption is never laundered into a fresh, matching CRC.
//
// The crash tests simulate a process kill (TestingKnobs.BeforeStep
// panicking at each step, with torn writes) and check that reopening
// yields exactly the old or the new chunk. Power loss additionally relies
// on fsync and rename semantics of the file system (ext4, xfs); on a
// copy-on-write file system fallocate does not guarantee later writes.
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
