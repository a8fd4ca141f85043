package client

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/wire"
)

// Leases that come with a create (MutateRequest.lease_new_files,
// internal/metanode/newlease.go): with SetNewFileLeases(true), a batch
// of queued changes that creates regular files asks the ministry for
// their read leases in the same request. Each granted lease is held
// (renewed) like any other and kept for the create's done function,
// which takes it with TakeNewFileLease; one nobody took when the done
// functions ran is given back.

// newLeases holds the leases granted with creates until taken.
type newLeases struct {
	on bool // read-only after SetNewFileLeases, before any create
	mu sync.Mutex
	m  map[ids.Ino]*Lease
}

// SetNewFileLeases makes batches of queued creates ask for the new
// files' read leases (call it before queueing anything).
func (c *Client) SetNewFileLeases(on bool) { c.newLeases.on = on }

// TakeNewFileLease returns the read lease granted with the create of
// ino, nil if none: the caller owns it (it sets its revoke handler with
// SetOnRevoke, then checks Valid). Only from the create's done function.
func (c *Client) TakeNewFileLease(ino ids.Ino) *Lease {
	nl := &c.newLeases
	nl.mu.Lock()
	defer nl.mu.Unlock()
	l := nl.m[ino]
	delete(nl.m, ino)
	return l
}

// SetOnRevoke sets the handler of a lease taken with TakeNewFileLease.
// A revoke before it was set found none: the lease was then given back
// and is no longer Valid.
func (l *Lease) SetOnRevoke(f func(*Lease, bool)) { l.hook.Store(&f) }

// newFileLeasesFor lists the files of run whose leases the batch asks
// for: the regular files it creates that nothing else in it changes. A
// file written (or chmod-ed, ...) in the same batch is left out: the
// mount cannot tell which of its own changes the grant's attributes
// include, so such a lease would cache nothing until the next open
// read them anyway (cp -a, tar -x: each file is created and written in
// one go, and a lease for each would only be given back).
func (c *Client) newFileLeasesFor(run []*deferredOp) []uint64 {
	if !c.newLeases.on {
		return nil
	}
	changed := map[ids.Ino]bool{}
	for _, op := range run {
		if op.changes != 0 {
			changed[op.changes] = true
		}
	}
	var out []uint64
	for _, op := range run {
		if cr := op.cmd.GetCreate(); cr != nil && cr.GetType() == wire.FileType_REGULAR && op.creates != 0 && !changed[op.creates] {
			out = append(out, uint64(op.creates))
		}
	}
	return out
}

// holdNewFileLeases makes the leases granted in resp held by this Client
// (group g answered; the request left at sent; epoch is the lease
// keeper's reclaim count for g when it left) and keeps them for
// TakeNewFileLease. It returns their inodes, for dropNewFileLeases.
func (c *Client) holdNewFileLeases(g ids.GroupID, resp *wire.MutateResponse, epoch uint64, sent time.Time) []ids.Ino {
	grants := resp.GetNewFileLeases()
	if len(grants) == 0 {
		return nil
	}
	ttl := time.Duration(resp.GetLeaseTtlMs()) * time.Millisecond
	if ttl <= 0 {
		ttl = defaultTTL
	}
	var inos []ids.Ino
	var refused []uint64
	defer func() {
		if len(refused) > 0 {
			c.releaseInBackground(g, refused)
		}
	}()
	for _, gr := range grants {
		opened := &wire.ReadResponse{Attr: gr.GetAttr(), ChunksOmitted: true}
		if gr.GetNoChunks() {
			// What an open's GetChunks read would answer (prime).
			opened = &wire.ReadResponse{Attr: gr.GetAttr(), Inline: gr.GetInline(), InlineData: gr.GetInlineData()}
		}
		l := &Lease{c: c, group: g, id: gr.GetId(), ino: ids.Ino(gr.GetIno()), mode: LeaseRead,
			opened: opened, done: make(chan struct{})}
		l.onRevoke = func(l *Lease, lost bool) {
			if f := l.hook.Load(); f != nil && *f != nil {
				(*f)(l, lost)
			}
		}
		l.mu.until = sent.Add(ttl * trustNum / trustDen)
		if !c.leases.addIfEpoch(l, epoch) {
			// This Client reclaimed its leases in g after the request
			// left (the minister may have changed): as acquireLease.
			refused = append(refused, gr.GetId())
			continue
		}
		c.newLeases.mu.Lock()
		if c.newLeases.m == nil {
			c.newLeases.m = map[ids.Ino]*Lease{}
		}
		old := c.newLeases.m[l.ino]
		c.newLeases.m[l.ino] = l
		c.newLeases.mu.Unlock()
		if old != nil {
			old.GiveBack()
		}
		inos = append(inos, l.ino)
	}
	return inos
}

// dropNewFileLeases gives back the leases of inos nobody took.
func (c *Client) dropNewFileLeases(inos []ids.Ino) {
	for _, ino := range inos {
		if l := c.TakeNewFileLease(ino); l != nil {
			l.GiveBack()
		}
	}
}

// releaseInBackground gives back leases ids of g, granted but not held,
// in one request (owned by the keeper; a lost release is reported
// revoked by a keepalive, then released again).
func (c *Client) releaseInBackground(g ids.GroupID, ids []uint64) {
	c.inBackground(func(ctx context.Context) {
		if _, err := c.leaseCall(ctx, g, &wire.LeaseRequest{Op: wire.LeaseOp_LEASE_RELEASE, Ids: ids}, 0); err != nil {
			for _, id := range ids {
				c.leases.gaveUp(g, id)
			}
		}
	})
}

// GiveBack releases l in the background (owned by the Client's lease
// keeper: Close waits for it); a failure is logged, and the lease
// expires.
func (l *Lease) GiveBack() {
	l.c.inBackground(func(ctx context.Context) {
		if err := l.Release(ctx); err != nil {
			l.c.log.Debug("give back a lease (it expires)", slog.Uint64("lease", l.id), slog.Any("err", err))
		}
	})
}
