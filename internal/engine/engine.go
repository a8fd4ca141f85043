package engine

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/bloom"
	"github.com/cockroachdb/pebble/vfs"
)

// Reader reads keys. Get returns (nil, nil) when the key is absent; the
// returned slice is owned by the caller.
type Reader interface {
	Get(key []byte) ([]byte, error)
	// Scan calls fn for each key in [lower, upper) in order until fn
	// returns false. k and v are only valid during the call.
	Scan(lower, upper []byte, fn func(k, v []byte) bool) error
}

// ReadWriter is a Reader that can also change keys (a batch).
type ReadWriter interface {
	Reader
	Set(key, value []byte) error
	Delete(key []byte) error
	DeleteRange(lower, upper []byte) error
}

// Options configures Open.
type Options struct {
	// InMemory keeps everything in memory (tests only).
	InMemory bool
	// CacheBytes is the block cache's size (0: 128 MiB).
	CacheBytes int64
}

// Engine is a node's Pebble store.
type Engine struct {
	db *pebble.DB
	// stalls counts write stalls and their time (Stats).
	stalls *stallCounter
}

type stallCounter struct {
	n, ns atomic.Int64
	began atomic.Int64 // UnixNano of the stall under way, 0 if none
}

// Stats are figures an operator alerts on (govfs_pebble_* metrics).
type Stats struct {
	// DiskBytes is the space the store uses on disk (tables, WAL, ...).
	DiskBytes uint64
	// Compactions counts compactions since the store was opened;
	// CompactionDebt estimates the bytes left to compact.
	Compactions    int64
	CompactionDebt uint64
	// WriteStalls counts the times Pebble held writes back (too many
	// memtables or level-0 files), WriteStallTime their total length.
	WriteStalls    int64
	WriteStallTime time.Duration
	// ReadAmp is the read amplification (sub-levels to look in).
	ReadAmp int
}

// Stats reads the store's figures.
func (e *Engine) Stats() Stats {
	m := e.db.Metrics()
	st := Stats{DiskBytes: m.DiskSpaceUsage(), Compactions: m.Compact.Count, CompactionDebt: m.Compact.EstimatedDebt,
		WriteStalls: e.stalls.n.Load(), WriteStallTime: time.Duration(e.stalls.ns.Load()), ReadAmp: m.ReadAmp()}
	if b := e.stalls.began.Load(); b != 0 {
		st.WriteStallTime += time.Since(time.Unix(0, b))
	}
	return st
}

// Open opens (creating if needed) the store in dir.
func Open(dir string, o Options) (*Engine, error) {
	// NB: a modest memtable. Metadata applies are dominated by point
	// reads, and a Get seeks the memtable skiplist: a 64 MiB arena made
	// that seek a chain of cache misses (40% of a follower's CPU in govfs
	// bench meta). Older keys are found through bloom filters and the
	// block cache instead.
	size := o.CacheBytes
	if size <= 0 {
		size = 128 << 20
	}
	cache := pebble.NewCache(size)
	defer cache.Unref()
	opts := &pebble.Options{
		Logger:       quietLogger{},
		MemTableSize: 8 << 20,
		Cache:        cache,
	}
	opts.Levels = make([]pebble.LevelOptions, 7)
	for i := range opts.Levels {
		opts.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
		opts.Levels[i].FilterType = pebble.TableFilter
	}
	if o.InMemory {
		opts.FS = vfs.NewMem()
	}
	stalls := &stallCounter{}
	opts.EventListener = &pebble.EventListener{
		WriteStallBegin: func(pebble.WriteStallBeginInfo) {
			stalls.n.Add(1)
			stalls.began.Store(time.Now().UnixNano())
		},
		WriteStallEnd: func() {
			if b := stalls.began.Swap(0); b != 0 {
				stalls.ns.Add(time.Now().UnixNano() - b)
			}
		},
	}
	db, err := pebble.Open(dir, opts)
	if err != nil {
		return nil, fmt.Errorf("engine: open %s: %w", dir, err)
	}
	return &Engine{db: db, stalls: stalls}, nil
}

// Close closes the store.
func (e *Engine) Close() error { return e.db.Close() }

// Get implements Reader.
func (e *Engine) Get(key []byte) ([]byte, error) { return get(e.db, key) }

// Scan implements Reader.
func (e *Engine) Scan(lower, upper []byte, fn func(k, v []byte) bool) error {
	return scan(e.db, lower, upper, fn)
}

// NewBatch returns an indexed batch: reads through it see its own writes.
func (e *Engine) NewBatch() *Batch { return &Batch{b: e.db.NewIndexedBatch()} }

// NewWriteBatch returns a write-only batch (cheaper; Get/Scan read the
// committed store, not the batch).
func (e *Engine) NewWriteBatch() *Batch { return &Batch{b: e.db.NewBatch(), writeOnly: true, db: e.db} }

// NewSnapshot returns a consistent point-in-time view. Close it when done.
func (e *Engine) NewSnapshot() *Snapshot { return &Snapshot{s: e.db.NewSnapshot()} }

// Batch is a set of writes committed atomically.
type Batch struct {
	b         *pebble.Batch
	writeOnly bool
	db        *pebble.DB
}

func (b *Batch) Get(key []byte) ([]byte, error) {
	if b.writeOnly {
		return get(b.db, key)
	}
	return get(b.b, key)
}

func (b *Batch) Scan(lower, upper []byte, fn func(k, v []byte) bool) error {
	if b.writeOnly {
		return scan(b.db, lower, upper, fn)
	}
	return scan(b.b, lower, upper, fn)
}

func (b *Batch) Set(key, value []byte) error { return b.b.Set(key, value, nil) }
func (b *Batch) Delete(key []byte) error     { return b.b.Delete(key, nil) }
func (b *Batch) DeleteRange(lower, upper []byte) error {
	return b.b.DeleteRange(lower, upper, nil)
}

// Empty reports whether the batch holds no writes.
func (b *Batch) Empty() bool { return b.b.Empty() }

// Len is the size in bytes of the batch representation.
func (b *Batch) Len() int { return b.b.Len() }

// Commit applies the batch; with sync it is durable (fsync of the WAL,
// which also covers every earlier unsynced commit) when Commit returns.
func (b *Batch) Commit(sync bool) error {
	opt := pebble.NoSync
	if sync {
		opt = pebble.Sync
	}
	if err := b.b.Commit(opt); err != nil {
		return fmt.Errorf("engine: commit batch: %w", err)
	}
	return nil
}

// Close releases the batch (after Commit or to abandon it).
func (b *Batch) Close() { _ = b.b.Close() }

// Snapshot is a read-only point-in-time view.
type Snapshot struct{ s *pebble.Snapshot }

func (s *Snapshot) Get(key []byte) ([]byte, error) { return get(s.s, key) }
func (s *Snapshot) Scan(lower, upper []byte, fn func(k, v []byte) bool) error {
	return scan(s.s, lower, upper, fn)
}
func (s *Snapshot) Close() { _ = s.s.Close() }

func get(r interface {
	Get(key []byte) ([]byte, io.Closer, error)
}, key []byte) ([]byte, error) {
	v, c, err := r.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("engine: get: %w", err)
	}
	out := bytes.Clone(v)
	if out == nil {
		out = []byte{}
	}
	_ = c.Close()
	return out, nil
}

func scan(r interface {
	NewIter(o *pebble.IterOptions) (*pebble.Iterator, error)
}, lower, upper []byte, fn func(k, v []byte) bool) error {
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return fmt.Errorf("engine: iterate: %w", err)
	}
	for ok := it.First(); ok; ok = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			_ = it.Close()
			return fmt.Errorf("engine: iterate: %w", err)
		}
		if !fn(it.Key(), v) {
			break
		}
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("engine: iterate: %w", err)
	}
	return nil
}

type quietLogger struct{}

func (quietLogger) Infof(string, ...interface{})  {}
func (quietLogger) Errorf(string, ...interface{}) {}
func (quietLogger) Fatalf(format string, args ...interface{}) {
	panic(fmt.Sprintf("pebble: "+format, args...))
}

// ---- keys ----

// GroupPrefix is the prefix of every key of group g.
func GroupPrefix(g uint64) []byte {
	k := make([]byte, 9, 32)
	k[0] = 'g'
	binary.BigEndian.PutUint64(k[1:], g)
	return k
}

// GroupKey returns GroupPrefix(g) + kind.
func GroupKey(g uint64, kind byte) []byte { return append(GroupPrefix(g), kind) }

// LogKey is the key of raft log entry idx of group g.
func LogKey(g, idx uint64) []byte {
	return binary.BigEndian.AppendUint64(GroupKey(g, 'l'), idx)
}

// StatePrefix is the prefix of group g's state machine keys.
func StatePrefix(g uint64) []byte { return GroupKey(g, 's') }

// PrefixEnd returns the smallest key greater than every key with prefix p.
func PrefixEnd(p []byte) []byte {
	end := bytes.Clone(p)
	for i := len(end) - 1; i >= 0; i-- {
		end[i]++
		if end[i] != 0 {
			return end[:i+1]
		}
	}
	return nil
}

// Prefixed is a view of rw in which every key is transparently prefixed,
// so a state machine sees only its own key space.
type Prefixed struct {
	RW     ReadWriter
	Prefix []byte
}

func (p Prefixed) k(key []byte) []byte {
	out := make([]byte, 0, len(p.Prefix)+len(key))
	return append(append(out, p.Prefix...), key...)
}

func (p Prefixed) Get(key []byte) ([]byte, error) { return p.RW.Get(p.k(key)) }
func (p Prefixed) Scan(lower, upper []byte, fn func(k, v []byte) bool) error {
	var up []byte
	if upper == nil {
		up = PrefixEnd(p.Prefix)
	} else {
		up = p.k(upper)
	}
	n := len(p.Prefix)
	return p.RW.Scan(p.k(lower), up, func(k, v []byte) bool { return fn(k[n:], v) })
}
func (p Prefixed) Set(key, value []byte) error { return p.RW.Set(p.k(key), value) }
func (p Prefixed) Delete(key []byte) error     { return p.RW.Delete(p.k(key)) }
func (p Prefixed) DeleteRange(lower, upper []byte) error {
	return p.RW.DeleteRange(p.k(lower), p.k(upper))
}

// ReadOnly adapts a Reader to ReadWriter for code paths that must not
// write (queries); writes fail.
type ReadOnly struct{ Reader }

var errReadOnly = errors.New("engine: write on a read-only view")

func (ReadOnly) Set(key, value []byte) error           { return errReadOnly }
func (ReadOnly) Delete(key []byte) error               { return errReadOnly }
func (ReadOnly) DeleteRange(lower, upper []byte) error { return errReadOnly }
