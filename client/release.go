package client

import (
	"context"

	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/wire"
)

// Leases go back to their ministers in batches (Client.releases): a release
// asked while another to the same group is on its way waits for it to
// end and then goes with every other one asked meanwhile, in one
// LEASE_RELEASE of many ids. rm -rf of a tree another mount had read made
// that mount give back 8,000 revoked read leases, one request each: the
// metadata nodes' CPU went to those requests (10,700 lease requests in
// 3 s). Each caller still returns once its own id was given back.

// releaseItem is one lease id to give back and where its answer goes.
type releaseItem struct {
	id   uint64
	done chan error
}

// maxReleaseBatch bounds the ids of one request. One request per group
// is on its way at a time: nobody waits for a release but the client
// whose change revoked the lease, and a revoke storm is when batches pay.
const maxReleaseBatch = 1024

// release gives lease id of group g back, with others asked meanwhile;
// it returns when that request ended, or ctx did.
func (c *Client) release(ctx context.Context, g ids.GroupID, id uint64) error {
	it := releaseItem{id: id, done: make(chan error, 1)}
	if c.releases.add(g, it, 1) {
		go c.sendReleases(g)
	}
	select {
	case err := <-it.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// sendReleases sends g's ids until none is left: each request carries
// what was asked while the one before was on its way. A request is
// bounded by the operation timeout and ends with the Client; a batch
// that fails fails for every caller in it (their leases then expire, as
// after any release that failed).
func (c *Client) sendReleases(g ids.GroupID) {
	for {
		batch := c.releases.take(g, maxReleaseBatch)
		if batch == nil {
			return
		}
		batchIDs := make([]uint64, len(batch))
		for i, it := range batch {
			batchIDs[i] = it.id
		}
		ctx, cancel := c.keeper().stopContext(c.cfg.OpTimeout)
		_, err := c.leaseCall(ctx, g, &wire.LeaseRequest{Op: wire.LeaseOp_LEASE_RELEASE, Ids: batchIDs}, 0)
		cancel()
		for _, it := range batch {
			it.done <- err
		}
	}
}
