package namespace

import (
	"encoding/binary"
	"fmt"
	"syscall"

	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/posix"
	"github.com/govfs/govfs/internal/wire"
)

// Linux renameat2 flags.
const (
	renameNoReplace = 1
	renameExchange  = 2
)

// maxDepth bounds the walk up the parent pointers; a longer chain can only
// be a cycle, which the loop check exists to prevent.
const maxDepth = 1 << 20

// renameSide is one end of a rename: the directory, the name and what the
// name refers to (nil dirent when absent).
type renameSide struct {
	parent ids.Ino
	dir    *wire.Inode
	name   []byte
	d      *wire.Dirent
	in     *wire.Inode
}

func (s *renameSide) isDir() bool { return s.in != nil && s.in.Attr.Type == wire.FileType_DIRECTORY }

func (t *tx) loadSide(parent ids.Ino, name []byte) (*renameSide, error) {
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	dir, err := t.dir(parent)
	if err != nil {
		return nil, err
	}
	d, err := loadDirent(t.r, parent, name)
	if err != nil {
		return nil, err
	}
	s := &renameSide{parent: parent, dir: dir, name: name, d: d}
	if d == nil {
		return s, nil
	}
	if d.Ministry != 0 {
		return nil, errnof(syscall.EXDEV, "rename %v/%q: owned by ministry %d", parent, name, d.Ministry)
	}
	if s.in, err = t.inode(ids.Ino(d.Ino)); err != nil {
		return nil, fmt.Errorf("namespace: dirent %v/%q names missing inode %d: %w", parent, name, d.Ino, err)
	}
	return s, nil
}

// rename is renameat2(2) inside one ministry. The result carries the
// moved inode's attr afterwards.
func rename(t *tx, op *wire.RenameOp) (*wire.Result, error) {
	if op.Flags&^uint32(renameNoReplace|renameExchange) != 0 || op.Flags == renameNoReplace|renameExchange {
		return nil, errnof(syscall.EINVAL, "rename: flags %#x", op.Flags)
	}
	src, err := t.loadSide(ids.Ino(op.Parent), op.Name)
	if err != nil {
		return nil, err
	}
	dst, err := t.loadSide(ids.Ino(op.NewParent), op.NewName)
	if err != nil {
		return nil, err
	}
	if src.d == nil {
		return nil, errnof(syscall.ENOENT, "rename %v/%q", src.parent, src.name)
	}
	if dst.d == nil && op.Flags == renameExchange {
		return nil, errnof(syscall.ENOENT, "rename exchange %v/%q", dst.parent, dst.name)
	}
	// NB: Linux checks RENAME_NOREPLACE before the same-inode shortcut,
	// so renaming onto another link of the same file is EEXIST with it.
	if dst.d != nil && op.Flags == renameNoReplace {
		return nil, errnof(syscall.EEXIST, "rename %v/%q", dst.parent, dst.name)
	}
	if dst.d != nil && dst.d.Ino == src.d.Ino {
		// The same name, or two links to one inode: rename(2) does nothing.
		return attrResult(src.in), nil
	}
	if src.isDir() {
		if err := t.checkNotUnder(dst.parent, ids.Ino(src.d.Ino)); err != nil {
			return nil, err
		}
	}
	if err := mayRename(t.caller, src, dst, op.Flags == renameExchange); err != nil {
		return nil, err
	}
	if op.Flags == renameExchange {
		if dst.isDir() {
			if err := t.checkNotUnder(src.parent, ids.Ino(dst.d.Ino)); err != nil {
				return nil, err
			}
		}
		return exchange(t, src, dst)
	}
	if dst.d != nil {
		switch {
		case src.isDir() && !dst.isDir():
			return nil, errnof(syscall.ENOTDIR, "rename %v/%q over non-directory %v/%q", src.parent, src.name, dst.parent, dst.name)
		case !src.isDir() && dst.isDir():
			return nil, errnof(syscall.EISDIR, "rename %v/%q over directory %v/%q", src.parent, src.name, dst.parent, dst.name)
		case dst.isDir():
			empty, err := isEmptyDir(t.r, ids.Ino(dst.d.Ino))
			if err != nil {
				return nil, err
			}
			if !empty {
				return nil, errnof(syscall.ENOTEMPTY, "rename over %v/%q", dst.parent, dst.name)
			}
		}
	}
	return move(t, src, dst)
}

// move performs a checked plain rename, replacing dst if it exists.
func move(t *tx, src, dst *renameSide) (*wire.Result, error) {
	t.del(direntKey(src.parent, src.name))
	if err := t.setDirent(dst.parent, dst.name, src.d); err != nil {
		return nil, err
	}
	if dst.in != nil {
		if dst.isDir() {
			dst.dir.Attr.Nlink-- // the victim's ".." goes away
			t.touch(dst.in)
			if err := t.remove(dst.in); err != nil {
				return nil, err
			}
		} else if err := t.dropLink(dst.in); err != nil {
			return nil, err
		}
	}
	if src.isDir() && src.parent != dst.parent {
		src.dir.Attr.Nlink--
		dst.dir.Attr.Nlink++
		t.setParent(ids.Ino(src.d.Ino), dst.parent)
	}
	t.touch(src.in)
	t.touchDir(src.dir)
	t.touchDir(dst.dir)
	return attrResult(src.in), nil
}

// exchange swaps two existing names (RENAME_EXCHANGE).
func exchange(t *tx, src, dst *renameSide) (*wire.Result, error) {
	if err := t.setDirent(src.parent, src.name, dst.d); err != nil {
		return nil, err
	}
	if err := t.setDirent(dst.parent, dst.name, src.d); err != nil {
		return nil, err
	}
	if src.parent != dst.parent {
		// A directory's ".." moves with it; nlink follows the directories.
		if src.isDir() {
			src.dir.Attr.Nlink--
			dst.dir.Attr.Nlink++
			t.setParent(ids.Ino(src.d.Ino), dst.parent)
		}
		if dst.isDir() {
			dst.dir.Attr.Nlink--
			src.dir.Attr.Nlink++
			t.setParent(ids.Ino(dst.d.Ino), src.parent)
		}
	}
	t.touch(src.in)
	t.touch(dst.in)
	t.touchDir(src.dir)
	t.touchDir(dst.dir)
	return attrResult(src.in), nil
}

// checkNotUnder fails with EINVAL when dir is ino or lies inside ino's
// subtree, walking up the parent pointers from dir to the ministry root.
func (t *tx) checkNotUnder(dir, ino ids.Ino) error {
	x := dir
	for range maxDepth {
		if x == ino {
			return errnof(syscall.EINVAL, "rename: cannot move directory %v into its own subtree (%v)", ino, dir)
		}
		v, err := t.r.Get(parentKey(x))
		if err != nil {
			return fmt.Errorf("namespace: get parent of %v: %w", x, err)
		}
		if v == nil {
			return nil // reached the ministry root
		}
		if len(v) != 8 {
			return fmt.Errorf("namespace: corrupt parent record of %v", x)
		}
		x = ids.Ino(binary.BigEndian.Uint64(v))
	}
	return fmt.Errorf("namespace: parent chain of %v longer than %d: cycle", dir, maxDepth)
}

// mayRename is the permission side of rename (vfs_rename's may_delete
// and may_create): the source name is deleted from its directory, the
// destination name created (or its old entry deleted) in its own; a
// directory that changes parent needs write permission on itself (its
// ".." entry changes), both ways for an exchange.
func mayRename(c *wire.Cred, src, dst *renameSide, exchange bool) error {
	if c == nil {
		return nil
	}
	what := fmt.Sprintf("rename %v/%q to %v/%q", src.parent, src.name, dst.parent, dst.name)
	if err := posix.MayDelete(src.dir.Attr, src.in.Attr, c, what); err != nil {
		return err
	}
	if dst.in != nil {
		if err := posix.MayDelete(dst.dir.Attr, dst.in.Attr, c, what); err != nil {
			return err
		}
	} else if err := posix.MayCreate(dst.dir.Attr, c, what); err != nil {
		return err
	}
	if src.parent != dst.parent {
		if src.isDir() {
			if err := posix.CheckAccess(src.in.Attr, c, posix.MayWrite, what+" (a directory moving to another parent)"); err != nil {
				return err
			}
		}
		if exchange && dst.isDir() {
			if err := posix.CheckAccess(dst.in.Attr, c, posix.MayWrite, what+" (a directory moving to another parent)"); err != nil {
				return err
			}
		}
	}
	return nil
}
