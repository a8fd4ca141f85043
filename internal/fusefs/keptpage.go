package fusefs

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/govfs/govfs/client"
	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/wire"
)

// The first page of a listing, kept for the next opendir of the
// directory within the attribute timeout.
//
// GNU rm -r (and other fts walkers) open every directory twice in a
// row: one getdents, close, then the whole listing. Each open fetched
// the first page from the ministry again (rm -rf of /usr/include: 1,741
// fetches at about 0.4 ms, half of them repeats). A page is kept only
// while this mount holds the directory's lease (no other client changes
// its entries without revoking it first) and is served again only if:
//   - that lease is still held (the same grant),
//   - this mount made no change anywhere since the page was asked for
//     (FS.changes: every request that may change a name, attributes or
//     data, counted as it starts and as it ends, and every push of
//     buffered writes, lock taken or file lease revoked, which can
//     leave a file's attributes in the page older than what the
//     kernel was told; a page asked for while one was under way is not
//     kept), except unlinks and rmdirs, which count only against the
//     pages showing an inode they change (FS.removals: the directory,
//     whose attributes its parent's page shows, and the name's inode,
//     whose link count every page naming it shows),
//   - nothing of the directory or of its entries is queued, and
//   - the page is younger than the attribute timeout; each entry's
//     attributes are then handed to the kernel with what is left of that
//     timeout, so the kernel trusts them no longer than if it had kept
//     them from the first answer itself.
//
// A child whose node holds newer attributes (another request read them
// since) keeps those: node.setAttr never goes back to an older version.
type keptPage struct {
	ents    []*wire.DirEntry
	next    []byte
	eof     bool
	lease   *client.Lease
	changes pageMark
	at      time.Time
}

// pageMark is where this mount's change counts stood when a page was
// asked for.
type pageMark struct {
	changes, removals uint64
}

// markPage samples the change counts before a page is asked for.
func (f *FS) markPage() pageMark {
	return pageMark{changes: f.changes.Load(), removals: f.removals.now()}
}

// pageChanged says whether this mount changed something a page of
// directory dir asked for at m may show.
func (f *FS) pageChanged(m pageMark, dir ids.Ino, ents []*wire.DirEntry) bool {
	return f.changes.Load() != m.changes || f.removals.changedSince(m.removals, dir, ents)
}

// removalLog records, per inode, the count of this mount's unlinks and
// rmdirs as the last one changing it started or ended: while a process
// removes a tree, pages of the directories it has not reached yet stay
// current (listAhead). Bounded: past maxRemovalInodes the record starts
// over, and every page asked for before is taken as changed.
type removalLog struct {
	mu    sync.Mutex
	seq   uint64
	floor uint64
	last  map[ids.Ino]uint64
}

const maxRemovalInodes = 1 << 16

func (r *removalLog) now() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seq
}

// mark counts a removal changing inos as it starts or ends.
func (r *removalLog) mark(inos ...ids.Ino) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seq++
	switch {
	case r.last == nil:
		r.last = map[ids.Ino]uint64{}
	case len(r.last) >= maxRemovalInodes:
		r.last, r.floor = map[ids.Ino]uint64{}, r.seq
	}
	for _, ino := range inos {
		r.last[ino] = r.seq
	}
}

// changedSince says whether a removal counted after at changed dir or
// an inode ents name.
func (r *removalLog) changedSince(at uint64, dir ids.Ino, ents []*wire.DirEntry) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seq == at {
		return false
	}
	if at < r.floor || r.last[dir] > at {
		return true
	}
	for _, e := range ents {
		if r.last[ids.Ino(e.GetIno())] > at {
			return true
		}
	}
	return false
}

// removing counts an unlink or rmdir of name in n as it starts; the
// inode marked is the one this mount knows under the name (the kernel's
// entry first), which may not be the one the ministry removes when
// another client replaced the name unseen. That is safe because no page
// showing a file with other links is ever served (FS.queuedFor takes
// nlink > 1 as queued), and a directory shows only in its parent's page,
// whose directory is marked too. The
// function returned counts its end. The inodes changed are n and the
// name's; when the latter is not known here, the removal counts as
// any other change (FS.changes).
func (n *node) removing(name string) func() {
	ino := n.childIno(name)
	f := n.fsys
	if ino == 0 {
		f.changes.Add(1)
		return func() { f.changes.Add(1) }
	}
	f.removals.mark(n.ino, ino)
	return func() { f.removals.mark(n.ino, ino) }
}

// childIno returns the inode number name has in n as this mount knows
// it (the kernel's entry, or the listing held under n's directory
// lease), 0 if it knows none.
func (n *node) childIno(name string) ids.Ino {
	if in := n.GetChild(name); in != nil {
		return ids.Ino(in.StableAttr().Ino)
	}
	n.dir.mu.Lock()
	defer n.dir.mu.Unlock()
	if e, ok := n.dir.names[name]; ok {
		return e.ino
	}
	return 0
}

// pageLease returns n's directory lease if it is held now (nil if not),
// sampled before a first page is asked for: the page is kept only under
// that same lease.
func (n *node) pageLease() *client.Lease {
	d := &n.dir
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.lease == nil || !d.lease.Valid() || d.names == nil {
		return nil
	}
	return d.lease
}

// keepFirstPage keeps the first page of n asked for at `at`, when the
// change counts were m and n's directory lease was l: only if that
// lease is still held (a lease revoked and granted again meanwhile let
// another client's change in after the page was read) and no change
// the page may show started or ended since.
func (n *node) keepFirstPage(ents []*wire.DirEntry, next []byte, eof bool, l *client.Lease, m pageMark, at time.Time) *keptPage {
	if l == nil || n.fsys.cfg.AttrTimeout <= 0 || n.fsys.pageChanged(m, n.ino, ents) {
		return nil
	}
	d := &n.dir
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.lease != l || !l.Valid() || d.names == nil {
		d.firstPage = nil
		return nil
	}
	d.firstPage = &keptPage{ents: ents, next: next, eof: eof, lease: l, changes: m, at: at}
	return d.firstPage
}

// keptFirstPage returns n's kept first page if it may be served again
// now, with its age.
func (n *node) keptFirstPage() (*keptPage, time.Duration) {
	d := &n.dir
	d.mu.Lock()
	p := d.heldPageLocked()
	d.mu.Unlock()
	return n.currentPage(p)
}

// heldPageLocked returns the kept first page if it is under the
// directory lease held now, nil otherwise. d.mu held.
func (d *dirState) heldPageLocked() *keptPage {
	p := d.firstPage
	if p != nil && d.lease == p.lease && p.lease.Valid() && d.names != nil {
		return p
	}
	return nil
}

// currentPage returns p, held under n's lease, with its age if it may
// be served now (nil otherwise).
func (n *node) currentPage(p *keptPage) (*keptPage, time.Duration) {
	if p == nil {
		return nil, 0
	}
	age := time.Since(p.at)
	f := n.fsys
	if age >= f.cfg.AttrTimeout || f.pageChanged(p.changes, n.ino, p.ents) || f.c.DirQueued(n.ino) || f.pageQueued(p.ents) {
		return nil, 0
	}
	return p, age
}

// backdateAttr moves the time n's attributes were learnt back by age
// when they are a (a kept page's, learnt that long ago).
func (n *node) backdateAttr(a *wire.Attr, age time.Duration) {
	n.mu.Lock()
	if n.mu.attr == a {
		n.mu.attrAt = n.mu.attrAt.Add(-age)
	}
	n.mu.Unlock()
}

// changeFS counts, in FS.changes, every request that may change a name,
// attributes or data of this mount (keptPage): as it starts and as it
// ends.
type changeFS struct {
	fuse.RawFileSystem
	n *atomic.Uint64
}

func (c changeFS) bump() func() {
	c.n.Add(1)
	return func() { c.n.Add(1) }
}

func (c changeFS) SetAttr(cancel <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	defer c.bump()()
	return c.RawFileSystem.SetAttr(cancel, in, out)
}

func (c changeFS) Mknod(cancel <-chan struct{}, in *fuse.MknodIn, name string, out *fuse.EntryOut) fuse.Status {
	defer c.bump()()
	return c.RawFileSystem.Mknod(cancel, in, name, out)
}

func (c changeFS) Mkdir(cancel <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	defer c.bump()()
	return c.RawFileSystem.Mkdir(cancel, in, name, out)
}

// Unlink and Rmdir are counted by the node (node.removing), per inode.

func (c changeFS) Rename(cancel <-chan struct{}, in *fuse.RenameIn, oldName, newName string) fuse.Status {
	defer c.bump()()
	return c.RawFileSystem.Rename(cancel, in, oldName, newName)
}

func (c changeFS) Link(cancel <-chan struct{}, in *fuse.LinkIn, name string, out *fuse.EntryOut) fuse.Status {
	defer c.bump()()
	return c.RawFileSystem.Link(cancel, in, name, out)
}

func (c changeFS) Symlink(cancel <-chan struct{}, h *fuse.InHeader, target, name string, out *fuse.EntryOut) fuse.Status {
	defer c.bump()()
	return c.RawFileSystem.Symlink(cancel, h, target, name, out)
}

func (c changeFS) SetXAttr(cancel <-chan struct{}, in *fuse.SetXAttrIn, attr string, data []byte) fuse.Status {
	defer c.bump()()
	return c.RawFileSystem.SetXAttr(cancel, in, attr, data)
}

func (c changeFS) RemoveXAttr(cancel <-chan struct{}, h *fuse.InHeader, attr string) fuse.Status {
	defer c.bump()()
	return c.RawFileSystem.RemoveXAttr(cancel, h, attr)
}

func (c changeFS) Create(cancel <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	defer c.bump()()
	return c.RawFileSystem.Create(cancel, in, name, out)
}

func (c changeFS) Tmpfile(cancel <-chan struct{}, in *fuse.CreateIn, out *fuse.CreateOut) fuse.Status {
	defer c.bump()()
	return c.RawFileSystem.Tmpfile(cancel, in, out)
}

// Open: O_TRUNC cuts the file.
func (c changeFS) Open(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	defer c.bump()()
	return c.RawFileSystem.Open(cancel, in, out)
}

func (c changeFS) Write(cancel <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	defer c.bump()()
	return c.RawFileSystem.Write(cancel, in, data)
}

func (c changeFS) Writev(cancel <-chan struct{}, in *fuse.WriteIn, data [][]byte) (uint32, fuse.Status) {
	defer c.bump()()
	return c.RawFileSystem.Writev(cancel, in, data)
}

func (c changeFS) CopyFileRange(cancel <-chan struct{}, in *fuse.CopyFileRangeIn) (uint32, fuse.Status) {
	defer c.bump()()
	return c.RawFileSystem.CopyFileRange(cancel, in)
}

func (c changeFS) Ioctl(cancel <-chan struct{}, in *fuse.IoctlIn, inbuf []byte, out *fuse.IoctlOut, outbuf []byte) fuse.Status {
	defer c.bump()()
	return c.RawFileSystem.Ioctl(cancel, in, inbuf, out, outbuf)
}

// Flush, Fsync and Release send buffered writes.
func (c changeFS) Flush(cancel <-chan struct{}, in *fuse.FlushIn) fuse.Status {
	defer c.bump()()
	return c.RawFileSystem.Flush(cancel, in)
}

func (c changeFS) Fsync(cancel <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	defer c.bump()()
	return c.RawFileSystem.Fsync(cancel, in)
}

func (c changeFS) Release(cancel <-chan struct{}, in *fuse.ReleaseIn) {
	defer c.bump()()
	c.RawFileSystem.Release(cancel, in)
}

func (c changeFS) Fallocate(cancel <-chan struct{}, in *fuse.FallocateIn) fuse.Status {
	defer c.bump()()
	return c.RawFileSystem.Fallocate(cancel, in)
}
