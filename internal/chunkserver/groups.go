package chunkserver

import (
	"sync"

	"github.com/govfs/govfs/internal/wire"
)

// groupTable is what the president last said about this server's replica
// groups (from heartbeat replies).
type groupTable struct {
	mu     sync.Mutex
	groups map[uint64]*wire.ReplicaGroup
	addrs  map[uint64]string
}

func (t *groupTable) set(groups []*wire.ReplicaGroup, addrs map[uint64]string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.groups = map[uint64]*wire.ReplicaGroup{}
	for _, g := range groups {
		t.groups[g.GetId()] = g
	}
	t.addrs = addrs
}

func (t *groupTable) get(id uint64) (*wire.ReplicaGroup, map[uint64]string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.groups[id], t.addrs
}

// all returns every group this server is a member of.
func (t *groupTable) all() []*wire.ReplicaGroup {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]*wire.ReplicaGroup, 0, len(t.groups))
	for _, g := range t.groups {
		out = append(out, g)
	}
	return out
}
