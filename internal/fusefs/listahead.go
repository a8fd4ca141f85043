package fusefs

// List-ahead: a process walking a tree without opening or changing its
// files (rm -rf, find, du) lists one directory after another, and each
// listing's first page was a request to the ministry while the process
// waited: rm -rf of /usr/include copied onto the mount spent 1 s of its
// 2.8 s in 900 such fetches of about 1.1 ms, one at a time. When a
// listing hands the kernel a subdirectory (readdirplus), the mount now
// reads that subdirectory's first page in the background and keeps it
// as a kept first page (keptpage.go), so the process's opendir finds it
// there. The page is kept under the same rules as any kept page: only
// under this mount's directory lease on the subdirectory, only while
// this mount changed nothing the page shows, and served only within the
// attribute timeout of its reading. The walker's own unlinks and rmdirs
// elsewhere in the tree do not end it: they count only against the
// pages showing the inodes they change (FS.removals).

import (
	"context"
	"sync"
	"time"

	"github.com/govfs/govfs/client"
	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/wire"
)

// listAheadLastLocked queues the first page of the entry handed out
// last, when it is a subdirectory, for reading ahead. It runs as the
// next entry is asked for, or the end of the listing: by then the
// kernel's lookup of that entry (readdirplus) has put its node in the
// tree (the node a lookup returns may be dropped for one the tree
// already has). d.mu held.
func (d *dirHandle) listAheadLastLocked(ctx context.Context) {
	e := d.mu.last
	if e == nil || d.mu.lastAhead == e || e.GetType() != wire.FileType_DIRECTORY || !d.n.fsys.cfg.ListAhead {
		return
	}
	d.mu.lastAhead = e
	in := d.n.GetChild(string(e.GetName()))
	if in == nil || in.StableAttr().Ino != e.GetIno() {
		return // not looked up (a plain readdir), or since replaced
	}
	if cn, ok := in.Operations().(*node); ok {
		cn.queueListAhead(ctx, 1)
	}
}

// listAheadDepth is how many levels below a listing the kernel asked for
// are read ahead: two, so that a walker that goes down into a small
// directory right after listing it finds that directory's
// subdirectories' pages on their way already.
const listAheadDepth = 2

// queueListAhead asks for n's first page in the background if n is a
// directory this mount holds the directory lease of, with no current
// kept page and none on its way; ctx is the listing process's (its
// name is the one the page is read in, as its own listing would be).
func (n *node) queueListAhead(ctx context.Context, depth int) {
	f := n.fsys
	if !f.cfg.ListAhead || f.cfg.AttrTimeout <= 0 || !n.isDir() {
		return
	}
	d := &n.dir
	if !d.mu.TryLock() {
		return // busy: a change or a listing of its own is under way
	}
	// First: it takes over a lease kept past an earlier node's forget,
	// with any page read ahead under it.
	n.inUseLocked()
	held := d.heldPageLocked()
	ok := d.listingAhead == nil && d.lease != nil && d.lease.Valid() && d.names != nil
	if ok {
		d.listingAhead, d.listingStarted = make(chan struct{}), false
	}
	d.mu.Unlock()
	if !ok {
		return
	}
	if p, age := n.currentPage(held); p != nil && age < f.cfg.AttrTimeout/2 {
		n.listedAhead()
		return
	}
	if !f.walkQueue(walkJob{n: n, ctx: context.WithoutCancel(ctx), listAhead: true, depth: depth}) {
		n.listedAhead()
	}
}

// listAhead reads and keeps n's first page (queueListAhead), and, above
// listAheadDepth, queues its subdirectories'.
func (n *node) listAhead(ctx context.Context, depth int) {
	f := n.fsys
	n.dir.mu.Lock()
	n.dir.listingStarted = true
	n.dir.mu.Unlock()
	if f.c.DirQueued(n.ino) {
		// The page would have to wait for the queue: the listing's
		// own fetch does that if it comes.
		n.listedAhead()
		return
	}
	m, at := f.markPage(), time.Now()
	l := n.pageLease()
	if l == nil {
		n.listedAhead()
		return
	}
	ents, next, eof, err := f.readAheadPage(ctx, n.ino)
	if err == nil {
		if p := n.keepFirstPage(ents, next, eof, l, m, at); p != nil {
			f.aheadPages.add(func() { n.dropPage(p) })
		}
		f.pagesListedAhead.Inc()
	}
	// Done before the next level is queued: an opendir waits for this
	// page only.
	n.listedAhead()
	if err != nil || depth >= listAheadDepth {
		return
	}
	for _, e := range ents {
		if e.GetType() != wire.FileType_DIRECTORY {
			continue
		}
		if in := n.GetChild(string(e.GetName())); in != nil {
			if cn, ok := in.Operations().(*node); ok && in.StableAttr().Ino == e.GetIno() {
				cn.queueListAhead(ctx, depth+1)
			}
			continue
		}
		// The kernel forgot it (or never looked it up): its lease may
		// be kept past its node's forget (keptdirs.go).
		f.queueListAheadKept(ctx, ids.Ino(e.GetIno()), depth+1)
	}
}

// readAheadPage reads directory ino's first page for keeping: past the
// client's queue, and again after it when something queued changes an
// entry of the page (dirHandle.readPage).
func (f *FS) readAheadPage(ctx context.Context, ino ids.Ino) ([]*wire.DirEntry, []byte, bool, error) {
	_, ents, next, eof, err := f.c.ReaddirFirstPage(bg(ctx), ino, dirPage, client.PastDeferred())
	if err == nil && f.pageQueued(ents) {
		_, ents, next, eof, err = f.c.ReaddirFirstPage(bg(ctx), ino, dirPage)
	}
	return ents, next, eof, err
}

// queueListAheadKept asks for the first page of directory ino, which
// has no node, in the background if its directory lease is kept with
// its listing (keptdirs.go): the page is kept with the lease, for the
// node that takes it over when the kernel looks the directory up.
func (f *FS) queueListAheadKept(ctx context.Context, ino ids.Ino, depth int) {
	if f.c.DirQueued(ino) {
		return
	}
	l := f.kept.startAhead(ino, f.cfg.AttrTimeout/2)
	if l == nil {
		return
	}
	if !f.walkQueue(walkJob{ctx: context.WithoutCancel(ctx), listAhead: true, depth: depth, keptIno: ino, lease: l}) {
		f.kept.endAhead(ino, l, nil) // the queue is full: no read on its way
	}
}

// listAheadKept reads and keeps the first page of directory ino, whose
// lease l is kept (queueListAheadKept); its subdirectories, which have
// no node either, are not read ahead. While kept, nothing of the
// directory changes through this mount without a request counted
// mount-wide (keptdirs.go), and another client's change revokes l.
func (f *FS) listAheadKept(ctx context.Context, ino ids.Ino, l *client.Lease) {
	var p *keptPage
	defer func() { f.kept.endAhead(ino, l, p) }()
	if f.c.DirQueued(ino) || !l.Valid() {
		return
	}
	m, at := f.markPage(), time.Now()
	ents, next, eof, err := f.readAheadPage(ctx, ino)
	if err != nil || !l.Valid() || f.pageChanged(m, ino, ents) {
		return
	}
	p = &keptPage{ents: ents, next: next, eof: eof, lease: l, changes: m, at: at}
	f.pagesListedAhead.Inc()
	f.aheadPages.add(func() { f.kept.dropPage(ino, p) })
}

// maxAheadPages bounds the pages read ahead that are kept: past it the
// oldest is dropped if nobody took it (a page may hold 512 entries with
// their attributes; ls -l of a directory of thousands of subdirectories
// this mount holds leases of would keep one for each).
const maxAheadPages = 256

// aheadPages are the last pages read ahead, each with the function that
// drops it from where it is kept (if it is still there).
type aheadPages struct {
	mu   sync.Mutex
	ring [maxAheadPages]func()
	next int
}

func (a *aheadPages) add(drop func()) {
	a.mu.Lock()
	old := a.ring[a.next]
	a.ring[a.next] = drop
	a.next = (a.next + 1) % maxAheadPages
	a.mu.Unlock()
	if old != nil {
		old()
	}
}

// dropPage forgets n's kept first page if it is p.
func (n *node) dropPage(p *keptPage) {
	n.dir.mu.Lock()
	if n.dir.firstPage == p {
		n.dir.firstPage = nil
	}
	n.dir.mu.Unlock()
}

// listedAhead clears n's mark of a first page on its way.
func (n *node) listedAhead() {
	n.dir.mu.Lock()
	close(n.dir.listingAhead)
	n.dir.listingAhead, n.dir.listingStarted = nil, false
	n.dir.mu.Unlock()
}

// listAheadWait bounds how long a listing waits for its first page
// read ahead rather than asking for it again: about the time a fetch
// takes when the machine is busy.
const listAheadWait = 20 * time.Millisecond

// awaitListAhead waits, a bounded time, for n's first page if it is on
// its way (then kept, unless something changed meanwhile).
func (n *node) awaitListAhead(ctx context.Context) {
	n.dir.mu.Lock()
	ch := n.dir.listingAhead
	if !n.dir.listingStarted {
		ch = nil // only queued: it may not start for a while
	}
	n.dir.mu.Unlock()
	if ch != nil {
		waitClosed(ch, listAheadWait, ctx.Done())
	}
}
