package fusefs

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"google.golang.org/protobuf/proto"

	"github.com/govfs/govfs/client"
	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/posix"
	"github.com/govfs/govfs/internal/wire"
)

// Asynchronous creates (docs/fuse.md; CephFS calls them async dirops).
//
// A directory this mount changes often (asyncAfter entry changes within
// asyncWindow) gets a directory lease: until the minister revokes it,
// no other client changes the directory's entries (their changes wait
// until this mount gave the lease back, and it first sends what it
// queued). The mount lists the directory once under the lease and from
// then on answers, from that listing, a lookup of a missing name
// (ENOENT), create, mkdir, mknod, symlink (with an inode number reserved
// beforehand), unlink of a non-directory, rmdir of a leased directory
// whose listing is empty (rmdirQueued) and rename within leased
// directories itself, queueing the change in the client (client.MakeNodeDeferred and co.);
// the client sends the queue in batches, and every other request of this
// mount waits until what was queued before it is applied, so this mount
// never sees the namespace without its own changes. Other clients see a
// queued change once its batch is applied (milliseconds; at once after
// fsync of the file or the directory, or when they change the
// directory). A queued change that fails (possible only if the lease was
// lost, or on ENOSPC) is logged and reported by the directory's next
// fsync (EIO); a mount killed before its queue was sent loses those
// changes, as a local file system loses creates not yet fsynced.
//
// The kernel holds a directory's i_rwsem for every entry change in it,
// so changes in one directory reach the mount one at a time; dir.mu
// orders them against the lease's revoke.

const (
	// asyncAfter entry changes of one directory within asyncWindow make
	// the mount ask for its directory lease.
	asyncAfter  = 2
	asyncWindow = time.Second
	// asyncBackoff: after a refused or revoked lease the directory stays
	// synchronous this long (another client is working in it).
	asyncBackoff = 2 * time.Second
	// maxAsyncEntries: a larger directory is not listed, and stays
	// synchronous. (16,384 until session 19: bench mount's shared
	// directory of 16 processes holds 16,000 directories and 16,000
	// files, and went synchronous half-way; its renames and unlinks
	// then ran at 0.3-0.6 × MooseFS.) A listing costs about 100 bytes
	// an entry.
	maxAsyncEntries = 65536
	// maxLeasedEntry caps the entry timeout given under a directory
	// lease (leasedEntryLocked).
	maxLeasedEntry = 30 * time.Second
)

// dirEnt is what the listing knows of an entry.
type dirEnt struct {
	ino      ids.Ino
	typ      wire.FileType
	referral bool // another ministry's subtree
}

// dirState is a directory node's asynchronous state.
type dirState struct {
	mu sync.Mutex
	// lease is the directory lease, nil if none; names is the complete
	// listing under it (nil: not listed yet, or no longer trusted).
	lease *client.Lease
	names map[string]dirEnt
	// holder routes the lease's revoke (keptdirs.go): it outlives this
	// node when the kernel forgets the directory. inUse: this node is
	// the directory's node in use (inUseLocked).
	holder *leaseHolder
	inUse  bool
	// forgotten: the kernel forgot the directory (keepDirLease); this
	// node is never in use again.
	forgotten bool
	// moved: a rename moved the directory itself since attr was last
	// brought up to date (noteMoved), at that command's time, or -1: at
	// a time not known here.
	moved atomic.Int64
	// changes counts entry changes since windowStart.
	changes     int
	windowStart time.Time
	// backoff: no lease is asked for before then.
	backoff time.Time
	// failed is the first queued change that failed since the last
	// fsync of the directory (under failMu: the sender sets it, and
	// must not wait for mu).
	failMu sync.Mutex
	failed error
	// handedOut are the names the kernel was told to trust beyond the
	// entry timeout, while the lease lasts: invalidated at its revoke.
	handedOut map[string]struct{}
	// attr is what the ministry holds of the directory's own attributes
	// once the queue is applied, for its setattrs answered here
	// (setattrDirQueued), valid under the lease attrLease only: read at
	// the grant (when nothing of the directory's was queued:
	// client.DirQueued), then each answer given here. Its nlink is not used (the listing says), nor
	// its mtime unless mtimeExact: an entry change since moves the
	// mtime to a time the ministry picks.
	attr       *wire.Attr
	attrLease  *client.Lease
	mtimeExact bool
	// gen counts entry changes (entriesChangedLocked).
	gen uint64
	// firstPage is the listing's first page kept under lease
	// (keptpage.go), nil if none.
	firstPage *keptPage
	// listingAhead, while the first page is being read ahead of a
	// walker (listahead.go), is closed when it is done; nil otherwise.
	// listingStarted: a worker took the read (an opendir waits only
	// for a read under way, not one queued).
	listingAhead   chan struct{}
	listingStarted bool
	// notedAt: when asyncLocked last counted the lease as used
	// (dirleases.go).
	notedAt time.Time
}

// entriesChangedLocked: an entry change of the directory (made here,
// queued or not) moves its mtime. n.dir.mu held.
func (d *dirState) entriesChangedLocked() { d.mtimeExact, d.gen = false, d.gen+1 }

// listedNlinkLocked is the directory's link count by its listing: the
// ministry counts a directory's subdirectories in its nlink (another
// ministry's subtree too: the entry stays). d.mu held, names not nil.
func (d *dirState) listedNlinkLocked() uint32 {
	nlink := uint32(2)
	for _, e := range d.names {
		if e.typ == wire.FileType_DIRECTORY {
			nlink++
		}
	}
	return nlink
}

// queuedChangeLocked notes a change of n's entries queued with the
// command's time now. Once it is applied the directory's mtime and ctime
// are now (the ministry keeps a queued command's time) and its version
// one more (namespace touchDir, once per command), so the attributes
// held under the lease are exact again, whatever changed before
// (leasedDirAttr). n.dir.mu held.
func (n *node) queuedChangeLocked(now int64) {
	d := &n.dir
	d.settleMovedLocked()
	if d.attr == nil || d.lease == nil || d.attrLease != d.lease {
		return
	}
	a := proto.Clone(d.attr).(*wire.Attr)
	a.MtimeNs, a.CtimeNs = now, now
	a.Version++
	d.attr, d.mtimeExact = a, true
}

// leasedDirAttr returns directory n's attributes when its lease makes
// them exact, nil otherwise: the grant's attributes, then every answer
// given here and every queued change of its entries (queuedChangeLocked),
// nlink from the listing. rm -rf's fstat of every directory it returns
// to otherwise waited for the unlinks queued in it (0.9 ms each). nil
// also when a change of n is in progress.
func (n *node) leasedDirAttr() *wire.Attr {
	d := &n.dir
	if !n.isDir() || !d.mu.TryLock() {
		return nil
	}
	defer d.mu.Unlock()
	d.settleMovedLocked()
	if !n.asyncLocked() || d.attr == nil || d.attrLease != d.lease || !d.mtimeExact {
		return nil
	}
	a := proto.Clone(d.attr).(*wire.Attr)
	a.Nlink = d.listedNlinkLocked()
	n.fsys.log.Debug("directory attributes answered under its lease", slog.Uint64("dir", uint64(n.ino)))
	if cur := n.cachedAttr(); cur != nil {
		// Not older than what the kernel was told (setAttr keeps the
		// newer of two answers).
		a.Version = max(a.GetVersion(), cur.GetVersion())
	}
	return a
}

// noteRenamed notes, after a rename of name in a to newName in b, that
// the directories it moved (the source, and the target of an exchange)
// have a new ctime: now for a queued rename, 0 for one the ministry made
// (noteMoved). Their nodes are still under the old names here (go-fuse
// moves them once Rename returns).
func noteRenamed(a *node, name string, b *node, newName string, now int64) {
	for _, in := range []*fs.Inode{a.GetChild(name), b.GetChild(newName)} {
		if in == nil {
			continue
		}
		if ch, ok := in.Operations().(*node); ok {
			ch.noteMoved(now)
		}
	}
}

// noteMoved records that a rename moved directory n itself at the
// queued command's time now (0: a time not known here): its ctime moves,
// and version grows. Only recorded (n's dir.mu may be held by a change
// inside it); settleMovedLocked applies it to the attributes held under
// the lease.
func (n *node) noteMoved(now int64) {
	if !n.isDir() {
		return
	}
	d := &n.dir
	for {
		old := d.moved.Load()
		v := max(old, now)
		if now == 0 || old < 0 {
			v = -1
		}
		if d.moved.CompareAndSwap(old, v) {
			return
		}
	}
}

// settleMovedLocked applies renames of the directory itself
// (noteMoved) to the attributes held under the lease. d.mu held.
func (d *dirState) settleMovedLocked() {
	m := d.moved.Swap(0)
	switch {
	case m == 0 || d.attr == nil:
	case m < 0:
		d.attr, d.attrLease, d.mtimeExact = nil, nil, false
	default:
		a := proto.Clone(d.attr).(*wire.Attr)
		a.CtimeNs = max(a.GetCtimeNs(), m)
		a.Version++
		d.attr = a
	}
}

// dirAttrChanged: a change of n's own attributes went to the ministry
// (an xattr's: its ctime), so those held under the lease are not exact
// any more.
func (n *node) dirAttrChanged() {
	if !n.isDir() {
		return
	}
	d := &n.dir
	d.mu.Lock()
	d.attr, d.attrLease, d.mtimeExact = nil, nil, false
	d.mu.Unlock()
}

// isDir says whether n is a directory's node (its dirState is used).
func (n *node) isDir() bool { return n.StableAttr().Mode == syscall.S_IFDIR }

// dirGen returns n's entry change count (dirState.gen).
func (n *node) dirGen() uint64 {
	n.dir.mu.Lock()
	defer n.dir.mu.Unlock()
	return n.dir.gen
}

// leasedEntryLocked lets the kernel keep the entry of name (which the
// trusted listing has) until the directory lease's trust ends, instead
// of the entry timeout: nobody else can change it meanwhile, and the
// revoke invalidates it before the lease goes back. Without it every
// lookup after the entry timeout is a FUSE round trip (bench mount:
// unlinks of 8,000 files spent a third of their time in them).
// n.dir.mu held.
func (n *node) leasedEntryLocked(name string, out *fuse.EntryOut) {
	d := &n.dir
	if d.lease == nil || d.names == nil {
		return
	}
	ttl := time.Until(d.lease.Until())
	if ttl <= n.fsys.cfg.EntryTimeout {
		return
	}
	out.SetEntryTimeout(min(ttl, maxLeasedEntry))
	if d.handedOut == nil {
		d.handedOut = map[string]struct{}{}
	}
	d.handedOut[name] = struct{}{}
}

// asyncLocked says whether n's listing may answer now (n.dir.mu held):
// a valid directory lease and a listing. A lease no longer valid is
// forgotten here; it is given back only after the queue was sent (a
// revoked one by dirLeaseRevoked, an expired one here): given back
// first, another client's change could come before this mount's queued
// ones (found in review).
func (n *node) asyncLocked() bool {
	n.inUseLocked()
	d := &n.dir
	if d.lease == nil {
		return false
	}
	if d.lease.Valid() {
		if d.names == nil {
			return false
		}
		// Counted as used at most once a second: this runs for every
		// lookup and change in the directory, and the set's lock is
		// the mount's. The order need not be finer.
		if now := time.Now(); now.Sub(d.notedAt) >= time.Second {
			d.notedAt = now
			n.fsys.noteDirLease(n)
		}
		return true
	}
	l := d.lease
	d.lease, d.names = nil, nil
	n.fsys.forgetDirLease(n)
	handedOut := d.handedOut
	d.handedOut = nil
	go n.giveBackAfterQueue(l, handedOut)
	return false
}

// giveBackAfterQueue gives n's directory lease l back once the queue is
// sent (given back first, another client's change could come before
// this mount's queued ones), after the kernel forgot the names it was
// told to trust under it.
func (n *node) giveBackAfterQueue(l *client.Lease, handedOut map[string]struct{}) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n.fsys.c.FlushDeferred(ctx)
	for name := range handedOut {
		_ = n.NotifyEntry(name)
	}
	_ = l.Release(ctx)
}

// holdsDirLease says whether n's directory lease is valid now; false
// also when n.dir.mu is busy (an entry change in progress holds it
// across its request).
func (n *node) holdsDirLease() bool {
	if !n.dir.mu.TryLock() {
		return false
	}
	defer n.dir.mu.Unlock()
	n.inUseLocked()
	return n.dir.lease != nil && n.dir.lease.Valid()
}

// leaseForChangeLocked counts an entry change of n and, when n is changed
// often, takes its directory lease and lists it. It reports whether the
// change may be answered from the listing (n.dir.mu held).
func (n *node) leaseForChangeLocked(ctx context.Context) bool {
	if !n.fsys.cfg.AsyncDirs {
		return false
	}
	d := &n.dir
	// An entry change of n follows (synchronous or queued).
	d.entriesChangedLocked()
	if n.asyncLocked() {
		return true
	}
	now := time.Now()
	if now.Before(d.backoff) {
		return false
	}
	if now.Sub(d.windowStart) > asyncWindow {
		d.windowStart, d.changes = now, 0
	}
	d.changes++
	if d.changes < asyncAfter && d.lease == nil {
		return false
	}
	if d.lease == nil {
		// Nothing of the directory's queued (dir.mu keeps more from
		// being queued meanwhile): the grant's attributes are then the
		// ones the ministry holds, and stay so but for this mount's
		// changes.
		quiet := !n.fsys.c.DirQueued(n.ino)
		h := newLeaseHolder(n)
		l, err := n.fsys.c.AcquireLease(ctx, n.ino, client.LeaseWrite, 0, 0, client.LeaseOptions{Dir: true, Open: true, OnRevoke: h.revoked})
		if err != nil {
			// EAGAIN: another client holds it (or is changing the
			// directory); ENOLCK: this client holds too many.
			d.backoff = now.Add(asyncBackoff)
			return false
		}
		d.lease, d.holder = l, h
		d.attr, d.attrLease, d.mtimeExact = nil, nil, false
		if a := l.Attr(); a != nil && quiet {
			d.attr, d.attrLease, d.mtimeExact = a, l, true
		}
	}
	names, err := n.listForLease(ctx)
	if err != nil || !d.lease.Valid() {
		if err != nil && !errors.Is(err, errTooLarge) {
			n.fsys.log.Debug("list a directory for its lease", slog.Uint64("ino", uint64(n.ino)), slog.Any("err", err))
		}
		l := d.lease
		d.lease, d.names = nil, nil
		d.backoff = now.Add(asyncBackoff)
		if errors.Is(err, errTooLarge) {
			d.backoff = now.Add(time.Minute)
		}
		_ = l.Release(ctx)
		return false
	}
	d.names = names
	n.fsys.noteDirLease(n)
	// The change this is asked for comes next (the grant's mtime is
	// not the one it leaves; found in review).
	d.entriesChangedLocked()
	n.fsys.log.Debug("directory lease taken: entry changes answered here", slog.Uint64("dir", uint64(n.ino)), slog.Int("entries", len(names)))
	return true
}

var errTooLarge = errors.New("directory too large for a listing")

// listForLease lists n linearizably (everything applied before the
// lease was granted), at most maxAsyncEntries entries.
func (n *node) listForLease(ctx context.Context) (map[string]dirEnt, error) {
	names := map[string]dirEnt{}
	var cookie []byte
	for {
		ents, next, eof, err := n.fsys.c.ReaddirPage(ctx, n.ino, cookie, 1024, client.Linearizable())
		if err != nil {
			return nil, err
		}
		for _, e := range ents {
			names[string(e.GetName())] = dirEnt{ino: ids.Ino(e.GetIno()), typ: e.GetType(), referral: e.GetMinistry() != 0}
		}
		if len(names) > maxAsyncEntries {
			return nil, errTooLarge
		}
		if eof || len(ents) == 0 {
			return names, nil
		}
		if len(next) == 0 {
			next = ents[len(ents)-1].GetName()
		}
		cookie = next
	}
}

// dirLeaseRevoked runs when the minister wants the directory lease back
// (another client is about to change the directory) or it was lost: stop
// answering from the listing, then send what was queued, before the
// keeper gives the lease back.
func (n *node) dirLeaseRevoked(l *client.Lease, _ bool) {
	n.linearizeLookups()
	d := &n.dir
	d.mu.Lock()
	if d.lease == l {
		d.lease, d.names = nil, nil
		d.backoff = time.Now().Add(asyncBackoff)
		n.fsys.forgetDirLease(n)
	}
	// Every name handed out so far (a later lease's too, if any: one
	// invalidation too many costs a lookup).
	handedOut := d.handedOut
	d.handedOut = nil
	d.mu.Unlock()
	n.fsys.log.Debug("directory lease revoked: entry changes synchronous again", slog.Uint64("dir", uint64(n.ino)), slog.Int("entries", len(handedOut)))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n.fsys.c.FlushDeferred(ctx)
	// Outside dir.mu: the kernel takes the directory's lock for this,
	// which a request waiting for dir.mu may hold.
	for name := range handedOut {
		_ = n.NotifyEntry(name)
	}
}

// OnForget: the kernel forgot the inode, and this node goes with it; a
// directory's directory lease, or a file's read lease, is kept for the
// next node made for it (keptdirs.go, keptfiles.go).
func (n *node) OnForget() {
	if l := n.detachListLease(true); l != nil {
		go n.finishListDrop(l, false)
	}
	if n.isDir() {
		n.fsys.forgetListedDir(n)
		n.keepDirLease()
	} else {
		n.keepLease()
	}
}

var _ fs.NodeOnForgetter = (*node)(nil)

// dropDirLease gives the directory lease back (the directory was
// removed).
func (n *node) dropDirLease(ctx context.Context) {
	d := &n.dir
	d.mu.Lock()
	l := d.lease
	d.lease, d.names = nil, nil
	d.mu.Unlock()
	n.fsys.forgetDirLease(n)
	if l != nil {
		_ = l.Release(ctx)
	}
}

// deferredDone returns the done function of a queued change of name in
// n (and of newName in np, for a rename; np nil otherwise). A failure is
// kept for the directory's next fsync at once (the sender runs this
// before a waiting fsync returns); then the listings are no longer
// trusted and the kernel forgets the names.
// The listings may have moved on with their leases meanwhile (the kernel
// forgot the directory: keptdirs.go), so their holders at the time are
// asked too. n.dir.mu (and np's) held.
func (n *node) deferredDone(name string, np *node, newName string) client.DeferredDone {
	h := n.dir.holder
	var hp *leaseHolder
	if np != nil {
		hp = np.dir.holder
	}
	return func(_ *wire.Result, err error) {
		if err == nil {
			return
		}
		// At once, for the fsync the sender may be about to answer: to
		// n, and to whichever node took the lease over since.
		n.dir.noteFailure(err)
		cur := h.failed(err)
		var curp *node
		if np != nil {
			curp = hp.failed(err)
		}
		// In its own goroutine: the sender may be what a request of this
		// directory, holding n.dir.mu, waits for.
		go func() {
			n.forgetListing(name)
			if cur != nil && cur != n {
				cur.forgetListing(name)
			}
			if np != nil {
				np.forgetListing(newName)
				if curp != nil && curp != np {
					curp.forgetListing(newName)
				}
			}
		}()
	}
}

// noteFailure keeps the first failed queued change until the next fsync
// of the directory.
func (d *dirState) noteFailure(err error) {
	d.failMu.Lock()
	defer d.failMu.Unlock()
	if d.failed == nil {
		d.failed = err
	}
}

// failure returns the kept failure, and forgets it with take.
func (d *dirState) failure(take bool) error {
	d.failMu.Lock()
	defer d.failMu.Unlock()
	err := d.failed
	if take {
		d.failed = nil
	}
	return err
}

// forgetListing stops answering from n's listing (it is listed again
// at the next change) and makes the kernel forget name.
// A queued change failed: neither are the attributes predicted under
// the lease the ministry's (queuedChangeLocked), n's or, for a failed
// mkdir, the new directory's.
func (n *node) forgetListing(name string) {
	n.dir.mu.Lock()
	n.dir.names = nil
	n.dir.entriesChangedLocked()
	n.dir.mu.Unlock()
	n.forgetDirAttr()
	if in := n.GetChild(name); in != nil {
		if ch, ok := in.Operations().(*node); ok {
			ch.forgetDirAttr()
		}
	}
	_ = n.NotifyEntry(name)
}

// forgetDirAttr drops what directory n holds of its attributes, the
// lease's and the kernel's answers' alike, so that the ministry's next
// answer is taken whatever its version (one predicted here may be
// ahead of it).
func (n *node) forgetDirAttr() {
	if !n.isDir() {
		return
	}
	n.dirAttrChanged()
	n.mu.Lock()
	n.mu.attr = nil
	n.mu.Unlock()
}

// syncDir sends the queued changes and reports (once) a queued change of
// n that failed.
func (n *node) syncDir(ctx context.Context) syscall.Errno {
	n.fsys.c.FlushDeferred(ctx)
	if failed := n.dir.failure(true); failed != nil {
		n.fsys.log.Error("fsync of a directory: a queued change failed", slog.Uint64("dir", uint64(n.ino)), slog.Any("err", failed))
		return syscall.EIO
	}
	return 0
}

// setName records, after a synchronous change of n's entries, what the
// listing must now say of name (delete when e is nil). n.dir.mu held.
func (n *node) setNameLocked(name string, e *dirEnt) {
	n.inUseLocked()
	n.dir.entriesChangedLocked()
	if n.dir.names == nil {
		return
	}
	if e == nil {
		delete(n.dir.names, name)
	} else {
		n.dir.names[name] = *e
	}
}

// noteMovedEntry records, after a rename of name in a to newName in b
// (both dir.mu held), that either name may now be a dentry kept past the
// entry timeout, when one of them was.
func noteMovedEntry(a *node, name string, b *node, newName string) {
	_, ok1 := a.dir.handedOut[name]
	_, ok2 := b.dir.handedOut[newName]
	if !ok1 && !ok2 {
		return
	}
	for _, x := range []struct {
		n    *node
		name string
	}{{a, name}, {b, newName}} {
		if x.n.dir.handedOut == nil {
			x.n.dir.handedOut = map[string]struct{}{}
		}
		x.n.dir.handedOut[x.name] = struct{}{}
	}
}

// lockDirs locks the entry state of a and b (once if the same), in inode
// order; the returned function unlocks.
func lockDirs(a, b *node) func() {
	if a == b {
		a.dir.mu.Lock()
		return a.dir.mu.Unlock
	}
	if b.ino < a.ino {
		a, b = b, a
	}
	a.dir.mu.Lock()
	b.dir.mu.Lock()
	return func() {
		b.dir.mu.Unlock()
		a.dir.mu.Unlock()
	}
}

// setattrDirQueued answers a setattr of directory n's own attributes
// under n's directory lease and queues it (client.DeferredDirSetattr).
// cp -a, tar and rsync set each directory's times, owner and mode once
// they filled it; asked of the ministry, each waited for the whole queue
// (the files' creates and chunk writes) and a commit of its own (cp -a
// of /usr/include: 5.6 ms for the utimens, 1.2 for the chown and 1.0 for
// the chmod of each of 855 directories, a quarter of the copy). The
// answer is made from what the lease makes exact: dir.attr (the grant's
// attributes, then each answer given here), nlink from the listing, the
// command's time as ctime, and the mtime only when the setattr sets it
// or no entry changed since it was known. nil: ask the ministry.
func (n *node) setattrDirQueued(ctx context.Context, op *wire.SetattrOp) *wire.Attr {
	if !n.fsys.cfg.AsyncDirs {
		return nil
	}
	cur := n.cachedAttr()
	if cur == nil || cur.GetType() != wire.FileType_DIRECTORY {
		return nil
	}
	has := func(f wire.SetattrField) bool { return op.GetValid()&uint32(f) != 0 }
	d := &n.dir
	d.mu.Lock()
	defer d.mu.Unlock()
	d.settleMovedLocked()
	if !n.asyncLocked() || d.attr == nil || d.attrLease != d.lease {
		return nil
	}
	setsMtime := has(wire.SetattrField_SETATTR_MTIME) || has(wire.SetattrField_SETATTR_MTIME_NOW)
	if !setsMtime && !d.mtimeExact {
		return nil
	}
	// Queued only what the ministry will allow unchanged (it checks
	// again, as for a file's: setattrQueued).
	cred, err := n.fsys.c.Caller(ctx)
	if err != nil {
		return nil
	}
	base := d.attr
	// Nothing that takes access away from anyone is answered here: the
	// ministry enforces it from its commit on, which for a queued one
	// would be later than the program was told (found in review:
	// chmod 700 of a directory). Adding permission, or the same owner
	// again (cp -a and tar as root), is.
	if has(wire.SetattrField_SETATTR_MODE) && (base.GetMode()&^op.GetMode()&0o777 != 0 || op.GetMode()&^base.GetMode()&syscall.S_ISVTX != 0) {
		return nil
	}
	if (has(wire.SetattrField_SETATTR_UID) && op.GetUid() != base.GetUid()) || (has(wire.SetattrField_SETATTR_GID) && op.GetGid() != base.GetGid()) {
		return nil
	}
	probe := proto.Clone(op).(*wire.SetattrOp)
	if clear, err := posix.CheckSetattr(base, cred, probe); err != nil || clear&(base.GetMode()|op.GetMode()) != 0 || probe.GetMode() != op.GetMode() {
		return nil
	}
	nlink := d.listedNlinkLocked()
	now, err := n.fsys.c.DeferredDirSetattr(ctx, n.ino, op, n.dirSetattrDone())
	if err != nil {
		return nil
	}
	a := proto.Clone(base).(*wire.Attr)
	a.Nlink, a.CtimeNs = nlink, now
	// Not older than what the kernel was told (setAttr keeps the newer
	// of two answers); the ministry's own answer, when one comes, is
	// newer still.
	a.Version = max(a.GetVersion(), cur.GetVersion())
	applySetattr(a, op, now)
	d.attr, d.mtimeExact = a, true
	n.fsys.log.Debug("directory setattr queued under its lease", slog.Uint64("dir", uint64(n.ino)), slog.Uint64("valid", uint64(op.GetValid())),
		slog.String("mode", strconv.FormatUint(uint64(a.GetMode()), 8)), slog.Uint64("uid", uint64(a.GetUid())), slog.Uint64("gid", uint64(a.GetGid())),
		slog.Int64("mtime", a.GetMtimeNs()), slog.Uint64("nlink", uint64(a.GetNlink())))
	return proto.Clone(a).(*wire.Attr)
}

// dirSetattrDone is the done function of a queued setattr of directory
// n: a failure is reported as a queued entry change's is (the
// directory's next fsync), and what was answered from dir.attr is no
// longer trusted.
func (n *node) dirSetattrDone() client.DeferredDone {
	h := n.dir.holder // n.dir.mu held
	return func(_ *wire.Result, err error) {
		if err == nil {
			return
		}
		// At once, to n and to whichever node took the lease over since
		// (or what is kept of it: keptdirs.go).
		n.dir.noteFailure(err)
		cur := h.failed(err)
		// Not on the sender: a request holding dir.mu may wait for it.
		go func() {
			n.forgetDirAttr()
			_ = n.NotifyContent(-1, 0) // the kernel asks for the attributes again
			if cur != nil && cur != n {
				cur.forgetDirAttr()
				_ = cur.NotifyContent(-1, 0)
			}
		}()
	}
}

// noteDirAttr takes a directory's attributes the ministry answered a
// setattr of this mount with (after everything queued before it was
// applied) as dir.attr, when nothing of the directory's is queued and
// no entry changed since the setattr was asked (gen: dirGen then): its
// next setattrs are answered here (rsync sets the owner, then the mode,
// then the times).
func (n *node) noteDirAttr(a *wire.Attr, gen uint64) {
	if a.GetType() != wire.FileType_DIRECTORY {
		return
	}
	d := &n.dir
	d.mu.Lock()
	defer d.mu.Unlock()
	if n.asyncLocked() && d.gen == gen && !n.fsys.c.DirQueued(n.ino) {
		d.attr, d.attrLease, d.mtimeExact = proto.Clone(a).(*wire.Attr), d.lease, true
		return
	}
	// What was held is no longer the directory's (found in review: a
	// chown answered by the ministry while the listing was not trusted
	// left the old owner here for the next setattr's checks).
	d.attr = nil
}

// newDirLease makes l, the lease that came with n's create
// (client.MakeDirDeferred: pending until the batch that sends the create
// brings its grant, made before the directory existed, so n is empty but
// for this mount's changes), n's directory lease with h its
// holder, and a, the create's answer, its attributes: n's entry changes
// are answered here from the first one, with no round trip. Before,
// cp -a, tar and git filled every new directory with two synchronous
// creates and a lease request with its mark's commit and a listing;
// then mkdir waited for the lease's read index (5 ms each, a quarter
// of cp -a's time).
func (n *node) newDirLease(a *wire.Attr, l *client.Lease, h *leaseHolder) {
	d := &n.dir
	d.mu.Lock()
	defer d.mu.Unlock()
	n.inUseLocked()
	if d.lease != nil || !l.Valid() {
		// Lost already (its grant did not come): not trusted.
		go func() { _ = l.Release(context.Background()) }()
		return
	}
	d.lease, d.holder = l, h
	d.names = map[string]dirEnt{}
	d.attr, d.attrLease, d.mtimeExact = proto.Clone(a).(*wire.Attr), l, true
	n.fsys.noteDirLease(n)
	n.fsys.log.Debug("directory made with its lease: entry changes answered here", slog.Uint64("dir", uint64(n.ino)))
}
