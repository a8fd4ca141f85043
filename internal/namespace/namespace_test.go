package namespace

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/govfs/govfs/internal/engine"
	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/wire"
)

const root = ids.RootIno

// env is one ministry state over an in-memory engine batch.
type env struct {
	t   *testing.T
	rw  engine.ReadWriter
	now int64
}

func newEnv(t *testing.T) *env {
	t.Helper()
	return newEnvGrant(t, 100, 10000)
}

// newEnvGrant is newEnv with inode numbers from [start, end) (ministries
// of one cluster never share numbers).
func newEnvGrant(t *testing.T, start, end uint64) *env {
	t.Helper()
	e, err := engine.Open(t.TempDir(), engine.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	b := e.NewBatch()
	t.Cleanup(b.Close)
	v := &env{t: t, rw: engine.Prefixed{RW: b, Prefix: []byte("s")}, now: 1_000_000}
	v.ok(&wire.Command_InitMinistry{InitMinistry: &wire.InitMinistryOp{RootIno: uint64(root), Mode: 0o755}})
	v.ok(&wire.Command_GrantInodes{GrantInodes: &wire.GrantInodesOp{Start: start, End: end}})
	return v
}

// cmd applies op as a command without request id, advancing time.
func (v *env) cmd(op any, req *wire.RequestID) *wire.Result {
	v.t.Helper()
	return v.cmdAs(op, req, nil)
}

// cmdAs is cmd on behalf of caller (nil: unchecked).
func (v *env) cmdAs(op any, req *wire.RequestID, caller *wire.Cred) *wire.Result {
	v.t.Helper()
	v.now += 1000
	c := &wire.Command{Version: 1, NowNs: v.now, Req: req, Caller: caller}
	if op != nil {
		// Command.Op has an unexported interface type; set it by reflection.
		reflect.ValueOf(c).Elem().FieldByName("Op").Set(reflect.ValueOf(op))
	}
	res, err := Apply(v.rw, c)
	if err != nil {
		v.t.Fatalf("Apply(%v): %v", c, err)
	}
	return res
}

func (v *env) apply(op any) *wire.Result { v.t.Helper(); return v.cmd(op, nil) }

func (v *env) ok(op any) *wire.Result {
	v.t.Helper()
	res := v.apply(op)
	if res.Errno != 0 {
		v.t.Fatalf("%v: errno %v (%s)", op, syscall.Errno(res.Errno), res.Message)
	}
	return res
}

// fails applies op, expects errno and checks that nothing changed.
func (v *env) fails(op any, want syscall.Errno) *wire.Result {
	v.t.Helper()
	before := v.dump()
	res := v.apply(op)
	if syscall.Errno(res.Errno) != want {
		v.t.Fatalf("%v: errno %v (%s), want %v", op, syscall.Errno(res.Errno), res.Message, want)
	}
	if res.Message == "" {
		v.t.Errorf("%v: no message with errno %v", op, want)
	}
	if after := v.dump(); after != before {
		v.t.Fatalf("%v failed with %v but changed the state:\nbefore:\n%s\nafter:\n%s", op, want, before, after)
	}
	return res
}

// dump renders the whole key space, to compare states.
func (v *env) dump() string {
	var b strings.Builder
	err := v.rw.Scan(nil, nil, func(k, val []byte) bool {
		fmt.Fprintf(&b, "%x=%x\n", k, val)
		return true
	})
	if err != nil {
		v.t.Fatal(err)
	}
	return b.String()
}

func mkop(parent ids.Ino, name string, typ wire.FileType) *wire.Command_Create {
	op := &wire.CreateOp{Parent: uint64(parent), Name: []byte(name), Type: typ, Mode: 0o644,
		Cred: &wire.Cred{Uid: 1000, Gid: 100}, Exclusive: true}
	if typ == wire.FileType_SYMLINK {
		op.Target = []byte("target/" + name)
	}
	if typ == wire.FileType_DIRECTORY {
		op.Mode = 0o755
	}
	return &wire.Command_Create{Create: op}
}

func (v *env) mk(parent ids.Ino, name string, typ wire.FileType) ids.Ino {
	v.t.Helper()
	return ids.Ino(v.ok(mkop(parent, name, typ)).Attr.Ino)
}
func (v *env) mkdir(parent ids.Ino, name string) ids.Ino {
	v.t.Helper()
	return v.mk(parent, name, wire.FileType_DIRECTORY)
}
func (v *env) mkfile(parent ids.Ino, name string) ids.Ino {
	v.t.Helper()
	return v.mk(parent, name, wire.FileType_REGULAR)
}

func (v *env) attr(ino ids.Ino) *wire.Attr {
	v.t.Helper()
	a, err := GetAttr(v.rw, ino)
	if err != nil {
		v.t.Fatalf("GetAttr(%v): %v", ino, err)
	}
	return a
}

func (v *env) gone(ino ids.Ino) {
	v.t.Helper()
	if _, err := GetAttr(v.rw, ino); !errors.Is(err, syscall.ENOENT) {
		v.t.Fatalf("GetAttr(%v) = %v, want ENOENT", ino, err)
	}
}

func (v *env) lookup(parent ids.Ino, name string) (ids.Ino, bool) {
	v.t.Helper()
	a, _, err := Lookup(v.rw, parent, []byte(name))
	if errors.Is(err, syscall.ENOENT) {
		return 0, false
	}
	if err != nil {
		v.t.Fatalf("Lookup(%v, %q): %v", parent, name, err)
	}
	return ids.Ino(a.Ino), true
}

func (v *env) mustLookup(parent ids.Ino, name string, want ids.Ino) {
	v.t.Helper()
	if got, ok := v.lookup(parent, name); !ok || got != want {
		v.t.Fatalf("Lookup(%v, %q) = %v, %v; want %v", parent, name, got, ok, want)
	}
}

func (v *env) nlink(ino ids.Ino, want uint32) {
	v.t.Helper()
	if got := v.attr(ino).Nlink; got != want {
		v.t.Fatalf("nlink of %v = %d, want %d", ino, got, want)
	}
}

func TestInitMinistry(t *testing.T) {
	v := newEnv(t)
	a := v.attr(root)
	if a.Type != wire.FileType_DIRECTORY || a.Mode != 0o755 || a.Nlink != 2 || a.Uid != 0 || a.Gid != 0 ||
		a.Version != 1 || a.MtimeNs != 1_001_000 || a.CtimeNs != a.MtimeNs || a.AtimeNs != a.MtimeNs {
		t.Fatalf("root attr = %v", a)
	}
	before := v.dump()
	res := v.ok(&wire.Command_InitMinistry{InitMinistry: &wire.InitMinistryOp{RootIno: uint64(root), Mode: 0o700}})
	if res.Attr.Mode != 0o755 || v.dump() != before {
		t.Fatalf("second InitMinistry changed the root: %v", res.Attr)
	}
	v.fails(&wire.Command_InitMinistry{InitMinistry: &wire.InitMinistryOp{}}, syscall.EINVAL)
}

func TestValidateName(t *testing.T) {
	for _, tc := range []struct {
		name string
		want syscall.Errno
	}{
		{"a", 0},
		{strings.Repeat("x", 255), 0},
		{"with space\xff", 0},
		{"", syscall.EINVAL},
		{".", syscall.EINVAL},
		{"..", syscall.EINVAL},
		{"a/b", syscall.EINVAL},
		{"/", syscall.EINVAL},
		{"a\x00b", syscall.EINVAL},
		{strings.Repeat("x", 256), syscall.ENAMETOOLONG},
	} {
		err := ValidateName([]byte(tc.name))
		if tc.want == 0 {
			if err != nil {
				t.Errorf("ValidateName(%q) = %v", tc.name, err)
			}
			continue
		}
		var errno syscall.Errno
		if !errors.As(err, &errno) || errno != tc.want || !strings.Contains(err.Error(), "namespace:") {
			t.Errorf("ValidateName(%q) = %v, want %v", tc.name, err, tc.want)
		}
	}
}

func TestBadNamesChangeNothing(t *testing.T) {
	v := newEnv(t)
	dir := v.mkdir(root, "dir")
	file := v.mkfile(dir, "file")
	bad := []struct {
		name string
		want syscall.Errno
	}{
		{"a/b", syscall.EINVAL}, {"a\x00", syscall.EINVAL}, {"", syscall.EINVAL}, {".", syscall.EINVAL},
		{"..", syscall.EINVAL}, {strings.Repeat("n", 256), syscall.ENAMETOOLONG},
	}
	for _, b := range bad {
		n := []byte(b.name)
		for _, typ := range []wire.FileType{wire.FileType_REGULAR, wire.FileType_DIRECTORY, wire.FileType_SYMLINK, wire.FileType_FIFO} {
			op := mkop(dir, "x", typ)
			op.Create.Name = n
			v.fails(op, b.want)
		}
		v.fails(&wire.Command_Link{Link: &wire.LinkOp{Ino: uint64(file), NewParent: uint64(dir), NewName: n}}, b.want)
		v.fails(&wire.Command_Unlink{Unlink: &wire.UnlinkOp{Parent: uint64(dir), Name: n}}, b.want)
		v.fails(&wire.Command_Unlink{Unlink: &wire.UnlinkOp{Parent: uint64(dir), Name: n, Dir: true}}, b.want)
		v.fails(&wire.Command_Rename{Rename: &wire.RenameOp{Parent: uint64(dir), Name: n, NewParent: uint64(dir), NewName: []byte("y")}}, b.want)
		v.fails(&wire.Command_Rename{Rename: &wire.RenameOp{Parent: uint64(dir), Name: []byte("file"), NewParent: uint64(dir), NewName: n}}, b.want)
		if _, _, err := Lookup(v.rw, dir, n); !errors.Is(err, b.want) {
			t.Errorf("Lookup(%q) = %v, want %v", b.name, err, b.want)
		}
	}
}

func TestCreate(t *testing.T) {
	for _, typ := range []wire.FileType{wire.FileType_REGULAR, wire.FileType_DIRECTORY, wire.FileType_SYMLINK, wire.FileType_FIFO} {
		t.Run(typ.String(), func(t *testing.T) {
			v := newEnv(t)
			parentBefore := v.attr(root)
			op := mkop(root, "n", typ)
			op.Create.Mode = 0o104755 // type bits beyond 07777 are dropped
			res := v.ok(op)
			a := res.Attr
			wantNlink, wantSize := uint32(1), uint64(0)
			if typ == wire.FileType_DIRECTORY {
				wantNlink = 2
			}
			if typ == wire.FileType_SYMLINK {
				wantSize = uint64(len("target/n"))
			}
			if a.Ino != 100 || a.Type != typ || a.Mode != 0o4755 || a.Uid != 1000 || a.Gid != 100 ||
				a.Nlink != wantNlink || a.Size != wantSize || a.Version != 1 ||
				a.AtimeNs != v.now || a.MtimeNs != v.now || a.CtimeNs != v.now || a.CrtimeNs != v.now {
				t.Fatalf("attr = %v", a)
			}
			v.mustLookup(root, "n", 100)
			p := v.attr(root)
			wantParentNlink := parentBefore.Nlink
			if typ == wire.FileType_DIRECTORY {
				wantParentNlink++
			}
			if p.Nlink != wantParentNlink || p.Version != parentBefore.Version+1 || p.MtimeNs != v.now || p.CtimeNs != v.now {
				t.Fatalf("parent after create = %v (before %v)", p, parentBefore)
			}
			if typ == wire.FileType_SYMLINK {
				if got, err := Readlink(v.rw, 100); err != nil || string(got) != "target/n" {
					t.Fatalf("Readlink = %q, %v", got, err)
				}
			} else if _, err := Readlink(v.rw, 100); !errors.Is(err, syscall.EINVAL) {
				t.Fatalf("Readlink of %v = %v, want EINVAL", typ, err)
			}
			// Existing name: EEXIST, except open(O_CREAT) without O_EXCL
			// of a regular file.
			again := mkop(root, "n", typ)
			again.Create.Exclusive = false
			if typ == wire.FileType_REGULAR {
				before := v.dump()
				if res := v.ok(again); res.Attr.Ino != 100 || v.dump() != before {
					t.Fatalf("non-exclusive create of existing file = %v or changed state", res.Attr)
				}
				v.fails(mkop(root, "n", typ), syscall.EEXIST)
			} else {
				v.fails(again, syscall.EEXIST)
			}
		})
	}
}

func TestCreateErrors(t *testing.T) {
	v := newEnv(t)
	file := v.mkfile(root, "file")
	v.mkdir(root, "dir")
	long := mkop(root, "l", wire.FileType_SYMLINK)
	long.Create.Target = bytes.Repeat([]byte("t"), 4097)
	empty := mkop(root, "l", wire.FileType_SYMLINK)
	empty.Create.Target = nil
	target := mkop(root, "l", wire.FileType_REGULAR)
	target.Create.Target = []byte("x")
	rdev := mkop(root, "l", wire.FileType_FIFO)
	rdev.Create.Rdev = 0x801
	for _, tc := range []struct {
		name string
		op   *wire.Command_Create
		want syscall.Errno
	}{
		{"missing parent", mkop(4242, "x", wire.FileType_REGULAR), syscall.ENOENT},
		{"parent is a file", mkop(file, "x", wire.FileType_REGULAR), syscall.ENOTDIR},
		{"dir exists as file", mkop(root, "file", wire.FileType_DIRECTORY), syscall.EEXIST},
		{"file exists as dir", mkop(root, "dir", wire.FileType_REGULAR), syscall.EEXIST},
		{"symlink target too long", long, syscall.ENAMETOOLONG},
		{"symlink target empty", empty, syscall.EINVAL},
		{"target for a file", target, syscall.EINVAL},
		{"device number for a fifo", rdev, syscall.EINVAL},
		{"unknown type", mkop(root, "x", wire.FileType_FILE_TYPE_UNKNOWN), syscall.EINVAL},
	} {
		t.Run(tc.name, func(t *testing.T) { v.t = t; v.fails(tc.op, tc.want) })
	}
	v.t = t
	ok := mkop(root, "l", wire.FileType_SYMLINK)
	ok.Create.Target = bytes.Repeat([]byte("t"), 4096)
	v.ok(ok)
	nonExcl := mkop(root, "dir", wire.FileType_REGULAR)
	nonExcl.Create.Exclusive = false
	v.fails(nonExcl, syscall.EEXIST)
}

// Sockets and device nodes are names with a type and, for devices, a
// device number.
func TestCreateSpecial(t *testing.T) {
	v := newEnv(t)
	for _, tc := range []struct {
		typ  wire.FileType
		rdev uint64
	}{{wire.FileType_SOCKET, 0}, {wire.FileType_CHAR_DEVICE, 0x0103}, {wire.FileType_BLOCK_DEVICE, 0x0801}} {
		op := mkop(root, tc.typ.String(), tc.typ)
		op.Create.Rdev = tc.rdev
		a := v.attr(ids.Ino(v.ok(op).Attr.Ino))
		if a.Type != tc.typ || a.Rdev != tc.rdev || a.Nlink != 1 || a.Size != 0 {
			t.Errorf("%v: attr %v, want type %v rdev %#x", tc.typ, a, tc.typ, tc.rdev)
		}
	}
}

func TestLinkAndUnlink(t *testing.T) {
	v := newEnv(t)
	dir := v.mkdir(root, "dir")
	file := v.mkfile(root, "f")
	v.ok(&wire.Command_SetXattr{SetXattr: &wire.SetXattrOp{Ino: uint64(file), Name: []byte("user.a"), Value: []byte("1")}})
	before := v.attr(file)

	res := v.ok(&wire.Command_Link{Link: &wire.LinkOp{Ino: uint64(file), NewParent: uint64(dir), NewName: []byte("g")}})
	if res.Attr.Nlink != 2 || res.Attr.CtimeNs != v.now || res.Attr.Version != before.Version+1 {
		t.Fatalf("link result = %v", res.Attr)
	}
	v.mustLookup(dir, "g", file)
	if d := v.attr(dir); d.MtimeNs != v.now || d.Nlink != 2 {
		t.Fatalf("dir after link = %v", d)
	}

	link := func(ino, parent ids.Ino, name string) *wire.Command_Link {
		return &wire.Command_Link{Link: &wire.LinkOp{Ino: uint64(ino), NewParent: uint64(parent), NewName: []byte(name)}}
	}
	v.fails(link(dir, root, "d2"), syscall.EPERM)
	v.fails(link(file, dir, "g"), syscall.EEXIST)
	v.fails(link(4242, dir, "z"), syscall.ENOENT)
	v.fails(link(file, 4242, "z"), syscall.ENOENT)
	v.fails(link(file, file, "z"), syscall.ENOTDIR)

	unlink := func(parent ids.Ino, name string, isDir bool) *wire.Command_Unlink {
		return &wire.Command_Unlink{Unlink: &wire.UnlinkOp{Parent: uint64(parent), Name: []byte(name), Dir: isDir}}
	}
	v.fails(unlink(root, "dir", false), syscall.EISDIR)
	v.fails(unlink(root, "f", true), syscall.ENOTDIR)
	v.fails(unlink(root, "nope", false), syscall.ENOENT)
	v.fails(unlink(4242, "f", false), syscall.ENOENT)
	v.fails(unlink(file, "f", false), syscall.ENOTDIR)
	v.fails(unlink(root, "dir", true), syscall.ENOTEMPTY)

	res = v.ok(unlink(root, "f", false))
	if res.Attr.Nlink != 1 {
		t.Fatalf("unlink result = %v", res.Attr)
	}
	v.nlink(file, 1)
	if _, ok := v.lookup(root, "f"); ok {
		t.Fatal("f still present")
	}
	if got, err := GetXattr(v.rw, file, []byte("user.a")); err != nil || string(got) != "1" {
		t.Fatalf("xattr lost while a link remains: %q %v", got, err)
	}
	rootBefore := v.attr(root)
	v.ok(unlink(dir, "g", false))
	v.gone(file)
	if n := countPrefix(t, v.rw, xattrPrefix(file)); n != 0 {
		t.Fatalf("%d xattrs of a deleted inode remain", n)
	}
	v.ok(unlink(root, "dir", true))
	v.gone(dir)
	if n := countPrefix(t, v.rw, parentKey(dir)); n != 0 {
		t.Fatal("parent pointer of removed dir remains")
	}
	r := v.attr(root)
	if r.Nlink != 2 || r.Version != rootBefore.Version+1 || r.MtimeNs != v.now || r.CtimeNs != v.now {
		t.Fatalf("root after rmdir = %v (before %v)", r, rootBefore)
	}
}

func countPrefix(t *testing.T, r engine.Reader, p []byte) int {
	t.Helper()
	n := 0
	if err := r.Scan(p, prefixEnd(p), func(_, _ []byte) bool { n++; return true }); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestSetattr(t *testing.T) {
	v := newEnv(t)
	file := v.mkfile(root, "f")
	dir := v.mkdir(root, "d")
	link := v.mk(root, "l", wire.FileType_SYMLINK)
	fifo := v.mk(root, "p", wire.FileType_FIFO)
	set := func(ino ids.Ino, valid wire.SetattrField, fill func(*wire.SetattrOp)) *wire.Command_Setattr {
		op := &wire.SetattrOp{Ino: uint64(ino), Valid: uint32(valid)}
		if fill != nil {
			fill(op)
		}
		return &wire.Command_Setattr{Setattr: op}
	}
	prev := v.attr(file)
	check := func(res *wire.Result, want func(a *wire.Attr)) {
		t.Helper()
		w := proto.Clone(prev).(*wire.Attr)
		w.Version++
		w.CtimeNs = v.now
		want(w)
		a := res.Attr
		if a.Mode != w.Mode || a.Uid != w.Uid || a.Gid != w.Gid || a.Size != w.Size || a.AtimeNs != w.AtimeNs ||
			a.MtimeNs != w.MtimeNs || a.CtimeNs != w.CtimeNs || a.Version != w.Version {
			t.Fatalf("setattr result = %v, want %v", a, w)
		}
		if got := v.attr(file); got.Version != a.Version || got.Mode != a.Mode || got.Size != a.Size {
			t.Fatalf("stored %v != result %v", got, a)
		}
		prev = a
	}
	check(v.ok(set(file, wire.SetattrField_SETATTR_MODE, func(o *wire.SetattrOp) { o.Mode = 0o100600 })),
		func(a *wire.Attr) { a.Mode = 0o600 })
	check(v.ok(set(file, wire.SetattrField_SETATTR_UID|wire.SetattrField_SETATTR_GID, func(o *wire.SetattrOp) { o.Uid, o.Gid = 7, 8 })),
		func(a *wire.Attr) { a.Uid, a.Gid = 7, 8 })
	check(v.ok(set(file, wire.SetattrField_SETATTR_SIZE, func(o *wire.SetattrOp) { o.Size = 12345 })),
		func(a *wire.Attr) { a.Size, a.MtimeNs = 12345, v.now })
	check(v.ok(set(file, wire.SetattrField_SETATTR_ATIME|wire.SetattrField_SETATTR_MTIME, func(o *wire.SetattrOp) { o.AtimeNs, o.MtimeNs = 5, 6 })),
		func(a *wire.Attr) { a.AtimeNs, a.MtimeNs = 5, 6 })
	check(v.ok(set(file, wire.SetattrField_SETATTR_ATIME_NOW|wire.SetattrField_SETATTR_MTIME_NOW|wire.SetattrField_SETATTR_ATIME,
		func(o *wire.SetattrOp) { o.AtimeNs = 1 })),
		func(a *wire.Attr) { a.AtimeNs, a.MtimeNs = v.now, v.now })
	check(v.ok(set(file, wire.SetattrField_SETATTR_SIZE|wire.SetattrField_SETATTR_MTIME, func(o *wire.SetattrOp) { o.Size, o.MtimeNs = 0, 99 })),
		func(a *wire.Attr) { a.Size, a.MtimeNs = 0, 99 })

	before := v.dump()
	if res := v.ok(set(file, 0, nil)); res.Attr.Version != prev.Version || v.dump() != before {
		t.Fatalf("empty setattr changed something: %v", res.Attr)
	}
	v.fails(set(dir, wire.SetattrField_SETATTR_SIZE, nil), syscall.EISDIR)
	v.fails(set(link, wire.SetattrField_SETATTR_SIZE, nil), syscall.EINVAL)
	v.fails(set(fifo, wire.SetattrField_SETATTR_SIZE|wire.SetattrField_SETATTR_MODE, nil), syscall.EINVAL)
	v.fails(set(4242, wire.SetattrField_SETATTR_MODE, nil), syscall.ENOENT)
	v.fails(set(file, 512, nil), syscall.EINVAL)                                 // unknown field
	v.fails(set(file, wire.SetattrField_SETATTR_SIZE_GROW, nil), syscall.EINVAL) // GROW without SIZE
	v.fails(set(file, wire.SetattrField_SETATTR_SIZE, func(o *wire.SetattrOp) { o.ChunkSize = -1 }), syscall.EINVAL)
	if res := v.ok(set(dir, wire.SetattrField_SETATTR_MODE, func(o *wire.SetattrOp) { o.Mode = 0o700 })); res.Attr.Mode != 0o700 || res.Attr.Nlink != 2 {
		t.Fatalf("chmod dir = %v", res.Attr)
	}
}

func TestXattr(t *testing.T) {
	v := newEnv(t)
	file := v.mkfile(root, "f")
	set := func(name, val string, flags uint32) *wire.Command_SetXattr {
		return &wire.Command_SetXattr{SetXattr: &wire.SetXattrOp{Ino: uint64(file), Name: []byte(name), Value: []byte(val), Flags: flags}}
	}
	rm := func(ino ids.Ino, name string) *wire.Command_RemoveXattr {
		return &wire.Command_RemoveXattr{RemoveXattr: &wire.RemoveXattrOp{Ino: uint64(ino), Name: []byte(name)}}
	}
	ver := v.attr(file).Version
	res := v.ok(set("user.b", "2", 0))
	if res.Attr.Version != ver+1 || res.Attr.CtimeNs != v.now {
		t.Fatalf("setxattr result = %v", res.Attr)
	}
	v.ok(set("user.a", "1", xattrCreate))
	v.fails(set("user.a", "x", xattrCreate), syscall.EEXIST)
	v.fails(set("user.c", "x", xattrReplace), syscall.ENODATA)
	v.ok(set("user.a", "one", xattrReplace))
	v.ok(set("user.e", "", 0))
	v.fails(set("user.x", "x", 3), syscall.EINVAL)
	v.fails(set("", "x", 0), syscall.EINVAL)
	v.fails(set("a\x00b", "x", 0), syscall.EINVAL)
	v.fails(set(strings.Repeat("n", 256), "x", 0), syscall.ERANGE)
	v.ok(set(strings.Repeat("n", 255), "x", 0))
	v.fails(set("user.big", strings.Repeat("v", 64<<10+1), 0), syscall.E2BIG)
	v.ok(set("user.big", strings.Repeat("v", 64<<10), 0))
	v.fails(&wire.Command_SetXattr{SetXattr: &wire.SetXattrOp{Ino: 4242, Name: []byte("user.a")}}, syscall.ENOENT)

	if got, err := GetXattr(v.rw, file, []byte("user.a")); err != nil || string(got) != "one" {
		t.Fatalf("GetXattr = %q, %v", got, err)
	}
	if got, err := GetXattr(v.rw, file, []byte("user.e")); err != nil || len(got) != 0 {
		t.Fatalf("GetXattr(empty value) = %q, %v", got, err)
	}
	if _, err := GetXattr(v.rw, file, []byte("user.zz")); !errors.Is(err, syscall.ENODATA) {
		t.Fatalf("GetXattr(absent) = %v", err)
	}
	if _, err := GetXattr(v.rw, 4242, []byte("user.a")); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("GetXattr(no inode) = %v", err)
	}
	names, err := ListXattr(v.rw, file)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{strings.Repeat("n", 255), "user.a", "user.b", "user.big", "user.e"}
	if fmt.Sprintf("%q", names) != fmt.Sprintf("%q", want) {
		t.Fatalf("ListXattr = %q, want %q", names, want)
	}
	v.fails(rm(file, "user.zz"), syscall.ENODATA)
	v.fails(rm(4242, "user.a"), syscall.ENOENT)
	v.fails(rm(file, ""), syscall.EINVAL)
	v.ok(rm(file, "user.a"))
	if _, err := GetXattr(v.rw, file, []byte("user.a")); !errors.Is(err, syscall.ENODATA) {
		t.Fatalf("GetXattr after remove = %v", err)
	}
	if _, err := ListXattr(v.rw, 4242); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("ListXattr(no inode) = %v", err)
	}
}

func TestQueries(t *testing.T) {
	v := newEnv(t)
	file := v.mkfile(root, "f")
	if _, _, err := Lookup(v.rw, file, []byte("x")); !errors.Is(err, syscall.ENOTDIR) {
		t.Fatalf("Lookup in a file = %v", err)
	}
	if _, _, err := Lookup(v.rw, 4242, []byte("x")); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("Lookup in missing dir = %v", err)
	}
	a, d, err := Lookup(v.rw, root, []byte("f"))
	if err != nil || a.Ino != uint64(file) || d.Ino != uint64(file) || d.Type != wire.FileType_REGULAR {
		t.Fatalf("Lookup = %v %v %v", a, d, err)
	}
	if _, err := Readlink(v.rw, 4242); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("Readlink(missing) = %v", err)
	}
	if _, _, _, err := Readdir(v.rw, file, nil, 0); !errors.Is(err, syscall.ENOTDIR) {
		t.Fatalf("Readdir(file) = %v", err)
	}
	if _, _, _, err := Readdir(v.rw, 4242, nil, 0); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("Readdir(missing) = %v", err)
	}
	// A referral answers with the dirent and no attr.
	ref, _ := marshal(&wire.Dirent{Ino: 777, Type: wire.FileType_DIRECTORY, Ministry: 5})
	if err := v.rw.Set(direntKey(root, []byte("ref")), ref); err != nil {
		t.Fatal(err)
	}
	a, d, err = Lookup(v.rw, root, []byte("ref"))
	if err != nil || a != nil || d.Ministry != 5 || d.Ino != 777 {
		t.Fatalf("Lookup(referral) = %v %v %v", a, d, err)
	}
	v.fails(&wire.Command_Unlink{Unlink: &wire.UnlinkOp{Parent: uint64(root), Name: []byte("ref"), Dir: true}}, syscall.EBUSY)
	v.fails(&wire.Command_Rename{Rename: &wire.RenameOp{Parent: uint64(root), Name: []byte("f"), NewParent: uint64(root), NewName: []byte("ref")}}, syscall.EXDEV)
	ents, _, _, err := Readdir(v.rw, root, nil, 0)
	if err != nil || len(ents) != 2 || ents[1].Ministry != 5 || ents[1].Attr != nil || ents[0].Attr.Ino != uint64(file) {
		t.Fatalf("Readdir with referral = %v, %v", ents, err)
	}
}

func TestReaddirLimits(t *testing.T) {
	v := newEnv(t)
	dir := v.mkdir(root, "d")
	for i := range 1100 {
		v.mkfile(dir, fmt.Sprintf("f%04d", i))
	}
	for _, tc := range []struct{ limit, want int }{{0, 256}, {-1, 256}, {10, 10}, {5000, 1024}} {
		ents, next, eof, err := Readdir(v.rw, dir, nil, tc.limit)
		if err != nil || len(ents) != tc.want || eof || string(next) != fmt.Sprintf("f%04d", tc.want-1) {
			t.Fatalf("Readdir(limit %d) = %d entries, next %q, eof %v, %v", tc.limit, len(ents), next, eof, err)
		}
	}
	ents, next, eof, err := Readdir(v.rw, dir, []byte("f1089"), 10)
	if err != nil || len(ents) != 10 || string(ents[0].Name) != "f1090" || !eof || string(next) != "f1099" {
		t.Fatalf("last page = %d, %q, %v, %v", len(ents), next, eof, err)
	}
	ents, next, eof, err = Readdir(v.rw, dir, []byte("f1099"), 10)
	if err != nil || len(ents) != 0 || !eof || string(next) != "f1099" {
		t.Fatalf("past the end = %d, %q, %v, %v", len(ents), next, eof, err)
	}
}

// TestReaddirPagingWhileChanging checks that an entry present during the
// whole listing is returned exactly once, whatever is added and removed
// between pages.
func TestReaddirPagingWhileChanging(t *testing.T) {
	v := newEnv(t)
	dir := v.mkdir(root, "d")
	rng := rand.New(rand.NewSource(1))
	stable := map[string]ids.Ino{}
	for i := range 200 {
		name := fmt.Sprintf("s%03d", i)
		stable[name] = v.mkfile(dir, name)
	}
	var churn []string
	seen := map[string]int{}
	var cookie []byte
	for pages := 0; ; pages++ {
		if pages > 1000 {
			t.Fatal("listing does not end")
		}
		ents, next, eof, err := Readdir(v.rw, dir, cookie, 7)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			seen[string(e.Name)]++
			if e.Attr == nil || e.Attr.Ino != e.Ino {
				t.Fatalf("entry %q without its attr: %v", e.Name, e)
			}
			if bytes.Compare(e.Name, cookie) <= 0 {
				t.Fatalf("entry %q not after cookie %q", e.Name, cookie)
			}
		}
		if eof {
			break
		}
		cookie = next
		// Churn: add names before and after the cookie, remove some.
		for range 3 {
			name := fmt.Sprintf("%c%03d", "acsz"[rng.Intn(4)], rng.Intn(1000))
			if _, ok := v.lookup(dir, name); !ok {
				v.mkfile(dir, name)
				churn = append(churn, name)
			}
		}
		if len(churn) > 0 && rng.Intn(2) == 0 {
			i := rng.Intn(len(churn))
			v.ok(&wire.Command_Unlink{Unlink: &wire.UnlinkOp{Parent: uint64(dir), Name: []byte(churn[i])}})
			churn = append(churn[:i], churn[i+1:]...)
		}
	}
	for name := range stable {
		if seen[name] != 1 {
			t.Errorf("stable entry %q returned %d times", name, seen[name])
		}
	}
	for name, n := range seen {
		if n != 1 {
			t.Errorf("entry %q returned %d times", name, n)
		}
	}
}

func TestInodeExhaustion(t *testing.T) {
	w := newTinyEnv(t, 1, 4)              // the root (1) lies inside the grant
	if n, _ := FreeInodes(w.rw); n != 3 { // counts the root's number: see FreeInodes
		t.Fatalf("FreeInodes = %d, want 3", n)
	}
	a := w.mkfile(root, "a")
	b := w.mkdir(root, "b")
	if a != 2 || b != 3 {
		t.Fatalf("allocated %v, %v; want 2, 3 (root 1 skipped)", a, b)
	}
	if n, _ := FreeInodes(w.rw); n != 0 {
		t.Fatalf("FreeInodes = %d, want 0", n)
	}
	res := w.fails(mkop(root, "c", wire.FileType_REGULAR), syscall.ENOSPC)
	if !strings.Contains(res.Message, "inode") {
		t.Fatalf("ENOSPC message = %q", res.Message)
	}
	w.fails(mkop(b, "c", wire.FileType_DIRECTORY), syscall.ENOSPC)
	w.fails(&wire.Command_GrantInodes{GrantInodes: &wire.GrantInodesOp{Start: 5, End: 5}}, syscall.EINVAL)
	w.fails(&wire.Command_GrantInodes{GrantInodes: &wire.GrantInodesOp{Start: 0, End: 5}}, syscall.EINVAL)
	w.ok(&wire.Command_GrantInodes{GrantInodes: &wire.GrantInodesOp{Start: 200, End: 300}})
	if n, _ := FreeInodes(w.rw); n != 100 {
		t.Fatalf("FreeInodes = %d, want 100", n)
	}
	// Duplicate and overlapping grants are ignored.
	before := w.dump()
	w.ok(&wire.Command_GrantInodes{GrantInodes: &wire.GrantInodesOp{Start: 200, End: 300}})
	w.ok(&wire.Command_GrantInodes{GrantInodes: &wire.GrantInodesOp{Start: 250, End: 400}})
	w.ok(&wire.Command_GrantInodes{GrantInodes: &wire.GrantInodesOp{Start: 3, End: 4}})
	if w.dump() != before {
		t.Fatal("duplicate grant changed the state")
	}
	if c := w.mkfile(root, "c"); c != 200 {
		t.Fatalf("after grant allocated %v, want 200", c)
	}
	if n, _ := FreeInodes(w.rw); n != 99 {
		t.Fatalf("FreeInodes = %d, want 99", n)
	}
	// Numbers are never reused after unlink.
	w.ok(&wire.Command_Unlink{Unlink: &wire.UnlinkOp{Parent: uint64(root), Name: []byte("c")}})
	if d := w.mkfile(root, "d"); d != 201 {
		t.Fatalf("allocated %v after unlink, want 201", d)
	}
}

// newTinyEnv is a ministry (root inode 1, no key prefix) whose only grant
// is [start, end).
func newTinyEnv(t *testing.T, start, end uint64) *env {
	e, err := engine.Open(t.TempDir(), engine.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	b := e.NewBatch()
	t.Cleanup(b.Close)
	v := &env{t: t, rw: b}
	v.ok(&wire.Command_GrantInodes{GrantInodes: &wire.GrantInodesOp{Start: start, End: end}})
	v.ok(&wire.Command_InitMinistry{InitMinistry: &wire.InitMinistryOp{RootIno: uint64(root), Mode: 0o777}})
	return v
}

func TestChunkTable(t *testing.T) {
	v := newEnv(t)
	f := v.mkfile(root, "data")
	d := v.mkdir(root, "dir")
	set := func(ino ids.Ino, index, handle, group uint64) *wire.Result {
		return v.cmd(&wire.Command_SetChunk{SetChunk: &wire.SetChunkOp{Ino: uint64(ino), Chunk: &wire.ChunkRef{Index: index, Handle: handle, Group: group}}}, nil)
	}
	if r := set(f, 0, 100, 1); r.Errno != 0 || r.Chunk.GetHandle() != 100 {
		t.Fatalf("set chunk 0 = %v", r)
	}
	set(f, 2, 102, 1)
	// A second writer racing for chunk 0 gets the recorded one.
	if r := set(f, 0, 999, 1); r.Errno != 0 || r.Chunk.GetHandle() != 100 {
		t.Fatalf("second set of chunk 0 = %v, want the first handle", r)
	}
	cs, err := GetChunks(v.rw, f)
	if err != nil || len(cs) != 2 || cs[0].GetIndex() != 0 || cs[1].GetIndex() != 2 || cs[1].GetHandle() != 102 {
		t.Fatalf("chunks %v %v", cs, err)
	}
	for _, bad := range []struct {
		ino   ids.Ino
		h, g  uint64
		errno syscall.Errno
	}{{d, 1, 1, syscall.EISDIR}, {12345, 1, 1, syscall.ENOENT}, {f, 0, 1, syscall.EINVAL}, {f, 1, 0, syscall.EINVAL}} {
		if r := set(bad.ino, 5, bad.h, bad.g); syscall.Errno(r.Errno) != bad.errno {
			t.Errorf("set chunk on %v (handle %d group %d) = %v, want %v", bad.ino, bad.h, bad.g, r, bad.errno)
		}
	}
	// Shrinking a file with data to a non-zero size is refused without
	// the chunk size (its chunks would keep the cut bytes); growing is fine.
	v.cmd(&wire.Command_Setattr{Setattr: &wire.SetattrOp{Ino: uint64(f), Valid: uint32(wire.SetattrField_SETATTR_SIZE), Size: 1000}}, nil)
	if r := v.cmd(&wire.Command_Setattr{Setattr: &wire.SetattrOp{Ino: uint64(f), Valid: uint32(wire.SetattrField_SETATTR_SIZE), Size: 10}}, nil); syscall.Errno(r.Errno) != syscall.EOPNOTSUPP {
		t.Fatalf("shrink to 10 = %v, want EOPNOTSUPP", r)
	}
	if a := v.attr(f); a.Size != 1000 {
		t.Fatalf("size after a refused shrink = %d", a.Size)
	}
	// Truncate to zero releases the chunks; unlink releases them too.
	v.cmd(&wire.Command_Setattr{Setattr: &wire.SetattrOp{Ino: uint64(f), Valid: uint32(wire.SetattrField_SETATTR_SIZE), Size: 0}}, nil)
	if cs, _ := GetChunks(v.rw, f); len(cs) != 0 {
		t.Fatalf("chunks after truncate to 0: %v", cs)
	}
	set(f, 0, 200, 1)
	v.cmd(&wire.Command_Unlink{Unlink: &wire.UnlinkOp{Parent: uint64(root), Name: []byte("data")}}, nil)
	if n := countPrefix(t, v.rw, chunkPrefix(f)); n != 0 {
		t.Fatalf("%d chunk records left after unlink", n)
	}
}

func TestSetattrSizeGrow(t *testing.T) {
	v := newEnv(t)
	f := v.mkfile(root, "f")
	grow := func(size uint64) *wire.Attr {
		t.Helper()
		return v.ok(&wire.Command_Setattr{Setattr: &wire.SetattrOp{Ino: uint64(f), Size: size,
			Valid: uint32(wire.SetattrField_SETATTR_SIZE | wire.SetattrField_SETATTR_SIZE_GROW | wire.SetattrField_SETATTR_MTIME_NOW)}}).Attr
	}
	if a := grow(100); a.Size != 100 || a.MtimeNs != v.now {
		t.Fatalf("grow to 100: %v", a)
	}
	// A smaller size leaves the size alone (a writer that finished first
	// must not shrink the file), but the write still sets mtime.
	if a := grow(40); a.Size != 100 || a.MtimeNs != v.now {
		t.Fatalf("grow to 40: %v", a)
	}
	if a := v.attr(f); a.Size != 100 {
		t.Fatalf("stored size %d", a.Size)
	}
	if a := grow(1 << 40); a.Size != 1<<40 {
		t.Fatalf("grow to 1 TiB: %v", a)
	}
	// GROW never shrinks, so it needs no chunk size even with chunks.
	v.ok(&wire.Command_SetChunk{SetChunk: &wire.SetChunkOp{Ino: uint64(f), Chunk: &wire.ChunkRef{Index: 0, Handle: 7, Group: 1}}})
	if a := grow(5); a.Size != 1<<40 {
		t.Fatalf("grow to 5 with chunks: %v", a)
	}
	if cs, _ := GetChunks(v.rw, f); len(cs) != 1 {
		t.Fatalf("chunks after GROW: %v", cs)
	}
}

func TestTruncateDropsChunksBeyondEnd(t *testing.T) {
	const cs = 1000 // chunk size
	for _, tc := range []struct {
		size uint64
		want []uint64 // chunk indexes kept
	}{
		{3500, []uint64{0, 1, 2, 3}}, // chunk 3 holds the new end
		{3000, []uint64{0, 1, 2}},    // an exact boundary: chunk 3 goes
		{2999, []uint64{0, 1, 2}},
		{1, []uint64{0}},
		{4999, []uint64{0, 1, 2, 3, 4}}, // no chunk wholly beyond
		{0, nil},
	} {
		v := newEnv(t)
		f := v.mkfile(root, "f")
		for i := range uint64(5) {
			v.ok(&wire.Command_SetChunk{SetChunk: &wire.SetChunkOp{Ino: uint64(f), Chunk: &wire.ChunkRef{Index: i, Handle: 100 + i, Group: 1}}})
		}
		v.ok(&wire.Command_Setattr{Setattr: &wire.SetattrOp{Ino: uint64(f), Valid: uint32(wire.SetattrField_SETATTR_SIZE), Size: 5 * cs}})
		a := v.ok(&wire.Command_Setattr{Setattr: &wire.SetattrOp{Ino: uint64(f), Valid: uint32(wire.SetattrField_SETATTR_SIZE), Size: tc.size, ChunkSize: cs}}).Attr
		if a.Size != tc.size || a.MtimeNs != v.now {
			t.Errorf("truncate to %d: attr %v", tc.size, a)
		}
		got, err := GetChunks(v.rw, f)
		if err != nil {
			t.Fatal(err)
		}
		var idx []uint64
		for _, c := range got {
			idx = append(idx, c.GetIndex())
			if c.GetHandle() != 100+c.GetIndex() {
				t.Errorf("truncate to %d: chunk %v changed", tc.size, c)
			}
		}
		if !slices.Equal(idx, tc.want) {
			t.Errorf("truncate to %d: chunks %v, want %v", tc.size, idx, tc.want)
		}
		// Growing again keeps what is left; with the chunk size given it
		// drops nothing.
		v.ok(&wire.Command_Setattr{Setattr: &wire.SetattrOp{Ino: uint64(f), Valid: uint32(wire.SetattrField_SETATTR_SIZE), Size: 10 * cs, ChunkSize: cs}})
		if n := countPrefix(t, v.rw, chunkPrefix(f)); n != len(tc.want) {
			t.Errorf("truncate to %d then grow: %d records, want %d", tc.size, n, len(tc.want))
		}
	}
}

// A size change that names the chunk records it wrote into fails with
// ESTALE, changing nothing, when one was released or replaced meanwhile.
func TestSetattrExpectChunks(t *testing.T) {
	v := newEnv(t)
	f := v.mkfile(root, "data")
	v.ok(&wire.Command_SetChunk{SetChunk: &wire.SetChunkOp{Ino: uint64(f), Chunk: &wire.ChunkRef{Index: 0, Handle: 7, Group: 1}}})
	grow := func(size uint64, expect ...*wire.ChunkRef) *wire.Result {
		return v.cmd(&wire.Command_Setattr{Setattr: &wire.SetattrOp{Ino: uint64(f), Size: size, ExpectChunks: expect,
			Valid: uint32(wire.SetattrField_SETATTR_SIZE | wire.SetattrField_SETATTR_SIZE_GROW)}}, nil)
	}
	if r := grow(100, &wire.ChunkRef{Index: 0, Handle: 7}); r.Errno != 0 || r.Attr.GetSize() != 100 {
		t.Fatalf("grow with the recorded chunk = %v", r)
	}
	for _, bad := range []*wire.ChunkRef{{Index: 0, Handle: 8}, {Index: 1, Handle: 7}} {
		if r := grow(500, bad); syscall.Errno(r.Errno) != syscall.ESTALE {
			t.Fatalf("grow expecting %v = %v, want ESTALE", bad, r)
		}
	}
	if a := v.attr(f); a.Size != 100 {
		t.Fatalf("size after refused grows = %d, want 100", a.Size)
	}
}

func TestInlineFiles(t *testing.T) {
	v := newEnv(t)
	f := v.mkfile(root, "small")
	d := v.mkdir(root, "dir")
	w := func(ino ids.Ino, off uint64, data string, limit uint64) *wire.Result {
		return v.cmd(&wire.Command_WriteInline{WriteInline: &wire.WriteInlineOp{Ino: uint64(ino), Offset: off, Data: []byte(data), MaxInline: limit}}, nil)
	}
	content := func() string {
		t.Helper()
		b, ok, err := InlineData(v.rw, f)
		if err != nil || !ok {
			t.Fatalf("inline data: %q %v %v", b, ok, err)
		}
		return string(b)
	}
	if r := w(f, 0, "hello", 4096); r.Errno != 0 || r.Attr.GetSize() != 5 {
		t.Fatalf("first inline write = %v", r)
	}
	before := v.attr(f).Version
	if r := w(f, 10, "world", 4096); r.Errno != 0 || r.Attr.GetSize() != 15 || r.Attr.GetVersion() <= before {
		t.Fatalf("second inline write = %v", r)
	}
	if got := content(); got != "hello\x00\x00\x00\x00\x00world" {
		t.Fatalf("inline bytes %q", got)
	}
	// Bad input changes nothing.
	for _, bad := range []struct {
		r    *wire.Result
		want syscall.Errno
	}{
		{w(f, 4090, "too far", 4096), syscall.EFBIG},
		{w(f, 0, "x", MaxInline+1), syscall.EINVAL},
		{w(f, 0, "", 4096), syscall.EINVAL},
		{w(d, 0, "x", 4096), syscall.EISDIR},
		{w(12345, 0, "x", 4096), syscall.ENOENT},
	} {
		if syscall.Errno(bad.r.Errno) != bad.want {
			t.Errorf("got %v, want %v", bad.r, bad.want)
		}
	}
	if got := content(); got != "hello\x00\x00\x00\x00\x00world" || v.attr(f).Size != 15 {
		t.Fatalf("after refused writes: %q size %d", got, v.attr(f).Size)
	}
	// Truncate cuts the inline bytes; growing leaves zeros to the size.
	v.ok(&wire.Command_Setattr{Setattr: &wire.SetattrOp{Ino: uint64(f), Valid: uint32(wire.SetattrField_SETATTR_SIZE), Size: 3}})
	if got := content(); got != "hel" {
		t.Fatalf("after truncate to 3: %q", got)
	}
	// Moving to chunks: the copy's chunk becomes chunk 0 and the inline
	// bytes go, in one step, if they are still what was copied. A
	// leftover chunk 0 record (a crashed move) is replaced.
	v.ok(&wire.Command_SetChunk{SetChunk: &wire.SetChunkOp{Ino: uint64(f), Chunk: &wire.ChunkRef{Index: 0, Handle: 8, Group: 1}}})
	drop := func(expect string, handle uint64) *wire.Result {
		return v.cmd(&wire.Command_DropInline{DropInline: &wire.DropInlineOp{Ino: uint64(f), Expect: []byte(expect),
			Chunk: &wire.ChunkRef{Index: 0, Handle: handle, Group: 1}}}, nil)
	}
	if r := drop("he", 9); syscall.Errno(r.Errno) != syscall.ESTALE {
		t.Fatalf("drop of other bytes than the inline ones = %v", r)
	}
	if r := v.cmd(&wire.Command_DropInline{DropInline: &wire.DropInlineOp{Ino: uint64(f), Expect: []byte("hel"),
		Chunk: &wire.ChunkRef{Index: 1, Handle: 9, Group: 1}}}, nil); syscall.Errno(r.Errno) != syscall.EINVAL {
		t.Fatalf("drop into chunk 1 = %v", r)
	}
	if r := v.cmd(&wire.Command_DropInline{DropInline: &wire.DropInlineOp{Ino: uint64(f), Expect: []byte("hel")}}, nil); syscall.Errno(r.Errno) != syscall.EINVAL {
		t.Fatalf("drop of bytes without a chunk = %v", r)
	}
	if _, ok, _ := InlineData(v.rw, f); !ok {
		t.Fatal("refused drops dropped the inline bytes")
	}
	if r := drop("hel", 9); r.Errno != 0 {
		t.Fatalf("drop = %v", r)
	}
	if _, ok, _ := InlineData(v.rw, f); ok {
		t.Fatal("inline bytes still there after the drop")
	}
	if c, _ := chunkAt(v.rw, f, 0); c.GetHandle() != 9 {
		t.Fatalf("chunk 0 is %v, want the copy's handle 9", c)
	}
	// A retry of that drop succeeds; another writer's stale drop does not.
	if r := drop("hel", 9); r.Errno != 0 {
		t.Fatalf("retried drop = %v", r)
	}
	if r := drop("hel", 10); syscall.Errno(r.Errno) != syscall.ESTALE {
		t.Fatalf("stale drop after the move = %v", r)
	}
	// A file in chunks takes no inline write.
	if r := w(f, 0, "x", 4096); syscall.Errno(r.Errno) != syscall.EFBIG {
		t.Fatalf("inline write to a chunked file = %v", r)
	}
	// Unlink removes inline bytes with the inode (deleted without being
	// read), and a leftover chunk record of an inline file too.
	g := v.mkfile(root, "gone")
	w(g, 0, "bytes", 4096)
	v.ok(&wire.Command_SetChunk{SetChunk: &wire.SetChunkOp{Ino: uint64(g), Chunk: &wire.ChunkRef{Index: 0, Handle: 11, Group: 1}}})
	v.ok(&wire.Command_Unlink{Unlink: &wire.UnlinkOp{Parent: uint64(root), Name: []byte("gone")}})
	if _, ok, _ := InlineData(v.rw, g); ok {
		t.Fatal("inline bytes outlive their inode")
	}
	if has, err := hasChunks(v.rw, g); err != nil || has {
		t.Fatalf("chunk records of an unlinked inline file: %v %v", has, err)
	}
}

// A size change naming chunks written into fails while the file is inline.
func TestSetattrExpectChunksOnInlineFile(t *testing.T) {
	v := newEnv(t)
	f := v.mkfile(root, "inl")
	v.ok(&wire.Command_WriteInline{WriteInline: &wire.WriteInlineOp{Ino: uint64(f), Data: []byte("abc"), MaxInline: 4096}})
	v.ok(&wire.Command_SetChunk{SetChunk: &wire.SetChunkOp{Ino: uint64(f), Chunk: &wire.ChunkRef{Index: 0, Handle: 7, Group: 1}}})
	r := v.cmd(&wire.Command_Setattr{Setattr: &wire.SetattrOp{Ino: uint64(f), Size: 9000, ExpectChunks: []*wire.ChunkRef{{Index: 0, Handle: 7}},
		Valid: uint32(wire.SetattrField_SETATTR_SIZE | wire.SetattrField_SETATTR_SIZE_GROW)}}, nil)
	if syscall.Errno(r.Errno) != syscall.ESTALE || v.attr(f).Size != 3 {
		t.Fatalf("grow over chunks of an inline file = %v (size %d), want ESTALE and size 3", r, v.attr(f).Size)
	}
}
