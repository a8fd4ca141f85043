package client

import (
	"context"
	"fmt"
	"syscall"

	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/wire"
)

// Inode-level entry points for callers that hold inode numbers rather
// than paths (the FUSE mount): opening a File by inode, and creating an
// inode on behalf of a given user.

// NodeSpec describes an inode for MakeNode.
type NodeSpec struct {
	// Type is REGULAR, DIRECTORY, SYMLINK, FIFO, SOCKET, CHAR_DEVICE or
	// BLOCK_DEVICE.
	Type wire.FileType
	// Mode holds the permission bits (& 07777) exactly as stored: no umask
	// is applied here.
	Mode uint32
	// Target is a symlink's target.
	Target string
	// Exclusive, for a regular file: EEXIST if the name exists. Without
	// it an existing regular file is returned unchanged.
	Exclusive bool
	// Cred owns the new inode; nil means Config.Cred.
	Cred *wire.Cred
	// Rdev is a device node's number (st_rdev).
	Rdev uint64
	// MarkDirLease, for a directory made by MakeNodeDeferred whose
	// directory lease the caller asks for before the create is applied
	// (LeaseOptions.NewDir): the create marks the directory as leased
	// (wire.CreateOp.mark_dir_lease).
	MarkDirLease bool
}

// MakeNode creates name in directory parent as spec says and returns its
// attributes.
func (c *Client) MakeNode(ctx context.Context, parent ids.Ino, name string, spec NodeSpec) (*wire.Attr, error) {
	p := inoNamePath(uint64(parent), name)
	op, err := c.createOp(ctx, parent, name, spec)
	if err != nil {
		return nil, err
	}
	cmd := c.newCommand(func(cmd *wire.Command) { cmd.Op = &wire.Command_Create{Create: op} })
	res, err := c.mutate(ctx, parent, cmd)
	if err != nil {
		return nil, opErr("create", p, err)
	}
	if res.GetAttr() == nil {
		return nil, opErr("create", p, syscall.EIO)
	}
	c.learnChild(ids.Ino(res.GetAttr().GetIno()), c.owner(parent), 0)
	return res.GetAttr(), nil
}

// createOp checks spec and name and builds the CreateOp (errors carry
// the operation and path).
func (c *Client) createOp(ctx context.Context, parent ids.Ino, name string, spec NodeSpec) (*wire.CreateOp, error) {
	p := inoNamePath(uint64(parent), name)
	switch spec.Type {
	case wire.FileType_REGULAR, wire.FileType_DIRECTORY, wire.FileType_FIFO, wire.FileType_SOCKET:
	case wire.FileType_CHAR_DEVICE, wire.FileType_BLOCK_DEVICE:
	case wire.FileType_SYMLINK:
		if err := checkTarget(spec.Target); err != nil {
			return nil, opErr("symlink", p, err)
		}
	default:
		return nil, opErr("mknod", p, fmt.Errorf("%w: file type %v", syscall.EINVAL, spec.Type))
	}
	if err := checkName(name); err != nil {
		return nil, opErr("create", p, err)
	}
	cred := spec.Cred
	if cred == nil {
		cred = c.callerFor(ctx)
	}
	op := &wire.CreateOp{Parent: uint64(parent), Name: []byte(name), Type: spec.Type,
		Mode: spec.Mode & 0o7777, Exclusive: spec.Exclusive, Rdev: spec.Rdev,
		Cred: &wire.Cred{Uid: cred.GetUid(), Gid: cred.GetGid()}, MarkDirLease: spec.MarkDirLease && spec.Type == wire.FileType_DIRECTORY}
	if spec.Type == wire.FileType_SYMLINK {
		op.Target = []byte(spec.Target)
	}
	return op, nil
}

// OpenIno opens regular file ino as Open opens a path (same flags, except
// that O_CREAT and O_EXCL are ignored: the inode exists). The attributes
// are read linearizably, so an OpenIno after another client's Close sees
// its writes (close-to-open); they are returned with the File.
//
// Unlike Open, O_APPEND is not kept: WriteAt works, and the caller picks
// the offsets (the FUSE kernel module passes the end of the file for
// O_APPEND writes).
func (c *Client) OpenIno(ctx context.Context, ino ids.Ino, flags int) (*File, *wire.Attr, error) {
	f, a, err := c.openIno(ctx, ino, flags)
	return f, a, opErr("open", inoPath(uint64(ino)), err)
}

func (c *Client) openIno(ctx context.Context, ino ids.Ino, flags int) (*File, *wire.Attr, error) {
	if err := checkAccMode(flags); err != nil {
		return nil, nil, err
	}
	// The attributes and, for a file of few chunks, its chunk table
	// (inline bytes included) in one linearizable read: a small file's
	// open and first read or write need no other metadata round trip.
	resp, _, err := c.read(ctx, ino, &wire.ReadRequest{Op: &wire.ReadRequest_GetChunks{GetChunks: &wire.GetChunksReq{
		Ino: uint64(ino), WithAttr: true, MaxChunks: openChunks}}}, []ReadOption{Linearizable()})
	if err != nil {
		return nil, nil, err
	}
	attr := resp.GetAttr()
	if attr == nil {
		return nil, nil, fmt.Errorf("%w: open: the answer has no attributes", syscall.EIO)
	}
	f, err := c.fileOf(attr, flags)
	if err != nil {
		return nil, nil, err
	}
	f.prime(resp)
	if f.writable && flags&syscall.O_TRUNC != 0 {
		a, err := c.setattr(ctx, ino, &wire.SetattrOp{Valid: uint32(wire.SetattrField_SETATTR_SIZE), Size: 0})
		if err != nil {
			return nil, nil, err
		}
		attr = a
		f.mu.Lock()
		f.mu.size = 0
		f.mu.chunks = map[uint64]*wire.ChunkRef{}
		f.mu.inline, f.mu.inlineData, f.mu.primed = false, nil, false
		f.mu.Unlock()
	}
	return f, attr, nil
}

// prime gives a new File the chunk table (and inline bytes) an open's
// read answered with, unless it left them out (a large file).
func (f *File) prime(resp *wire.ReadResponse) {
	if resp.GetAttr().GetType() != wire.FileType_REGULAR || resp.GetChunksOmitted() {
		return
	}
	m := make(map[uint64]*wire.ChunkRef, len(resp.GetChunks()))
	for _, ch := range resp.GetChunks() {
		m[ch.GetIndex()] = ch
	}
	f.mu.Lock()
	f.mu.chunks, f.mu.primed = m, true
	f.mu.inline, f.mu.inlineData = resp.GetInline(), resp.GetInlineData()
	f.mu.Unlock()
}

// FileOfLease returns a File for the file of read lease l from what the
// minister read for the open at the grant (LeaseOptions.Open), so its
// first read needs no metadata request either. Without that read (not
// asked, or not given) it is FileOf(attr); attr must then be set.
func (c *Client) FileOfLease(l *Lease, attr *wire.Attr, flags int) (*File, error) {
	return c.FileOfRead(l.opened, attr, flags)
}

// FileOfRead is FileOfLease from an open's read the caller kept: a
// lease's (Lease.opened) or one that a File's own changes left
// (File.SettledRead), current while the caller's read lease is held.
func (c *Client) FileOfRead(opened *wire.ReadResponse, attr *wire.Attr, flags int) (*File, error) {
	if opened.GetAttr() == nil || (attr != nil && attr.GetVersion() != opened.GetAttr().GetVersion()) {
		return c.FileOf(attr, flags) // the caller knows newer attributes
	}
	f, err := c.fileOf(opened.GetAttr(), flags)
	if err != nil {
		return nil, opErr("open", inoPath(opened.GetAttr().GetIno()), err)
	}
	f.prime(opened)
	return f, nil
}

// openChunks is how many chunk records an open fetches with the
// attributes (256 MiB of 4 MiB chunks, 4 GiB of 64 MiB ones); a larger
// file's table is read when needed.
const openChunks = 64

func checkAccMode(flags int) error {
	switch flags & syscall.O_ACCMODE {
	case syscall.O_RDONLY, syscall.O_WRONLY, syscall.O_RDWR:
		return nil
	}
	return fmt.Errorf("%w: access mode %#x", syscall.EINVAL, flags&syscall.O_ACCMODE)
}

// FileOf returns a File for the regular file whose attributes the caller
// has just read or created (attr), without asking the ministry: the File
// starts from attr's size. Flags are as for OpenIno, except that O_TRUNC
// is ignored (the caller knows the size).
func (c *Client) FileOf(attr *wire.Attr, flags int) (*File, error) {
	f, err := c.fileOf(attr, flags)
	return f, opErr("open", inoPath(attr.GetIno()), err)
}

func (c *Client) fileOf(attr *wire.Attr, flags int) (*File, error) {
	ino := ids.Ino(attr.GetIno())
	f := &File{c: c, path: inoPath(uint64(ino)), ino: ino}
	switch flags & syscall.O_ACCMODE {
	case syscall.O_RDONLY:
		f.readable = true
	case syscall.O_WRONLY:
		f.writable = true
	case syscall.O_RDWR:
		f.readable, f.writable = true, true
	default:
		return nil, fmt.Errorf("%w: access mode %#x", syscall.EINVAL, flags&syscall.O_ACCMODE)
	}
	switch attr.GetType() {
	case wire.FileType_REGULAR:
	case wire.FileType_DIRECTORY:
		return nil, syscall.EISDIR
	default:
		return nil, fmt.Errorf("%w: not a regular file", syscall.EINVAL)
	}
	f.mu.size = int64(attr.GetSize())
	return f, nil
}

// Size returns the file size this File knows (as of Open, its own writes,
// and reads past the end it has done); it asks nothing.
func (f *File) Size() int64 { return f.cachedSize() }

// Reset makes the File start again from attributes a of its inode, just
// read or returned by a change made elsewhere (another File's Truncate):
// the size becomes a's, and the chunk table is read again when next
// needed. Without it, a File that knows a larger size than the file has
// would treat a write inside that size as an overwrite and not grow the
// file. The caller orders the change after this File's writes (it waited
// for them): what Sync owes for them is cut to a's size as well, as a
// Truncate of this File would.
func (f *File) Reset(a *wire.Attr) {
	_, _, cs := f.c.dataPlane()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cutTouchedLocked(int64(a.GetSize()), cs)
	f.mu.size = int64(a.GetSize())
	f.mu.chunks = nil
	f.mu.hasAppend = false
	f.mu.primed = false
}

// Unprime makes the next read of a small inline file fetch its bytes
// again rather than trust those read at open: another File of the same
// process changed the file since.
func (f *File) Unprime() {
	f.mu.Lock()
	f.mu.primed = false
	f.mu.Unlock()
}
