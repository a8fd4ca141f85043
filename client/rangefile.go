package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"

	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/wire"
)

// RangeFile is a File restricted to a byte range and holding a lease on
// it: the thesis' open region. Returned by OpenRange; safe for concurrent
// use.
//
// With a write lease, no other client holds a lease that overlaps the
// range, so several RangeFiles of different clients fill disjoint ranges
// of one file at once, each the only leased writer of its range, and
// whatever a RangeFile reads inside its range is what it wrote there. With
// a read lease, no other client holds a write lease on the range.
//
// Outside the range, ReadAt and WriteAt fail with EINVAL (the offset is
// what is wrong, not the descriptor: EBADF is kept for a RangeFile that
// cannot write at all, one opened with LeaseRead). Append and Truncate are
// not offered: both touch the end of the file, outside any range.
//
// When the minister revokes the lease (another client wants an
// overlapping range), the RangeFile waits for writes in flight, Syncs,
// and gives the lease back; the next read or write asks for it again and
// waits for the other client's lease to end. A lease lost because its
// renewals failed is asked for again the same way.
//
// Leases order only clients that take them: a File opened with Open
// writes without one.
type RangeFile struct {
	c        *Client
	f        *File
	mode     LeaseMode
	off, end int64 // [off, end)

	// mu is held shared by reads and writes and exclusively to change
	// the lease (acquire, revoke).
	mu     sync.RWMutex
	lease  *Lease // nil when not held
	closed bool
}

// OpenRange opens the regular file at path for the range [off,
// off+length) (length 0: from off to the end of the file, however it
// grows) and acquires a lease of mode on it, waiting up to the op budget
// (Config.OpTimeout) for other clients' conflicting leases to be given
// back or expire. LeaseWrite opens the file read-write, LeaseRead
// read-only; the file must exist. Close releases the lease.
func (c *Client) OpenRange(ctx context.Context, path string, off, length int64, mode LeaseMode) (*RangeFile, error) {
	rf, err := c.openRange(ctx, path, off, length, mode)
	return rf, opErr("open range", path, err)
}

func (c *Client) openRange(ctx context.Context, path string, off, length int64, mode LeaseMode) (*RangeFile, error) {
	flags := syscall.O_RDONLY
	switch mode {
	case LeaseRead:
	case LeaseWrite:
		flags = syscall.O_RDWR
	default:
		return nil, fmt.Errorf("%w: lease mode %v", syscall.EINVAL, mode)
	}
	if off < 0 || length < 0 || off > MaxFileSize || length > MaxFileSize-off {
		return nil, fmt.Errorf("%w: range [%d, +%d)", syscall.EINVAL, off, length)
	}
	f, err := c.open(ctx, path, flags, 0)
	if err != nil {
		return nil, err
	}
	if f.dir {
		return nil, syscall.EISDIR
	}
	rf := &RangeFile{c: c, f: f, mode: mode, off: off, end: MaxFileSize}
	if length > 0 {
		rf.end = off + length
	}
	rf.mu.Lock()
	err = rf.acquireLocked(ctx)
	rf.mu.Unlock()
	if err != nil {
		f.mu.Lock()
		f.mu.closed = true
		f.mu.Unlock()
		return nil, err
	}
	return rf, nil
}

func (rf *RangeFile) length() int64 {
	if rf.end == MaxFileSize {
		return 0
	}
	return rf.end - rf.off
}

func (rf *RangeFile) acquireLocked(ctx context.Context) error {
	l, err := rf.c.acquireLease(ctx, rf.f.ino, rf.mode, rf.off, rf.length(), LeaseOptions{
		Wait: rf.c.cfg.OpTimeout, OnRevoke: rf.revoked})
	if err != nil {
		return err
	}
	rf.lease = l
	return nil
}

// revoked runs when the minister wants the lease back: writes in flight
// finish, pending state is synced, then the keeper releases the lease.
func (rf *RangeFile) revoked(l *Lease, lost bool) {
	rf.mu.Lock()
	defer rf.mu.Unlock()
	if rf.lease == l {
		rf.lease = nil
	}
	if rf.mode == LeaseWrite && !rf.closed {
		ctx, cancel := context.WithTimeout(context.Background(), rf.c.cfg.OpTimeout)
		defer cancel()
		if err := rf.f.Sync(ctx); err != nil {
			rf.c.log.Warn("sync before giving a write lease back failed", "path", rf.f.path, "err", err)
		}
	}
}

// hold runs fn with a valid lease held (shared with other reads and
// writes), acquiring it again first if it was revoked or lost.
func (rf *RangeFile) hold(ctx context.Context, fn func() error) error {
	for {
		rf.mu.RLock()
		if rf.closed {
			rf.mu.RUnlock()
			return fmt.Errorf("%w: file is closed", syscall.EBADF)
		}
		if rf.lease != nil && rf.lease.Valid() {
			err := fn()
			rf.mu.RUnlock()
			return err
		}
		rf.mu.RUnlock()
		rf.mu.Lock()
		var err error
		if !rf.closed && (rf.lease == nil || !rf.lease.Valid()) {
			if rf.lease != nil {
				// Untrusted (revoked or renewals failed): flush, give it
				// back, ask anew.
				if rf.mode == LeaseWrite {
					if err := rf.f.Sync(ctx); err != nil {
						rf.mu.Unlock()
						return err
					}
				}
				_ = rf.lease.Release(ctx)
				rf.lease = nil
			}
			err = rf.acquireLocked(ctx)
		}
		rf.mu.Unlock()
		if err != nil {
			return err
		}
	}
}

func (rf *RangeFile) inRange(off, n int64) error {
	if off < rf.off || n > rf.end-off {
		return fmt.Errorf("%w: [%d, +%d) is outside the file's leased range [%d, %d)", syscall.EINVAL, off, n, rf.off, rf.end)
	}
	return nil
}

// WriteAt writes p at off, as File.WriteAt, under the write lease.
func (rf *RangeFile) WriteAt(ctx context.Context, p []byte, off int64) (int, error) {
	if rf.mode != LeaseWrite {
		return 0, opErr("write", rf.f.path, fmt.Errorf("%w: range opened with a read lease", syscall.EBADF))
	}
	if err := rf.inRange(off, int64(len(p))); err != nil {
		return 0, opErr("write", rf.f.path, err)
	}
	var n int
	err := rf.hold(ctx, func() error {
		var err error
		n, err = rf.f.WriteAt(ctx, p, off)
		return err
	})
	return n, err
}

// ReadAt reads into p at off, as File.ReadAt, under the lease. Reads past
// the end of the file end with io.EOF.
func (rf *RangeFile) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	if err := rf.inRange(off, int64(len(p))); err != nil {
		return 0, opErr("read", rf.f.path, err)
	}
	var n int
	err := rf.hold(ctx, func() error {
		var err error
		n, err = rf.f.ReadAt(ctx, p, off)
		return err
	})
	return n, err
}

// Sync records this RangeFile's writes in the ministry (File.Sync).
func (rf *RangeFile) Sync(ctx context.Context) error {
	rf.mu.RLock()
	defer rf.mu.RUnlock()
	if rf.closed {
		return opErr("sync", rf.f.path, fmt.Errorf("%w: file is closed", syscall.EBADF))
	}
	return rf.f.Sync(ctx)
}

// Stat returns the file's attributes as the ministry has them now.
func (rf *RangeFile) Stat(ctx context.Context) (*wire.Attr, error) { return rf.f.Stat(ctx) }

// Ino returns the file's inode number.
func (rf *RangeFile) Ino() ids.Ino { return rf.f.ino }

// Path returns the path the file was opened with.
func (rf *RangeFile) Path() string { return rf.f.path }

// Range returns the leased range (length 0: to the end of the file).
func (rf *RangeFile) Range() (off, length int64) { return rf.off, rf.length() }

// Lease returns the lease currently held, or nil between a revoke and
// the next read or write.
func (rf *RangeFile) Lease() *Lease {
	rf.mu.RLock()
	defer rf.mu.RUnlock()
	return rf.lease
}

// Close syncs, releases the lease and closes the file; later calls fail
// with EBADF. The lease is released even when the sync fails, whose error
// is returned.
func (rf *RangeFile) Close() error {
	rf.mu.Lock()
	defer rf.mu.Unlock()
	if rf.closed {
		return opErr("close", rf.f.path, fmt.Errorf("%w: file is closed", syscall.EBADF))
	}
	rf.closed = true
	err := rf.f.Close()
	if rf.lease != nil {
		ctx, cancel := context.WithTimeout(context.Background(), rf.c.cfg.OpTimeout)
		defer cancel()
		err = errors.Join(err, rf.lease.Release(ctx))
		rf.lease = nil
	}
	return err
}
