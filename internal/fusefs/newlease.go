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
