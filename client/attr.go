package client

import (
	"context"
	"syscall"
	"time"

	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/wire"
)

// Limits on extended attributes, as on Linux.
const (
	// MaxXattrNameLen is the longest xattr name, in bytes.
	MaxXattrNameLen = 255
	// MaxXattrValueLen is the largest xattr value, in bytes.
	MaxXattrValueLen = 64 << 10
)

// Xattr flags accepted by SetXattr.
const (
	XattrCreate  uint32 = 1
	XattrReplace uint32 = 2
)

// Setattr changes the attributes of inode ino selected by op.valid (a
// bit set of wire.SetattrField) and returns them afterwards. op.ino is
// ignored; op is not modified.
func (c *Client) Setattr(ctx context.Context, ino ids.Ino, op *wire.SetattrOp) (*wire.Attr, error) {
	a, err := c.setattr(ctx, ino, op)
	return a, opErr("setattr", inoPath(uint64(ino)), err)
}

func (c *Client) setattr(ctx context.Context, ino ids.Ino, op *wire.SetattrOp) (*wire.Attr, error) {
	res, err := c.mutate(ctx, ino, c.setattrCmd(ino, op))
	if err != nil {
		return nil, err
	}
	return res.GetAttr(), nil
}

// setattrCmd is the command that applies op to ino.
func (c *Client) setattrCmd(ino ids.Ino, op *wire.SetattrOp) *wire.Command {
	o := &wire.SetattrOp{
		Ino: uint64(ino), Valid: op.GetValid(), Mode: op.GetMode() & 0o7777,
		Uid: op.GetUid(), Gid: op.GetGid(), Size: op.GetSize(),
		AtimeNs: op.GetAtimeNs(), MtimeNs: op.GetMtimeNs(), ChunkSize: op.GetChunkSize(), ExpectChunks: op.GetExpectChunks(),
		ByHandle: op.GetByHandle(),
	}
	return c.newCommand(func(cmd *wire.Command) { cmd.Op = &wire.Command_Setattr{Setattr: o} })
}

// setattrPath resolves path (without following a final symlink) and
// applies op to it.
func (c *Client) setattrPath(ctx context.Context, opName, path string, op *wire.SetattrOp) error {
	comps, err := splitPath(path)
	if err != nil {
		return opErr(opName, path, err)
	}
	a, err := c.resolve(ctx, comps, nil)
	if err == nil {
		_, err = c.setattr(ctx, ids.Ino(a.GetIno()), op)
	}
	return opErr(opName, path, err)
}

// Chmod sets the permission bits (07777) of path. A symlink in the last
// component is changed itself, not followed.
func (c *Client) Chmod(ctx context.Context, path string, mode uint32) error {
	return c.setattrPath(ctx, "chmod", path, &wire.SetattrOp{Valid: uint32(wire.SetattrField_SETATTR_MODE), Mode: mode})
}

// Chown sets the owner and group of path; -1 leaves one unchanged (as
// os.Lchown).
func (c *Client) Chown(ctx context.Context, path string, uid, gid int) error {
	op := &wire.SetattrOp{}
	if uid < -1 || gid < -1 || uid > 1<<32-1 || gid > 1<<32-1 {
		return opErr("chown", path, syscall.EINVAL)
	}
	if uid >= 0 {
		op.Valid |= uint32(wire.SetattrField_SETATTR_UID)
		op.Uid = uint32(uid)
	}
	if gid >= 0 {
		op.Valid |= uint32(wire.SetattrField_SETATTR_GID)
		op.Gid = uint32(gid)
	}
	return c.setattrPath(ctx, "chown", path, op)
}

// Truncate sets the size of the file at path, as truncate(2) without
// following a final symlink: see File.Truncate.
func (c *Client) Truncate(ctx context.Context, path string, size int64) error {
	if size < 0 {
		return opErr("truncate", path, syscall.EINVAL)
	}
	f, err := c.open(ctx, path, syscall.O_WRONLY, 0)
	if err != nil {
		return opErr("truncate", path, err)
	}
	defer f.Close()
	return f.Truncate(ctx, size)
}

// Utimes sets the access and modification times of path. A zero time
// means "now" (the time stamped into the command by this Client).
func (c *Client) Utimes(ctx context.Context, path string, atime, mtime time.Time) error {
	return c.setattrPath(ctx, "utimes", path, utimesOp(atime, mtime))
}

func utimesOp(atime, mtime time.Time) *wire.SetattrOp {
	op := &wire.SetattrOp{}
	if atime.IsZero() {
		op.Valid |= uint32(wire.SetattrField_SETATTR_ATIME_NOW)
	} else {
		op.Valid |= uint32(wire.SetattrField_SETATTR_ATIME)
		op.AtimeNs = atime.UnixNano()
	}
	if mtime.IsZero() {
		op.Valid |= uint32(wire.SetattrField_SETATTR_MTIME_NOW)
	} else {
		op.Valid |= uint32(wire.SetattrField_SETATTR_MTIME)
		op.MtimeNs = mtime.UnixNano()
	}
	return op
}

// ---- extended attributes ----

func checkXattrName(name string) error {
	switch {
	case name == "":
		return syscall.EINVAL
	case len(name) > MaxXattrNameLen:
		return syscall.ERANGE
	}
	return nil
}

// inoOf resolves path to an inode number.
func (c *Client) inoOf(ctx context.Context, path string, opts []ReadOption) (ids.Ino, error) {
	comps, err := splitPath(path)
	if err != nil {
		return 0, err
	}
	a, err := c.resolve(ctx, comps, opts)
	if err != nil {
		return 0, err
	}
	return ids.Ino(a.GetIno()), nil
}

// GetXattr returns the value of extended attribute name of path (ENODATA
// if absent).
func (c *Client) GetXattr(ctx context.Context, path, name string, opts ...ReadOption) ([]byte, error) {
	ino, err := c.inoOf(ctx, path, opts)
	if err != nil {
		return nil, opErr("getxattr", path, err)
	}
	v, err := c.getXattr(ctx, ino, name, opts)
	return v, opErr("getxattr", path, err)
}

// GetXattrIno is GetXattr on inode ino.
func (c *Client) GetXattrIno(ctx context.Context, ino ids.Ino, name string, opts ...ReadOption) ([]byte, error) {
	v, err := c.getXattr(ctx, ino, name, opts)
	return v, opErr("getxattr", inoPath(uint64(ino)), err)
}

func (c *Client) getXattr(ctx context.Context, ino ids.Ino, name string, opts []ReadOption) ([]byte, error) {
	if err := checkXattrName(name); err != nil {
		return nil, err
	}
	resp, _, err := c.read(ctx, ino, &wire.ReadRequest{
		Op: &wire.ReadRequest_GetXattr{GetXattr: &wire.GetXattrReq{Ino: uint64(ino), Name: []byte(name)}},
	}, opts)
	if err != nil {
		return nil, err
	}
	return resp.GetValue(), nil
}

// ListXattr returns the names of the extended attributes of path.
func (c *Client) ListXattr(ctx context.Context, path string, opts ...ReadOption) ([]string, error) {
	ino, err := c.inoOf(ctx, path, opts)
	if err != nil {
		return nil, opErr("listxattr", path, err)
	}
	v, err := c.listXattr(ctx, ino, opts)
	return v, opErr("listxattr", path, err)
}

// ListXattrIno is ListXattr on inode ino.
func (c *Client) ListXattrIno(ctx context.Context, ino ids.Ino, opts ...ReadOption) ([]string, error) {
	v, err := c.listXattr(ctx, ino, opts)
	return v, opErr("listxattr", inoPath(uint64(ino)), err)
}

func (c *Client) listXattr(ctx context.Context, ino ids.Ino, opts []ReadOption) ([]string, error) {
	resp, _, err := c.read(ctx, ino, &wire.ReadRequest{
		Op: &wire.ReadRequest_ListXattr{ListXattr: &wire.ListXattrReq{Ino: uint64(ino)}},
	}, opts)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(resp.GetNames()))
	for i, n := range resp.GetNames() {
		names[i] = string(n)
	}
	return names, nil
}

// SetXattr sets extended attribute name of path. flags is 0, XattrCreate
// (EEXIST if present) or XattrReplace (ENODATA if absent).
func (c *Client) SetXattr(ctx context.Context, path, name string, value []byte, flags uint32) error {
	ino, err := c.inoOf(ctx, path, nil)
	if err == nil {
		err = c.setXattr(ctx, ino, name, value, flags)
	}
	return opErr("setxattr", path, err)
}

// SetXattrIno is SetXattr on inode ino.
func (c *Client) SetXattrIno(ctx context.Context, ino ids.Ino, name string, value []byte, flags uint32) error {
	return opErr("setxattr", inoPath(uint64(ino)), c.setXattr(ctx, ino, name, value, flags))
}

func (c *Client) setXattr(ctx context.Context, ino ids.Ino, name string, value []byte, flags uint32) error {
	if err := checkXattrName(name); err != nil {
		return err
	}
	if len(value) > MaxXattrValueLen {
		return syscall.E2BIG
	}
	if flags&^(XattrCreate|XattrReplace) != 0 || flags == XattrCreate|XattrReplace {
		return syscall.EINVAL
	}
	cmd := c.newCommand(func(cmd *wire.Command) {
		cmd.Op = &wire.Command_SetXattr{SetXattr: &wire.SetXattrOp{Ino: uint64(ino), Name: []byte(name), Value: value, Flags: flags}}
	})
	_, err := c.mutate(ctx, ino, cmd)
	return err
}

// RemoveXattr removes extended attribute name of path (ENODATA if absent).
func (c *Client) RemoveXattr(ctx context.Context, path, name string) error {
	ino, err := c.inoOf(ctx, path, nil)
	if err == nil {
		err = c.removeXattr(ctx, ino, name)
	}
	return opErr("removexattr", path, err)
}

// RemoveXattrIno is RemoveXattr on inode ino.
func (c *Client) RemoveXattrIno(ctx context.Context, ino ids.Ino, name string) error {
	return opErr("removexattr", inoPath(uint64(ino)), c.removeXattr(ctx, ino, name))
}

func (c *Client) removeXattr(ctx context.Context, ino ids.Ino, name string) error {
	if err := checkXattrName(name); err != nil {
		return err
	}
	cmd := c.newCommand(func(cmd *wire.Command) {
		cmd.Op = &wire.Command_RemoveXattr{RemoveXattr: &wire.RemoveXattrOp{Ino: uint64(ino), Name: []byte(name)}}
	})
	_, err := c.mutate(ctx, ino, cmd)
	return err
}
