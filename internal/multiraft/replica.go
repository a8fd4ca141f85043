package multiraft

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/govfs/govfs/internal/engine"
	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/wire"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
)

type reqKey struct{ client, seq uint64 }

type applyResult struct {
	res   *wire.Result
	index uint64
	err   error
}

// replica is one group hosted on this node.
type replica struct {
	id ids.GroupID
	sm StateMachine
	ms *raft.MemoryStorage

	applied atomic.Uint64
	// cache of the state range for apply; used only by the goroutine
	// applying this group (the Ready loop hands a group to one worker at
	// a time, and clears it on snapshot install between rounds).
	cache *stateCache
	// stateMu orders readers (RLock, Host.Read) against the moments the
	// group's state changes: an apply batch's commit, cache fold and
	// applied-index publication, or a snapshot install, happen under Lock,
	// so a read sees one consistent state and its applied index.
	stateMu sync.RWMutex
	// Lock-free copies for the read path (CheckReadable): the leader this
	// replica follows (0 = none), whether it is this node, and the last
	// time (unix ns) a leader's message arrived. Written under mu.
	readLead        atomic.Uint64
	readIsLeader    atomic.Bool
	readLastContact atomic.Int64
	// stageSeq numbers received snapshots so that two streams of the same
	// snapshot stage apart.
	stageSeq atomic.Uint64
	// gone: RemoveGroup deleted the replica's keys (set under stateMu).
	gone atomic.Bool
	// lastPersisted is the last log index on disk and prevHS the last
	// persisted hard state; owned by the Ready loop.
	lastPersisted uint64
	prevHS        *pb.HardState

	mu struct {
		sync.Mutex
		rn        *raft.RawNode
		lead      uint64
		leader    bool
		term      uint64
		cs        *pb.ConfState
		snapIndex uint64
		// snap: an engine snapshot made for a follower that needs one
		// (prepareSnapshot), until the transport takes it; preparing
		// while it is being made. Neither is held otherwise: an open
		// Pebble snapshot keeps every key it can see through
		// compactions, the truncated log included.
		snap      *snapRef
		preparing bool
		// pendingSnaps holds streamed snapshot data by index until raft
		// hands the snapshot back in a Ready (a rejected one is dropped
		// when a later one is installed, or replaced).
		pendingSnaps map[uint64]*pendingSnapshot
		waiters      map[reqKey][]chan applyResult
		// proposals queued since the last round, and their waiter keys
		proposals    []*pb.Entry
		proposalKeys []reqKey
		// readWaiters are the ReadIndex callers of each request handed to
		// raft, by its context's key; pendingReads those waiting for the
		// next round's request (flushReadsLocked).
		readWaiters  map[uint64][]chan uint64
		pendingReads []chan uint64
		appliedCh    chan struct{}
	}
}

// pendingSnapshot is a received snapshot staged on disk under stage.
type pendingSnapshot struct {
	index, seq uint64
	stage      []byte
}

// appliedNotify returns a channel closed at the next apply.
func (r *replica) appliedNotify() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mu.appliedCh
}

func (r *replica) publishAppliedLocked(idx uint64) {
	r.applied.Store(idx)
	close(r.mu.appliedCh)
	r.mu.appliedCh = make(chan struct{})
}

// failWaitersLocked answers every pending proposal and read with err; used
// when leadership is lost. The proposals may still commit under the new
// leader: clients retry with the same request id, which the dedup table
// answers.
func (r *replica) failWaitersLocked(err error) {
	for k, ws := range r.mu.waiters {
		for _, w := range ws {
			w <- applyResult{err: err}
		}
		delete(r.mu.waiters, k)
	}
}

// flushReadsLocked hands the ReadIndex callers queued since the last
// round to raft as one request. Every one of them arrived before this
// request captures the leader's commit index, so the index it is
// answered with serves them all (a caller arriving later waits for the
// next round's request, never for one taken before it arrived). One
// request means one heartbeat to each follower however many readers
// wait: with a request each, 24 walk-ahead lease grants sent 24.
func (r *replica) flushReadsLocked(h *Host) {
	if len(r.mu.pendingReads) == 0 {
		return
	}
	k := h.readCtx.Add(1)
	r.mu.readWaiters[k] = r.mu.pendingReads
	r.mu.pendingReads = nil
	r.mu.rn.ReadIndex(h.readRequestCtx(k))
}

// failReadsBeforeLocked fails the callers of requests made before the
// one with key k, which was just answered: raft answers a node's
// requests in order, so those were lost (a forwarded request dropped
// with a full queue, or by a node that had no leader); their callers
// retry rather than wait out their deadline, and their entries go.
func (r *replica) failReadsBeforeLocked(k uint64) {
	for key, chs := range r.mu.readWaiters {
		if key < k {
			for _, ch := range chs {
				close(ch)
			}
			delete(r.mu.readWaiters, key)
		}
	}
}

// failReadsLocked fails every ReadIndex caller (leadership changed, or
// the group is dropped).
func (r *replica) failReadsLocked() {
	for k, chs := range r.mu.readWaiters {
		for _, ch := range chs {
			close(ch)
		}
		delete(r.mu.readWaiters, k)
	}
	for _, ch := range r.mu.pendingReads {
		close(ch)
	}
	r.mu.pendingReads = nil
}

// flushProposalsLocked steps every queued proposal into raft as one
// MsgProp. Dropped proposals (leadership lost, uncommitted-size limit)
// fail their waiters so clients retry.
func (r *replica) flushProposalsLocked(self uint64) {
	if len(r.mu.proposals) == 0 {
		return
	}
	ents, keys := r.mu.proposals, r.mu.proposalKeys
	r.mu.proposals, r.mu.proposalKeys = nil, nil
	err := r.mu.rn.Step(&pb.Message{Type: new(pb.MsgProp), From: new(self), Entries: ents})
	if err == nil {
		return
	}
	if errors.Is(err, raft.ErrProposalDropped) {
		err = fmt.Errorf("%w: proposal dropped (leader change or overload)", ErrUnavailable)
	} else {
		err = fmt.Errorf("multiraft: propose: %w", err)
	}
	for _, k := range keys {
		for _, w := range r.mu.waiters[k] {
			w <- applyResult{err: err}
		}
		delete(r.mu.waiters, k)
	}
}

// snapRef is a reference-counted engine snapshot of a group's state at
// index; it stays open while a transport streams it. made is when it
// was taken (a prepared one nobody sent is dropped after a while).
type snapRef struct {
	mu    sync.Mutex
	refs  int
	snap  *engine.Snapshot
	group ids.GroupID
	index uint64
	made  time.Time
}

func (s *snapRef) acquire() *snapRef {
	s.mu.Lock()
	s.refs++
	s.mu.Unlock()
	return s
}

// Release implements SnapshotSource.
func (s *snapRef) Release() {
	s.mu.Lock()
	s.refs--
	last := s.refs == 0
	s.mu.Unlock()
	if last {
		s.snap.Close()
	}
}

// Scan implements SnapshotSource.
func (s *snapRef) Scan(fn func(k, v []byte) bool) error {
	p := engine.StatePrefix(uint64(s.group))
	n := len(p)
	return s.snap.Scan(p, engine.PrefixEnd(p), func(k, v []byte) bool { return fn(k[n:], v) })
}
