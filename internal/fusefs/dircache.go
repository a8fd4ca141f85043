package fusefs

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/govfs/govfs/client"
)

// Listings kept by the kernel under a directory read lease (docs/fuse.md,
// "Listings kept by the kernel").
//
// A directory this mount lists again (listAfter listings within
// listWindow) gets a directory read lease (client.LeaseOptions.Dir),
// asked for in the background by its next opendir (the opendirs after
// the grant use it), as a try: a directory lease of another mount is
// not disturbed. It is a directory
// lease, not a plain read lease, so that the minister marks the
// directory first: a new minister then makes other clients' entry
// changes wait until this mount reclaimed the lease (a plain read
// lease's directory is not marked, and an entry change during the fence
// would not revoke it). The minister revokes it before another
// client's change of the directory's entries or attributes (entry
// changes drain the read leases of their directory, and a removal those
// of the directory removed: internal/metanode/lease.go), and the revoke
// drops the kernel's listing before the lease goes back. While the lease
// is valid an opendir asks the ministry nothing and lets the kernel keep
// and reuse the listing it cached (FOPEN_CACHE_DIR with
// FOPEN_KEEP_CACHE): a listing repeated costs no request for its
// entries. This mount's own changes go through the kernel, which drops
// its listing itself (the directory's i_version).
//
// A cached listing carries names only: ls -l after the children's
// attributes expired would ask for each child's attributes, where an
// uncached listing (readdirplus) brings them in pages. So a directory
// whose children are looked up or stat'ed through the mount after a
// cached listing (missLimit of them) is listed uncached for listWindow,
// twice as long each time it happens again.

const (
	// listAfter listings of one directory read to their end within
	// listWindow make the next opendir ask for its read lease. Two: a
	// lease for a directory listed once would mostly cost a request and
	// a mark in the log (rm -rf, whose first open of each directory
	// reads it whole, still lists it twice when grep -r did before:
	// hence the background request).
	listAfter  = 2
	listWindow = 30 * time.Second
	// listBackoff: after a refused or revoked read lease no other is
	// asked for this long (another client is changing the directory).
	listBackoff = 5 * time.Second
	// missLimit children asked for after a cached listing make the
	// directory's listings uncached again for listWindow.
	missLimit = 8
	// maxPlusFor bounds a spell of uncached listings.
	maxPlusFor = 8 * time.Minute
	// maxListLeases bounds the directories one mount keeps a read lease
	// on (the oldest is given back first).
	maxListLeases = 256
)

// listState is a directory node's kernel listing cache state.
type listState struct {
	mu sync.Mutex
	// lease is the directory's read lease, nil if none.
	lease *client.Lease
	// cached is the lease under which the kernel may have cached a
	// listing, nil if it never did: an open under another lease lets the
	// kernel drop that listing first (a revoke's invalidation may race
	// with a listing still being read).
	cached *client.Lease
	// listed counts listings read to their end since windowStart.
	listed      int
	windowStart time.Time
	// backoff: no read lease is asked for before then.
	backoff time.Time
	// keptLast: the last open let the kernel use its listing; misses
	// counts the children asked for since the last open; plusUntil:
	// listings stay uncached until then; plusFor: how long the last such
	// spell was.
	keptLast atomic.Bool
	misses   atomic.Int32
	// linearize: the lease was revoked (another client changed the
	// directory): the next opendir and listing read linearizably, as a
	// clerk may not have applied that change yet.
	linearize atomic.Bool
	plusUntil time.Time
	plusFor   time.Duration
	// asking: a lease request started by an opendir is on its way
	// (askListLease); drops counts leases detached, so that a grant
	// answered after the directory's removal (or a revoke, or an
	// eviction) is not installed over it.
	asking bool
	drops  uint64
}

// listingFlags returns the open flags of an opendir of n: the kernel may
// keep and reuse its listing while n's read lease is valid. leased says
// whether the lease is valid (then the directory's attributes this mount
// holds are current but for its own changes, which it made itself).
func (n *node) listingFlags(ctx context.Context) (flags uint32, leased bool) {
	if !n.fsys.cfg.DirCache {
		return 0, false
	}
	s := &n.list
	now := time.Now()
	s.mu.Lock()
	if s.keptLast.Load() {
		if s.misses.Load() >= missLimit {
			// Each time a cached listing is found followed by the
			// children's attributes, uncached listings last twice as
			// long (ls -l every few seconds pays once in a while).
			s.plusFor = min(max(2*s.plusFor, listWindow), maxPlusFor)
			s.plusUntil = now.Add(s.plusFor)
		} else {
			s.plusFor = 0
		}
	}
	s.misses.Store(0)
	s.keptLast.Store(false)
	if s.lease != nil && !s.lease.Valid() {
		// Its renewals failed: the kernel's listing is not trusted
		// (this open drops it, as the lease differs from the next one).
		old := s.lease
		s.lease = nil
		s.drops++
		n.fsys.listLeases.remove(n)
		go n.releaseListLease(old)
	}
	if s.lease == nil {
		if now.Sub(s.windowStart) > listWindow {
			s.windowStart, s.listed = now, 0
		}
		if s.listed >= listAfter && !now.Before(s.backoff) && !s.asking {
			// Asked for in the background: this open is served as
			// without it, and the next one finds it (rm -rf after a
			// grep -r opened 1,731 directories, each waiting 0.7 ms
			// for a lease it never used).
			s.asking = true
			go n.askListLease(bg(ctx), s.drops)
		}
		s.mu.Unlock()
		return 0, false
	}
	l := s.lease
	keep := (s.cached == nil || s.cached == l) && !now.Before(s.plusUntil)
	// An open without KEEP_CACHE drops what an earlier lease left, so
	// from here on the kernel's listing is this lease's.
	s.cached = l
	s.keptLast.Store(keep)
	s.mu.Unlock()
	if !keep {
		return 0, true
	}
	return fuse.FOPEN_CACHE_DIR | fuse.FOPEN_KEEP_CACHE, true
}

// askListLease asks for n's listing lease for listingFlags, which saw
// n.list.drops at drops.
func (n *node) askListLease(ctx context.Context, drops uint64) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	s := &n.list
	s.mu.Lock()
	var evict *node
	if s.lease == nil {
		evict, _ = n.obtainListLease(ctx, time.Now(), drops)
	}
	s.asking = false
	s.mu.Unlock()
	n.dropEvicted(evict)
}

// dropEvicted gives back the listing lease of evict, the directory the
// set evicted for n's (nil: none). Called without n's lock, so that a
// lease the evicted directory takes meanwhile is not the one dropped
// (it left the set in add).
func (n *node) dropEvicted(evict *node) {
	if evict == nil || evict == n {
		return
	}
	if old := evict.detachListLease(false); old != nil {
		go evict.finishListDrop(old, true)
	}
}

// obtainListLease asks for n's listing lease (a try), called with n.list.mu
// held and no lease; it returns with the lock held, the lease in
// n.list.lease when ok, and the directory the set evicted for it. A
// grant is discarded when n.list.drops moved past drops meanwhile.
func (n *node) obtainListLease(ctx context.Context, now time.Time, drops uint64) (evict *node, ok bool) {
	s := &n.list
	s.mu.Unlock()
	l, err := n.fsys.c.AcquireLease(ctx, n.ino, client.LeaseRead, 0, 0, client.LeaseOptions{Dir: true, OnRevoke: n.listLeaseRevoked})
	s.mu.Lock()
	if err == nil && s.drops != drops {
		// Removed, revoked or evicted while it was asked for: the
		// grant may be of a directory this mount just removed.
		go n.releaseListLease(l)
		return nil, false
	}
	if err != nil || !l.Valid() {
		// EAGAIN: another client holds the directory lease or is
		// changing the directory; or it was revoked already.
		s.backoff = now.Add(listBackoff)
		if err == nil {
			go n.releaseListLease(l)
		}
		return nil, false
	}
	if s.lease != nil {
		// A concurrent open got one first.
		go n.releaseListLease(l)
		return nil, true
	}
	s.lease = l
	// Listing leases hold no bytes: the count alone bounds them, so one
	// add evicts at most one.
	if ev := n.fsys.listLeases.add(n, 0); len(ev) > 0 {
		return ev[0], true
	}
	return nil, true
}

// takeListLease returns n's valid listing lease, asking for one (a try)
// when it holds none and no backoff holds; nil if none. The walk-ahead
// uses it to read a listing whose entries stay current (walkahead.go).
func (n *node) takeListLease(ctx context.Context) *client.Lease {
	if !n.fsys.cfg.DirCache {
		return nil
	}
	s := &n.list
	now := time.Now()
	var evict *node
	s.mu.Lock()
	if s.lease != nil && !s.lease.Valid() {
		old := s.lease
		s.lease = nil
		s.drops++
		n.fsys.listLeases.remove(n)
		go n.releaseListLease(old)
	}
	if s.lease == nil {
		if now.Before(s.backoff) {
			s.mu.Unlock()
			return nil
		}
		var ok bool
		if evict, ok = n.obtainListLease(ctx, now, s.drops); !ok {
			s.mu.Unlock()
			return nil
		}
	}
	l := s.lease
	s.mu.Unlock()
	n.dropEvicted(evict)
	return l
}

// listLease returns n's listing lease if it is valid (nil otherwise).
func (n *node) listLease() *client.Lease {
	s := &n.list
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lease != nil && s.lease.Valid() {
		return s.lease
	}
	return nil
}

// noteListed counts a listing of n read from its start to its end
// through the mount.
func (n *node) noteListed() {
	s := &n.list
	now := time.Now()
	s.mu.Lock()
	if now.Sub(s.windowStart) > listWindow {
		s.windowStart, s.listed = now, 0
	}
	s.listed++
	s.mu.Unlock()
}

// noteChildMiss counts a child of n asked for through the mount (a
// lookup or getattr the kernel could not answer).
func (n *node) noteChildMiss() {
	if n.list.keptLast.Load() {
		n.list.misses.Add(1)
	}
}

// noteParentMiss counts a getattr of n for its parent's listings.
func (n *node) noteParentMiss() {
	if !n.fsys.cfg.DirCache {
		return
	}
	if _, p := n.Parent(); p != nil {
		if pn, ok := p.Operations().(*node); ok {
			pn.noteChildMiss()
		}
	}
}

// listLeaseRevoked runs when the minister wants n's read lease back
// (another client is about to change the directory) or it was lost: the
// kernel's listing is dropped before the keeper gives the lease back.
func (n *node) listLeaseRevoked(l *client.Lease, _ bool) {
	n.linearizeLookups()
	s := &n.list
	s.mu.Lock()
	s.backoff = time.Now().Add(listBackoff)
	s.linearize.Store(true)
	n.fsys.changes.Add(1) // keptpage.go
	current := s.lease == l
	if current {
		s.lease = nil
	}
	s.drops++
	s.mu.Unlock()
	if current {
		n.fsys.listLeases.remove(n)
	}
	_ = n.NotifyContent(0, 0) // ENOENT when the kernel forgot the directory
}

// dropListLease gives n's read lease back (eviction, removal, forget).
// The kernel's listing goes first (unless the kernel forgot the
// directory, and the listing with it): other clients' changes no longer
// wait for this mount.
func (n *node) dropListLease(notify bool) {
	if l := n.detachListLease(true); l != nil {
		n.finishListDrop(l, notify)
	}
}

// detachListLease forgets n's read lease and returns it (nil if none),
// taking n out of the set of leased directories with remove (an evicted
// one is out already).
func (n *node) detachListLease(remove bool) *client.Lease {
	s := &n.list
	s.mu.Lock()
	l := s.lease
	s.lease = nil
	s.drops++
	s.mu.Unlock()
	if l != nil && remove {
		n.fsys.listLeases.remove(n)
	}
	return l
}

// finishListDrop drops the kernel's listing (notify) and gives l back.
func (n *node) finishListDrop(l *client.Lease, notify bool) {
	if notify {
		_ = n.NotifyContent(0, 0)
	}
	n.releaseListLease(l)
}

func (n *node) releaseListLease(l *client.Lease) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = l.Release(ctx)
}
