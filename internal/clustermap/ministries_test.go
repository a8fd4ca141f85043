package clustermap

import (
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
}
