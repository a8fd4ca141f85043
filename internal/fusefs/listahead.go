package fusefs

// List-ahead: a process walking a tree (rm -rf, find, du, chmod -R,
// cp -r out of the mount) lists one directory after another, and each
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
	"time"

	"github.com/govfs/govfs/client"
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
		cn.queueListAhead(ctx)
	}
}

// queueListAhead asks for n's first page in the background if n is a
// directory this mount holds the directory lease of, with no current
// kept page and none on its way; ctx is the listing process's (its
// name is the one the page is read in, as its own listing would be).
func (n *node) queueListAhead(ctx context.Context) {
	f := n.fsys
	if !f.cfg.ListAhead || f.cfg.AttrTimeout <= 0 || !n.isDir() {
		return
	}
	if p, age := n.keptFirstPage(); p != nil && age < f.cfg.AttrTimeout/2 {
		return
	}
	d := &n.dir
	if !d.mu.TryLock() {
		return // busy: a change or a listing of its own is under way
	}
	n.inUseLocked()
	ok := d.listingAhead == nil && d.lease != nil && d.lease.Valid() && d.names != nil
	if ok {
		d.listingAhead = make(chan struct{})
	}
	d.mu.Unlock()
	if !ok {
		return
	}
	if !f.walkQueue(walkJob{n: n, ctx: context.WithoutCancel(ctx), listAhead: true}) {
		n.listedAhead()
	}
}

// listAhead reads and keeps n's first page (queueListAhead).
func (n *node) listAhead(ctx context.Context) {
	defer n.listedAhead()
	f := n.fsys
	if f.c.DirQueued(n.ino) {
		// The page would have to wait for the queue: the listing's
		// own fetch does that if it comes.
		return
	}
	m, at := f.markPage(), time.Now()
	l := n.pageLease()
	if l == nil {
		return
	}
	_, ents, next, eof, err := f.c.ReaddirFirstPage(bg(ctx), n.ino, dirPage, client.PastDeferred())
	if err == nil && f.pageQueued(ents) {
		// Read past the queue, it may miss a change queued of an
		// entry (dirHandle.readPage): again, after the queue.
		_, ents, next, eof, err = f.c.ReaddirFirstPage(bg(ctx), n.ino, dirPage)
	}
	if err != nil {
		return
	}
	n.keepFirstPage(ents, next, eof, l, m, at)
	f.pagesListedAhead.Inc()
}

// listedAhead clears n's mark of a first page on its way.
func (n *node) listedAhead() {
	n.dir.mu.Lock()
	close(n.dir.listingAhead)
	n.dir.listingAhead = nil
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
	n.dir.mu.Unlock()
	if ch == nil {
		return
	}
	t := time.NewTimer(listAheadWait)
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C:
	case <-ctx.Done():
	}
}
