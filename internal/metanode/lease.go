package metanode

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/govfs/govfs/internal/engine"
	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/lease"
	"github.com/govfs/govfs/internal/multiraft"
	"github.com/govfs/govfs/internal/namespace"
	"github.com/govfs/govfs/internal/rpc"
	"github.com/govfs/govfs/internal/wire"
)

// Leases (DESIGN §5) on the minister: the lease table of each ministry
// this node leads, volatile (not in the log), behind the Lease RPC.
//
// Why a long-poll keepalive rather than a server stream: a client renews
// with LEASE_KEEPALIVE, and the minister holds the answer until one of
// the client's leases is revoked or a third of the TTL passes. The holder
// thus hears of a revoke within a round trip (not at its next periodic
// renewal), over the same unary RPC, routing (NOT_LEADER hints) and
// retries as every other call; there is no stream state to rebuild after
// a minister change, and a holder that stops asking simply expires.
//
// Safety of a grant across minister changes. Every ACQUIRE and KEEPALIVE
// first confirms this node's leadership with a raft ReadIndex (a quorum
// heartbeat) that starts after the request arrived. A later leader's
// election completes after that confirmation, hence after the client
// sent the request; the client counts its lease from its send time, so
// its lease ends before the new minister's fence (one TTL from when it
// noticed its election) does. Clients trust a lease for 90% of the TTL to
// leave room for clocks running at slightly different rates.

// maxLeaseWait caps how long one ACQUIRE or KEEPALIVE is held here: a
// quarter of the TTL, so a lease granted at the end of a wait still has
// most of its TTL left when the client gets it (the client counts from
// its send time and asks again for longer waits).
func (s *leaseService) maxWait() time.Duration { return s.ttl / 4 }

type leaseService struct {
	n   *Node
	ttl time.Duration

	mu struct {
		sync.Mutex
		groups map[ids.GroupID]*groupLeases
	}
}

// groupLeases is one ministry's lease state on this node.
type groupLeases struct {
	// term is the raft term the table belongs to; 0 when this node is not
	// the leader (table nil).
	term  uint64
	table *lease.Table
	// changed is closed (and replaced) whenever something a waiter may be
	// waiting for happens: a revoke, a release, a term change, the end
	// of a fence.
	changed chan struct{}
	// rc is the term's lease sessions and reclaim state (reclaim.go).
	rc reclaimState
	// sessMu orders the group's session opens and closes (reclaim.go);
	// taken before mu, never while holding it.
	sessMu sync.Mutex
	// closing: clients whose session close was proposed without an
	// answer (it may still commit); kept across terms (reclaim.go).
	closing map[lease.ClientID]bool
	// entries are the names changes resolved and are being proposed
	// with (holdEntriesLocked), and until when at most.
	entries map[entryKey]entryHold
	// entryTokens numbers the changes holding names.
	entryTokens uint64
}

// maxEntryHolds: past it, expired holds are swept.
const maxEntryHolds = 4096

// entryKey is a name in a directory.
type entryKey struct {
	parent ids.Ino
	name   string
}

type entryHold struct {
	token uint64
	until time.Time
	// owner: the request holding it; its retry takes the hold over (a
	// proposal that outlived the client's deadline keeps its names
	// until it expires, and the retry would otherwise wait for itself).
	owner reqKey
	// waited: another change found the name held (its release wakes
	// the waiters; without, it wakes nobody: a broadcast also wakes
	// every keepalive's long poll).
	waited bool
}

// forEachCmd calls fn with each command of a batch, or with cmd itself.
func forEachCmd(cmd *wire.Command, fn func(*wire.Command)) {
	if b := cmd.GetBatch(); b != nil {
		for _, c := range b.GetCmds() {
			fn(c)
		}
		return
	}
	fn(cmd)
}

// reqKey names a client request (a batch by its first command's).
type reqKey struct {
	client, seq uint64
}

func reqOf(cmd *wire.Command) reqKey {
	r := cmd.GetReq()
	if r == nil {
		if cs := cmd.GetBatch().GetCmds(); len(cs) > 0 {
			r = cs[0].GetReq()
		}
	}
	return reqKey{r.GetClientId(), r.GetSeq()}
}

// changedEntries returns the names cmd removes, replaces or moves, whose
// inodes drainReaders resolves.
func changedEntries(cmd *wire.Command) []entryKey {
	var keys []entryKey
	add := func(c *wire.Command) {
		switch op := c.GetOp().(type) {
		case *wire.Command_Unlink:
			keys = append(keys, entryKey{ids.Ino(op.Unlink.GetParent()), string(op.Unlink.GetName())})
		case *wire.Command_Rename:
			keys = append(keys, entryKey{ids.Ino(op.Rename.GetParent()), string(op.Rename.GetName())},
				entryKey{ids.Ino(op.Rename.GetNewParent()), string(op.Rename.GetNewName())})
		}
	}
	forEachCmd(cmd, add)
	return keys
}

// holdEntriesLocked takes keys for a change about to be proposed, once no
// other change holds one of them (else it reports when the earliest hold
// ends). Two renames onto one name from two clients both resolved the
// name's old inode and drained its readers; the first then put a new
// inode there, which a third client could lease before the second
// rename, applied next, unlinked it: that client's lease was never
// revoked, and its mount kept answering the name with a removed file.
// With the names held from the last resolution until the change is
// applied, the second resolves the name again after the first, and
// drains the new inode's readers.
func (gl *groupLeases) holdEntriesLocked(now time.Time, keys []entryKey, until time.Time, owner reqKey) (token uint64, busyUntil time.Time) {
	for _, k := range keys {
		if h, ok := gl.entries[k]; ok && now.Before(h.until) && (owner.client == 0 || h.owner != owner) {
			busyUntil = earliestTime(busyUntil, h.until)
			h.waited = true
			gl.entries[k] = h
		}
	}
	if !busyUntil.IsZero() {
		return 0, busyUntil
	}
	if gl.entries == nil {
		gl.entries = map[entryKey]entryHold{}
	}
	if len(gl.entries) > maxEntryHolds {
		// Holds of changes never answered, expired.
		for k, h := range gl.entries {
			if !now.Before(h.until) {
				delete(gl.entries, k)
			}
		}
	}
	gl.entryTokens++
	token = gl.entryTokens
	for _, k := range keys {
		gl.entries[k] = entryHold{token: token, until: until, owner: owner}
	}
	return token, time.Time{}
}

// releaseEntriesLocked gives back what token holds of keys.
func (gl *groupLeases) releaseEntriesLocked(keys []entryKey, token uint64) {
	waited := false
	for _, k := range keys {
		if h, ok := gl.entries[k]; ok && h.token == token {
			delete(gl.entries, k)
			waited = waited || h.waited
		}
	}
	if waited {
		gl.broadcastLocked()
	}
}

func newLeaseService(n *Node) *leaseService {
	s := &leaseService{n: n, ttl: n.cfg.LeaseTTL}
	if s.ttl <= 0 {
		s.ttl = lease.DefaultTTL
	}
	s.mu.groups = map[ids.GroupID]*groupLeases{}
	return s
}

func (gl *groupLeases) broadcastLocked() {
	close(gl.changed)
	gl.changed = make(chan struct{})
}

// syncLocked brings g's lease state in line with raft: a new table,
// fenced for one TTL, when this node became leader in a new term; no
// table when it is not the leader (NotLeaderError).
func (s *leaseService) syncLocked(g ids.GroupID) (*groupLeases, error) {
	gl := s.mu.groups[g]
	if gl == nil {
		gl = &groupLeases{changed: make(chan struct{})}
		s.mu.groups[g] = gl
	}
	term, lead, isLeader := s.n.host.Term(g)
	if !isLeader {
		if gl.table != nil {
			gl.table, gl.term = nil, 0
			gl.broadcastLocked()
		}
		return gl, &multiraft.NotLeaderError{Group: g, Leader: lead}
	}
	now := s.n.cfg.Clock.Now()
	if gl.term != term || gl.table == nil {
		gl.table = lease.New(lease.Config{TTL: s.ttl, FirstID: lease.ID(term<<32 | 1)})
		gl.term = term
		gl.broadcastLocked()
		prior := s.n.host.PriorLeader(g)
		gl.rc = newReclaimState(prior, now)
		if prior {
			gl.table.StartTerm(now)
			s.n.log.Info("minister: lease table started, fenced until the predecessor's leases are reclaimed (at most one TTL)",
				"group", uint64(g), "term", term, "ttl", s.ttl)
		} else {
			s.n.log.Info("minister: lease table started (first minister of the group: no fence)", "group", uint64(g), "term", term)
		}
	}
	s.maybeEndReclaimLocked(g, gl, now)
	return gl, nil
}

// watch notices leadership changes promptly (so a new minister's fence
// starts right after its election, not at its first lease request, and
// long polls on a deposed minister end), until the node stops.
func (s *leaseService) watch(stop <-chan struct{}) {
	t := s.n.cfg.Clock.NewTicker(min(100*time.Millisecond, s.ttl/20))
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C():
		}
		type load struct {
			g    ids.GroupID
			term uint64
		}
		var loads []load
		var led []ids.GroupID
		s.mu.Lock()
		for _, st := range s.n.host.Status() {
			if st.Group == ids.PresidentGroup {
				continue
			}
			gl, err := s.syncLocked(st.Group)
			if err != nil {
				continue
			}
			led = append(led, st.Group)
			if gl.rc.sessions == nil {
				loads = append(loads, load{st.Group, gl.term})
			}
		}
		s.mu.Unlock()
		// A new minister reads whose leases to wait for; a settled one
		// closes idle sessions (reclaim.go).
		for _, l := range loads {
			s.loadSessions(l.g, l.term)
		}
		for _, g := range led {
			s.sweepSessions(g)
		}
	}
}

// wait blocks until ch closes, at passes, or ctx ends.
func (s *leaseService) wait(ctx context.Context, ch <-chan struct{}, at time.Time) {
	d := at.Sub(s.n.cfg.Clock.Now())
	if d <= 0 {
		return
	}
	select {
	case <-ch:
	case <-s.n.cfg.Clock.After(d):
	case <-ctx.Done():
	case <-s.n.stop:
	}
}

func leaseMode(m wire.LeaseMode) lease.Mode {
	switch m {
	case wire.LeaseMode_LEASE_READ:
		return lease.Read
	case wire.LeaseMode_LEASE_WRITE:
		return lease.Write
	}
	return 0
}

func wireLeaseMode(m lease.Mode) wire.LeaseMode {
	switch m {
	case lease.Read:
		return wire.LeaseMode_LEASE_READ
	case lease.Write:
		return wire.LeaseMode_LEASE_WRITE
	}
	return wire.LeaseMode_LEASE_NONE
}

func (s *metaService) Lease(ctx context.Context, req *wire.LeaseRequest) (*wire.LeaseResponse, error) {
	if st := s.checkCluster(req.GetClusterId()); st != nil {
		return &wire.LeaseResponse{Status: st}, nil
	}
	g := ids.GroupID(req.GetGroup())
	switch {
	case g == ids.PresidentGroup:
		return &wire.LeaseResponse{Status: statusOf(wire.Code_INVALID, "the president group (0) holds no files")}, nil
	case !s.n.host.HasGroup(g):
		return &wire.LeaseResponse{Status: s.errStatus(g, multiraft.ErrUnknownGroup)}, nil
	case req.GetClientId() == 0:
		return &wire.LeaseResponse{Status: statusOf(wire.Code_INVALID, "lease request without a client id")}, nil
	}
	if err := s.n.clientIDs.check(rpc.CallerOf(ctx), req.GetClientId(), s.n.cfg.Clock.Now()); err != nil {
		return nil, err
	}
	if req.GetOp() == wire.LeaseOp_LEASE_ACQUIRE_BATCH {
		return s.leaseBatch(ctx, req), nil
	}
	s.n.ops.add(g)
	ls := s.n.leases
	ctx, cancel := withDefaultDeadline(ctx)
	defer cancel()
	var resp *wire.LeaseResponse
	var err error
	switch req.GetOp() {
	case wire.LeaseOp_LEASE_ACQUIRE:
		if st := s.n.checkEpoch(ctx, g, req.GetEpoch()); st != nil {
			return &wire.LeaseResponse{Status: st}, nil
		}
		return s.acquire(ctx, g, req), nil
	case wire.LeaseOp_LEASE_KEEPALIVE:
		resp, err = ls.keepalive(ctx, g, req)
	case wire.LeaseOp_LEASE_RELEASE:
		resp, err = ls.release(g, req)
	case wire.LeaseOp_LEASE_UPGRADE:
		if st := s.n.checkEpoch(ctx, g, req.GetEpoch()); st != nil {
			return &wire.LeaseResponse{Status: st}, nil
		}
		if st := s.leaseRoute(g, ids.Ino(req.GetIno())); st != nil {
			return &wire.LeaseResponse{Status: st}, nil
		}
		resp, err = ls.upgrade(ctx, g, req)
	case wire.LeaseOp_LEASE_DOWNGRADE:
		resp, err = ls.downgrade(g, req)
	default:
		return &wire.LeaseResponse{Status: statusOf(wire.Code_INVALID, "unknown lease op %v", req.GetOp())}, nil
	}
	return s.leaseAnswer(g, resp, err), nil
}

// acquire answers an ACQUIRE past the cluster, client and epoch checks
// (Lease, leaseBatch).
func (s *metaService) acquire(ctx context.Context, g ids.GroupID, req *wire.LeaseRequest) *wire.LeaseResponse {
	// A lease on an inode that is being moved, or that lives in
	// another ministry, is not this minister's to give.
	if st := s.leaseRoute(g, ids.Ino(req.GetIno())); st != nil {
		return &wire.LeaseResponse{Status: st}
	}
	ls := s.n.leases
	resp, err := ls.acquire(ctx, g, req)
	if err == nil && resp.GetLease().GetId() != 0 {
		// A request that waited may have been granted just after a
		// move froze the inode (the freeze's intent ends when it is
		// applied): such a lease is not this minister's to keep.
		if st := s.leaseRoute(g, ids.Ino(req.GetIno())); st != nil {
			_, _ = ls.release(g, &wire.LeaseRequest{ClientId: req.GetClientId(), Ids: []uint64{resp.GetLease().GetId()}})
			return &wire.LeaseResponse{Status: st}
		}
	}
	return s.leaseAnswer(g, resp, err)
}

// leaseAnswer is the response to a lease op that answered resp, err.
func (s *metaService) leaseAnswer(g ids.GroupID, resp *wire.LeaseResponse, err error) *wire.LeaseResponse {
	if err != nil {
		if errors.Is(err, lease.ErrBadRequest) {
			return &wire.LeaseResponse{Status: statusOf(wire.Code_INVALID, "%v", err)}
		}
		if errors.Is(err, lease.ErrTooMany) {
			err = fmt.Errorf("%w: %v", syscall.ENOLCK, err)
		}
		out := &wire.LeaseResponse{Status: s.errStatus(g, err)}
		if resp != nil && errors.Is(err, syscall.EAGAIN) {
			// The refusal's hints: when to ask again, what is in the way.
			out.RetryAfterMs, out.Conflict = resp.GetRetryAfterMs(), resp.GetConflict()
		}
		return out
	}
	resp.Status = &wire.Status{}
	resp.TtlMs = uint64(s.n.leases.ttl / time.Millisecond)
	return resp
}

// maxLeaseBatch bounds the acquires of one LEASE_ACQUIRE_BATCH, and
// leaseBatchWorkers how many of them run at once.
const (
	maxLeaseBatch     = 256
	leaseBatchWorkers = 32
)

// leaseBatch answers a LEASE_ACQUIRE_BATCH: the cluster and client were
// checked for the batch (Lease), the epoch and leadership are here, once;
// then each acquire as its own ACQUIRE (at once: their leadership
// confirmations share raft read requests), with the batch's client. They are
// tries: one that would wait for other holders is refused as a whole
// batch would be held by it.
func (s *metaService) leaseBatch(ctx context.Context, req *wire.LeaseRequest) *wire.LeaseResponse {
	subs := req.GetAcquires()
	if len(subs) == 0 || len(subs) > maxLeaseBatch {
		return &wire.LeaseResponse{Status: statusOf(wire.Code_INVALID, "a lease batch of %d acquires (1 to %d)", len(subs), maxLeaseBatch)}
	}
	for i, sub := range subs {
		if sub.GetOp() != wire.LeaseOp_LEASE_ACQUIRE || sub.GetWaitMs() != 0 {
			return &wire.LeaseResponse{Status: statusOf(wire.Code_INVALID, "acquire %d of the lease batch is a %v waiting %d ms: a batch holds ACQUIREs that do not wait", i, sub.GetOp(), sub.GetWaitMs())}
		}
	}
	// The group's refusals (a stale epoch, not the leader) answer the
	// batch as a whole, so the client retries it, not each try alone.
	g := ids.GroupID(req.GetGroup())
	ctx, cancel := withDefaultDeadline(ctx)
	defer cancel()
	if st := s.n.checkEpoch(ctx, g, req.GetEpoch()); st != nil {
		return &wire.LeaseResponse{Status: st}
	}
	if err := s.n.leases.confirm(ctx, g); err != nil {
		return &wire.LeaseResponse{Status: s.errStatus(g, err)}
	}
	out := make([]*wire.LeaseResponse, len(subs))
	// A try of the batch that meets another client's buffered lease is
	// not held here: it is answered UNAVAILABLE, and its caller asks
	// again alone (and waits then).
	ctx = context.WithValue(ctx, batchTryKey{}, true)
	var wg sync.WaitGroup
	// At most leaseBatchWorkers at a time: a batch is one request to
	// the in-flight limit.
	sem := make(chan struct{}, leaseBatchWorkers)
	for i, sub := range subs {
		sub.ClusterId, sub.Group, sub.ClientId, sub.Epoch = req.GetClusterId(), req.GetGroup(), req.GetClientId(), req.GetEpoch()
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			s.n.ops.add(g)
			out[i] = s.acquire(ctx, g, sub)
		}()
	}
	wg.Wait()
	return &wire.LeaseResponse{Status: &wire.Status{}, Acquired: out, TtlMs: uint64(s.n.leases.ttl / time.Millisecond)}
}

// upgrade answers LEASE_UPGRADE: the client's read lease ids[0] on ino
// becomes a buffered write lease in place (lease.Table.Upgrade). No
// leadership confirmation: the lease is trusted no longer than the read
// lease was, whose grant and renewals were confirmed. With open, the
// file's open read follows, current for the reason openAfterGrant's is:
// every other client's change of the file would have revoked the read
// lease first, and a revoked lease is not upgraded.
func (ls *leaseService) upgrade(ctx context.Context, g ids.GroupID, req *wire.LeaseRequest) (*wire.LeaseResponse, error) {
	if len(req.GetIds()) != 1 || req.GetIno() == 0 {
		return nil, fmt.Errorf("%w: an upgrade names one lease and its inode", lease.ErrBadRequest)
	}
	client, id, ino := lease.ClientID(req.GetClientId()), lease.ID(req.GetIds()[0]), ids.Ino(req.GetIno())
	ls.mu.Lock()
	gl, err := ls.syncLocked(g)
	if err != nil {
		ls.mu.Unlock()
		return nil, err
	}
	now := ls.n.cfg.Clock.Now()
	if held := gl.table.Leases(now, ino); !slices.ContainsFunc(held, func(l lease.Lease) bool { return l.ID == id }) {
		ls.mu.Unlock()
		return nil, fmt.Errorf("%w: lease %d is not on ino %v", syscall.ENOENT, id, ino)
	}
	out, err := gl.table.Upgrade(now, client, id)
	ls.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", syscall.ENOENT, err)
	}
	if !out.Granted {
		after := max(time.Millisecond, out.RetryAt.Sub(now))
		return &wire.LeaseResponse{RetryAfterMs: uint64((after + time.Millisecond - 1) / time.Millisecond), Conflict: conflictOf(lease.Request{Client: client}, out.Conflict)},
			fmt.Errorf("%w: ino %v is leased to, or asked for by, another client", syscall.EAGAIN, ino)
	}
	resp := &wire.LeaseResponse{Lease: &wire.LeaseGrant{Id: uint64(id), Ino: uint64(ino), Mode: wire.LeaseMode_LEASE_WRITE, Buffered: true}}
	if req.GetOpen() {
		resp.Opened = ls.openAfterGrant(rpc.CallerOf(ctx), g, ino, req.GetOpenMaxChunks(), false)
	}
	return resp, nil
}

// downgrade answers LEASE_DOWNGRADE (lease.Table.Downgrade).
func (ls *leaseService) downgrade(g ids.GroupID, req *wire.LeaseRequest) (*wire.LeaseResponse, error) {
	if len(req.GetIds()) != 1 {
		return nil, fmt.Errorf("%w: a downgrade names one lease", lease.ErrBadRequest)
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	gl, err := ls.syncLocked(g)
	if err != nil {
		return nil, err
	}
	if err := gl.table.Downgrade(ls.n.cfg.Clock.Now(), lease.ClientID(req.GetClientId()), lease.ID(req.GetIds()[0]), 0); err != nil {
		return nil, fmt.Errorf("%w: %v", syscall.ENOENT, err)
	}
	return &wire.LeaseResponse{}, nil
}

// batchTryKey marks the context of a lease batch's tries (leaseBatch).
type batchTryKey struct{}

// pinBuffered keeps client's buffered leases list from expiring while a
// change made under them is proposed (MutateRequest.buffered_leases);
// lost lists those it does not hold (nothing pinned). Call the returned
// function once the proposal is answered: applied, the leases become
// read leases again (their writes are in; the holder knows this from
// the answer, which saves it a LEASE_DOWNGRADE each).
func (ls *leaseService) pinBuffered(g ids.GroupID, client lease.ClientID, list []uint64, seq uint64) (unpin func(applied bool), lost []uint64, err error) {
	held := leaseIDs(list)
	ls.mu.Lock()
	defer ls.mu.Unlock()
	gl, err := ls.syncLocked(g)
	if err != nil {
		return nil, nil, err
	}
	now := ls.n.cfg.Clock.Now()
	if l := gl.table.Pin(now, client, held, seq); len(l) > 0 {
		if gl.table.Fenced(now) {
			// A new minister: the holder may not have reclaimed them
			// yet (it does at its next keepalive).
			return nil, nil, fmt.Errorf("%w: buffered write leases %v are not reclaimed yet (a new minister's fence)", multiraft.ErrUnavailable, wireIDs(l))
		}
		return nil, wireIDs(l), nil
	}
	table := gl.table
	return func(applied bool) {
		ls.mu.Lock()
		defer ls.mu.Unlock()
		table.Unpin(held)
		if applied {
			for _, id := range held {
				_ = table.Downgrade(ls.n.cfg.Clock.Now(), client, id, seq)
			}
		}
		// Whoever waits for these leases (a drain, a request) looks
		// again: they may be gone or read leases now.
		if gl := ls.mu.groups[g]; gl != nil && gl.table == table {
			gl.broadcastLocked()
		}
	}, nil, nil
}

// confirm checks that this node leads g, with a quorum (see the safety
// note at the top of this file).
func (ls *leaseService) confirm(ctx context.Context, g ids.GroupID) error {
	ls.mu.Lock()
	_, err := ls.syncLocked(g)
	ls.mu.Unlock()
	if err != nil {
		return err
	}
	if _, err := ls.n.host.ReadIndex(ctx, g); err != nil {
		return err
	}
	return nil
}

func (ls *leaseService) acquire(ctx context.Context, g ids.GroupID, req *wire.LeaseRequest) (*wire.LeaseResponse, error) {
	r := lease.Request{Client: lease.ClientID(req.GetClientId()), Ino: ids.Ino(req.GetIno()), Mode: leaseMode(req.GetMode()),
		Off: req.GetOff(), End: lease.RangeEnd(req.GetOff(), req.GetLen()), Lock: req.GetLock(), Owner: req.GetOwner(), Token: req.GetToken(), Dir: req.GetDir(), Buffered: req.GetBuffered()}
	if err := ls.confirm(ctx, g); err != nil {
		return nil, err
	}
	// A directory the client is making, not there yet: no mark now (its
	// create carries it), and the holder knows it empty (Absent).
	newDir := false
	if r.Dir && req.GetNewDir() && r.Mode == lease.Write && r.Off == 0 && r.End == lease.ToEnd && !r.Lock {
		exists, _, err := ls.dirExists(g, r.Ino)
		newDir = err == nil && !exists
	}
	if r.Dir && !newDir {
		if err := ls.markDirLease(ctx, g, r.Ino); err != nil {
			return nil, err
		}
	}
	// The client's session is in the log before anything is granted
	// (reclaim.go; Lease refused client id 0 already).
	done, grantTerm, err := ls.startGrant(ctx, g, r.Client)
	if err != nil {
		return nil, err
	}
	defer done()
	clk := ls.n.cfg.Clock
	wait := min(time.Duration(req.GetWaitMs())*time.Millisecond, ls.maxWait())
	end := clk.Now().Add(wait)
	// bufferedWait: a try that waits for another client's buffered
	// writes; if they are still not sent when the wait ends, the try is
	// answered UNAVAILABLE (ask again), not EAGAIN: a caller that went on
	// without the lease would read past them.
	bufferedWait := false
	for {
		now := clk.Now()
		ls.mu.Lock()
		gl, err := ls.syncLocked(g)
		if err != nil {
			ls.mu.Unlock()
			return nil, err
		}
		if gl.term != grantTerm {
			// Re-elected meanwhile: the session check belongs to the
			// old term (reclaim.go); the client asks again.
			ls.mu.Unlock()
			return nil, fmt.Errorf("%w: the minister's term changed", multiraft.ErrUnavailable)
		}
		// Keep the intent for the whole wait plus a little, so a client
		// asking again right away keeps its place in the queue.
		var keep time.Duration
		if wait > 0 {
			keep = end.Sub(now) + ls.maxWait()
		}
		out, err := gl.table.Acquire(now, r, keep)
		if len(out.Revoked) > 0 {
			gl.broadcastLocked()
		}
		// An open's try during a new minister's fence: a holder of the
		// predecessor's may not have reclaimed its buffered lease yet,
		// with writes queued under it that the open must see.
		fencedOpen := !out.Granted && r.Mode == lease.Read && !r.Dir && !r.Lock && gl.table.Fenced(now)
		ch := gl.changed
		ls.mu.Unlock()
		if err != nil {
			return nil, err
		}
		if !out.Granted && (out.Buffered || fencedOpen) && wait == 0 && ctx.Value(batchTryKey{}) != nil {
			// A batch's try is not held: asked again alone (the
			// client does so for an UNAVAILABLE sub-answer).
			return nil, fmt.Errorf("%w: ino %v: another client is sending the writes it buffered (its lease was recalled), or a new minister's fence is up; ask again alone", multiraft.ErrUnavailable, r.Ino)
		}
		if !out.Granted && (out.Buffered || fencedOpen) && wait == 0 {
			// Another client's buffered writes (write-behind) are in
			// the way even of a try: whoever asks must see them, so
			// it waits while their holder sends them (the table
			// revoked its lease), as a waiting request would. So
			// does an open during a fence, until the predecessor's
			// leases are reclaimed (the fence ends then).
			wait = ls.maxWait()
			end = now.Add(wait)
			bufferedWait = true
			continue
		}
		if out.Granted {
			l := out.Lease
			resp := &wire.LeaseResponse{Lease: &wire.LeaseGrant{Id: uint64(l.ID), Ino: uint64(l.Ino), Mode: req.GetMode(),
				Off: l.Off, Len: req.GetLen()}}
			if newDir {
				// Read after the grant, for the reason openAfterGrant's
				// is current: whoever changed the directory before this
				// grant made it exist here first. Appeared unmarked
				// (not the create this request announced): given back.
				exists, marked, err := ls.dirExists(g, r.Ino)
				if err != nil || (exists && !marked) {
					_, _ = ls.release(g, &wire.LeaseRequest{ClientId: req.GetClientId(), Ids: []uint64{uint64(l.ID)}})
					return &wire.LeaseResponse{}, fmt.Errorf("%w: directory %v appeared, unmarked, while its lease was granted as a new directory's; ask for an ordinary directory lease", syscall.EAGAIN, r.Ino)
				}
				resp.Absent = !exists
			}
			switch {
			case !req.GetOpen() || r.Lock:
			case (r.Mode == lease.Read || r.Buffered) && !r.Dir:
				resp.Opened = ls.openAfterGrant(rpc.CallerOf(ctx), g, r.Ino, req.GetOpenMaxChunks(), req.GetOpenAttrOnly())
			case r.Mode == lease.Write && r.Dir:
				resp.Opened = ls.dirAttrAfterGrant(g, r.Ino)
			}
			if r.Mode == lease.Read && !r.Dir && !r.Lock && req.GetEntryParent() != 0 {
				resp.EntryCurrent = ls.entryAfterGrant(g, grantTerm, ids.Ino(req.GetEntryParent()), req.GetEntryName(), r.Ino)
			}
			return resp, nil
		}
		if (!now.Before(end) || ctx.Err() != nil) && bufferedWait && (out.Buffered || fencedOpen) {
			return nil, fmt.Errorf("%w: ino %v: another client is sending the writes it buffered (its lease was recalled), or a new minister's fence is up; ask again", multiraft.ErrUnavailable, r.Ino)
		}
		if !now.Before(end) || ctx.Err() != nil {
			after := max(time.Millisecond, out.RetryAt.Sub(now))
			if out.RetryAt.IsZero() {
				after = 10 * time.Millisecond
			}
			return &wire.LeaseResponse{RetryAfterMs: uint64((after + time.Millisecond - 1) / time.Millisecond), Conflict: conflictOf(r, out.Conflict)},
				fmt.Errorf("%w: ino %v [%d, +%d) is leased to another client", syscall.EAGAIN, r.Ino, r.Off, req.GetLen())
		}
		next := end
		if !out.RetryAt.IsZero() && out.RetryAt.Before(next) {
			next = out.RetryAt
		}
		ls.wait(ctx, ch, next)
	}
}

// openAfterGrant makes an open's read of ino (attributes, up to
// maxChunks chunk records, inline bytes) for an open that was just
// granted a read lease (LeaseRequest.open); nil when it cannot be made
// here (gone, being moved): the client then reads itself.
//
// Why the leader's applied state is current: a change by another client
// drains the read leases of the inode before it is proposed and ends its
// drain only once applied here (DoneDraining; one without an answer
// keeps its intent until it expires), and a drain in progress blocks new
// read grants; so every such change either finished before this grant,
// and is in the state read now, or starts after it and revokes this
// lease first.
//
// A lease request names no user: its chunk records get tokens only for a
// trusted certificate (trustedForTokens); other clients ask for them
// when they first use a chunk.
func (ls *leaseService) openAfterGrant(caller rpc.Caller, g ids.GroupID, ino ids.Ino, maxChunks uint32, attrOnly bool) *wire.ReadResponse {
	var out *wire.ReadResponse
	_ = ls.n.host.Read(g, func(r engine.Reader, _ uint64) error {
		mv, err := namespace.ReadMoving(r, ino)
		if err != nil || mv.To != 0 || mv.Copy {
			return err
		}
		if attrOnly {
			// The client reads the rest when it needs it (prime).
			if a, err := namespace.GetAttr(r, ino); err == nil && a.GetType() == wire.FileType_REGULAR {
				out = &wire.ReadResponse{Attr: a, ChunksOmitted: true}
			}
			return nil
		}
		out, _ = query(r, &wire.ReadRequest{Op: &wire.ReadRequest_GetChunks{GetChunks: &wire.GetChunksReq{
			Ino: uint64(ino), WithAttr: true, MaxChunks: maxChunks}}})
		if out != nil && ls.n.tokenizeRefs(caller, nil, r, ino, out) != nil {
			out = nil // the client reads for itself, naming its user
		}
		return nil
	})
	return out
}

// entryAfterGrant says whether name in directory parent names ino, read
// right after a read lease on ino was granted (LeaseRequest.entry_parent).
// Current for the reason openAfterGrant's read is, and it stays so while
// the lease is held: every change of the name (unlink, rename over it,
// rename away from it, an exchange) drains the read leases of the inode
// the name held (replacedInodes) before it is proposed.
//
// Not when a change of the directory's entries was on its way at any
// time from just before the read to just after it (its drain intent is
// held until it is applied): its drain set was resolved before it was
// proposed, and another change applied meanwhile may have put ino at
// name, so it would replace ino without having drained this lease
// (found in review: two clients renaming onto one name; a second review
// found that one pending during the read and done before a check made
// after it slipped through, hence the mark). A change whose intent is
// made after the check resolves its names after it, in a state at least
// as new as the read, so it finds ino there and drains this lease. Only
// in the term that granted the lease: a new table knows no intent of
// its predecessor.
func (ls *leaseService) entryAfterGrant(g ids.GroupID, term uint64, parent ids.Ino, name []byte, ino ids.Ino) bool {
	var mark uint64
	ls.mu.Lock()
	gl := ls.mu.groups[g]
	quiet := gl != nil && gl.table != nil && gl.term == term && !gl.table.Draining(ls.n.cfg.Clock.Now(), parent)
	if quiet {
		mark = gl.table.DrainMark()
	}
	ls.mu.Unlock()
	if !quiet {
		return false
	}
	var ok bool
	_ = ls.n.host.Read(g, func(r engine.Reader, _ uint64) error {
		if mv, err := namespace.ReadMoving(r, parent); err != nil || mv.To != 0 || mv.Copy {
			return err
		}
		a, _, err := namespace.Lookup(r, parent, name)
		ok = err == nil && a != nil && ids.Ino(a.GetIno()) == ino
		return nil
	})
	if !ok {
		return false
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	gl = ls.mu.groups[g]
	return gl != nil && gl.table != nil && gl.term == term && !gl.table.DrainedSince(ls.n.cfg.Clock.Now(), parent, mark)
}

// dirAttrAfterGrant reads the attributes of directory dir for a write
// directory lease just granted with LeaseRequest.open: the holder
// answers its own setattrs of the directory from them (docs/fuse.md,
// "Asynchronous creates"). Current for the reason openAfterGrant's read
// is: another client's change of the directory's attributes or entries
// drains its directory leases first (and a drain in progress blocks
// this grant). nil when it cannot be read here (gone, being moved).
func (ls *leaseService) dirAttrAfterGrant(g ids.GroupID, dir ids.Ino) *wire.ReadResponse {
	var out *wire.ReadResponse
	_ = ls.n.host.Read(g, func(r engine.Reader, _ uint64) error {
		mv, err := namespace.ReadMoving(r, dir)
		if err != nil || mv.To != 0 || mv.Copy {
			return err
		}
		out, _ = query(r, &wire.ReadRequest{Op: &wire.ReadRequest_GetAttr{GetAttr: &wire.GetAttrReq{Ino: uint64(dir)}}})
		if out.GetAttr().GetType() != wire.FileType_DIRECTORY {
			out = nil
		}
		return nil
	})
	return out
}

// conflictOf reports a lease in the way of r (F_GETLK), nil if none.
func conflictOf(r lease.Request, l *lease.Lease) *wire.LeaseGrant {
	if l == nil {
		return nil
	}
	g := &wire.LeaseGrant{Id: uint64(l.ID), Ino: uint64(l.Ino), Mode: wireLeaseMode(l.Mode), Off: l.Off,
		Lock: l.Lock, OtherClient: l.Client != r.Client}
	if l.End != lease.ToEnd {
		g.Len = l.End - l.Off
	}
	if !g.OtherClient {
		// Owners are the requesting client's own business.
		g.Owner = l.Owner
	}
	return g
}

func leaseIDs(in []uint64) []lease.ID {
	out := make([]lease.ID, len(in))
	for i, id := range in {
		out[i] = lease.ID(id)
	}
	return out
}

func wireIDs(in []lease.ID) []uint64 {
	out := make([]uint64, len(in))
	for i, id := range in {
		out[i] = uint64(id)
	}
	return out
}

func (ls *leaseService) keepalive(ctx context.Context, g ids.GroupID, req *wire.LeaseRequest) (*wire.LeaseResponse, error) {
	client, list := lease.ClientID(req.GetClientId()), leaseIDs(req.GetIds())
	if err := ls.confirm(ctx, g); err != nil {
		return nil, err
	}
	clk := ls.n.cfg.Clock
	end := clk.Now().Add(min(time.Duration(req.GetWaitMs())*time.Millisecond, ls.ttl/3))
	renew := true
	var term uint64
	for {
		ls.mu.Lock()
		gl, err := ls.syncLocked(g)
		if err != nil {
			ls.mu.Unlock()
			return nil, err
		}
		if term != 0 && gl.term != term {
			// Elected again while this waited: a new table, whose
			// reclaim starts as a fresh keepalive's would (lost leases
			// no longer end the wait; found in review).
			renew = true
		}
		term = gl.term
		var revoke, lost []lease.ID
		// A new minister: the client's leases of the predecessor are
		// taken over first (reclaim.go); those it refuses are reported
		// lost by the renewal below.
		if renew && gl.rc.reclaiming && ls.reclaimLocked(g, gl, req, clk.Now()) {
			ls.mu.Unlock()
			return &wire.LeaseResponse{Reclaim: true}, nil
		}
		renewed := renew
		if renew {
			revoke, lost = gl.table.Renew(clk.Now(), client, list)
			renew = false
		}
		// The client's revoked leases, listed or not (one granted while
		// this keepalive was on its way: its revoke would otherwise wait
		// for the next one, up to TTL/3; found with a reader and a
		// writer of one file on two mounts: 3 s stalls of the writer).
		// Indexed: a wake-up costs what was revoked, not the whole list
		// (every release in the group wakes every waiting keepalive,
		// and a mount keeping 8,192 leases made each wake-up check them
		// all: 42 % of the minister's CPU under grep -r).
		for _, id := range gl.table.RevokedOf(clk.Now(), client) {
			if !slices.Contains(revoke, id) && !slices.Contains(req.GetReleasing(), uint64(id)) {
				revoke = append(revoke, id)
			}
		}
		answer := len(revoke) > 0 || !clk.Now().Before(end) || ctx.Err() != nil
		if answer && !renewed {
			// What is lost is said with the answer only.
			_, lost = gl.table.Check(clk.Now(), client, list)
		}
		ch := gl.changed
		ls.mu.Unlock()
		// Lost leases alone do not end the wait: the holder trusts none
		// past the renewals it had, and one it gave back while this
		// keepalive was on its way is reported lost too. Answered at
		// once, a mount evicting old read leases as fast as it opens
		// files (grep -r) sent a keepalive of its 1,800 leases every
		// millisecond, each answered at once for the lease it had just
		// given back.
		if answer {
			return &wire.LeaseResponse{Revoke: wireIDs(revoke), Lost: wireIDs(lost)}, nil
		}
		ls.wait(ctx, ch, end)
	}
}

func (ls *leaseService) release(g ids.GroupID, req *wire.LeaseRequest) (*wire.LeaseResponse, error) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	gl, err := ls.syncLocked(g)
	if err != nil {
		return nil, err
	}
	if gl.table.Release(ls.n.cfg.Clock.Now(), lease.ClientID(req.GetClientId()), leaseIDs(req.GetIds())) > 0 {
		gl.broadcastLocked()
	}
	return &wire.LeaseResponse{}, nil
}

// mutatedIno returns the inode whose data or attributes cmd changes, for
// the commands that name one (0 otherwise).
func mutatedIno(cmd *wire.Command) ids.Ino {
	switch op := cmd.GetOp().(type) {
	case *wire.Command_Setattr:
		return ids.Ino(op.Setattr.GetIno())
	case *wire.Command_SetChunk:
		return ids.Ino(op.SetChunk.GetIno())
	case *wire.Command_SetXattr:
		return ids.Ino(op.SetXattr.GetIno())
	case *wire.Command_RemoveXattr:
		return ids.Ino(op.RemoveXattr.GetIno())
	case *wire.Command_Link:
		return ids.Ino(op.Link.GetIno())
	case *wire.Command_WriteInline:
		return ids.Ino(op.WriteInline.GetIno())
	case *wire.Command_DropInline:
		return ids.Ino(op.DropInline.GetIno())
	case *wire.Command_ExportSubtree:
		// Read leases on a subtree root about to move are recalled.
		return ids.Ino(op.ExportSubtree.GetIno())
	}
	return 0
}

// entryDirs returns the directories whose entries cmd changes: their
// directory leases are drained.
func entryDirs(cmd *wire.Command) []ids.Ino {
	switch op := cmd.GetOp().(type) {
	case *wire.Command_Create:
		return []ids.Ino{ids.Ino(op.Create.GetParent())}
	case *wire.Command_Link:
		return []ids.Ino{ids.Ino(op.Link.GetNewParent())}
	case *wire.Command_Unlink:
		return []ids.Ino{ids.Ino(op.Unlink.GetParent())}
	case *wire.Command_ExportSubtree:
		// So are directory leases on it: their holders send their
		// queued changes first, and the freeze then finds them applied.
		return []ids.Ino{ids.Ino(op.ExportSubtree.GetIno())}
	case *wire.Command_Rename:
		if op.Rename.GetParent() == op.Rename.GetNewParent() {
			return []ids.Ino{ids.Ino(op.Rename.GetParent())}
		}
		return []ids.Ino{ids.Ino(op.Rename.GetParent()), ids.Ino(op.Rename.GetNewParent())}
	}
	return nil
}

// drainSet is what one client command drains: the inodes it changes
// (read leases) and the directories whose entries it changes (directory
// leases), with the client sending it.
type drainSet struct {
	client lease.ClientID
	inos   []ids.Ino
	dirs   []ids.Ino
	// all: a subtree move's freeze; every lease goes (lease.DrainAll).
	all bool
}

func drainSetOf(cmd *wire.Command) drainSet {
	var d drainSet
	add := func(c *wire.Command) {
		if d.client == 0 {
			d.client = lease.ClientID(c.GetReq().GetClientId())
		}
		if ino := mutatedIno(c); ino != 0 && !slices.Contains(d.inos, ino) {
			d.inos = append(d.inos, ino)
		}
		switch op := c.GetOp().(type) {
		case *wire.Command_ExportSubtree:
			d.all = true
		case *wire.Command_FreezeEntries:
			// Every inode the page freezes: its holders flush and give
			// back their leases, directories their directory leases.
			d.all = true
			for _, e := range op.FreezeEntries.GetEntries() {
				if e.GetMinistry() != 0 {
					continue
				}
				ino := ids.Ino(e.GetIno())
				if !slices.Contains(d.inos, ino) {
					d.inos = append(d.inos, ino)
				}
				if e.GetType() == wire.FileType_DIRECTORY && !slices.Contains(d.dirs, ino) {
					d.dirs = append(d.dirs, ino)
				}
			}
		}
		for _, dir := range entryDirs(c) {
			if !slices.Contains(d.dirs, dir) {
				d.dirs = append(d.dirs, dir)
			}
		}
	}
	forEachCmd(cmd, add)
	return d
}

// drainReaders runs before a client's change is proposed: other
// clients' read leases on the inodes it changes, and their directory
// leases on the directories whose entries it changes, are revoked, and
// the change waits until they are given back or expire (at most one
// TTL), so a reader caching under a read lease never serves what this
// change replaced once it is acknowledged, and a directory lease holder
// never answers from a listing this change made stale. During a new
// minister's fence a change of inodes waits for the fence to end
// instead: leases the predecessor granted are not known here. So does an
// entry change in a directory that was ever given a directory lease
// (MarkDirLeaseOp, in the log before the grant): its holder may still be
// answering creates from its listing (found in review: without the wait,
// two O_EXCL creates of one name could both succeed across a failover).
// Entry changes elsewhere go on at once. One call waits at most a few
// seconds (the client's call deadline) and then answers UNAVAILABLE, and
// the client asks again; the intents left in the table keep new leases
// out meanwhile. It returns a function to call when the change is done:
// applied says whether it was (the proposal answered). One that was not
// may still commit later (a timeout), so its intents stay until they
// expire and no reader is granted (and reads the state before it, with
// nothing left to revoke its lease) in between.
// Nothing happens on a non-leader (the proposal is refused anyway).
func (ls *leaseService) drainReaders(ctx context.Context, g ids.GroupID, cmd *wire.Command) (func(applied bool), error) {
	ds := drainSetOf(cmd)
	dirs, files := ls.replacedInodes(g, cmd)
	for _, d := range dirs {
		if !slices.Contains(ds.dirs, d) {
			ds.dirs = append(ds.dirs, d)
		}
	}
	for _, f := range files {
		if !slices.Contains(ds.inos, f) {
			ds.inos = append(ds.inos, f)
		}
	}
	client := ds.client
	if client == 0 || len(ds.inos)+len(ds.dirs) == 0 {
		return func(bool) {}, nil
	}
	clk := ls.n.cfg.Clock
	start := clk.Now()
	end := waitEnd(ctx, start)
	intent := ls.ttl + ls.ttl/10
	var drained []ids.Ino
	// keys: the names the change resolves, held (token) from their
	// last resolution until it is applied (holdEntriesLocked). Taken
	// only once nothing is left to drain: a change holding names waits
	// for nothing but its proposal (a holder's queue sent during a
	// drain may need the same names).
	keys := changedEntries(cmd)
	var token uint64
	releaseKeys := func() {
		if token == 0 {
			return
		}
		ls.mu.Lock()
		if gl := ls.mu.groups[g]; gl != nil {
			gl.releaseEntriesLocked(keys, token)
		}
		ls.mu.Unlock()
		token = 0
	}
	done := func(applied bool) {
		if applied {
			releaseKeys()
		}
		// Not applied: it may still commit; the names stay held until
		// the hold expires.
		if len(drained) == 0 {
			return
		}
		ls.mu.Lock()
		defer ls.mu.Unlock()
		if gl := ls.mu.groups[g]; gl != nil && gl.table != nil {
			for _, ino := range drained {
				if applied {
					gl.table.DoneDraining(client, ino)
				} else {
					gl.table.AbandonDraining(client, ino)
				}
			}
		}
	}
	// marked: whether one of ds.dirs was ever given a directory lease
	// (asked once per fence, and only during one).
	var marked bool
	var markedFor time.Time
	for {
		now := clk.Now()
		ls.mu.Lock()
		gl, err := ls.syncLocked(g)
		if err != nil {
			ls.mu.Unlock()
			return done, nil
		}
		var busy bool
		var at time.Time
		var drain []ids.Ino
		fence := gl.table.FencedUntil()
		if now.Before(fence) && len(ds.inos) == 0 && !markedFor.Equal(fence) {
			// Asked again if the term (and so the fence) changed
			// meanwhile: a mark may have been made since.
			ls.mu.Unlock()
			m, err := ls.dirLeaseMarked(ctx, g, ds.dirs)
			if err != nil {
				return func(bool) {}, err
			}
			marked, markedFor = m, fence
			continue
		}
		if now.Before(fence) && (len(ds.inos) > 0 || marked) {
			busy, at = true, fence
		} else {
			drain = append(slices.Clone(ds.inos), ds.dirs...)
		}
		// Always, even with no lease at all: the intent it leaves keeps
		// a reader from being granted (and caching the old state)
		// between here and the commit.
		anyRevoked := false
		for _, ino := range drain {
			again := slices.Contains(drained, ino)
			if !again {
				drained = append(drained, ino)
			}
			drainFn := gl.table.DrainReaders
			if ds.all {
				drainFn = gl.table.DrainAll
			}
			b, a, revoked := drainFn(now, client, ino, intent, again)
			if b {
				busy, at = true, earliestTime(at, a)
			}
			anyRevoked = anyRevoked || len(revoked) > 0
		}
		if anyRevoked {
			gl.broadcastLocked()
		}
		if !busy && len(keys) > 0 && token == 0 {
			t, until := gl.holdEntriesLocked(now, keys, now.Add(intent), reqOf(cmd))
			if t == 0 {
				busy, at = true, earliestTime(at, until)
			}
			token = t
		}
		ch := gl.changed
		ls.mu.Unlock()
		if !busy {
			// What the command replaces is resolved again: a holder's
			// queue, sent in this drain, may have made the name it
			// removes (a directory its holder had leased before its
			// create was applied: LeaseRequest.new_dir; found in review).
			// Another change of the same names is applied by now
			// (the names are held).
			more := false
			dirs, files := ls.replacedInodes(g, cmd)
			for _, d := range dirs {
				if !slices.Contains(ds.dirs, d) {
					ds.dirs, more = append(ds.dirs, d), true
				}
			}
			for _, f := range files {
				if !slices.Contains(ds.inos, f) {
					ds.inos, more = append(ds.inos, f), true
				}
			}
			if !more {
				return done, nil
			}
			// Those are drained first, without holding the names.
			releaseKeys()
			if now.Before(end) {
				continue
			}
			// A name that kept changing: asked again (UNAVAILABLE below).
		}
		if !now.Before(end) || ctx.Err() != nil {
			// The intents stay (they expire by themselves): the client
			// asks again, and new leases stay out meanwhile. This change
			// no longer holds them.
			ls.mu.Lock()
			if gl := ls.mu.groups[g]; gl != nil && gl.table != nil {
				for _, ino := range drained {
					gl.table.AbandonDraining(client, ino)
				}
			}
			ls.mu.Unlock()
			releaseKeys() // not proposed
			return func(bool) {}, fmt.Errorf("%w: waiting for other clients to give back their leases on %v (or for a new minister's lease fence to end)", multiraft.ErrUnavailable, append(ds.inos, ds.dirs...))
		}
		ls.wait(ctx, ch, earliestTime(at, end))
	}
}

// recallDirWriters runs before a lookup that the asker did not find and
// this leader does not have either (LookupReq.recall): other clients'
// write directory leases on dir are revoked and the lookup waits until
// those are given back (their holders send their queues first) or
// expire, so a create a holder queued and answered before the lookup
// began (a file created and closed on another mount) is applied before
// the read. During a new minister's fence, a directory that was ever
// given a directory lease waits for the fence to end instead, as its
// entry changes do (drainReaders): a predecessor's holder may not have
// reclaimed yet. Waits at most a few seconds, then UNAVAILABLE (the
// client asks again). A NotLeaderError when this node does not lead g.
func (ls *leaseService) recallDirWriters(ctx context.Context, g ids.GroupID, client lease.ClientID, dir ids.Ino) error {
	clk := ls.n.cfg.Clock
	end := waitEnd(ctx, clk.Now())
	var marked bool
	var markedFor time.Time
	// held: the leases this recall waits for, from its first look at
	// the table (a lease granted later holds nothing queued before).
	var held []lease.ID
	looked := false
	for {
		now := clk.Now()
		ls.mu.Lock()
		gl, err := ls.syncLocked(g)
		if err != nil {
			ls.mu.Unlock()
			return err
		}
		var busy bool
		var at time.Time
		fence := gl.table.FencedUntil()
		if now.Before(fence) && !markedFor.Equal(fence) {
			ls.mu.Unlock()
			m, err := ls.dirLeaseMarked(ctx, g, []ids.Ino{dir})
			if err != nil {
				return err
			}
			marked, markedFor = m, fence
			continue
		}
		switch {
		case now.Before(fence) && marked:
			busy, at = true, fence
		case !looked:
			var revoked []lease.Lease
			held, revoked = gl.table.RecallDirWriters(now, client, dir)
			looked = true
			if len(revoked) > 0 {
				gl.broadcastLocked()
			}
			busy, at = gl.table.StillHeld(now, held)
		default:
			busy, at = gl.table.StillHeld(now, held)
		}
		ch := gl.changed
		ls.mu.Unlock()
		if !busy {
			return nil
		}
		if !now.Before(end) || ctx.Err() != nil {
			return fmt.Errorf("%w: waiting for other clients to give back their directory leases on %v (or for a new minister's lease fence to end)", multiraft.ErrUnavailable, dir)
		}
		ls.wait(ctx, ch, earliestTime(at, end))
	}
}

// waitEnd is when a drain or recall starting at start stops waiting and
// answers UNAVAILABLE (the client asks again): after a few seconds, and
// early enough before the call's deadline for the answer to arrive.
func waitEnd(ctx context.Context, start time.Time) time.Time {
	end := start.Add(3 * time.Second)
	if dl, ok := ctx.Deadline(); ok && dl.Add(-500*time.Millisecond).Before(end) {
		end = dl.Add(-500 * time.Millisecond)
	}
	return end
}

// renameExchange is RENAME_EXCHANGE (renameat2).
const renameExchange = 2

// replacedInodes returns what cmd removes a name of, as this node's state
// resolves the names. dirs: the directories it removes (rmdir, a rename
// onto an empty directory), whose own directory leases are drained too,
// so a holder's queued creates in one reach the ministry first (and the
// rmdir fails with ENOTEMPTY instead of the creates failing later, found
// in review). files: the other inodes an unlink or a rename onto their
// name takes a link from, whose read leases are drained as a link's
// are: a holder's attributes (st_nlink, st_ctime) would be stale, and a
// mount answering lookups under its leases would still find the name
// (found with the walk-ahead's lookups, docs/fuse.md). Files a rename
// moves (from their name, or both of an exchange) are in files too: a
// holder of the file's read lease answers lookups of the name it was
// granted under (entryAfterGrant), and its ctime moves. A name not there
// yet makes the command fail anyway.
func (ls *leaseService) replacedInodes(g ids.GroupID, cmd *wire.Command) (dirs, files []ids.Ino) {
	type entry struct {
		parent ids.Ino
		name   []byte
	}
	// names are replaced (their directories' and files' leases drain);
	// moved and exchanged name inodes that only change names (files'
	// read leases drain, a directory's leases stay: its entries do not
	// change).
	var names, moved, exchanged []entry
	add := func(c *wire.Command) {
		switch op := c.GetOp().(type) {
		case *wire.Command_Unlink:
			names = append(names, entry{ids.Ino(op.Unlink.GetParent()), op.Unlink.GetName()})
		case *wire.Command_Rename:
			if op.Rename.GetFlags()&renameExchange == 0 {
				names = append(names, entry{ids.Ino(op.Rename.GetNewParent()), op.Rename.GetNewName()})
			} else {
				exchanged = append(exchanged, entry{ids.Ino(op.Rename.GetNewParent()), op.Rename.GetNewName()})
			}
			// The inode moved away from its name: a holder of its read
			// lease may be answering lookups of that name
			// (entryAfterGrant).
			moved = append(moved, entry{ids.Ino(op.Rename.GetParent()), op.Rename.GetName()})
		}
	}
	forEachCmd(cmd, add)
	if len(names)+len(moved)+len(exchanged) == 0 {
		return nil, nil
	}
	_ = ls.n.host.Read(g, func(r engine.Reader, _ uint64) error {
		for _, nm := range names {
			a, _, err := namespace.Lookup(r, nm.parent, nm.name)
			switch {
			case err != nil || a == nil || a.GetIno() == 0:
			case a.GetType() == wire.FileType_DIRECTORY:
				dirs = append(dirs, ids.Ino(a.GetIno()))
			default:
				files = append(files, ids.Ino(a.GetIno()))
			}
		}
		for _, nm := range append(moved, exchanged...) {
			a, _, err := namespace.Lookup(r, nm.parent, nm.name)
			if err == nil && a != nil && a.GetIno() != 0 && a.GetType() != wire.FileType_DIRECTORY &&
				!slices.Contains(files, ids.Ino(a.GetIno())) {
				files = append(files, ids.Ino(a.GetIno()))
			}
		}
		return nil
	})
	return dirs, files
}

// dirExists says whether directory dir exists in g's state on this
// node, and whether it is marked as ever leased (MarkDirLeaseOp, or a
// create with mark_dir_lease).
func (ls *leaseService) dirExists(g ids.GroupID, dir ids.Ino) (exists, marked bool, err error) {
	err = ls.n.host.Read(g, func(r engine.Reader, _ uint64) error {
		if _, err := namespace.GetAttr(r, dir); err != nil {
			if errors.Is(err, syscall.ENOENT) {
				return nil
			}
			return err
		}
		exists = true
		var err error
		marked, err = namespace.DirLeaseMarked(r, dir)
		return err
	})
	return exists, marked, err
}

// dirLeaseMarked says whether one of dirs was ever given a directory
// lease. The marks of the predecessor's term must be applied here first:
// a read index does that.
func (ls *leaseService) dirLeaseMarked(ctx context.Context, g ids.GroupID, dirs []ids.Ino) (bool, error) {
	idx, err := ls.n.host.ReadIndex(ctx, g)
	if err != nil {
		return false, err
	}
	if err := ls.n.host.WaitApplied(ctx, g, idx); err != nil {
		return false, err
	}
	marked := false
	err = ls.n.host.Read(g, func(r engine.Reader, _ uint64) error {
		for _, d := range dirs {
			m, err := namespace.DirLeaseMarked(r, d)
			if err != nil {
				return err
			}
			marked = marked || m
		}
		return nil
	})
	return marked, err
}

// markDirLease records in the log, before the first directory lease on
// dir is granted, that dir has one (see drainReaders).
func (ls *leaseService) markDirLease(ctx context.Context, g ids.GroupID, dir ids.Ino) error {
	marked := false
	if err := ls.n.host.Read(g, func(r engine.Reader, _ uint64) error {
		var err error
		marked, err = namespace.DirLeaseMarked(r, dir)
		return err
	}); err != nil {
		return err
	}
	if marked {
		return nil
	}
	res, _, err := ls.n.host.Propose(ctx, g, &wire.Command{Version: 1, NowNs: ls.n.cfg.Clock.Now().UnixNano(),
		Op: &wire.Command_MarkDirLease{MarkDirLease: &wire.MarkDirLeaseOp{Dir: uint64(dir)}}})
	if err != nil {
		return err
	}
	if e := res.GetErrno(); e != 0 {
		return fmt.Errorf("%w: directory lease on ino %v: %s", syscall.Errno(e), dir, res.GetMessage())
	}
	return nil
}

func earliestTime(a, b time.Time) time.Time {
	if a.IsZero() || b.Before(a) {
		return b
	}
	return a
}

// leaseRoute answers a lease request for an inode being moved
// (UNAVAILABLE: ask again) or held by another ministry (REDIRECT); nil
// when the inode is this ministry's.
func (s *metaService) leaseRoute(g ids.GroupID, ino ids.Ino) *wire.Status {
	// One read on the common path (held here, not frozen).
	var st *wire.Status
	held := true
	_ = s.n.host.Read(g, func(r engine.Reader, _ uint64) error {
		// No move under way (nearly always: the scan's empty range is
		// cached): no point read of the inode's frozen key, which is
		// not there. That read was 16 % of a minister's CPU while a
		// mount leased the files it created (newlease.go).
		frozen, err := namespace.AnyFrozen(r)
		if err != nil {
			return err
		}
		var mv namespace.Moving
		if frozen {
			if mv, err = namespace.MovingOf(r, ino); err != nil {
				return err
			}
		}
		if mv.To != 0 {
			st = s.n.redirectStatus(ino, g, mv.To)
			return nil
		}
		if mv.Move != 0 {
			st = statusOf(wire.Code_UNAVAILABLE, "inode %v is being moved to another ministry (move %d); retry", ino, mv.Move)
			return nil
		}
		_, err = namespace.GetAttr(r, ino)
		held = err == nil
		return nil
	})
	if st != nil || held {
		return st
	}
	if to := s.n.elsewhereIf(g, ino, true); to != 0 {
		return s.n.redirectStatus(ino, g, to)
	}
	return nil
}
