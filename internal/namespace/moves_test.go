package namespace

import (
	"bytes"
	"fmt"
	"strings"
	"syscall"
	"testing"

	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/wire"
)

func exportOp(move uint64, ino ids.Ino, name string) any {
	return &wire.Command_ExportSubtree{ExportSubtree: &wire.ExportSubtreeOp{Move: move, Ino: uint64(ino), Parent: uint64(root), Name: []byte(name), Target: 7}}
}

// freezeAll walks the subtree below a frozen root as the coordinator
// does, a page of `page` entries at a time, and returns the entries it
// froze.
func freezeAll(t *testing.T, src *env, move uint64, top ids.Ino, page int) int {
	t.Helper()
	n := 0
	queue := []ids.Ino{top}
	for len(queue) > 0 {
		dir := queue[0]
		queue = queue[1:]
		var cookie []byte
		for {
			ents, next, eof, err := Readdir(src.rw, dir, cookie, page)
			if err != nil {
				t.Fatal(err)
			}
			var fr []*wire.DirEntry
			for _, e := range ents {
				if e.GetMinistry() != 0 {
					continue
				}
				if e.GetType() == wire.FileType_DIRECTORY {
					queue = append(queue, ids.Ino(e.GetIno()))
				}
				fr = append(fr, &wire.DirEntry{Name: e.GetName(), Ino: e.GetIno(), Type: e.GetType()})
			}
			if len(fr) > 0 {
				src.ok(&wire.Command_FreezeEntries{FreezeEntries: &wire.FreezeEntriesOp{Move: move, Dir: uint64(dir), Entries: fr, Target: 7}})
				n += len(fr)
			}
			if eof || len(ents) == 0 {
				break
			}
			cookie = next
		}
	}
	return n
}

// copyAll copies the frozen subtree page by page (limit keys each) and
// returns the import commands it applied.
func copyAll(t *testing.T, src, dst *env, move uint64, top ids.Ino, name string, limit int) []any {
	t.Helper()
	var imps []any
	var after []byte
	for {
		kvs, next, eof, err := ExportKeys(src.rw, move, top, after, limit, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		if len(kvs) > limit {
			t.Fatalf("page of %d keys, limit %d", len(kvs), limit)
		}
		if len(kvs) > 0 {
			imp := &wire.Command_ImportSubtree{ImportSubtree: &wire.ImportSubtreeOp{Move: move, Ino: uint64(top), Parent: uint64(root), Name: []byte(name), Kvs: kvs, Source: 1}}
			dst.ok(imp)
			imps = append(imps, imp)
		}
		if eof {
			return imps
		}
		after = next
	}
}

// paged applies a paged step until it is done, each page from the
// previous one's cursor, and returns the pages.
func paged(v *env, op any) int {
	v.t.Helper()
	for n := 1; ; n++ {
		res := v.ok(op)
		if !res.GetMore() {
			return n
		}
		switch o := op.(type) {
		case *wire.Command_ImportSubtree:
			o.ImportSubtree.From = res.GetStart()
		case *wire.Command_FinishExport:
			o.FinishExport.From = res.GetStart()
		case *wire.Command_AbortExport:
			o.AbortExport.From = res.GetStart()
		}
		if n > 100000 {
			v.t.Fatal("paged step never ends")
		}
	}
}

// snapshot renders what a subtree looks like to clients: every path
// with its attributes, xattrs, chunks, inline bytes and symlink target.
func snapshot(t *testing.T, v *env, top ids.Ino) string {
	t.Helper()
	var b bytes.Buffer
	var walk func(dir ids.Ino, path string)
	walk = func(dir ids.Ino, path string) {
		var ents []*wire.DirEntry
		var cookie []byte
		for {
			page, next, eof, err := Readdir(v.rw, dir, cookie, 1000)
			if err != nil {
				t.Fatalf("readdir %s: %v", path, err)
			}
			ents = append(ents, page...)
			if eof {
				break
			}
			cookie = next
		}
		for _, e := range ents {
			p := path + "/" + string(e.GetName())
			if e.GetMinistry() != 0 {
				fmt.Fprintf(&b, "%s -> ministry %d\n", p, e.GetMinistry())
				continue
			}
			a := v.attr(ids.Ino(e.GetIno()))
			fmt.Fprintf(&b, "%s %v\n", p, a)
			names, _ := ListXattr(v.rw, ids.Ino(e.GetIno()))
			for _, nm := range names {
				val, _ := GetXattr(v.rw, ids.Ino(e.GetIno()), nm)
				fmt.Fprintf(&b, "  xattr %s=%s\n", nm, val)
			}
			if e.GetType() == wire.FileType_SYMLINK {
				tg, _ := Readlink(v.rw, ids.Ino(e.GetIno()))
				fmt.Fprintf(&b, "  -> %s\n", tg)
			}
			if e.GetType() == wire.FileType_REGULAR {
				_ = ChunkRefs(v.rw, func(ino ids.Ino, c *wire.ChunkRef) error {
					if ino == ids.Ino(e.GetIno()) {
						fmt.Fprintf(&b, "  chunk %v\n", c)
					}
					return nil
				})
				if d, err := v.rw.Get(inlineKey(ids.Ino(e.GetIno()))); err == nil && d != nil {
					fmt.Fprintf(&b, "  inline %x\n", d)
				}
			}
			if e.GetType() == wire.FileType_DIRECTORY {
				walk(ids.Ino(e.GetIno()), p)
			}
		}
	}
	fmt.Fprintf(&b, "/ %v\n", v.attr(top))
	walk(top, "")
	return b.String()
}

// TestMoveOfAPopulatedSubtree walks a move of a directory with files,
// subdirectories, xattrs, chunk records, inline bytes, a symlink, a
// hard link inside, a nested referral and a remembered answer through a
// source and a target ministry, checking what each side answers at each
// step and that the target ends with exactly what the source had.
func TestMoveOfAPopulatedSubtree(t *testing.T) {
	src, dst := newEnv(t), newEnvGrant(t, 20000, 30000)
	p := src.mkdir(root, "projects")
	a := src.mkfile(p, "a")
	src.ok(&wire.Command_SetChunk{SetChunk: &wire.SetChunkOp{Ino: uint64(a), Chunk: &wire.ChunkRef{Index: 0, Handle: 77, Group: 1}}})
	b := src.mkfile(p, "b")
	src.ok(&wire.Command_WriteInline{WriteInline: &wire.WriteInlineOp{Ino: uint64(b), Data: []byte("inline bytes"), MaxInline: 4096}})
	src.ok(&wire.Command_Link{Link: &wire.LinkOp{Ino: uint64(b), NewParent: uint64(p), NewName: []byte("b2")}})
	d := src.mkdir(p, "d")
	e := src.mkfile(d, "e")
	src.ok(&wire.Command_SetXattr{SetXattr: &wire.SetXattrOp{Ino: uint64(e), Name: []byte("user.k"), Value: []byte("v")}})
	src.mk(d, "s", wire.FileType_SYMLINK)
	deep := src.mkdir(d, "deep")
	for i := range 7 {
		src.mkfile(deep, fmt.Sprintf("f%d", i))
	}
	// A nested ministry: /projects/nested moved to ministry 9 before.
	nested := src.mkdir(p, "nested")
	src.ok(&wire.Command_ExportSubtree{ExportSubtree: &wire.ExportSubtreeOp{Move: 1, Ino: uint64(nested), Parent: uint64(p), Name: []byte("nested"), Target: 9}})
	src.ok(&wire.Command_FinishExport{FinishExport: &wire.FinishExportOp{Move: 1, Ino: uint64(nested), Parent: uint64(p), Name: []byte("nested"), Target: 9}})
	// An answer a client may ask for again after the move.
	req := &wire.RequestID{ClientId: 9, Seq: 5, FirstIncomplete: 5}
	made := src.cmd(mkop(d, "answered", wire.FileType_REGULAR), req)
	outside := src.mkdir(root, "outside")
	want := snapshot(t, src, p)

	// The freeze, root first: changes in the root wait; a directory not
	// frozen yet still changes (that is part of the copy), then waits.
	src.fails(exportOp(2, p, "outside"), syscall.ENOENT)
	f := src.mkfile(root, "file")
	src.fails(exportOp(2, f, "file"), syscall.ENOTDIR)
	src.ok(exportOp(2, p, "projects"))
	src.ok(exportOp(2, p, "projects")) // repeated
	src.fails(exportOp(3, p, "projects"), syscall.EBUSY)
	if res := src.cmd(mkop(p, "new", wire.FileType_REGULAR), &wire.RequestID{ClientId: 9, Seq: 6, FirstIncomplete: 5}); !res.GetMoving() || syscall.Errno(res.GetErrno()) != syscall.EAGAIN {
		t.Fatalf("create in a frozen directory: %v", res)
	}
	late := src.mkfile(deep, "late") // deep is not frozen yet
	src.mkfile(outside, "o")         // elsewhere, nothing waits
	// Entries of a directory the move did not freeze are refused.
	src.fails(&wire.Command_FreezeEntries{FreezeEntries: &wire.FreezeEntriesOp{Move: 2, Dir: uint64(outside),
		Entries: []*wire.DirEntry{{Name: []byte("o"), Ino: 1}}}}, syscall.EINVAL)
	src.fails(&wire.Command_FreezeEntries{FreezeEntries: &wire.FreezeEntriesOp{Move: 2, Dir: uint64(p),
		Entries: []*wire.DirEntry{{Name: []byte("a"), Ino: uint64(b)}}}}, syscall.ENOENT)
	want = snapshot(t, src, p)
	if n := freezeAll(t, src, 2, p, 3); n != 16 {
		t.Fatalf("froze %d entries", n)
	}
	for _, ino := range []ids.Ino{a, b, d, e, deep, late} {
		if m, _ := Frozen(src.rw, ino); m != 2 {
			t.Fatalf("inode %v frozen by %d", ino, m)
		}
	}
	if m, _ := Frozen(src.rw, outside); m != 0 {
		t.Fatal("a directory outside the subtree was frozen")
	}
	for _, op := range []any{
		mkop(deep, "x", wire.FileType_REGULAR),
		&wire.Command_Setattr{Setattr: &wire.SetattrOp{Ino: uint64(e), Valid: 1, Mode: 0o600}},
		&wire.Command_Link{Link: &wire.LinkOp{Ino: uint64(a), NewParent: uint64(outside), NewName: []byte("l")}},
		&wire.Command_Rename{Rename: &wire.RenameOp{Parent: uint64(d), Name: []byte("e"), NewParent: uint64(outside), NewName: []byte("e")}},
		&wire.Command_WriteInline{WriteInline: &wire.WriteInlineOp{Ino: uint64(b), Data: []byte("x"), MaxInline: 4096}},
	} {
		if res := src.apply(op); !res.GetMoving() {
			t.Fatalf("%v on a frozen inode: %v", op, res)
		}
	}
	if got := snapshot(t, src, p); got != want {
		t.Fatalf("the frozen subtree changed:\n%s\nwant\n%s", got, want)
	}

	// The copy, in pages of 4 keys; the target refuses strays.
	dst.fails(&wire.Command_ImportSubtree{ImportSubtree: &wire.ImportSubtreeOp{Move: 2, Ino: uint64(p),
		Kvs: []*wire.KV{{Key: []byte("minodes"), Value: []byte("x")}}}}, syscall.EINVAL)
	dst.fails(&wire.Command_ImportSubtree{ImportSubtree: &wire.ImportSubtreeOp{Move: 2, Ino: uint64(p),
		Kvs: []*wire.KV{{Key: xattrKey(e, []byte("user.k")), Value: []byte("x")}}}}, syscall.EINVAL)
	imps := copyAll(t, src, dst, 2, p, "projects", 4)
	if len(imps) < 5 {
		t.Fatalf("%d import pages", len(imps))
	}
	copyAll(t, src, dst, 2, p, "projects", 1000) // a coordinator starting over
	if res := dst.cmd(mkop(d, "early", wire.FileType_REGULAR), nil); !res.GetMoving() {
		t.Fatalf("create in an imported, not yet opened directory: %v", res)
	}
	act := &wire.Command_ImportSubtree{ImportSubtree: &wire.ImportSubtreeOp{Move: 2, Ino: uint64(p), Parent: 55555, Name: []byte("projects"), Source: 1, Activate: true}}
	dst.fails(&wire.Command_ImportSubtree{ImportSubtree: &wire.ImportSubtreeOp{Move: 3, Ino: uint64(p), Activate: true}}, syscall.EINVAL)
	paged(dst, act)
	paged(dst, act) // repeated
	if got := snapshot(t, dst, p); got != want {
		t.Fatalf("the target's copy:\n%s\nwant\n%s", got, want)
	}
	dst.mkfile(deep, "inside")
	dst.fails(imps[0], syscall.EEXIST) // a late page never overwrites

	fin := &wire.Command_FinishExport{FinishExport: &wire.FinishExportOp{Move: 2, Ino: uint64(p), Parent: uint64(root), Name: []byte("projects"), Target: 7}}
	paged(src, fin)
	paged(src, fin) // repeated
	for _, ino := range []ids.Ino{p, a, b, d, e, deep, late} {
		src.gone(ino)
		if fw, _ := Forwarded(src.rw, ino); fw != 7 {
			t.Fatalf("forwarding record of %v: %v", ino, fw)
		}
	}
	if _, de, err := Lookup(src.rw, root, []byte("projects")); err != nil || de.GetMinistry() != 7 {
		t.Fatalf("entry after the move: %v %v", de, err)
	}
	if frozen, _ := AnyFrozen(src.rw); frozen {
		t.Fatal("frozen records left at the source")
	}
	if frozen, _ := AnyFrozen(dst.rw); frozen {
		t.Fatal("frozen records left at the target")
	}
	// The source keeps nothing of the subtree but forwarding records.
	for _, ino := range []ids.Ino{p, a, b, d, e, deep, late} {
		for _, ks := range append(inodeKeys(src.rw, ino, false), keySpec{dirLeaseKey(ino), true}) {
			_ = src.rw.Scan(ks.key, prefixEnd(ks.key), func(k, _ []byte) bool {
				t.Errorf("key %x of moved inode %v left at the source", k, ino)
				return true
			})
		}
	}
	// The answer given before the move is given again at the target.
	again := dst.cmd(mkop(d, "answered", wire.FileType_REGULAR), req)
	if again.GetErrno() != 0 || again.GetAttr().GetIno() != made.GetAttr().GetIno() {
		t.Fatalf("a request answered before the move, asked again at the target: %v, first %v", again, made)
	}
	// The refused request was not remembered: it applies at the target.
	if res := dst.cmd(mkop(p, "new", wire.FileType_REGULAR), &wire.RequestID{ClientId: 9, Seq: 6, FirstIncomplete: 5}); res.GetErrno() != 0 {
		t.Fatalf("create refused during the move, at the target: %v", res)
	}
}

// TestAbortedMoveLeavesBothSidesAsTheyWere: an abort after part of the
// copy unfreezes the source and deletes the target's partial copy.
func TestAbortedMoveLeavesBothSidesAsTheyWere(t *testing.T) {
	src, dst := newEnv(t), newEnvGrant(t, 20000, 30000)
	p := src.mkdir(root, "p")
	for i := range 5 {
		src.mkfile(src.mkdir(p, fmt.Sprintf("d%d", i)), "f")
	}
	dst.mkfile(root, "own")
	before := dst.dump()
	src.ok(exportOp(3, p, "p"))
	freezeAll(t, src, 3, p, 100)
	kvs, _, eof, err := ExportKeys(src.rw, 3, p, nil, 6, 1<<20)
	if err != nil || eof {
		t.Fatalf("first page: eof %v, %v", eof, err)
	}
	dst.ok(&wire.Command_ImportSubtree{ImportSubtree: &wire.ImportSubtreeOp{Move: 3, Ino: uint64(p), Kvs: kvs, Source: 1}})
	paged(src, &wire.Command_AbortExport{AbortExport: &wire.AbortExportOp{Move: 4, Ino: uint64(p)}}) // another move's
	if m, _ := Frozen(src.rw, p); m != 3 {
		t.Fatalf("frozen by %d after another move's abort", m)
	}
	paged(src, &wire.Command_AbortExport{AbortExport: &wire.AbortExportOp{Move: 3, Ino: uint64(p)}})
	paged(dst, &wire.Command_AbortExport{AbortExport: &wire.AbortExportOp{Move: 3, Ino: uint64(p), DropCopy: true}})
	// As they were, but for the record of the abort itself.
	tomb := fmt.Sprintf("%x=01\n", abortedKey(3))
	if after := dst.dump(); strings.Replace(after, tomb, "", 1) != before || !strings.Contains(after, tomb) {
		t.Fatalf("the target after the abort:\n%s\nbefore:\n%s", after, before)
	}
	// A deposed coordinator's late steps are refused and change nothing:
	// a copy page at the target, a freeze at the source.
	dst.fails(&wire.Command_ImportSubtree{ImportSubtree: &wire.ImportSubtreeOp{Move: 3, Ino: uint64(p), Kvs: kvs, Source: 1}}, syscall.EINVAL)
	src.fails(exportOp(3, p, "p"), syscall.EINVAL)
	if m, _ := Frozen(src.rw, p); m != 0 {
		t.Fatalf("a late freeze of an aborted move froze the root again (move %d)", m)
	}
	if after := dst.dump(); strings.Replace(after, tomb, "", 1) != before {
		t.Fatalf("a late copy page changed the target:\n%s", after)
	}
	if frozen, _ := AnyFrozen(src.rw); frozen {
		t.Fatal("frozen records left at the source")
	}
	src.mkfile(p, "f")
	d3, _ := src.lookup(p, "d3")
	src.mkfile(d3, "g")
}

// TestBigMoveIsPaged: the steps that touch every inode split into pages
// of bounded size, and the end state is whole.
func TestBigMoveIsPaged(t *testing.T) {
	src, dst := newEnv(t), newEnvGrant(t, 20000, 30000)
	p := src.mkdir(root, "p")
	for i := range stepKeys + 500 {
		src.mkfile(p, fmt.Sprintf("f%05d", i))
	}
	want := snapshot(t, src, p)
	src.ok(exportOp(5, p, "p"))
	freezeAll(t, src, 5, p, MaxFreezeEntries)
	copyAll(t, src, dst, 5, p, "p", 1000)
	last := ids.Ino(100 + stepKeys + 500) // created last, so finished last
	if mv, _ := MovingOf(src.rw, last); mv.Move != 5 || mv.To != 0 {
		t.Fatalf("before the decision, at the source: %+v", mv)
	}
	// The first finish page decides it for the source: what is left
	// there is the target's, clients are sent there.
	fin := &wire.Command_FinishExport{FinishExport: &wire.FinishExportOp{Move: 5, Ino: uint64(p), Parent: uint64(root), Name: []byte("p"), Target: 7}}
	res := src.ok(fin)
	if !res.GetMore() {
		t.Fatal("finish of a big move in one page")
	}
	if mv, _ := ReadMoving(src.rw, last); mv.To != 7 {
		t.Fatalf("after the first finish page, inode %v is sent to %v", last, mv.To)
	}
	// The target's copy is neither changed nor read before it opens.
	if mv, _ := ReadMoving(dst.rw, last); mv.Move != 5 || mv.To != 0 || !mv.Copy {
		t.Fatalf("at the target before it opened: %+v", mv)
	}
	act := &wire.Command_ImportSubtree{ImportSubtree: &wire.ImportSubtreeOp{Move: 5, Ino: uint64(p), Parent: 55555, Name: []byte("p"), Activate: true}}
	if !dst.ok(act).GetMore() {
		t.Fatal("activate of a big move in one page")
	}
	// Open after its first page, though records are left; a late copy
	// page is refused from then on.
	if mv, _ := ReadMoving(dst.rw, last); mv.Move != 0 {
		t.Fatalf("at the target after the first open page: %+v", mv)
	}
	kvs, _, _, err := ExportKeys(src.rw, 5, p, nil, 10, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	dst.fails(&wire.Command_ImportSubtree{ImportSubtree: &wire.ImportSubtreeOp{Move: 5, Ino: uint64(p), Kvs: kvs}}, syscall.EEXIST)
	if frozen, _ := AnyFrozen(dst.rw); !frozen {
		t.Fatal("no frozen records left after the first page")
	}
	if n := paged(dst, act); n < 1 {
		t.Fatalf("activate in %d pages", n)
	}
	fin.FinishExport.From = res.GetStart()
	paged(src, fin)
	if got := snapshot(t, dst, p); got != want {
		g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
		for i := range min(len(g), len(w)) {
			if g[i] != w[i] {
				t.Fatalf("the target's copy differs from the source's subtree (%d lines, want %d), first at line %d:\n%s\nwant\n%s", len(g), len(w), i, g[i], w[i])
			}
		}
		t.Fatalf("the target's copy differs from the source's subtree (%d lines, want %d)", len(g), len(w))
	}
	if frozen, _ := AnyFrozen(dst.rw); frozen {
		t.Fatal("frozen records left at the target")
	}
	if ents, _, _, _ := Readdir(src.rw, root, nil, 10); len(ents) != 1 || ents[0].GetMinistry() != 7 {
		t.Fatalf("the source's root: %v", ents)
	}
}
