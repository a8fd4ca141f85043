package metanode

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"syscall"
	"time"

	"github.com/govfs/govfs/internal/engine"
	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/lease"
	"github.com/govfs/govfs/internal/namespace"
	"github.com/govfs/govfs/internal/wire"
)

// Lease sessions and reclaim: how a new minister takes over its
// predecessor's leases and locks without waiting a TTL (DESIGN §5,
// docs/leases.md "Minister changes", docs/decisions.md).
//
// The lease table stays out of the log (a grant on every open would cost
// a raft write each). What goes in the log is the set of clients that may
// hold leases: a client's *session* is opened (LeaseSessionOp) before its
// first grant in a term that does not know it yet, and closed by the
// minister's sweep once the client has held no lease for a TTL.
//
// A new minister fences its table (grants nothing) as before, reads the
// open sessions, and waits for each of those clients to reclaim: a
// client's keepalive to the new minister is answered `reclaim`, and the
// client sends its leases again, described in full; the table takes them
// over under their ids. When every session's client has reclaimed (or
// said it holds nothing), the fence ends: typically one keepalive round
// trip after the election. A client that does not come back (dead,
// partitioned) keeps the fence for at most one TTL, as before, and its
// session is closed then; its leases have expired by its own clock by
// that time.
//
// INVARIANT: a client holding a lease granted in this group has an open
// session in the log. Grants check it (open, or ensureSession proposes
// it) with the client counted in acquiring, and the sweep closes only
// sessions of clients with no lease and no grant in progress, holding
// sessMu so that no open of the same client interleaves with the close.
// A close whose proposal did not answer (timed out: it may still
// commit) leaves its clients in groupLeases.closing, and the next open
// of such a client is proposed whatever the log says now, so that it
// lands after the close (proposals are appended only by the leader, in
// order; a close of an earlier term commits before a new leader reads).
// Proposals of one node outlive its terms, so closing is kept across
// them.

// reclaimState is a group's session and reclaim bookkeeping for the
// current term (reset with the table).
type reclaimState struct {
	// reclaiming: the table is in a predecessor's fence, collecting its
	// leases. sessions: the clients with an open session when this term
	// started (nil until read from the log); reclaimed: those that came
	// back. fresh: clients whose session this term opened (the log had
	// none, read with every earlier entry applied): they hold nothing of
	// the predecessor's and are not waited for.
	reclaiming bool
	sessions   map[lease.ClientID]bool
	reclaimed  map[lease.ClientID]bool
	fresh      map[lease.ClientID]bool
	fenceStart time.Time
	// open: clients known to have an open session in the log; acquiring:
	// grants in progress per client; idleSince: when a client with a
	// session was first seen holding no lease.
	open      map[lease.ClientID]bool
	acquiring map[lease.ClientID]int
	idleSince map[lease.ClientID]time.Time
	lastSweep time.Time
}

func newReclaimState(reclaiming bool, now time.Time) reclaimState {
	return reclaimState{reclaiming: reclaiming, reclaimed: map[lease.ClientID]bool{}, fresh: map[lease.ClientID]bool{}, fenceStart: now,
		open: map[lease.ClientID]bool{}, acquiring: map[lease.ClientID]int{}, idleSince: map[lease.ClientID]time.Time{}}
}

// beginGrant counts a grant in progress for client if its session is
// known open and reports whether it did; endGrant ends it.
func (gl *groupLeases) beginGrantLocked(client lease.ClientID) bool {
	if !gl.rc.open[client] {
		return false
	}
	gl.rc.acquiring[client]++
	return true
}

func (gl *groupLeases) endGrantLocked(client lease.ClientID) {
	if gl.rc.acquiring[client]--; gl.rc.acquiring[client] <= 0 {
		delete(gl.rc.acquiring, client)
	}
}

// startGrant makes sure client has an open session in g's log and
// counts a grant in progress for it, in the returned term; the caller
// grants only in that term, and calls the returned function when done
// (granted or not).
func (ls *leaseService) startGrant(ctx context.Context, g ids.GroupID, client lease.ClientID) (func(), uint64, error) {
	for {
		ls.mu.Lock()
		gl, err := ls.syncLocked(g)
		if err != nil {
			ls.mu.Unlock()
			return nil, 0, err
		}
		if gl.beginGrantLocked(client) {
			term := gl.term
			ls.mu.Unlock()
			return func() {
				ls.mu.Lock()
				defer ls.mu.Unlock()
				if gl := ls.mu.groups[g]; gl != nil && gl.term == term {
					gl.endGrantLocked(client)
				}
			}, term, nil
		}
		ls.mu.Unlock()
		if err := ls.ensureSession(ctx, g, gl, client); err != nil {
			return nil, 0, err
		}
	}
}

// ensureSession opens client's session in the log unless it is open
// there, and records it as open for this term.
func (ls *leaseService) ensureSession(ctx context.Context, g ids.GroupID, gl *groupLeases, client lease.ClientID) error {
	gl.sessMu.Lock()
	defer gl.sessMu.Unlock()
	ls.mu.Lock()
	term, known, closing := gl.term, gl.rc.open[client], gl.closing[client]
	ls.mu.Unlock()
	if known {
		return nil
	}
	// What the log says, with every earlier term's entries applied.
	idx, err := ls.n.host.ReadIndex(ctx, g)
	if err != nil {
		return err
	}
	if err := ls.n.host.WaitApplied(ctx, g, idx); err != nil {
		return err
	}
	var open bool
	if err := ls.n.host.Read(g, func(r engine.Reader, _ uint64) error {
		var err error
		open, err = namespace.LeaseSessionOpen(r, uint64(client))
		return err
	}); err != nil {
		return err
	}
	if !open || closing {
		if !open {
			// Before the proposal: once it applies, a concurrent read
			// of the sessions (loadSessions) sees it. Not waited for:
			// the log had no session, so no lease of the predecessor.
			ls.mu.Lock()
			if gl.term == term {
				gl.rc.fresh[client] = true
			}
			ls.mu.Unlock()
		}
		if err := ls.proposeSessions(ctx, g, []lease.ClientID{client}, true); err != nil {
			return err
		}
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	delete(gl.closing, client) // the open is applied after any close
	if gl.term == term {
		gl.rc.open[client] = true
	}
	return nil
}

// proposeSessions opens or closes the clients' sessions, in commands of
// at most namespace.MaxSessionClients.
func (ls *leaseService) proposeSessions(ctx context.Context, g ids.GroupID, clients []lease.ClientID, open bool) error {
	for len(clients) > 0 {
		n := min(len(clients), namespace.MaxSessionClients)
		op := &wire.LeaseSessionOp{Open: open}
		for _, c := range clients[:n] {
			op.Clients = append(op.Clients, uint64(c))
		}
		clients = clients[n:]
		res, _, err := ls.n.host.Propose(ctx, g, &wire.Command{Version: 1, NowNs: ls.n.cfg.Clock.Now().UnixNano(),
			Op: &wire.Command_LeaseSession{LeaseSession: op}})
		if err != nil {
			return err
		}
		if e := res.GetErrno(); e != 0 {
			return fmt.Errorf("%w: lease sessions: %s", syscall.Errno(e), res.GetMessage())
		}
	}
	return nil
}

// reclaimLocked handles a keepalive's leases while the table is in its
// fence: the client's leases this table does not know are taken over
// from their descriptions (those refused, or not described, stay
// unknown: the renewal reports them lost). It reports whether the client
// must send descriptions first (ask).
func (ls *leaseService) reclaimLocked(g ids.GroupID, gl *groupLeases, req *wire.LeaseRequest, now time.Time) (ask bool) {
	client := lease.ClientID(req.GetClientId())
	descs := map[uint64]*wire.LeaseGrant{}
	for _, d := range req.GetReclaim() {
		descs[d.GetId()] = d
	}
	// The leases being given back are taken over too, still revoked:
	// whoever was waiting for them goes on waiting for their release.
	releasing := map[uint64]bool{}
	for _, id := range req.GetReleasing() {
		releasing[id] = true
	}
	var unknown []uint64
	for _, id := range append(slices.Clone(req.GetIds()), req.GetReleasing()...) {
		if !gl.table.Holds(client, lease.ID(id)) {
			unknown = append(unknown, id)
		}
	}
	if len(unknown) > 0 && len(descs) == 0 {
		return true
	}
	for _, id := range unknown {
		d := descs[id]
		if d == nil {
			continue
		}
		l := lease.Lease{ID: lease.ID(id), Revoked: releasing[id], Request: lease.Request{Client: client, Ino: ids.Ino(d.GetIno()), Mode: leaseMode(d.GetMode()),
			Off: d.GetOff(), End: lease.RangeEnd(d.GetOff(), d.GetLen()), Lock: d.GetLock(), Owner: d.GetOwner(), Dir: d.GetDir(), Buffered: d.GetBuffered()}}
		if err := gl.table.Reclaim(now, l); err != nil {
			ls.n.log.Warn("minister: a lease could not be reclaimed; its holder loses it", slog.Uint64("group", uint64(g)),
				slog.Uint64("client", uint64(client)), slog.Uint64("lease", id), slog.Any("err", err))
		}
	}
	gl.rc.reclaimed[client] = true
	ls.maybeEndReclaimLocked(g, gl, now)
	return false
}

// maybeEndReclaimLocked ends the fence when every client with a session
// has reclaimed, or when the fence ran out by itself (the clients that
// did not come back are then noted idle, so the sweep closes their
// sessions).
func (ls *leaseService) maybeEndReclaimLocked(g ids.GroupID, gl *groupLeases, now time.Time) {
	rc := &gl.rc
	if !rc.reclaiming {
		return
	}
	var missing []lease.ClientID
	for c := range rc.sessions {
		if !rc.reclaimed[c] && !rc.fresh[c] {
			missing = append(missing, c)
		}
	}
	fenced := gl.table.Fenced(now)
	if fenced && (rc.sessions == nil || len(missing) > 0) {
		return
	}
	rc.reclaiming = false
	gl.table.EndFence(now)
	gl.broadcastLocked()
	for _, c := range missing {
		// Idle since before the fence, so the next sweep closes them
		// unless they come back with a lease.
		rc.idleSince[c] = rc.fenceStart.Add(-ls.ttl)
	}
	slices.Sort(missing)
	ls.n.log.Info("minister: lease fence ended", slog.Uint64("group", uint64(g)), slog.Uint64("term", gl.term),
		slog.Duration("after", now.Sub(rc.fenceStart)), slog.Bool("all_reclaimed", fenced),
		slog.Int("sessions", len(rc.sessions)), slog.Int("leases", gl.table.Len()), slog.Any("not_reclaimed", missing))
}

// loadSessions reads the open sessions of g once per term (called by
// watch): a reclaiming table waits for them, and the sweep closes those
// that stay idle (a client's session is open whether or not it
// reclaimed, and whether or not the fence ran out first).
func (ls *leaseService) loadSessions(g ids.GroupID, term uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), ls.ttl/4)
	defer cancel()
	go func() {
		select {
		case <-ls.n.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	idx, err := ls.n.host.ReadIndex(ctx, g)
	if err == nil {
		err = ls.n.host.WaitApplied(ctx, g, idx)
	}
	var list []uint64
	if err == nil {
		err = ls.n.host.Read(g, func(r engine.Reader, _ uint64) error {
			var err error
			list, err = namespace.LeaseSessions(r)
			return err
		})
	}
	if err != nil {
		ls.n.log.Debug("minister: read lease sessions (retried)", slog.Uint64("group", uint64(g)), slog.Any("err", err))
		return
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	gl := ls.mu.groups[g]
	if gl == nil || gl.term != term || gl.rc.sessions != nil {
		return
	}
	gl.rc.sessions = map[lease.ClientID]bool{}
	for _, c := range list {
		gl.rc.sessions[lease.ClientID(c)] = true
		gl.rc.open[lease.ClientID(c)] = true
	}
	ls.maybeEndReclaimLocked(g, gl, ls.n.cfg.Clock.Now())
}

// sweepSessions closes the sessions of g's clients that have held no
// lease, and had no grant in progress, for a TTL (one LeaseSessionOp for
// all of them).
func (ls *leaseService) sweepSessions(g ids.GroupID) {
	ls.mu.Lock()
	gl := ls.mu.groups[g]
	ls.mu.Unlock()
	if gl == nil {
		return
	}
	gl.sessMu.Lock()
	defer gl.sessMu.Unlock()
	now := ls.n.cfg.Clock.Now()
	ls.mu.Lock()
	if gl.table == nil || gl.rc.reclaiming || gl.rc.sessions == nil || now.Sub(gl.rc.lastSweep) < ls.ttl/4 {
		ls.mu.Unlock()
		return
	}
	gl.rc.lastSweep = now
	var closing []lease.ClientID
	for c := range gl.rc.open {
		switch {
		case gl.table.ClientLeases(now, c) > 0 || gl.rc.acquiring[c] > 0:
			delete(gl.rc.idleSince, c)
		case gl.rc.idleSince[c].IsZero():
			gl.rc.idleSince[c] = now
		case now.Sub(gl.rc.idleSince[c]) >= ls.ttl:
			closing = append(closing, c)
			delete(gl.rc.open, c)
			delete(gl.rc.idleSince, c)
		}
	}
	for _, c := range closing {
		if gl.closing == nil {
			gl.closing = map[lease.ClientID]bool{}
		}
		gl.closing[c] = true
	}
	ls.mu.Unlock()
	if len(closing) == 0 {
		return
	}
	slices.Sort(closing)
	ctx, cancel := context.WithTimeout(context.Background(), ls.ttl/4)
	defer cancel()
	if err := ls.proposeSessions(ctx, g, closing, false); err != nil {
		// The close may still commit: the clients stay in closing, so
		// their next open is proposed after it. If it never commits,
		// the next minister waits for these clients (at most a TTL).
		ls.n.log.Debug("minister: close idle lease sessions", slog.Uint64("group", uint64(g)), slog.Any("err", err))
		return
	}
	ls.mu.Lock()
	for _, c := range closing {
		delete(gl.closing, c)
	}
	ls.mu.Unlock()
}
