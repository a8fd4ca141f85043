package posix

import (
	"fmt"
	"slices"
	"syscall"

	"github.com/govfs/govfs/internal/wire"
)

// Denied is a refusal: the errno and why.
type Denied struct {
	Errno syscall.Errno
	Msg   string
}

func (d *Denied) Error() string { return d.Msg + ": " + d.Errno.Error() }

// Unwrap lets errors.Is find the errno.
func (d *Denied) Unwrap() error { return d.Errno }

func errnof(e syscall.Errno, format string, args ...any) error {
	return &Denied{Errno: e, Msg: fmt.Sprintf(format, args...)}
}

// Package posix holds the POSIX permission rules GovFS enforces: what
// Linux's VFS checks before it calls a file system. The ministry applies
// them in its state machine against the caller a command names
// (namespace), and the mount applies them to its cached attributes
// before it answers a change itself and queues it (fusefs), so that it
// never acknowledges what the ministry will refuse. A nil caller is not
// checked.

// Permission bits asked for.
const (
	MayExec  = 1
	MayWrite = 2
	MayRead  = 4
)

// Mode bits.
const (
	modeSetuid = 0o4000
	modeSetgid = 0o2000
	modeSticky = 0o1000
	modeGrpX   = 0o010
)

// IsRoot says whether c is root.
func IsRoot(c *wire.Cred) bool { return c.GetUid() == 0 }

// InGroup says whether the caller's primary or a supplementary group is gid.
func InGroup(c *wire.Cred, gid uint32) bool {
	return c.GetGid() == gid || slices.Contains(c.GetGroups(), gid)
}

// Permitted is generic_permission: the owner's bits for the owner, the
// group's for a member, the others' for the rest; root may read and
// write anything and execute what anyone may execute (search any
// directory).
func Permitted(a *wire.Attr, c *wire.Cred, want uint32) bool {
	mode := a.GetMode()
	if IsRoot(c) {
		if want&MayExec == 0 || a.GetType() == wire.FileType_DIRECTORY {
			return true
		}
		return mode&0o111 != 0
	}
	var bits uint32
	switch {
	case c.GetUid() == a.GetUid():
		bits = mode >> 6
	case InGroup(c, a.GetGid()):
		bits = mode >> 3
	default:
		bits = mode
	}
	return bits&7&want == want
}

func wantName(want uint32) string {
	s := ""
	for _, x := range []struct {
		bit  uint32
		name string
	}{{MayRead, "read"}, {MayWrite, "write"}, {MayExec, "search"}} {
		if want&x.bit != 0 {
			if s != "" {
				s += "+"
			}
			s += x.name
		}
	}
	return s
}

// CheckAccess fails with EACCES when c (non-nil) lacks want on a.
func CheckAccess(a *wire.Attr, c *wire.Cred, want uint32, what string) error {
	if c == nil || Permitted(a, c, want) {
		return nil
	}
	return errnof(syscall.EACCES, "%s: uid %d lacks %s permission on inode %d (mode %#o, owner %d:%d)",
		what, c.GetUid(), wantName(want), a.GetIno(), a.GetMode(), a.GetUid(), a.GetGid())
}

// MayCreate: write and search permission on the directory.
func MayCreate(dir *wire.Attr, c *wire.Cred, what string) error {
	return CheckAccess(dir, c, MayWrite|MayExec, what)
}

// MayDelete: write and search permission on the directory, and in a
// sticky directory the caller must own the directory or the victim (or
// be root).
func MayDelete(dir, victim *wire.Attr, c *wire.Cred, what string) error {
	if err := CheckAccess(dir, c, MayWrite|MayExec, what); err != nil {
		return err
	}
	if c == nil || IsRoot(c) || dir.GetMode()&modeSticky == 0 {
		return nil
	}
	if c.GetUid() == dir.GetUid() || c.GetUid() == victim.GetUid() {
		return nil
	}
	return errnof(syscall.EPERM, "%s: directory %d is sticky and uid %d owns neither it (%d) nor the entry (%d)",
		what, dir.GetIno(), c.GetUid(), dir.GetUid(), victim.GetUid())
}

// MayMknod: only root makes character and block devices (CAP_MKNOD).
func MayMknod(typ wire.FileType, c *wire.Cred, what string) error {
	if c == nil || IsRoot(c) || (typ != wire.FileType_CHAR_DEVICE && typ != wire.FileType_BLOCK_DEVICE) {
		return nil
	}
	return errnof(syscall.EPERM, "%s: only root makes device files, not uid %d", what, c.GetUid())
}

// NewOwner is the owner of a new inode made by c in dir, asked for as
// want (the client's choice, which it computed the same way: the mount
// answers before the ministry sees the create). The uid is the caller's;
// the group is the directory's when it is setgid, else a group of the
// caller; a directory made in a setgid directory is setgid itself.
func NewOwner(dir *wire.Attr, c *wire.Cred, typ wire.FileType, want *wire.Cred, mode uint32) (*wire.Cred, uint32, error) {
	if c == nil {
		return want, mode, nil
	}
	uid, gid := c.GetUid(), c.GetGid()
	if want != nil && want.GetUid() != uid && !IsRoot(c) {
		return nil, 0, errnof(syscall.EPERM, "create: uid %d may not make a file owned by uid %d", uid, want.GetUid())
	}
	if want != nil {
		uid = want.GetUid()
		if IsRoot(c) || InGroup(c, want.GetGid()) {
			gid = want.GetGid()
		}
	}
	if dir.GetMode()&modeSetgid != 0 {
		gid = dir.GetGid()
		if typ == wire.FileType_DIRECTORY {
			mode |= modeSetgid
		}
	}
	// A group-executable setgid file for a group the caller is not in
	// would hand it that group's rights (inode_init_owner).
	if typ != wire.FileType_DIRECTORY && mode&(modeSetgid|modeGrpX) == modeSetgid|modeGrpX && !IsRoot(c) && !InGroup(c, gid) {
		mode &^= modeSetgid
	}
	return &wire.Cred{Uid: uid, Gid: gid}, mode, nil
}

// CheckSetattr applies the rules of chmod, chown, utimens and truncate
// (notify_change, setattr_prepare) for caller c, and adjusts op's mode
// the way the kernel does: chmod by a non-member of the file's group
// drops setgid. It returns the mode bits a chown must clear afterwards.
func CheckSetattr(a *wire.Attr, c *wire.Cred, op *wire.SetattrOp) (clear uint32, err error) {
	has := func(f wire.SetattrField) bool { return op.Valid&uint32(f) != 0 }
	ino := a.GetIno()
	owner := c == nil || IsRoot(c) || c.GetUid() == a.GetUid()
	chown := has(wire.SetattrField_SETATTR_UID) && op.Uid != a.GetUid()
	chgrp := has(wire.SetattrField_SETATTR_GID) && op.Gid != a.GetGid()
	if c != nil && !IsRoot(c) {
		if chown {
			return 0, errnof(syscall.EPERM, "chown %d: only root may give a file away (uid %d to %d)", ino, a.GetUid(), op.Uid)
		}
		if has(wire.SetattrField_SETATTR_UID) && op.Uid == a.GetUid() && !owner {
			return 0, errnof(syscall.EPERM, "chown %d: uid %d does not own it", ino, c.GetUid())
		}
		if has(wire.SetattrField_SETATTR_GID) && (!owner || (chgrp && !InGroup(c, op.Gid))) {
			return 0, errnof(syscall.EPERM, "chgrp %d to %d: uid %d must own the file and be in the group", ino, op.Gid, c.GetUid())
		}
		// Dropping setuid/setgid and nothing else only takes rights away:
		// the kernel does it as a write by a non-owner lands (FUSE sends it
		// as a mode change, in the writer's name).
		// Only for a regular file, only by a caller who may write it, and
		// only when some of those bits go and nothing else changes.
		old, dropped := a.GetMode()&07777, (a.GetMode()&07777)^(op.Mode&07777)
		dropOnly := has(wire.SetattrField_SETATTR_MODE) && op.Valid == uint32(wire.SetattrField_SETATTR_MODE) &&
			a.GetType() == wire.FileType_REGULAR && dropped != 0 && dropped&^(modeSetuid|modeSetgid) == 0 &&
			old&dropped == dropped && Permitted(a, c, MayWrite)
		if has(wire.SetattrField_SETATTR_MODE) && !dropOnly {
			if !owner {
				return 0, errnof(syscall.EPERM, "chmod %d: uid %d does not own it (owner %d)", ino, c.GetUid(), a.GetUid())
			}
			gid := a.GetGid()
			if has(wire.SetattrField_SETATTR_GID) {
				gid = op.Gid
			}
			if op.Mode&modeSetgid != 0 && !InGroup(c, gid) {
				op.Mode &^= modeSetgid
			}
		}
		explicit := has(wire.SetattrField_SETATTR_ATIME) || has(wire.SetattrField_SETATTR_MTIME)
		now := has(wire.SetattrField_SETATTR_ATIME_NOW) || has(wire.SetattrField_SETATTR_MTIME_NOW)
		if explicit && !owner {
			return 0, errnof(syscall.EPERM, "utimens %d: only the owner (%d) sets explicit times, not uid %d", ino, a.GetUid(), c.GetUid())
		}
		// (A write through an open descriptor stamps the time without
		// a check, as file_update_time does.)
		if now && !explicit && !owner && !Permitted(a, c, MayWrite) {
			return 0, errnof(syscall.EACCES, "utimens %d: uid %d neither owns it nor may write it", ino, c.GetUid())
		}
		// (by_handle is the client's word: it counts only with what
		// MayWriteData accepts, i.e. for the owner.)
		if has(wire.SetattrField_SETATTR_SIZE) {
			if err := MayWriteData(a, c, fmt.Sprintf("truncate %d", ino)); err != nil {
				return 0, err
			}
		}
	}
	// A size change by anyone but root clears them as a write does.
	if has(wire.SetattrField_SETATTR_SIZE) {
		clear |= KillPriv(a, c)
	}
	// A chown or chgrp of a non-directory clears setuid, and setgid
	// when group-executable (the kernel does it for root too).
	if (has(wire.SetattrField_SETATTR_UID) || has(wire.SetattrField_SETATTR_GID)) && a.GetType() != wire.FileType_DIRECTORY && c != nil {
		clear |= modeSetuid
		if a.GetMode()&modeGrpX != 0 {
			clear |= modeSetgid
		}
	}
	return clear, nil
}

// MayWriteData: changing a file's bytes or size needs write permission,
// or owning it. The ministry records no open descriptors, so "the
// descriptor was opened for writing" (Linux's rule) is approximated by
// ownership, which covers a file created with a mode that denies its
// creator writing (open(O_CREAT|O_RDWR, 0) then ftruncate), and a writer
// whose permission was taken away after it opened the file is refused.
func MayWriteData(a *wire.Attr, c *wire.Cred, what string) error {
	if c == nil || IsRoot(c) || c.GetUid() == a.GetUid() {
		return nil
	}
	return CheckAccess(a, c, MayWrite, what)
}

// KillPriv is the mode bits a change of the file's bytes by c clears
// (file_remove_privs): setuid, and setgid when group-executable, unless
// c is root or unknown.
func KillPriv(a *wire.Attr, c *wire.Cred) uint32 {
	if c == nil || IsRoot(c) || a.GetType() != wire.FileType_REGULAR {
		return 0
	}
	kill := a.GetMode() & modeSetuid
	if a.GetMode()&(modeSetgid|modeGrpX) == modeSetgid|modeGrpX {
		kill |= modeSetgid
	}
	return kill
}

// MayXattr: user attributes need write permission (on a file or a
// directory), trusted and security ones root; others (system.*) write
// permission.
func MayXattr(a *wire.Attr, c *wire.Cred, name []byte, what string) error {
	if c == nil {
		return nil
	}
	n := string(name)
	switch {
	case len(n) >= 8 && n[:8] == "trusted.", len(n) >= 9 && n[:9] == "security.":
		if !IsRoot(c) {
			return errnof(syscall.EPERM, "%s %q: only root may set trusted and security attributes", what, n)
		}
		return nil
	case len(n) >= 5 && n[:5] == "user.":
		if t := a.GetType(); t != wire.FileType_REGULAR && t != wire.FileType_DIRECTORY {
			return errnof(syscall.EPERM, "%s %q: user attributes only on files and directories", what, n)
		}
	}
	return CheckAccess(a, c, MayWrite, what)
}
