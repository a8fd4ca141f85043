package client

import (
	"context"
	"errors"
	"slices"
	"syscall"

	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/wire"
)

// Renameat2 flags accepted by Rename and RenameAt.
const (
	RenameNoReplace uint32 = 1
	RenameExchange  uint32 = 2
)

// ---- resolution ----

// lookup finds name in directory parent and learns the child's owner.
func (c *Client) lookup(ctx context.Context, parent ids.Ino, name string, opts []ReadOption) (*wire.Attr, error) {
	req := &wire.ReadRequest{
		Op: &wire.ReadRequest_Lookup{Lookup: &wire.LookupReq{Parent: uint64(parent), Name: []byte(name)}},
	}
	resp, group, err := c.read(ctx, parent, req, opts)
	if errors.Is(err, syscall.ENOENT) {
		// Confirmed by the minister, linearizably and after other
		// clients' queued creates in the directory: a clerk may not have
		// applied another client's create yet (a session read waits only
		// for this client's changes), and another mount may still hold
		// the create of a file it closed in its queue (docs/fuse.md,
		// "Asynchronous creates"). So a file another client created and
		// closed is found by the next lookup (close-to-open).
		req.GetLookup().Recall, req.GetLookup().ClientId = true, c.clientID
		resp, group, err = c.read(ctx, parent, req, append(slices.Clip(opts), Linearizable(), viaLeader()))
	}
	if err != nil {
		return nil, err
	}
	attr := resp.GetAttr()
	if attr == nil {
		return nil, syscall.EIO
	}
	c.learnChild(ids.Ino(attr.GetIno()), group, resp.GetMinistry())
	if resp.GetMinistry() != 0 {
		// The root of a subtree another ministry owns: its attributes
		// live there.
		return c.getAttr(ctx, ids.Ino(attr.GetIno()), opts)
	}
	return attr, nil
}

func (c *Client) getAttr(ctx context.Context, ino ids.Ino, opts []ReadOption) (*wire.Attr, error) {
	resp, _, err := c.read(ctx, ino, &wire.ReadRequest{
		Op: &wire.ReadRequest_GetAttr{GetAttr: &wire.GetAttrReq{Ino: uint64(ino)}},
	}, opts)
	if err != nil {
		return nil, err
	}
	if resp.GetAttr() == nil {
		return nil, syscall.EIO
	}
	return resp.GetAttr(), nil
}

// resolve returns the attributes of the inode named by comps, walking
// from the root with one Lookup per component. Symlinks are not followed:
// the last component is reported as is (lstat), an intermediate
// non-directory (symlinks included) gives ENOTDIR.
func (c *Client) resolve(ctx context.Context, comps []string, opts []ReadOption) (*wire.Attr, error) {
	if len(comps) == 0 {
		return c.getAttr(ctx, ids.RootIno, opts)
	}
	cur := ids.RootIno
	var attr *wire.Attr
	for i, name := range comps {
		a, err := c.lookup(ctx, cur, name, opts)
		if err != nil {
			return nil, err
		}
		if i < len(comps)-1 && a.GetType() != wire.FileType_DIRECTORY {
			return nil, syscall.ENOTDIR
		}
		cur, attr = ids.Ino(a.GetIno()), a
	}
	return attr, nil
}

// resolveDir returns the inode of the directory named by comps.
func (c *Client) resolveDir(ctx context.Context, comps []string) (ids.Ino, error) {
	if len(comps) == 0 {
		return ids.RootIno, nil
	}
	a, err := c.resolve(ctx, comps, nil)
	if err != nil {
		return 0, err
	}
	if a.GetType() != wire.FileType_DIRECTORY {
		return 0, syscall.ENOTDIR
	}
	return ids.Ino(a.GetIno()), nil
}

// parentOf validates path and resolves its parent directory.
func (c *Client) parentOf(ctx context.Context, path string, rootErr syscall.Errno) (ids.Ino, string, error) {
	dir, name, err := splitParent(path, rootErr)
	if err != nil {
		return 0, "", err
	}
	parent, err := c.resolveDir(ctx, dir)
	return parent, name, err
}

// Stat returns the attributes of the inode at path, without following a
// symlink in the last component (lstat).
func (c *Client) Stat(ctx context.Context, path string, opts ...ReadOption) (*wire.Attr, error) {
	comps, err := splitPath(path)
	if err != nil {
		return nil, opErr("stat", path, err)
	}
	a, err := c.resolve(ctx, comps, opts)
	return a, opErr("stat", path, err)
}

// Lookup returns the attributes of the entry name in directory parent.
func (c *Client) Lookup(ctx context.Context, parent ids.Ino, name string, opts ...ReadOption) (*wire.Attr, error) {
	if err := checkName(name); err != nil {
		return nil, opErr("lookup", inoNamePath(uint64(parent), name), err)
	}
	a, err := c.lookup(ctx, parent, name, opts)
	return a, opErr("lookup", inoNamePath(uint64(parent), name), err)
}

// GetAttr returns the attributes of inode ino.
func (c *Client) GetAttr(ctx context.Context, ino ids.Ino, opts ...ReadOption) (*wire.Attr, error) {
	a, err := c.getAttr(ctx, ino, opts)
	return a, opErr("getattr", inoPath(uint64(ino)), err)
}

// ---- creation ----

func (c *Client) create(ctx context.Context, parent ids.Ino, name string, op *wire.CreateOp) (*wire.Attr, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	op.Parent = uint64(parent)
	op.Name = []byte(name)
	op.Mode &= 0o7777
	who := c.callerFor(ctx)
	op.Cred = &wire.Cred{Uid: who.GetUid(), Gid: who.GetGid()}
	cmd := c.newCommand(func(cmd *wire.Command) { cmd.Op = &wire.Command_Create{Create: op} })
	res, err := c.mutate(ctx, parent, cmd)
	if err != nil {
		return nil, err
	}
	if res.GetAttr() == nil {
		return nil, syscall.EIO
	}
	c.learnChild(ids.Ino(res.GetAttr().GetIno()), c.owner(parent), 0)
	return res.GetAttr(), nil
}

// createPath resolves the parent of path and creates op there.
func (c *Client) createPath(ctx context.Context, opName, path string, op *wire.CreateOp) (*wire.Attr, error) {
	parent, name, err := c.parentOf(ctx, path, syscall.EEXIST)
	if err != nil {
		return nil, opErr(opName, path, err)
	}
	a, err := c.create(ctx, parent, name, op)
	return a, opErr(opName, path, err)
}

// Mkdir creates directory path with permission bits mode (& 07777).
func (c *Client) Mkdir(ctx context.Context, path string, mode uint32) (*wire.Attr, error) {
	return c.createPath(ctx, "mkdir", path, &wire.CreateOp{Type: wire.FileType_DIRECTORY, Mode: mode})
}

// MkdirAt creates directory name in parent.
func (c *Client) MkdirAt(ctx context.Context, parent ids.Ino, name string, mode uint32) (*wire.Attr, error) {
	a, err := c.create(ctx, parent, name, &wire.CreateOp{Type: wire.FileType_DIRECTORY, Mode: mode})
	return a, opErr("mkdir", inoNamePath(uint64(parent), name), err)
}

// Create creates regular file path. Without exclusive an existing regular
// file is returned unchanged (open with O_CREAT); with it, EEXIST.
func (c *Client) Create(ctx context.Context, path string, mode uint32, exclusive bool) (*wire.Attr, error) {
	return c.createPath(ctx, "create", path, &wire.CreateOp{Type: wire.FileType_REGULAR, Mode: mode, Exclusive: exclusive})
}

// CreateAt creates regular file name in parent; see Create.
func (c *Client) CreateAt(ctx context.Context, parent ids.Ino, name string, mode uint32, exclusive bool) (*wire.Attr, error) {
	a, err := c.create(ctx, parent, name, &wire.CreateOp{Type: wire.FileType_REGULAR, Mode: mode, Exclusive: exclusive})
	return a, opErr("create", inoNamePath(uint64(parent), name), err)
}

// Mkfifo creates a named pipe at path.
func (c *Client) Mkfifo(ctx context.Context, path string, mode uint32) (*wire.Attr, error) {
	return c.createPath(ctx, "mkfifo", path, &wire.CreateOp{Type: wire.FileType_FIFO, Mode: mode})
}

// MkfifoAt creates a named pipe name in parent.
func (c *Client) MkfifoAt(ctx context.Context, parent ids.Ino, name string, mode uint32) (*wire.Attr, error) {
	a, err := c.create(ctx, parent, name, &wire.CreateOp{Type: wire.FileType_FIFO, Mode: mode})
	return a, opErr("mkfifo", inoNamePath(uint64(parent), name), err)
}

// checkTarget validates a symlink target: non-empty (ENOENT, as Linux),
// at most MaxPathLen bytes, no NUL.
func checkTarget(target string) error {
	switch {
	case target == "":
		return syscall.ENOENT
	case len(target) > MaxPathLen:
		return syscall.ENAMETOOLONG
	}
	for i := 0; i < len(target); i++ {
		if target[i] == 0 {
			return syscall.EINVAL
		}
	}
	return nil
}

// Symlink creates linkpath as a symbolic link to target (stored as is).
func (c *Client) Symlink(ctx context.Context, target, linkpath string) (*wire.Attr, error) {
	if err := checkTarget(target); err != nil {
		return nil, opErr("symlink", linkpath, err)
	}
	return c.createPath(ctx, "symlink", linkpath, &wire.CreateOp{Type: wire.FileType_SYMLINK, Mode: 0o777, Target: []byte(target)})
}

// SymlinkAt creates name in parent as a symbolic link to target.
func (c *Client) SymlinkAt(ctx context.Context, target string, parent ids.Ino, name string) (*wire.Attr, error) {
	p := inoNamePath(uint64(parent), name)
	if err := checkTarget(target); err != nil {
		return nil, opErr("symlink", p, err)
	}
	a, err := c.create(ctx, parent, name, &wire.CreateOp{Type: wire.FileType_SYMLINK, Mode: 0o777, Target: []byte(target)})
	return a, opErr("symlink", p, err)
}

// Readlink returns the target of the symlink at path (EINVAL if path is
// not a symlink).
func (c *Client) Readlink(ctx context.Context, path string, opts ...ReadOption) (string, error) {
	comps, err := splitPath(path)
	if err != nil {
		return "", opErr("readlink", path, err)
	}
	a, err := c.resolve(ctx, comps, opts)
	if err != nil {
		return "", opErr("readlink", path, err)
	}
	if a.GetType() != wire.FileType_SYMLINK {
		return "", opErr("readlink", path, syscall.EINVAL)
	}
	t, err := c.readlink(ctx, ids.Ino(a.GetIno()), opts)
	return t, opErr("readlink", path, err)
}

// ReadlinkIno returns the target of symlink ino.
func (c *Client) ReadlinkIno(ctx context.Context, ino ids.Ino, opts ...ReadOption) (string, error) {
	t, err := c.readlink(ctx, ino, opts)
	return t, opErr("readlink", inoPath(uint64(ino)), err)
}

func (c *Client) readlink(ctx context.Context, ino ids.Ino, opts []ReadOption) (string, error) {
	resp, _, err := c.read(ctx, ino, &wire.ReadRequest{
		Op: &wire.ReadRequest_Readlink{Readlink: &wire.ReadlinkReq{Ino: uint64(ino)}},
	}, opts)
	if err != nil {
		return "", err
	}
	return string(resp.GetValue()), nil
}

// Link makes newpath another name of the non-directory at oldpath.
func (c *Client) Link(ctx context.Context, oldpath, newpath string) (*wire.Attr, error) {
	comps, err := splitPath(oldpath)
	if err != nil {
		return nil, opErr("link", oldpath, err)
	}
	if len(comps) == 0 {
		return nil, opErr("link", oldpath, syscall.EPERM)
	}
	src, err := c.resolve(ctx, comps, nil)
	if err != nil {
		return nil, opErr("link", oldpath, err)
	}
	if src.GetType() == wire.FileType_DIRECTORY {
		return nil, opErr("link", oldpath, syscall.EPERM)
	}
	parent, name, err := c.parentOf(ctx, newpath, syscall.EEXIST)
	if err != nil {
		return nil, opErr("link", newpath, err)
	}
	a, err := c.link(ctx, ids.Ino(src.GetIno()), parent, name)
	return a, opErr("link", newpath, err)
}

// LinkAt makes newName in newParent another name of inode ino.
func (c *Client) LinkAt(ctx context.Context, ino, newParent ids.Ino, newName string) (*wire.Attr, error) {
	a, err := c.link(ctx, ino, newParent, newName)
	return a, opErr("link", inoNamePath(uint64(newParent), newName), err)
}

func (c *Client) link(ctx context.Context, ino, newParent ids.Ino, newName string) (*wire.Attr, error) {
	if err := checkName(newName); err != nil {
		return nil, err
	}
	if c.apart(ino, newParent) {
		return nil, &errnoMsg{errno: syscall.EXDEV, msg: "the file and the directory belong to different ministries: links across ministries are not supported yet"}
	}
	cmd := c.newCommand(func(cmd *wire.Command) {
		cmd.Op = &wire.Command_Link{Link: &wire.LinkOp{Ino: uint64(ino), NewParent: uint64(newParent), NewName: []byte(newName)}}
	})
	res, err := c.mutate(ctx, newParent, cmd)
	if err != nil {
		return nil, err
	}
	return res.GetAttr(), nil
}

// ---- removal and rename ----

func (c *Client) unlink(ctx context.Context, parent ids.Ino, name string, dir bool) error {
	if err := checkName(name); err != nil {
		return err
	}
	cmd := c.newCommand(func(cmd *wire.Command) {
		cmd.Op = &wire.Command_Unlink{Unlink: &wire.UnlinkOp{Parent: uint64(parent), Name: []byte(name), Dir: dir}}
	})
	_, err := c.mutate(ctx, parent, cmd)
	return err
}

// Remove unlinks the non-directory at path (EISDIR for a directory).
func (c *Client) Remove(ctx context.Context, path string) error {
	parent, name, err := c.parentOf(ctx, path, syscall.EISDIR)
	if err == nil {
		err = c.unlink(ctx, parent, name, false)
	}
	return opErr("remove", path, err)
}

// UnlinkAt removes the non-directory entry name from parent.
func (c *Client) UnlinkAt(ctx context.Context, parent ids.Ino, name string) error {
	return opErr("remove", inoNamePath(uint64(parent), name), c.unlink(ctx, parent, name, false))
}

// Rmdir removes the empty directory at path.
func (c *Client) Rmdir(ctx context.Context, path string) error {
	parent, name, err := c.parentOf(ctx, path, syscall.EBUSY)
	if err == nil {
		err = c.unlink(ctx, parent, name, true)
	}
	return opErr("rmdir", path, err)
}

// RmdirAt removes the empty directory name from parent.
func (c *Client) RmdirAt(ctx context.Context, parent ids.Ino, name string) error {
	return opErr("rmdir", inoNamePath(uint64(parent), name), c.unlink(ctx, parent, name, true))
}

func checkRenameFlags(flags uint32) error {
	if flags&^(RenameNoReplace|RenameExchange) != 0 || flags == RenameNoReplace|RenameExchange {
		return syscall.EINVAL
	}
	return nil
}

// Rename moves oldpath to newpath with Linux renameat2 semantics; flags is
// 0, RenameNoReplace or RenameExchange. A rename across ministries fails
// with EXDEV until the cross-ministry protocol exists.
func (c *Client) Rename(ctx context.Context, oldpath, newpath string, flags uint32) error {
	if err := checkRenameFlags(flags); err != nil {
		return opErr("rename", oldpath, err)
	}
	op, oname, err := c.parentOf(ctx, oldpath, syscall.EBUSY)
	if err != nil {
		return opErr("rename", oldpath, err)
	}
	np, nname, err := c.parentOf(ctx, newpath, syscall.EBUSY)
	if err != nil {
		return opErr("rename", newpath, err)
	}
	return opErr("rename", oldpath, c.rename(ctx, op, oname, np, nname, flags))
}

// RenameAt moves name in parent to newName in newParent; see Rename.
func (c *Client) RenameAt(ctx context.Context, parent ids.Ino, name string, newParent ids.Ino, newName string, flags uint32) error {
	err := checkRenameFlags(flags)
	if err == nil {
		err = c.rename(ctx, parent, name, newParent, newName, flags)
	}
	return opErr("rename", inoNamePath(uint64(parent), name), err)
}

func (c *Client) rename(ctx context.Context, parent ids.Ino, name string, newParent ids.Ino, newName string, flags uint32) error {
	if err := checkName(name); err != nil {
		return err
	}
	if err := checkName(newName); err != nil {
		return err
	}
	if c.apart(parent, newParent) {
		return &errnoMsg{errno: syscall.EXDEV, msg: "the two directories belong to different ministries: renames across ministries are not supported yet (mv copies instead)"}
	}
	cmd := c.newCommand(func(cmd *wire.Command) {
		cmd.Op = &wire.Command_Rename{Rename: &wire.RenameOp{
			Parent: uint64(parent), Name: []byte(name),
			NewParent: uint64(newParent), NewName: []byte(newName), Flags: flags,
		}}
	})
	_, err := c.mutate(ctx, parent, cmd)
	return err
}

// ---- directories ----

// readdirPageSize is the page size Readdir asks for.
const readdirPageSize = 1024

// Readdir lists every entry of the directory at path in name order,
// paging with cookies. "." and ".." are not included.
func (c *Client) Readdir(ctx context.Context, path string, opts ...ReadOption) ([]*wire.DirEntry, error) {
	comps, err := splitPath(path)
	if err != nil {
		return nil, opErr("readdir", path, err)
	}
	dir, err := c.resolve(ctx, comps, opts)
	if err != nil {
		return nil, opErr("readdir", path, err)
	}
	if dir.GetType() != wire.FileType_DIRECTORY {
		return nil, opErr("readdir", path, syscall.ENOTDIR)
	}
	ents, err := c.readdirAll(ctx, ids.Ino(dir.GetIno()), opts)
	return ents, opErr("readdir", path, err)
}

// ReaddirAll lists every entry of directory ino; see Readdir.
func (c *Client) ReaddirAll(ctx context.Context, ino ids.Ino, opts ...ReadOption) ([]*wire.DirEntry, error) {
	ents, err := c.readdirAll(ctx, ino, opts)
	return ents, opErr("readdir", inoPath(uint64(ino)), err)
}

func (c *Client) readdirAll(ctx context.Context, ino ids.Ino, opts []ReadOption) ([]*wire.DirEntry, error) {
	var all []*wire.DirEntry
	var cookie []byte
	for {
		_, ents, next, eof, err := c.readdirPage(ctx, ino, cookie, readdirPageSize, opts)
		if err != nil {
			return nil, err
		}
		all = append(all, ents...)
		if eof || len(ents) == 0 {
			return all, nil
		}
		if len(next) == 0 {
			// Names sort strictly after the cookie, so the last name
			// continues the listing.
			next = ents[len(ents)-1].GetName()
		}
		cookie = next
	}
}

// ReaddirPage lists up to limit entries of directory ino whose names sort
// strictly after cookie (nil = from the start). It returns the cookie to
// continue with and whether the listing is complete. The server may cap
// limit; limit <= 0 asks for its default.
func (c *Client) ReaddirPage(ctx context.Context, ino ids.Ino, cookie []byte, limit int, opts ...ReadOption) (entries []*wire.DirEntry, next []byte, eof bool, err error) {
	_, entries, next, eof, err = c.readdirPage(ctx, ino, cookie, limit, opts)
	return entries, next, eof, opErr("readdir", inoPath(uint64(ino)), err)
}

// ReaddirFirstPage is ReaddirPage from the start of the listing, with
// the directory's own attributes read at the same point (nil from a
// metadata node older than this client, which does not send them).
func (c *Client) ReaddirFirstPage(ctx context.Context, ino ids.Ino, limit int, opts ...ReadOption) (dir *wire.Attr, entries []*wire.DirEntry, next []byte, eof bool, err error) {
	dir, entries, next, eof, err = c.readdirPage(ctx, ino, nil, limit, opts)
	if dir != nil && dir.GetIno() != uint64(ino) {
		dir = nil // not this directory's: not trusted
	}
	return dir, entries, next, eof, opErr("readdir", inoPath(uint64(ino)), err)
}

func (c *Client) readdirPage(ctx context.Context, ino ids.Ino, cookie []byte, limit int, opts []ReadOption) (*wire.Attr, []*wire.DirEntry, []byte, bool, error) {
	lim := uint32(0)
	if limit > 0 {
		lim = uint32(min(limit, 1<<30))
	}
	resp, group, err := c.read(ctx, ino, &wire.ReadRequest{
		Op: &wire.ReadRequest_Readdir{Readdir: &wire.ReaddirReq{Ino: uint64(ino), Cookie: cookie, Limit: lim}},
	}, opts)
	if err != nil {
		return nil, nil, nil, false, err
	}
	for _, e := range resp.GetEntries() {
		c.learnChild(ids.Ino(e.GetIno()), group, e.GetMinistry())
	}
	return resp.GetAttr(), resp.GetEntries(), resp.GetNextCookie(), resp.GetEof(), nil
}
