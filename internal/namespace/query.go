package namespace

import (
	"fmt"
	"slices"
	"strings"
	"syscall"

	"google.golang.org/protobuf/proto"

	"github.com/govfs/govfs/internal/engine"
	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/posix"
	"github.com/govfs/govfs/internal/wire"
)

// Readdir page sizes.
const (
	defaultReaddirLimit = 256
	maxReaddirLimit     = 1024
)

func loadDir(r engine.Reader, ino ids.Ino) (*wire.Inode, error) {
	in, err := loadInode(r, ino)
	if err != nil {
		return nil, err
	}
	if in.Attr.Type != wire.FileType_DIRECTORY {
		return nil, errnof(syscall.ENOTDIR, "inode %v is not a directory", ino)
	}
	return in, nil
}

// Lookup resolves name in directory parent. For a referral (the child is
// owned by another ministry, Dirent.Ministry != 0) the attr is nil: the
// client must ask that ministry.
func Lookup(r engine.Reader, parent ids.Ino, name []byte) (*wire.Attr, *wire.Dirent, error) {
	if err := ValidateName(name); err != nil {
		return nil, nil, err
	}
	if _, err := loadDir(r, parent); err != nil {
		return nil, nil, err
	}
	d, err := loadDirent(r, parent, name)
	if err != nil {
		return nil, nil, err
	}
	if d == nil {
		return nil, nil, errnof(syscall.ENOENT, "lookup %v/%q", parent, name)
	}
	if d.Ministry != 0 {
		return nil, d, nil
	}
	in, err := loadInode(r, ids.Ino(d.Ino))
	if err != nil {
		return nil, nil, fmt.Errorf("namespace: dirent %v/%q names missing inode %d: %w", parent, name, d.Ino, err)
	}
	return in.Attr, d, nil
}

// GetAttr returns the attributes of ino (ENOENT when unknown).
func GetAttr(r engine.Reader, ino ids.Ino) (*wire.Attr, error) {
	in, err := loadInode(r, ino)
	if err != nil {
		return nil, err
	}
	return in.Attr, nil
}

// Readdir returns entries of directory ino with names strictly greater
// (bytewise) than cookie, at most limit (capped at 1024, 256 when 0), each
// with its Attr filled (readdirplus; nil for referrals), the cookie to
// resume from (the last name returned) and eof. Because the cookie is a
// name, not a position, entries added or removed between pages never make
// an entry present throughout appear twice or not at all.
func Readdir(r engine.Reader, ino ids.Ino, cookie []byte, limit int) (entries []*wire.DirEntry, next []byte, eof bool, err error) {
	_, entries, next, eof, err = ReaddirAttr(r, ino, cookie, limit)
	return entries, next, eof, err
}

// ReaddirAttr is Readdir that also returns the directory's own
// attributes, read at the same point (an opendir checks them with its
// first page).
func ReaddirAttr(r engine.Reader, ino ids.Ino, cookie []byte, limit int) (dir *wire.Attr, entries []*wire.DirEntry, next []byte, eof bool, err error) {
	if limit <= 0 {
		limit = defaultReaddirLimit
	}
	limit = min(limit, maxReaddirLimit)
	in, err := loadDir(r, ino)
	if err != nil {
		return nil, nil, nil, false, err
	}
	prefix := direntPrefix(ino)
	lower := prefix
	if len(cookie) > 0 {
		// The smallest name greater than cookie is cookie + NUL.
		lower = append(direntKey(ino, cookie), 0)
	}
	eof = true
	var derr error
	err = r.Scan(lower, prefixEnd(prefix), func(k, v []byte) bool {
		if len(entries) == limit {
			eof = false
			return false
		}
		d := &wire.Dirent{}
		if derr = proto.Unmarshal(v, d); derr != nil {
			derr = fmt.Errorf("namespace: corrupt dirent %x: %w", k, derr)
			return false
		}
		entries = append(entries, &wire.DirEntry{
			Name: slices.Clone(k[len(prefix):]), Ino: d.Ino, Type: d.Type, Ministry: d.Ministry,
		})
		return true
	})
	if err == nil {
		err = derr
	}
	if err != nil {
		return nil, nil, nil, false, fmt.Errorf("namespace: readdir %v: %w", ino, err)
	}
	// Attrs are read after the scan so that no Get runs inside an iterator.
	for _, e := range entries {
		if e.Ministry != 0 {
			continue
		}
		child, err := loadInode(r, ids.Ino(e.Ino))
		if err != nil {
			return nil, nil, nil, false, fmt.Errorf("namespace: readdir %v: entry %q: %w", ino, e.Name, err)
		}
		e.Attr = child.Attr
	}
	next = cookie
	if len(entries) > 0 {
		next = entries[len(entries)-1].Name
	}
	return in.Attr, entries, next, eof, nil
}

// GetXattr returns the value of xattr name of ino (ENODATA when absent).
func GetXattr(r engine.Reader, ino ids.Ino, name []byte) ([]byte, error) {
	if err := validateXattrName(name); err != nil {
		return nil, err
	}
	if _, err := loadInode(r, ino); err != nil {
		return nil, err
	}
	v, err := r.Get(xattrKey(ino, name))
	if err != nil {
		return nil, fmt.Errorf("namespace: get xattr %v %q: %w", ino, name, err)
	}
	if v == nil {
		return nil, errnof(syscall.ENODATA, "getxattr %v %q", ino, name)
	}
	return v, nil
}

// ListXattr returns the xattr names of ino in byte order.
func ListXattr(r engine.Reader, ino ids.Ino) ([][]byte, error) {
	if _, err := loadInode(r, ino); err != nil {
		return nil, err
	}
	p := xattrPrefix(ino)
	var names [][]byte
	err := r.Scan(p, prefixEnd(p), func(k, _ []byte) bool {
		names = append(names, slices.Clone(k[len(p):]))
		return true
	})
	if err != nil {
		return nil, fmt.Errorf("namespace: list xattrs of %v: %w", ino, err)
	}
	return names, nil
}

// Readlink returns the target of symlink ino (EINVAL for other types).
func Readlink(r engine.Reader, ino ids.Ino) ([]byte, error) {
	in, err := loadInode(r, ino)
	if err != nil {
		return nil, err
	}
	if in.Attr.Type != wire.FileType_SYMLINK {
		return nil, errnof(syscall.EINVAL, "readlink %v: not a symlink", ino)
	}
	return in.SymlinkTarget, nil
}

// MayRead checks a read against the permissions of the user asking (c;
// nil: not checked, a node's or a trusted host's read): a lookup needs
// search permission on the directory, a listing read permission, a user
// attribute read permission on its inode, a trusted one root. Attributes,
// link targets and attribute names need none (as in Linux); a file's
// bytes are guarded by chunk access tokens (what get_chunks hands out).
func MayRead(r engine.Reader, c *wire.Cred, req *wire.ReadRequest) error {
	// Root passes every one of these checks (search and read of a
	// directory, user and trusted attributes): skip the second read of
	// the inode the query itself loads, on the path of every lookup a
	// mount host or an operator makes.
	if c == nil || posix.IsRoot(c) {
		return nil
	}
	check := func(ino uint64, want uint32, what string) error {
		in, err := loadInode(r, ids.Ino(ino))
		if err != nil {
			return err
		}
		return posix.CheckAccess(in.Attr, c, want, what)
	}
	switch op := req.GetOp().(type) {
	case *wire.ReadRequest_Lookup:
		return check(op.Lookup.GetParent(), posix.MayExec, fmt.Sprintf("lookup %q", op.Lookup.GetName()))
	case *wire.ReadRequest_Readdir:
		return check(op.Readdir.GetIno(), posix.MayRead, "readdir")
	case *wire.ReadRequest_GetXattr:
		n := string(op.GetXattr.GetName())
		switch {
		case strings.HasPrefix(n, "trusted."):
			if !posix.IsRoot(c) {
				return errnof(syscall.EPERM, "getxattr %q: only root may read trusted attributes", n)
			}
		case strings.HasPrefix(n, "user."):
			return check(op.GetXattr.GetIno(), posix.MayRead, fmt.Sprintf("getxattr %q", n))
		}
	}
	return nil
}
