package fusefs

import (
	"log/slog"
	"time"
)

// The directory leases one mount holds on directories in use are bounded
// (maxDirLeases), least recently used given back first.
//
// Without a bound, a mount kept one on every directory the kernel kept,
// and every directory it made is leased before it exists (so that
// creates in it can be queued at once). After some 65,000 directories
// made by one mount, the minister's bound of leases per client
// (lease.DefaultMaxPerClient) refused the next ones: every mkdir, and
// every create in a new directory, went synchronous with a lookup each,
// and the keepalive renewed 65,536 leases in every round. bench mount's
// 16-process mkdir went from 6,000 to 1,400/s on a mount that had made
// 90,000 directories (CPU per mkdir 0.26 -> 1.25 ms).
//
// The bound leaves room under the minister's 65,536 per client for the
// files' read leases (maxLeases), the kept ones (maxKeptDirs) and the
// listing leases (maxListLeases).
const maxDirLeases = 32768

// maxDirLeasesCap is the largest Config.MaxDirLeases: with the files'
// and kept leases, still under the minister's bound.
const maxDirLeasesCap = 40000

// noteDirLease counts directory n, which holds a directory lease, as
// used now, and gives back the leases of the directories least recently
// used beyond the bound. n.dir.mu may be held: the victims are handled
// in the background, each under its own lock.
func (fsys *FS) noteDirLease(n *node) {
	if ev := fsys.dirLeases.add(n, 0); len(ev) > 0 {
		go fsys.evictDirLeases(ev)
	}
}

// evictDirLeases gives back the directory leases of nodes the set let go
// of, as an expired lease is given back (asyncLocked): the listing stops
// answering, the kernel forgets the names it was told to trust under the
// lease, then the lease goes back.
//
// A directory with changes queued (or on their way) keeps its lease:
// given back first, another client's change could come before this
// mount's queued ones. So does one busy now. Both count as used again,
// without evicting another in their place (with every directory's
// changes queued, that would spin until the queue is sent). The least
// recently used have, nearly always, nothing queued.
func (fsys *FS) evictDirLeases(ev []*node) {
	kept := false
	defer func() {
		if kept {
			fsys.retryDirEvictions()
		}
	}()
	for _, n := range ev {
		d := &n.dir
		if !d.mu.TryLock() {
			fsys.dirLeases.readd(n)
			kept = true
			continue
		}
		l := d.lease
		if l == nil {
			d.mu.Unlock()
			continue
		}
		if fsys.c.DirQueued(n.ino) {
			d.mu.Unlock()
			fsys.dirLeases.readd(n)
			kept = true
			continue
		}
		d.lease, d.names = nil, nil
		// The names stay in handedOut too: a revoke of l arriving now
		// finds them there and forgets them before it lets the lease
		// go (taken from it, the revoke released the lease before the
		// kernel forgot them here: found by TestDirLeasesBounded in
		// CI). A later revoke forgets them again, at a lookup's cost.
		handedOut := make([]string, 0, len(d.handedOut))
		for name := range d.handedOut {
			handedOut = append(handedOut, name)
		}
		d.mu.Unlock()
		// Outside dir.mu, as dirLeaseRevoked: the kernel takes the
		// directory's lock for this.
		for _, name := range handedOut {
			_ = n.NotifyEntry(name)
		}
		fsys.log.Debug("directory lease given back: least recently used beyond the bound", slog.Uint64("dir", uint64(n.ino)))
		fsys.dirLeasesEvicted.Inc()
		l.GiveBack()
	}
}

// retryDirEvictions trims the set again a little later, when an
// eviction found its directory busy or with changes queued: once no
// directory is leased any more (a copy that ended), nothing else would
// bring the set back within its bound.
func (fsys *FS) retryDirEvictions() {
	if !fsys.dirEvictRetry.CompareAndSwap(false, true) {
		return
	}
	time.AfterFunc(dirEvictRetry, func() {
		fsys.dirEvictRetry.Store(false)
		if ev := fsys.dirLeases.trim(); len(ev) > 0 {
			fsys.evictDirLeases(ev)
		}
	})
}

// dirEvictRetry is how long retryDirEvictions waits: about a batch of
// the queue's round trip.
const dirEvictRetry = 100 * time.Millisecond

// forgetDirLease takes n out of the set (its lease went another way:
// revoked, expired, kept past a forget, its directory removed).
func (fsys *FS) forgetDirLease(n *node) { fsys.dirLeases.remove(n) }
