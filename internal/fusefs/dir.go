package fusefs

import (
	"context"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/govfs/govfs/client"
	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/posix"
	"github.com/govfs/govfs/internal/wire"
)

// dirPage is how many entries a directory handle asks for at a time.
const dirPage = 512

// dirHandle is an open directory: it lists "." and "..", then the
// entries page by page (the ministry's cookie is the last name, so a
// listing continues correctly across concurrent changes). For
// readdirplus the attributes come with the page, so no lookup per entry
// is sent (Lookup below).
type dirHandle struct {
	n *node
	// cred is the opener's, for a mount that lists in its users' names
	// (FS.userCred); nil otherwise.
	cred *wire.Cred
	// linear: the pages are read linearizably, when the kernel keeps
	// what this handle lists (dircache.go: a clerk that has not applied
	// a change acknowledged before the lease was granted would leave it
	// out of the kept listing until the lease ends) and right after a
	// revoke.
	linear bool

	mu struct {
		sync.Mutex
		pos    int // entries handed out, "." and ".." included
		page   []*wire.DirEntry
		next   int // index in page of the next entry
		cookie []byte
		eof    bool
		// last is the entry handed out last (what Lookup is asked for);
		// lastAhead the last one considered for reading ahead
		// (listahead.go).
		last, lastAhead *wire.DirEntry
		// keptAge: page is a kept first page this old (keptpage.go), 0
		// when it was asked for by this handle.
		keptAge time.Duration
		// fromStart: the listing was read from its start (counted
		// once it reaches its end: dircache.go).
		fromStart, counted bool
		// prefetchAt: page is a first page read at the opendir, then,
		// when this mount's change count was prefetchChanges, not used
		// yet (zero otherwise).
		prefetchAt      time.Time
		prefetchChanges pageMark
	}
}

var (
	_ fs.FileReaddirenter = (*dirHandle)(nil)
	_ fs.FileLookuper     = (*dirHandle)(nil)
	_ fs.FileSeekdirer    = (*dirHandle)(nil)
	_ fs.FileReleasedirer = (*dirHandle)(nil)
	_ fs.FileFsyncdirer   = (*dirHandle)(nil)
)

func (n *node) OpendirHandle(ctx context.Context, _ uint32) (fs.FileHandle, uint32, syscall.Errno) {
	flags, leased := n.listingFlags(bg(ctx))
	// Check that it is a directory we may list now rather than at the
	// first readdir. Under the directory's read lease, or its directory
	// lease, the attributes held are current: another client's change
	// of them, or removal of the directory, revokes the lease first.
	if !leased {
		leased = n.holdsDirLease()
	}
	// After a revoke, another client's change may not be on every clerk
	// yet: this opendir and its listing read linearizably.
	lin := n.list.linearize.Swap(false)
	// Nor when the lookup or listing that found the directory brought
	// its attributes within the attribute timeout: the kernel would
	// trust them that long (find | xargs cat: 913 opendirs at 0.43 ms,
	// each a getattr at a clerk).
	if !leased && !lin && n.recentDirAttr() {
		leased = true
	}
	d := &dirHandle{n: n, cred: n.fsys.userCred(ctx), linear: flags != 0 || lin}
	// fresh: the directory's attributes just read, for the access check.
	var fresh *wire.Attr
	if !leased || n.cachedAttr() == nil || lin {
		ok, a, errno := d.prefetch(ctx, flags)
		if errno != 0 {
			return nil, 0, errno
		}
		fresh = a
		if !ok {
			var opts []client.ReadOption
			if lin {
				opts = append(opts, client.Linearizable())
			}
			if !n.fsys.c.DirQueued(n.ino) {
				// Nothing queued here changes the directory or makes it:
				// its type is asked past the queue (rm -rf opens every
				// directory twice while its unlinks are queued elsewhere:
				// 1.1 ms per opendir waiting for them).
				opts = append(opts, client.PastDeferred())
			}
			a, err := n.fsys.c.GetAttr(bg(ctx), n.ino, opts...)
			if err != nil {
				return nil, 0, n.fsys.errno("opendir", err)
			}
			if a.GetType() != wire.FileType_DIRECTORY {
				return nil, 0, syscall.ENOTDIR
			}
			fresh = a
		}
	}
	if e := n.checkAccessWith(ctx, fresh, posix.MayRead, "opendir"); e != 0 {
		return nil, 0, e
	}
	return d, flags, 0
}

// prefetch reads the listing's first page, with the directory's
// attributes when the node sends them, for an opendir that must ask
// whether n is still a directory: one request where the opendir's
// getattr and the first readdir made two (rm -rf in a tree another
// mount had read: 1,658 opendirs, each a linearizable getattr followed
// by the same read of the first page). A first page read at all proves
// n a directory (the ministry answers ENOTDIR otherwise). The page is
// the handle's, read at the open as POSIX allows; its first use checks
// it is still current (currentPrefetchLocked). ok is false, nothing
// read, when the kernel may serve the listing from its own cache (it
// would never ask for the page).
func (d *dirHandle) prefetch(ctx context.Context, flags uint32) (ok bool, dir *wire.Attr, errno syscall.Errno) {
	if flags&fuse.FOPEN_KEEP_CACHE != 0 {
		return false, nil, 0
	}
	if d.cred != nil {
		ctx = client.WithCaller(ctx, d.cred)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.mu.prefetchChanges, d.mu.prefetchAt = d.n.fsys.markPage(), time.Now()
	var a *wire.Attr
	if errno := d.fetchLocked(ctx, &a); errno != 0 {
		d.mu.prefetchAt = time.Time{}
		return false, nil, errno
	}
	if a != nil && a.GetType() != wire.FileType_DIRECTORY {
		a = nil
	}
	return true, a, 0
}

// currentPrefetchLocked checks, at its first use, a first page read at
// the opendir (prefetch): as a kept page (keptpage.go), it serves only
// if this mount changed nothing since it was asked for, nothing of the
// directory or its entries is queued, and it is younger than the
// attribute timeout, its entries' attributes then trusted for what is
// left of it; otherwise it is dropped and the listing read again (a
// rewinddir before the first readdir never reaches the mount). d.mu
// held.
func (d *dirHandle) currentPrefetchLocked() {
	at := d.mu.prefetchAt
	if at.IsZero() {
		return
	}
	d.mu.prefetchAt = time.Time{}
	f := d.n.fsys
	age := time.Since(at)
	if f.pageChanged(d.mu.prefetchChanges, d.n.ino, d.mu.page) || age >= f.cfg.AttrTimeout || f.c.DirQueued(d.n.ino) || f.pageQueued(d.mu.page) {
		d.mu.page, d.mu.next, d.mu.cookie, d.mu.eof = nil, 0, nil, false
		return
	}
	d.mu.keptAge = max(age, time.Nanosecond)
}

func (d *dirHandle) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	if d.cred != nil {
		ctx = client.WithCaller(ctx, d.cred)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	switch d.mu.pos {
	case 0:
		d.mu.pos++
		d.mu.last = nil
		d.mu.fromStart, d.mu.counted = true, false
		return &fuse.DirEntry{Name: ".", Ino: uint64(d.n.ino), Mode: syscall.S_IFDIR, Off: 1}, 0
	case 1:
		d.mu.pos++
		d.mu.last = nil
		ino := uint64(d.n.ino)
		if _, p := d.n.Parent(); p != nil {
			ino = p.StableAttr().Ino
		}
		return &fuse.DirEntry{Name: "..", Ino: ino, Mode: syscall.S_IFDIR, Off: 2}, 0
	}
	d.currentPrefetchLocked()
	d.listAheadLastLocked(ctx)
	for {
		if d.mu.next < len(d.mu.page) {
			e := d.mu.page[d.mu.next]
			d.mu.next++
			if strings.HasPrefix(string(e.GetName()), hiddenPrefix) {
				continue
			}
			d.mu.pos++
			d.mu.last = e
			return &fuse.DirEntry{Name: string(e.GetName()), Ino: e.GetIno(), Mode: typeBits(e.GetType()), Off: uint64(d.mu.pos)}, 0
		}
		if d.mu.eof {
			if d.mu.fromStart && !d.mu.counted {
				d.mu.counted = true
				d.n.noteListed()
				if d.n.fsys.cfg.WalkAhead {
					d.n.fsys.noteListedDir(d.n)
				}
			}
			return nil, 0
		}
		if errno := d.fetchLocked(ctx, nil); errno != 0 {
			return nil, errno
		}
	}
}

// fetchLocked reads the handle's next page into d.mu (its first when
// d.mu.cookie is empty: then a kept first page may serve). dirAttr, when
// not nil, asks for the first page from the ministry, not a kept one,
// and gets the directory's own attributes read with it (nil from an
// older node). d.mu held.
func (d *dirHandle) fetchLocked(ctx context.Context, dirAttr **wire.Attr) syscall.Errno {
	var opts []client.ReadOption
	if d.linear {
		opts = append(opts, client.Linearizable())
	}
	first := len(d.mu.cookie) == 0
	d.mu.keptAge = 0
	var ents []*wire.DirEntry
	var next []byte
	var eof bool
	var err error
	var p *keptPage
	var age time.Duration
	if first && !d.linear && dirAttr == nil {
		d.n.awaitListAhead(ctx)
		p, age = d.n.keptFirstPage()
	}
	if p != nil {
		ents, next, eof, d.mu.keptAge = p.ents, p.next, p.eof, max(age, time.Nanosecond)
		d.n.fsys.keptPages.Inc()
	} else {
		changes, at := d.n.fsys.markPage(), time.Now()
		var l *client.Lease
		if first && !d.linear {
			l = d.n.pageLease()
		}
		var a *wire.Attr
		a, ents, next, eof, err = d.readPage(ctx, opts)
		if err != nil {
			return d.n.fsys.errno("readdir", err)
		}
		if dirAttr != nil {
			*dirAttr = a
		}
		d.n.keepFirstPage(ents, next, eof, l, changes, at)
	}
	d.n.noteListedPage(ents, first)
	if len(next) == 0 && len(ents) > 0 {
		next = ents[len(ents)-1].GetName()
	}
	d.mu.page, d.mu.next, d.mu.cookie, d.mu.eof = ents, 0, next, eof || len(ents) == 0
	return 0
}

// readPage reads the next page, past the client's queue when nothing
// queued changes the directory's entries or the attributes the page
// brings (FS.readPastQueue). d.mu held.
func (d *dirHandle) readPage(ctx context.Context, opts []client.ReadOption) (*wire.Attr, []*wire.DirEntry, []byte, bool, error) {
	f := d.n.fsys
	if !f.c.DirQueued(d.n.ino) {
		a, ents, next, eof, err := d.readOnePage(ctx, append(opts, client.PastDeferred()))
		if err != nil {
			return nil, nil, nil, false, err
		}
		if !f.pageQueued(ents) {
			return a, ents, next, eof, nil
		}
	}
	return d.readOnePage(ctx, opts)
}

// readOnePage asks for the page at d.mu.cookie, and for the directory's
// attributes with a first page.
func (d *dirHandle) readOnePage(ctx context.Context, opts []client.ReadOption) (*wire.Attr, []*wire.DirEntry, []byte, bool, error) {
	c := d.n.fsys.c
	if len(d.mu.cookie) == 0 {
		return c.ReaddirFirstPage(bg(ctx), d.n.ino, dirPage, opts...)
	}
	ents, next, eof, err := c.ReaddirPage(bg(ctx), d.n.ino, d.mu.cookie, dirPage, opts...)
	return nil, ents, next, eof, err
}

// pageQueued says whether something this mount queued changes an entry
// of a listing page or the attributes it brings (then a page read past
// the queue is not current).
func (f *FS) pageQueued(ents []*wire.DirEntry) bool {
	for _, e := range ents {
		a := e.GetAttr()
		if (a == nil && f.c.InoQueued(ids.Ino(e.GetIno()))) || (a != nil && f.queuedFor(a)) {
			return true
		}
	}
	return false
}

// Lookup answers readdirplus for the entry just listed from the
// attributes that came with the page, and asks the ministry otherwise.
func (d *dirHandle) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	d.mu.Lock()
	e, age := d.mu.last, d.mu.keptAge
	d.mu.Unlock()
	if e != nil && string(e.GetName()) == name && e.GetAttr() != nil && e.GetAttr().GetIno() == e.GetIno() {
		in := d.n.child(ctx, e.GetAttr(), out)
		// Under the directory lease the name stays this file's until
		// the revoke invalidates it: the kernel may keep the entry
		// that long, as for a lookup (leasedEntryLocked). With the
		// 1 s default, renames and unlinks in a directory listed a
		// few seconds before looked every name up again while
		// holding the directory's lock (16 processes renaming in
		// one directory after listing it: 6,300 -> 1,400/s).
		d.n.dir.mu.Lock()
		if d.n.asyncLocked() && d.n.dir.names[name].ino == ids.Ino(e.GetIno()) {
			d.n.leasedEntryLocked(name, out)
		}
		d.n.dir.mu.Unlock()
		if age > 0 {
			// A kept page's attributes: trusted for what is left of
			// the timeout they were first answered with, by the
			// kernel and by the mount (recentDirAttr).
			out.SetAttrTimeout(max(d.n.fsys.cfg.AttrTimeout-age, time.Millisecond))
			if cn, ok := in.Operations().(*node); ok {
				cn.backdateAttr(e.GetAttr(), age)
			}
		}
		return in, 0
	}
	return d.n.Lookup(ctx, name, out)
}

// Seekdir supports rewinding (offset 0) and returning to where the
// listing is; other offsets restart the listing and skip forward.
func (d *dirHandle) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	d.mu.Lock()
	pos := d.mu.pos
	d.mu.Unlock()
	if off == uint64(pos) {
		return 0
	}
	d.mu.Lock()
	d.mu.pos, d.mu.page, d.mu.next, d.mu.cookie, d.mu.eof, d.mu.last = 0, nil, 0, nil, false, nil
	d.mu.Unlock()
	for i := uint64(0); i < off; i++ {
		e, errno := d.Readdirent(ctx)
		if errno != 0 {
			return errno
		}
		if e == nil {
			break
		}
	}
	return 0
}

func (d *dirHandle) Releasedir(context.Context, uint32) {}

// Fsyncdir sends the changes queued under directory leases
// (asyncdir.go) and reports a failed one of this directory; every other
// namespace change is durable when it returns.
func (d *dirHandle) Fsyncdir(ctx context.Context, _ uint32) syscall.Errno {
	return d.n.syncDir(bg(ctx))
}
