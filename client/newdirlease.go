package client

import (
	"time"

	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/wire"
)

// A new directory's lease comes with the batch that sends its create
// (MakeDirDeferred; the minister's side: internal/metanode
// newdirlease.go).

// newDirLeasesFor lists the directories of run whose leases the batch
// asks for: those made by MakeDirDeferred whose lease nobody gave back.
// Their leases are trusted only once the answer came (takeOff).
func (c *Client) newDirLeasesFor(run []*deferredOp) []uint64 {
	q := &c.deferred
	q.mu.Lock()
	none := q.noNewDirLeasesForTest
	q.mu.Unlock()
	var out []uint64
	for _, op := range run {
		if l := op.newDir; l != nil {
			l.takeOff()
			if !none && l.pendingLive() {
				out = append(out, uint64(l.ino))
			}
		}
	}
	return out
}

// settleNewDirLeases hands the grants of resp (group g answered the batch
// asked of group asked; the request left at sent; epoch is the lease
// keeper's reclaim count for asked when it left) to the pending leases
// of run's new directories. A lease with no grant is revoked as lost
// (its OnRevoke runs): the directory, if made, exists unleased. A grant
// nobody holds is given back.
func (c *Client) settleNewDirLeases(run []*deferredOp, asked, g ids.GroupID, resp *wire.MutateResponse, epoch uint64, sent time.Time) {
	grants := map[ids.Ino]uint64{}
	for _, gr := range resp.GetNewDirLeases() {
		grants[ids.Ino(gr.GetIno())] = gr.GetId()
	}
	ttl := time.Duration(resp.GetLeaseTtlMs()) * time.Millisecond
	if ttl <= 0 {
		ttl = defaultTTL
	} else {
		c.leases.lastTTL.Store(int64(ttl))
	}
	var giveBack []uint64
	for _, op := range run {
		l := op.newDir
		if l == nil {
			continue
		}
		op.newDir = nil
		id, ok := grants[l.ino]
		// Granted or revoked (revoke marks it at once) before its users
		// go on.
		defer l.land()
		delete(grants, l.ino)
		switch {
		case !ok:
			c.revoke(l, true)
		case g != asked:
			// Redirected: the epoch taken is another group's.
			giveBack = append(giveBack, id)
			c.revoke(l, true)
		case !l.complete(g, id, ttl, sent):
			giveBack = append(giveBack, id) // given back before it came
		case !c.leases.addIfEpoch(l, epoch):
			// This Client reclaimed its leases in g after the request
			// left (the minister may have changed): as acquireLease.
			giveBack = append(giveBack, id)
			c.revoke(l, true)
		}
	}
	for _, id := range grants {
		giveBack = append(giveBack, id) // not asked for by this run
	}
	if len(giveBack) > 0 {
		c.releaseInBackground(g, giveBack)
	}
}
