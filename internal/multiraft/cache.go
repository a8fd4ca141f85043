package multiraft

import (
	"bytes"
	"hash/maphash"
	"sync"
	"sync/atomic"

	"github.com/govfs/govfs/internal/engine"
)

// stateCache remembers recently read or written values of one group's
// state range, so that applying an entry does not pay a Pebble point read
// for the hot keys every command touches (the parent directory's inode,
// the client's dedup record, the inode allocator), and so that reads
// served by this replica (stat of a recently used inode) skip Pebble too.
// In govfs bench meta, point reads were a third of a follower's CPU.
//
// INVARIANTS:
//   - Every write to the group's state range goes through applyView
//     (entries) or clears the cache (snapshot install). A group is applied
//     by one goroutine at a time.
//   - The applier bumps gen after committing a batch and before folding
//     the batch's writes into the cache, and folds them before publishing
//     the applied index. So a reader that waited for index i sees, in the
//     cache, every write up to i.
//   - A reader that missed fills the cache only if gen did not move
//     between its Pebble read and its fill (checked under the shard lock):
//     a fill can never overwrite a newer value with an older one, because
//     any apply that committed in between has bumped gen, and an apply
//     that commits after the fill folds its writes over it.
//
// Absent keys are cached too, as a nil value (a key read and not found,
// or deleted): a directory being made is looked for, absent, by its
// lease's grant (route check, then before and after the grant), by the
// create's apply and by its reservation check, each a Pebble read
// through every level (a quarter of a minister's CPU under 16 processes
// making directories). Absence is also remembered for whole ranges a
// scan found empty (below). The cache is bounded in entries and in
// bytes (keys and values): counted in entries only, 65,536 values of
// 64 KiB of inline data would have held 4 GiB per group.
type stateCache struct {
	gen      atomic.Uint64
	seed     maphash.Seed
	shards   [16]cacheShard
	max      int // entries per shard
	maxBytes int // bytes per shard

	// empty remembers key ranges a scan found empty, by their exact
	// bounds: every command asks whether any subtree is frozen (a scan of
	// the move markers, namespace.AnyFrozen), and that scan, finding
	// nothing, was a tenth of a minister's CPU. Same rules as the values:
	// the applier forgets a range when it commits a write into it, and a
	// reader fills one only if gen did not move since its Pebble scan.
	emptyMu sync.Mutex
	empty   map[scanRange]struct{}
}

// scanRange is a scan's bounds (lower inclusive, upper exclusive).
type scanRange struct{ lower, upper string }

func (r scanRange) contains(k string) bool { return k >= r.lower && k < r.upper }

// memoRange is the memo's key for a scan, if it can have one: a scan
// without an upper bound (to the end of the state range) is not
// remembered, so contains never has to mean "unbounded".
func memoRange(lower, upper []byte) (scanRange, bool) {
	if len(upper) == 0 {
		return scanRange{}, false
	}
	return scanRange{string(lower), string(upper)}, true
}

// maxEmptyRanges bounds the memo; the state machines scan a handful of
// fixed ranges on every command, everything else is rare.
const maxEmptyRanges = 64

type cacheShard struct {
	mu    sync.Mutex
	m     map[string][]byte
	bytes int
}

func newStateCache(max, maxBytes int) *stateCache {
	c := &stateCache{seed: maphash.MakeSeed(), max: max/16 + 1, maxBytes: maxBytes/16 + 1}
	for i := range c.shards {
		c.shards[i].m = map[string][]byte{}
	}
	return c
}

func (c *stateCache) shard(k string) *cacheShard {
	return &c.shards[maphash.String(c.seed, k)%uint64(len(c.shards))]
}

// get returns k's cached value and whether it is cached; a cached nil
// value means k is known to be absent.
func (c *stateCache) get(k string) ([]byte, bool) {
	s := c.shard(k)
	s.mu.Lock()
	v, ok := s.m[k]
	s.mu.Unlock()
	return v, ok
}

// set stores k's value, nil for absent; a value too big for the shard
// is forgotten instead (an older one must not stay).
func (s *cacheShard) setLocked(k string, v []byte, max, maxBytes int) {
	if old, ok := s.m[k]; ok {
		s.bytes -= len(k) + len(old)
		delete(s.m, k)
	}
	size := len(k) + len(v)
	if size > maxBytes/4 {
		return
	}
	if len(s.m) >= max || s.bytes+size > maxBytes {
		// Bounded the simple way: start over. Hot keys come back at once.
		clear(s.m)
		s.bytes = 0
	}
	s.m[k] = v
	s.bytes += size
}

func (c *stateCache) set(k string, v []byte) {
	s := c.shard(k)
	s.mu.Lock()
	s.setLocked(k, v, c.max, c.maxBytes)
	s.mu.Unlock()
}

// fill caches a value a reader got from Pebble, unless an apply committed
// since the reader sampled gen.
func (c *stateCache) fill(k string, v []byte, gen uint64) {
	s := c.shard(k)
	s.mu.Lock()
	if c.gen.Load() == gen {
		s.setLocked(k, v, c.max, c.maxBytes)
	}
	s.mu.Unlock()
}

// knownEmpty says whether a scan of r is known to find nothing.
func (c *stateCache) knownEmpty(r scanRange) bool {
	c.emptyMu.Lock()
	_, ok := c.empty[r]
	c.emptyMu.Unlock()
	return ok
}

// setEmptyLocked remembers r as empty; the caller holds emptyMu.
func (c *stateCache) setEmptyLocked(r scanRange) {
	if c.empty == nil || len(c.empty) >= maxEmptyRanges {
		c.empty = map[scanRange]struct{}{}
	}
	c.empty[r] = struct{}{}
}

// fillEmpty remembers r as empty for a reader that scanned it, unless an
// apply committed since the reader sampled gen.
func (c *stateCache) fillEmpty(r scanRange, gen uint64) {
	c.emptyMu.Lock()
	if c.gen.Load() == gen {
		c.setEmptyLocked(r)
	}
	c.emptyMu.Unlock()
}

func (c *stateCache) clear() {
	c.gen.Add(1)
	c.emptyMu.Lock()
	c.empty = nil
	c.emptyMu.Unlock()
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		clear(s.m)
		s.bytes = 0
		s.mu.Unlock()
	}
}

// Reader returns a reader of the group's committed state that goes
// through the cache: r is the store's view of the state range.
func (c *stateCache) Reader(r engine.Reader) engine.Reader { return cachedReader{c: c, r: r} }

type cachedReader struct {
	c *stateCache
	r engine.Reader
}

func (cr cachedReader) Get(key []byte) ([]byte, error) {
	if v, ok := cr.c.get(string(key)); ok {
		return bytes.Clone(v), nil
	}
	gen := cr.c.gen.Load()
	v, err := cr.r.Get(key)
	if err == nil {
		cr.c.fill(string(key), bytes.Clone(v), gen) // nil: absent
	}
	return v, err
}

func (cr cachedReader) Scan(lower, upper []byte, fn func(k, v []byte) bool) error {
	rg, ok := memoRange(lower, upper)
	if !ok {
		return cr.r.Scan(lower, upper, fn)
	}
	if cr.c.knownEmpty(rg) {
		return nil
	}
	gen := cr.c.gen.Load()
	found := false
	err := cr.r.Scan(lower, upper, func(k, v []byte) bool {
		found = true
		return fn(k, v)
	})
	if err == nil && !found {
		cr.c.fillEmpty(rg, gen)
	}
	return err
}

// applyView is the ReadWriter a state machine applies entries through:
// the group's prefixed view of the apply batch, read through the cache.
type applyView struct {
	rw      engine.Prefixed
	c       *stateCache
	pending map[string][]byte // writes of this batch; nil value = deleted
	dropAll bool              // a range delete happened: drop the cache after commit
	// scanned: the ranges this batch scanned, and whether the batch has
	// set a key in each (then the batch's own view of it is not empty,
	// whatever the memo says about the committed state).
	scanned map[scanRange]*scannedRange
}

// maxScannedPerBatch bounds the ranges one apply batch tracks for the
// memo: each first scan of a range looks through the batch's writes, and
// each write through the ranges tracked, so a batch of 1,000 unlinks
// (each scanning its file's chunk and inline ranges) spent a fifth of
// the minister's CPU in those loops during rm -rf (pprof: applyView.Scan,
// mapIterNext). The fixed ranges the memo is for are scanned by the
// batch's first commands; later ranges are scanned through.
const maxScannedPerBatch = 32

type scannedRange struct {
	written bool // the batch set a key in the range
	empty   bool // a scan through the batch found nothing
}

func newApplyView(b *engine.Batch, prefix []byte, c *stateCache) *applyView {
	return &applyView{rw: engine.Prefixed{RW: b, Prefix: prefix}, c: c, pending: map[string][]byte{}}
}

func (v *applyView) Get(key []byte) ([]byte, error) {
	if !v.dropAll {
		if val, ok := v.pending[string(key)]; ok {
			if val == nil {
				return nil, nil
			}
			return bytes.Clone(val), nil
		}
		if val, ok := v.c.get(string(key)); ok {
			return bytes.Clone(val), nil
		}
	}
	val, err := v.rw.Get(key)
	if err == nil && !v.dropAll {
		// The applier is the only writer: what it reads (not written by
		// this batch: pending) is current, absent (nil) included.
		v.c.set(string(key), bytes.Clone(val))
	}
	return val, err
}

func (v *applyView) Scan(lower, upper []byte, fn func(k, val []byte) bool) error {
	rg, ok := memoRange(lower, upper)
	if v.dropAll || !ok {
		return v.rw.Scan(lower, upper, fn)
	}
	sr := v.scanned[rg]
	if sr == nil && len(v.scanned) >= maxScannedPerBatch {
		// Not tracked (nor taken from the memo): see maxScannedPerBatch.
		return v.rw.Scan(lower, upper, fn)
	}
	if sr == nil {
		// First scan of rg in this batch: has the batch written into it
		// already? (Once per range per batch; later sets are caught by
		// Set.)
		sr = &scannedRange{}
		for k, val := range v.pending {
			if val != nil && rg.contains(k) {
				sr.written = true
				break
			}
		}
		if v.scanned == nil {
			v.scanned = map[scanRange]*scannedRange{}
		}
		v.scanned[rg] = sr
	}
	if !sr.written && v.c.knownEmpty(rg) {
		return nil
	}
	found := false
	err := v.rw.Scan(lower, upper, func(k, val []byte) bool {
		found = true
		return fn(k, val)
	})
	if err == nil && !found && !sr.written {
		// Remembered once the batch is committed (committed), so that
		// readers of the state before it do not take it for empty early
		// (the batch may delete a key they still see).
		sr.empty = true
	}
	return err
}

func (v *applyView) Set(key, value []byte) error {
	val := bytes.Clone(value)
	if val == nil {
		val = []byte{}
	}
	v.pending[string(key)] = val
	for rg, sr := range v.scanned {
		if rg.contains(string(key)) {
			sr.written = true
		}
	}
	return v.rw.Set(key, value)
}

func (v *applyView) Delete(key []byte) error {
	v.pending[string(key)] = nil
	return v.rw.Delete(key)
}

func (v *applyView) DeleteRange(lower, upper []byte) error {
	v.dropAll = true
	return v.rw.DeleteRange(lower, upper)
}

// committed folds the batch's writes into the cache once the batch is
// committed to Pebble, before the applied index is published.
func (v *applyView) committed() {
	if v.dropAll {
		v.c.clear()
		return
	}
	v.c.gen.Add(1)
	for k, val := range v.pending {
		v.c.set(k, val)
	}
	v.c.emptyMu.Lock()
	// A set key makes every remembered range holding it non-empty.
	for rg := range v.c.empty {
		for k, val := range v.pending {
			if val != nil && rg.contains(k) {
				delete(v.c.empty, rg)
				break
			}
		}
	}
	for rg, sr := range v.scanned {
		if sr.empty && !sr.written {
			v.c.setEmptyLocked(rg)
		}
	}
	v.c.emptyMu.Unlock()
}
