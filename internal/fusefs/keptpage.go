package fusefs

import (
	"sync/atomic"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/govfs/govfs/client"
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
//     kept),
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
	changes uint64
	at      time.Time
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

// keepFirstPage keeps the first page of n asked for at `at`, when
// FS.changes was changes and n's directory lease was l: only if that
// lease is still held (a lease revoked and granted again meanwhile let
// another client's change in after the page was read) and no change
// started or ended since.
func (n *node) keepFirstPage(ents []*wire.DirEntry, next []byte, eof bool, l *client.Lease, changes uint64, at time.Time) {
	if l == nil || n.fsys.cfg.AttrTimeout <= 0 || n.fsys.changes.Load() != changes {
		return
	}
	d := &n.dir
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.lease != l || !l.Valid() || d.names == nil {
		d.firstPage = nil
		return
	}
	d.firstPage = &keptPage{ents: ents, next: next, eof: eof, lease: l, changes: changes, at: at}
}

// keptFirstPage returns n's kept first page if it may be served again
// now, with its age.
func (n *node) keptFirstPage() (*keptPage, time.Duration) {
	d := &n.dir
	d.mu.Lock()
	p := d.firstPage
	ok := p != nil && d.lease == p.lease && p.lease.Valid() && d.names != nil
	d.mu.Unlock()
	if !ok {
		return nil, 0
	}
	age := time.Since(p.at)
	f := n.fsys
	if age >= f.cfg.AttrTimeout || f.changes.Load() != p.changes || f.c.DirQueued(n.ino) || f.pageQueued(p.ents) {
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

func (c changeFS) Unlink(cancel <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	defer c.bump()()
	return c.RawFileSystem.Unlink(cancel, h, name)
}

func (c changeFS) Rmdir(cancel <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	defer c.bump()()
	return c.RawFileSystem.Rmdir(cancel, h, name)
}

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
