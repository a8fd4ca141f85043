package client

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/govfs/govfs/internal/wire"
)

// Calls to a node that stops answering. A killed process refuses
// connections and its calls fail at once, but a paused one (SIGSTOP, a
// long GC or swap stall, a machine cut off without a reset) keeps its
// sockets open, and a call to it would wait for its whole timeout
// (CallTimeout, 5 s) before the retry goes to the next node: measured,
// 5.1 s stalls of every operation in flight when the minister was
// paused, although a new one was elected in half a second. A call may
// be slow for good reasons (a change waiting for other clients' leases,
// a held lease request), so slowness alone proves nothing: after
// guardAfter without an answer the node is pinged (Meta.Ping), which a
// live node answers at once; no answer within guardProbe abandons
// the call, and the caller's retry goes elsewhere (a mutation is
// retried with the same request id, so it is answered, never applied
// twice).
const (
	guardAfter = time.Second
	guardProbe = 500 * time.Millisecond
	// guardSilence is how long a node whose call was abandoned is
	// avoided (routing skips it, and a follower's stale hint naming it
	// is ignored), unless it answers meanwhile: long enough for a new
	// leader to be elected and known.
	guardSilence = 3 * time.Second
)

// callCtx returns the context of one call attempt to addr: it ends
// after timeout, when ctx does, or when addr stops answering (above).
// The caller calls the returned function when the call returned. No
// goroutine runs unless the call takes longer than guardAfter. The
// guard counts wall-clock time, like the call's own deadline.
func (c *Client) callCtx(ctx context.Context, addr string, timeout time.Duration) (context.Context, context.CancelFunc) {
	cctx, cancel := context.WithTimeout(ctx, timeout)
	stop := make(chan struct{})
	t := time.AfterFunc(guardAfter, func() { c.guard(cctx, stop, addr, cancel) })
	var once sync.Once
	return cctx, func() {
		once.Do(func() {
			t.Stop()
			close(stop)
			cancel()
		})
	}
}

// guard probes addr while the call it guards (cctx) is running, and
// cancels it when a probe goes unanswered. It ends with the call.
func (c *Client) guard(cctx context.Context, stop <-chan struct{}, addr string, cancel context.CancelFunc) {
	for {
		cl, err := c.conn(addr)
		if err != nil {
			return
		}
		pctx, pcancel := context.WithTimeout(cctx, guardProbe)
		_, err = cl.Ping(pctx, &wire.PingRequest{})
		pcancel()
		select {
		case <-stop:
			return
		default:
		}
		// Unimplemented: a node of an older version, alive.
		if err != nil && cctx.Err() == nil && status.Code(err) != codes.Unimplemented {
			c.log.Debug("node does not answer: the call to it is abandoned and retried elsewhere", slog.String("addr", addr), slog.Any("err", err))
			c.noteSilent(addr)
			cancel()
			return
		}
		next := time.NewTimer(guardAfter)
		select {
		case <-stop:
			next.Stop()
			return
		case <-cctx.Done():
			next.Stop()
			return
		case <-next.C:
		}
	}
}
