package namespace

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/govfs/govfs/internal/engine"
	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/posix"
	"github.com/govfs/govfs/internal/wire"
)

// CommandVersion is the only Command.version this package understands.
const CommandVersion = 1

// Apply applies one ministry command and returns its result. POSIX failures
// are reported in Result.Errno (Linux errno numbers, syscall.Errno values)
// and change nothing. The returned error is only for storage failures and
// unknown command formats; the caller treats it as fatal.
func Apply(rw engine.ReadWriter, cmd *wire.Command) (*wire.Result, error) {
	return apply(rw, cmd, nil)
}

// apply is Apply; cc, when not nil, holds the client records of the
// batch being applied (applyBatch).
func apply(rw engine.ReadWriter, cmd *wire.Command, cc *clientCache) (*wire.Result, error) {
	if cmd.GetVersion() != CommandVersion {
		return nil, fmt.Errorf("namespace: command version %d, want %d", cmd.GetVersion(), CommandVersion)
	}
	if err := expireClients(rw, cmd.NowNs); err != nil {
		return nil, err
	}
	if b := cmd.GetBatch(); b != nil {
		// Its commands are deduplicated one by one; the batch's own
		// request id (the proposing host's) only names its proposal.
		return applyBatch(rw, cmd.NowNs, b)
	}
	// A command touching a subtree that is being moved is refused before
	// its request id is looked at: the same request applies after the
	// move (at the target, once the client follows the redirect).
	if res, err := movingResult(rw, cmd); err != nil || res != nil {
		return res, err
	}
	req := cmd.GetReq()
	if req.GetClientId() == 0 {
		return applyOp(rw, cmd)
	}
	res, done, err := dedupBegin(rw, req, cmd.NowNs, cc)
	if err != nil || done {
		return res, err
	}
	res, err = applyOp(rw, cmd)
	if err != nil {
		return nil, err
	}
	// A command that failed because its inode is not here (moved away,
	// or never here) is not remembered: the service redirects the client
	// to where the inode is, and the same request may come back here
	// once the inode moves back, when it must apply (and the copy of
	// the other ministry's answer for it must not find a stale one).
	if absent, err := routeAbsent(rw, cmd, res); err != nil || absent {
		return res, err
	}
	if err := dedupFinish(rw, req, res, cc); err != nil {
		return nil, err
	}
	return res, nil
}

// applyOp runs the operation in a tx and turns a POSIX failure into a
// Result.
func applyOp(rw engine.ReadWriter, cmd *wire.Command) (*wire.Result, error) {
	t := newTx(rw, cmd.NowNs)
	t.caller = cmd.GetCaller()
	res, err := dispatch(t, cmd)
	var pe *posixError
	if errors.As(err, &pe) {
		return &wire.Result{Errno: uint32(pe.errno), Message: pe.Error()}, nil
	}
	// A refusal by the permission rules (package posix) is one too.
	var denied *posix.Denied
	if errors.As(err, &denied) {
		return &wire.Result{Errno: uint32(denied.Errno), Message: "namespace: " + denied.Error()}, nil
	}
	if err != nil {
		return nil, err
	}
	if err := t.flush(rw); err != nil {
		return nil, err
	}
	if res == nil {
		res = &wire.Result{}
	}
	return res, nil
}

func dispatch(t *tx, cmd *wire.Command) (*wire.Result, error) {
	switch op := cmd.Op.(type) {
	case *wire.Command_InitMinistry:
		return initMinistry(t, op.InitMinistry)
	case *wire.Command_GrantInodes:
		return grantInodes(t, op.GrantInodes)
	case *wire.Command_Create:
		return create(t, cmd.GetReq().GetClientId(), op.Create)
	case *wire.Command_ReserveInodes:
		return reserveInodes(t, cmd.GetReq().GetClientId(), op.ReserveInodes)
	case *wire.Command_MarkDirLease:
		return markDirLease(t, op.MarkDirLease)
	case *wire.Command_LeaseSession:
		return leaseSession(t, op.LeaseSession)
	case *wire.Command_Link:
		return link(t, op.Link)
	case *wire.Command_Unlink:
		return unlink(t, op.Unlink)
	case *wire.Command_Rename:
		return rename(t, op.Rename)
	case *wire.Command_Setattr:
		return setattr(t, op.Setattr)
	case *wire.Command_SetXattr:
		return setXattr(t, op.SetXattr)
	case *wire.Command_RemoveXattr:
		return removeXattr(t, op.RemoveXattr)
	case *wire.Command_SetChunk:
		return setChunk(t, op.SetChunk)
	case *wire.Command_WriteInline:
		return writeInline(t, op.WriteInline)
	case *wire.Command_DropInline:
		return dropInline(t, op.DropInline)
	case *wire.Command_ExportSubtree:
		return exportSubtree(t, op.ExportSubtree)
	case *wire.Command_ImportSubtree:
		return importSubtree(t, op.ImportSubtree)
	case *wire.Command_FinishExport:
		return finishExport(t, op.FinishExport)
	case *wire.Command_AbortExport:
		return abortExport(t, op.AbortExport)
	case *wire.Command_FreezeEntries:
		return freezeEntries(t, op.FreezeEntries)
	case nil:
		return nil, errnof(syscall.EINVAL, "command without operation")
	default:
		return nil, errnof(syscall.EINVAL, "operation %T is not a ministry operation", op)
	}
}

func attrResult(in *wire.Inode) *wire.Result { return &wire.Result{Attr: in.Attr} }

func initMinistry(t *tx, op *wire.InitMinistryOp) (*wire.Result, error) {
	root := ids.Ino(op.RootIno)
	if root == 0 {
		return nil, errnof(syscall.EINVAL, "init ministry: root inode 0")
	}
	in, err := t.inode(root)
	if err == nil {
		return attrResult(in), nil // already initialised: no-op
	}
	var pe *posixError
	if !errors.As(err, &pe) {
		return nil, err
	}
	in = newInode(t.now, root, wire.FileType_DIRECTORY, op.Mode, nil)
	t.create(in)
	return attrResult(in), nil
}

func grantInodes(t *tx, op *wire.GrantInodesOp) (*wire.Result, error) {
	if op.Start == 0 || op.Start >= op.End {
		return nil, errnof(syscall.EINVAL, "grant inodes: bad range [%d, %d)", op.Start, op.End)
	}
	g, err := loadRanges(t.r)
	if err != nil {
		return nil, err
	}
	if !g.add(op.Start, op.End) {
		return &wire.Result{Start: op.Start, End: op.End}, nil // duplicate: ignored
	}
	t.set(inodeRangesKey, g.encode())
	return &wire.Result{Start: op.Start, End: op.End}, nil
}

func newInode(now int64, ino ids.Ino, typ wire.FileType, mode uint32, cred *wire.Cred) *wire.Inode {
	a := &wire.Attr{
		Ino:      uint64(ino),
		Type:     typ,
		Mode:     mode & 07777,
		Uid:      cred.GetUid(),
		Gid:      cred.GetGid(),
		Nlink:    1,
		AtimeNs:  now,
		MtimeNs:  now,
		CtimeNs:  now,
		CrtimeNs: now,
		Version:  1,
	}
	if typ == wire.FileType_DIRECTORY {
		a.Nlink = 2
	}
	return &wire.Inode{Attr: a}
}

func create(t *tx, client uint64, op *wire.CreateOp) (*wire.Result, error) {
	parent := ids.Ino(op.Parent)
	if err := ValidateName(op.Name); err != nil {
		return nil, err
	}
	switch op.Type {
	case wire.FileType_REGULAR, wire.FileType_DIRECTORY, wire.FileType_FIFO, wire.FileType_SOCKET,
		wire.FileType_CHAR_DEVICE, wire.FileType_BLOCK_DEVICE:
		if len(op.Target) != 0 {
			return nil, errnof(syscall.EINVAL, "create %q: target given for a %v", op.Name, op.Type)
		}
	case wire.FileType_SYMLINK:
		if len(op.Target) == 0 {
			return nil, errnof(syscall.EINVAL, "symlink %q: empty target", op.Name)
		}
		if len(op.Target) > maxSymlinkLen {
			return nil, errnof(syscall.ENAMETOOLONG, "symlink %q: target of %d bytes (max %d)", op.Name, len(op.Target), maxSymlinkLen)
		}
	default:
		return nil, errnof(syscall.EINVAL, "create %q: unsupported type %v", op.Name, op.Type)
	}
	if op.Rdev != 0 && op.Type != wire.FileType_CHAR_DEVICE && op.Type != wire.FileType_BLOCK_DEVICE {
		return nil, errnof(syscall.EINVAL, "create %q: device number given for a %v", op.Name, op.Type)
	}
	if op.MarkDirLease && op.Type != wire.FileType_DIRECTORY {
		return nil, errnof(syscall.EINVAL, "create %q: a directory lease mark asked for a %v", op.Name, op.Type)
	}
	pin, err := t.dir(parent)
	if err != nil {
		return nil, err
	}
	d, err := loadDirent(t.r, parent, op.Name)
	if err != nil {
		return nil, err
	}
	if d == nil {
		if err := posix.MayCreate(pin.Attr, t.caller, fmt.Sprintf("create %v/%q", parent, op.Name)); err != nil {
			return nil, err
		}
		if err := posix.MayMknod(op.Type, t.caller, fmt.Sprintf("mknod %v/%q", parent, op.Name)); err != nil {
			return nil, err
		}
	}
	if d != nil {
		// open(O_CREAT) without O_EXCL opens an existing regular file.
		if op.Type == wire.FileType_REGULAR && !op.Exclusive && d.Type == wire.FileType_REGULAR && d.Ministry == 0 {
			in, err := t.inode(ids.Ino(d.Ino))
			if err != nil {
				return nil, err
			}
			return attrResult(in), nil
		}
		return nil, errnof(syscall.EEXIST, "create %v/%q", parent, op.Name)
	}
	if op.Type == wire.FileType_DIRECTORY && pin.Attr.Nlink == ^uint32(0) {
		return nil, errnof(syscall.EMLINK, "mkdir %v/%q: too many subdirectories", parent, op.Name)
	}
	var ino ids.Ino
	if op.Ino != 0 {
		if err := useReserved(t, client, op.Ino); err != nil {
			return nil, err
		}
		ino = ids.Ino(op.Ino)
	} else if ino, err = allocIno(t); err != nil {
		return nil, err
	}
	owner, mode, err := posix.NewOwner(pin.Attr, t.caller, op.Type, op.Cred, op.Mode&07777)
	if err != nil {
		return nil, err
	}
	in := newInode(t.now, ino, op.Type, mode, owner)
	in.Attr.Rdev = op.Rdev
	if op.Type == wire.FileType_SYMLINK {
		in.SymlinkTarget = op.Target
		in.Attr.Size = uint64(len(op.Target))
	}
	t.create(in)
	if err := t.setDirent(parent, op.Name, &wire.Dirent{Ino: uint64(ino), Type: op.Type}); err != nil {
		return nil, err
	}
	if op.Type == wire.FileType_DIRECTORY {
		t.setParent(ino, parent)
		pin.Attr.Nlink++
		if op.MarkDirLease {
			// Its creator holds its directory lease already (granted
			// before it existed): marked as markDirLease would.
			t.set(dirLeaseKey(ino), nil)
		}
	}
	t.touchDir(pin)
	return attrResult(in), nil
}

func link(t *tx, op *wire.LinkOp) (*wire.Result, error) {
	ino, parent := ids.Ino(op.Ino), ids.Ino(op.NewParent)
	if err := ValidateName(op.NewName); err != nil {
		return nil, err
	}
	in, err := t.inode(ino)
	if err != nil {
		return nil, err
	}
	if in.Attr.Type == wire.FileType_DIRECTORY {
		return nil, errnof(syscall.EPERM, "link: inode %v is a directory", ino)
	}
	pin, err := t.dir(parent)
	if err != nil {
		return nil, err
	}
	d, err := loadDirent(t.r, parent, op.NewName)
	if err != nil {
		return nil, err
	}
	if d != nil {
		return nil, errnof(syscall.EEXIST, "link %v/%q", parent, op.NewName)
	}
	if err := posix.MayCreate(pin.Attr, t.caller, fmt.Sprintf("link %v/%q", parent, op.NewName)); err != nil {
		return nil, err
	}
	if in.Attr.Nlink == ^uint32(0) {
		return nil, errnof(syscall.EMLINK, "link: inode %v has too many links", ino)
	}
	if err := t.setDirent(parent, op.NewName, &wire.Dirent{Ino: uint64(ino), Type: in.Attr.Type}); err != nil {
		return nil, err
	}
	in.Attr.Nlink++
	t.touch(in)
	t.touchDir(pin)
	return attrResult(in), nil
}

// unlink is unlink(2) and, with op.Dir, rmdir(2). The result carries the
// removed inode's attr afterwards (nlink 0 when it is gone), so callers can
// invalidate caches.
func unlink(t *tx, op *wire.UnlinkOp) (*wire.Result, error) {
	parent := ids.Ino(op.Parent)
	if err := ValidateName(op.Name); err != nil {
		return nil, err
	}
	pin, err := t.dir(parent)
	if err != nil {
		return nil, err
	}
	d, err := loadDirent(t.r, parent, op.Name)
	if err != nil {
		return nil, err
	}
	if d == nil {
		return nil, errnof(syscall.ENOENT, "unlink %v/%q", parent, op.Name)
	}
	if d.Ministry != 0 {
		return nil, errnof(syscall.EBUSY, "%v/%q is the root of a subtree owned by ministry %d: give it back first (govfs admin unassign)", parent, op.Name, d.Ministry)
	}
	in, err := t.inode(ids.Ino(d.Ino))
	if err != nil {
		return nil, fmt.Errorf("namespace: dirent %v/%q names missing inode %d: %w", parent, op.Name, d.Ino, err)
	}
	if err := posix.MayDelete(pin.Attr, in.Attr, t.caller, fmt.Sprintf("unlink %v/%q", parent, op.Name)); err != nil {
		return nil, err
	}
	isDir := in.Attr.Type == wire.FileType_DIRECTORY
	switch {
	case !op.Dir && isDir:
		return nil, errnof(syscall.EISDIR, "unlink %v/%q", parent, op.Name)
	case op.Dir && !isDir:
		return nil, errnof(syscall.ENOTDIR, "rmdir %v/%q", parent, op.Name)
	case op.Dir:
		empty, err := isEmptyDir(t.r, ids.Ino(d.Ino))
		if err != nil {
			return nil, err
		}
		if !empty {
			return nil, errnof(syscall.ENOTEMPTY, "rmdir %v/%q", parent, op.Name)
		}
	}
	t.del(direntKey(parent, op.Name))
	if isDir {
		pin.Attr.Nlink--
		t.touch(in)
		if err := t.remove(in); err != nil {
			return nil, err
		}
	} else if err := t.dropLink(in); err != nil {
		return nil, err
	}
	t.touchDir(pin)
	return attrResult(in), nil
}

const setattrKnown = uint32(wire.SetattrField_SETATTR_MODE | wire.SetattrField_SETATTR_UID |
	wire.SetattrField_SETATTR_GID | wire.SetattrField_SETATTR_SIZE |
	wire.SetattrField_SETATTR_ATIME | wire.SetattrField_SETATTR_MTIME |
	wire.SetattrField_SETATTR_ATIME_NOW | wire.SetattrField_SETATTR_MTIME_NOW |
	wire.SetattrField_SETATTR_SIZE_GROW)

func setattr(t *tx, op *wire.SetattrOp) (*wire.Result, error) {
	ino := ids.Ino(op.Ino)
	has := func(f wire.SetattrField) bool { return op.Valid&uint32(f) != 0 }
	if op.Valid&^setattrKnown != 0 {
		return nil, errnof(syscall.EINVAL, "setattr %v: unknown fields %#x", ino, op.Valid&^setattrKnown)
	}
	in, err := t.inode(ino)
	if err != nil {
		return nil, err
	}
	a := in.Attr
	if has(wire.SetattrField_SETATTR_SIZE) {
		switch a.Type {
		case wire.FileType_REGULAR:
		case wire.FileType_DIRECTORY:
			return nil, errnof(syscall.EISDIR, "truncate %v", ino)
		default:
			return nil, errnof(syscall.EINVAL, "truncate %v: a %v", ino, a.Type)
		}
	}
	size, err := newSize(t, in, op, has)
	if err != nil {
		return nil, err
	}
	if len(op.GetExpectChunks()) > 0 {
		// Bytes written into chunks are not the file's while its bytes
		// live inline (another client made it inline meanwhile, or the
		// writer did not know): the writer must move it to chunks first.
		if _, inline, err := InlineData(t.r, ino); err != nil {
			return nil, err
		} else if inline {
			return nil, errnof(syscall.ESTALE, "setattr %v: the file's bytes are inline in the ministry, not in the chunks written: move it to chunks, then write again", ino)
		}
	}
	for _, want := range op.GetExpectChunks() {
		got, err := chunkAt(t.r, ino, want.GetIndex())
		if err != nil {
			return nil, err
		}
		if got == nil || got.GetHandle() != want.GetHandle() {
			return nil, errnof(syscall.ESTALE, "setattr %v: chunk %d was released or replaced (another client truncated the file): the data written there is gone; write it again",
				ino, want.GetIndex())
		}
	}
	clearBits, err := posix.CheckSetattr(a, t.caller, op)
	if err != nil {
		return nil, err
	}
	if op.Valid == 0 {
		return attrResult(in), nil
	}
	t.touch(in)
	if has(wire.SetattrField_SETATTR_MODE) {
		a.Mode = op.Mode & 07777
	}
	a.Mode &^= clearBits
	if has(wire.SetattrField_SETATTR_UID) {
		a.Uid = op.Uid
	}
	if has(wire.SetattrField_SETATTR_GID) {
		a.Gid = op.Gid
	}
	if has(wire.SetattrField_SETATTR_SIZE) {
		if err := resize(t, in, size, op.ChunkSize); err != nil {
			return nil, err
		}
	}
	// Explicit times come after the size so that utimens wins over the
	// implicit mtime of a truncate in the same request.
	switch {
	case has(wire.SetattrField_SETATTR_ATIME_NOW):
		a.AtimeNs = t.now
	case has(wire.SetattrField_SETATTR_ATIME):
		a.AtimeNs = op.AtimeNs
	}
	switch {
	case has(wire.SetattrField_SETATTR_MTIME_NOW):
		a.MtimeNs = t.now
	case has(wire.SetattrField_SETATTR_MTIME):
		a.MtimeNs = op.MtimeNs
	}
	return attrResult(in), nil
}

// Linux setxattr flags.
const (
	xattrCreate  = 1
	xattrReplace = 2
)

func setXattr(t *tx, op *wire.SetXattrOp) (*wire.Result, error) {
	ino := ids.Ino(op.Ino)
	if err := validateXattrName(op.Name); err != nil {
		return nil, err
	}
	if len(op.Value) > maxXattrValue {
		return nil, errnof(syscall.E2BIG, "setxattr %v %q: value of %d bytes (max %d)", ino, op.Name, len(op.Value), maxXattrValue)
	}
	if op.Flags&^uint32(xattrCreate|xattrReplace) != 0 || op.Flags == xattrCreate|xattrReplace {
		return nil, errnof(syscall.EINVAL, "setxattr %v %q: flags %#x", ino, op.Name, op.Flags)
	}
	in, err := t.inode(ino)
	if err != nil {
		return nil, err
	}
	if err := posix.MayXattr(in.Attr, t.caller, op.Name, "setxattr"); err != nil {
		return nil, err
	}
	old, err := t.r.Get(xattrKey(ino, op.Name))
	if err != nil {
		return nil, fmt.Errorf("namespace: get xattr %v %q: %w", ino, op.Name, err)
	}
	if old != nil && op.Flags == xattrCreate {
		return nil, errnof(syscall.EEXIST, "setxattr %v %q", ino, op.Name)
	}
	if old == nil && op.Flags == xattrReplace {
		return nil, errnof(syscall.ENODATA, "setxattr %v %q", ino, op.Name)
	}
	val := op.Value
	if val == nil {
		val = []byte{}
	}
	t.set(xattrKey(ino, op.Name), val)
	t.touch(in)
	return attrResult(in), nil
}

func removeXattr(t *tx, op *wire.RemoveXattrOp) (*wire.Result, error) {
	ino := ids.Ino(op.Ino)
	if err := validateXattrName(op.Name); err != nil {
		return nil, err
	}
	in, err := t.inode(ino)
	if err != nil {
		return nil, err
	}
	if err := posix.MayXattr(in.Attr, t.caller, op.Name, "removexattr"); err != nil {
		return nil, err
	}
	old, err := t.r.Get(xattrKey(ino, op.Name))
	if err != nil {
		return nil, fmt.Errorf("namespace: get xattr %v %q: %w", ino, op.Name, err)
	}
	if old == nil {
		return nil, errnof(syscall.ENODATA, "removexattr %v %q", ino, op.Name)
	}
	t.del(xattrKey(ino, op.Name))
	t.touch(in)
	return attrResult(in), nil
}

// RouteInos returns the inode a request is routed by (the directory of
// an entry operation, the inode otherwise) and, for rename and link, the
// second directory or inode that must live in the same ministry.
func RouteInos(cmd *wire.Command) (route, other ids.Ino) {
	switch op := cmd.GetOp().(type) {
	case *wire.Command_Create:
		return ids.Ino(op.Create.GetParent()), 0
	case *wire.Command_Link:
		return ids.Ino(op.Link.GetNewParent()), ids.Ino(op.Link.GetIno())
	case *wire.Command_Unlink:
		return ids.Ino(op.Unlink.GetParent()), 0
	case *wire.Command_Rename:
		return ids.Ino(op.Rename.GetParent()), ids.Ino(op.Rename.GetNewParent())
	case *wire.Command_Setattr:
		return ids.Ino(op.Setattr.GetIno()), 0
	case *wire.Command_SetXattr:
		return ids.Ino(op.SetXattr.GetIno()), 0
	case *wire.Command_RemoveXattr:
		return ids.Ino(op.RemoveXattr.GetIno()), 0
	case *wire.Command_SetChunk:
		return ids.Ino(op.SetChunk.GetIno()), 0
	case *wire.Command_WriteInline:
		return ids.Ino(op.WriteInline.GetIno()), 0
	case *wire.Command_DropInline:
		return ids.Ino(op.DropInline.GetIno()), 0
	}
	return 0, 0
}

// routeAbsent says whether res is an ENOENT or ESTALE and the inode that
// routes cmd (RouteInos) is not held here.
func routeAbsent(r engine.Reader, cmd *wire.Command, res *wire.Result) (bool, error) {
	switch syscall.Errno(res.GetErrno()) {
	case syscall.ENOENT, syscall.ESTALE:
	default:
		return false, nil
	}
	route, _ := RouteInos(cmd)
	if route == 0 {
		return false, nil
	}
	v, err := r.Get(inodeKey(route))
	if err != nil {
		return false, fmt.Errorf("namespace: get inode %v: %w", route, err)
	}
	return v == nil, nil
}
