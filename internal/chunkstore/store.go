package chunkstore

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
)

var (
	// ErrNotFound: the store holds no chunk with that handle.
	ErrNotFound = errors.New("chunkstore: no such chunk")
	// ErrStaleVersion: a mutation's version is not above the chunk's.
	ErrStaleVersion = errors.New("chunkstore: stale version")
	// ErrChunkFull: an Append does not fit in the rest of the chunk; the
	// caller pads the chunk and moves to the next one.
	ErrChunkFull = errors.New("chunkstore: chunk full")
	// ErrForeignStore: the directory belongs to another cluster.
	ErrForeignStore = errors.New("chunkstore: store belongs to another cluster")
	// ErrRepairMismatch: repair data does not match the stored checksum.
	ErrRepairMismatch = errors.New("chunkstore: repair data does not match the stored checksum")
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("chunkstore: store closed")
)

// CorruptError reports a block whose bytes do not match its CRC32C, or a
// chunk whose metadata is unreadable (Block -1). The caller reads the
// block from another replica and calls RepairBlock (or, for Block -1,
// deletes the chunk and re-replicates it). It unwraps to syscall.EIO.
type CorruptError struct {
	Handle Handle
	Block  int
	Detail string
}

func (e *CorruptError) Error() string {
	if e.Block < 0 {
		return fmt.Sprintf("chunkstore: chunk %v is damaged: %s", e.Handle, e.Detail)
	}
	return fmt.Sprintf("chunkstore: chunk %v block %d is corrupt: %s", e.Handle, e.Block, e.Detail)
}

// Unwrap makes a corrupt block an I/O error at the POSIX edge.
func (e *CorruptError) Unwrap() error { return syscall.EIO }

// ChunkInfo describes one chunk.
type ChunkInfo struct {
	Handle  Handle
	Version uint64
	Length  int64
}

// Store holds the chunk replicas of one directory. It is safe for
// concurrent use; mutations of different chunks proceed in parallel.
type Store struct {
	cfg      Config
	dir      string // the chunks directory
	id       string
	log      *slog.Logger
	dirFile  *os.File // the chunks directory, for fsync after renames and new files
	lockFile *os.File
	files    *fileCache
	zero     []byte       // BlockSize zero bytes; never written
	zeroCRC  uint32       // CRC32C of a whole zero block
	syncs    atomic.Int64 // fsyncs and fdatasyncs issued, for tests and benchmarks
	// noDirect: the file system refused O_DIRECT (tmpfs); direct counts
	// data writes that went through it (direct.go).
	noDirect atomic.Bool
	direct   atomic.Int64
	// blockPool holds *[]byte of smallReadBlocks blocks for small reads.
	blockPool sync.Pool

	// life is held shared by every operation and exclusively by Close,
	// so Close waits for operations in flight.
	life struct {
		sync.RWMutex
		closed bool
	}
	mu struct {
		sync.RWMutex
		chunks map[Handle]*chunk // entries are never removed: a deleted chunk keeps its lock
	}
}

// chunk is the in-memory state of one handle, guarded by mu.
type chunk struct {
	mu     sync.RWMutex
	exists bool
	meta   meta
	// format is the format of the metadata file (formatV1 files are
	// rewritten in format 2 by the chunk's next mutation); slot is the
	// slot holding meta in a format-2 file.
	format uint16
	slot   int
	// newName: a file of the chunk was created and the directory has not
	// been synced since; the next commit that relies on the file syncs it
	// (sticky, so a mutation that fails in between cannot lose it).
	newName bool
	// pending: the files may not match meta after a failed mutation; the
	// next operation runs recovery (under the exclusive lock) first.
	pending bool
	// bad: the metadata or journal is unreadable; only Delete and Scrub
	// touch the chunk until it is deleted.
	bad error
}

// storeFile is the identity record at the top of Dir.
type storeFile struct {
	Format    int    `json:"format"`
	ClusterID string `json:"cluster_id"`
	ChunkSize int64  `json:"chunk_size"`
	StoreID   string `json:"store_id"`
}

// Open opens or creates the store in cfg.Dir, taking an exclusive lock on
// it and recovering every chunk whose last mutation was interrupted.
func Open(cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Store{cfg: cfg, dir: filepath.Join(cfg.Dir, "chunks"), log: cfg.Logger.With("store", cfg.Dir),
		zero: make([]byte, BlockSize)}
	s.zeroCRC = crc32.Checksum(s.zero, castagnoli)
	if cfg.OpenFiles == 0 {
		cfg.OpenFiles = DefaultOpenFiles
	}
	s.files = newFileCache(cfg.OpenFiles)
	s.blockPool.New = func() any { b := make([]byte, smallReadBlocks*BlockSize); return &b }
	s.mu.chunks = map[Handle]*chunk{}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("chunkstore: create %s: %w", cfg.Dir, err)
	}
	lf, err := os.OpenFile(filepath.Join(cfg.Dir, "LOCK"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("chunkstore: open lock file: %w", err)
	}
	if err := syscall.Flock(int(lf.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lf.Close()
		return nil, fmt.Errorf("chunkstore: %s is in use by another process (lock: %w); stop it or use another directory", cfg.Dir, err)
	}
	s.lockFile = lf
	if err := s.open(); err != nil {
		s.closeFiles()
		return nil, err
	}
	return s, nil
}

func (s *Store) open() error {
	if err := s.identify(); err != nil {
		return err
	}
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return fmt.Errorf("chunkstore: create %s: %w", s.dir, err)
	}
	d, err := os.Open(s.dir)
	if err != nil {
		return fmt.Errorf("chunkstore: open %s: %w", s.dir, err)
	}
	s.dirFile = d
	return s.recoverAll()
}

// identify reads store.json, or writes it into an empty directory.
func (s *Store) identify() error {
	path := filepath.Join(s.cfg.Dir, "store.json")
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return s.initialize(path)
	}
	if err != nil {
		return fmt.Errorf("chunkstore: read %s: %w", path, err)
	}
	var sf storeFile
	if err := json.Unmarshal(b, &sf); err != nil {
		return fmt.Errorf("chunkstore: parse %s: %w", path, err)
	}
	switch {
	case sf.Format != formatVersion && sf.Format != formatV1:
		return fmt.Errorf("chunkstore: %s has format %d; this binary reads formats %d and %d (a newer binary wrote it: run that one)",
			path, sf.Format, formatV1, formatVersion)
	case sf.ClusterID != s.cfg.ClusterID:
		return fmt.Errorf("%w: %s belongs to cluster %q, not %q; point the chunk server at this cluster's directory, or wipe the directory if that cluster is gone",
			ErrForeignStore, s.cfg.Dir, sf.ClusterID, s.cfg.ClusterID)
	case sf.ChunkSize != s.cfg.ChunkSize:
		return fmt.Errorf("chunkstore: %s was created with chunk size %d but the config says %d; the chunk size is fixed when a cluster is created, use %d",
			s.cfg.Dir, sf.ChunkSize, s.cfg.ChunkSize, sf.ChunkSize)
	}
	s.id = sf.StoreID
	if sf.Format == formatV1 {
		// Chunk files of format 1 stay readable; each is rewritten in
		// format 2 by its next mutation. The store is marked format 2
		// first, so a binary that reads only format 1 refuses it rather
		// than meeting format-2 files.
		sf.Format = formatVersion
		if err := s.writeStoreFile(path, sf); err != nil {
			return fmt.Errorf("chunkstore: upgrade %s to format %d: %w", path, formatVersion, err)
		}
		s.log.Info("store upgraded", "from_format", formatV1, "to_format", formatVersion)
	}
	return nil
}

// writeStoreFile replaces store.json atomically and durably.
func (s *Store) writeStoreFile(path string, sf storeFile) error {
	b, err := json.MarshalIndent(sf, "", "  ")
	if err != nil {
		return err
	}
	if err := s.writeFile(path+".tmp", 0, "", "", b); err != nil {
		return err
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		return err
	}
	return s.syncDir(s.cfg.Dir)
}

func (s *Store) initialize(path string) error {
	ents, err := os.ReadDir(s.cfg.Dir)
	if err != nil {
		return fmt.Errorf("chunkstore: list %s: %w", s.cfg.Dir, err)
	}
	for _, e := range ents {
		// NB: a fresh file system's root holds lost+found, and LOCK is ours.
		if e.Name() != "LOCK" && e.Name() != "lost+found" {
			return fmt.Errorf("chunkstore: %s is not empty (has %q) and has no store.json; use an empty or new directory", s.cfg.Dir, e.Name())
		}
	}
	var id [16]byte
	if _, err := rand.Read(id[:]); err != nil {
		return fmt.Errorf("chunkstore: generate store id: %w", err)
	}
	sf := storeFile{Format: formatVersion, ClusterID: s.cfg.ClusterID, ChunkSize: s.cfg.ChunkSize, StoreID: hex.EncodeToString(id[:])}
	if err := s.writeStoreFile(path, sf); err != nil {
		return fmt.Errorf("chunkstore: write store.json: %w", err)
	}
	s.id = sf.StoreID
	return nil
}

// recoverAll loads every chunk, finishing or undoing interrupted writes.
func (s *Store) recoverAll() error {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return fmt.Errorf("chunkstore: list %s: %w", s.dir, err)
	}
	seen := map[Handle]bool{}
	for _, e := range ents {
		h, _, ok := parseName(e.Name())
		if !ok {
			s.log.Warn("ignoring unknown file in chunk directory", "name", e.Name())
			continue
		}
		if seen[h] {
			continue
		}
		seen[h] = true
		c := &chunk{}
		s.recoverLocked(h, c, false)
		if c.exists || c.pending {
			s.mu.chunks[h] = c
		}
	}
	// NB: a killed process may have left writes in the page cache that it
	// never synced (a metadata slot, journal or data written before its
	// fsync). Recovery just took them as the chunks' state, so they are
	// made durable before anything is served: one sync(2), rather than an
	// fsync of every file of every chunk. After a clean Close there are
	// none. The marker's removal need not be durable: if a power loss
	// undoes it, it also undid every unsynced write since.
	clean := filepath.Join(s.cfg.Dir, cleanFile)
	_, err = os.Stat(clean)
	wasClean := err == nil
	if err := removeIfExists(clean); err != nil {
		return fmt.Errorf("chunkstore: %w", err)
	}
	if !s.cfg.NoSync && !wasClean {
		syscall.Sync()
	}
	return s.syncDir(s.dir)
}

// cleanFile in Dir marks a store closed with every write synced.
const cleanFile = "CLEAN"

// recoverLocked brings the files of chunk h back to a committed state and
// loads it into c: temp files are removed, a committed journal is applied
// (or dropped if already applied), and data beyond the committed length
// is cut off so that it reads as zeros again. With durable, the result is
// fsynced, so a caller may report it as the outcome of a mutation.
func (s *Store) recoverLocked(h Handle, c *chunk, durable bool) error {
	s.files.invalidate(h) // recovery may remove the data file
	err := s.recoverFiles(h, c, durable)
	var ce *CorruptError
	switch {
	case errors.As(err, &ce):
		s.log.Error("chunk damaged; delete and re-replicate it", "chunk", h.String(), "err", err)
		c.pending, c.bad, c.exists = false, err, true
		return nil
	case err != nil:
		s.log.Error("chunk recovery failed; will retry on next use", "chunk", h.String(), "err", err)
		c.pending = true
		return fmt.Errorf("chunkstore: recover chunk %v: %w", h, err)
	}
	c.pending, c.bad = false, nil
	return nil
}

func (s *Store) recoverFiles(h Handle, c *chunk, durable bool) error {
	for _, suf := range []string{sufMetaTmp, sufJournalTmp} {
		if err := removeIfExists(s.path(h, suf)); err != nil {
			return err
		}
	}
	mb, err := os.ReadFile(s.path(h, sufMeta))
	if errors.Is(err, os.ErrNotExist) {
		// Never committed, or deleted: what is left are orphans.
		c.exists, c.meta = false, meta{}
		for _, suf := range []string{sufJournal, sufData} {
			if err := removeIfExists(s.path(h, suf)); err != nil {
				return err
			}
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("read metadata: %w", err)
	}
	m, format, slot, err := decodeMetaFile(h, mb, s.cfg.ChunkSize)
	if err != nil {
		return &CorruptError{Handle: h, Block: -1, Detail: err.Error()}
	}
	c.exists, c.meta, c.format, c.slot = true, m, format, slot
	replayed, err := s.replayJournal(h, c)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(s.path(h, sufData), os.O_RDWR, 0)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("open data: %w", err)
	}
	if f != nil {
		defer f.Close()
		if fi, err := f.Stat(); err != nil {
			return fmt.Errorf("stat data: %w", err)
		} else if fi.Size() > c.meta.length {
			// INVARIANT: data-file bytes at or beyond length are zero, so
			// Pad and gap-leaving writes need not write them.
			if err := f.Truncate(c.meta.length); err != nil {
				return fmt.Errorf("cut uncommitted data: %w", err)
			}
		}
		if durable {
			if err := s.sync(f); err != nil {
				return fmt.Errorf("sync data: %w", err)
			}
		}
	}
	if durable && c.format == formatVersion && !replayed {
		// The failed step may have been the fsync of this very slot: after
		// a failed fsync the kernel may keep the page (so it reads back
		// fine) without ever writing it. Rewriting the same bytes dirties
		// it again, and a torn rewrite of identical bytes is harmless.
		if err := s.rewriteSlot(h, c); err != nil {
			return err
		}
	}
	if durable {
		if err := s.syncDir(s.dir); err != nil {
			return err
		}
		c.newName = false
	}
	return nil
}

// replayJournal applies a committed journal on top of c.meta if it was
// not applied yet, and reports whether it did. A format-2 journal is
// rewritten in place and stays; a format-1 one is removed once handled.
func (s *Store) replayJournal(h Handle, c *chunk) (bool, error) {
	jb, err := os.ReadFile(s.path(h, sufJournal))
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read journal: %w", err)
	}
	replayed := false
	j, jm, err := decodeJournal(h, jb, s.cfg.ChunkSize)
	switch {
	case err != nil && c.format == formatV1:
		// A format-1 journal was renamed into place only after its fsync,
		// so it is not torn; it rotted. The data file may hold part of it.
		return false, &CorruptError{Handle: h, Block: -1, Detail: "unreadable journal: " + err.Error()}
	case err != nil:
		// A format-2 journal is written in place: one that does not check
		// out is an overwrite torn before its commit, and the data file
		// is patched only after the journal is durable, so it is intact.
		s.log.Info("ignoring torn journal (uncommitted overwrite)", "chunk", h.String(), "err", err)
		return false, nil
	case c.meta.version >= jm.version:
		// Applied already.
	case c.meta.version == j.base:
		s.log.Info("replaying journal", "chunk", h.String(), "version", jm.version)
		if err := s.applyJournal(h, c, j, jm); err != nil {
			return false, err
		}
		replayed = true
	default:
		return false, &CorruptError{Handle: h, Block: -1,
			Detail: fmt.Sprintf("journal for version %d over %d does not follow metadata version %d", jm.version, j.base, c.meta.version)}
	}
	if j.format == formatV1 {
		return replayed, removeIfExists(s.path(h, sufJournal))
	}
	return replayed, nil
}

// applyJournal rewrites the journaled bytes and commits the journaled
// metadata. It is idempotent, so a crash during it is recovered by
// running it again.
func (s *Store) applyJournal(h Handle, c *chunk, j journal, jm meta) error {
	f, err := os.OpenFile(s.path(h, sufData), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("open data: %w", err)
	}
	defer f.Close()
	if _, err := f.WriteAt(j.data, j.off); err != nil {
		return fmt.Errorf("apply journal: %w", err)
	}
	if err := s.sync(f); err != nil {
		return fmt.Errorf("sync data: %w", err)
	}
	if err := s.commitMeta(h, c, jm); err != nil {
		return err
	}
	c.meta = jm
	return nil
}

// Close waits for operations in flight and releases the directory.
func (s *Store) Close() error {
	s.life.Lock()
	defer s.life.Unlock()
	if s.life.closed {
		return nil
	}
	s.life.closed = true
	err := s.markClean()
	return errors.Join(err, s.closeFiles())
}

// markClean writes the clean-shutdown marker unless a chunk awaits
// recovery (whose files may hold unsynced writes). It syncs the chunks
// directory first: a mutation that failed early may have created a file
// whose name is not durable yet, which the next session would not know.
func (s *Store) markClean() error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, c := range s.mu.chunks {
		if c.pending {
			return nil
		}
	}
	if err := s.syncDir(s.dir); err != nil {
		return fmt.Errorf("chunkstore: mark clean shutdown: %w", err)
	}
	f, err := os.Create(filepath.Join(s.cfg.Dir, cleanFile))
	if err != nil {
		return fmt.Errorf("chunkstore: mark clean shutdown: %w", err)
	}
	return f.Close()
}

func (s *Store) closeFiles() error {
	err := s.files.closeAll()
	if s.dirFile != nil {
		err = errors.Join(err, s.dirFile.Close())
	}
	if s.lockFile != nil {
		err = errors.Join(err, s.lockFile.Close()) // closing releases the flock
	}
	return err
}

// ID is the random id the store got when its directory was initialized.
func (s *Store) ID() string { return s.id }

// ChunkSize is the store's chunk size.
func (s *Store) ChunkSize() int64 { return s.cfg.ChunkSize }

// acquire locks chunk h (shared or exclusive) for one operation and runs
// pending recovery first. With create, an entry is made for a new handle.
// The returned release must be called.
func (s *Store) acquire(h Handle, create, shared bool) (*chunk, func(), error) {
	s.life.RLock()
	if s.life.closed {
		s.life.RUnlock()
		return nil, nil, ErrClosed
	}
	s.mu.RLock()
	c := s.mu.chunks[h]
	s.mu.RUnlock()
	if c == nil && create {
		s.mu.Lock()
		if c = s.mu.chunks[h]; c == nil {
			c = &chunk{}
			s.mu.chunks[h] = c
		}
		s.mu.Unlock()
	}
	if c == nil {
		s.life.RUnlock()
		return nil, nil, fmt.Errorf("chunk %v: %w", h, ErrNotFound)
	}
	if shared {
		c.mu.RLock()
		if !c.pending {
			return c, func() { c.mu.RUnlock(); s.life.RUnlock() }, nil
		}
		c.mu.RUnlock()
	}
	// NB: a shared caller that finds recovery pending keeps the exclusive
	// lock for its operation; this is rare and simpler than downgrading.
	c.mu.Lock()
	release := func() { c.mu.Unlock(); s.life.RUnlock() }
	if c.pending {
		if err := s.recoverLocked(h, c, true); err != nil {
			release()
			return nil, nil, err
		}
	}
	return c, release, nil
}

// usable returns why c cannot be read or written, if it cannot.
func usable(h Handle, c *chunk) error {
	switch {
	case c.bad != nil:
		return c.bad
	case !c.exists:
		return fmt.Errorf("chunk %v: %w", h, ErrNotFound)
	}
	return nil
}

// Stat returns the version and length of chunk h.
func (s *Store) Stat(h Handle) (ChunkInfo, error) {
	c, release, err := s.acquire(h, false, true)
	if err != nil {
		return ChunkInfo{}, fmt.Errorf("chunkstore: stat: %w", err)
	}
	defer release()
	if err := usable(h, c); err != nil {
		return ChunkInfo{}, fmt.Errorf("chunkstore: stat: %w", err)
	}
	return ChunkInfo{Handle: h, Version: c.meta.version, Length: c.meta.length}, nil
}

// List returns the readable chunks in handle order, for heartbeats.
// Damaged chunks are left out; Scrub reports them.
func (s *Store) List() ([]ChunkInfo, error) {
	var out []ChunkInfo
	for _, h := range s.handles() {
		info, err := s.Stat(h)
		if errors.Is(err, ErrClosed) {
			return nil, fmt.Errorf("chunkstore: list: %w", err)
		}
		if err == nil {
			out = append(out, info)
		}
	}
	return out, nil
}

func (s *Store) handles() []Handle {
	s.mu.RLock()
	hs := make([]Handle, 0, len(s.mu.chunks))
	for h := range s.mu.chunks {
		hs = append(hs, h)
	}
	s.mu.RUnlock()
	slices.Sort(hs)
	return hs
}

// Delete removes chunk h, damaged or not. Removing the metadata file is
// the commit point; leftover files are orphans that recovery removes.
func (s *Store) Delete(h Handle) error {
	c, release, err := s.acquire(h, false, false)
	if err != nil {
		return fmt.Errorf("chunkstore: delete: %w", err)
	}
	defer release()
	if !c.exists {
		return fmt.Errorf("chunkstore: delete: chunk %v: %w", h, ErrNotFound)
	}
	if err := os.Remove(s.path(h, sufMeta)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("chunkstore: delete chunk %v: %w", h, err)
	}
	// INVARIANT: a re-created chunk gets a new data file, never this one.
	s.files.invalidate(h)
	c.exists, c.meta, c.bad, c.format, c.slot = false, meta{}, nil, 0, 0
	// NB: the directory is synced between the metadata removal and the
	// others so that a crash can never leave metadata without its data.
	err = s.syncDir(s.dir)
	for _, suf := range []string{sufJournal, sufData, sufMetaTmp, sufJournalTmp} {
		err = errors.Join(err, removeIfExists(s.path(h, suf)))
	}
	if err == nil {
		err = s.syncDir(s.dir)
	}
	if err != nil {
		c.pending = true
		return fmt.Errorf("chunkstore: delete chunk %v: clean up: %w", h, err)
	}
	return nil
}

// Usage reports the file system's used and total bytes under Dir (used
// includes space reserved for root, so used/capacity is how full the disk
// looks to the chunk server).
func (s *Store) Usage() (used, capacity int64, err error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(s.cfg.Dir, &st); err != nil {
		return 0, 0, fmt.Errorf("chunkstore: statfs %s: %w", s.cfg.Dir, err)
	}
	capacity = int64(st.Blocks) * int64(st.Bsize)
	return capacity - int64(st.Bavail)*int64(st.Bsize), capacity, nil
}

// dataFile returns chunk h's data file from the cache, and whether this
// call created it; release it with s.files.put. Without create, a missing
// file is nil.
func (s *Store) dataFile(h Handle, create bool) (*openFile, bool, error) {
	return s.files.get(s.path(h, sufData), h, create)
}

func (s *Store) path(h Handle, suffix string) string {
	return filepath.Join(s.dir, h.String()+suffix)
}

func (s *Store) sync(f *os.File) error {
	if !s.cfg.NoSync {
		s.syncs.Add(1)
		if err := f.Sync(); err != nil {
			return err
		}
	}
	s.afterSync(f)
	return nil
}

// syncData is fdatasync: for files whose contents, not names or times,
// changed.
func (s *Store) syncData(f *os.File) error {
	if !s.cfg.NoSync {
		s.syncs.Add(1)
		if err := fdatasync(f); err != nil {
			return err
		}
	}
	s.afterSync(f)
	return nil
}

func (s *Store) afterSync(f *os.File) {
	if s.cfg.Knobs != nil && s.cfg.Knobs.AfterSync != nil {
		s.cfg.Knobs.AfterSync(f)
	}
}

func (s *Store) syncDir(dir string) error {
	if dir == s.dir && s.dirFile != nil {
		if !s.cfg.NoSync {
			s.syncs.Add(1)
			if err := s.dirFile.Sync(); err != nil {
				return fmt.Errorf("sync %s: %w", dir, err)
			}
		}
		s.afterSync(s.dirFile)
		return nil
	}
	if s.cfg.NoSync {
		return nil
	}
	s.syncs.Add(1)
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}

// writeFile creates path with the concatenation of parts and fsyncs it.
// The knobs run at step (halfway through the write) and syncStep.
func (s *Store) writeFile(path string, h Handle, step, syncStep Step, parts ...[]byte) (err error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	if err := s.writeParts(f, h, step, parts...); err != nil {
		return err
	}
	if err := s.step(h, syncStep); err != nil {
		return err
	}
	return s.sync(f)
}

// writeParts writes the concatenation of parts at the start of f. The
// knob for step runs once, halfway through.
func (s *Store) writeParts(f *os.File, h Handle, step Step, parts ...[]byte) error {
	var total int64
	for _, p := range parts {
		total += int64(len(p))
	}
	var off int64
	for _, p := range parts {
		st := Step("")
		if off <= total/2 && total/2 < off+int64(len(p)) {
			st = step
		}
		if err := s.writeAt(f, h, st, p, off, total/2-off); err != nil {
			return err
		}
		off += int64(len(p))
	}
	return nil
}

// writeAt is f.WriteAt with the knob for step run after the first split
// bytes, so an injected failure leaves a torn write as a full disk or a
// kill would.
func (s *Store) writeAt(f *os.File, h Handle, step Step, p []byte, off, split int64) error {
	if s.cfg.Knobs == nil || step == "" {
		if step == StepDataWrite {
			if done, err := s.writeDirect(h, p, off); done || err != nil {
				return err
			}
		}
		_, err := f.WriteAt(p, off)
		return err
	}
	if _, err := f.WriteAt(p[:split], off); err != nil {
		return err
	}
	if err := s.step(h, step); err != nil {
		return err
	}
	_, err := f.WriteAt(p[split:], off+split)
	return err
}

func (s *Store) step(h Handle, st Step) error {
	if st == "" || s.cfg.Knobs == nil || s.cfg.Knobs.BeforeStep == nil {
		return nil
	}
	return s.cfg.Knobs.BeforeStep(h, st)
}

func removeIfExists(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// readFull reads len(p) bytes at off; bytes past the end of the file (a
// sparse tail or a padded chunk) read as zeros.
func readFull(f *os.File, p []byte, off int64) error {
	n, err := f.ReadAt(p, off)
	if err == io.EOF {
		clear(p[n:])
		return nil
	}
	return err
}
