package fusefs

import (
	"context"
	"sync"
	"time"

	"github.com/govfs/govfs/client"
	"github.com/govfs/govfs/internal/wire"
)

// Read leases (DESIGN §5) let the mount keep what the kernel caches.
//
// A regular file's open asks the minister for a whole-file read lease
// without waiting (a try: a writer holding a write lease is not
// disturbed). While the mount holds it:
//
//   - getattr is answered from the attributes read under the lease (when
//     no descriptor of this mount has written since), and the kernel may
//     keep attributes until the lease's trust ends;
//   - an open keeps the kernel's page cache (FOPEN_KEEP_CACHE) when the
//     lease has been held without a break since the cache was last known
//     good, and an open without O_TRUNC needs no request at all.
//
// The lease stays after the last close, so a file read again is served
// from the page cache; at most maxLeases files keep one (the oldest is
// released first). When the minister revokes it (another client is about
// to change the file: its change waits until this mount gave the lease
// back) or it is lost or expires, the mount drops the kernel's page cache
// and attributes of the inode and goes back to close-to-open. Names
// (entries) are not covered: they are cached for EntryTimeout as before.

// maxLeases bounds the read leases one mount keeps.
const maxLeases = 1024

// leaseSet tracks the nodes holding a read lease, oldest first.
type leaseSet struct {
	mu    sync.Mutex
	nodes []*node
	// max is how many it keeps (maxLeases when 0).
	max int
}

func (s *leaseSet) add(n *node) (evict *node) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nodes = append(s.nodes, n)
	limit := s.max
	if limit == 0 {
		limit = maxLeases
	}
	if len(s.nodes) > limit {
		evict = s.nodes[0]
		s.nodes = s.nodes[1:]
	}
	return evict
}

func (s *leaseSet) remove(n *node) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, x := range s.nodes {
		if x == n {
			s.nodes = append(s.nodes[:i], s.nodes[i+1:]...)
			return
		}
	}
}

// validLease returns the node's read lease if it is held and trusted.
func (n *node) validLeaseLocked() *client.Lease {
	if l := n.mu.lease; l != nil && l.Valid() {
		return l
	}
	return nil
}

// readLease returns a valid read lease on the file, asking for one (a
// try) when there is none. nil: none, close-to-open then.
func (n *node) readLease(ctx context.Context) *client.Lease {
	// Asked outside n.mu: the client's queue has its own lock.
	queued := n.fsys.c.QueuedFileChanges(n.ino)
	n.mu.Lock()
	if l := n.validLeaseLocked(); l != nil {
		n.mu.Unlock()
		return l
	}
	old := n.mu.lease
	n.mu.lease, n.mu.cacheLease, n.mu.leaseAttr = nil, nil, false
	// The grant's read can stand for the file only if this mount has
	// nothing of its own in flight: no open descriptor (a write of one
	// may land while the request is out), nothing queued behind the
	// file's create (the minister has not seen it), and no change made
	// here meanwhile (checked again when the answer comes).
	adopt := len(n.mu.handles) == 0 && !queued
	changes := n.mu.localChanges
	n.mu.Unlock()
	if old != nil {
		n.fsys.leases.remove(n)
		// No longer valid: expired, or being revoked, whose callback
		// may not have dropped the kernel's pages yet. They go before
		// the lease does (a store under it finished first).
		n.afterStores()
		_ = n.NotifyContent(0, 0)
		_ = old.Release(ctx)
	}
	l, err := n.fsys.c.AcquireLease(ctx, n.ino, client.LeaseRead, 0, 0, client.LeaseOptions{OnRevoke: n.leaseRevoked, Open: adopt})
	if err != nil {
		return nil // EAGAIN (a writer), or the minister is busy: no cache
	}
	queued = n.fsys.c.QueuedFileChanges(n.ino)
	n.mu.Lock()
	if n.mu.lease != nil { // a concurrent open got one first
		n.mu.Unlock()
		_ = l.Release(ctx)
		return n.readLease(ctx)
	}
	n.mu.lease = l
	// The attributes came with the grant (read after it): current while
	// the lease is held, so the open that asked needs no getattr. Not
	// taken over writes of this mount still buffered, nor over a newer
	// version this mount already knows of (its own change).
	var changed bool
	if a := l.Attr(); a != nil && adopt && len(n.mu.handles) == 0 && n.mu.localChanges == changes && !queued &&
		(n.mu.attr == nil || a.GetVersion() >= n.mu.attr.GetVersion()) {
		old := n.mu.attr
		changed = old != nil && (old.GetSize() != a.GetSize() || old.GetMtimeNs() != a.GetMtimeNs())
		n.mu.attr, n.mu.leaseAttr = a, true
	}
	n.mu.Unlock()
	if changed {
		// Attributes only: the kernel asks again (as Open does after
		// its getattr).
		n.NotifyContent(-1, 0)
	}
	if ev := n.fsys.leases.add(n); ev != nil {
		// Given back outside this open's way: a walk over more files
		// than the mount keeps leases for (grep -r) evicts one at
		// every open. Detached now, so a lease the evicted node takes
		// meanwhile is not the one dropped.
		if old := ev.detachLease(); old != nil {
			go ev.finishDrop(context.WithoutCancel(ctx), old)
		}
	}
	return l
}

// currentLease returns the node's valid read lease, nil if none.
func (n *node) currentLease() *client.Lease {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.validLeaseLocked()
}

// dropLease gives the node's lease back (eviction). The kernel was told
// to trust the attributes until the lease's end: they are invalidated
// first, since other clients' changes no longer wait for this mount.
func (n *node) dropLease(ctx context.Context) {
	if l := n.detachLease(); l != nil {
		n.finishDrop(ctx, l)
	}
}

// detachLease forgets the node's read lease and returns it (nil if none).
func (n *node) detachLease() *client.Lease {
	n.mu.Lock()
	defer n.mu.Unlock()
	l := n.mu.lease
	n.mu.lease, n.mu.cacheLease, n.mu.leaseAttr = nil, nil, false
	n.mu.openVersion = 0
	return l
}

// finishDrop drops what the kernel caches of the file under l, then
// gives l back.
func (n *node) finishDrop(ctx context.Context, l *client.Lease) {
	n.afterStores()
	_ = n.NotifyContent(0, 0) // attributes and data; ENOENT if forgotten
	_ = l.Release(ctx)
}

// leaseRevoked runs when the minister wants the lease back (or it was
// lost): forget it and drop what the kernel caches of the file, before
// the keeper releases it.
func (n *node) leaseRevoked(l *client.Lease, _ bool) {
	n.mu.Lock()
	if n.mu.lease == l {
		n.mu.lease, n.mu.cacheLease, n.mu.leaseAttr = nil, nil, false
		n.mu.openVersion = 0 // the next open drops the page cache
		n.mu.cacheVersion = 0
	}
	// The change that revoked the lease may not be applied on every
	// clerk yet: the next getattr asks linearizably.
	n.mu.linearize = true
	n.mu.Unlock()
	n.fsys.leases.remove(n)
	n.afterStores()
	// Data and attributes; ENOENT when the kernel forgot the inode.
	_ = n.NotifyContent(0, 0)
}

// afterStores waits for a walk-ahead store into the kernel's page cache
// that checked the lease before it was dropped (prefetchData): the drop
// that follows then removes what it stored.
func (n *node) afterStores() {
	n.store.Lock()
	n.store.Unlock() //nolint:staticcheck // an empty section: a barrier
}

// noteWrite: a descriptor wrote, so the attributes held are no longer
// the file's (size, mtime) until read again.
func (n *node) noteWrite() {
	n.mu.Lock()
	n.mu.leaseAttr = false
	n.mu.localChanges++
	n.mu.Unlock()
}

// leaseAttrTimeout returns how long the kernel may keep attributes read
// now under lease l: until the lease's trust ends.
func (n *node) leaseAttrTimeout(l *client.Lease) time.Duration {
	if l == nil {
		return n.fsys.cfg.AttrTimeout
	}
	return max(n.fsys.cfg.AttrTimeout, time.Until(l.Until()))
}

// cachedLeaseAttr returns the attributes held under a valid lease, if
// they are current (no write since they were read).
func (n *node) cachedLeaseAttr() (*wire.Attr, *client.Lease) {
	n.mu.Lock()
	defer n.mu.Unlock()
	l := n.validLeaseLocked()
	if l == nil || !n.mu.leaseAttr || n.mu.attr == nil || len(n.mu.handles) > 0 {
		return nil, l
	}
	return n.mu.attr, l
}

// leaseSize returns the file's size when the mount knows it is current
// (and nothing of this mount's is queued behind the file's create):
// read under a valid lease (another client's change would have revoked
// it first) with no change through this mount since (a write, truncate
// or allocate clears leaseAttr). A read at or past it is then answered
// here: a reader's last read(2), which finds the end of the file, cost a
// linearizable getattr at the ministry (grep -r reads every file to its
// end: one round trip per file).
func (n *node) leaseSize() (int64, bool) {
	if n.fsys.c.QueuedFileChanges(n.ino) {
		return 0, false
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.validLeaseLocked() == nil || !n.mu.leaseAttr || n.mu.attr == nil || n.dirtyEndLocked() > 0 {
		return 0, false
	}
	return int64(n.mu.attr.GetSize()), true
}
