package namespace

import (
	"syscall"
	"testing"

	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/wire"
)

var (
	rootC  = &wire.Cred{Uid: 0, Gid: 0}
	alice  = &wire.Cred{Uid: 1000, Gid: 100}
	bob    = &wire.Cred{Uid: 1001, Gid: 101}
	carol  = &wire.Cred{Uid: 1002, Gid: 102, Groups: []uint32{100}} // in alice's group
	nobody = &wire.Cred{Uid: 65534, Gid: 65534}
)

func (v *env) okAs(c *wire.Cred, op any) *wire.Result {
	v.t.Helper()
	res := v.cmdAs(op, nil, c)
	if res.Errno != 0 {
		v.t.Fatalf("%v as uid %d: errno %v (%s)", op, c.GetUid(), syscall.Errno(res.Errno), res.Message)
	}
	return res
}

// failsAs applies op as c, expects errno and checks nothing changed.
func (v *env) failsAs(c *wire.Cred, op any, want syscall.Errno) {
	v.t.Helper()
	before := v.dump()
	res := v.cmdAs(op, nil, c)
	if syscall.Errno(res.Errno) != want {
		v.t.Fatalf("%v as uid %d: errno %v (%s), want %v", op, c.GetUid(), syscall.Errno(res.Errno), res.Message, want)
	}
	if res.Message == "" {
		v.t.Errorf("%v: no message with errno %v", op, want)
	}
	if after := v.dump(); after != before {
		v.t.Fatalf("%v as uid %d failed with %v but changed the state", op, c.GetUid(), want)
	}
}

func createAs(parent ids.Ino, name string, typ wire.FileType, mode uint32, owner *wire.Cred) *wire.Command_Create {
	return &wire.Command_Create{Create: &wire.CreateOp{Parent: uint64(parent), Name: []byte(name), Type: typ, Mode: mode,
		Cred: &wire.Cred{Uid: owner.GetUid(), Gid: owner.GetGid()}, Exclusive: true}}
}

func chmodOp(ino ids.Ino, mode uint32) *wire.Command_Setattr {
	return &wire.Command_Setattr{Setattr: &wire.SetattrOp{Ino: uint64(ino), Valid: uint32(wire.SetattrField_SETATTR_MODE), Mode: mode}}
}

func chownOp(ino ids.Ino, uid, gid *uint32) *wire.Command_Setattr {
	op := &wire.SetattrOp{Ino: uint64(ino)}
	if uid != nil {
		op.Valid |= uint32(wire.SetattrField_SETATTR_UID)
		op.Uid = *uid
	}
	if gid != nil {
		op.Valid |= uint32(wire.SetattrField_SETATTR_GID)
		op.Gid = *gid
	}
	return &wire.Command_Setattr{Setattr: op}
}

func u32(x uint32) *uint32 { return &x }

// TestPermissionsCreateAndDelete: write and search permission on the
// directory for creates, links and deletes; the owner, group and other
// bits; root passes; the sticky bit.
func TestPermissionsCreateAndDelete(t *testing.T) {
	v := newEnv(t)
	// /home (root 0755), /home/alice (alice 0750), /tmp (root 1777).
	home := ids.Ino(v.okAs(rootC, createAs(root, "home", wire.FileType_DIRECTORY, 0o755, rootC)).Attr.Ino)
	ad := ids.Ino(v.okAs(rootC, createAs(home, "alice", wire.FileType_DIRECTORY, 0o750, alice)).Attr.Ino)
	v.okAs(rootC, chownOp(ad, u32(1000), u32(100))) // (created as alice by root: owner given)
	if a := v.attr(ad); a.Uid != 1000 || a.Gid != 100 {
		t.Fatalf("root making a directory for alice: owner %d:%d", a.Uid, a.Gid)
	}
	tmp := ids.Ino(v.okAs(rootC, createAs(root, "tmp", wire.FileType_DIRECTORY, 0o1777, rootC)).Attr.Ino)

	// alice creates in her directory; bob may not (no write, and others
	// have no bits); carol is in alice's group, which may read and search
	// but not write.
	f := ids.Ino(v.okAs(alice, createAs(ad, "notes", wire.FileType_REGULAR, 0o640, alice)).Attr.Ino)
	v.failsAs(bob, createAs(ad, "x", wire.FileType_REGULAR, 0o644, bob), syscall.EACCES)
	v.failsAs(carol, createAs(ad, "x", wire.FileType_REGULAR, 0o644, carol), syscall.EACCES)
	v.failsAs(bob, createAs(home, "bob", wire.FileType_DIRECTORY, 0o755, bob), syscall.EACCES)
	v.okAs(rootC, createAs(home, "bob", wire.FileType_DIRECTORY, 0o755, bob))
	// Nobody makes a file owned by someone else (but root).
	v.failsAs(bob, createAs(tmp, "forged", wire.FileType_REGULAR, 0o644, alice), syscall.EPERM)
	// Deletes and links need the same; a link into alice's directory too.
	v.failsAs(bob, &wire.Command_Unlink{Unlink: &wire.UnlinkOp{Parent: uint64(ad), Name: []byte("notes")}}, syscall.EACCES)
	v.failsAs(bob, &wire.Command_Link{Link: &wire.LinkOp{Ino: uint64(f), NewParent: uint64(ad), NewName: []byte("l")}}, syscall.EACCES)
	v.okAs(alice, &wire.Command_Link{Link: &wire.LinkOp{Ino: uint64(f), NewParent: uint64(ad), NewName: []byte("l")}})
	v.okAs(alice, &wire.Command_Unlink{Unlink: &wire.UnlinkOp{Parent: uint64(ad), Name: []byte("l")}})

	// Sticky /tmp: anyone creates; only the entry's owner, the
	// directory's owner or root deletes or renames it away.
	v.okAs(alice, createAs(tmp, "a", wire.FileType_REGULAR, 0o666, alice))
	v.failsAs(bob, &wire.Command_Unlink{Unlink: &wire.UnlinkOp{Parent: uint64(tmp), Name: []byte("a")}}, syscall.EPERM)
	v.failsAs(bob, &wire.Command_Rename{Rename: &wire.RenameOp{Parent: uint64(tmp), Name: []byte("a"), NewParent: uint64(tmp), NewName: []byte("b")}}, syscall.EPERM)
	v.okAs(bob, createAs(tmp, "b", wire.FileType_REGULAR, 0o666, bob))
	// Replacing bob's entry in a sticky directory is deleting it.
	v.failsAs(alice, &wire.Command_Rename{Rename: &wire.RenameOp{Parent: uint64(tmp), Name: []byte("a"), NewParent: uint64(tmp), NewName: []byte("b")}}, syscall.EPERM)
	v.okAs(alice, &wire.Command_Rename{Rename: &wire.RenameOp{Parent: uint64(tmp), Name: []byte("a"), NewParent: uint64(tmp), NewName: []byte("c")}})
	v.okAs(rootC, &wire.Command_Unlink{Unlink: &wire.UnlinkOp{Parent: uint64(tmp), Name: []byte("b")}})

	// A directory moving to another parent needs write on itself.
	sub := ids.Ino(v.okAs(alice, createAs(tmp, "sub", wire.FileType_DIRECTORY, 0o555, alice)).Attr.Ino)
	dest := ids.Ino(v.okAs(alice, createAs(tmp, "dest", wire.FileType_DIRECTORY, 0o755, alice)).Attr.Ino)
	v.failsAs(alice, &wire.Command_Rename{Rename: &wire.RenameOp{Parent: uint64(tmp), Name: []byte("sub"), NewParent: uint64(dest), NewName: []byte("sub")}}, syscall.EACCES)
	v.okAs(alice, chmodOp(sub, 0o755))
	v.okAs(alice, &wire.Command_Rename{Rename: &wire.RenameOp{Parent: uint64(tmp), Name: []byte("sub"), NewParent: uint64(dest), NewName: []byte("sub")}})

	// Device files are root's to make.
	v.failsAs(alice, &wire.Command_Create{Create: &wire.CreateOp{Parent: uint64(tmp), Name: []byte("dev"), Type: wire.FileType_CHAR_DEVICE,
		Mode: 0o600, Rdev: 0x0103, Cred: &wire.Cred{Uid: 1000, Gid: 100}, Exclusive: true}}, syscall.EPERM)
	v.okAs(rootC, &wire.Command_Create{Create: &wire.CreateOp{Parent: uint64(tmp), Name: []byte("dev"), Type: wire.FileType_CHAR_DEVICE,
		Mode: 0o600, Rdev: 0x0103, Cred: &wire.Cred{Uid: 0, Gid: 0}, Exclusive: true}})

	// Without a caller nothing is checked (the nodes' own commands).
	v.ok(createAs(ad, "unchecked", wire.FileType_REGULAR, 0o644, bob))
}

func TestPermissionsSetgidDirectories(t *testing.T) {
	v := newEnv(t)
	shared := ids.Ino(v.okAs(rootC, createAs(root, "shared", wire.FileType_DIRECTORY, 0o2777, rootC)).Attr.Ino)
	v.okAs(rootC, chownOp(shared, nil, u32(500)))
	v.okAs(rootC, chmodOp(shared, 0o2777)) // chgrp by root keeps a directory's setgid
	f := v.okAs(alice, createAs(shared, "f", wire.FileType_REGULAR, 0o644, alice)).Attr
	d := v.okAs(alice, createAs(shared, "d", wire.FileType_DIRECTORY, 0o755, alice)).Attr
	if f.Uid != 1000 || f.Gid != 500 || d.Gid != 500 || d.Mode&0o2000 == 0 || f.Mode&0o2000 != 0 {
		t.Fatalf("in a setgid directory: file %d:%d %#o, dir %d:%d %#o; want group 500 and a setgid subdirectory",
			f.Uid, f.Gid, f.Mode, d.Uid, d.Gid, d.Mode)
	}
	// Asking for a group she is not in gives her own.
	plain := ids.Ino(v.okAs(rootC, createAs(root, "plain", wire.FileType_DIRECTORY, 0o777, rootC)).Attr.Ino)
	g := v.okAs(alice, &wire.Command_Create{Create: &wire.CreateOp{Parent: uint64(plain), Name: []byte("g"), Type: wire.FileType_REGULAR,
		Mode: 0o2755, Cred: &wire.Cred{Uid: 1000, Gid: 7}, Exclusive: true}}).Attr
	if g.Gid != 100 || g.Mode != 0o2755 {
		t.Fatalf("alice asking for group 7: %d %#o, want her own group 100 (setgid kept: she is in it)", g.Gid, g.Mode)
	}
	// A setgid file inheriting a group she is not in loses the bit.
	h := v.okAs(alice, &wire.Command_Create{Create: &wire.CreateOp{Parent: uint64(shared), Name: []byte("h"), Type: wire.FileType_REGULAR,
		Mode: 0o2755, Cred: &wire.Cred{Uid: 1000, Gid: 100}, Exclusive: true}}).Attr
	if h.Gid != 500 || h.Mode != 0o755 {
		t.Fatalf("setgid file in a group-500 setgid directory: %d %#o, want 500 and 0755", h.Gid, h.Mode)
	}
}

func TestPermissionsSetattr(t *testing.T) {
	v := newEnv(t)
	dir := ids.Ino(v.okAs(rootC, createAs(root, "d", wire.FileType_DIRECTORY, 0o777, rootC)).Attr.Ino)
	f := ids.Ino(v.okAs(alice, createAs(dir, "f", wire.FileType_REGULAR, 0o644, alice)).Attr.Ino)

	// chmod: owner or root.
	v.failsAs(bob, chmodOp(f, 0o777), syscall.EPERM)
	v.okAs(alice, chmodOp(f, 0o600))
	v.okAs(rootC, chmodOp(f, 0o640))
	// chmod g+s by the owner outside the file's group drops the bit.
	v.okAs(rootC, chownOp(f, nil, u32(7)))
	v.okAs(alice, chmodOp(f, 0o2755))
	if m := v.attr(f).Mode; m != 0o755 {
		t.Fatalf("chmod 2755 by a non-member: mode %#o, want 0755", m)
	}
	v.okAs(rootC, chownOp(f, nil, u32(100)))

	// Dropping only setuid/setgid is allowed to anyone (the kernel does
	// it in the name of a writer who is not the owner).
	// Only for one who may write it, and only dropping.
	v.okAs(rootC, chmodOp(f, 0o6755))
	v.failsAs(bob, chmodOp(f, 0o755), syscall.EPERM) // may not write it
	v.okAs(rootC, chmodOp(f, 0o6777))
	v.failsAs(bob, chmodOp(f, 0o6777), syscall.EPERM) // nothing dropped: a chmod
	v.failsAs(bob, chmodOp(f, 0o4776), syscall.EPERM) // more than the bits
	v.okAs(bob, chmodOp(f, 0o777))
	v.okAs(alice, chmodOp(f, 0o640))

	// chown: root only; the owner may "change" to her own uid.
	v.failsAs(alice, chownOp(f, u32(1001), nil), syscall.EPERM)
	v.failsAs(bob, chownOp(f, u32(1000), nil), syscall.EPERM)
	v.okAs(alice, chownOp(f, u32(1000), nil))
	// chgrp: the owner, to a group she is in.
	carolF := ids.Ino(v.okAs(carol, createAs(dir, "cf", wire.FileType_REGULAR, 0o644, carol)).Attr.Ino)
	v.okAs(carol, chownOp(carolF, nil, u32(100)))
	v.failsAs(carol, chownOp(carolF, nil, u32(101)), syscall.EPERM)
	v.failsAs(alice, chownOp(carolF, nil, u32(100)), syscall.EPERM)

	// chown clears setuid, and setgid when group-executable.
	v.okAs(rootC, chmodOp(f, 0o6755))
	v.okAs(rootC, chownOp(f, u32(1001), nil))
	if m := v.attr(f).Mode; m != 0o755 {
		t.Fatalf("after chown of a 6755 file: %#o, want 0755", m)
	}
	v.okAs(rootC, chmodOp(f, 0o6745)) // setgid without group exec: a lock marker, kept
	v.okAs(rootC, chownOp(f, nil, u32(100)))
	if m := v.attr(f).Mode; m != 0o2745 {
		t.Fatalf("after chgrp of a 6745 file: %#o, want 02745", m)
	}
	v.okAs(rootC, chownOp(f, u32(1000), nil))
	v.okAs(alice, chmodOp(f, 0o644))

	// utimens: explicit times by the owner; "now" by anyone who may write.
	times := &wire.Command_Setattr{Setattr: &wire.SetattrOp{Ino: uint64(f), Valid: uint32(wire.SetattrField_SETATTR_MTIME), MtimeNs: 5}}
	now := &wire.Command_Setattr{Setattr: &wire.SetattrOp{Ino: uint64(f), Valid: uint32(wire.SetattrField_SETATTR_MTIME_NOW)}}
	v.failsAs(bob, times, syscall.EPERM)
	v.failsAs(bob, now, syscall.EACCES)
	v.okAs(alice, times)
	v.okAs(alice, chmodOp(f, 0o666))
	v.okAs(bob, now)
	v.failsAs(bob, times, syscall.EPERM)

	// truncate: write permission, unless through a descriptor opened for
	// writing (checked at open).
	v.okAs(alice, chmodOp(f, 0o644))
	trunc := func(byHandle bool) *wire.Command_Setattr {
		return &wire.Command_Setattr{Setattr: &wire.SetattrOp{Ino: uint64(f), Valid: uint32(wire.SetattrField_SETATTR_SIZE), Size: 0, ByHandle: byHandle}}
	}
	// by_handle is the client's word: it counts for the owner only.
	v.failsAs(bob, trunc(false), syscall.EACCES)
	v.failsAs(bob, trunc(true), syscall.EACCES)
	v.okAs(alice, chmodOp(f, 0))
	v.okAs(alice, trunc(true)) // the owner, even with mode 0 (O_CREAT|O_RDWR, 0)
	v.okAs(alice, chmodOp(f, 0o666))
	v.okAs(bob, trunc(false)) // may write it
	v.okAs(alice, chmodOp(f, 0o644))
	v.okAs(nobody, &wire.Command_Setattr{Setattr: &wire.SetattrOp{Ino: uint64(f)}}) // nothing asked, nothing checked

	// xattrs: user.* needs write; trusted.* root.
	set := func(name string) *wire.Command_SetXattr {
		return &wire.Command_SetXattr{SetXattr: &wire.SetXattrOp{Ino: uint64(f), Name: []byte(name), Value: []byte("v")}}
	}
	v.failsAs(bob, set("user.x"), syscall.EACCES)
	v.okAs(alice, set("user.x"))
	v.failsAs(alice, set("trusted.x"), syscall.EPERM)
	v.okAs(rootC, set("trusted.x"))
	v.failsAs(bob, &wire.Command_RemoveXattr{RemoveXattr: &wire.RemoveXattrOp{Ino: uint64(f), Name: []byte("user.x")}}, syscall.EACCES)
}

// TestPermissionsData: writing a file's bytes (inline writes, chunk
// records, moving inline bytes to a chunk) needs write permission or
// ownership, and a write or truncate by anyone but root clears setuid
// (and a group-executable setgid).
func TestPermissionsData(t *testing.T) {
	v := newEnv(t)
	dir := ids.Ino(v.okAs(rootC, createAs(root, "d", wire.FileType_DIRECTORY, 0o777, rootC)).Attr.Ino)
	f := ids.Ino(v.okAs(alice, createAs(dir, "f", wire.FileType_REGULAR, 0o644, alice)).Attr.Ino)
	write := &wire.Command_WriteInline{WriteInline: &wire.WriteInlineOp{Ino: uint64(f), Data: []byte("hi"), MaxInline: 4096}}
	v.failsAs(bob, write, syscall.EACCES)
	v.failsAs(bob, &wire.Command_SetChunk{SetChunk: &wire.SetChunkOp{Ino: uint64(f), Chunk: &wire.ChunkRef{Index: 0, Handle: 1<<40 | 1, Group: 1}}}, syscall.EACCES)
	v.failsAs(bob, &wire.Command_DropInline{DropInline: &wire.DropInlineOp{Ino: uint64(f)}}, syscall.EACCES)
	v.okAs(alice, write)

	// A setuid, setgid group-executable file everyone may write.
	v.okAs(rootC, chmodOp(f, 0o6777))
	v.okAs(bob, write)
	if m := v.attr(f).Mode; m != 0o777 {
		t.Fatalf("after bob's write to a 06777 file: %#o, want 0777", m)
	}
	v.okAs(rootC, chmodOp(f, 0o6777))
	v.okAs(rootC, write)
	if m := v.attr(f).Mode; m != 0o6777 {
		t.Fatalf("after root's write: %#o, want 06777 kept", m)
	}
	v.okAs(bob, &wire.Command_Setattr{Setattr: &wire.SetattrOp{Ino: uint64(f), Valid: uint32(wire.SetattrField_SETATTR_SIZE), Size: 1}})
	if m := v.attr(f).Mode; m != 0o777 {
		t.Fatalf("after bob's truncate: %#o, want 0777", m)
	}
}
