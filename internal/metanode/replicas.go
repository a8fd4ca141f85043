package metanode

// Replica moves by hand (issue 11 §2): `govfs admin move-replica` and
// `govfs admin drain`. The president's leader checks the request against
// the map and node liveness and changes the ministries' wanted members
// (SetMembersOp, the same compare-and-set the dead-member replacement
// uses); the loops of members.go then carry it out: the minister adds
// the new node as a learner, promotes it once it holds the whole log,
// and removes the old one (handing leadership away first if it is the
// old one); the old node drops its replica and key range.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"syscall"
	"time"

	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/wire"
)

func (s *metaService) MoveReplicas(ctx context.Context, req *wire.MoveReplicasRequest) (*wire.MoveReplicasResponse, error) {
	n := s.n
	if st := s.checkCluster(req.GetClusterId()); st != nil {
		return &wire.MoveReplicasResponse{Status: st}, nil
	}
	if st := n.notPresidentLeader(); st != nil {
		return &wire.MoveReplicasResponse{Status: st}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := n.moveReplicas(ctx, req)
	var pe *proposeErr
	switch {
	case errors.As(err, &pe):
		// Not the leader any more, or the log is slow: the client asks
		// again, and the retry decides from the map as it is then (the
		// moves recorded already are no longer to do).
		return &wire.MoveReplicasResponse{Status: s.errStatus(ids.PresidentGroup, err)}, nil
	case err != nil:
		return &wire.MoveReplicasResponse{Status: errnoStatus(err, syscall.EINVAL)}, nil
	}
	resp.Status = &wire.Status{}
	return resp, nil
}

// moveReplicas decides every move first and proposes them only if all
// are possible: a drain that cannot place one replica changes nothing.
func (n *Node) moveReplicas(ctx context.Context, req *wire.MoveReplicasRequest) (*wire.MoveReplicasResponse, error) {
	from, to := req.GetFrom(), req.GetTo()
	switch {
	case from == 0:
		return nil, fmt.Errorf("name the node to move replicas off (--from ID; see govfs admin nodes)")
	case req.GetDrain() && req.GetMinistry() != 0:
		return nil, fmt.Errorf("drain moves every ministry replica of node %d; it takes no ministry", from)
	case !req.GetDrain() && req.GetMinistry() == uint64(ids.PresidentGroup):
		return nil, &codedErr{syscall.EOPNOTSUPP, "group 0 is the president's, whose voters are the --peers of formation: moving them is not built yet (name a ministry; see govfs admin ministries)"}
	case to == from:
		return nil, fmt.Errorf("node %d cannot take its own replica's place", from)
	}
	v := n.mapView()
	if v == nil {
		return nil, &codedErr{syscall.EAGAIN, "the cluster map is not known yet; retry"}
	}
	isNode := func(id uint64) bool {
		return slices.ContainsFunc(v.members, func(m *wire.Member) bool { return m.GetId() == id })
	}
	if !isNode(from) {
		return nil, &codedErr{syscall.ENOENT, fmt.Sprintf("node %d is not a metadata node of this cluster (see govfs admin nodes)", from)}
	}
	alive := n.liveNodes(ctx, v)
	if to != 0 {
		switch {
		case !isNode(to):
			return nil, &codedErr{syscall.ENOENT, fmt.Sprintf("node %d is not a metadata node of this cluster (see govfs admin nodes)", to)}
		case !alive[to]:
			return nil, &codedErr{syscall.EHOSTDOWN, fmt.Sprintf("node %d is not alive (no heartbeat or no answer); choose a live node (see govfs admin nodes)", to)}
		}
	}
	busy := map[uint64]uint64{} // ministry -> a move under way naming it
	for _, mv := range v.moves {
		if st := mv.GetState(); st != wire.MoveState_MOVE_DONE && st != wire.MoveState_MOVE_ABORTED {
			busy[mv.GetSource()], busy[mv.GetTarget()] = mv.GetId(), mv.GetId()
		}
	}
	var todo []*wire.Ministry
	resp := &wire.MoveReplicasResponse{}
	for _, m := range v.ministries {
		g := m.GetGroup()
		if g == uint64(ids.PresidentGroup) {
			continue
		}
		if req.GetDrain() && slices.Contains(m.GetMembers(), from) {
			todo = append(todo, m)
		}
		if !req.GetDrain() && g == req.GetMinistry() {
			if !slices.Contains(m.GetMembers(), from) {
				// Also what a retry whose answer was lost finds: the
				// members say where the replica went.
				return nil, &codedErr{syscall.ENOENT, fmt.Sprintf("node %d holds no replica of ministry %d (its members are %v)", from, g, m.GetMembers())}
			}
			todo = append(todo, m)
		}
	}
	if !req.GetDrain() && len(todo) == 0 {
		return nil, &codedErr{syscall.ENOENT, fmt.Sprintf("ministry %d does not exist (see govfs admin ministries)", req.GetMinistry())}
	}
	if req.GetDrain() && n.presidentVoter(from) {
		resp.Stays = append(resp.Stays, uint64(ids.PresidentGroup))
	}
	hosting := v.replicaLoad()
	dropping := n.stillHosting(v)
	type plan struct {
		m    *wire.Ministry
		next []uint64
		to   uint64
	}
	var plans []plan
	for _, m := range todo {
		if id, ok := busy[m.GetGroup()]; ok {
			return nil, &codedErr{syscall.EBUSY, fmt.Sprintf("ministry %d takes part in move %d, which is under way; wait for it to end (govfs admin ministries)", m.GetGroup(), id)}
		}
		dest := to
		if dest != 0 && dropping[m.GetGroup()][dest] {
			// Re-added before it deleted its old replica, it could be
			// promoted on that log and then wipe it: a voter without
			// its log.
			return nil, &codedErr{syscall.EAGAIN, fmt.Sprintf("node %d still holds a replica of ministry %d it left, which it is deleting; retry in a few seconds", dest, m.GetGroup())}
		}
		if dest == 0 {
			dest = pickReplacement(v.members, m.GetMembers(), from, alive, hosting, dropping[m.GetGroup()])
			if dest == 0 {
				return nil, &codedErr{syscall.ENOSPC, fmt.Sprintf("no live metadata node outside ministry %d's members %v can take node %d's replica: add a node (govfs meta --join)",
					m.GetGroup(), m.GetMembers(), from)}
			}
		} else if slices.Contains(m.GetMembers(), dest) {
			return nil, &codedErr{syscall.EEXIST, fmt.Sprintf("node %d already holds a replica of ministry %d (its members are %v)", dest, m.GetGroup(), m.GetMembers())}
		}
		// The new node takes the old one's place in the list: the first
		// member is the one chosen to lead.
		next := slices.Clone(m.GetMembers())
		next[slices.Index(next, from)] = dest
		plans = append(plans, plan{m: m, next: next, to: dest})
		hosting[dest]++
	}
	for _, p := range plans {
		g := p.m.GetGroup()
		res, _, err := n.host.Propose(ctx, ids.PresidentGroup, &wire.Command{Version: 1, NowNs: n.cfg.Clock.Now().UnixNano(),
			Op: &wire.Command_SetMembers{SetMembers: &wire.SetMembersOp{Ministry: g, Members: p.next, Prior: p.m.GetMembers()}}})
		if err != nil {
			return nil, &proposeErr{fmt.Errorf("move ministry %d's replica off node %d (%d of %d moves recorded): %w", g, from, len(resp.Moves), len(plans), err)}
		}
		if e := res.GetErrno(); e != 0 {
			return nil, &codedErr{syscall.Errno(e), fmt.Sprintf("move ministry %d's replica off node %d (%d of %d moves recorded): %s", g, from, len(resp.Moves), len(plans), res.GetMessage())}
		}
		n.log.Info("ministry replica to move by hand", "ministry", g, "from", from, "to", p.to, "members", p.next)
		resp.Moves = append(resp.Moves, &wire.ReplicaMove{Ministry: g, From: from, To: p.to, Members: p.next})
	}
	return resp, nil
}

// proposeErr: recording a change in the president's log failed (not
// the leader any more, a timeout): the request may be retried.
type proposeErr struct{ err error }

func (e *proposeErr) Error() string { return e.err.Error() }
func (e *proposeErr) Unwrap() error { return e.err }

// stillHosting maps each ministry to the nodes whose last heartbeat
// says they host a replica of it although the map no longer lists them
// (they are deleting it).
func (n *Node) stillHosting(v *mapView) map[uint64]map[uint64]bool {
	out := map[uint64]map[uint64]bool{}
	members := map[uint64][]uint64{}
	for _, m := range v.ministries {
		members[m.GetGroup()] = m.GetMembers()
	}
	for _, nl := range n.nodes.loads(n.cfg.Clock.Now(), n.started, v.members) {
		for _, gl := range nl.GetGroups() {
			g := gl.GetGroup()
			if g == uint64(ids.PresidentGroup) || slices.Contains(members[g], nl.GetNodeId()) {
				continue
			}
			if out[g] == nil {
				out[g] = map[uint64]bool{}
			}
			out[g][nl.GetNodeId()] = true
		}
	}
	return out
}

// pickReplacement is the live node, outside members and other than
// leaving, that hosts the fewest group replicas (lowest id on a tie),
// skipping those still deleting an old replica of the ministry
// (dropping); 0 if there is none.
func pickReplacement(nodes []*wire.Member, members []uint64, leaving uint64, alive map[uint64]bool, hosting map[uint64]int, dropping map[uint64]bool) uint64 {
	var best uint64
	for _, mb := range nodes {
		id := mb.GetId()
		if id == leaving || !alive[id] || dropping[id] || slices.Contains(members, id) {
			continue
		}
		if best == 0 || hosting[id] < hosting[best] || (hosting[id] == hosting[best] && id < best) {
			best = id
		}
	}
	return best
}

// presidentVoter says whether node id votes in the president group.
func (n *Node) presidentVoter(id uint64) bool {
	voters, _, err := n.host.ConfState(ids.PresidentGroup)
	return err == nil && slices.Contains(voters, ids.NodeID(id))
}
