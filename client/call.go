package client

// The one retry-and-route loop: every metadata RPC (mutations, reads,
// leases, the president's Assign) goes through Client.call, the only
// place that knows what NOT_LEADER, REDIRECT, STALE_EPOCH, UNAVAILABLE
// and UNKNOWN_GROUP mean for where the next attempt goes.

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/wire"
)

// target says where one call goes and how it follows answers; call
// updates it (a REDIRECT changes group).
type target struct {
	group ids.GroupID
	// ino is the inode the call is routed by: a REDIRECT records its new
	// owner (0: none).
	ino ids.Ino
	// leader: the call goes to the group's leader (mutations, leases,
	// the president); otherwise to any replica (reads).
	leader bool
	// follow: a REDIRECT sends the next attempt to the named ministry;
	// otherwise call ends with a *redirectedError (the caller routes
	// again, as a lease acquisition does).
	follow bool
	// timeout bounds one attempt.
	timeout time.Duration

	hops int
	// override: the next attempt goes here (a read's NOT_LEADER hint).
	override string
}

// attempt is one RPC to a node: it returns the answer's status and
// applied index (0 when the answer has none). epoch is the ministry
// epoch to name (0 for the president group).
type rpcAttempt func(ctx context.Context, cl wire.MetaClient, epoch uint64) (*wire.Status, uint64, error)

// call runs rpc against the node rt names until an answer ends it: OK
// (nil), a final status (its error), or the retry budget. Every
// metadata RPC of the Client goes through here.
func (c *Client) call(ctx context.Context, rt *target, rpc rpcAttempt) error {
	c.routeStats.calls.Add(1)
	start := c.cfg.Clock.Now()
	err := c.retry.do(ctx, func(ctx context.Context) (bool, error) {
		retry, err := c.callOnce(ctx, rt, rpc)
		if retry && err != nil && c.cfg.Clock.Now().Sub(start) >= outageAfter {
			c.noteOutage(rt, err)
		}
		return retry, err
	})
	if err == nil {
		c.noteRecovered()
	}
	if rt.hops > 0 {
		c.routeStats.redirected.Add(1)
	}
	return err
}

// outageAfter is how long one call must have been retrying before the
// Client logs that the cluster (or a group of it) cannot be reached.
const outageAfter = 3 * time.Second

// noteOutage logs, once per outage, that calls keep failing: a mount's
// log then says when its users started to wait, and noteRecovered when
// they stopped.
func (c *Client) noteOutage(rt *target, err error) {
	if c.outageSince.CompareAndSwap(0, c.cfg.Clock.Now().UnixNano()) {
		c.log.Warn("metadata service unreachable: retrying", "group", uint64(rt.group), "err", err)
	}
}

func (c *Client) noteRecovered() {
	if since := c.outageSince.Swap(0); since != 0 {
		c.log.Warn("metadata service reachable again", "unreachable_for", c.cfg.Clock.Now().Sub(time.Unix(0, since)).Round(100*time.Millisecond))
	}
}

// RouteStats counts this Client's metadata calls: all of them, and those
// that met at least one REDIRECT (their first ministry did not hold the
// inode) or STALE_EPOCH.
type RouteStats struct {
	Calls, Redirected, StaleEpochs uint64
}

type routeCounters struct {
	calls, redirected, staleEpochs atomic.Uint64
}

// RouteStats returns the counts since New.
func (c *Client) RouteStats() RouteStats {
	return RouteStats{Calls: c.routeStats.calls.Load(), Redirected: c.routeStats.redirected.Load(), StaleEpochs: c.routeStats.staleEpochs.Load()}
}

// callOnce is one attempt of call; keepalives use it alone (their loop
// retries).
func (c *Client) callOnce(ctx context.Context, rt *target, rpc rpcAttempt) (bool, error) {
	c.refreshMap(ctx, rt.group)
	addr := rt.override
	rt.override = ""
	switch {
	case addr != "":
	case rt.leader:
		addr = c.leaderAddr(rt.group)
	default:
		addr = c.readAddr(rt.group)
	}
	cl, err := c.conn(addr)
	if err != nil {
		return false, err
	}
	epoch := c.epoch(rt.group)
	cctx, cancel := c.callCtx(ctx, addr, rt.timeout)
	st, applied, err := rpc(cctx, cl, epoch)
	cancel()
	if err != nil {
		c.attemptFailed(rt, addr)
		return c.rpcFailed(ctx, addr, err)
	}
	if applied > 0 {
		c.noteApplied(rt.group, applied)
	}
	switch st.GetCode() {
	case wire.Code_OK:
		if rt.leader {
			c.setLeader(rt.group, addr)
		}
		return false, nil
	case wire.Code_NOT_LEADER:
		hint := st.GetLeaderAddr()
		switch {
		case hint == "" || hint == addr:
			c.attemptFailed(rt, addr)
		case rt.leader:
			c.hintLeader(rt.group, hint)
		case !c.isSilent(hint):
			// A replica that cannot serve this read itself names its
			// leader; try it once without changing the preference.
			rt.override = hint
		default:
			c.attemptFailed(rt, addr)
		}
		return true, fmt.Errorf("%s: not the leader of %v", addr, rt.group)
	case wire.Code_REDIRECT:
		return c.redirect(rt, st)
	case wire.Code_STALE_EPOCH:
		c.routeStats.staleEpochs.Add(1)
		if e := st.GetEpoch(); e > epoch {
			// This Client is behind: the node says what is current.
			c.noteEpoch(rt.group, e)
			c.refreshStaleMap(ctx)
		} else {
			// The node is behind (it catches up): ask another.
			c.attemptFailed(rt, addr)
		}
		return true, fmt.Errorf("%s: %v for %v: %s", addr, st.GetCode(), rt.group, st.GetMessage())
	case wire.Code_UNAVAILABLE, wire.Code_UNKNOWN_GROUP:
		c.attemptFailed(rt, addr)
		return true, fmt.Errorf("%s: %v for %v: %s", addr, st.GetCode(), rt.group, st.GetMessage())
	}
	return false, finalStatusErr(st)
}

// attemptFailed moves rt's next attempt past addr.
func (c *Client) attemptFailed(rt *target, addr string) {
	if rt.leader {
		c.leaderFailed(rt.group, addr)
	} else {
		c.readFailed(rt.group, addr)
	}
}

// redirect follows a REDIRECT status: rt.ino belongs to st.ministry,
// at st.epoch, led (as the node knew) from st.leader_addr.
func (c *Client) redirect(rt *target, st *wire.Status) (bool, error) {
	rt.hops++
	to := ids.GroupID(st.GetMinistry())
	if rt.ino != 0 && to != 0 {
		c.setOwner(rt.ino, to)
	}
	if e := st.GetEpoch(); e != 0 && to != 0 {
		c.noteEpoch(to, e)
	}
	if to == 0 || to == rt.group || rt.hops > maxRedirects {
		return false, fmt.Errorf("%w: redirect loop for ino %v (%v -> %v after %d hops): %s", syscall.EIO, rt.ino, rt.group, to, rt.hops, st.GetMessage())
	}
	if !rt.follow {
		return false, &redirectedError{to: to, msg: st.GetMessage()}
	}
	c.log.Debug("redirect", slog.Uint64("ino", uint64(rt.ino)), slog.Uint64("from", uint64(rt.group)), slog.Uint64("to", uint64(to)))
	if hint := st.GetLeaderAddr(); hint != "" && rt.leader {
		c.hintLeader(to, hint)
	}
	rt.group = to
	return true, fmt.Errorf("ino %v moved to %v", rt.ino, to)
}

// redirectedError: a call that does not follow redirects reached a
// ministry that does not hold its inode.
type redirectedError struct {
	to  ids.GroupID
	msg string
}

func (e *redirectedError) Error() string { return fmt.Sprintf("redirected to %v: %s", e.to, e.msg) }

// epoch returns the epoch of ministry g this Client believes (0 for the
// president group or a ministry it has not seen in a map).
func (c *Client) epoch(g ids.GroupID) uint64 {
	if g == ids.PresidentGroup {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.epochs[g]
}

// noteEpoch records that ministry g has reached epoch e (epochs only
// grow: an older copy of the map never takes one back).
func (c *Client) noteEpoch(g ids.GroupID, e uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e > c.mu.epochs[g] {
		c.mu.epochs[g] = e
	}
}
