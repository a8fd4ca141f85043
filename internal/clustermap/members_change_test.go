package clustermap

import (
	"slices"
	"syscall"
	"testing"

	"github.com/govfs/govfs/internal/wire"
)

func TestSetMembers(t *testing.T) {
	b := newStore(t)
	var m Map
	seq := uint64(0)
	apply := func(op *wire.Command) *wire.Result {
		t.Helper()
		seq++
		op.Version, op.Req = 1, &wire.RequestID{ClientId: 1, Seq: seq, FirstIncomplete: seq}
		r, err := m.Apply(b, seq, op)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	set := func(g uint64, members, prior []uint64) *wire.Result {
		return apply(&wire.Command{Op: &wire.Command_SetMembers{SetMembers: &wire.SetMembersOp{Ministry: g, Members: members, Prior: prior}}})
	}
	apply(&wire.Command{Op: &wire.Command_InitCluster{InitCluster: &wire.InitClusterOp{ClusterId: "c",
		Members: []*wire.Member{{Id: 1, Addr: "a1"}, {Id: 2, Addr: "a2"}, {Id: 3, Addr: "a3"}}}}})
	apply(&wire.Command{Op: &wire.Command_JoinNode{JoinNode: &wire.JoinNodeOp{Addr: "a4"}}})

	// The root ministry of a map from before membership changes: its
	// founders are its members.
	if r := set(1, []uint64{2, 3, 4}, []uint64{1, 2, 3}); r.GetErrno() != 0 {
		t.Fatalf("replace node 1 by 4 in the root ministry: %v", r)
	}
	root, _ := GetMinistry(b, 1)
	if !slices.Equal(root.GetMembers(), []uint64{2, 3, 4}) || !slices.Equal(Founders(root), []uint64{1, 2, 3}) {
		t.Fatalf("root ministry after the change: %v", root)
	}
	// Refused, and nothing changes: a stale prior, an unknown node, a
	// repeated node, no members, the president group, a missing ministry.
	for _, tc := range []struct {
		g              uint64
		members, prior []uint64
		want           syscall.Errno
	}{
		{1, []uint64{1, 2, 3}, []uint64{1, 2, 3}, syscall.EAGAIN},
		{1, []uint64{2, 3, 9}, []uint64{2, 3, 4}, syscall.ENOENT},
		{1, []uint64{2, 2, 3}, []uint64{2, 3, 4}, syscall.EINVAL},
		{1, nil, []uint64{2, 3, 4}, syscall.EINVAL},
		{0, []uint64{1, 2, 3}, nil, syscall.EINVAL},
		{7, []uint64{1, 2, 3}, nil, syscall.ENOENT},
	} {
		if r := set(tc.g, tc.members, tc.prior); syscall.Errno(r.GetErrno()) != tc.want || r.GetMessage() == "" {
			t.Errorf("set %d to %v (prior %v): %v, want %v", tc.g, tc.members, tc.prior, r, tc.want)
		}
	}
	if again, _ := GetMinistry(b, 1); !slices.Equal(again.GetMembers(), []uint64{2, 3, 4}) || !slices.Equal(Founders(again), []uint64{1, 2, 3}) {
		t.Fatalf("refused changes changed the ministry: %v", again)
	}
	// A new ministry records its founders; they stay across changes.
	r := apply(&wire.Command{Op: &wire.Command_CreateMinistry{CreateMinistry: &wire.CreateMinistryOp{Members: []uint64{4, 2, 3}}}})
	g := r.GetStart()
	if r := set(g, []uint64{4, 2, 1}, []uint64{4, 2, 3}); r.GetErrno() != 0 {
		t.Fatal(r)
	}
	if r := set(g, []uint64{4, 1, 3}, []uint64{4, 2, 1}); r.GetErrno() != 0 {
		t.Fatal(r)
	}
	if mm, _ := GetMinistry(b, g); !slices.Equal(mm.GetMembers(), []uint64{4, 1, 3}) || !slices.Equal(Founders(mm), []uint64{4, 2, 3}) {
		t.Fatalf("ministry %d: %v", g, mm)
	}
}
