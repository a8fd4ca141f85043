package fusefs

// Leases for new files: a regular file this mount created under a
// directory lease (a queued create, asyncdir.go) has its read lease asked
// for in the background once the ministry applied the create, as CephFS
// hands out caps with a create's reply. The grant brings the file's
// attributes (LeaseOptions.Open), so the next open of the file, a write
// open included, asks the ministry nothing: bench mount's write_4k opened
// every file it had just created with a lease request of 1.8 ms, as much
// as the close's commit of the bytes. The lease is an ordinary read
// lease: another client's change of the file revokes it first, and it
// counts against the mount's bound of leased files (leaseSet).
//
// Tries go through the client's batched acquire (client/acquire.go): the
// creates of one batch are applied together, and their leases go in one
// or a few requests.

import (
	"context"
	"time"

	"github.com/govfs/govfs/client"
)

// newLeaseInFlight bounds the new files whose leases are being asked for
// at once; a create applied beyond it gets none (its open asks itself).
const newLeaseInFlight = 1024

// newLeaseTime bounds one such request.
const newLeaseTime = 10 * time.Second

// leaseNewFile asks for the read lease of n, a regular file this mount
// created, in the background, in the creator's name (ctx's caller). It
// runs when the create was applied (the sender's done function: it must
// not block). A file still open then gets it at its last release.
func (f *FS) leaseNewFile(ctx context.Context, n *node) {
	if !f.cfg.NewFileLeases {
		return
	}
	n.mu.Lock()
	if len(n.mu.handles) > 0 {
		// Its descriptors' writes may still be on their way; the
		// grant's attributes would not stand for them.
		n.mu.leaseAtRelease, n.mu.leaseCtx = true, ctx
		n.mu.Unlock()
		return
	}
	skip := n.validLeaseLocked() != nil || n.mu.busy > 0
	n.mu.Unlock()
	if skip {
		return
	}
	select {
	case f.newLeaseSlots <- struct{}{}:
	default:
		return // a burst beyond the bound
	}
	go func() {
		defer func() { <-f.newLeaseSlots }()
		ctx, cancel := context.WithTimeout(ctx, newLeaseTime)
		defer cancel()
		n.mu.Lock()
		skip := n.validLeaseLocked() != nil || len(n.mu.handles) > 0 || n.mu.busy > 0
		n.mu.Unlock()
		if skip {
			return
		}
		// The done function runs just before the client counts the
		// create (and the writes queued behind it) as no longer queued;
		// until then the grant's
		// attributes would not be taken (readLease).
		for i := 0; i < 100 && f.c.QueuedFileChanges(n.ino); i++ {
			time.Sleep(time.Millisecond)
		}
		f.newFileLeases.Inc()
		n.readLeaseFor(ctx, true)
	}()
}

// leaseAfterRelease asks for the lease of a new file whose create was
// applied while it was open, once its last descriptor is released.
func (n *node) leaseAfterRelease() {
	n.mu.Lock()
	want, ctx := n.mu.leaseAtRelease, n.mu.leaseCtx
	n.mu.leaseAtRelease, n.mu.leaseCtx = false, nil
	n.mu.Unlock()
	if want {
		n.fsys.leaseNewFile(ctx, n)
	}
}

// takeNewLease takes l, the read lease granted with n's create
// (client.SetNewFileLeases: in the answer to the batch that created the
// file, at no request of its own). ctx names the creator; base is n's
// count of local changes when the create was queued. Run from the
// create's done function: the create still counts as queued there, so
// the lease is installed in the background once it no longer does (as
// leaseNewFile's request waits).
func (n *node) takeNewLease(ctx context.Context, l *client.Lease, base uint64) {
	l.SetOnRevoke(n.leaseRevoked)
	select {
	case n.fsys.newLeaseSlots <- struct{}{}:
	default:
		l.GiveBack() // a burst beyond the bound
		return
	}
	go func() {
		defer func() { <-n.fsys.newLeaseSlots }()
		for i := 0; i < 100 && n.fsys.c.QueuedFileChanges(n.ino); i++ {
			time.Sleep(time.Millisecond)
		}
		if !n.installNewLease(l, base) {
			l.GiveBack()
			// Asked for again once it can stand (at the last release,
			// or now), if the mount asks for new files' leases itself.
			n.fsys.leaseNewFile(ctx, n)
		}
	}()
}

// installNewLease makes l n's read lease, with the grant's attributes
// as current, as readLeaseFor does with a grant. Not when n has a lease,
// l ended meanwhile, or the attributes may not be the file's: something
// of this mount's changed it since its create was queued (a change sent
// after the batch came after the grant, and its own client's change
// does not revoke it), something is queued for it, or a descriptor or
// an open is at work on it (its writes may be on their way). Such a
// lease would cache nothing the next open would not read again.
func (n *node) installNewLease(l *client.Lease, base uint64) bool {
	queued := n.fsys.c.QueuedFileChanges(n.ino)
	a := l.Attr()
	n.mu.Lock()
	if n.mu.lease != nil || !l.Valid() || a == nil || queued || n.mu.localChanges != base || len(n.mu.handles) > 0 || n.mu.busy > 0 ||
		(n.mu.attr != nil && a.GetVersion() < n.mu.attr.GetVersion()) {
		n.mu.Unlock()
		return false
	}
	old := n.mu.attr
	changed := old != nil && (old.GetSize() != a.GetSize() || old.GetMtimeNs() != a.GetMtimeNs())
	n.mu.lease, n.mu.origin = l, nil
	n.mu.attr, n.mu.leaseAttr = a, true
	n.mu.Unlock()
	if changed {
		n.NotifyContent(-1, 0) // attributes only
	}
	n.fsys.newFileLeases.Inc()
	n.fsys.evictLeases(context.Background(), n.fsys.leases.add(n, int64(l.HeldBytes())))
	return true
}
