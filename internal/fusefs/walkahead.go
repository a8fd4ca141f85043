package fusefs

// Walk-ahead: a process that opens the files of a directory in the order
// it listed them (cp -r, tar -c, rsync, grep -r, find | xargs cat, a
// training job's data loader) pays a read-lease round trip to the
// minister at every open, and the read of a small file another. When an
// open follows the listing's order, the mount asks for the read leases of
// the next files in the background, a few at a time (the window doubles
// while the opens keep the order, as the kernel's read-ahead does): each
// grant brings the file's attributes, chunk table and inline bytes
// (LeaseOptions.Open), so the process's own open and the read of an
// inline file then ask nothing. The leases are ordinary read leases:
// another client's change revokes them first, as for any open.

import (
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/govfs/govfs/client"
	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/wire"
)

const (
	// walkFirst and walkMax bound the window: files asked for ahead of
	// the one opened.
	walkFirst = 4
	walkMax   = 64
	// walkFresh is how long after a listing its order is followed.
	walkFresh = time.Minute
	// walkNames bounds the names a directory remembers (the start of a
	// bigger listing).
	walkNames = 1 << 14
	// walkInFlight is how many background lease requests a mount makes
	// at a time, walkQueueLen how many wait.
	walkInFlight = 24
	walkQueueLen = 256
)

// walkState is a directory's last listing order and how far ahead of
// the opens following it leases were asked for.
type walkState struct {
	mu      sync.Mutex
	at      time.Time
	entries []walkEntry
	index   map[string]int
	// last is the index of the last open that followed the order, ahead
	// the last index asked for, window the current window.
	last, ahead, window int
	// lease is the directory's listing lease under which entries were
	// read (relist), nil for a listing read without one: under it, a
	// lookup of one of them is answered here (walkLookup).
	lease *client.Lease
	// forgets counts walkForget calls: a relist that read before one
	// is not kept.
	forgets uint64
	// relisting: a relist is queued or running.
	relisting bool
}

type walkEntry struct {
	name string
	ino  ids.Ino
}

// noteListedPage records a page of a listing read from the ministry
// (first: the listing's first page, which starts a new order).
func (n *node) noteListedPage(ents []*wire.DirEntry, first bool) {
	if !n.fsys.cfg.WalkAhead {
		return
	}
	w := &n.walk
	w.mu.Lock()
	defer w.mu.Unlock()
	if first || w.index == nil {
		w.entries, w.index = nil, map[string]int{}
		w.last, w.ahead, w.window = -1, -1, 0
		w.lease = nil
	}
	w.at = time.Now()
	for _, e := range ents {
		if len(w.entries) >= walkNames {
			return
		}
		name := string(e.GetName())
		if e.GetType() != wire.FileType_REGULAR || strings.HasPrefix(name, hiddenPrefix) {
			continue
		}
		w.index[name] = len(w.entries)
		w.entries = append(w.entries, walkEntry{name: name, ino: ids.Ino(e.GetIno())})
	}
}

// walkAhead runs after n, a regular file, was opened for reading: if its
// directory was listed lately and the opens follow that order, the next
// files' leases are asked for in the background.
func (n *node) walkAhead(ctx context.Context) {
	if !n.fsys.cfg.WalkAhead {
		return
	}
	name, parent := n.Parent()
	if parent == nil {
		return
	}
	pn, ok := parent.Operations().(*node)
	if !ok {
		return
	}
	todo, last := pn.walkNext(name, n.ino)
	pn.prefetchChildren(ctx, todo)
	if last {
		// The window reached the listing's end: the process will go on
		// in the directory this mount listed next (find | xargs cat
		// opens files in find's listing order), whose first files'
		// leases it would otherwise ask for at their lookup and open.
		if next := n.fsys.listedAfter(pn); next != nil {
			next.walkHead(ctx)
		}
	}
}

// prefetchChildren queues the walk-ahead fetch of those of todo, children
// of n, that the kernel knows, and returns how many of todo are queued or
// under way.
func (n *node) prefetchChildren(ctx context.Context, todo []walkEntry) (queued int) {
	for _, e := range todo {
		ch := n.GetChild(e.name)
		if ch == nil {
			continue // not known to the kernel: its open looks it up
		}
		cn, ok := ch.Operations().(*node)
		if !ok || cn.ino != e.ino || cn.StableAttr().Mode&syscall.S_IFMT != syscall.S_IFREG {
			continue
		}
		if !cn.beginPrefetch() {
			queued++
			continue // one is under way
		}
		if !n.fsys.walkQueue(walkJob{n: cn, ctx: context.WithoutCancel(ctx)}) {
			cn.endPrefetch()
			continue
		}
		queued++
	}
	return queued
}

// walkHeadFiles is how many of a directory's first files walkHead asks
// for.
const walkHeadFiles = 2

// walkHead asks, in the background, for the leases of the first files of
// directory n's listing when no open has followed it yet; the first open
// that does then widens the window from there (walkNext).
func (n *node) walkHead(ctx context.Context) {
	w := &n.walk
	w.mu.Lock()
	if w.index == nil || w.window != 0 || w.ahead >= 0 || time.Since(w.at) > walkFresh {
		w.mu.Unlock()
		return
	}
	k := min(walkHeadFiles, len(w.entries))
	todo := append([]walkEntry(nil), w.entries[:k]...)
	w.ahead = k - 1
	w.mu.Unlock()
	if queued := n.prefetchChildren(ctx, todo); queued < k {
		// Not all asked for (unknown to the kernel, or the queue
		// full): the first open asks for them again.
		w.mu.Lock()
		if w.window == 0 && w.ahead == k-1 {
			w.ahead = -1
		}
		w.mu.Unlock()
	}
}

// listOrder is the order in which this mount read directories' listings
// to their end (the last listOrderLen of them), for the walk-ahead to go
// on from one directory to the next listed (walkHead).
type listOrder struct {
	mu   sync.Mutex
	dirs []*node // a ring
	next int
	at   map[*node]int // position in dirs
}

const listOrderLen = 4096

// noteListedDir records n's listing read to its end.
func (f *FS) noteListedDir(n *node) {
	o := &f.listOrder
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.at == nil {
		o.at = map[*node]int{}
		o.dirs = make([]*node, listOrderLen)
	}
	if old := o.dirs[o.next]; old != nil && o.at[old] == o.next {
		delete(o.at, old)
	}
	o.dirs[o.next] = n
	o.at[n] = o.next
	o.next = (o.next + 1) % listOrderLen
}

// forgetListedDir drops n from the listing order (the kernel forgot it:
// its walk state would be kept for nothing).
func (f *FS) forgetListedDir(n *node) {
	o := &f.listOrder
	o.mu.Lock()
	defer o.mu.Unlock()
	if i, ok := o.at[n]; ok {
		o.dirs[i] = nil
		delete(o.at, n)
	}
}

// listedAfter returns the first of the next few directories listed after
// n that has files to walk (nil if none).
func (f *FS) listedAfter(n *node) *node {
	o := &f.listOrder
	o.mu.Lock()
	i, ok := o.at[n]
	var cand []*node
	if ok {
		for k := 1; k <= 8; k++ {
			j := (i + k) % listOrderLen
			if j == o.next {
				break
			}
			if o.dirs[j] != nil { // nil: forgotten since
				cand = append(cand, o.dirs[j])
			}
		}
	}
	o.mu.Unlock()
	for _, d := range cand {
		d.walk.mu.Lock()
		files := len(d.walk.entries)
		d.walk.mu.Unlock()
		if files > 0 {
			return d
		}
	}
	return nil
}

// walkWait bounds how long an open waits for the walk-ahead's fetch of
// its file.
const walkWait = 100 * time.Millisecond

// beginPrefetch marks a walk-ahead fetch of the file queued (false: one
// is already).
func (n *node) beginPrefetch() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.mu.prefetching != nil {
		return false
	}
	n.mu.prefetching = make(chan struct{})
	return true
}

// endPrefetch marks it done, waking the opens that wait for it.
func (n *node) endPrefetch() {
	n.mu.Lock()
	ch := n.mu.prefetching
	n.mu.prefetching = nil
	n.mu.Unlock()
	if ch != nil {
		close(ch)
	}
}

// waitPrefetch waits (at most walkWait) for a walk-ahead fetch of the
// file that is queued or under way: a process that catches up with the
// walk-ahead then finds the lease and bytes it fetches, instead of
// asking the minister for the same lease beside it.
func (n *node) waitPrefetch() {
	n.mu.Lock()
	ch := n.mu.prefetching
	n.mu.Unlock()
	if ch == nil {
		return
	}
	waitClosed(ch, walkWait, nil)
}

// waitClosed waits until ch is closed, d has passed or done is closed
// (nil: never).
func waitClosed(ch <-chan struct{}, d time.Duration, done <-chan struct{}) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C:
	case <-done:
	}
}

// walkJob is a lease (and maybe the bytes) to fetch ahead for n, in the
// name of the process whose open asked (ctx).
type walkJob struct {
	n   *node
	ctx context.Context
	// relist: n is a directory to list under its listing lease;
	// listAhead: one whose first page to keep (listahead.go), depth
	// levels below a listing the kernel asked for; keptIno, with n nil:
	// the directory's lease is kept past its node's forget.
	relist, listAhead bool
	depth             int
	keptIno           ids.Ino
	lease             *client.Lease
}

// walkQueue hands j to the mount's walkInFlight workers (started at the
// first job); a job that finds the queue full is dropped (false): the
// open asks for its lease itself then.
func (f *FS) walkQueue(j walkJob) bool {
	f.walkStart.Do(func() {
		f.walkJobs = make(chan walkJob, walkQueueLen)
		for range walkInFlight {
			go func() {
				for j := range f.walkJobs {
					switch {
					case j.relist:
						j.n.relist(j.ctx)
					case j.listAhead && j.n == nil:
						f.listAheadKept(j.ctx, j.keptIno, j.lease)
					case j.listAhead:
						j.n.listAhead(j.ctx, j.depth)
					default:
						j.n.prefetchLease(j.ctx)
					}
				}
			}()
		}
	})
	select {
	case f.walkJobs <- j:
		return true
	default:
		if j.relist {
			j.n.walk.mu.Lock()
			j.n.walk.relisting = false
			j.n.walk.mu.Unlock()
		}
		return false
	}
}

// walkNext says which entries to ask leases for after the open of name.
func (n *node) walkNext(name string, ino ids.Ino) (todo []walkEntry, last bool) {
	w := &n.walk
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.index != nil && time.Since(w.at) > walkFresh {
		// Nobody followed it lately: its names go.
		w.entries, w.index = nil, nil
	}
	i, ok := w.index[name]
	if !ok || w.entries[i].ino != ino {
		return nil, false
	}
	w.at = time.Now() // a walk longer than walkFresh goes on
	switch {
	case w.window == 0:
		w.window = walkFirst // the first open since the listing
	case i == w.last+1 || (i > w.last && i <= w.ahead):
		w.window = min(2*w.window, walkMax) // in order: widen
	default:
		// Out of order: start again small from here.
		w.window, w.ahead = walkFirst, i
	}
	w.last = i
	from, to := max(w.ahead+1, i+1), min(i+w.window, len(w.entries)-1)
	if from > to {
		return nil, i == len(w.entries)-1
	}
	w.ahead = to
	return append([]walkEntry(nil), w.entries[from:to+1]...), to == len(w.entries)-1
}

// relist reads directory n's listing again, linearizably, under its
// listing lease (asked for as a try): another client's change of its
// entries revokes that lease first, so while it is valid the names read
// are current, and walkLookup answers the walk's lookups from them. The
// walk's position is kept by name.
func (n *node) relist(ctx context.Context) {
	w := &n.walk
	defer func() {
		w.mu.Lock()
		w.relisting = false
		w.mu.Unlock()
	}()
	l := n.takeListLease(ctx)
	if l == nil {
		return
	}
	w.mu.Lock()
	forgets := w.forgets
	w.mu.Unlock()
	var ents []*wire.DirEntry
	var cookie []byte
	for len(ents) < walkNames {
		page, next, eof, err := n.fsys.c.ReaddirPage(ctx, n.ino, cookie, dirPage, client.Linearizable())
		if err != nil {
			return
		}
		ents = append(ents, page...)
		if eof || len(page) == 0 {
			break
		}
		if cookie = next; len(cookie) == 0 {
			cookie = page[len(page)-1].GetName()
		}
	}
	if n.listLease() != l {
		return // revoked meanwhile: what was read may be stale
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.index == nil || w.forgets != forgets {
		return // forgotten, or this mount removed a name, meanwhile
	}
	nameAt := func(i int) string {
		if i >= 0 && i < len(w.entries) {
			return w.entries[i].name
		}
		return ""
	}
	last, ahead := nameAt(w.last), nameAt(w.ahead)
	w.entries, w.index = nil, map[string]int{}
	for _, e := range ents {
		if e.GetType() == wire.FileType_REGULAR && !strings.HasPrefix(string(e.GetName()), hiddenPrefix) {
			w.index[string(e.GetName())] = len(w.entries)
			w.entries = append(w.entries, walkEntry{name: string(e.GetName()), ino: ids.Ino(e.GetIno())})
		}
	}
	w.last, w.ahead = -1, -1
	if i, ok := w.index[last]; ok {
		w.last = i
	}
	if i, ok := w.index[ahead]; ok {
		w.ahead = max(i, w.last)
	}
	w.lease = l
}

// walkLookup answers a lookup of name from the listing relist read,
// while the listing lease it was read under is valid (no other client
// changed the directory's entries since), when the kernel still holds
// the child and the child's attributes are current under its own read
// lease (the kernel applies a lookup's attributes whatever their
// timeout). nil: ask the ministry. The first lookup of a name of a walk
// under way without such a listing (the kernel's entries expired: find
// | xargs lists everything before the first open) has the listing read
// again in the background; walks whose entries the kernel still holds
// (grep -r, tar, cp -r) never ask for the listing lease, whose first
// grant on a directory costs a commit.
func (n *node) walkLookup(ctx context.Context, name string, out *fuse.EntryOut) *fs.Inode {
	if !n.fsys.cfg.WalkAhead || !n.fsys.cfg.DirCache {
		return nil
	}
	w := &n.walk
	w.mu.Lock()
	l := w.lease
	i, ok := w.index[name]
	var e walkEntry
	if ok {
		e = w.entries[i]
	}
	relist := ok && w.window > 0 && (l == nil || !l.Valid()) && !w.relisting && time.Since(w.at) < walkFresh
	if relist {
		w.relisting = true
	}
	w.mu.Unlock()
	if relist {
		n.fsys.walkQueue(walkJob{n: n, ctx: context.WithoutCancel(ctx), relist: true})
		return nil
	}
	if l == nil || !ok || n.listLease() != l {
		return nil
	}
	in := n.GetChild(name)
	if in == nil {
		return nil
	}
	ch, ok := in.Operations().(*node)
	if !ok || ch.ino != e.ino {
		return nil
	}
	ch.mu.Lock()
	lin := ch.mu.linearize
	ch.mu.Unlock()
	la, cl := ch.cachedLeaseAttr()
	if la == nil || lin {
		return nil
	}
	ch.setAttr(la, &out.Attr)
	out.SetAttrTimeout(ch.leaseAttrTimeout(cl))
	n.fsys.walkLookups.Inc()
	return in
}

// walkForget drops name from the walk's listing: this mount unlinked
// or renamed it (its own changes do not revoke its listing lease).
func (n *node) walkForget(name string) {
	w := &n.walk
	w.mu.Lock()
	defer w.mu.Unlock()
	w.forgets++
	if i, ok := w.index[name]; ok {
		delete(w.index, name)
		w.entries[i].ino = 0 // keeps the indexes of the others
	}
}

// prefetchLease asks for the file's read lease (with what an open reads)
// unless it holds one or is open.
func (n *node) prefetchLease(ctx context.Context) {
	defer n.endPrefetch()
	n.adoptOnce()
	n.mu.Lock()
	held := n.validLeaseLocked()
	cached := held != nil && n.mu.cacheLease == held
	idle := len(n.mu.handles) == 0 && n.mu.busy == 0
	skip := held != nil || !idle
	n.mu.Unlock()
	if held != nil && !cached && idle {
		// Leased, but the kernel's pages are not known to hold the
		// file (a lease taken over after the kernel forgot the file:
		// keptfiles.go): its bytes are read ahead as for a new lease.
		n.prefetchData(ctx, held)
		return
	}
	if skip {
		return
	}
	n.fsys.walkAsked.Inc()
	if l := n.readLease(ctx); l != nil {
		n.prefetchData(ctx, l)
	}
}

// walkDataMax: a file taken ahead is also read ahead, into the kernel's
// page cache, when it is at most this long (the kernel's own read-ahead
// would fetch that much at the first read).
const walkDataMax = 128 << 10

// prefetchData reads a small file's bytes under its read lease l and
// stores them in the kernel's page cache, where the process's open
// (FOPEN_KEEP_CACHE: the pages are good under l) and reads find them.
// The store happens under n.store, which every path that drops the
// kernel's pages after losing a lease takes first (afterStores), and
// which this mount's opens and truncates of the file take after marking
// themselves busy (fenceStores): a store that checked the lease and the
// file's quiet before lands before such a drop, open or truncate, never
// after it.
func (n *node) prefetchData(ctx context.Context, l *client.Lease) {
	a, held := n.cachedLeaseAttr()
	if a == nil || held != l || a.GetSize() == 0 || a.GetSize() > walkDataMax {
		return
	}
	n.mu.Lock()
	changes := n.mu.localChanges
	n.mu.Unlock()
	f, err := n.fsys.c.FileOfLease(l, a, os.O_RDONLY)
	if err != nil {
		return
	}
	defer f.Close()
	if cred := n.fsys.userCred(ctx); cred != nil {
		f.ActAs(cred) // read in the opener's name, as its open would
	}
	buf := make([]byte, a.GetSize())
	k, err := f.ReadAt(ctx, buf, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return
	}
	n.store.Lock()
	defer n.store.Unlock()
	n.mu.Lock()
	// No descriptor open either: a write open's process may be writing
	// into the page this store would lay the older bytes over (found
	// in review once getattr and opens under the lease no longer
	// refused open descriptors).
	quiet := n.mu.busy == 0 && n.mu.localChanges == changes && len(n.mu.handles) == 0
	n.mu.Unlock()
	if cur, held := n.cachedLeaseAttr(); !quiet || held != l || cur == nil || cur.GetVersion() != a.GetVersion() {
		return // revoked, changed, or opened or truncated here meanwhile
	}
	if n.WriteCache(0, buf[:k]) != 0 {
		return
	}
	n.mu.Lock()
	if n.mu.lease == l {
		n.mu.cacheLease = l
		n.fsys.walkStored.Add(float64(k))
	}
	n.mu.Unlock()
}

// fenceStores marks an open or truncate of the file by this mount under
// way and waits for a walk-ahead store that began before: no store lays
// older bytes over what the opener then writes (prefetchData). The
// returned func ends it.
func (n *node) fenceStores() (done func()) {
	n.mu.Lock()
	n.mu.busy++
	n.mu.Unlock()
	n.afterStores()
	return func() {
		n.mu.Lock()
		n.mu.busy--
		n.mu.Unlock()
	}
}
