package namespace

import (
	"slices"
	"syscall"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/wire"
)

func createWith(parent ids.Ino, name string, typ wire.FileType, ino uint64) *wire.Command_Create {
	return &wire.Command_Create{Create: &wire.CreateOp{Parent: uint64(parent), Name: []byte(name), Type: typ, Mode: 0o644, Exclusive: true, Ino: ino}}
}

func subCmd(client, seq uint64, op *wire.Command_Create) *wire.Command {
	return &wire.Command{Version: 1, Req: &wire.RequestID{ClientId: client, Seq: seq}, Op: op}
}

// TestReservedInodes: a client creates with numbers it reserved, in
// increasing order, and nobody else's; the ministry never hands them out
// itself.
func TestReservedInodes(t *testing.T) {
	v := newEnv(t)
	const c1, c2 = 7, 8
	res := v.cmd(&wire.Command_ReserveInodes{ReserveInodes: &wire.ReserveInodesOp{Count: 10}}, &wire.RequestID{ClientId: c1, Seq: 1})
	if res.Errno != 0 || res.End-res.Start != 10 {
		t.Fatalf("reserve: %v", res)
	}
	start := res.Start
	// The ministry's own allocation skips the reserved range.
	if ino := v.mkfile(root, "plain"); uint64(ino) >= start && uint64(ino) < start+10 {
		t.Fatalf("ministry allocated reserved inode %d", ino)
	}
	if r := v.cmd(createWith(root, "a", wire.FileType_REGULAR, start+2), &wire.RequestID{ClientId: c1, Seq: 2}); r.Errno != 0 || r.Attr.Ino != start+2 {
		t.Fatalf("create with reserved ino: %v", r)
	}
	v.mustLookup(root, "a", ids.Ino(start+2))
	for _, bad := range []struct {
		client uint64
		ino    uint64
		why    string
	}{
		{c1, start + 1, "below the cursor"},
		{c1, start + 2, "used"},
		{c1, start + 10, "past the end"},
		{c2, start + 5, "another client's"},
		{0, start + 5, "no client id"},
	} {
		var req *wire.RequestID
		if bad.client != 0 {
			req = &wire.RequestID{ClientId: bad.client, Seq: 100 + bad.ino}
		}
		r := v.cmd(createWith(root, "b", wire.FileType_REGULAR, bad.ino), req)
		if syscall.Errno(r.Errno) != syscall.EINVAL || r.Message == "" {
			t.Fatalf("%s: %v, want EINVAL", bad.why, r)
		}
	}
	if _, ok := v.lookup(root, "b"); ok {
		t.Fatal("a refused create left a name")
	}
	for _, bad := range []uint64{0, MaxReserve + 1} {
		r := v.cmd(&wire.Command_ReserveInodes{ReserveInodes: &wire.ReserveInodesOp{Count: bad}}, &wire.RequestID{ClientId: c1, Seq: 500 + bad})
		if syscall.Errno(r.Errno) != syscall.EINVAL {
			t.Fatalf("reserve %d: %v, want EINVAL", bad, r)
		}
	}
}

// TestReservedAhead: a reservation made ahead keeps the range the
// client numbers from (named by its end) usable beside the new one; a
// number of the new range drops the older; a plain reservation replaces
// them all. An earlier reservation ahead whose answer the client lost
// does not push the range in use out (found in review).
func TestReservedAhead(t *testing.T) {
	v := newEnv(t)
	const c = 7
	seq := uint64(0)
	req := func() *wire.RequestID { seq++; return &wire.RequestID{ClientId: c, Seq: seq} }
	reserve := func(ahead bool, keepEnd uint64) (uint64, uint64) {
		t.Helper()
		r := v.cmd(&wire.Command_ReserveInodes{ReserveInodes: &wire.ReserveInodesOp{Count: 4, Ahead: ahead, KeepEnd: keepEnd}}, req())
		if r.Errno != 0 || r.End-r.Start != 4 {
			t.Fatalf("reserve (ahead %v): %v", ahead, r)
		}
		return r.Start, r.End
	}
	create := func(name string, ino uint64, want syscall.Errno) {
		t.Helper()
		if r := v.cmd(createWith(root, name, wire.FileType_REGULAR, ino), req()); syscall.Errno(r.Errno) != want {
			t.Fatalf("create %s with inode %d: %v, want %v", name, ino, r, want)
		}
	}
	a, aEnd := reserve(false, 0)
	create("a0", a, 0)
	b, bEnd := reserve(true, aEnd)
	create("a1", a+1, 0) // the range in use still is
	create("b0", b, 0)
	create("a2", a+2, syscall.EINVAL) // b used: a dropped
	c2, _ := reserve(true, bEnd)
	create("b1", b+1, 0)
	create("c0", c2, 0)
	create("b2", b+2, syscall.EINVAL) // c2 used: b dropped
	// Two aheads while numbering from d: the first one's answer lost,
	// the second names d again; d stays usable, the first is dropped.
	d, dEnd := reserve(false, 0)
	lost, _ := reserve(true, dEnd)
	e, _ := reserve(true, dEnd)
	create("d0", d, 0)
	create("lost", lost, syscall.EINVAL)
	create("d1", d+1, 0)
	create("e0", e, 0)
	create("d2", d+2, syscall.EINVAL)
	// A plain reservation replaces every range; the last number of a
	// range ends it.
	f, _ := reserve(false, 0)
	create("e1", e+1, syscall.EINVAL)
	create("f3", f+3, 0)
	create("f0", f, syscall.EINVAL)
	// Ahead naming no range held: the new range alone.
	g, _ := reserve(true, 12345)
	create("g1", g+1, 0)
}

// TestBatch: commands of a batch apply in order, each on its own; sent
// again, the batch is answered from the recorded results.
func TestBatch(t *testing.T) {
	v := newEnv(t)
	const c = 9
	res := v.cmd(&wire.Command_ReserveInodes{ReserveInodes: &wire.ReserveInodesOp{Count: 100}}, &wire.RequestID{ClientId: c, Seq: 1})
	s := res.Start
	dir := &wire.Command_Create{Create: &wire.CreateOp{Parent: uint64(root), Name: []byte("d"), Type: wire.FileType_DIRECTORY, Mode: 0o755, Ino: s}}
	batch := &wire.BatchOp{Cmds: []*wire.Command{
		subCmd(c, 2, dir),
		subCmd(c, 3, createWith(ids.Ino(s), "f", wire.FileType_REGULAR, s+1)),
		subCmd(c, 4, createWith(ids.Ino(s), "f", wire.FileType_REGULAR, s+2)), // EEXIST
		{Version: 1, Req: &wire.RequestID{ClientId: c, Seq: 5}, Op: &wire.Command_Unlink{Unlink: &wire.UnlinkOp{Parent: s, Name: []byte("f")}}},
		subCmd(c, 6, createWith(ids.Ino(s), "g", wire.FileType_REGULAR, s+3)),
	}}
	first := v.apply(&wire.Command_Batch{Batch: proto.Clone(batch).(*wire.BatchOp)})
	want := []syscall.Errno{0, 0, syscall.EEXIST, 0, 0}
	if len(first.Results) != len(want) {
		t.Fatalf("batch: %d results, want %d", len(first.Results), len(want))
	}
	for i, w := range want {
		if syscall.Errno(first.Results[i].Errno) != w {
			t.Fatalf("batch command %d: %v, want %v", i, first.Results[i], w)
		}
	}
	v.mustLookup(ids.Ino(s), "g", ids.Ino(s+3))
	if _, ok := v.lookup(ids.Ino(s), "f"); ok {
		t.Fatal("f survived its unlink")
	}
	v.gone(ids.Ino(s + 1))
	dump := v.dump()
	again := v.apply(&wire.Command_Batch{Batch: proto.Clone(batch).(*wire.BatchOp)})
	if !proto.Equal(first, again) {
		t.Fatalf("batch sent again: %v, first %v", again, first)
	}
	if v.dump() != dump {
		t.Fatal("a batch sent again changed the state")
	}
	// A nested batch is refused.
	r := v.apply(&wire.Command_Batch{Batch: &wire.BatchOp{Cmds: []*wire.Command{{Version: 1, Op: &wire.Command_Batch{Batch: &wire.BatchOp{}}}}}})
	if len(r.Results) != 1 || syscall.Errno(r.Results[0].Errno) != syscall.EINVAL {
		t.Fatalf("nested batch: %v", r)
	}
}

// TestDirLeaseMark: a directory lease mark is kept until the directory
// goes; a file cannot be marked.
func TestDirLeaseMark(t *testing.T) {
	v := newEnv(t)
	d := v.mkdir(root, "d")
	f := v.mkfile(root, "f")
	marked := func(ino ids.Ino) bool {
		t.Helper()
		m, err := DirLeaseMarked(v.rw, ino)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	if marked(d) {
		t.Fatal("a new directory is marked")
	}
	v.ok(&wire.Command_MarkDirLease{MarkDirLease: &wire.MarkDirLeaseOp{Dir: uint64(d)}})
	v.ok(&wire.Command_MarkDirLease{MarkDirLease: &wire.MarkDirLeaseOp{Dir: uint64(d)}}) // again: the same
	if !marked(d) {
		t.Fatal("the mark is missing")
	}
	v.fails(&wire.Command_MarkDirLease{MarkDirLease: &wire.MarkDirLeaseOp{Dir: uint64(f)}}, syscall.ENOTDIR)
	v.ok(&wire.Command_Unlink{Unlink: &wire.UnlinkOp{Parent: uint64(root), Name: []byte("d"), Dir: true}})
	if marked(d) {
		t.Fatal("the mark outlived its directory")
	}
	// A directory made by a creator holding its lease already is marked
	// by its create; a file cannot be made so, and nothing changes.
	born := v.ok(&wire.Command_Create{Create: &wire.CreateOp{Parent: uint64(root), Name: []byte("born"), Type: wire.FileType_DIRECTORY, Mode: 0o755, MarkDirLease: true}})
	if !marked(ids.Ino(born.GetAttr().GetIno())) {
		t.Fatal("a directory created with mark_dir_lease is not marked")
	}
	before := v.dump()
	v.fails(&wire.Command_Create{Create: &wire.CreateOp{Parent: uint64(root), Name: []byte("g"), Type: wire.FileType_REGULAR, Mode: 0o644, MarkDirLease: true}}, syscall.EINVAL)
	if v.dump() != before {
		t.Fatal("a refused create changed the state")
	}
}

// TestLeaseSessions: sessions open and close in one command for many
// clients, are listed in order, and bad input changes nothing.
func TestLeaseSessions(t *testing.T) {
	v := newEnv(t)
	list := func() []uint64 {
		t.Helper()
		l, err := LeaseSessions(v.rw)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	v.ok(&wire.Command_LeaseSession{LeaseSession: &wire.LeaseSessionOp{Clients: []uint64{9, 3, 5}, Open: true}})
	v.ok(&wire.Command_LeaseSession{LeaseSession: &wire.LeaseSessionOp{Clients: []uint64{3}, Open: true}}) // again
	if got := list(); !slices.Equal(got, []uint64{3, 5, 9}) {
		t.Fatalf("sessions %v, want [3 5 9]", got)
	}
	v.ok(&wire.Command_LeaseSession{LeaseSession: &wire.LeaseSessionOp{Clients: []uint64{5, 7}}})
	if got := list(); !slices.Equal(got, []uint64{3, 9}) {
		t.Fatalf("sessions after closing 5 and 7: %v", got)
	}
	if open, err := LeaseSessionOpen(v.rw, 9); err != nil || !open {
		t.Fatalf("session 9 open: %v %v", open, err)
	}
	dump := v.dump()
	v.fails(&wire.Command_LeaseSession{LeaseSession: &wire.LeaseSessionOp{Clients: []uint64{4, 0}, Open: true}}, syscall.EINVAL)
	v.fails(&wire.Command_LeaseSession{LeaseSession: &wire.LeaseSessionOp{Clients: make([]uint64, MaxSessionClients+1)}}, syscall.EINVAL)
	if v.dump() != dump {
		t.Fatal("a refused session op changed the state")
	}
}
