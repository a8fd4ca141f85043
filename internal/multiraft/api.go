package multiraft

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/govfs/govfs/internal/engine"
	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/wire"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

var (
	// ErrStopped is returned when the host stops while a call waits.
	ErrStopped = errors.New("multiraft: stopped")
	// ErrUnknownGroup is returned for a group not hosted here.
	ErrUnknownGroup = errors.New("multiraft: group not hosted on this node")
	// ErrUnavailable means the group cannot serve right now (no leader,
	// cut off from the leader, proposal dropped); retry later or elsewhere.
	ErrUnavailable = errors.New("multiraft: group unavailable")
)

// NotLeaderError says this node is not the group's leader.
type NotLeaderError struct {
	Group  ids.GroupID
	Leader ids.NodeID // 0 when unknown
}

func (e *NotLeaderError) Error() string {
	return fmt.Sprintf("multiraft: %v: not leader (leader %v)", e.Group, e.Leader)
}

// Propose proposes cmd to group g and waits until it is applied here,
// returning the state machine's result and the entry's index. Only the
// leader accepts proposals. cmd.Req identifies the request; the host fills
// one in for internal commands that have none.
func (h *Host) Propose(ctx context.Context, g ids.GroupID, cmd *wire.Command) (*wire.Result, uint64, error) {
	r := h.replica(g)
	if r == nil {
		return nil, 0, ErrUnknownGroup
	}
	ch := make(chan applyResult, 1)
	r.mu.Lock()
	if !r.mu.leader {
		lead := r.mu.lead
		r.mu.Unlock()
		return nil, 0, &NotLeaderError{Group: g, Leader: ids.NodeID(lead)}
	}
	if cmd.GetReq().GetClientId() == 0 {
		// An internal command: numbered under the group's lock, so the
		// group's log holds this host's numbers in increasing order and
		// "everything below is done" (FirstIncomplete = Seq) is true when
		// it is applied. Numbered before taking the lock, two concurrent
		// proposals could reach the log in the other order, and the
		// state machine would refuse the lower one as older than what it
		// had acknowledged (seen: chunk servers registering at once).
		s := h.seq.Add(1)
		cmd.Req = &wire.RequestID{ClientId: h.clientID, Seq: s, FirstIncomplete: s}
	}
	data, err := proto.Marshal(cmd)
	if err != nil {
		r.mu.Unlock()
		return nil, 0, fmt.Errorf("multiraft: encode command: %w", err)
	}
	key := reqKey{cmd.Req.GetClientId(), cmd.Req.GetSeq()}
	// Queue the proposal; the Ready loop hands everything queued to raft
	// as one MsgProp, so a round's proposals leave in one MsgApp.
	r.mu.proposals = append(r.mu.proposals, &pb.Entry{Data: data})
	r.mu.proposalKeys = append(r.mu.proposalKeys, key)
	r.mu.waiters[key] = append(r.mu.waiters[key], ch)
	r.mu.Unlock()
	h.signal()
	select {
	case res := <-ch:
		return res.res, res.index, res.err
	case <-ctx.Done():
		r.mu.Lock()
		ws := r.mu.waiters[key]
		for i, w := range ws {
			if w == ch {
				r.mu.waiters[key] = append(ws[:i], ws[i+1:]...)
				break
			}
		}
		if len(r.mu.waiters[key]) == 0 {
			delete(r.mu.waiters, key)
		}
		r.mu.Unlock()
		return nil, 0, ctx.Err()
	case <-h.stop:
		return nil, 0, ErrStopped
	}
}

// readKey returns the waiter key of a ReadIndex request context, or 0 when
// the context is not one this host issued since it started.
//
// INVARIANT: request contexts are unique across nodes and restarts
// (a random per-start epoch followed by a counter). A late answer to a
// request issued before a restart, or by another node, must never match a
// new waiter: it would carry an older read index and make a
// "linearizable" read stale. The nemesis test caught exactly that when
// contexts were a bare counter starting at zero on every node.
func (h *Host) readKey(b []byte) uint64 {
	if len(b) != 16 || binary.BigEndian.Uint64(b) != h.readEpoch {
		return 0
	}
	return binary.BigEndian.Uint64(b[8:])
}

func (h *Host) readRequestCtx(k uint64) []byte {
	return binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(make([]byte, 0, 16), h.readEpoch), k)
}

// ReadIndex returns an index such that a read served after applying it is
// linearizable (raft ReadIndex, confirmed by a quorum of heartbeats).
func (h *Host) ReadIndex(ctx context.Context, g ids.GroupID) (uint64, error) {
	r := h.replica(g)
	if r == nil {
		return 0, ErrUnknownGroup
	}
	ch := make(chan uint64, 1)
	r.mu.Lock()
	if r.mu.lead == 0 {
		r.mu.Unlock()
		return 0, fmt.Errorf("%w: no leader", ErrUnavailable)
	}
	// Handed to raft at the start of the loop's next round, with every
	// other caller queued by then (replica.flushReadsLocked).
	r.mu.pendingReads = append(r.mu.pendingReads, ch)
	r.mu.Unlock()
	h.signal()
	select {
	case idx, ok := <-ch:
		if !ok {
			return 0, fmt.Errorf("%w: leadership changed during read index", ErrUnavailable)
		}
		return idx, nil
	case <-ctx.Done():
		// ch stays with its request (buffered: the answer or the close
		// finds no one and is dropped with the request's entry).
		return 0, ctx.Err()
	case <-h.stop:
		return 0, ErrStopped
	}
}

// WaitApplied blocks until group g has applied index idx.
func (h *Host) WaitApplied(ctx context.Context, g ids.GroupID, idx uint64) error {
	r := h.replica(g)
	if r == nil {
		return ErrUnknownGroup
	}
	for {
		if r.applied.Load() >= idx {
			return nil // the common case, without touching the lock
		}
		ch := r.appliedNotify()
		if r.applied.Load() >= idx {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-h.stop:
			return ErrStopped
		}
	}
}

// Applied returns the applied index of g.
func (h *Host) Applied(g ids.GroupID) uint64 {
	if r := h.replica(g); r != nil {
		return r.applied.Load()
	}
	return 0
}

// CheckReadable says whether this replica may serve reads: the leader may;
// a follower only while it has heard from a leader within the election
// timeout (the thesis' perishable rule), so a cut-off clerk stops serving.
func (h *Host) CheckReadable(g ids.GroupID) error {
	r := h.replica(g)
	if r == nil {
		return ErrUnknownGroup
	}
	if r.readIsLeader.Load() {
		return nil
	}
	if r.readLead.Load() == 0 {
		return fmt.Errorf("%w: %v has no leader", ErrUnavailable, g)
	}
	if h.cfg.Clock.Now().UnixNano()-r.readLastContact.Load() > int64(h.cfg.ElectionTimeout()) {
		return fmt.Errorf("%w: %v has not heard from its leader for over %v", ErrUnavailable, g, h.cfg.ElectionTimeout())
	}
	return nil
}

// Leader returns the leader of g as this node knows it (0 = unknown) and
// whether this node is it.
func (h *Host) Leader(g ids.GroupID) (ids.NodeID, bool) {
	r := h.replica(g)
	if r == nil {
		return 0, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return ids.NodeID(r.mu.lead), r.mu.leader
}

// Term returns g's current raft term as this node knows it, the leader
// it believes in (0 = unknown) and whether this node is that leader. A
// node that is leader at the same term throughout was leader without
// interruption (one leader per term).
func (h *Host) Term(g ids.GroupID) (term uint64, leader ids.NodeID, isLeader bool) {
	r := h.replica(g)
	if r == nil {
		return 0, 0, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mu.rn.BasicStatus().HardState.GetTerm(), ids.NodeID(r.mu.lead), r.mu.leader
}

// PriorLeader reports whether g may have had a leader before this node's
// current term: the last entry this node stores from an earlier term was
// written by a leader (term > 1; term 1 holds only the bootstrap
// configuration), or the log was compacted past what it can tell. A leader
// that served anything committed an entry in its term first, and every
// later leader stores that entry, so false means no earlier leader ever
// served (a new cluster's first minister need not fence its leases).
func (h *Host) PriorLeader(g ids.GroupID) bool {
	r := h.replica(g)
	if r == nil {
		return true
	}
	r.mu.Lock()
	cur := r.mu.rn.BasicStatus().HardState.GetTerm()
	r.mu.Unlock()
	first, err1 := r.ms.FirstIndex()
	last, err2 := r.ms.LastIndex()
	if err1 != nil || err2 != nil {
		return true
	}
	// Terms never decrease along the log: find the last index before the
	// current term by binary search over [first-1, last].
	lo, hi := first-1, last // invariant: the answer is in [lo-1, hi]
	for lo <= hi {
		mid := lo + (hi-lo)/2
		t, err := r.ms.Term(mid)
		if err != nil {
			return true
		}
		if t < cur {
			lo = mid + 1
		} else {
			if mid == 0 {
				break
			}
			hi = mid - 1
		}
	}
	if lo == first-1 && first > 1 {
		return true // everything stored is from this term, and more was compacted
	}
	if lo == 0 {
		return false
	}
	t, err := r.ms.Term(lo - 1)
	return err != nil || t > 1
}

// Receive steps messages that arrived from another node.
func (h *Host) Receive(msgs []GroupMessage) {
	now := h.cfg.Clock.Now().UnixNano()
	for _, gm := range msgs {
		r := h.replica(gm.Group)
		if r == nil {
			continue
		}
		r.mu.Lock()
		if err := r.mu.rn.Step(gm.Msg); err != nil && !errors.Is(err, raft.ErrStepPeerNotFound) {
			h.log.Debug("step", "group", uint64(gm.Group), "err", err)
		}
		switch gm.Msg.GetType() {
		case pb.MsgApp, pb.MsgHeartbeat, pb.MsgSnap:
			// Only the current leader's traffic of the current term
			// extends a clerk's right to serve reads; a deposed leader's
			// late heartbeat must not.
			if st := r.mu.rn.BasicStatus(); st.Lead == gm.Msg.GetFrom() && st.HardState.GetTerm() == gm.Msg.GetTerm() {
				r.readLastContact.Store(now)
			}
		}
		r.mu.Unlock()
	}
	h.signal()
}

// ReceiveSnapshot writes a streamed snapshot's data to the group's
// staging area as kvs produces it (memory: one page), then steps its
// MsgSnap; the data is installed when raft hands the snapshot back in a
// Ready. kvs calls add for every key (relative to the state prefix) and
// value, and returns the stream's error.
func (h *Host) ReceiveSnapshot(g ids.GroupID, msg *pb.Message, kvs func(add func(k, v []byte) error) error) error {
	r := h.replica(g)
	if r == nil {
		return ErrUnknownGroup
	}
	ps := &pendingSnapshot{index: msg.GetSnapshot().GetMetadata().GetIndex(), seq: r.stageSeq.Add(1)}
	stage, err := h.stageSnapshot(g, ps.index, ps.seq, kvs)
	if err != nil {
		return fmt.Errorf("multiraft: stage snapshot %d of group %v: %w", ps.index, g, err)
	}
	ps.stage = stage
	if r.gone.Load() {
		// Removed while it streamed (RemoveGroup deleted the key
		// range before these pages were written).
		h.dropStaged(stage)
		return ErrUnknownGroup
	}
	var dropped [][]byte
	r.mu.Lock()
	if old := r.mu.pendingSnaps[ps.index]; old != nil {
		dropped = append(dropped, old.stage)
	}
	// Keep at most the two newest: raft installs the newest it accepts.
	r.mu.pendingSnaps[ps.index] = ps
	for len(r.mu.pendingSnaps) > 2 {
		oldest := ps.index
		for i := range r.mu.pendingSnaps {
			oldest = min(oldest, i)
		}
		dropped = append(dropped, r.mu.pendingSnaps[oldest].stage)
		delete(r.mu.pendingSnaps, oldest)
	}
	r.readLastContact.Store(h.cfg.Clock.Now().UnixNano())
	err = r.mu.rn.Step(msg)
	r.mu.Unlock()
	h.signal()
	for _, p := range dropped {
		h.dropStaged(p)
	}
	if err != nil {
		return fmt.Errorf("multiraft: step snapshot: %w", err)
	}
	return nil
}

// ReportSnapshot tells raft whether streaming a snapshot to `to` worked.
func (h *Host) ReportSnapshot(g ids.GroupID, to ids.NodeID, ok bool) {
	r := h.replica(g)
	if r == nil {
		return
	}
	st := raft.SnapshotFinish
	if !ok {
		st = raft.SnapshotFailure
	}
	r.mu.Lock()
	r.mu.rn.ReportSnapshot(uint64(to), st)
	r.mu.Unlock()
	h.signal()
}

// ReportUnreachable tells every group that `to` could not be reached.
func (h *Host) ReportUnreachable(to ids.NodeID) {
	for _, r := range h.allReplicas() {
		r.mu.Lock()
		r.mu.rn.ReportUnreachable(uint64(to))
		r.mu.Unlock()
	}
}

// TransferLeader asks the leader of g to hand leadership to `to`.
func (h *Host) TransferLeader(g ids.GroupID, to ids.NodeID) error {
	r := h.replica(g)
	if r == nil {
		return ErrUnknownGroup
	}
	r.mu.Lock()
	r.mu.rn.TransferLeader(uint64(to))
	r.mu.Unlock()
	h.signal()
	return nil
}

// Campaign makes this node start an election for g now (tests, tools).
func (h *Host) Campaign(g ids.GroupID) error {
	r := h.replica(g)
	if r == nil {
		return ErrUnknownGroup
	}
	r.mu.Lock()
	err := r.mu.rn.Campaign()
	r.mu.Unlock()
	h.signal()
	return err
}

// GroupStatus describes a hosted group.
type GroupStatus struct {
	Group      ids.GroupID
	Leader     ids.NodeID
	Role       string
	Term       uint64
	Commit     uint64
	Applied    uint64
	FirstIndex uint64
	Voters     []ids.NodeID
	Learners   []ids.NodeID
}

// Status reports every hosted group.
func (h *Host) Status() []GroupStatus {
	var out []GroupStatus
	for _, r := range h.allReplicas() {
		r.mu.Lock()
		st := r.mu.rn.BasicStatus()
		var voters, learners []ids.NodeID
		for _, v := range r.mu.cs.GetVoters() {
			voters = append(voters, ids.NodeID(v))
		}
		for _, l := range r.mu.cs.GetLearners() {
			learners = append(learners, ids.NodeID(l))
		}
		r.mu.Unlock()
		first, _ := r.ms.FirstIndex()
		out = append(out, GroupStatus{
			Group:      r.id,
			Leader:     ids.NodeID(st.Lead),
			Role:       strings.TrimPrefix(st.RaftState.String(), "State"),
			Term:       st.HardState.GetTerm(),
			Commit:     st.HardState.GetCommit(),
			Applied:    r.applied.Load(),
			FirstIndex: first,
			Voters:     voters,
			Learners:   learners,
		})
	}
	return out
}

// MeanEntriesPerAppend is the mean number of entries per MsgApp sent.
func (h *Host) MeanEntriesPerAppend() float64 { return h.metrics.meanEntriesPerAppend() }

// raftLogger routes etcd raft's logging to slog; raft's Info level is
// chatty, so it is logged at Debug.
type raftLogger struct{ l *slog.Logger }

func (r raftLogger) Debug(v ...interface{})                   { r.l.Debug(fmt.Sprint(v...)) }
func (r raftLogger) Debugf(format string, v ...interface{})   { r.l.Debug(fmt.Sprintf(format, v...)) }
func (r raftLogger) Info(v ...interface{})                    { r.l.Debug(fmt.Sprint(v...)) }
func (r raftLogger) Infof(format string, v ...interface{})    { r.l.Debug(fmt.Sprintf(format, v...)) }
func (r raftLogger) Warning(v ...interface{})                 { r.l.Warn(fmt.Sprint(v...)) }
func (r raftLogger) Warningf(format string, v ...interface{}) { r.l.Warn(fmt.Sprintf(format, v...)) }
func (r raftLogger) Error(v ...interface{})                   { r.l.Error(fmt.Sprint(v...)) }
func (r raftLogger) Errorf(format string, v ...interface{})   { r.l.Error(fmt.Sprintf(format, v...)) }
func (r raftLogger) Fatal(v ...interface{})                   { panic(fmt.Sprint(v...)) }
func (r raftLogger) Fatalf(format string, v ...interface{})   { panic(fmt.Sprintf(format, v...)) }
func (r raftLogger) Panic(v ...interface{})                   { panic(fmt.Sprint(v...)) }
func (r raftLogger) Panicf(format string, v ...interface{})   { panic(fmt.Sprintf(format, v...)) }

// Read runs fn on a consistent view of group g's committed state (keys
// relative to the group's state prefix; hot keys come from the apply
// cache) and the applied index that view reflects. No apply batch or
// snapshot install lands while fn runs, so a multi-key read (a lookup
// reads the entry, then the inode) is never torn. Callers wait for the
// index they need first (WaitApplied); fn must be short.
func (h *Host) Read(g ids.GroupID, fn func(r engine.Reader, applied uint64) error) error {
	r := h.replica(g)
	if r == nil {
		return ErrUnknownGroup
	}
	base := engine.Prefixed{RW: engine.ReadOnly{Reader: h.cfg.Engine}, Prefix: engine.StatePrefix(uint64(g))}
	r.stateMu.RLock()
	defer r.stateMu.RUnlock()
	if r.gone.Load() {
		return ErrUnknownGroup
	}
	return fn(r.cache.Reader(base), r.applied.Load())
}

// CaughtUp reports whether this node leads g and `to` is an active
// follower holding its whole log: a leadership transfer to it would be
// quick (a transfer to a node that is down or behind stalls proposals
// for up to an election timeout).
func (h *Host) CaughtUp(g ids.GroupID, to ids.NodeID) bool {
	r := h.replica(g)
	if r == nil {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.mu.leader {
		return false
	}
	st := r.mu.rn.Status()
	pr, ok := st.Progress[uint64(to)]
	return ok && pr.RecentActive && pr.Match >= st.HardState.GetCommit()
}

// Groups lists the hosted groups in id order (cheaper than Status).
func (h *Host) Groups() []ids.GroupID {
	rs := h.allReplicas()
	out := make([]ids.GroupID, len(rs))
	for i, r := range rs {
		out[i] = r.id
	}
	return out
}
