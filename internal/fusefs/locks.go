package fusefs

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/govfs/govfs/client"
)

// Cluster-wide file locks: fcntl(2) record locks (F_SETLK, F_SETLKW,
// F_GETLK, and OFD locks) and flock(2), held as lock leases of the
// file's minister (docs/leases.md, "Locks"). A lock is a lease with the
// Lock flag and the kernel's lock owner: it conflicts with other owners'
// locks on this and every other client, is never revoked, is renewed
// while this mount runs and ends one lease TTL after the mount dies.
//
// POSIX semantics kept here, per owner and inode: a new lock replaces the
// owner's locks on its range (upgrade, downgrade), unlock of part of a
// lock splits it, and the last close of the file by a process releases
// its locks (the kernel sends the owner with FLUSH; lockFS below). flock
// locks are whole-file locks of the same kind, as on NFS: they conflict
// with fcntl locks of other owners.

// lockToEnd is the end of a lock running to the end of the file.
const lockToEnd = math.MaxUint64

// lockWaitStep is how long one wait of F_SETLKW asks the minister to
// hold a conflicting request; the wait repeats until granted or
// interrupted.
const lockWaitStep = 30 * time.Second

// heldLock is one lock lease of an owner on a node: [start, end).
type heldLock struct {
	lease      *client.Lease
	start, end uint64
	write      bool
}

// nodeLocks is the locks held on one node, by owner.
type nodeLocks struct {
	mu sync.Mutex
	// byOwner: each owner's locks, non-overlapping.
	byOwner map[uint64][]heldLock
}

var (
	_ fs.NodeGetlker  = (*node)(nil)
	_ fs.NodeSetlker  = (*node)(nil)
	_ fs.NodeSetlkwer = (*node)(nil)
)

// lockRange converts the kernel's inclusive lock range to [start, end).
func lockRange(lk *fuse.FileLock, flags uint32) (start, end uint64, e syscall.Errno) {
	if flags&fuse.LK_FLOCK != 0 {
		return 0, lockToEnd, 0
	}
	if lk.Start > math.MaxInt64 || lk.End < lk.Start {
		return 0, 0, syscall.EINVAL
	}
	if lk.End >= math.MaxInt64 {
		return lk.Start, lockToEnd, 0
	}
	return lk.Start, lk.End + 1, 0
}

// leaseSpan is a range as AcquireLease takes it (length 0: to the end).
func leaseSpan(start, end uint64) (off, length int64) {
	if end == lockToEnd {
		return int64(start), 0
	}
	return int64(start), int64(end - start)
}

func (n *node) Getlk(ctx context.Context, _ fs.FileHandle, owner uint64, lk *fuse.FileLock, flags uint32, out *fuse.FileLock) syscall.Errno {
	start, end, e := lockRange(lk, flags)
	if e != 0 {
		return e
	}
	var mode client.LeaseMode
	switch lk.Typ {
	case syscall.F_RDLCK:
		mode = client.LeaseRead
	case syscall.F_WRLCK:
		mode = client.LeaseWrite
	default:
		return syscall.EINVAL
	}
	// A try that is given back at once: the minister is the only one who
	// knows every client's locks.
	off, length := leaseSpan(start, end)
	l, err := n.fsys.c.AcquireLease(bg(ctx), n.ino, mode, off, length, client.LeaseOptions{Lock: true, Owner: owner})
	if err == nil {
		n.releaseLease(l)
		*out = fuse.FileLock{Typ: syscall.F_UNLCK}
		return 0
	}
	if !errors.Is(err, syscall.EAGAIN) {
		return n.fsys.errno("getlk", err)
	}
	// Report the lock in the way. Refused without one (only a queued
	// request, or a new minister's fence, stood in the way): nobody
	// holds a conflicting lock.
	*out = fuse.FileLock{Typ: syscall.F_UNLCK}
	if cf, ok := client.ConflictOf(err); ok && cf.Lock {
		out.Typ = syscall.F_WRLCK
		out.Start = uint64(cf.Off)
		out.End = math.MaxInt64
		if cf.Len > 0 {
			out.End = uint64(cf.Off + cf.Len - 1)
		}
		if cf.Mode == client.LeaseRead {
			out.Typ = syscall.F_RDLCK
		}
	}
	// The holder's pid means nothing on this machine: another client's
	// process, or one of this mount's that the kernel did not name.
	out.Pid = 0
	return 0
}

func (n *node) Setlk(ctx context.Context, _ fs.FileHandle, owner uint64, lk *fuse.FileLock, flags uint32) syscall.Errno {
	return n.setlk(ctx, owner, lk, flags, false)
}

func (n *node) Setlkw(ctx context.Context, _ fs.FileHandle, owner uint64, lk *fuse.FileLock, flags uint32) syscall.Errno {
	return n.setlk(ctx, owner, lk, flags, true)
}

func (n *node) setlk(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32, wait bool) syscall.Errno {
	start, end, e := lockRange(lk, flags)
	if e != 0 {
		return e
	}
	var write bool
	switch lk.Typ {
	case syscall.F_UNLCK:
		return n.unlock(ctx, owner, start, end)
	case syscall.F_RDLCK:
	case syscall.F_WRLCK:
		write = true
	default:
		return syscall.EINVAL
	}
	l, err := n.acquireLock(ctx, owner, write, start, end, wait)
	if err != nil {
		switch {
		case errors.Is(err, context.Canceled) || (wait && ctx.Err() != nil):
			return syscall.EINTR
		case errors.Is(err, syscall.EAGAIN):
			return syscall.EAGAIN
		}
		return n.fsys.errno("setlk", err)
	}
	nl := &n.locks
	nl.mu.Lock()
	if e := n.carveLocked(owner, start, end); e != 0 {
		nl.mu.Unlock()
		n.releaseLease(l)
		return e
	}
	if nl.byOwner == nil {
		nl.byOwner = map[uint64][]heldLock{}
	}
	nl.byOwner[owner] = append(nl.byOwner[owner], heldLock{lease: l, start: start, end: end, write: write})
	nl.mu.Unlock()
	// Whoever held the range before may have changed the file: what
	// this mount cached of it is not to be trusted (as NFS does when a
	// lock is taken).
	n.lockTaken()
	return 0
}

// lockTaken drops what the kernel and this mount cache of the file's
// data and attributes.
func (n *node) lockTaken() {
	n.changedHere()
	n.mu.Lock()
	n.mu.openVersion, n.mu.leaseAttr, n.mu.linearize = 0, false, true
	n.mu.Unlock()
	_ = n.NotifyContent(0, 0) // ENOENT when the kernel forgot the inode
}

// acquireLock gets a lock lease; with wait it waits, step by step, until
// granted or ctx (the kernel's interrupt) ends.
func (n *node) acquireLock(ctx context.Context, owner uint64, write bool, start, end uint64, wait bool) (*client.Lease, error) {
	mode := client.LeaseRead
	if write {
		mode = client.LeaseWrite
	}
	off, length := leaseSpan(start, end)
	opts := client.LeaseOptions{Lock: true, Owner: owner, OnRevoke: n.lockLost}
	if !wait {
		return n.fsys.c.AcquireLease(bg(ctx), n.ino, mode, off, length, opts)
	}
	opts.Wait = lockWaitStep
	for {
		l, err := n.fsys.c.AcquireLease(ctx, n.ino, mode, off, length, opts)
		if err == nil || !errors.Is(err, syscall.EAGAIN) || ctx.Err() != nil {
			return l, err
		}
	}
}

// carveLocked takes [start, end) out of owner's locks on the node: the
// parts outside it are locked again as they were (granted at once: a
// held lock covers them) and the old leases given back.
//
// All pieces are locked before anything is given back: if one cannot be
// (the minister unreachable), the new pieces are given back and the
// owner's locks stay exactly as they were.
func (n *node) carveLocked(owner uint64, start, end uint64) syscall.Errno {
	nl := &n.locks
	var keep, added, old []heldLock
	for _, h := range nl.byOwner[owner] {
		if h.end <= start || end <= h.start {
			keep = append(keep, h)
			continue
		}
		old = append(old, h)
		// What is left of h on either side of the range.
		for _, piece := range [][2]uint64{{h.start, start}, {end, h.end}} {
			if piece[0] < h.start || piece[1] > h.end || piece[0] >= piece[1] {
				continue
			}
			l, err := n.acquireLock(context.Background(), owner, h.write, piece[0], piece[1], false)
			if err != nil {
				for _, a := range added {
					n.releaseLease(a.lease)
				}
				return n.fsys.errno("split lock", err)
			}
			added = append(added, heldLock{lease: l, start: piece[0], end: piece[1], write: h.write})
		}
	}
	for _, h := range old {
		n.releaseLease(h.lease)
	}
	keep = append(keep, added...)
	if len(keep) == 0 {
		delete(nl.byOwner, owner)
	} else {
		nl.byOwner[owner] = keep
	}
	return 0
}

// unlock releases owner's locks on [start, end), splitting those that
// reach beyond it. The file's buffered writes are pushed and synced
// first: whoever takes the range next must read them (a lock protects
// data only if its writes are out before it is given back).
func (n *node) unlock(ctx context.Context, owner uint64, start, end uint64) syscall.Errno {
	nl := &n.locks
	nl.mu.Lock()
	held := len(nl.byOwner[owner]) > 0
	nl.mu.Unlock()
	if !held {
		return 0
	}
	if e := n.syncAll(bg(ctx)); e != 0 {
		return e
	}
	nl.mu.Lock()
	defer nl.mu.Unlock()
	return n.carveLocked(owner, start, end)
}

// releaseAllLocks gives back every lock held on the node.
func (n *node) releaseAllLocks() {
	nl := &n.locks
	nl.mu.Lock()
	held := nl.byOwner
	nl.byOwner = nil
	nl.mu.Unlock()
	for _, hs := range held {
		for _, h := range hs {
			n.releaseLease(h.lease)
		}
	}
}

// releaseLease gives a lock lease back before the unlock returns, so
// that once fcntl(F_UNLCK) or close returns another client can take the
// range. If the minister cannot be reached the lease ends at its TTL.
func (n *node) releaseLease(l *client.Lease) {
	if err := l.Release(context.Background()); err != nil {
		n.fsys.log.Warn("give back a lock lease", slog.Uint64("ino", uint64(n.ino)), slog.Any("err", err))
	}
}

// lockLost is called when a lock's lease ended without an unlock: the
// minister no longer holds it (this mount could not reach it, or a new
// minister, for longer than the lease's trust, so it was not reclaimed),
// and another client may take it. As NFS does, every descriptor of the
// file open on this mount then fails with EIO (read, write, fsync,
// close), so a process that believes it holds the lock hears of it on
// its next I/O; new opens work. Called with lost false (a revoke), which
// never happens to a lock, it does nothing.
func (n *node) lockLost(l *client.Lease, lost bool) {
	if lost {
		n.dropLostLock(l)
	}
}

// dropLostLock forgets lock lease l and makes the file's open
// descriptors fail with EIO.
func (n *node) dropLostLock(l *client.Lease) {
	nl := &n.locks
	nl.mu.Lock()
	held := false
	for owner, hs := range nl.byOwner {
		for i, h := range hs {
			if h.lease == l {
				nl.byOwner[owner] = append(hs[:i:i], hs[i+1:]...)
				held = true
			}
		}
	}
	nl.mu.Unlock()
	if !held {
		return // given back meanwhile
	}
	off, length := l.Range()
	n.fsys.log.Error("file lock lost: the minister no longer holds it (cut off from the minister for longer than the lease trust); another client may take it; the file's open descriptors on this mount now fail with EIO",
		slog.Uint64("ino", uint64(n.ino)), slog.Int64("off", off), slog.Int64("len", length))
	n.mu.Lock()
	for h := range n.mu.handles {
		h.lockLost.Store(true)
	}
	n.mu.Unlock()
}

// checkLocks treats a held lock whose lease is no longer trusted (its
// renewals failed for 90% of a TTL: the minister may let it expire and
// grant it to another client) as lost, before it is: called on every
// I/O of a file with locks, so the process is told before anyone else
// can be granted the lock.
func (n *node) checkLocks() {
	nl := &n.locks
	nl.mu.Lock()
	if len(nl.byOwner) == 0 {
		nl.mu.Unlock()
		return
	}
	var lapsed []*client.Lease
	for _, hs := range nl.byOwner {
		for _, h := range hs {
			if !h.lease.Valid() {
				lapsed = append(lapsed, h.lease)
			}
		}
	}
	nl.mu.Unlock()
	if len(lapsed) == 0 {
		return
	}
	for _, l := range lapsed {
		n.dropLostLock(l)
	}
	// Given back too (the library would otherwise renew them, or a new
	// minister take them over, and other clients wait for them until
	// this mount ends); bounded as a whole, since this runs on an I/O
	// path and the minister may be unreachable (they then expire).
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	for _, l := range lapsed {
		_ = l.Release(ctx)
	}
}

// lockErr is EIO for a descriptor open when one of its file's locks was
// lost (lockLost), else 0.
func (h *handle) lockErr() syscall.Errno {
	h.n.checkLocks()
	if h.lockLost.Load() {
		return syscall.EIO
	}
	return 0
}

// lockFS passes the kernel's requests to go-fuse's bridge, releasing a
// process's locks on a file when it closes it: the kernel names the lock
// owner in FLUSH (and, for flock, in RELEASE) but go-fuse's node API does
// not pass it on, so an unlock is sent through the bridge first.
type lockFS struct {
	fuse.RawFileSystem

	mu sync.Mutex
	// owners maps a FUSE node id to the lock owners that locked it.
	owners map[uint64]map[uint64]bool
}

func newLockFS(raw fuse.RawFileSystem) *lockFS {
	return &lockFS{RawFileSystem: raw, owners: map[uint64]map[uint64]bool{}}
}

func (l *lockFS) note(in *fuse.LkIn, st fuse.Status) {
	if st != fuse.OK || in.Lk.Typ == syscall.F_UNLCK {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	m := l.owners[in.NodeId]
	if m == nil {
		m = map[uint64]bool{}
		l.owners[in.NodeId] = m
	}
	m[in.Owner] = true
}

func (l *lockFS) SetLk(cancel <-chan struct{}, in *fuse.LkIn) fuse.Status {
	st := l.RawFileSystem.SetLk(cancel, in)
	l.note(in, st)
	return st
}

func (l *lockFS) SetLkw(cancel <-chan struct{}, in *fuse.LkIn) fuse.Status {
	st := l.RawFileSystem.SetLkw(cancel, in)
	l.note(in, st)
	return st
}

// dropOwner unlocks everything owner holds on node id through file fh.
func (l *lockFS) dropOwner(hdr fuse.InHeader, fh, owner uint64, flags uint32) {
	l.mu.Lock()
	m := l.owners[hdr.NodeId]
	had := m[owner]
	if had {
		delete(m, owner)
		if len(m) == 0 {
			delete(l.owners, hdr.NodeId)
		}
	}
	l.mu.Unlock()
	if !had {
		return
	}
	in := &fuse.LkIn{InHeader: hdr, Fh: fh, Owner: owner, LkFlags: flags,
		Lk: fuse.FileLock{Start: 0, End: math.MaxInt64, Typ: syscall.F_UNLCK}}
	l.RawFileSystem.SetLk(nil, in)
}

func (l *lockFS) Flush(cancel <-chan struct{}, in *fuse.FlushIn) fuse.Status {
	// The writes first (close pushes them), then the locks.
	st := l.RawFileSystem.Flush(cancel, in)
	l.dropOwner(in.InHeader, in.Fh, in.LockOwner, 0)
	return st
}

// Forget: the kernel no longer knows the node, so no lock owner of it
// can be named again (OFD owners are never named at FLUSH).
func (l *lockFS) Forget(nodeID, nlookup uint64) {
	l.mu.Lock()
	delete(l.owners, nodeID)
	l.mu.Unlock()
	l.RawFileSystem.Forget(nodeID, nlookup)
}

func (l *lockFS) Release(cancel <-chan struct{}, in *fuse.ReleaseIn) {
	if in.ReleaseFlags&fuse.FUSE_RELEASE_FLOCK_UNLOCK != 0 {
		l.dropOwner(in.InHeader, in.Fh, in.LockOwner, fuse.LK_FLOCK)
	}
	l.RawFileSystem.Release(cancel, in)
}
