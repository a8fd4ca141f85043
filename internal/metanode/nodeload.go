package metanode

// Liveness and load of metadata nodes (issue 11 §1): every node reports,
// once a second, its CPU use and the requests it served per hosted group
// to each member of the president group, which keeps the last report of
// every node as soft state (never logged, as for chunk servers). A
// president member answers ClusterInfo with it (`node_loads`, and each
// ministry's ops/s), and the president's leader places new ministries on
// nodes that report.

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/govfs/govfs/internal/clustermap"
	"github.com/govfs/govfs/internal/engine"
	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/wire"
)

const (
	metaHeartbeatInterval = time.Second
	// metaDeadAfter without a heartbeat: the node is reported dead (and
	// gets no new ministries).
	metaDeadAfter = 5 * time.Second
)

// opsCounter counts the requests this node serves, per group.
type opsCounter struct {
	m sync.Map // ids.GroupID -> *atomic.Uint64
}

func (o *opsCounter) add(g ids.GroupID) {
	if v, ok := o.m.Load(g); ok {
		v.(*atomic.Uint64).Add(1)
		return
	}
	v, _ := o.m.LoadOrStore(g, new(atomic.Uint64))
	v.(*atomic.Uint64).Add(1)
}

func (o *opsCounter) get(g ids.GroupID) uint64 {
	if v, ok := o.m.Load(g); ok {
		return v.(*atomic.Uint64).Load()
	}
	return 0
}

// loadSampler turns counters into rates between two heartbeats (the
// heartbeat loop's own state).
type loadSampler struct {
	at   time.Time
	cpu  time.Duration
	ops  map[ids.GroupID]uint64
	rate map[ids.GroupID]float64
}

// processCPU is the CPU time (user + system) this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// sample builds this node's report: CPU and ops/s since the last sample.
func (n *Node) sampleLoad(s *loadSampler) *wire.MetaHeartbeatRequest {
	now, cpu := n.cfg.Clock.Now(), processCPU()
	req := &wire.MetaHeartbeatRequest{ClusterId: n.ClusterID(), NodeId: uint64(n.cfg.ID), Addr: n.Addr()}
	secs := now.Sub(s.at).Seconds()
	if !s.at.IsZero() && secs > 0 {
		req.Cpu = (cpu - s.cpu).Seconds() / secs
	}
	ops := map[ids.GroupID]uint64{}
	for _, st := range n.host.Status() {
		c := n.ops.get(st.Group)
		ops[st.Group] = c
		gl := &wire.GroupLoad{Group: uint64(st.Group), Role: strings.ToLower(st.Role), Applied: st.Applied}
		if prev, ok := s.ops[st.Group]; ok && secs > 0 && c >= prev {
			gl.OpsPerS = float64(c-prev) / secs
		}
		req.Groups = append(req.Groups, gl)
	}
	s.at, s.cpu, s.ops = now, cpu, ops
	return req
}

// heartbeat reports this node's load to every president member once a
// second until Stop.
func (n *Node) heartbeat() {
	var s loadSampler
	for {
		select {
		case <-n.stop:
			return
		case <-n.cfg.Clock.After(metaHeartbeatInterval):
		}
		if n.ClusterID() == "" {
			continue
		}
		req := n.sampleLoad(&s)
		var wg sync.WaitGroup
		for _, addr := range n.presidentAddrs() {
			wg.Go(func() {
				cc, err := n.pool.Get(addr)
				if err != nil {
					return
				}
				ctx, cancel := context.WithTimeout(context.Background(), metaHeartbeatInterval)
				defer cancel()
				if _, err := wire.NewMetaClient(cc).MetaHeartbeat(ctx, req); err != nil {
					n.log.Debug("metadata heartbeat", "to", addr, "err", err)
				}
			})
		}
		wg.Wait()
	}
}

// metaLiveness is a president member's soft state about metadata nodes:
// the last report of each.
type metaLiveness struct {
	mu    sync.Mutex
	beats map[uint64]metaBeat
}

type metaBeat struct {
	at  time.Time
	req *wire.MetaHeartbeatRequest
}

func (l *metaLiveness) note(now time.Time, req *wire.MetaHeartbeatRequest) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.beats == nil {
		l.beats = map[uint64]metaBeat{}
	}
	l.beats[req.GetNodeId()] = metaBeat{at: now, req: req}
}

// loads reports every member of the map as this node knows it. started
// is when this node started listening: before metaDeadAfter has passed,
// a silent node is "not known" rather than dead.
func (l *metaLiveness) loads(now, started time.Time, members []*wire.Member) []*wire.NodeLoad {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []*wire.NodeLoad
	for _, m := range members {
		nl := &wire.NodeLoad{NodeId: m.GetId(), LastHeartbeatMsAgo: -1}
		b, ok := l.beats[m.GetId()]
		if ok {
			age := now.Sub(b.at)
			nl.LastHeartbeatMsAgo = age.Milliseconds()
			nl.Alive = age < metaDeadAfter
			nl.Cpu, nl.Groups = b.req.GetCpu(), b.req.GetGroups()
		}
		nl.Known = nl.Alive || now.Sub(started) >= metaDeadAfter
		out = append(out, nl)
	}
	return out
}

// groupOps sums the ops/s the nodes alive report for each group.
func groupOps(loads []*wire.NodeLoad) map[uint64]float64 {
	out := map[uint64]float64{}
	for _, nl := range loads {
		if !nl.GetAlive() {
			continue
		}
		for _, g := range nl.GetGroups() {
			out[g.GetGroup()] += g.GetOpsPerS()
		}
	}
	return out
}

func (s *metaService) MetaHeartbeat(ctx context.Context, req *wire.MetaHeartbeatRequest) (*wire.MetaHeartbeatResponse, error) {
	if st := s.checkCluster(req.GetClusterId()); st != nil {
		return &wire.MetaHeartbeatResponse{Status: st}, nil
	}
	if !s.n.host.HasGroup(ids.PresidentGroup) {
		return &wire.MetaHeartbeatResponse{Status: statusOf(wire.Code_UNKNOWN_GROUP, "node %v is not a member of the president group; heartbeats go to its members", s.n.cfg.ID)}, nil
	}
	var members []*wire.Member
	if v := s.n.mapView(); v != nil {
		members = v.members
	}
	var me *wire.Member
	for _, m := range members {
		if m.GetId() == req.GetNodeId() && m.GetAddr() == req.GetAddr() {
			me = m
		}
	}
	if me == nil {
		return &wire.MetaHeartbeatResponse{Status: statusOf(wire.Code_INVALID, "node %d at %q is not a metadata node of this cluster (join first)", req.GetNodeId(), req.GetAddr())}, nil
	}
	if err := s.n.bindNodeCert(ctx, me); err != nil {
		return nil, err
	}
	s.n.nodes.note(s.n.cfg.Clock.Now(), req)
	return &wire.MetaHeartbeatResponse{Status: &wire.Status{}, IntervalMs: uint64(metaHeartbeatInterval / time.Millisecond)}, nil
}

// livenessLog remembers what the president's leader last said about each
// metadata node and chunk server, so that it logs (and the dashboard
// lists) a server going silent and coming back, once each.
type livenessLog struct {
	meta  map[uint64]bool
	chunk map[uint64]bool
}

// logLiveness runs on the president's leader in the maintenance loop.
func (n *Node) logLiveness(leads bool) {
	if !leads {
		n.alive = livenessLog{} // a new leader starts from what it sees
		return
	}
	now := n.cfg.Clock.Now()
	v := n.mapView()
	if v == nil {
		return
	}
	if n.alive.meta == nil {
		n.alive.meta, n.alive.chunk = map[uint64]bool{}, map[uint64]bool{}
	}
	for _, l := range n.nodes.loads(now, n.started, v.members) {
		if !l.GetKnown() {
			continue
		}
		was, seen := n.alive.meta[l.GetNodeId()]
		switch {
		case seen && was && !l.GetAlive():
			n.log.Warn("metadata node stopped sending heartbeats: dead", "peer", l.GetNodeId(), "silent_for", time.Duration(l.GetLastHeartbeatMsAgo())*time.Millisecond)
		case seen && !was && l.GetAlive():
			n.log.Info("metadata node is back", "peer", l.GetNodeId())
		}
		n.alive.meta[l.GetNodeId()] = l.GetAlive()
	}
	var servers []uint64
	_ = n.host.Read(ids.PresidentGroup, func(r engine.Reader, _ uint64) error {
		cs, err := clustermap.ChunkServers(r)
		for _, s := range cs {
			servers = append(servers, s.GetId())
		}
		return err
	})
	for _, id := range servers {
		alive, dead := n.chunks.state(id, now)
		if !alive && !dead {
			continue // not known yet
		}
		was, seen := n.alive.chunk[id]
		switch {
		case seen && was && dead:
			n.log.Warn("chunk server stopped sending heartbeats: dead", "server", id)
		case seen && !was && alive:
			n.log.Info("chunk server is back", "server", id)
		}
		n.alive.chunk[id] = alive
	}
}
