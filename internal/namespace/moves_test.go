package namespace

import (
	"syscall"
	"testing"

	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/wire"
)

// TestMoveOfAnEmptyDirectory walks a subtree move through a source and a
// target ministry: freeze, copy, finish, and what each side answers at
// every step.
func TestMoveOfAnEmptyDirectory(t *testing.T) {
	src, dst := newEnv(t), newEnv(t)
	p := src.mkdir(root, "projects")
	full := src.mkdir(root, "full")
	src.mkfile(full, "x")
	src.ok(&wire.Command_SetXattr{SetXattr: &wire.SetXattrOp{Ino: uint64(p), Name: []byte("user.a"), Value: []byte("v")}})
	export := func(move uint64, ino ids.Ino, name string) any {
		return &wire.Command_ExportSubtree{ExportSubtree: &wire.ExportSubtreeOp{Move: move, Ino: uint64(ino), Parent: uint64(root), Name: []byte(name), Target: 7}}
	}

	// Refused, changing nothing: not empty, wrong entry, not a directory.
	src.fails(export(1, full, "full"), syscall.ENOTEMPTY)
	src.fails(export(1, p, "full"), syscall.ENOENT)
	f := src.mkfile(root, "file")
	src.fails(export(1, f, "file"), syscall.ENOTDIR)

	// Frozen: changes inside wait (refused as moving, not remembered),
	// reads go on; a second export by another move is refused.
	src.ok(export(1, p, "projects"))
	src.ok(export(1, p, "projects")) // repeated
	src.fails(export(2, p, "projects"), syscall.EBUSY)
	req := &wire.RequestID{ClientId: 9, Seq: 1, FirstIncomplete: 1}
	res := src.cmd(mkop(p, "new", wire.FileType_REGULAR), req)
	if !res.GetMoving() || syscall.Errno(res.GetErrno()) != syscall.EAGAIN {
		t.Fatalf("create in a frozen directory: %v", res)
	}
	if res := src.cmd(&wire.Command_Unlink{Unlink: &wire.UnlinkOp{Parent: uint64(root), Name: []byte("projects"), Dir: true}}, nil); !res.GetMoving() {
		t.Fatalf("rmdir of a frozen directory: %v", res)
	}
	if res := src.cmd(&wire.Command_Rename{Rename: &wire.RenameOp{Parent: uint64(root), Name: []byte("projects"), NewParent: uint64(root), NewName: []byte("p2")}}, nil); !res.GetMoving() {
		t.Fatalf("rename of a frozen directory: %v", res)
	}
	src.attr(p)

	kvs, eof, err := ExportKeys(src.rw, 1, p, nil, 1)
	if err != nil || eof || len(kvs) != 1 {
		t.Fatalf("ExportKeys page 1: %d keys, eof %v, %v", len(kvs), eof, err)
	}
	rest, eof, err := ExportKeys(src.rw, 1, p, kvs[0].GetKey(), 100)
	if err != nil || !eof || len(rest) != 1 {
		t.Fatalf("ExportKeys page 2: %d keys, eof %v, %v", len(rest), eof, err)
	}
	kvs = append(kvs, rest...)
	if _, _, err := ExportKeys(src.rw, 2, p, nil, 10); err == nil {
		t.Fatal("ExportKeys for another move succeeded")
	}

	// The target refuses keys that are not the subtree's, and a copy
	// without the inode.
	dst.fails(&wire.Command_ImportSubtree{ImportSubtree: &wire.ImportSubtreeOp{Move: 1, Ino: uint64(p), Parent: uint64(root), Name: []byte("projects"),
		Kvs: append(kvs, &wire.KV{Key: inodeKey(root), Value: []byte("x")})}}, syscall.EINVAL)
	dst.fails(&wire.Command_ImportSubtree{ImportSubtree: &wire.ImportSubtreeOp{Move: 1, Ino: uint64(p), Kvs: kvs[1:]}}, syscall.EINVAL)
	imp := &wire.Command_ImportSubtree{ImportSubtree: &wire.ImportSubtreeOp{Move: 1, Ino: uint64(p), Parent: 55555, Name: []byte("projects"), Kvs: kvs, Source: 1}}
	dst.ok(imp)
	dst.ok(imp) // repeated
	if a := dst.attr(p); a.GetType() != wire.FileType_DIRECTORY {
		t.Fatalf("imported root: %v", a)
	}
	if v, err := GetXattr(dst.rw, p, []byte("user.a")); err != nil || string(v) != "v" {
		t.Fatalf("imported xattr: %q %v", v, err)
	}
	// Frozen at the target until the decision is made and it opens.
	if res := dst.cmd(mkop(p, "early", wire.FileType_REGULAR), nil); !res.GetMoving() {
		t.Fatalf("create in an imported, not yet opened directory: %v", res)
	}
	act := &wire.Command_ImportSubtree{ImportSubtree: &wire.ImportSubtreeOp{Move: 1, Ino: uint64(p), Parent: 55555, Name: []byte("projects"), Source: 1, Activate: true}}
	dst.fails(&wire.Command_ImportSubtree{ImportSubtree: &wire.ImportSubtreeOp{Move: 2, Ino: uint64(p), Activate: true}}, syscall.EINVAL)
	dst.ok(act)
	dst.ok(act) // repeated
	dst.mkfile(p, "inside")
	// A late copy of the same move never overwrites the live directory.
	dst.fails(imp, syscall.EEXIST)

	fin := &wire.Command_FinishExport{FinishExport: &wire.FinishExportOp{Move: 1, Ino: uint64(p), Parent: uint64(root), Name: []byte("projects"), Target: 7}}
	src.ok(fin)
	src.ok(fin) // repeated
	src.gone(p)
	if fw, _ := Forwarded(src.rw, p); fw != 7 {
		t.Fatalf("forwarding record: %v", fw)
	}
	if _, d, err := Lookup(src.rw, root, []byte("projects")); err != nil || d.GetMinistry() != 7 || d.GetIno() != uint64(p) {
		t.Fatalf("entry after the move: %v %v", d, err)
	}
	// The request refused during the freeze was not remembered: the
	// source now answers it as a create in a directory it does not hold.
	if res := src.cmd(mkop(p, "new", wire.FileType_REGULAR), req); res.GetMoving() || syscall.Errno(res.GetErrno()) != syscall.ENOENT {
		t.Fatalf("create after the move at the source: %v", res)
	}
	src.fails(&wire.Command_Unlink{Unlink: &wire.UnlinkOp{Parent: uint64(root), Name: []byte("projects"), Dir: true}}, syscall.EBUSY)
}

func TestAbortedExportUnfreezes(t *testing.T) {
	v := newEnv(t)
	p := v.mkdir(root, "p")
	v.ok(&wire.Command_ExportSubtree{ExportSubtree: &wire.ExportSubtreeOp{Move: 3, Ino: uint64(p), Parent: uint64(root), Name: []byte("p"), Target: 2}})
	v.ok(&wire.Command_AbortExport{AbortExport: &wire.AbortExportOp{Move: 4, Ino: uint64(p)}}) // another move's abort: no effect
	if m, _ := Frozen(v.rw, p); m != 3 {
		t.Fatalf("frozen by %d after another move's abort", m)
	}
	v.ok(&wire.Command_AbortExport{AbortExport: &wire.AbortExportOp{Move: 3, Ino: uint64(p)}})
	v.mkfile(p, "f")
}
