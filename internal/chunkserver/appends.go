package chunkserver

import "sync"

// appendsPerChunk bounds how many recent append request ids a server
// remembers per chunk. An appender retries within seconds, long before
// this many other appends to the same chunk have happened.
const appendsPerChunk = 4096

// appendTable remembers, per chunk, the offsets of recent appends by
// request id, so a retried append gets its first offset back instead of
// a second copy. Every member keeps it (the primary on ordering, the
// others on replicating), so a new primary still knows. It is in memory:
// a retry across a restart of every member of the group appends again.
type appendTable struct {
	mu sync.Mutex
	m  map[uint64]*chunkAppends
}

type chunkAppends struct {
	offsets map[uint64]int64
	order   []uint64 // ids oldest first, for eviction
}

func (t *appendTable) note(h, id uint64, off int64) {
	if id == 0 {
		return
	}
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
	c.order = append(c.order, id)
	if len(c.order) > appendsPerChunk {
		delete(c.offsets, c.order[0])
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

// forget drops a chunk's entries (the chunk was replaced or deleted).
func (t *appendTable) forget(h uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.m, h)
}
