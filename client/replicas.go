package client

import (
	"slices"
	"sync"
	"time"

	"github.com/govfs/govfs/internal/wire"
)

// Replica choice for reads (issue 3): the member with the least expected
// completion time. Nearness comes first (same host, then rack, then pod,
// from the cluster map and Config.Host/Rack/Pod); among equally near
// members, the expected time is (bytes this client has in flight to the
// server + the request) / the throughput this client recently saw from
// it. Load is measured here, per client, not reported by the servers:
// it is what this client would wait for, and it needs no extra message.

// unknownRate is the throughput assumed for a server not read from yet.
const unknownRate = 200 << 20 // bytes/s

// failPenalty is added to the expected time of a server that failed a
// request in the last failMemory, so reads go elsewhere first.
const (
	failPenalty = 10 * time.Second
	failMemory  = 5 * time.Second
)

type replicaLoad struct {
	mu sync.Mutex
	m  map[uint64]*serverLoad
}

type serverLoad struct {
	inFlight int64
	rate     float64 // bytes/s, exponentially weighted
	failedAt time.Time
}

func (l *replicaLoad) get(id uint64) *serverLoad {
	if l.m == nil {
		l.m = map[uint64]*serverLoad{}
	}
	s := l.m[id]
	if s == nil {
		s = &serverLoad{}
		l.m[id] = s
	}
	return s
}

// begin notes n bytes asked of server id; the returned func records the
// outcome.
func (l *replicaLoad) begin(id uint64, n int64, now func() time.Time) func(ok bool) {
	l.mu.Lock()
	l.get(id).inFlight += n
	l.mu.Unlock()
	start := now()
	return func(ok bool) {
		end := now()
		l.mu.Lock()
		defer l.mu.Unlock()
		s := l.get(id)
		s.inFlight -= n
		if !ok {
			s.failedAt = end
			return
		}
		if d := end.Sub(start).Seconds(); d > 0 && n > 0 {
			r := float64(n) / d
			if s.rate == 0 {
				s.rate = r
			} else {
				s.rate = 0.8*s.rate + 0.2*r
			}
		}
	}
}

// distance is 0 on the same host, 1 same rack, 2 same pod, 3 elsewhere.
func distance(cfg *Config, s *wire.ChunkServer) int {
	switch {
	case s == nil:
		return 3
	case cfg.Host != "" && s.GetHost() == cfg.Host:
		return 0
	case cfg.Rack != "" && s.GetRack() == cfg.Rack && s.GetPod() == cfg.Pod:
		return 1
	case cfg.Pod != "" && s.GetPod() == cfg.Pod:
		return 2
	}
	return 3
}

// readOrder returns the members of g that serve reads (not syncing),
// best first for a read of n bytes.
func (c *Client) readOrder(g *wire.ReplicaGroup, n int64) []uint64 {
	c.mu.Lock()
	servers := c.mu.chunkServers
	c.mu.Unlock()
	now := c.cfg.Clock.Now()
	type cand struct {
		id   uint64
		dist int
		eta  float64
	}
	var cs []cand
	c.load.mu.Lock()
	for _, m := range g.GetMembers() {
		if slices.Contains(g.GetSyncing(), m) {
			continue
		}
		s := c.load.get(m)
		rate := s.rate
		if rate <= 0 {
			rate = unknownRate
		}
		eta := float64(s.inFlight+n) / rate
		if !s.failedAt.IsZero() && now.Sub(s.failedAt) < failMemory {
			eta += failPenalty.Seconds()
		}
		cs = append(cs, cand{m, distance(&c.cfg, servers[m]), eta})
	}
	c.load.mu.Unlock()
	slices.SortStableFunc(cs, func(a, b cand) int {
		if a.dist != b.dist {
			return a.dist - b.dist
		}
		switch {
		case a.eta < b.eta:
			return -1
		case a.eta > b.eta:
			return 1
		}
		return 0
	})
	out := make([]uint64, len(cs))
	for i, x := range cs {
		out[i] = x.id
	}
	return out
}
