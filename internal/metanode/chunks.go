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
	"github.com/govfs/govfs/internal/wire"
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
}

type chunkBeat struct {
	at     time.Time
	used   int64
	chunks uint64
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
			LeaderId: uint64(lead), LeaderAddr: s.n.cfg.Peers[lead]}}, nil
	}
	var known bool
	err := s.n.host.Read(ids.PresidentGroup, func(r engine.Reader, _ uint64) error {
		srv, err := clustermap.ChunkServer(r, req.GetServerId())
		known = srv != nil
		return err
	})
	if err != nil {
		return &wire.ChunkHeartbeatResponse{Status: s.errStatus(ids.PresidentGroup, err)}, nil
	}
	if !known {
		return &wire.ChunkHeartbeatResponse{Status: statusOf(wire.Code_INVALID, "chunk server %d is not registered: register first", req.GetServerId())}, nil
	}
	s.n.chunks.note(req.GetServerId(), chunkBeat{at: s.n.cfg.Clock.Now(), used: req.GetUsed(), chunks: req.GetChunks()})
	resp := &wire.ChunkHeartbeatResponse{Status: &wire.Status{}, IntervalMs: uint64(chunkHeartbeatInterval / time.Millisecond),
		MemberAddrs: map[uint64]string{}}
	err = s.n.host.Read(ids.PresidentGroup, func(r engine.Reader, _ uint64) error {
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

// replicationFactor is the size of new replica groups.
const replicationFactor = 3

// planReplicaGroups runs on the president's leader: while there are fewer
// replica groups than live chunk servers / replicationFactor (at least
// one), it places a new group and proposes it. Dead members are not
// replaced yet (issue 3: re-replication is not built).
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
	for _, s := range servers {
		b, ok := n.chunks.get(s.GetId())
		live = append(live, placement.Server{ID: s.GetId(), Host: s.GetHost(), Rack: s.GetRack(), Pod: s.GetPod(),
			Capacity: s.GetCapacity(), Used: b.used, Alive: ok && now.Sub(b.at) < chunkDeadAfter})
	}
	alive := 0
	for _, s := range live {
		if s.Alive {
			alive++
		}
	}
	if alive < replicationFactor || len(groups) >= max(1, alive/replicationFactor) {
		return nil
	}
	plan, err := placement.PlaceGroup(live, replicationFactor, placement.Location{})
	if err != nil {
		return err
	}
	res, _, err := n.host.Propose(ctx, ids.PresidentGroup, &wire.Command{Version: 1, NowNs: now.UnixNano(),
		Op: &wire.Command_CreateReplicaGroup{CreateReplicaGroup: &wire.CreateReplicaGroupOp{Members: plan.Members}}})
	if err != nil {
		return err
	}
	if res.GetErrno() != 0 {
		return fmt.Errorf("create replica group: %s", res.GetMessage())
	}
	n.log.Info("replica group created", "group", res.GetStart(), "members", plan.Members, "relaxed", plan.Relaxed)
	return nil
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
		}
		out = append(out, st)
	}
	return out, groups, nil
}
