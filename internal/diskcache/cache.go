// Package diskcache is a mount's cache on local disk (`govfs mount
// --cache-dir`, AFS-style): blocks of files as they were read, named by
// inode, inode version and block, so a block is only ever used for the
// version it was read at; and journals of writes the mount has accepted
// but not yet pushed to the cluster, so that a crash of the mount loses
// none of them: the next mount on the directory commits each journal or,
// when the file changed meanwhile, reports it.
//
// Crash safety: a block is written to a temporary file, fsynced and
// renamed into place, and carries a CRC32C that is checked on every read;
// a torn or damaged block is a miss and is deleted. Journals are written
// with pwrite as writes arrive, without fsync: they survive a crash of
// the mount process (the kernel keeps the pages), not of the machine
// (docs/fuse.md, "Client cache").
package diskcache

import (
	"container/list"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/govfs/govfs/internal/ids"
)

// BlockSize is the unit of the read cache.
const BlockSize = 1 << 20

// DefaultLimit bounds the bytes of cached blocks.
const DefaultLimit = 1 << 30

const (
	idFile     = "CLUSTER"
	lockFile   = "LOCK"
	blocksDir  = "blocks"
	dirtyDir   = "dirty"
	lostDir    = "lost"
	blockMagic = 0x67766263 // "gvbc"
	blockHdr   = 16         // magic, length, crc32c, reserved
	// pending bounds the blocks queued for writing; more are dropped.
	pending = 64
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Cache is one mount's cache directory.
type Cache struct {
	dir   string
	limit int64
	log   *slog.Logger
	// lock is held (flock) while the cache is open: one mount per
	// directory, or one would take the other's live journals for a
	// crash's leftovers.
	lock *os.File

	mu      sync.Mutex
	lru     *list.List // of *entry, most recent first
	entries map[key]*list.Element
	byIno   map[ids.Ino]map[key]bool
	used    int64
	// inflight holds blocks queued for writing: served from memory.
	inflight map[key][]byte
	queue    chan job
	done     chan struct{}
	closed   bool
	// Hits and Misses count block lookups.
	hits, misses int64
}

type key struct {
	ino     ids.Ino
	version uint64
	block   int64
}

type entry struct {
	k    key
	size int64
}

type job struct {
	k    key
	data []byte
}

func (k key) name() string {
	return fmt.Sprintf("%d-%d-%d", uint64(k.ino), k.version, k.block)
}

func parseKey(name string) (key, bool) {
	parts := strings.Split(name, "-")
	if len(parts) != 3 {
		return key{}, false
	}
	ino, err1 := strconv.ParseUint(parts[0], 10, 64)
	ver, err2 := strconv.ParseUint(parts[1], 10, 64)
	blk, err3 := strconv.ParseInt(parts[2], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || blk < 0 {
		return key{}, false
	}
	return key{ids.Ino(ino), ver, blk}, true
}

// Open opens (creating if needed) the cache directory dir of the cluster
// clusterID, keeping at most limit bytes of blocks (DefaultLimit if 0).
// A directory of another cluster is refused: its journals belong there.
func Open(dir, clusterID string, limit int64, log *slog.Logger) (*Cache, error) {
	if limit <= 0 {
		limit = DefaultLimit
	}
	if log == nil {
		log = slog.Default()
	}
	for _, d := range []string{dir, filepath.Join(dir, blocksDir), filepath.Join(dir, dirtyDir), filepath.Join(dir, lostDir)} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("cache dir: %w", err)
		}
	}
	lock, err := os.OpenFile(filepath.Join(dir, lockFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("cache dir: %w", err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lock.Close()
		return nil, fmt.Errorf("cache dir %s is in use by another mount (%w): give each mount its own --cache-dir", dir, err)
	}
	ok := false
	defer func() {
		if !ok {
			lock.Close()
		}
	}()
	idPath := filepath.Join(dir, idFile)
	switch b, err := os.ReadFile(idPath); {
	case errors.Is(err, fs.ErrNotExist):
		if err := writeFileSync(idPath, []byte(clusterID+"\n")); err != nil {
			return nil, fmt.Errorf("cache dir: %w", err)
		}
	case err != nil:
		return nil, fmt.Errorf("cache dir: %w", err)
	case strings.TrimSpace(string(b)) != clusterID:
		return nil, fmt.Errorf("cache dir %s belongs to cluster %s, not %s: use another --cache-dir (its unpushed writes, if any, belong to that cluster)",
			dir, strings.TrimSpace(string(b)), clusterID)
	}
	c := &Cache{dir: dir, limit: limit, log: log, lock: lock, lru: list.New(), entries: map[key]*list.Element{},
		byIno: map[ids.Ino]map[key]bool{}, inflight: map[key][]byte{}, queue: make(chan job, pending), done: make(chan struct{})}
	if err := c.load(); err != nil {
		return nil, err
	}
	go c.writer()
	ok = true
	return c, nil
}

// load indexes the blocks on disk, oldest use last, and removes
// temporary files a crash left.
func (c *Cache) load() error {
	des, err := os.ReadDir(filepath.Join(c.dir, blocksDir))
	if err != nil {
		return fmt.Errorf("cache dir: %w", err)
	}
	type found struct {
		k     key
		size  int64
		mtime int64
	}
	var fs []found
	for _, de := range des {
		p := filepath.Join(c.dir, blocksDir, de.Name())
		k, ok := parseKey(de.Name())
		if !ok {
			_ = os.Remove(p) // a temporary file or a stranger
			continue
		}
		info, err := de.Info()
		if err != nil {
			continue
		}
		fs = append(fs, found{k, info.Size(), info.ModTime().UnixNano()})
	}
	sort.Slice(fs, func(i, j int) bool { return fs[i].mtime > fs[j].mtime })
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, f := range fs {
		c.addLocked(f.k, f.size, false)
	}
	c.evictLocked()
	return nil
}

func (c *Cache) addLocked(k key, size int64, front bool) {
	if el, ok := c.entries[k]; ok {
		c.used -= el.Value.(*entry).size
		c.lru.Remove(el)
	}
	e := &entry{k: k, size: size}
	if front {
		c.entries[k] = c.lru.PushFront(e)
	} else {
		c.entries[k] = c.lru.PushBack(e)
	}
	if c.byIno[k.ino] == nil {
		c.byIno[k.ino] = map[key]bool{}
	}
	c.byIno[k.ino][k] = true
	c.used += size
}

func (c *Cache) removeLocked(k key) {
	if el, ok := c.entries[k]; ok {
		c.used -= el.Value.(*entry).size
		c.lru.Remove(el)
		delete(c.entries, k)
	}
	if m := c.byIno[k.ino]; m != nil {
		delete(m, k)
		if len(m) == 0 {
			delete(c.byIno, k.ino)
		}
	}
	_ = os.Remove(c.blockPath(k))
}

func (c *Cache) evictLocked() {
	for c.used > c.limit && c.lru.Len() > 0 {
		c.removeLocked(c.lru.Back().Value.(*entry).k)
	}
}

func (c *Cache) blockPath(k key) string { return filepath.Join(c.dir, blocksDir, k.name()) }

// Get returns block blk of version ver of ino, if cached and intact.
func (c *Cache) Get(ino ids.Ino, ver uint64, blk int64) ([]byte, bool) {
	k := key{ino, ver, blk}
	c.mu.Lock()
	if b, ok := c.inflight[k]; ok {
		c.hits++
		c.mu.Unlock()
		return b, true
	}
	el, ok := c.entries[k]
	if !ok {
		c.misses++
		c.mu.Unlock()
		return nil, false
	}
	c.lru.MoveToFront(el)
	c.mu.Unlock()
	b, err := readBlock(c.blockPath(k))
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			c.log.Warn("client cache: dropping a damaged block", slog.String("block", k.name()), slog.Any("err", err))
		}
		c.removeLocked(k)
		c.misses++
		return nil, false
	}
	c.hits++
	return b, true
}

// Put caches data as block blk of version ver of ino, in the
// background; when the writer is behind, the block is not cached.
func (c *Cache) Put(ino ids.Ino, ver uint64, blk int64, data []byte) {
	k := key{ino, ver, blk}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || int64(len(data)) > BlockSize {
		return
	}
	if _, ok := c.entries[k]; ok {
		return
	}
	if _, ok := c.inflight[k]; ok {
		return
	}
	d := append([]byte(nil), data...)
	select {
	case c.queue <- job{k, d}:
		c.inflight[k] = d
	default:
	}
}

// Forget drops every cached block of ino (this mount changed it).
func (c *Cache) Forget(ino ids.Ino) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k := range c.byIno[ino] {
		c.removeLocked(k)
	}
	for k := range c.inflight {
		if k.ino == ino {
			delete(c.inflight, k) // the writer sees it gone and skips it
		}
	}
}

// Stats returns the hits and misses of Get so far.
func (c *Cache) Stats() (hits, misses int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hits, c.misses
}

func (c *Cache) writer() {
	defer close(c.done)
	for j := range c.queue {
		c.mu.Lock()
		_, still := c.inflight[j.k]
		c.mu.Unlock()
		if !still {
			continue
		}
		err := writeBlock(c.blockPath(j.k), j.data)
		c.mu.Lock()
		if _, still := c.inflight[j.k]; still {
			delete(c.inflight, j.k)
			if err == nil {
				c.addLocked(j.k, int64(len(j.data))+blockHdr, true)
				c.evictLocked()
			}
		} else if err == nil {
			_ = os.Remove(c.blockPath(j.k)) // forgotten while written
		}
		c.mu.Unlock()
		if err != nil {
			c.log.Warn("client cache: writing a block failed", slog.String("block", j.k.name()), slog.Any("err", err))
		}
	}
}

// Close waits for queued blocks to be written.
func (c *Cache) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	close(c.queue)
	c.mu.Unlock()
	<-c.done
	return c.lock.Close()
}

// writeBlock writes a block file crash-safely: temp, fsync, rename.
func writeBlock(path string, data []byte) error {
	b := make([]byte, blockHdr+len(data))
	binary.LittleEndian.PutUint32(b[0:], blockMagic)
	binary.LittleEndian.PutUint32(b[4:], uint32(len(data)))
	binary.LittleEndian.PutUint32(b[8:], crc32.Checksum(data, castagnoli))
	copy(b[blockHdr:], data)
	return writeFileSync(path, b)
}

func readBlock(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(b) < blockHdr || binary.LittleEndian.Uint32(b[0:]) != blockMagic {
		return nil, errors.New("not a cache block")
	}
	n := binary.LittleEndian.Uint32(b[4:])
	data := b[blockHdr:]
	if uint32(len(data)) != n || crc32.Checksum(data, castagnoli) != binary.LittleEndian.Uint32(b[8:]) {
		return nil, errors.New("checksum mismatch")
	}
	return data, nil
}

// writeFileSync writes path through a temporary file, fsynced and
// renamed into place, so path is either absent, old or whole.
func writeFileSync(path string, b []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-")
	if err != nil {
		return err
	}
	_, err = tmp.Write(b)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
	}
	return err
}
