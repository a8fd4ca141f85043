package clustermap

import (
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/govfs/govfs/internal/wire"
)

func TestMinistriesNodesAndMoves(t *testing.T) {
	b := newStore(t)
	var m Map
	seq := uint64(0)
	errno := func(r *wire.Result) syscall.Errno { return syscall.Errno(r.GetErrno()) }
	apply := func(op any) *wire.Result {
		t.Helper()
		seq++
		c := &wire.Command{Version: 1, NowNs: int64(seq), Req: &wire.RequestID{ClientId: 1, Seq: seq, FirstIncomplete: seq}}
		switch o := op.(type) {
		case *wire.InitClusterOp:
			c.Op = &wire.Command_InitCluster{InitCluster: o}
		case *wire.JoinNodeOp:
			c.Op = &wire.Command_JoinNode{JoinNode: o}
		case *wire.BeginMoveOp:
			c.Op = &wire.Command_BeginMove{BeginMove: o}
		case *wire.MoveStateOp:
			c.Op = &wire.Command_MoveState{MoveState: o}
		case *wire.AllocInodesOp:
			c.Op = &wire.Command_AllocInodes{AllocInodes: o}
		}
		r, err := m.Apply(b, seq, c)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	apply(&wire.InitClusterOp{ClusterId: "c", Members: []*wire.Member{{Id: 1, Addr: "a1"}, {Id: 2, Addr: "a2"}, {Id: 3, Addr: "a3"}}})
	ms, _ := Ministries(b)
	if len(ms) != 1 || ms[0].GetGroup() != 1 || ms[0].GetSubtrees()[0].GetPath() != "/" || len(ms[0].GetMembers()) != 3 {
		t.Fatalf("after formation: %v", ms)
	}
	if r := apply(&wire.JoinNodeOp{Addr: "a4"}); r.GetStart() != 4 {
		t.Fatalf("join: %v", r)
	}
	if r := apply(&wire.JoinNodeOp{Addr: "a4"}); errno(r) != syscall.EEXIST {
		t.Fatalf("a second join from the same address (a node that lost its data): %v", r)
	}
	// Refused, changing nothing.
	for _, c := range []struct {
		op   *wire.BeginMoveOp
		want syscall.Errno
	}{
		{&wire.BeginMoveOp{Ino: 1, Parent: 1, Name: []byte("x"), Path: "/", Source: 1, Members: []uint64{4}}, syscall.EINVAL},
		{&wire.BeginMoveOp{Ino: 50, Parent: 1, Name: []byte("p"), Path: "/p", Source: 9, Members: []uint64{4}}, syscall.ENOENT},
		{&wire.BeginMoveOp{Ino: 50, Parent: 1, Name: []byte("p"), Path: "/p", Source: 1, Members: []uint64{4, 77}}, syscall.ENOENT},
		{&wire.BeginMoveOp{Ino: 50, Parent: 1, Name: []byte("p"), Path: "/p", Source: 1, Members: []uint64{4, 4}}, syscall.EINVAL},
		{&wire.BeginMoveOp{Ino: 50, Parent: 1, Name: []byte("p"), Path: "/p", Source: 1, Target: 5}, syscall.ENOENT},
		{&wire.BeginMoveOp{Ino: 50, Parent: 1, Name: []byte("p"), Path: "/p", Source: 1, Target: 1}, syscall.EINVAL},
	} {
		if r := apply(c.op); errno(r) != c.want {
			t.Errorf("%v: %v (%s), want %v", c.op, errno(r), r.GetMessage(), c.want)
		}
	}
	if ms, _ := Ministries(b); len(ms) != 1 {
		t.Fatalf("refused moves created ministries: %v", ms)
	}
	r := apply(&wire.BeginMoveOp{Ino: 50, Parent: 1, Name: []byte("p"), Path: "/p", Source: 1, Members: []uint64{4, 2, 3}})
	if errno(r) != 0 || r.GetStart() != 1 || r.GetEnd() != 2 {
		t.Fatalf("begin move: %v", r)
	}
	if r := apply(&wire.BeginMoveOp{Ino: 60, Parent: 1, Name: []byte("q"), Path: "/q", Source: 1, Target: 2}); errno(r) != syscall.EBUSY {
		t.Fatalf("second move from a ministry with one under way: %v", r)
	}
	if r := apply(&wire.MoveStateOp{Id: 1, State: wire.MoveState_MOVE_DONE}); errno(r) != syscall.EINVAL {
		t.Fatalf("COPYING -> DONE: %v", r)
	}
	apply(&wire.MoveStateOp{Id: 1, State: wire.MoveState_MOVE_COMMITTED})
	if r := apply(&wire.MoveStateOp{Id: 1, State: wire.MoveState_MOVE_COMMITTED}); errno(r) != 0 {
		t.Fatalf("repeated commit: %v", r)
	}
	g2, _ := GetMinistry(b, 2)
	g1, _ := GetMinistry(b, 1)
	if g2.GetEpoch() != 2 || len(g2.GetSubtrees()) != 1 || g2.GetSubtrees()[0].GetIno() != 50 || g2.GetMembers()[0] != 4 || g1.GetEpoch() != 2 {
		t.Fatalf("after commit: %v / %v", g1, g2)
	}
	if r := apply(&wire.MoveStateOp{Id: 1, State: wire.MoveState_MOVE_ABORTED}); errno(r) != syscall.EINVAL {
		t.Fatalf("abort after commit: %v", r)
	}
	apply(&wire.MoveStateOp{Id: 1, State: wire.MoveState_MOVE_DONE})
	if r := apply(&wire.BeginMoveOp{Ino: 50, Parent: 1, Name: []byte("p"), Path: "/p", Source: 1, Members: []uint64{4}}); errno(r) != syscall.EEXIST {
		t.Fatalf("assign of a subtree root again: %v", r)
	}
	// Inode ranges remember their ministry.
	a := apply(&wire.AllocInodesOp{Ministry: 2, Count: 100})
	if o, _ := InodeRangeOwner(b, a.GetStart()+5); o != 2 {
		t.Fatalf("owner of an inode of ministry 2's range: %d", o)
	}
	if o, _ := InodeRangeOwner(b, a.GetEnd()); o != 0 {
		t.Fatalf("owner of an inode not handed out: %d", o)
	}
	if r := apply(&wire.AllocInodesOp{Ministry: 9, Count: 10}); errno(r) != syscall.ENOENT {
		t.Fatalf("grant to a ministry that does not exist: %v", r)
	}
	// The kept list answers as the store does, inside, between and
	// beyond the grants.
	apply(&wire.AllocInodesOp{Ministry: 1, Count: 50})
	last := apply(&wire.AllocInodesOp{Ministry: 2, Count: 7})
	ranges, err := InodeRanges(b)
	if err != nil || len(ranges) < 3 {
		t.Fatalf("ranges: %v %v", ranges, err)
	}
	for ino := uint64(0); ino <= last.GetEnd()+3; ino++ {
		want, _ := InodeRangeOwner(b, ino)
		if got := OwnerIn(ranges, ino); got != want {
			t.Fatalf("owner of %d from the list: %d, from the store: %d", ino, got, want)
		}
	}
}

// TestDissolveMinistry: the ministry an aborted `assign --new` created is
// dissolved (gone from the map, listed as dissolved, a repeat is a
// no-op); the root ministry, one holding a subtree, one that held one
// and one in a move under way are refused, and nothing changes.
func TestDissolveMinistry(t *testing.T) {
	b := newStore(t)
	var m Map
	seq := uint64(0)
	apply := func(op any) *wire.Result {
		t.Helper()
		seq++
		c := &wire.Command{Version: 1, NowNs: int64(seq), Req: &wire.RequestID{ClientId: 1, Seq: seq, FirstIncomplete: seq}}
		switch o := op.(type) {
		case *wire.InitClusterOp:
			c.Op = &wire.Command_InitCluster{InitCluster: o}
		case *wire.BeginMoveOp:
			c.Op = &wire.Command_BeginMove{BeginMove: o}
		case *wire.MoveStateOp:
			c.Op = &wire.Command_MoveState{MoveState: o}
		case *wire.DissolveMinistryOp:
			c.Op = &wire.Command_DissolveMinistry{DissolveMinistry: o}
		}
		r, err := m.Apply(b, seq, c)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	errno := func(r *wire.Result) syscall.Errno { return syscall.Errno(r.GetErrno()) }
	apply(&wire.InitClusterOp{ClusterId: "c", Members: []*wire.Member{{Id: 1, Addr: "a1"}, {Id: 2, Addr: "a2"}, {Id: 3, Addr: "a3"}}})
	begin := func(ino uint64, path string, target uint64, unassign bool) (move, ministry uint64) {
		t.Helper()
		op := &wire.BeginMoveOp{Ino: ino, Parent: 1, Name: []byte(path[1:]), Path: path, Source: 1, Target: target, Unassign: unassign}
		if target == 0 && !unassign {
			op.Members = []uint64{1, 2, 3}
		}
		if unassign {
			op.Source, op.Target = target, 1
		}
		r := apply(op)
		if r.GetErrno() != 0 {
			t.Fatalf("begin move of %s: %v", path, r)
		}
		return r.GetStart(), r.GetEnd()
	}
	ministries := func() []uint64 {
		ms, err := Ministries(b)
		if err != nil {
			t.Fatal(err)
		}
		var out []uint64
		for _, x := range ms {
			out = append(out, x.GetGroup())
		}
		return out
	}

	// An assign --new that aborts: its ministry is dissolved.
	mv, g := begin(50, "/a", 0, false)
	moves, _ := Moves(b)
	if !moves[len(moves)-1].GetNewMinistry() {
		t.Fatal("the move of an assign --new does not say it created its target")
	}
	if r := apply(&wire.DissolveMinistryOp{Ministry: g}); errno(r) != syscall.EBUSY {
		t.Fatalf("dissolve during the move: %v, want EBUSY", r)
	}
	apply(&wire.MoveStateOp{Id: mv, State: wire.MoveState_MOVE_ABORTED})
	if r := apply(&wire.DissolveMinistryOp{Ministry: g}); errno(r) != 0 {
		t.Fatalf("dissolve after the abort: %v", r)
	}
	if r := apply(&wire.DissolveMinistryOp{Ministry: g}); errno(r) != 0 {
		t.Fatalf("repeated dissolve: %v", r)
	}
	if d, _ := Dissolved(b); !slices.Equal(d, []uint64{g}) || slices.Contains(ministries(), g) {
		t.Fatalf("after dissolving %d: dissolved %v, ministries %v", g, d, ministries())
	}

	// Refused: root, holding a subtree, held one once, unknown.
	_, h := begin(60, "/b", 0, false)
	moves, _ = Moves(b)
	apply(&wire.MoveStateOp{Id: moves[len(moves)-1].GetId(), State: wire.MoveState_MOVE_COMMITTED})
	apply(&wire.MoveStateOp{Id: moves[len(moves)-1].GetId(), State: wire.MoveState_MOVE_DONE})
	before := ministries()
	for _, c := range []struct {
		g    uint64
		want syscall.Errno
	}{{1, syscall.EBUSY}, {h, syscall.EBUSY}, {99, syscall.ENOENT}} {
		if r := apply(&wire.DissolveMinistryOp{Ministry: c.g}); errno(r) != c.want {
			t.Fatalf("dissolve %d: %v, want %v", c.g, r, c.want)
		}
	}
	back, _ := begin(60, "/b", h, true)
	apply(&wire.MoveStateOp{Id: back, State: wire.MoveState_MOVE_COMMITTED})
	apply(&wire.MoveStateOp{Id: back, State: wire.MoveState_MOVE_DONE})
	if r := apply(&wire.DissolveMinistryOp{Ministry: h}); errno(r) != syscall.EBUSY || !strings.Contains(r.GetMessage(), "held") {
		t.Fatalf("dissolve a ministry emptied by unassign: %v, want EBUSY (it held inodes)", r)
	}
	if !slices.Equal(ministries(), before) {
		t.Fatalf("refused dissolves changed the ministries: %v, was %v", ministries(), before)
	}
}
