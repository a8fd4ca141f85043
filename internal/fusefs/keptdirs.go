package fusefs

import (
	"container/list"
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/govfs/govfs/client"
	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/wire"
)

// Directory leases kept past the kernel's forget (docs/fuse.md,
// "Directory leases past the kernel's forget"; docs/decisions.md).
//
// The kernel forgets a directory's inode when memory is short or caches
// are dropped, and go-fuse's node goes with it (OnForget). Giving its
// directory lease back then made the next change there synchronous
// again: after `echo 3 > drop_caches`, rm -rf of a tree this mount had
// copied paid, per directory, a synchronous unlink, a new lease with its
// mark's commit, a listing and, for half of them, a synchronous rmdir.
// Nothing about the lease depends on the node, only on the directory:
// the lease and its listing are kept here, keyed by the inode number,
// and the next node in use for the directory takes them (inUseLocked).
// While kept nothing can change the directory through this mount (a
// change goes through a node of the directory, which takes the lease
// first; the removal of a hidden name at close: noteEntryGone),
// and another client's change recalls the lease as before
// (leaseHolder). Bounded: at most maxKeptDirs directories and
// maxKeptEntries names, each given back keptIdle after its forget if
// no node took it.

const (
	maxKeptDirs    = 4096
	maxKeptEntries = 256 << 10
	keptIdle       = 2 * time.Minute
)

// leaseHolder routes a directory lease's revoke, and the failures of
// the changes queued under it, to whoever holds it now: the node that
// took it, the node that took it over after a forget, or the kept set
// (n nil).
type leaseHolder struct {
	f   *FS
	ino ids.Ino
	mu  sync.Mutex
	n   *node
	// bad: a queued change of the directory failed, so the listing and
	// attributes held under the lease are not trusted by the next node
	// that takes it over; err: the failure, while no node holds it
	// (reported by the next one's fsync).
	bad bool
	err error
}

func newLeaseHolder(n *node) *leaseHolder { return &leaseHolder{f: n.fsys, ino: n.ino, n: n} }

// revoked is the lease's OnRevoke. The lease is no longer Valid when it
// runs, so nothing takes it over from here on.
func (h *leaseHolder) revoked(l *client.Lease, lost bool) {
	h.mu.Lock()
	n := h.n
	h.mu.Unlock()
	if n != nil {
		n.dirLeaseRevoked(l, lost)
		return
	}
	// Kept: what its node queued goes first.
	h.f.kept.remove(h.ino, l)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h.f.c.FlushDeferred(ctx)
}

// failed notes, at once (the sender runs it before a waiting fsync
// returns), that a queued change of the directory failed, for its
// holder now: that node's next fsync reports it, or the next one's to
// take the lease over. It returns the holder (nil: kept). h may be nil
// (the change was made without a lease).
func (h *leaseHolder) failed(err error) *node {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.bad = true
	if h.n == nil {
		if h.err == nil {
			h.err = err
		}
		return nil
	}
	h.n.dir.noteFailure(err)
	return h.n
}

// keptDir is a forgotten directory's lease and listing.
type keptDir struct {
	ino    ids.Ino
	lease  *client.Lease
	holder *leaseHolder
	names  map[string]dirEnt // nil: not listed
	// attr and mtimeExact: dirState's, when held under this lease.
	attr       *wire.Attr
	mtimeExact bool
	// failed is the first queued change of the directory's that failed
	// since its last fsync (dirState.failed).
	failed error
	at     time.Time
	elem   *list.Element
	// firstPage is the listing's first page read ahead while kept
	// (listahead.go), for the node that takes the lease over; ahead:
	// such a read is on its way.
	firstPage *keptPage
	ahead     bool
}

// keptDirs are the directory leases kept past their nodes' forget, and
// the node of each directory in use (live): only that node's forget
// keeps its lease, and only a node that comes into use takes one over.
// go-fuse makes a node for every lookup and drops all but the first
// registered, and a lookup may register a new node for a directory
// between the old one's removal and its OnForget; a kept lease taken
// over by a node dropped so would never be given back, and one kept
// after a newer node changed the directory would bring back a stale
// listing.
type keptDirs struct {
	mu      sync.Mutex
	m       map[ids.Ino]*keptDir
	live    map[ids.Ino]*node
	order   list.List // oldest first
	entries int
	sweep   *time.Timer
}

// use makes n the node in use for its directory and returns what was
// kept of it (taken out), nil if nothing.
func (s *keptDirs) use(n *node) *keptDir {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.live == nil {
		s.live = map[ids.Ino]*node{}
	}
	s.live[n.ino] = n
	k := s.m[n.ino]
	if k != nil {
		s.unlinkLocked(k)
	}
	return k
}

// forget ends n's use of its directory. It reports whether n was the
// directory's node in use; then k (when it has a lease) is kept in
// place of what was, and the leases to give back are returned: the
// replaced one and those evicted.
func (s *keptDirs) forget(f *FS, n *node, k *keptDir) (live bool, out []*keptDir) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.live[n.ino] != n {
		return false, nil
	}
	delete(s.live, n.ino)
	if s.m == nil {
		s.m = map[ids.Ino]*keptDir{}
	}
	if old := s.m[k.ino]; old != nil {
		s.unlinkLocked(old)
		out = append(out, old)
	}
	if k.lease != nil {
		s.m[k.ino] = k
		k.elem = s.order.PushBack(k)
		s.entries += len(k.names)
	}
	for s.order.Len() > maxKeptDirs || s.entries > maxKeptEntries {
		old := s.order.Front().Value.(*keptDir)
		s.unlinkLocked(old)
		out = append(out, old)
	}
	if s.order.Len() > 0 && s.sweep == nil {
		s.sweep = time.AfterFunc(keptIdle, f.sweepKept)
	}
	return true, out
}

// startAhead returns ino's kept lease, and marks a first page read
// ahead on its way, if the directory's lease is kept with its listing,
// nothing of it failed, it has no current page read ahead and none on
// its way; nil otherwise.
func (s *keptDirs) startAhead(ino ids.Ino, fresh time.Duration) *client.Lease {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := s.m[ino]
	if k == nil || k.lease == nil || k.names == nil || k.failed != nil || k.ahead ||
		(k.firstPage != nil && k.firstPage.lease == k.lease && time.Since(k.firstPage.at) < fresh) {
		return nil
	}
	k.ahead = true
	return k.lease
}

// endAhead keeps p (nil: none) as ino's first page if its lease is still
// l, and ends the mark startAhead set.
func (s *keptDirs) endAhead(ino ids.Ino, l *client.Lease, p *keptPage) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := s.m[ino]
	if k == nil || k.lease != l {
		return
	}
	k.ahead = false
	if p != nil {
		k.firstPage = p
	}
}

// dropPage forgets ino's kept first page if it is p.
func (s *keptDirs) dropPage(ino ids.Ino, p *keptPage) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if k := s.m[ino]; k != nil && k.firstPage == p {
		k.firstPage = nil
	}
}

// remove forgets ino's kept lease if it is l.
func (s *keptDirs) remove(ino ids.Ino, l *client.Lease) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if k := s.m[ino]; k != nil && k.lease == l {
		s.unlinkLocked(k)
	}
}

func (s *keptDirs) unlinkLocked(k *keptDir) {
	delete(s.m, k.ino)
	s.order.Remove(k.elem)
	s.entries -= len(k.names)
}

// expired removes and returns what was kept before cutoff, and has f
// look again when the oldest left is due.
func (s *keptDirs) expired(f *FS, cutoff time.Time) (out []*keptDir) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.order.Len() > 0 {
		k := s.order.Front().Value.(*keptDir)
		if k.at.After(cutoff) {
			break
		}
		s.unlinkLocked(k)
		out = append(out, k)
	}
	s.sweep = nil
	if s.order.Len() > 0 {
		next := s.order.Front().Value.(*keptDir).at.Sub(cutoff)
		s.sweep = time.AfterFunc(max(next, time.Second), f.sweepKept)
	}
	return out
}

// sweepKept gives back the leases kept longer than keptIdle.
func (f *FS) sweepKept() {
	f.giveBackKept(f.kept.expired(f, time.Now().Add(-keptIdle)))
}

// giveBackKept gives the leases of ks back once the queue is sent.
func (f *FS) giveBackKept(ks []*keptDir) {
	if len(ks) == 0 {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		f.c.FlushDeferred(ctx)
		for _, k := range ks {
			if k.failed != nil {
				f.log.Warn("a queued change of a directory failed; the kernel forgot the directory before an fsync could report it",
					slog.Uint64("dir", uint64(k.ino)), slog.Any("err", k.failed))
			}
			_ = k.lease.Release(ctx)
		}
	}()
}

// keepDirLease keeps n's directory lease past its forget (OnForget), in
// place of what was kept of the directory before, when n is the
// directory's node in use; otherwise it gives it back.
func (n *node) keepDirLease() {
	d := &n.dir
	d.mu.Lock()
	l, h, names := d.lease, d.holder, d.names
	k := &keptDir{ino: n.ino, names: names, at: time.Now()}
	if d.attrLease == l {
		k.attr, k.mtimeExact = d.attr, d.mtimeExact
	}
	d.lease, d.names, d.handedOut, d.holder = nil, nil, nil, nil
	d.attr, d.attrLease, d.mtimeExact = nil, nil, false
	d.inUse, d.forgotten = false, true
	d.mu.Unlock()
	n.fsys.forgetDirLease(n)
	keep := l != nil && h != nil && l.Valid() && n.fsys.cfg.AsyncDirs
	if keep {
		// The kernel forgot the directory, and with it every entry
		// handed out under the lease (each held the directory). From
		// here on a failure of a queued change goes to the holder
		// (leaseHolder.failed); those before are n's.
		h.moveTo(nil, l)
		k.lease, k.holder = l, h
	}
	k.failed = d.failure(true)
	live, out := n.fsys.kept.forget(n.fsys, n, k)
	switch {
	case keep && live:
		n.fsys.log.Debug("directory lease kept past the kernel's forget", slog.Uint64("dir", uint64(n.ino)), slog.Bool("listed", names != nil))
	case keep:
		out = append(out, k)
	case l != nil:
		go n.giveBackAfterQueue(l, nil)
	}
	n.fsys.giveBackKept(out)
}

// moveTo makes n the lease's holder (nil: kept). Taken over by a node, it
// reports whether the listing and attributes held under the lease are
// trusted, and the failure to report; ok false (nothing changed): the
// lease is no longer valid.
func (h *leaseHolder) moveTo(n *node, l *client.Lease) (trusted bool, failed error, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if n == nil {
		h.n = nil
		return false, nil, true
	}
	trusted, failed = !h.bad, h.err
	h.bad, h.err = false, nil
	if !l.Valid() {
		return false, failed, false
	}
	h.n = n
	return trusted, failed, true
}

// inUseLocked makes n its directory's node in use, the first time it
// looks at its directory state, and takes over what was kept of the
// directory past an earlier node's forget. Every path that reads or
// changes the lease, the listing or the entries (asyncLocked,
// holdsDirLease, setNameLocked) comes here first. n.dir.mu held.
func (n *node) inUseLocked() {
	d := &n.dir
	if d.inUse || d.forgotten || !n.isDir() {
		// A file's node (getattr asks leasedDirAttr of every node)
		// must not enter the live set: only a directory's forget
		// takes it out.
		return
	}
	d.inUse = true
	k := n.fsys.kept.use(n)
	if k == nil {
		return
	}
	trusted, failed, ok := k.holder.moveTo(n, k.lease)
	if failed == nil {
		failed = k.failed
	}
	if failed != nil {
		d.noteFailure(failed)
	}
	if !ok || d.lease != nil {
		// Expired (a revoked one is given back by its revoke), or n
		// took a lease of its own first.
		if ok {
			k.holder.moveTo(nil, k.lease)
		}
		k.failed = nil
		n.fsys.giveBackKept([]*keptDir{k})
		return
	}
	d.lease, d.holder = k.lease, k.holder
	n.fsys.noteDirLease(n)
	if trusted {
		if p := k.firstPage; p != nil && p.lease == k.lease {
			d.firstPage = p
		}
		d.names = k.names
		if k.attr != nil {
			d.attr, d.attrLease, d.mtimeExact = k.attr, k.lease, k.mtimeExact
		}
	}
	n.fsys.log.Debug("directory lease kept past a forget taken over", slog.Uint64("dir", uint64(n.ino)), slog.Bool("listed", d.names != nil))
}

// noteEntryGone records that name left directory dir by a change this
// mount made without a node of the directory (the hidden name of a file
// unlinked while open, removed at its last close): in the listing and
// attributes of the directory's node in use, or in what is kept of it.
func (f *FS) noteEntryGone(dir ids.Ino, name string) {
	s := &f.kept
	s.mu.Lock()
	live := s.live[dir]
	if k := s.m[dir]; live == nil && k != nil {
		if _, ok := k.names[name]; ok {
			delete(k.names, name)
			s.entries--
		}
		// Its mtime moved to a time not known here.
		k.attr, k.mtimeExact = nil, false
	}
	s.mu.Unlock()
	if live != nil {
		live.dir.mu.Lock()
		live.setNameLocked(name, nil)
		live.dir.mu.Unlock()
	}
}
