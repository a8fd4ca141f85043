package metanode

// Re-replication of ministries (membership changes, issue 11 §2). The
// president keeps the voters it wants for each ministry in the map
// (Ministry.members); three loops bring the groups there:
//
//   - the president's leader replaces a member that has sent no heartbeat
//     for Config.ReplaceDeadAfter with a live node that hosts the fewest
//     ministries (SetMembersOp, a compare-and-set on the members);
//   - the minister of each ministry moves the group's configuration toward
//     the map's list one change at a time: add a missing node as a
//     learner, promote a learner once it holds the whole log, then remove
//     a voter the map no longer lists (handing leadership away first if it
//     is itself);
//   - a node that hosts a ministry the map no longer gives it drops the
//     replica and deletes its key range, once the group's leader confirms
//     that it is out of the configuration.
//
// A node given a replica of a running ministry starts it empty and
// receives the log or a snapshot; only the founders bootstrap.

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/govfs/govfs/internal/clustermap"
	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/multiraft"
	"github.com/govfs/govfs/internal/wire"
)

const (
	// DefaultReplaceDeadAfter is how long a ministry member may send no
	// heartbeat before the president replaces it (as HDFS waits ~10 min
	// before re-replicating a dead datanode's blocks, a restart or a short
	// outage should not cause a copy).
	DefaultReplaceDeadAfter = 2 * time.Minute
	// memberChangeEvery paces a minister's configuration changes of one
	// group (raft takes one at a time; a proposal made while another is
	// pending is dropped).
	memberChangeEvery = 200 * time.Millisecond
	// dropCheckEvery paces a removed node's check that it may drop its
	// replica.
	dropCheckEvery = time.Second
)

// hostMinistryFor starts this node's replica of ministry m: bootstrapped
// with the founders when this node is one of them and never dropped the
// group, else empty, to be filled by the leader.
func (n *Node) hostMinistryFor(m *wire.Ministry) error {
	g := ids.GroupID(m.GetGroup())
	founders := clustermap.Founders(m)
	if slices.Contains(founders, uint64(n.cfg.ID)) && !slices.Contains(n.ident.Dropped, uint64(g)) {
		return n.hostMinistry(g, founders)
	}
	return n.joinMinistry(g)
}

// joinMinistry starts an empty replica of g (recorded first, so a restart
// starts it again).
func (n *Node) joinMinistry(g ids.GroupID) error {
	n.hostMu.Lock()
	defer n.hostMu.Unlock()
	if n.host.HasGroup(g) {
		return nil
	}
	n.ident.Dropped = slices.DeleteFunc(n.ident.Dropped, func(d uint64) bool { return d == uint64(g) })
	if !slices.ContainsFunc(n.ident.Groups, func(h hostedGroup) bool { return h.Group == uint64(g) }) {
		n.ident.Groups = append(n.ident.Groups, hostedGroup{Group: uint64(g), Joined: true})
	}
	if err := saveIdentity(n.eng, n.ident); err != nil {
		return fmt.Errorf("record ministry %v in the node identity: %w", g, err)
	}
	if err := n.host.JoinGroup(g, ministrySM{}); err != nil {
		return fmt.Errorf("join ministry %v: %w", g, err)
	}
	n.log.Info("hosting ministry as a new member (waiting for its log)", "group", uint64(g))
	return nil
}

// reconcileMembers runs on the minister of g: one step of bringing the
// group's configuration to the map's members.
func (n *Node) reconcileMembers(g ids.GroupID, m *wire.Ministry) error {
	now := n.cfg.Clock.Now()
	if now.Sub(n.lastMemberChange[g]) < memberChangeEvery || len(m.GetMembers()) == 0 {
		return nil
	}
	voters, learners, err := n.host.ConfState(g)
	if err != nil {
		return err
	}
	want := nodeIDs(m.GetMembers())
	step := func(c multiraft.MemberChange, id ids.NodeID) error {
		n.lastMemberChange[g] = now
		if err := n.host.ChangeMember(g, c, id); err != nil {
			return fmt.Errorf("%v node %v: %w", c, id, err)
		}
		return nil
	}
	// 1. Add a wanted node as a learner.
	for _, id := range want {
		if !slices.Contains(voters, id) && !slices.Contains(learners, id) {
			return step(multiraft.AddLearner, id)
		}
	}
	// 2. Promote a wanted learner that holds the whole log.
	for _, id := range learners {
		if slices.Contains(want, id) && n.host.CaughtUp(g, id) {
			return step(multiraft.Promote, id)
		}
	}
	for _, id := range want {
		if slices.Contains(learners, id) {
			return nil // still catching up: remove nobody before it votes
		}
	}
	// 3. Remove what the map no longer lists (a learner first).
	for _, id := range append(slices.Clone(learners), voters...) {
		if slices.Contains(want, id) {
			continue
		}
		if id == n.cfg.ID {
			// A leader does not remove itself: it hands the group to a
			// wanted voter that is caught up; the new leader removes it.
			for _, to := range want {
				if n.host.CaughtUp(g, to) {
					n.lastMemberChange[g] = now
					return n.host.TransferLeader(g, to)
				}
			}
			return nil
		}
		return step(multiraft.RemoveMember, id)
	}
	return nil
}

// dropIfRemoved drops this node's replica of g, which the map no longer
// gives it, once g's leader confirms that this node is out of the group's
// configuration (before that, the node may still count for a quorum).
func (n *Node) dropIfRemoved(ctx context.Context, g ids.GroupID, m *wire.Ministry) error {
	now := n.cfg.Clock.Now()
	if now.Sub(n.lastDropCheck[g]) < dropCheckEvery {
		return nil
	}
	n.lastDropCheck[g] = now
	if _, me := n.host.Leader(g); me {
		return nil // it hands leadership away first (reconcileMembers)
	}
	out, err := n.outOfGroup(ctx, g, m)
	if err != nil || !out {
		return err
	}
	return n.dropReplica(ctx, g, "left ministry: replica dropped and its key range deleted")
}

// dropReplica deletes this node's replica of g and its key range, and
// records that g is not to be started again.
func (n *Node) dropReplica(ctx context.Context, g ids.GroupID, why string) error {
	n.hostMu.Lock()
	defer n.hostMu.Unlock()
	n.ident.Groups = slices.DeleteFunc(n.ident.Groups, func(h hostedGroup) bool { return h.Group == uint64(g) })
	if !slices.Contains(n.ident.Dropped, uint64(g)) {
		n.ident.Dropped = append(n.ident.Dropped, uint64(g))
	}
	// Recorded first: a crash after this starts no replica of g again.
	if err := saveIdentity(n.eng, n.ident); err != nil {
		return fmt.Errorf("record that ministry %v is dropped: %w", g, err)
	}
	if err := n.host.RemoveGroup(ctx, g); err != nil {
		return fmt.Errorf("drop ministry %v: %w", g, err)
	}
	n.log.Info(why, "group", uint64(g))
	return nil
}

// outOfGroup asks the members the map lists for g which of them leads it,
// and whether that leader's configuration still names this node.
func (n *Node) outOfGroup(ctx context.Context, g ids.GroupID, m *wire.Ministry) (bool, error) {
	for _, id := range m.GetMembers() {
		addr := n.addrOf(ids.NodeID(id))
		if addr == "" || ids.NodeID(id) == n.cfg.ID {
			continue
		}
		cc, err := n.pool.Get(addr)
		if err != nil {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		st, err := wire.NewMetaClient(cc).Status(cctx, &wire.StatusRequest{})
		cancel()
		if err != nil {
			continue
		}
		for _, gs := range st.GetGroups() {
			if gs.GetGroup() != uint64(g) || gs.GetLeader() != id {
				continue
			}
			in := slices.Contains(gs.GetVoters(), uint64(n.cfg.ID)) || slices.Contains(gs.GetLearners(), uint64(n.cfg.ID))
			return !in, nil
		}
	}
	return false, nil
}

// replaceDeadMembers runs on the president's leader: a ministry member
// silent for ReplaceDeadAfter is replaced by the live node hosting the
// fewest group replicas (one member per ministry per decision).
func (n *Node) replaceDeadMembers(ctx context.Context, v *mapView) error {
	after := n.cfg.ReplaceDeadAfter
	if after == 0 {
		after = DefaultReplaceDeadAfter
	}
	now := n.cfg.Clock.Now()
	if after < 0 || now.Sub(n.started) < max(after, metaDeadAfter) {
		return nil
	}
	loads := n.nodes.loads(now, n.started, v.members)
	dead := map[uint64]bool{}
	alive := map[uint64]bool{uint64(n.cfg.ID): true}
	for _, nl := range loads {
		switch {
		case nl.GetAlive():
			alive[nl.GetNodeId()] = true
		case nl.GetNodeId() != uint64(n.cfg.ID) && (nl.GetLastHeartbeatMsAgo() < 0 || time.Duration(nl.GetLastHeartbeatMsAgo())*time.Millisecond >= after):
			dead[nl.GetNodeId()] = true
		}
	}
	hosting := v.replicaLoad()
	dropping := n.stillHosting(v)
	for _, m := range v.ministries {
		i := slices.IndexFunc(m.GetMembers(), func(id uint64) bool { return dead[id] })
		if i < 0 || m.GetGroup() == uint64(ids.PresidentGroup) {
			continue
		}
		best := pickReplacement(v.members, m.GetMembers(), 0, alive, hosting, dropping[m.GetGroup()])
		if best == 0 {
			if now.Sub(n.lastNoSpare) > time.Minute {
				n.lastNoSpare = now
				n.log.Warn("ministry member is dead and no live node can replace it: add a metadata node (govfs meta --join)",
					"ministry", m.GetGroup(), "dead", m.GetMembers()[i])
			}
			continue
		}
		// The survivors keep their order (the first is the one chosen to
		// lead); the new member comes last.
		next := slices.Delete(slices.Clone(m.GetMembers()), i, i+1)
		next = append(next, best)
		res, _, err := n.host.Propose(ctx, ids.PresidentGroup, &wire.Command{Version: 1, NowNs: now.UnixNano(),
			Op: &wire.Command_SetMembers{SetMembers: &wire.SetMembersOp{Ministry: m.GetGroup(), Members: next, Prior: m.GetMembers()}}})
		if err != nil {
			return err
		}
		if res.GetErrno() != 0 {
			n.log.Warn("replacing a dead ministry member refused", "ministry", m.GetGroup(), "err", res.GetMessage())
			continue
		}
		n.log.Info("ministry member dead: replaced", "ministry", m.GetGroup(), "dead", m.GetMembers()[i], "by", best, "members", next)
		hosting[best]++
	}
	return nil
}
