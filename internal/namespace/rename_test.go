package namespace

import (
	"syscall"
	"testing"

	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/wire"
)

// tree builds, under the root:
//
//	a/ { a1/ { deep/ }, af }   b/ (empty)   c/ { cf }   f, h (hard links)   g   s -> target/s
type tree map[string]ids.Ino

func newTree(t *testing.T) (*env, tree) {
	v := newEnv(t)
	n := tree{"/": root}
	n["a"] = v.mkdir(root, "a")
	n["a1"] = v.mkdir(n["a"], "a1")
	n["deep"] = v.mkdir(n["a1"], "deep")
	n["af"] = v.mkfile(n["a"], "af")
	n["b"] = v.mkdir(root, "b")
	n["c"] = v.mkdir(root, "c")
	n["cf"] = v.mkfile(n["c"], "cf")
	n["f"] = v.mkfile(root, "f")
	v.ok(&wire.Command_Link{Link: &wire.LinkOp{Ino: uint64(n["f"]), NewParent: uint64(root), NewName: []byte("h")}})
	n["g"] = v.mkfile(root, "g")
	n["s"] = v.mk(root, "s", wire.FileType_SYMLINK)
	return v, n
}

func ren(p ids.Ino, name string, np ids.Ino, newName string, flags uint32) *wire.Command_Rename {
	return &wire.Command_Rename{Rename: &wire.RenameOp{Parent: uint64(p), Name: []byte(name), NewParent: uint64(np), NewName: []byte(newName), Flags: flags}}
}

func TestRename(t *testing.T) {
	type rn struct {
		p       string
		name    string
		np      string
		newName string
		flags   uint32
	}
	for _, tc := range []struct {
		name  string
		op    rn
		want  syscall.Errno
		check func(v *env, n tree)
	}{
		{name: "file within dir", op: rn{"/", "g", "/", "g2", 0}, check: func(v *env, n tree) {
			v.mustLookup(root, "g2", n["g"])
			v.nlink(root, 5)
		}},
		{name: "file to other dir", op: rn{"/", "g", "b", "g", 0}, check: func(v *env, n tree) {
			v.mustLookup(n["b"], "g", n["g"])
			v.nlink(n["b"], 2)
			v.nlink(n["g"], 1)
		}},
		{name: "file over file", op: rn{"/", "g", "a", "af", 0}, check: func(v *env, n tree) {
			v.mustLookup(n["a"], "af", n["g"])
			v.gone(n["af"])
		}},
		{name: "file over one of two links", op: rn{"/", "g", "/", "h", 0}, check: func(v *env, n tree) {
			v.mustLookup(root, "h", n["g"])
			v.mustLookup(root, "f", n["f"])
			v.nlink(n["f"], 1)
			if a := v.attr(n["f"]); a.CtimeNs != v.now {
				t.Errorf("replaced inode ctime not updated: %v", a)
			}
		}},
		{name: "symlink over file", op: rn{"/", "s", "c", "cf", 0}, check: func(v *env, n tree) {
			v.mustLookup(n["c"], "cf", n["s"])
			v.gone(n["cf"])
		}},
		{name: "dir to other dir", op: rn{"/", "a", "b", "x", 0}, check: func(v *env, n tree) {
			v.mustLookup(n["b"], "x", n["a"])
			v.nlink(root, 4)
			v.nlink(n["b"], 3)
			v.nlink(n["a"], 3)
		}},
		{name: "dir up the tree", op: rn{"a", "a1", "/", "a1", 0}, check: func(v *env, n tree) {
			v.nlink(root, 6)
			v.nlink(n["a"], 2)
			// a is no longer an ancestor of a1, so a may move under it.
			v.ok(ren(root, "a", n["deep"], "a", 0))
			v.nlink(n["deep"], 3)
			v.nlink(root, 5)
			v.fails(ren(root, "a1", n["a"], "z", 0), syscall.EINVAL)
		}},
		{name: "dir over empty dir", op: rn{"/", "a", "/", "b", 0}, check: func(v *env, n tree) {
			v.mustLookup(root, "b", n["a"])
			v.gone(n["b"])
			v.nlink(root, 4)
		}},
		{name: "dir over empty dir elsewhere", op: rn{"a", "a1", "/", "b", 0}, check: func(v *env, n tree) {
			v.mustLookup(root, "b", n["a1"])
			v.gone(n["b"])
			v.nlink(root, 5)
			v.nlink(n["a"], 2)
		}},
		{name: "dir over non-empty dir", op: rn{"/", "a", "/", "c", 0}, want: syscall.ENOTEMPTY},
		{name: "dir over file", op: rn{"/", "a", "/", "f", 0}, want: syscall.ENOTDIR},
		{name: "file over dir", op: rn{"/", "f", "/", "b", 0}, want: syscall.EISDIR},
		{name: "dir into itself", op: rn{"/", "a", "a", "x", 0}, want: syscall.EINVAL},
		{name: "dir into its child", op: rn{"/", "a", "a1", "x", 0}, want: syscall.EINVAL},
		{name: "dir into its grandchild", op: rn{"/", "a", "deep", "x", 0}, want: syscall.EINVAL},
		{name: "dir onto its own child", op: rn{"/", "a", "a1", "deep", 0}, want: syscall.EINVAL},
		{name: "parent onto child name", op: rn{"a", "a1", "deep", "x", 0}, want: syscall.EINVAL},
		{name: "root by dot-dot", op: rn{"/", "..", "b", "x", 0}, want: syscall.EINVAL},
		{name: "root by dot", op: rn{"/", ".", "b", "x", 0}, want: syscall.EINVAL},
		{name: "same name", op: rn{"/", "f", "/", "f", 0}, check: func(v *env, n tree) {}},
		{name: "same inode", op: rn{"/", "f", "/", "h", 0}, check: func(v *env, n tree) {
			v.nlink(n["f"], 2)
			v.mustLookup(root, "f", n["f"])
			v.mustLookup(root, "h", n["f"])
		}},
		{name: "missing source", op: rn{"/", "nope", "/", "x", 0}, want: syscall.ENOENT},
		{name: "missing parent", op: rn{"gone", "f", "/", "x", 0}, want: syscall.ENOENT},
		{name: "missing new parent", op: rn{"/", "f", "gone", "x", 0}, want: syscall.ENOENT},
		{name: "parent is a file", op: rn{"g", "f", "/", "x", 0}, want: syscall.ENOTDIR},
		{name: "new parent is a file", op: rn{"/", "f", "g", "x", 0}, want: syscall.ENOTDIR},
		{name: "bad flags", op: rn{"/", "f", "/", "x", 3}, want: syscall.EINVAL},
		{name: "unknown flag", op: rn{"/", "f", "/", "x", 4}, want: syscall.EINVAL},
		{name: "noreplace existing", op: rn{"/", "g", "/", "f", renameNoReplace}, want: syscall.EEXIST},
		{name: "noreplace onto another link of the same inode", op: rn{"/", "f", "/", "h", renameNoReplace}, want: syscall.EEXIST},
		{name: "noreplace new name", op: rn{"/", "g", "b", "g", renameNoReplace}, check: func(v *env, n tree) {
			v.mustLookup(n["b"], "g", n["g"])
		}},
		{name: "exchange missing target", op: rn{"/", "g", "/", "x", renameExchange}, want: syscall.ENOENT},
		{name: "exchange missing source", op: rn{"/", "x", "/", "g", renameExchange}, want: syscall.ENOENT},
		{name: "exchange files", op: rn{"/", "g", "a", "af", renameExchange}, check: func(v *env, n tree) {
			v.mustLookup(root, "g", n["af"])
			v.mustLookup(n["a"], "af", n["g"])
			v.nlink(n["g"], 1)
			v.nlink(n["af"], 1)
			v.nlink(root, 5)
			v.nlink(n["a"], 3)
		}},
		{name: "exchange dir and file", op: rn{"/", "a", "c", "cf", renameExchange}, check: func(v *env, n tree) {
			v.mustLookup(root, "a", n["cf"])
			v.mustLookup(n["c"], "cf", n["a"])
			v.nlink(root, 4)
			v.nlink(n["c"], 3)
			v.nlink(n["a"], 3)
			// a now lives under c: c may not move under a.
			v.fails(ren(root, "c", n["deep"], "c", 0), syscall.EINVAL)
		}},
		{name: "exchange dirs", op: rn{"a", "a1", "/", "b", renameExchange}, check: func(v *env, n tree) {
			v.mustLookup(root, "b", n["a1"])
			v.mustLookup(n["a"], "a1", n["b"])
			v.nlink(root, 5)
			v.nlink(n["a"], 3)
			// b is now under a, a1 under root: a may move into a1's subtree.
			v.ok(ren(root, "a", n["deep"], "a", 0))
		}},
		{name: "exchange into own subtree", op: rn{"/", "a", "a1", "deep", renameExchange}, want: syscall.EINVAL},
		{name: "exchange with own ancestor", op: rn{"a1", "deep", "/", "a", renameExchange}, want: syscall.EINVAL},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, n := newTree(t)
			ino := func(s string) ids.Ino {
				if s == "gone" {
					return 4242
				}
				return n[s]
			}
			op := ren(ino(tc.op.p), tc.op.name, ino(tc.op.np), tc.op.newName, tc.op.flags)
			if tc.want != 0 {
				v.fails(op, tc.want)
				return
			}
			src, _ := v.lookup(ino(tc.op.p), tc.op.name)
			before := map[ids.Ino]*wire.Attr{}
			for _, i := range n {
				before[i] = v.attr(i)
			}
			res := v.ok(op)
			if res.Attr.Ino != uint64(src) {
				t.Fatalf("result attr is of %d, want moved inode %v", res.Attr.Ino, src)
			}
			noop := tc.op.p == tc.op.np && tc.op.name == tc.op.newName || tc.name == "same inode"
			for _, i := range []ids.Ino{ino(tc.op.p), ino(tc.op.np)} {
				a := v.attr(i)
				if noop {
					if a.Version != before[i].Version {
						t.Errorf("no-op rename changed directory %v", i)
					}
					continue
				}
				if a.MtimeNs != v.now || a.CtimeNs != v.now || a.Version != before[i].Version+1 {
					t.Errorf("parent %v after rename = %v (before %v)", i, a, before[i])
				}
			}
			if a := v.attr(src); !noop && (a.CtimeNs != v.now || a.Version != before[src].Version+1) {
				t.Errorf("moved inode after rename = %v", a)
			}
			tc.check(v, n)
		})
	}
}

// TestRenameVictimXattrs checks that a replaced inode loses its xattrs with
// its last link, and that a replaced directory loses its parent pointer.
func TestRenameVictimXattrs(t *testing.T) {
	v, n := newTree(t)
	v.ok(&wire.Command_SetXattr{SetXattr: &wire.SetXattrOp{Ino: uint64(n["g"]), Name: []byte("user.x"), Value: []byte("v")}})
	v.ok(ren(root, "s", root, "g", 0))
	v.gone(n["g"])
	if c := countPrefix(t, v.rw, xattrPrefix(n["g"])); c != 0 {
		t.Fatalf("%d xattrs of replaced inode remain", c)
	}
	v.ok(ren(root, "c", root, "b", 0))
	if c := countPrefix(t, v.rw, parentKey(n["b"])); c != 0 {
		t.Fatal("parent pointer of replaced directory remains")
	}
	v.nlink(root, 4)
}
