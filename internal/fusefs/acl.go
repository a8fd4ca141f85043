package fusefs

import (
	"context"
	"encoding/binary"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// POSIX ACLs equal to the mode bits. GovFS stores no ACLs, but an
// access ACL with only the owner, group and other entries says no more
// than the permission bits do, and a file system with ACLs (ext4, XFS,
// MooseFS) stores it as exactly that: a chmod, with no xattr kept
// (the kernel's posix_acl_equiv_mode). GNU cp -a (coreutils 9) sets
// every file's permissions this way and only falls back to fchmod when
// the ACL is refused: answering EOPNOTSUPP cost each copied file a
// FUSE round trip more than a file system with ACLs (cp -a of
// /usr/include: 8,867 refused setxattr calls, then as many chmods). An
// ACL that names users or groups, or has a mask, and every default ACL
// are still refused (EOPNOTSUPP: setfacl says "Operation not
// supported"); reading either ACL answers ENODATA ("no ACL beyond the
// mode"), as those file systems do for such a file.

const aclAccessXattr = "system.posix_acl_access"

// The xattr form of a POSIX ACL (linux/posix_acl_xattr.h): a version,
// then entries of tag, permissions and id, little endian.
const (
	aclXattrVersion = 2
	aclUserObj      = 0x01
	aclUser         = 0x02
	aclGroupObj     = 0x04
	aclGroup        = 0x08
	aclMask         = 0x10
	aclOther        = 0x20
)

// aclModeBits returns the permission bits (0777) of an access ACL in its
// xattr form when it is equivalent to them (owner, group and other
// entries only, each once); ok false for an extended ACL (named users or
// groups, a mask). A malformed value is EINVAL.
func aclModeBits(v []byte) (bits uint32, ok bool, errno syscall.Errno) {
	if len(v) < 4 || (len(v)-4)%8 != 0 || binary.LittleEndian.Uint32(v) != aclXattrVersion {
		return 0, false, syscall.EINVAL
	}
	seen := map[uint16]bool{}
	extended := false
	for e := v[4:]; len(e) > 0; e = e[8:] {
		tag, perm := binary.LittleEndian.Uint16(e), uint32(binary.LittleEndian.Uint16(e[2:]))
		if perm&^7 != 0 {
			return 0, false, syscall.EINVAL
		}
		switch tag {
		case aclUserObj, aclGroupObj, aclOther, aclMask:
			if seen[tag] {
				return 0, false, syscall.EINVAL
			}
			seen[tag] = true
		case aclUser, aclGroup:
		default:
			return 0, false, syscall.EINVAL
		}
		switch tag {
		case aclUserObj:
			bits |= perm << 6
		case aclGroupObj:
			bits |= perm << 3
		case aclOther:
			bits |= perm
		default:
			extended = true
		}
	}
	if !seen[aclUserObj] || !seen[aclGroupObj] || !seen[aclOther] {
		return 0, false, syscall.EINVAL
	}
	return bits, !extended, 0
}

// setACLAccess applies an access ACL equivalent to the mode bits as the
// chmod it is (keeping the setuid, setgid and sticky bits, with chmod's
// checks: only the owner may, and setgid goes for a caller outside the
// file's group), and refuses any other (see above).
// XATTR_CREATE and XATTR_REPLACE do not matter, as for ext4 (kernels
// since 6.2 pass neither for ACLs).
func (n *node) setACLAccess(ctx context.Context, data []byte) syscall.Errno {
	bits, ok, e := aclModeBits(data)
	if e != 0 {
		return e
	}
	if !ok {
		return syscall.EOPNOTSUPP
	}
	var cur fuse.AttrOut
	if e := n.Getattr(ctx, nil, &cur); e != 0 {
		return e
	}
	in := &fuse.SetAttrIn{}
	in.Valid = fuse.FATTR_MODE
	in.Mode = cur.Mode&^0o777 | bits
	var out fuse.AttrOut
	if e := n.Setattr(ctx, nil, in, &out); e != 0 {
		return e
	}
	// The kernel does not know that a setxattr changed the mode (it
	// keeps the attributes it had, under a lease for long): it asks
	// again.
	_ = n.NotifyContent(-1, 0)
	return 0
}
