package client

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/wire"
)

// acquirer sends lease requests that do not wait (tries) in batches: one
// asked while another request to the same group is on its way goes with
// every other one asked meanwhile, in one LEASE_ACQUIRE_BATCH. mkdir of
// 4,000 directories by 4 processes made 4,000 requests, one for each new
// directory's lease. Up to maxAcquireSenders requests go at once, each
// alone as a plain ACQUIRE when it carries one try.
type acquirer struct {
	queues groupQueues[*acquireItem]
	// noBatchUntil (UnixNano): a node answered a batch INVALID (it is
	// older); tries go alone until then.
	noBatchUntil atomic.Int64
}

// noBatchFor is how long tries go alone after a node did not know
// batches.
const noBatchFor = time.Minute

type acquireItem struct {
	req *wire.LeaseRequest
	// gone: the caller stopped waiting (its context ended); a grant
	// that comes after is given back by the sender. Under mu.
	mu   sync.Mutex
	gone bool
	// done gets the answer: resp and err as leaseCall returns them, or
	// alone false when the batch did not answer this request (then the
	// caller sends it itself, so that its refusal, redirect or retry
	// goes through leaseCall as for any request).
	done chan acquireResult
}

type acquireResult struct {
	resp     *wire.LeaseResponse
	err      error
	answered bool
}

// maxAcquireBatch bounds the acquires of one request (the minister takes
// up to 256). maxAcquireSenders requests to a group may be on their way
// at once before tries wait to go in a batch: with one, an open's lease
// request arriving while another was on its way waited for it (write_4k
// opens by 4 processes: 1.8 -> 2.5 ms each).
const (
	maxAcquireBatch   = 128
	maxAcquireSenders = 4
)

// acquireCall is leaseCall for an ACQUIRE, batched when it does not wait.
// A caller whose ctx ends stops waiting; a grant that comes for it later
// is given back by the sender.
func (c *Client) acquireCall(ctx context.Context, g ids.GroupID, req *wire.LeaseRequest, wait time.Duration) (*wire.LeaseResponse, error) {
	if wait > 0 || c.cfg.Clock.Now().UnixNano() < c.acquires.noBatchUntil.Load() {
		return c.leaseCall(ctx, g, req, wait)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	it := &acquireItem{req: req, done: make(chan acquireResult, 1)}
	if c.acquires.queues.add(g, it, maxAcquireSenders) {
		go c.sendAcquires(g)
	}
	var res acquireResult
	select {
	case res = <-it.done:
	case <-ctx.Done():
		it.mu.Lock()
		select {
		case res = <-it.done: // answered just now: taken
		default:
			it.gone = true
		}
		it.mu.Unlock()
		if it.gone {
			return nil, ctx.Err()
		}
	}
	if res.answered {
		return res.resp, res.err
	}
	return c.leaseCall(ctx, g, req, 0)
}

// deliver hands res to it's caller, or gives back a grant the caller no
// longer waits for.
func (c *Client) deliver(g ids.GroupID, it *acquireItem, res acquireResult) {
	it.mu.Lock()
	defer it.mu.Unlock()
	if !it.gone {
		it.done <- res
		return
	}
	if res.err == nil && res.resp.GetLease().GetId() != 0 {
		go c.releaseGranted(g, res.resp.GetLease().GetId())
	}
}

// sendAcquires sends q's requests until none is left: alone as a plain
// ACQUIRE when one is waiting, else in batches.
func (c *Client) sendAcquires(g ids.GroupID) {
	for {
		batch := c.acquires.queues.take(g, maxAcquireBatch)
		if batch == nil {
			return
		}
		// Tries whose callers gave up are not sent (after an outage,
		// their grants would only be given back).
		live := batch[:0:0]
		for _, it := range batch {
			it.mu.Lock()
			gone := it.gone
			it.mu.Unlock()
			if !gone {
				live = append(live, it)
			}
		}
		batch, n := live, len(live)
		if n == 0 {
			continue
		}
		ctx, cancel := c.keeper().stopContext(c.cfg.OpTimeout)
		if n == 1 {
			resp, err := c.leaseCall(ctx, g, batch[0].req, 0)
			cancel()
			c.deliver(g, batch[0], acquireResult{resp: resp, err: err, answered: true})
			continue
		}
		reqs := make([]*wire.LeaseRequest, n)
		for i, it := range batch {
			reqs[i] = it.req
		}
		resp, err := c.leaseCall(ctx, g, &wire.LeaseRequest{Op: wire.LeaseOp_LEASE_ACQUIRE_BATCH, Acquires: reqs}, 0)
		cancel()
		if errors.Is(err, syscall.EINVAL) {
			// A node older than batches: none for a while (each
			// such answer would cost a request more per batch).
			c.acquires.noBatchUntil.Store(c.cfg.Clock.Now().Add(noBatchFor).UnixNano())
		}
		got := resp.GetAcquired()
		for i, it := range batch {
			switch {
			case err != nil && !errors.Is(err, syscall.EINVAL):
				// The batch failed as the request alone would have
				// (leaseCall retried it within the budget).
				c.deliver(g, it, acquireResult{err: err, answered: true})
				continue
			case err == nil && len(got) == n && got[i].GetStatus().GetCode() == wire.Code_OK:
				c.deliver(g, it, acquireResult{resp: got[i], answered: true})
				continue
			case err == nil && len(got) == n && got[i].GetStatus().GetCode() == wire.Code_ERRNO:
				// A refusal (EAGAIN: another client holds it), as
				// leaseCall returns one: with the answer's hints.
				c.deliver(g, it, acquireResult{resp: got[i], err: finalStatusErr(got[i].GetStatus()), answered: true})
				continue
			}
			// Redirected (the inode moved), or an older node: asked
			// again alone, through leaseCall's routing.
			c.deliver(g, it, acquireResult{})
		}
	}
}
