package fusefs

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/govfs/govfs/client"
	"github.com/govfs/govfs/internal/diskcache"
	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/wire"
)

// handle is an open regular file: a client.File and the writes buffered
// for it (one extent, see the package doc).
type handle struct {
	n *node
	f *client.File
	// dirtyEnd is the end offset of the buffered extent, 0 when nothing
	// is buffered; read without mu by the node (getattr).
	dirtyEnd atomic.Int64
	// lockLost: a lock on the file was lost while this descriptor was
	// open; its I/O fails with EIO (locks.go).
	lockLost atomic.Bool
	// settleLease is the read lease the node held, with its attributes
	// current (leaseAttr), when this descriptor was opened, and
	// settleBase the node's localChanges then; writes counts this
	// descriptor's writes since. When the release finds the same lease
	// still held and no change of this mount but these writes, the
	// attributes the ministry answered the last of them with are the
	// file's (settleWrites). nil: not opened that way.
	settleLease *client.Lease
	settleBase  uint64
	writes      atomic.Uint64
	// opensAt is the node's opens count with this descriptor's open.
	opensAt uint64

	mu struct {
		sync.Mutex
		buf []byte
		off int64 // file offset of buf[0]
		// err is a failed push not yet reported to the application.
		err error
		// jr is the extent's journal in the disk cache (nil without
		// --cache-dir, or when it could not be written: see Write).
		jr *diskcache.Journal
		// bg is the previous, full extent being pushed in the background
		// while this one fills (nil if none). Every other push waits for
		// it first, so extents land in the order they were written.
		bg *bgPush
		// released: Release closed the File (set under mu, with the
		// close, so a sync of the node skips it: see syncAll).
		released bool
		// releaseCreate ends the hold on the file's queued create taken
		// when this handle created it (client.HoldCreate), nil if none:
		// at close, its times, owner and mode set meanwhile join the
		// create's batch.
		releaseCreate func()
	}
}

// endCreateHold ends the handle's hold on its file's queued create.
func (h *handle) endCreateHold() {
	h.mu.Lock()
	release := h.mu.releaseCreate
	h.mu.releaseCreate = nil
	h.mu.Unlock()
	if release != nil {
		release()
	}
}

// bgPush is an extent pushed in the background. The goroutine never
// takes the handle's lock, so waiting for it under that lock is safe.
type bgPush struct {
	done chan struct{}
	end  int64 // file offset after the extent
	err  error // set before done is closed
	// jr is the extent's journal when the push failed (the waiter
	// decides whether to keep it).
	jr *diskcache.Journal
	// newFile: a new file's push (pushNewLocked), which close need not
	// wait for.
	newFile bool
	// releasing: the handle's release waits for it without the lock, so
	// whoever waits for it first keeps a failed extent's journal, as the
	// release would (under the handle's lock).
	releasing bool
}

// waitBgLocked waits for the background push, if any; its failure is
// kept for the handle's next write, flush or fsync. With keepJournal
// (release: nobody will hear of the failure) the failed extent's journal
// stays for the next mount to commit or report.
func (h *handle) waitBgLocked(keepJournal bool) {
	p := h.mu.bg
	if p == nil {
		return
	}
	<-p.done
	h.mu.bg = nil
	keepJournal = keepJournal || p.releasing
	if p.err != nil && h.mu.err == nil {
		h.mu.err = &client.Error{Op: "write", Path: "buffered data", Err: p.err}
	}
	if p.jr != nil {
		if keepJournal {
			h.n.fsys.log.Error("client cache: buffered writes could not be pushed at release; their journal is kept for the next mount",
				slog.Uint64("ino", uint64(h.n.ino)), slog.Any("err", p.err))
			p.jr.Close()
		} else {
			p.jr.Remove()
		}
	}
}

// pushAsyncLocked pushes the full extent in the background (after the
// previous one) and starts an empty one.
func (h *handle) pushAsyncLocked(ctx context.Context) {
	h.waitBgLocked(false)
	h.startBgLocked(func(buf []byte, off int64) error {
		_, err := h.f.WriteAt(ctx, buf, off)
		return err
	})
}

// pushNewLocked pushes the extent of a new file whose create is still
// queued under the directory lease in the background, its records
// keeping their place in the queue (client.File.WriteNewAsync): close(2)
// and cp -a's utimens need not wait for the chunk write. A failure is
// kept for the handle's next write, flush or fsync and reported by the
// directory's fsync. false: nothing started; push the usual way.
func (h *handle) pushNewLocked(ctx context.Context) bool {
	if len(h.mu.buf) == 0 {
		return false
	}
	h.waitBgLocked(false)
	if h.mu.err != nil {
		return false // reported by the usual way
	}
	// A failure is answered in the write's place in the queue, so the
	// directory's fsync, which waits for the queue, hears it.
	pn := h.n.parentNode()
	wait := h.f.WriteNewAsync(ctx, h.mu.buf, h.mu.off, func(_ *wire.Result, err error) {
		if err != nil && pn != nil {
			pn.dir.noteFailure(err)
		}
	})
	if wait == nil {
		return false
	}
	p := h.startBgLocked(func([]byte, int64) error { return wait() })
	p.newFile = true
	h.setDirtyEndLocked()
	return true
}

// newPushOnlyLocked says that nothing is buffered and a new file's push
// is under way (cp -a started it with its utimens): close, or times set
// after it, need not wait for it, as its records keep their place in
// the queue ahead of what follows.
func (h *handle) newPushOnlyLocked() bool {
	return len(h.mu.buf) == 0 && h.mu.err == nil && h.mu.bg != nil && h.mu.bg.newFile
}

// startBgLocked hands the extent to write, run in the background (the
// previous background push is done), and starts an empty one.
func (h *handle) startBgLocked(write func(buf []byte, off int64) error) *bgPush {
	buf, off, jr := h.mu.buf, h.mu.off, h.mu.jr
	h.mu.buf, h.mu.jr = make([]byte, 0, len(buf)), nil
	p := &bgPush{done: make(chan struct{}), end: off + int64(len(buf))}
	h.mu.bg = p
	go func() {
		defer close(p.done)
		err := write(buf, off)
		h.n.changedHere()
		if jr != nil {
			if err == nil {
				jr.Remove()
			} else {
				p.jr = jr
			}
		}
		p.err = err
	}()
	return p
}

// setDirtyEndLocked publishes the end of the buffered writes, the
// extent being pushed included.
func (h *handle) setDirtyEndLocked() {
	end := int64(0)
	if len(h.mu.buf) > 0 {
		end = h.mu.off + int64(len(h.mu.buf))
	}
	if p := h.mu.bg; p != nil {
		end = max(end, p.end)
	}
	h.dirtyEnd.Store(end)
}

var (
	_ fs.FileReader   = (*handle)(nil)
	_ fs.FileWriter   = (*handle)(nil)
	_ fs.FileFlusher  = (*handle)(nil)
	_ fs.FileFsyncer  = (*handle)(nil)
	_ fs.FileReleaser = (*handle)(nil)
)

// open reports whether the inode has open handles on this mount.
func (n *node) open() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.mu.handles) > 0
}

// dirtyEndLocked is the end of the furthest buffered write of the inode
// on this mount (0 if none).
func (n *node) dirtyEndLocked() uint64 {
	var end int64
	for h := range n.mu.handles {
		end = max(end, h.dirtyEnd.Load())
	}
	return uint64(end)
}

func (n *node) handlesLocked() []*handle {
	hs := make([]*handle, 0, len(n.mu.handles))
	for h := range n.mu.handles {
		hs = append(hs, h)
	}
	return hs
}

// flushAll pushes the buffered writes of every handle of the inode.
func (n *node) flushAll(ctx context.Context) syscall.Errno {
	n.mu.Lock()
	hs := n.handlesLocked()
	n.mu.Unlock()
	var first syscall.Errno
	for _, h := range hs {
		if e := h.push(ctx, false); e != 0 && first == 0 {
			first = e
		}
	}
	return first
}

// syncAll pushes every buffered write of the inode and records what its
// Files owe the ministry (size, mtime: client.File.Sync).
func (n *node) syncAll(ctx context.Context) syscall.Errno {
	if e := n.flushAll(ctx); e != 0 {
		return e
	}
	if n.fsys.c.QueuedFileChanges(n.ino) {
		// Writes answered at their close (write-behind): sent before a
		// lock is given back, and their failures reported below.
		n.fsys.c.FlushDeferred(ctx)
	}
	n.mu.Lock()
	hs := n.handlesLocked()
	n.mu.Unlock()
	for _, h := range hs {
		if e := h.sync(ctx); e != 0 {
			return e
		}
	}
	return 0
}

// syncForTimes is syncAll before a setattr of explicit times: a new
// file's extent goes in the background (pushNewLocked), since its
// records keep their place in the queue, ahead of the times.
func (n *node) syncForTimes(ctx context.Context) syscall.Errno {
	n.mu.Lock()
	hs := n.handlesLocked()
	n.mu.Unlock()
	for _, h := range hs {
		h.mu.Lock()
		started := h.pushNewLocked(ctx) || h.newPushOnlyLocked()
		h.mu.Unlock()
		if !started {
			if e := h.push(ctx, false); e != 0 {
				return e
			}
		}
	}
	for _, h := range hs {
		if e := h.sync(ctx); e != 0 {
			return e
		}
	}
	return 0
}

// sync records the handle's overwrites (client.File.Sync), unless the
// kernel released the handle meanwhile: it does that after close(2) has
// returned, so a utimensat right after close races it (rsync: "failed to
// set times ... Bad file descriptor", the closed File's EBADF). A release
// closes the File under mu, and the close's own sync records what is
// left before this returns.
func (h *handle) sync(ctx context.Context) syscall.Errno {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.mu.released {
		return 0
	}
	if err := h.f.Sync(ctx); err != nil {
		return h.n.fsys.errno("sync", err)
	}
	return 0
}

func (n *node) addHandle(ctx context.Context, f *client.File, flags uint32) *handle {
	return n.addSettlingHandle(ctx, f, nil, 0, flags)
}

// addSettlingHandle is addHandle for a descriptor opened while the node
// held read lease l with current attributes, its localChanges then base
// (see handle.settleLease). flags are the open's.
func (n *node) addSettlingHandle(ctx context.Context, f *client.File, l *client.Lease, base uint64, flags uint32) *handle {
	// A mount whose certificate is not trusted with every file (root
	// squash, chosen uids) reads and writes each file in its opener's
	// name, so the chunk access tokens follow that user's permissions
	// (docs/security.md).
	if cred := n.fsys.userCred(ctx); cred != nil {
		f.ActAs(cred)
	}
	if n.fsys.cfg.WriteBehind && flags&syscall.O_DSYNC == 0 {
		// O_SYNC includes O_DSYNC: each write of such a descriptor
		// waits for its commit.
		f.WriteBehind(n.currentLease)
	}
	h := &handle{n: n, f: f, settleBase: base}
	n.mu.Lock()
	if n.mu.handles == nil {
		n.mu.handles = map[*handle]struct{}{}
	}
	// Settling only for a descriptor that is the inode's only one from
	// its open to its release: another's writes, or the mtime its Sync
	// records at its close, would be changes nobody counted (found in
	// review).
	if len(n.mu.handles) == 0 {
		h.settleLease = l
	}
	n.mu.opens++
	h.opensAt = n.mu.opens
	n.mu.handles[h] = struct{}{}
	n.mu.Unlock()
	return h
}

// openFlags are the flags the client File is opened with: always
// read-write (the kernel enforces the caller's access mode), with O_TRUNC
// when the caller may write.
func openFlags(flags uint32) int {
	f := syscall.O_RDWR
	if flags&syscall.O_ACCMODE != syscall.O_RDONLY && flags&syscall.O_TRUNC != 0 {
		f |= syscall.O_TRUNC
	}
	return f
}

// Open opens the file. Under a read lease held since the attributes were
// read (lease.go) it needs no request and keeps the page cache if the
// lease was held without a break since the cache was known good.
// Otherwise it revalidates the attributes (close-to-open): when they
// changed since the kernel last saw them, its attribute cache is
// invalidated, and the page cache is kept only when nothing changed.
func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if flags&syscall.O_ACCMODE == syscall.O_RDONLY {
		n.waitPrefetch() // the walk-ahead may be fetching it (walkahead.go)
	}
	if e := n.checkAccess(ctx, openWant(flags), "open"); e != 0 {
		return nil, 0, e
	}
	defer n.fenceStores()()
	ctx = bg(n.fsys.forUser(ctx))
	// The lease first: attributes read after it was granted stay current
	// while it is held (a change by another client revokes it first).
	// A write-only open does not ask for one: it reads nothing to cache,
	// and a minister round trip is saved. (Asking in the background
	// instead was tried: pages read before the grant could then be
	// stale for the whole lease.)
	// A write open without O_TRUNC asks for one too, in place of the
	// open's attribute read: the attributes its writes are answered
	// with are then the file's when it is closed (settleWrites), and
	// the next open of the file needs no request (a file written and
	// read back: a build's objects, bench mount's read_4k).
	var l *client.Lease
	var held bool
	switch {
	case flags&syscall.O_ACCMODE != syscall.O_WRONLY:
		n.walkAhead(ctx)
		held = n.currentLease() != nil
		l = n.readLease(ctx)
	case flags&syscall.O_TRUNC == 0:
		held = n.currentLease() != nil
		l = n.readLease(ctx)
	default:
		l = n.currentLease()
	}
	if l != nil && flags&syscall.O_TRUNC == 0 {
		if a, _ := n.cachedLeaseAttr(); a != nil {
			if f, err := n.fileOfLease(l, a, openFlags(flags)); err == nil {
				var fuseFlags uint32
				n.mu.Lock()
				// The page cache is good if the lease was held without a
				// break since it was, or (a lease just granted with the
				// file's attributes) the file did not change since the
				// last open, as close-to-open would find.
				if n.mu.cacheLease == l || n.mu.openVersion == a.GetVersion() {
					fuseFlags |= fuse.FOPEN_KEEP_CACHE
				}
				n.mu.cacheLease, n.mu.openVersion = l, a.GetVersion()
				// Settling takes a's place only if a is still what the
				// node holds as current, read with the count it has now.
				settle, base := l, n.mu.localChanges
				if !n.mu.leaseAttr || n.mu.attr != a {
					settle = nil
				}
				n.mu.Unlock()
				n.setCacheVersion(a.GetVersion())
				if held {
					n.fsys.leasedOpens.Inc()
				}
				return n.addSettlingHandle(ctx, f, settle, base, flags), fuseFlags, 0
			}
		}
	}
	n.mu.Lock()
	changes := n.mu.localChanges
	n.mu.Unlock()
	f, a, e := n.openTrunc(ctx, flags)
	if e != 0 {
		return nil, 0, e
	}
	var fuseFlags uint32
	n.mu.Lock()
	old := n.mu.attr
	if n.mu.openVersion == a.GetVersion() || (l != nil && n.mu.cacheLease == l && l.Valid()) {
		fuseFlags |= fuse.FOPEN_KEEP_CACHE
	}
	n.mu.attr, n.mu.openVersion = a, a.GetVersion()
	var settle *client.Lease
	if l != nil && n.mu.lease == l {
		n.mu.cacheLease = l
		// Current under the lease only if no change of this mount (a
		// write of another descriptor) landed while they were read.
		n.mu.leaseAttr = n.mu.localChanges == changes && n.dirtyEndLocked() == 0
		if n.mu.leaseAttr && flags&syscall.O_TRUNC == 0 {
			settle = l
		}
	}
	base := n.mu.localChanges
	n.mu.Unlock()
	if flags&syscall.O_TRUNC != 0 {
		n.changedHere()
	} else {
		n.setCacheVersion(a.GetVersion())
	}
	if old != nil && (old.GetSize() != a.GetSize() || old.GetMtimeNs() != a.GetMtimeNs()) {
		// Attributes only (offset < 0): the next read or write asks for
		// them, so O_APPEND writes start at the current end.
		n.NotifyContent(-1, 0)
	}
	return n.addSettlingHandle(ctx, f, settle, base, flags), fuseFlags, 0
}

// openTrunc opens a client File of the inode, reading its attributes.
// With O_TRUNC (and write access) the open cuts the file to 0, a size
// change ordered after every write this mount accepted before it: the
// other descriptors' buffered writes are pushed first, and what their
// Files still owe the ministry is cut after (as truncate does), or they
// would bring the cut bytes back.
func (n *node) openTrunc(ctx context.Context, flags uint32) (*client.File, *wire.Attr, syscall.Errno) {
	trunc := openFlags(flags)&syscall.O_TRUNC != 0
	if trunc {
		ctx = n.fsys.asCaller(ctx) // the cut is the opener's change
		if e := n.flushAll(ctx); e != 0 {
			return nil, nil, e
		}
	}
	f, a, err := n.fsys.c.OpenIno(ctx, n.ino, openFlags(flags))
	if err != nil {
		return nil, nil, n.fsys.errno("open", err)
	}
	if trunc {
		n.resetFiles(a, nil)
	}
	return f, a, 0
}

// Create creates and opens name. O_EXCL gives EEXIST for any existing
// name; without it an existing regular file is opened (and truncated with
// O_TRUNC).
func (n *node) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	ctx = bg(ctx)
	in, a, e := n.make(ctx, name, client.NodeSpec{Type: wire.FileType_REGULAR, Mode: mode, Exclusive: true}, out)
	if e == syscall.EEXIST && flags&syscall.O_EXCL == 0 {
		a, err := n.fsys.c.Lookup(ctx, n.ino, name)
		if err != nil {
			return nil, nil, 0, n.fsys.errno("create", err)
		}
		if a.GetType() == wire.FileType_DIRECTORY {
			return nil, nil, 0, syscall.EISDIR
		}
		in = n.child(ctx, a, out)
		ch := in.Operations().(*node)
		f, a, e := ch.openTrunc(ctx, flags)
		if e != 0 {
			return nil, nil, 0, e
		}
		ch.setAttr(a, &out.Attr)
		return in, ch.addHandle(ctx, f, flags), 0, 0
	}
	if e != 0 {
		return nil, nil, 0, e
	}
	f, err := n.fsys.c.FileOf(a, syscall.O_RDWR)
	if err != nil {
		return nil, nil, 0, n.fsys.errno("create", err)
	}
	h := in.Operations().(*node).addHandle(ctx, f, flags)
	if flags&syscall.O_ACCMODE != syscall.O_RDONLY {
		// Until close (at most 100 ms): what the creator sets before
		// it goes with the create.
		release := n.fsys.c.HoldCreate(ids.Ino(a.GetIno()))
		h.mu.Lock()
		h.mu.releaseCreate = release
		h.mu.Unlock()
	}
	return in, h, 0, 0
}

// Read pushes the inode's buffered writes first, so a process reads what
// it wrote.
func (h *handle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	ctx = bg(ctx)
	if e := h.lockErr(); e != 0 {
		return nil, e
	}
	n := h.n
	n.mu.Lock()
	dirty := n.dirtyEndLocked() > 0
	n.mu.Unlock()
	if dirty {
		if e := n.flushAll(ctx); e != 0 {
			return nil, e
		}
	}
	if size, ok := n.leaseSize(); ok && !dirty {
		if off >= size {
			return fuse.ReadResultData(nil), 0 // the end, known under the lease
		}
		if rest := size - off; int64(len(dest)) > rest {
			dest = dest[:rest] // the File need not ask whether it grew
		}
	}
	var got int
	var err error
	n.mu.Lock()
	ver := n.mu.cacheVersion
	n.mu.Unlock()
	if c := n.fsys.cache; c != nil && ver != 0 && !dirty {
		got, err = h.readCached(ctx, c, ver, dest, off)
	} else {
		got, err = h.f.ReadAt(ctx, dest, off)
	}
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, n.fsys.errno("read", err)
	}
	return fuse.ReadResultData(dest[:got]), 0
}

// Write adds data to the buffered extent when it continues or overlaps
// it, and otherwise pushes the extent and starts a new one; a full extent
// is pushed at once.
func (h *handle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	ctx = bg(ctx)
	if off < 0 || off > client.MaxFileSize || int64(len(data)) > client.MaxFileSize-off {
		return 0, syscall.EFBIG
	}
	if e := h.lockErr(); e != 0 {
		return 0, e
	}
	h.n.noteWrite()
	h.writes.Add(1)
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.mu.err; err != nil {
		h.mu.err = nil
		return 0, h.n.fsys.errno("write", err)
	}
	limit := h.n.fsys.cfg.WriteBuffer
	start, end := h.mu.off, h.mu.off+int64(len(h.mu.buf))
	switch {
	case len(h.mu.buf) > 0 && off >= start && off <= end && off+int64(len(data)) <= start+int64(limit):
		// Continues or overlaps the extent.
		k := copy(h.mu.buf[off-start:], data)
		h.mu.buf = append(h.mu.buf, data[k:]...)
	default:
		// An empty buffer (its extent pushed in the background) needs no
		// push, and this write must not wait for the background one:
		// every later push waits for it, so the order is kept.
		if len(h.mu.buf) > 0 {
			if e := h.pushLocked(ctx, false); e != 0 {
				return 0, e
			}
		}
		h.mu.off = off
		h.mu.buf = append(h.mu.buf[:0], data...)
		if c := h.n.fsys.cache; c != nil {
			jr, err := c.NewJournal(h.n.ino, off)
			if err != nil {
				// Without a journal a crash would lose the extent: write
				// it through instead.
				h.n.fsys.log.Warn("client cache: cannot journal buffered writes; writing through", slog.Any("err", err))
				if e := h.pushLocked(ctx, false); e != 0 {
					return 0, e
				}
				return uint32(len(data)), 0
			}
			h.mu.jr = jr
		}
	}
	if h.mu.jr != nil {
		if err := h.mu.jr.WriteAt(data, off); err != nil {
			// Without a journal a crash would lose the extent: push it
			// now instead (write-through).
			h.n.fsys.log.Warn("client cache: journal write failed; writing through", slog.Any("err", err))
			if e := h.pushLocked(ctx, false); e != 0 {
				return 0, e
			}
			return uint32(len(data)), 0
		}
	}
	if len(h.mu.buf) >= limit {
		// Full: pushed while the next extent fills (a sequential
		// writer's data then flows without waiting for each push).
		h.pushAsyncLocked(ctx)
	}
	h.setDirtyEndLocked()
	return uint32(len(data)), 0
}

// pushNew is push for the application's flush, in the background where
// pushNewLocked can.
func (h *handle) pushNew(ctx context.Context) syscall.Errno {
	h.mu.Lock()
	started := h.pushNewLocked(ctx) || h.newPushOnlyLocked()
	h.mu.Unlock()
	if started {
		return 0
	}
	return h.push(ctx, true)
}

// push sends the buffered extent. With report (the application's own
// flush or fsync), a failure kept from an earlier push is returned, once,
// if this one succeeds; without, a failure is kept for the handle's next
// write, flush or fsync.
func (h *handle) push(ctx context.Context, report bool) syscall.Errno {
	h.mu.Lock()
	defer h.mu.Unlock()
	e := h.pushLocked(ctx, false)
	switch {
	case e != 0 && !report:
		h.mu.err = &client.Error{Op: "write", Path: "buffered data", Err: e}
	case e == 0 && report && h.mu.err != nil:
		e = h.n.fsys.errno("write", h.mu.err)
		h.mu.err = nil
	}
	return e
}

// pushLocked writes the extent through the client; on failure the
// extent is dropped (its bytes are lost, and the error is what the
// application hears), except that with keepJournal (nobody is left to
// hear it: release) its journal stays for the next mount to commit or
// report.
func (h *handle) pushLocked(ctx context.Context, keepJournal bool) syscall.Errno {
	h.waitBgLocked(keepJournal)
	if len(h.mu.buf) == 0 {
		h.setDirtyEndLocked()
		return 0
	}
	_, err := h.f.WriteAt(ctx, h.mu.buf, h.mu.off)
	h.n.changedHere()
	if jr := h.mu.jr; jr != nil {
		h.mu.jr = nil
		if err == nil || !keepJournal {
			jr.Remove()
		} else {
			jr.Close()
			h.n.fsys.log.Error("client cache: buffered writes could not be pushed at release; their journal is kept for the next mount",
				slog.Uint64("ino", uint64(h.n.ino)), slog.Any("err", err))
		}
	}
	h.mu.buf = h.mu.buf[:0]
	if cap(h.mu.buf) > h.n.fsys.cfg.WriteBuffer {
		h.mu.buf = nil
	}
	h.dirtyEnd.Store(0)
	if err != nil {
		return h.n.fsys.errno("write", err)
	}
	return 0
}

// Flush runs on every close(2) of a descriptor: push the extent (in the
// background for a new file whose create is queued: pushNewLocked) and
// record the mtime of overwrites (client.File.Sync). Its error is what
// close returns.
func (h *handle) Flush(ctx context.Context) syscall.Errno {
	ctx = bg(ctx)
	// After the new file's push took its own hold, so the create waits
	// on for its bytes.
	defer h.endCreateHold()
	if e := h.pushNew(ctx); e != 0 {
		return e
	}
	return h.flushed(ctx)
}

// flushed is Flush after the push.
func (h *handle) flushed(ctx context.Context) syscall.Errno {
	if err := h.f.Sync(ctx); err != nil {
		return h.n.fsys.errno("flush", err)
	}
	// The writes are out (they were accepted before the loss was
	// known), but the process must hear that its lock is gone.
	return h.lockErr()
}

// Fsync also sends the namespace changes queued under directory leases
// (asyncdir.go): a new file fsynced exists for every client.
func (h *handle) Fsync(ctx context.Context, _ uint32) syscall.Errno {
	ctx = bg(ctx)
	// Pushed here and now (waiting for a background push, whose failure
	// is reported here).
	if e := h.push(ctx, true); e != 0 {
		return e
	}
	if e := h.flushed(ctx); e != 0 {
		return e
	}
	h.n.fsys.c.FlushDeferred(bg(ctx))
	// An inline write queued behind the file's create that failed.
	if err := h.f.Sync(ctx); err != nil {
		return h.n.fsys.errno("fsync", err)
	}
	// A queued change of the file's directory that failed (its create,
	// perhaps) is reported here too, until the directory's fsync takes it.
	if pn := h.n.parentNode(); pn != nil && pn.dir.failure(false) != nil {
		return syscall.EIO
	}
	return 0
}

// Release runs after the last close: push what is left (nobody can hear
// an error now, so it is logged), close the File and, for a file
// unlinked while open, remove its hidden name.
func (h *handle) Release(ctx context.Context) syscall.Errno {
	ctx = bg(ctx)
	// After the last push (which may take its own hold), as in Flush.
	defer h.endCreateHold()
	n := h.n
	h.mu.Lock()
	if p := h.mu.bg; p != nil && h.newPushOnlyLocked() {
		p.releasing = true
		// A new file's push (its records keep their place in the queue)
		// is waited for without the lock: the kernel releases after
		// close(2) returned, and cp -a's or git's utimensat right after
		// close (syncForTimes) waited here for the chunk write (git
		// clone: 458 of 1,463 setattrs, 6.9 ms each).
		h.mu.Unlock()
		<-p.done
		h.mu.Lock()
	}
	e := h.pushLocked(ctx, true)
	if e == 0 && h.mu.err != nil {
		e = n.fsys.errno("write", h.mu.err)
		h.mu.err = nil
	}
	h.mu.Unlock()
	if e != 0 {
		n.fsys.log.Warn("write lost at release", slog.Uint64("ino", uint64(n.ino)), slog.Any("errno", e))
	}
	h.mu.Lock()
	_ = h.f.Close()
	h.mu.released = true
	h.mu.Unlock()
	n.mu.Lock()
	delete(n.mu.handles, h)
	last := len(n.mu.handles) == 0
	hidden, parent := n.mu.hidden, n.mu.hiddenParent
	if last {
		n.mu.hidden = ""
	}
	n.mu.Unlock()
	if last {
		// No descriptor of the file is open here, so no process of this
		// mount can hold a lock on it (OFD locks are not named at close).
		n.releaseAllLocks()
		n.settleWrites(h)
		n.leaseAfterRelease()
	}
	if last && hidden != "" {
		if err := n.fsys.c.UnlinkAt(ctx, parent, hidden); err != nil {
			n.fsys.log.Warn("remove an unlinked file's hidden name", slog.String("name", hidden), slog.Any("err", err))
		}
		// An entry change of the directory too (its mtime: a setattr
		// answered under its lease must not say the old one).
		// go-fuse no longer counts the directory as the file's
		// parent once the unlink returned, and its node may be gone.
		n.fsys.noteEntryGone(parent, hidden)
	}
	return 0
}
