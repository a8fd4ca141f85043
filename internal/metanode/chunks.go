package metanode

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/govfs/govfs/internal/clustermap"
	"github.com/govfs/govfs/internal/engine"
	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/placement"
	"github.com/govfs/govfs/internal/rpc"
	"github.com/govfs/govfs/internal/wire"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const (
	// chunkHeartbeatInterval is what the president asks chunk servers for;
	// chunkDeadAfter without one declares a server dead (issue 3).
	chunkHeartbeatInterval = 2 * time.Second
	chunkDeadAfter         = 10 * time.Second
)

// chunkLiveness is the president leader's soft state about chunk servers:
// the last heartbeat of each, never logged. A new leader starts empty and
// learns within one heartbeat interval.
type chunkLiveness struct {
	mu sync.Mutex
	m  map[uint64]chunkBeat
	// since is when this node last became the president's leader (zero
	// while it is not): a server is declared dead only after a full
	// chunkDeadAfter of leadership without its heartbeat.
	since time.Time
}

// leading records whether this node leads the president group now.
func (l *chunkLiveness) leading(now time.Time, yes bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case !yes:
		l.since = time.Time{}
	case l.since.IsZero():
		l.since = now
	}
}

// state says whether server id is alive, dead, or not known yet (this
// leader has not led long enough to tell).
func (l *chunkLiveness) state(id uint64, now time.Time) (alive, dead bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.m[id]
	if ok && now.Sub(b.at) < chunkDeadAfter {
		return true, false
	}
	return false, !l.since.IsZero() && now.Sub(l.since) >= chunkDeadAfter
}

type chunkBeat struct {
	at        time.Time
	used      int64
	chunks    uint64
	inFlight  int64
	readRate  int64
	writeRate int64
}

func (l *chunkLiveness) note(id uint64, b chunkBeat) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = map[uint64]chunkBeat{}
	}
	l.m[id] = b
}

func (l *chunkLiveness) get(id uint64) (chunkBeat, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.m[id]
	return b, ok
}

func (s *metaService) ChunkHeartbeat(ctx context.Context, req *wire.ChunkHeartbeatRequest) (*wire.ChunkHeartbeatResponse, error) {
	if st := s.checkCluster(req.GetClusterId()); st != nil {
		return &wire.ChunkHeartbeatResponse{Status: st}, nil
	}
	if lead, me := s.n.host.Leader(ids.PresidentGroup); !me {
		return &wire.ChunkHeartbeatResponse{Status: &wire.Status{Code: wire.Code_NOT_LEADER, Message: "heartbeats go to the president",
			LeaderId: uint64(lead), LeaderAddr: s.n.presidentHint(lead)}}, nil
	}
	var srv *wire.ChunkServer
	err := s.n.host.Read(ids.PresidentGroup, func(r engine.Reader, _ uint64) error {
		var err error
		srv, err = clustermap.ChunkServer(r, req.GetServerId())
		return err
	})
	if err != nil {
		return &wire.ChunkHeartbeatResponse{Status: s.errStatus(ids.PresidentGroup, err)}, nil
	}
	if srv == nil {
		return &wire.ChunkHeartbeatResponse{Status: statusOf(wire.Code_INVALID, "chunk server %d is not registered: register first", req.GetServerId())}, nil
	}
	// A chunk certificate speaks only for the server it registered.
	if err := chunkCallerIs(rpc.CallerOf(ctx), srv, "heartbeat"); err != nil {
		return nil, err
	}
	s.n.chunks.note(req.GetServerId(), chunkBeat{at: s.n.cfg.Clock.Now(), used: req.GetUsed(), chunks: req.GetChunks(),
		inFlight: req.GetBytesInFlight(), readRate: req.GetReadBytesPerS(), writeRate: req.GetWriteBytesPerS()})
	resp := &wire.ChunkHeartbeatResponse{Status: &wire.Status{}, IntervalMs: uint64(chunkHeartbeatInterval / time.Millisecond),
		MemberAddrs: map[uint64]string{}}
	err = s.n.host.Read(ids.PresidentGroup, func(r engine.Reader, _ uint64) error {
		var err error
		if resp.TokenKeys, err = clustermap.TokenKeys(r); err != nil {
			return err
		}
		groups, err := clustermap.ReplicaGroups(r)
		if err != nil {
			return err
		}
		for _, g := range groups {
			if !slices.Contains(g.GetMembers(), req.GetServerId()) {
				continue
			}
			resp.Groups = append(resp.Groups, g)
			for _, m := range g.GetMembers() {
				srv, err := clustermap.ChunkServer(r, m)
				if err != nil {
					return err
				}
				resp.MemberAddrs[m] = srv.GetAddr()
			}
		}
		return nil
	})
	if err != nil {
		return &wire.ChunkHeartbeatResponse{Status: s.errStatus(ids.PresidentGroup, err)}, nil
	}
	return resp, nil
}

// replicationFactor is the size of replica groups.
const replicationFactor = 3

// planReplicaGroups runs on the president's leader: it repairs groups
// with dead or missing members (repairReplicaGroups) and, while there are
// fewer replica groups than live chunk servers / replicationFactor (at
// least one), places a new group and proposes it.
func (n *Node) planReplicaGroups(ctx context.Context) error {
	var servers []*wire.ChunkServer
	var groups []*wire.ReplicaGroup
	err := n.host.Read(ids.PresidentGroup, func(r engine.Reader, _ uint64) error {
		var err error
		if servers, err = clustermap.ChunkServers(r); err != nil {
			return err
		}
		groups, err = clustermap.ReplicaGroups(r)
		return err
	})
	if err != nil {
		return err
	}
	now := n.cfg.Clock.Now()
	var live []placement.Server
	alive := 0
	for _, s := range servers {
		b, _ := n.chunks.get(s.GetId())
		up, _ := n.chunks.state(s.GetId(), now)
		if up {
			alive++
		}
		live = append(live, placement.Server{ID: s.GetId(), Host: s.GetHost(), Rack: s.GetRack(), Pod: s.GetPod(),
			Capacity: s.GetCapacity(), Used: b.used, Alive: up})
	}
	if done, err := n.repairReplicaGroups(ctx, groups, live, now); done || err != nil {
		return err
	}
	if alive < replicationFactor || len(groups) >= max(1, alive/replicationFactor) {
		return nil
	}
	plan, err := placement.PlaceGroup(live, replicationFactor, placement.Location{})
	if err != nil {
		return err
	}
	res, _, err := n.host.Propose(ctx, ids.PresidentGroup, &wire.Command{Version: 1, NowNs: now.UnixNano(),
		Op: &wire.Command_CreateReplicaGroup{CreateReplicaGroup: &wire.CreateReplicaGroupOp{Members: plan.Members,
			PlacementNotes: placement.Describe(live, plan.Members)}}})
	if err != nil {
		return err
	}
	if res.GetErrno() != 0 {
		return fmt.Errorf("create replica group: %s", res.GetMessage())
	}
	n.log.Info("replica group created", "group", res.GetStart(), "members", plan.Members, "relaxed", plan.Relaxed)
	return nil
}

// repairReplicaGroups makes at most one membership change per call: a
// dead member is replaced by a live server on another host (which then
// syncs), or dropped when there is none, so writes go on with the
// members left; a group short of replicationFactor members gains one.
// It reports whether it proposed a change.
func (n *Node) repairReplicaGroups(ctx context.Context, groups []*wire.ReplicaGroup, live []placement.Server, now time.Time) (bool, error) {
	for _, g := range groups {
		var op *wire.ReplaceMemberOp
		for _, m := range g.GetMembers() {
			if _, dead := n.chunks.state(m, now); !dead {
				continue
			}
			rest := slices.DeleteFunc(slices.Clone(g.GetMembers()), func(x uint64) bool { return x == m })
			nw, err := placement.AddMember(live, rest)
			if err != nil {
				nw = 0 // no server to take its place: drop it
			}
			op = &wire.ReplaceMemberOp{Group: g.GetId(), Old: m, New: nw, Epoch: g.GetEpoch()}
			break
		}
		if op == nil && len(g.GetMembers()) < replicationFactor {
			nw, err := placement.AddMember(live, g.GetMembers())
			if err != nil {
				continue
			}
			op = &wire.ReplaceMemberOp{Group: g.GetId(), New: nw, Epoch: g.GetEpoch()}
		}
		if op == nil {
			continue
		}
		after := slices.DeleteFunc(slices.Clone(g.GetMembers()), func(x uint64) bool { return x == op.GetOld() })
		if op.GetNew() != 0 {
			after = append(after, op.GetNew())
		}
		op.PlacementNotes = placement.Describe(live, after)
		res, _, err := n.host.Propose(ctx, ids.PresidentGroup, &wire.Command{Version: 1, NowNs: now.UnixNano(),
			Op: &wire.Command_ReplaceMember{ReplaceMember: op}})
		if err != nil {
			return true, err
		}
		if res.GetErrno() != 0 {
			// Refused (e.g. it would leave no full member): say so and
			// go on with the other groups, which may need repair too.
			n.log.Debug("replica group change refused", "group", g.GetId(), "err", res.GetMessage())
			continue
		}
		n.log.Warn("replica group membership changed", "group", g.GetId(), "removed", op.GetOld(), "added", op.GetNew(), "epoch", res.GetStart())
		return true, nil
	}
	return false, nil
}

// chunkStatus lists chunk servers and replica groups for admin status.
func (s *metaService) chunkStatus() ([]*wire.ChunkServerStatus, []*wire.ReplicaGroup, error) {
	var servers []*wire.ChunkServer
	var groups []*wire.ReplicaGroup
	err := s.n.host.Read(ids.PresidentGroup, func(r engine.Reader, _ uint64) error {
		var err error
		if servers, err = clustermap.ChunkServers(r); err != nil {
			return err
		}
		groups, err = clustermap.ReplicaGroups(r)
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	_, leader := s.n.host.Leader(ids.PresidentGroup)
	now := s.n.cfg.Clock.Now()
	var out []*wire.ChunkServerStatus
	for _, srv := range servers {
		st := &wire.ChunkServerStatus{Server: srv, Known: leader}
		if b, ok := s.n.chunks.get(srv.GetId()); ok && leader {
			ago := now.Sub(b.at)
			st.Alive = ago < chunkDeadAfter
			st.LastHeartbeatMsAgo = ago.Milliseconds()
			st.Used, st.Chunks = b.used, b.chunks
			st.BytesInFlight, st.ReadBytesPerS, st.WriteBytesPerS = b.inFlight, b.readRate, b.writeRate
		}
		out = append(out, st)
	}
	return out, groups, nil
}

// checkSyncReporter checks that a MemberSynced report comes from the
// primary of its group (the server that filled the member), by the
// certificate the primary registered with. A forged report would make a
// replica that lacks chunks count as full.
func (s *metaService) checkSyncReporter(c rpc.Caller, op *wire.MemberSyncedOp) error {
	var primary *wire.ChunkServer
	err := s.n.host.Read(ids.PresidentGroup, func(r engine.Reader, _ uint64) error {
		g, err := clustermap.ReplicaGroup(r, op.GetGroup())
		if err != nil || g == nil {
			return err
		}
		primary, err = clustermap.ChunkServer(r, g.GetPrimary())
		return err
	})
	if err != nil {
		// Fail closed: the report is retried by its sender.
		return status.Errorf(codes.Unavailable, "check the sender of a synced report for replica group %d: %v", op.GetGroup(), err)
	}
	if primary == nil {
		return nil // the state machine answers ENOENT for a missing group
	}
	// The epoch in the report is checked when it applies: a primary
	// that changed since this read bumped the epoch.
	return chunkCallerIs(c, primary, fmt.Sprintf("synced report for replica group %d (only its primary sends it)", op.GetGroup()))
}

// checkRegistrant refuses, before it reaches the log, a registration of
// a store that another certificate registered (the state machine refuses
// it too; this keeps a refused takeover from changing even the map's
// index).
func (s *metaService) checkRegistrant(c rpc.Caller, op *wire.RegisterChunkServerOp) error {
	var old *wire.ChunkServer
	err := s.n.host.Read(ids.PresidentGroup, func(r engine.Reader, _ uint64) error {
		id, err := clustermap.ChunkServerOfStore(r, op.GetServer().GetStoreId())
		if err != nil || id == 0 {
			return err
		}
		old, err = clustermap.ChunkServer(r, id)
		return err
	})
	if err != nil {
		return status.Errorf(codes.Unavailable, "check the registration of store %s: %v", op.GetServer().GetStoreId(), err)
	}
	if old == nil {
		return nil
	}
	return chunkCallerIs(c, old, fmt.Sprintf("register store %s", op.GetServer().GetStoreId()))
}
