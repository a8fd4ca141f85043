package client

import (
	"sync"

	"github.com/govfs/govfs/internal/ids"
)

// groupQueues holds, per ministry group, requests waiting to go to its
// minister in batches, and counts the loops sending them: a request
// asked while maxSenders are on their way goes with every other one
// asked meanwhile in the next (release.go, acquire.go).
type groupQueues[T any] struct {
	mu     sync.Mutex
	groups map[ids.GroupID]*groupQueue[T]
}

type groupQueue[T any] struct {
	senders int // sending loops running
	items   []T
}

// add queues it for g and says whether the caller must start a sending
// loop (fewer than maxSenders run; counted in from here).
func (b *groupQueues[T]) add(g ids.GroupID, it T, maxSenders int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.groups == nil {
		b.groups = make(map[ids.GroupID]*groupQueue[T])
	}
	q := b.groups[g]
	if q == nil {
		q = &groupQueue[T]{}
		b.groups[g] = q
	}
	q.items = append(q.items, it)
	if q.senders >= maxSenders {
		return false
	}
	q.senders++
	return true
}

// take returns up to max of g's queued items, oldest first; none when
// the queue is empty, and then the calling loop has ended (counted out).
func (b *groupQueues[T]) take(g ids.GroupID, max int) []T {
	b.mu.Lock()
	defer b.mu.Unlock()
	q := b.groups[g]
	n := min(len(q.items), max)
	if n == 0 {
		q.senders--
		return nil
	}
	batch := q.items[:n:n]
	q.items = q.items[n:]
	return batch
}
