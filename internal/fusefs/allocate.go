package fusefs

import (
	"context"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"

	"github.com/govfs/govfs/client"
	"github.com/govfs/govfs/internal/wire"
)

// fallocate(2) mode bits (linux/falloc.h).
const (
	fallocKeepSize  = 0x01
	fallocPunchHole = 0x02
	fallocZeroRange = 0x10
)

// zeroPiece is how many zero bytes one write of a punch or zero-range
// carries.
const zeroPiece = 1 << 20

var _ fs.NodeAllocater = (*node)(nil)

// Allocate is fallocate(2). Chunk servers allocate space when bytes
// arrive, so GovFS cannot reserve it ahead: mode 0 makes the range part
// of the file (growing the size over a hole, like JuiceFS and CephFS do)
// and KEEP_SIZE alone succeeds without doing anything; a later write can
// still fail with ENOSPC. PUNCH_HOLE and ZERO_RANGE write zeros over the
// part of the range inside the file (chunks have no holes to punch);
// ZERO_RANGE without KEEP_SIZE also grows the file. COLLAPSE_RANGE,
// INSERT_RANGE and UNSHARE_RANGE are EOPNOTSUPP.
func (n *node) Allocate(ctx context.Context, fh fs.FileHandle, off, size uint64, mode uint32) syscall.Errno {
	ctx = bg(ctx)
	if mode&^uint32(fallocKeepSize|fallocPunchHole|fallocZeroRange) != 0 {
		return syscall.EOPNOTSUPP
	}
	switch {
	case size == 0:
		return syscall.EINVAL
	case off > uint64(client.MaxFileSize) || size > uint64(client.MaxFileSize)-off:
		return syscall.EFBIG
	}
	end := off + size
	if e := n.flushAll(ctx); e != 0 {
		return e
	}
	// Linearizable: the size decides what is zeroed and whether to grow.
	a, err := n.fsys.c.GetAttr(ctx, n.ino, client.Linearizable())
	if err != nil {
		return n.fsys.errno("fallocate", err)
	}
	if a.GetType() != wire.FileType_REGULAR {
		return syscall.ENODEV
	}
	if mode&(fallocPunchHole|fallocZeroRange) != 0 {
		if zend := min(end, a.GetSize()); zend > off {
			if e := n.writeZeros(ctx, fh, off, zend); e != 0 {
				return e
			}
		}
	}
	if mode&fallocKeepSize == 0 && end > a.GetSize() {
		// SIZE_GROW: a concurrent writer that already went further is
		// not cut back.
		op := &wire.SetattrOp{Size: end, ByHandle: true, // fallocate needs a descriptor open for writing
			Valid: uint32(wire.SetattrField_SETATTR_SIZE | wire.SetattrField_SETATTR_SIZE_GROW | wire.SetattrField_SETATTR_MTIME_NOW)}
		if a, err = n.fsys.c.Setattr(ctx, n.ino, op); err != nil {
			return n.fsys.errno("fallocate", err)
		}
		n.resetFiles(a, nil)
	}
	n.forgetAttr()
	n.changedHere()
	return 0
}

// writeZeros writes zeros over [off, end) through the caller's File (or
// one opened for it) and makes them durable.
func (n *node) writeZeros(ctx context.Context, fh fs.FileHandle, off, end uint64) syscall.Errno {
	var f *client.File
	if h, ok := fh.(*handle); ok {
		f = h.f
	} else {
		var err error
		if f, _, err = n.fsys.c.OpenIno(ctx, n.ino, syscall.O_RDWR); err != nil {
			return n.fsys.errno("fallocate", err)
		}
		defer f.Close()
	}
	zeros := make([]byte, min(zeroPiece, end-off))
	for p := off; p < end; {
		k := min(uint64(len(zeros)), end-p)
		if _, err := f.WriteAt(ctx, zeros[:k], int64(p)); err != nil {
			return n.fsys.errno("fallocate", err)
		}
		p += k
	}
	if err := f.Sync(ctx); err != nil {
		return n.fsys.errno("fallocate", err)
	}
	return 0
}

// resetFiles tells every open File of the inode except skip the
// attributes a, so none keeps a stale size.
func (n *node) resetFiles(a *wire.Attr, skip *handle) {
	n.mu.Lock()
	hs := n.handlesLocked()
	n.mu.Unlock()
	for _, oh := range hs {
		if oh != skip {
			oh.f.Reset(a)
		}
	}
}

// forgetAttr drops the attributes the node holds under a read lease, so
// the next getattr asks the ministry.
func (n *node) forgetAttr() {
	n.adoptOnce() // as noteWrite
	n.mu.Lock()
	n.mu.leaseAttr = false
	n.mu.localChanges++
	n.mu.Unlock()
}
