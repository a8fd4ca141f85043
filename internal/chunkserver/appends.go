package chunkserver

import (
	"sync"
	"time"
)

// Bounds of the append-id memory: an appender retries within seconds, so
// ids older than appendMemory, or beyond appendsPerChunk newer ones, are
// forgotten.
const (
	appendsPerChunk = 4096
	appendMemory    = 10 * time.Minute
)

// appendTable remembers, per chunk, the offsets of recent appends by
// request id, so a retried append gets its first offset back instead of
// a second copy. Every member keeps it (the primary on ordering, the
// others on replicating), so a new primary still knows. It is in memory:
// a retry across a restart of every member of the group, or to a member
// that got the chunk by install, appends again.
type appendTable struct {
	mu sync.Mutex
	m  map[uint64]*chunkAppends
}

type chunkAppends struct {
	offsets map[uint64]int64
	order   []appendID // oldest first, for eviction
}

type appendID struct {
	id uint64
	at time.Time
}

func (t *appendTable) note(h, id uint64, off int64) {
	if id == 0 {
		return
	}
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[uint64]*chunkAppends{}
	}
	c := t.m[h]
	if c == nil {
		c = &chunkAppends{offsets: map[uint64]int64{}}
		t.m[h] = c
	}
	if _, ok := c.offsets[id]; ok {
		return
	}
	c.offsets[id] = off
	c.order = append(c.order, appendID{id, now})
	c.expire(now)
}

// expire drops ids beyond the bounds.
func (c *chunkAppends) expire(now time.Time) {
	for len(c.order) > 0 && (len(c.order) > appendsPerChunk || now.Sub(c.order[0].at) > appendMemory) {
		delete(c.offsets, c.order[0].id)
		c.order = c.order[1:]
	}
}

func (t *appendTable) lookup(h, id uint64) (int64, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.m[h]
	if c == nil {
		return 0, false
	}
	off, ok := c.offsets[id]
	return off, ok
}

// forget drops a chunk's entries (the chunk was deleted).
func (t *appendTable) forget(h uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.m, h)
}

// sweep expires old ids of every chunk and drops empty tables, so chunks
// no longer appended to cost nothing.
func (t *appendTable) sweep(now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for h, c := range t.m {
		c.expire(now)
		if len(c.order) == 0 {
			delete(t.m, h)
		}
	}
}
