package multiraft

import (
	crand "crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/govfs/govfs/internal/engine"
	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/wire"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// Host runs every raft group of one node.
type Host struct {
	cfg     Config
	log     *slog.Logger
	metrics *metrics

	mu     sync.RWMutex
	groups map[ids.GroupID]*replica
	// removals are groups to drop between two rounds of the loop
	// (RemoveGroup), with where to report the outcome.
	removals []removal

	wake    chan struct{}
	stop    chan struct{}
	done    chan struct{}
	workers []chan func()
	wg      sync.WaitGroup

	started   bool // Start was called (Stop then waits for the loop)
	readCtx   atomic.Uint64
	readEpoch uint64
	clientID  uint64
	seq       atomic.Uint64

	fatalMu sync.Mutex
	fatal   error
	fatalCh chan struct{}
}

// NewHost returns a host; add groups with AddGroup, then Start.
func NewHost(cfg Config) (*Host, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	h := &Host{
		cfg:     cfg,
		log:     cfg.Logger.With("node", uint64(cfg.NodeID)),
		metrics: newMetrics(cfg.Registry),
		groups:  map[ids.GroupID]*replica{},
		wake:    make(chan struct{}, 1),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
		fatalCh: make(chan struct{}),
	}
	var epoch [8]byte
	if _, err := crand.Read(epoch[:]); err != nil {
		return nil, fmt.Errorf("multiraft: read-index epoch: %w", err)
	}
	h.readEpoch = binary.BigEndian.Uint64(epoch[:]) | 1
	// Internal proposals (leader duties) need request ids that never
	// repeat across restarts, or the dedup table would answer a new
	// command with an old result.
	h.clientID = h.readEpoch
	return h, nil
}

// The applied-state cache of each group: the hot keys of a busy ministry
// (inodes, entries, dedup records: ~250 bytes each) fit; a value above a
// quarter of a shard's share (512 KiB) is not cached.
const (
	stateCacheEntries = 1 << 16
	stateCacheBytes   = 32 << 20
)

// AddGroup hosts group g with state machine sm. When the group has no
// state on disk and peers is non-empty, it is bootstrapped with those
// voters (every initial member must bootstrap with the same list).
func (h *Host) AddGroup(g ids.GroupID, sm StateMachine, peers []ids.NodeID) error {
	return h.addGroup(g, sm, peers, false)
}

// JoinGroup hosts group g, which runs elsewhere, as a new member: with
// no state here, it waits for the leader to send the log or a snapshot
// (the leader adds it with ChangeMember). A replica with state on disk
// starts from it, as with AddGroup.
func (h *Host) JoinGroup(g ids.GroupID, sm StateMachine) error {
	return h.addGroup(g, sm, nil, true)
}

func (h *Host) addGroup(g ids.GroupID, sm StateMachine, peers []ids.NodeID, join bool) error {
	if h.HasGroup(g) {
		return fmt.Errorf("multiraft: group %v already hosted", g)
	}
	if err := h.finishInstall(uint64(g)); err != nil {
		return fmt.Errorf("multiraft: finish snapshot install of group %v: %w", g, err)
	}
	ld, err := loadGroup(h.cfg.Engine, uint64(g))
	if err != nil {
		return fmt.Errorf("multiraft: load group %v: %w", g, err)
	}
	rc := &raft.Config{
		ID:                        uint64(h.cfg.NodeID),
		ElectionTick:              h.cfg.ElectionTicks,
		HeartbeatTick:             h.cfg.HeartbeatTicks,
		Storage:                   ld.ms,
		Applied:                   ld.applied,
		MaxSizePerMsg:             h.cfg.MaxSizePerMsg,
		MaxInflightMsgs:           256,
		MaxUncommittedEntriesSize: 256 << 20,
		CheckQuorum:               true,
		PreVote:                   true,
		ReadOnlyOption:            raft.ReadOnlySafe,
		// Proposals are made on the leader only; one that reaches a node
		// that just stepped down is dropped (its waiter fails at once and
		// the client retries) rather than forwarded to a leader whose
		// answer nobody would wait for.
		DisableProposalForwarding: true,
		Logger:                    raftLogger{h.log.With("group", uint64(g))},
	}
	rn, err := raft.NewRawNode(rc)
	if err != nil {
		return fmt.Errorf("multiraft: start group %v: %w", g, err)
	}
	if !ld.exists && !join {
		if len(peers) == 0 {
			return fmt.Errorf("multiraft: group %v has no state on this node and no bootstrap peers", g)
		}
		ps := make([]raft.Peer, len(peers))
		for i, p := range peers {
			ps[i] = raft.Peer{ID: uint64(p)}
		}
		if err := rn.Bootstrap(ps); err != nil {
			return fmt.Errorf("multiraft: bootstrap group %v: %w", g, err)
		}
	}
	r := &replica{id: g, sm: sm, ms: ld.ms, cache: newStateCache(stateCacheEntries, stateCacheBytes)}
	r.prevHS, _, _ = ld.ms.InitialState()
	r.lastPersisted, _ = ld.ms.LastIndex()
	r.mu.rn = rn
	r.mu.cs = ld.cs
	r.mu.waiters = map[reqKey][]chan applyResult{}
	r.mu.readWaiters = map[uint64][]chan uint64{}
	r.mu.pendingSnaps = map[uint64]*pendingSnapshot{}
	r.mu.appliedCh = make(chan struct{})
	r.applied.Store(ld.applied)
	if ld.applied > 0 {
		r.mu.snapIndex = ld.applied
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.groups[g]; ok {
		return fmt.Errorf("multiraft: group %v already hosted", g)
	}
	h.groups[g] = r
	return nil
}

// HasGroup reports whether g is hosted here.
func (h *Host) HasGroup(g ids.GroupID) bool { return h.replica(g) != nil }

func (h *Host) replica(g ids.GroupID) *replica {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.groups[g]
}

func (h *Host) allReplicas() []*replica {
	h.mu.RLock()
	defer h.mu.RUnlock()
	out := make([]*replica, 0, len(h.groups))
	for _, r := range h.groups {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out
}

// Start runs the Ready loop and the apply workers.
func (h *Host) Start() {
	h.started = true
	h.workers = make([]chan func(), h.cfg.ApplyWorkers)
	for i := range h.workers {
		ch := make(chan func(), 64)
		h.workers[i] = ch
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			for f := range ch {
				f()
			}
		}()
	}
	go h.run()
}

// Stop stops the loop and waits for it. Pending proposals fail.
func (h *Host) Stop() {
	select {
	case <-h.stop:
		return
	default:
	}
	close(h.stop)
	if h.started {
		<-h.done
	}
	for _, ch := range h.workers {
		close(ch)
	}
	h.wg.Wait()
	for _, r := range h.allReplicas() {
		r.mu.Lock()
		r.failWaitersLocked(ErrStopped)
		if r.mu.snap != nil {
			r.mu.snap.Release()
			r.mu.snap = nil
		}
		r.mu.Unlock()
	}
}

// Fatal is closed when the host hit an unrecoverable error (disk failure,
// undecodable log); Err says which. The process should exit.
func (h *Host) Fatal() <-chan struct{} { return h.fatalCh }

// Err returns the fatal error, if any.
func (h *Host) Err() error {
	h.fatalMu.Lock()
	defer h.fatalMu.Unlock()
	return h.fatal
}

func (h *Host) setFatal(err error) {
	h.fatalMu.Lock()
	defer h.fatalMu.Unlock()
	if h.fatal == nil {
		h.fatal = err
		h.log.Error("multiraft: fatal", "err", err)
		close(h.fatalCh)
	}
}

func (h *Host) signal() {
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

func (h *Host) run() {
	defer close(h.done)
	t := h.cfg.Clock.NewTicker(h.cfg.TickInterval)
	defer t.Stop()
	// NB: batching uses the wall clock, not cfg.Clock: it is a throughput
	// knob with no effect on the protocol, and must not stall the loop of
	// a test driven by a manual clock.
	var lastRound time.Time
	lastEntries := 0
	for {
		select {
		case <-h.stop:
			return
		case <-h.fatalCh:
			<-h.stop
			return
		case <-t.C():
			for _, r := range h.allReplicas() {
				r.mu.Lock()
				r.mu.rn.Tick()
				r.mu.Unlock()
			}
		case <-h.wake:
			// Under load (woken again soon after the last round) wait a
			// little so that more proposals share the next round: fewer,
			// fuller MsgApps and fsyncs. An idle node answers at once.
			// Loaded means: the last round persisted several entries
			// (proposals queue up while a round runs) and this wake came
			// soon after it. A lone writer's rounds carry one entry each
			// and are never delayed: waking for each step of one commit
			// (proposal, MsgAppResp, apply) used to cost it ~1.6 ms.
			if d := h.cfg.BatchDelay; d > 0 && lastEntries >= 2 && time.Since(lastRound) < 4*d {
				time.Sleep(d)
			}
		}
		select {
		case <-h.fatalCh:
			// select picks among ready cases at random: a tick or a
			// wake may come after the failure. A failed round's Ready
			// was never advanced; another would make raft panic.
			continue
		default:
		}
		n, err := h.processReady()
		if err == nil {
			err = h.doRemovals()
		}
		if err != nil {
			h.setFatal(err)
		}
		lastRound, lastEntries = time.Now(), n
	}
}

type readyWork struct {
	r  *replica
	rd raft.Ready
	// snap is the staged data of the snapshot rd carries, if any;
	// superseded, the staging areas of older ones.
	snap       *pendingSnapshot
	superseded [][]byte
	// leader: the group was led by this node when the Ready was taken;
	// its messages may go out before its entries are persisted (Raft
	// thesis §10.2.1, as etcd does): a leader's own unpersisted entries
	// count for commitment only once its MsgAppResp-equivalent (the
	// persisted log) exists, which raft tracks itself.
	leader bool
}

// processReady runs one round of the loop over every group with work and
// returns how many log entries it persisted.
func (h *Host) processReady() (int, error) {
	var work []*readyWork
	entries := 0
	for _, r := range h.allReplicas() {
		r.mu.Lock()
		r.flushProposalsLocked(uint64(h.cfg.NodeID))
		r.flushReadsLocked(h)
		if r.mu.rn.HasReady() {
			w := &readyWork{r: r, rd: r.mu.rn.Ready()}
			h.noteSoftStateLocked(r, w.rd.SoftState, w.rd.HardState)
			// Read indexes go to their waiters now, not after this
			// round's fsync and apply (as etcd's server does): a reader
			// waits until its index is applied anyway. Under a stream of
			// writes each round is a few milliseconds, and a lease
			// request (confirmed by a read index) waited for one more.
			for _, rs := range w.rd.ReadStates {
				key := h.readKey(rs.RequestCtx)
				if chs, ok := r.mu.readWaiters[key]; ok && key != 0 {
					for _, ch := range chs {
						ch <- rs.Index // buffered: a caller gone meanwhile does not block
					}
					delete(r.mu.readWaiters, key)
					r.failReadsBeforeLocked(key)
				}
			}
			w.leader = r.mu.leader
			if !raft.IsEmptySnap(w.rd.Snapshot) {
				idx := w.rd.Snapshot.GetMetadata().GetIndex()
				ps := r.mu.pendingSnaps[idx]
				if ps == nil {
					r.mu.Unlock()
					return entries, fmt.Errorf("group %v: snapshot %d to apply but its data was not received", r.id, idx)
				}
				w.snap = ps
				for i, p := range r.mu.pendingSnaps {
					if i < idx {
						// Raft will not take an older one now; its
						// staging goes with the install's final batch.
						w.superseded = append(w.superseded, p.stage)
					}
					if i <= idx {
						delete(r.mu.pendingSnaps, i)
					}
				}
			}
			entries += len(w.rd.Entries)
			work = append(work, w)
		}
		r.mu.Unlock()
	}
	if len(work) == 0 {
		return entries, nil
	}

	// 0. Leaders replicate while they write their own disk.
	h.send(work, true)

	// 1. Persist every group's entries, hard state and snapshot: one batch,
	// at most one fsync.
	wb := h.cfg.Engine.NewWriteBatch()
	needSync := false
	for _, w := range work {
		if err := persistReady(wb, uint64(w.r.id), &w.rd, w.snap, w.superseded, &w.r.lastPersisted); err != nil {
			wb.Close()
			return entries, fmt.Errorf("group %v: persist: %w", w.r.id, err)
		}
		// A Ready that only moves the commit index need not be synced.
		hs := w.rd.HardState
		if !raft.IsEmptySnap(w.rd.Snapshot) || (hs != nil && raft.MustSync(hs, w.r.prevHS, len(w.rd.Entries))) ||
			(hs == nil && len(w.rd.Entries) > 0) {
			needSync = true
		}
		if hs != nil {
			w.r.prevHS = hs
		}
	}
	if k := h.cfg.Knobs; k != nil && k.BeforePersist != nil {
		if err := k.BeforePersist(); err != nil {
			wb.Close()
			return entries, err
		}
	}
	// A snapshot replaces a group's state range: hold its readers off
	// until the cache is cleared and the applied index moved.
	var installing []*replica
	unlockInstalling := func() {
		for _, r := range installing {
			r.stateMu.Unlock()
		}
		installing = nil
	}
	defer unlockInstalling() // error paths
	for _, w := range work {
		if !raft.IsEmptySnap(w.rd.Snapshot) {
			w.r.stateMu.Lock()
			installing = append(installing, w.r)
			// The staged keys go over the state range in pages before
			// the batch below records the snapshot (finishInstall ends
			// the job after a crash).
			m := &installMarker{meta: w.rd.Snapshot.GetMetadata(), hs: w.rd.HardState, stage: w.snap.stage}
			if m.hs == nil {
				m.hs = &pb.HardState{}
			}
			if err := h.copyStaged(uint64(w.r.id), m); err != nil {
				wb.Close()
				return entries, fmt.Errorf("group %v: install snapshot: %w", w.r.id, err)
			}
		}
	}
	if !wb.Empty() {
		t0 := h.cfg.Clock.Now()
		if err := wb.Commit(needSync); err != nil {
			wb.Close()
			return entries, err
		}
		if needSync {
			h.metrics.fsync.Observe(h.cfg.Clock.Now().Sub(t0).Seconds())
		}
	}
	wb.Close()
	h.metrics.readyGroups.Observe(float64(len(work)))

	for _, w := range work {
		if err := h.afterPersist(w); err != nil {
			return entries, err
		}
	}
	unlockInstalling()

	// 2. Followers and candidates speak only after persisting (votes,
	// append acknowledgements must be durable).
	h.send(work, false)

	// 3. Apply on the worker pool, then Advance.
	var wg sync.WaitGroup
	errs := make([]error, len(work))
	for i, w := range work {
		if len(w.rd.CommittedEntries) == 0 {
			continue
		}
		wg.Add(1)
		i, w := i, w
		h.workers[uint64(w.r.id)%uint64(len(h.workers))] <- func() {
			defer wg.Done()
			errs[i] = h.apply(w.r, w.rd.CommittedEntries)
		}
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return entries, err
	}
	again := false
	for _, w := range work {
		r := w.r
		r.mu.Lock()
		r.mu.rn.Advance(w.rd)
		if r.mu.rn.HasReady() {
			again = true
		}
		r.mu.Unlock()
	}
	if again {
		h.signal()
	}
	return entries, nil
}

func (h *Host) noteSoftStateLocked(r *replica, ss *raft.SoftState, hs *pb.HardState) {
	if hs != nil && hs.Term != nil {
		r.mu.term = hs.GetTerm()
	}
	if ss == nil {
		return
	}
	wasLeader := r.mu.leader
	if ss.Lead != r.mu.lead && !wasLeader {
		// Reads forwarded to the old leader will not be answered.
		r.failReadsLocked()
	}
	r.mu.lead = ss.Lead
	r.mu.leader = ss.RaftState == raft.StateLeader
	r.readLead.Store(ss.Lead)
	r.readIsLeader.Store(r.mu.leader)
	if wasLeader && !r.mu.leader {
		r.mu.proposals, r.mu.proposalKeys = nil, nil
		r.failWaitersLocked(&NotLeaderError{Group: r.id, Leader: ids.NodeID(ss.Lead)})
		r.failReadsLocked()
	}
	if r.mu.leader != wasLeader {
		h.log.Info("leadership changed", "group", uint64(r.id), "leader", r.mu.leader, "term", r.mu.term)
	}
}

// afterPersist makes the durable state visible to raft's storage.
func (h *Host) afterPersist(w *readyWork) error {
	r := w.r
	if !raft.IsEmptySnap(w.rd.Snapshot) {
		if err := r.ms.ApplySnapshot(w.rd.Snapshot); err != nil {
			return fmt.Errorf("group %v: apply snapshot to log: %w", r.id, err)
		}
		idx := w.rd.Snapshot.GetMetadata().GetIndex()
		r.mu.Lock()
		r.cache.clear() // the state range was replaced wholesale
		r.mu.cs = proto.Clone(w.rd.Snapshot.GetMetadata().GetConfState()).(*pb.ConfState)
		r.mu.snapIndex = idx
		r.publishAppliedLocked(idx)
		r.mu.Unlock()
		h.log.Info("installed snapshot", "group", uint64(r.id), "index", idx)
	}
	if err := r.ms.Append(w.rd.Entries); err != nil {
		return fmt.Errorf("group %v: append to log: %w", r.id, err)
	}
	if !raft.IsEmptyHardState(w.rd.HardState) {
		if err := r.ms.SetHardState(w.rd.HardState); err != nil {
			return err
		}
	}
	return nil
}

// send sends the messages of the groups whose leader flag equals leaders,
// coalesced per destination node.
func (h *Host) send(work []*readyWork, leaders bool) {
	per := map[ids.NodeID][]GroupMessage{}
	for _, w := range work {
		if w.leader != leaders {
			continue
		}
		for i, m := range w.rd.Messages {
			to := ids.NodeID(m.GetTo())
			if supersededCommitOnly(w.rd.Messages, i) {
				h.metrics.commitOnlySkipped.Inc()
				continue
			}
			switch m.GetType() {
			case pb.MsgSnap:
				// The engine snapshot is made when a follower needs one
				// (prepareSnapshot, at the applied index, which becomes
				// raft's snapshot point); raft asks again after the
				// failure reported here and then names that index. The
				// transport takes the reference.
				w.r.mu.Lock()
				src := w.r.mu.snap
				if src != nil && src.index == m.GetSnapshot().GetMetadata().GetIndex() {
					w.r.mu.snap = nil
				} else {
					src = nil
					if w.r.mu.snap == nil && !w.r.mu.preparing {
						w.r.mu.preparing = true
						h.wg.Add(1)
						go h.prepareSnapshot(w.r)
					}
				}
				w.r.mu.Unlock()
				if src == nil {
					h.ReportSnapshot(w.r.id, to, false)
					continue
				}
				h.metrics.snapshotsSent.Inc()
				h.cfg.Transport.SendSnapshot(to, w.r.id, m, src)
				continue
			case pb.MsgApp:
				h.metrics.appendEntries.Observe(float64(len(m.GetEntries())))
				h.metrics.noteAppend(len(m.GetEntries()))
			}
			per[to] = append(per[to], GroupMessage{Group: w.r.id, Msg: m})
		}
	}
	tos := make([]ids.NodeID, 0, len(per))
	for to := range per {
		tos = append(tos, to)
	}
	sort.Slice(tos, func(i, j int) bool { return tos[i] < tos[j] })
	for _, to := range tos {
		h.cfg.Transport.Send(to, per[to])
	}
}

// supersededCommitOnly says whether msgs[i] is an entry-less MsgApp (a
// commit index update or a probe) that a later MsgApp of the same Ready
// to the same follower supersedes: that one carries at least the same
// commit index and is checked against the follower's log the same way.
// A leader learning of a commit while new proposals wait emits both in
// one Ready; sending only the second saves a message and its MsgAppResp
// (dropping a message is always safe in Raft; this one is redundant).
func supersededCommitOnly(msgs []*pb.Message, i int) bool {
	m := msgs[i]
	if m.GetType() != pb.MsgApp || len(m.GetEntries()) > 0 {
		return false
	}
	for _, later := range msgs[i+1:] {
		if later.GetType() == pb.MsgApp && later.GetTo() == m.GetTo() && later.GetCommit() >= m.GetCommit() {
			return true
		}
	}
	return false
}

// apply applies committed entries of one group in one batch.
func (h *Host) apply(r *replica, ents []*pb.Entry) error {
	b := h.cfg.Engine.NewBatch()
	defer b.Close()
	view := newApplyView(b, engine.StatePrefix(uint64(r.id)), r.cache)
	type done struct {
		key reqKey
		res applyResult
	}
	var results []done
	confChanged := false
	last := ents[len(ents)-1].GetIndex()
	for _, e := range ents {
		switch e.GetType() {
		case pb.EntryNormal:
			if len(e.GetData()) == 0 {
				continue // leader's empty entry at the start of its term
			}
			cmd := &wire.Command{}
			if err := proto.Unmarshal(e.GetData(), cmd); err != nil {
				return fmt.Errorf("group %v: entry %d: undecodable command: %w", r.id, e.GetIndex(), err)
			}
			res, err := r.sm.Apply(view, e.GetIndex(), cmd)
			if err != nil {
				return fmt.Errorf("group %v: apply entry %d: %w", r.id, e.GetIndex(), err)
			}
			if req := cmd.GetReq(); req != nil {
				results = append(results, done{reqKey{req.GetClientId(), req.GetSeq()}, applyResult{res: res, index: e.GetIndex()}})
			}
		case pb.EntryConfChange, pb.EntryConfChangeV2:
			var cc pb.ConfChangeI
			if e.GetType() == pb.EntryConfChange {
				c := &pb.ConfChange{}
				if err := proto.Unmarshal(e.GetData(), c); err != nil {
					return fmt.Errorf("group %v: entry %d: undecodable conf change: %w", r.id, e.GetIndex(), err)
				}
				cc = c
			} else {
				c := &pb.ConfChangeV2{}
				if err := proto.Unmarshal(e.GetData(), c); err != nil {
					return fmt.Errorf("group %v: entry %d: undecodable conf change: %w", r.id, e.GetIndex(), err)
				}
				cc = c
			}
			r.mu.Lock()
			cs := r.mu.rn.ApplyConfChange(cc)
			r.mu.cs = cs
			r.mu.Unlock()
			confChanged = true
			cb, err := proto.Marshal(cs)
			if err != nil {
				return err
			}
			if err := b.Set(engine.GroupKey(uint64(r.id), keyConfState), cb); err != nil {
				return err
			}
		}
	}
	if err := b.Set(appliedKey(uint64(r.id)), u64(last)); err != nil {
		return err
	}
	// Readers (Host.Read) see the state between whole batches: commit,
	// cache fold and applied index move together under stateMu.
	r.stateMu.Lock()
	if err := b.Commit(false); err != nil {
		r.stateMu.Unlock()
		return fmt.Errorf("group %v: commit applied state: %w", r.id, err)
	}
	view.committed()
	r.mu.Lock()
	r.publishAppliedLocked(last)
	for _, d := range results {
		for _, w := range r.mu.waiters[d.key] {
			w <- d.res
		}
		delete(r.mu.waiters, d.key)
	}
	r.mu.Unlock()
	r.stateMu.Unlock()
	h.metrics.applied.Add(float64(len(ents)))
	return h.maybeCompact(r, last, confChanged)
}

// maybeCompact truncates the log once SnapshotEvery entries have been
// applied since the last truncation, or at once after a configuration
// change. The truncation point is raft's snapshot point (metadata only:
// the engine snapshot is made when a follower needs it).
//
// How much is kept: a leader keeps what its followers have not got yet
// (their match index), at most KeepEntries; any other node keeps
// SnapshotEvery entries (for followers a little behind, should it be
// elected). So with every follower in step the entries are deleted
// within about 2×SnapshotEvery entries of being written, usually before
// Pebble flushes them from its memtable: an entry's bytes are then
// written once (the WAL), not again to level 0 and by every compaction
// below it (bench mount write_4k, 4 KiB inline writes: entries kept
// 5,000-25,000 deep doubled each node's disk writes and compactions).
func (h *Host) maybeCompact(r *replica, applied uint64, force bool) error {
	now := h.cfg.Clock.Now()
	r.mu.Lock()
	due := applied-r.mu.snapIndex >= h.cfg.SnapshotEvery || (force && applied > r.mu.snapIndex)
	if due && r.mu.snap != nil && now.Sub(r.mu.snap.made) > preparedSnapshotTTL {
		// Prepared for a follower that no longer asks (it caught up
		// from the log, or this node lost the lead).
		r.mu.snap.Release()
		r.mu.snap = nil
	}
	if !due || r.mu.preparing || r.mu.snap != nil {
		// A snapshot prepared for a follower must stay raft's snapshot
		// point until raft sends it.
		r.mu.Unlock()
		return nil
	}
	cs := r.mu.cs
	keep := min(applied, h.cfg.SnapshotEvery)
	if r.mu.leader {
		keep = 0
		for id, pr := range r.mu.rn.Status().Progress {
			if id != uint64(h.cfg.NodeID) && pr.Match < applied {
				keep = max(keep, applied-pr.Match)
			}
		}
	}
	keep = min(keep, h.cfg.KeepEntries, applied)
	r.mu.Unlock()
	snap, err := r.ms.CreateSnapshot(applied, cs, nil)
	if errors.Is(err, raft.ErrSnapOutOfDate) {
		return nil // prepareSnapshot, started after the check above, got there first
	}
	if err != nil {
		return fmt.Errorf("group %v: create snapshot at %d: %w", r.id, applied, err)
	}
	mb, err := proto.Marshal(snap.GetMetadata())
	if err != nil {
		return err
	}
	wb := h.cfg.Engine.NewWriteBatch()
	defer wb.Close()
	_ = wb.Set(engine.GroupKey(uint64(r.id), keySnapMeta), mb)
	// The entries up to compactTo go (it stays as raft's dummy entry);
	// a follower at match m needs m+1 on.
	compactTo := applied - keep
	first, _ := r.ms.FirstIndex()
	if compactTo > first {
		if err := r.ms.Compact(compactTo); err != nil && !errors.Is(err, raft.ErrCompacted) {
			return fmt.Errorf("group %v: compact log to %d: %w", r.id, compactTo, err)
		}
		_ = wb.DeleteRange(engine.LogKey(uint64(r.id), 0), engine.LogKey(uint64(r.id), compactTo))
	}
	if err := wb.Commit(false); err != nil {
		return err
	}
	r.mu.Lock()
	r.mu.snapIndex = applied
	r.mu.Unlock()
	h.metrics.snapshotsTaken.Inc()
	return nil
}

// preparedSnapshotTTL: how long a snapshot prepared for a follower waits
// for raft to send it before log truncation goes on without it (raft
// asks again at its next heartbeat response, every tick).
const preparedSnapshotTTL = 10 * time.Second

// prepareSnapshot makes an engine snapshot of r's state for a follower
// that needs one, at r's applied index read from the snapshot itself
// (the applied index and conf state are written with the state they
// describe), and makes that index raft's snapshot point so that raft's
// next MsgSnap names it (send). All of it under stateMu: no snapshot
// being installed rewrites the state range meanwhile, and a group being
// removed (gone) gets none, or has it released (RemoveGroups). It runs
// in h.wg, so Stop releases what it made.
func (h *Host) prepareSnapshot(r *replica) {
	defer h.wg.Done()
	r.stateMu.Lock()
	defer r.stateMu.Unlock()
	var ref *snapRef
	defer func() {
		r.mu.Lock()
		r.mu.preparing = false
		r.mu.snap = ref
		r.mu.Unlock()
		h.signal()
	}()
	select {
	case <-h.stop:
		return
	default:
	}
	if r.gone.Load() {
		return
	}
	es := h.cfg.Engine.NewSnapshot()
	idx, err := h.snapshotPoint(r, es)
	if err != nil {
		es.Close()
		h.log.Warn("prepare a snapshot for a follower", "group", uint64(r.id), "err", err)
		return
	}
	ref = &snapRef{refs: 1, snap: es, group: r.id, index: idx, made: h.cfg.Clock.Now()}
}

// snapshotPoint makes raft's snapshot point of r the applied index that
// engine snapshot es holds, with the conf state it holds, and returns it.
func (h *Host) snapshotPoint(r *replica, es *engine.Snapshot) (uint64, error) {
	ab, err := es.Get(appliedKey(uint64(r.id)))
	if err != nil || len(ab) != 8 {
		return 0, fmt.Errorf("read the applied index: %v (%d bytes)", err, len(ab))
	}
	idx := binary.BigEndian.Uint64(ab)
	cs := &pb.ConfState{}
	if b, err := es.Get(engine.GroupKey(uint64(r.id), keyConfState)); err != nil {
		return 0, fmt.Errorf("read the conf state: %w", err)
	} else if b != nil {
		if err := proto.Unmarshal(b, cs); err != nil {
			return 0, fmt.Errorf("decode the conf state: %w", err)
		}
	}
	if _, err := r.ms.CreateSnapshot(idx, cs, nil); err != nil && !errors.Is(err, raft.ErrSnapOutOfDate) {
		return 0, fmt.Errorf("snapshot point %d: %w", idx, err)
	}
	if cur, err := r.ms.Snapshot(); err != nil || cur.GetMetadata().GetIndex() != idx {
		// The log was truncated past idx (a maybeCompact that started
		// before preparing was noted): raft asks again.
		return 0, fmt.Errorf("snapshot point moved past %d", idx)
	}
	return idx, nil
}
