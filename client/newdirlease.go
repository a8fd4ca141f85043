package client

import (
	"slices"
	"time"

	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/wire"
)

// A new directory's lease comes with the batch that sends its create
// (MakeDirDeferred; the minister's side: internal/metanode
// newdirlease.go).

// Both or neither: the minister creates such a directory only with its
// lease granted (or, should the grant's answer be lost, kept for this
// Client until recalled or expired), and refuses the whole batch,
// changing nothing, when it cannot grant one (a new minister's fence, a
// move under way, no lease session yet): refused_new_dirs. The pending
// lease is then revoked as lost and the batch sent again without asking
// for it. So the directory never exists unleased while this Client
// trusts its pending lease, which is therefore trusted, and answers at
// once, while the batch is on its way. (It used to wait for the answer
// there, holding the directory's lock: 315 waits of 0.5-20 ms, 1.0 s of
// a 12-s cp -a of /usr/include, session 27.)

// newDirLeasesFor lists the directories of run whose leases the batch
// asks for: those made by MakeDirDeferred whose lease nobody gave back.
func (c *Client) newDirLeasesFor(run []*deferredOp) []uint64 {
	var out []uint64
	for _, op := range run {
		if l := op.newDir; l != nil && l.pendingLive() {
			out = append(out, uint64(l.ino))
		}
	}
	return out
}

// refusedNewDirsError: a batch was refused, unapplied, because the
// minister could not grant the leases of new directories inos (both or
// neither).
type refusedNewDirsError struct {
	inos []uint64
	err  error
}

func (e *refusedNewDirsError) Error() string { return e.err.Error() }
func (e *refusedNewDirsError) Unwrap() error { return e.err }

// giveUpNewDirLeases revokes as lost the pending leases of run's new
// directories among inos (all of them when inos is nil), refused by the
// minister or redirected away from it, so that the batch is sent again
// without asking for them. It reports whether it found any.
func (c *Client) giveUpNewDirLeases(run []*deferredOp, inos []uint64) bool {
	found := false
	for _, op := range run {
		if l := op.newDir; l != nil && (inos == nil || slices.Contains(inos, uint64(l.ino))) {
			op.newDir = nil
			c.revoke(l, true) // before the directory can exist unleased
			found = true
		}
	}
	return found
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
		default:
			// Held, so covered by the next reclaim: trusted as any
			// lease from now on (not before addIfEpoch: review).
			l.answered()
		}
	}
	for _, id := range grants {
		giveBack = append(giveBack, id) // not asked for by this run
	}
	if len(giveBack) > 0 {
		c.releaseInBackground(g, giveBack)
	}
}
