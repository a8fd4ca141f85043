package multiraft

// Membership changes of a hosted group: the leader adds a node as a
// learner, promotes it once it has caught up, and removes nodes, one
// simple (non-joint) configuration change at a time, which raft applies
// safely whatever the order. A node given a replica of a running group
// starts it empty (JoinGroup) and receives the log or a snapshot; a node
// that leaves drops the replica and its whole key range (RemoveGroup).

import (
	"context"
	"fmt"
	"slices"

	"github.com/govfs/govfs/internal/engine"
	"github.com/govfs/govfs/internal/ids"
	pb "go.etcd.io/raft/v3/raftpb"
)

// MemberChange is one configuration change.
type MemberChange int

const (
	// AddLearner makes a node a non-voting member that receives the log.
	AddLearner MemberChange = iota + 1
	// Promote makes a learner (or a new node) a voter.
	Promote
	// RemoveMember removes a voter or learner.
	RemoveMember
)

func (c MemberChange) String() string {
	switch c {
	case AddLearner:
		return "add learner"
	case Promote:
		return "promote"
	case RemoveMember:
		return "remove"
	}
	return fmt.Sprintf("MemberChange(%d)", int(c))
}

// ConfState returns g's voters and learners as this replica has applied
// them.
func (h *Host) ConfState(g ids.GroupID) (voters, learners []ids.NodeID, err error) {
	r := h.replica(g)
	if r == nil {
		return nil, nil, ErrUnknownGroup
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, v := range r.mu.cs.GetVoters() {
		voters = append(voters, ids.NodeID(v))
	}
	for _, l := range r.mu.cs.GetLearners() {
		learners = append(learners, ids.NodeID(l))
	}
	slices.Sort(voters)
	slices.Sort(learners)
	return voters, learners, nil
}

// ChangeMember proposes one configuration change of g on its leader. It
// returns once proposed, not applied: the caller watches ConfState. Raft
// allows one change in flight; a proposal made while another is pending
// is dropped (it becomes an empty entry), so callers retry from
// ConfState rather than from this call's outcome.
func (h *Host) ChangeMember(g ids.GroupID, change MemberChange, node ids.NodeID) error {
	r := h.replica(g)
	if r == nil {
		return ErrUnknownGroup
	}
	var t pb.ConfChangeType
	switch change {
	case AddLearner:
		t = pb.ConfChangeAddLearnerNode
	case Promote:
		t = pb.ConfChangeAddNode
	case RemoveMember:
		t = pb.ConfChangeRemoveNode
	default:
		return fmt.Errorf("multiraft: unknown member change %v", change)
	}
	if node == 0 {
		return fmt.Errorf("multiraft: %v of node 0", change)
	}
	r.mu.Lock()
	if !r.mu.leader {
		lead := r.mu.lead
		r.mu.Unlock()
		return &NotLeaderError{Group: g, Leader: ids.NodeID(lead)}
	}
	nid := uint64(node)
	err := r.mu.rn.ProposeConfChange(&pb.ConfChange{Type: t.Enum(), NodeId: &nid})
	r.mu.Unlock()
	h.signal()
	if err != nil {
		return fmt.Errorf("multiraft: %v node %v in %v: %w", change, node, g, err)
	}
	h.log.Info("membership change proposed", "group", uint64(g), "change", change.String(), "member", nid)
	return nil
}

// removal is a RemoveGroup request.
type removal struct {
	g    ids.GroupID
	done chan error
}

// RemoveGroup stops hosting g and deletes everything this node stored
// for it (log, hard state, state machine). It is done by the Ready loop
// between two rounds, so no persist or apply of g is in flight; waiters
// on g fail with ErrUnknownGroup.
func (h *Host) RemoveGroup(ctx context.Context, g ids.GroupID) error {
	if h.replica(g) == nil {
		return ErrUnknownGroup
	}
	done := make(chan error, 1)
	h.mu.Lock()
	h.removals = append(h.removals, removal{g: g, done: done})
	h.mu.Unlock()
	h.signal()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("multiraft: remove %v: %w", g, ctx.Err())
	case <-h.stop:
		return ErrStopped
	}
}

// doRemovals drops the groups RemoveGroup asked for (Ready loop only).
func (h *Host) doRemovals() error {
	h.mu.Lock()
	rms := h.removals
	h.removals = nil
	var rs []*replica
	for _, rm := range rms {
		rs = append(rs, h.groups[rm.g])
		delete(h.groups, rm.g)
	}
	h.mu.Unlock()
	for i, rm := range rms {
		r := rs[i]
		if r == nil {
			rm.done <- ErrUnknownGroup
			continue
		}
		r.mu.Lock()
		r.failWaitersLocked(ErrUnknownGroup)
		r.failReadsLocked()
		r.mu.Unlock()
		// Readers that found the replica before it left the map finish
		// first; later ones get ErrUnknownGroup. A snapshot prepared for
		// a follower goes now: prepareSnapshot makes none once gone.
		r.stateMu.Lock()
		r.gone.Store(true)
		r.mu.Lock()
		if r.mu.snap != nil {
			r.mu.snap.Release()
			r.mu.snap = nil
		}
		r.mu.Unlock()
		wb := h.cfg.Engine.NewWriteBatch()
		p := engine.GroupPrefix(uint64(rm.g))
		err := wb.DeleteRange(p, engine.PrefixEnd(p))
		if err == nil {
			err = wb.Commit(true)
		}
		wb.Close()
		r.stateMu.Unlock()
		if err != nil {
			err = fmt.Errorf("multiraft: delete the key range of %v: %w", rm.g, err)
			rm.done <- err
			return err
		}
		h.log.Info("group removed and its key range deleted", "group", uint64(rm.g))
		rm.done <- nil
	}
	return nil
}
