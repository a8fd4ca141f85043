package clustermap

import (
	"slices"
	"syscall"
	"testing"

	"github.com/govfs/govfs/internal/wire"
)

func TestReplaceMemberAndSync(t *testing.T) {
	b := newStore(t)
	var m Map
	seq := uint64(0)
	apply := func(c *wire.Command) *wire.Result {
		t.Helper()
		seq++
		c.Version, c.Req = 1, &wire.RequestID{ClientId: 0x7777, Seq: seq, FirstIncomplete: seq}
		r, err := m.Apply(b, seq, c)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	for i, host := range []string{"ha", "hb", "hc", "hd", "ha"} {
		apply(&wire.Command{Op: &wire.Command_RegisterChunkServer{RegisterChunkServer: &wire.RegisterChunkServerOp{Server: &wire.ChunkServer{
			Addr: host + ":1", Host: host, StoreId: string(rune('a' + i)), Capacity: 1 << 30, ChunkSize: 1 << 26}}}})
	}
	apply(&wire.Command{Op: &wire.Command_CreateReplicaGroup{CreateReplicaGroup: &wire.CreateReplicaGroupOp{Members: []uint64{1, 2, 3}}}})
	replace := func(old, nw, epoch uint64) *wire.Result {
		return apply(&wire.Command{Op: &wire.Command_ReplaceMember{ReplaceMember: &wire.ReplaceMemberOp{Group: 1, Old: old, New: nw, Epoch: epoch}}})
	}
	synced := func(member, epoch uint64) *wire.Result {
		return apply(&wire.Command{Op: &wire.Command_MemberSynced{MemberSynced: &wire.MemberSyncedOp{Group: 1, Member: member, Epoch: epoch}}})
	}
	group := func() *wire.ReplicaGroup {
		g, err := ReplicaGroup(b, 1)
		if err != nil || g == nil {
			t.Fatalf("group 1: %v %v", g, err)
		}
		return g
	}
	// Bad changes are refused and change nothing.
	for _, c := range []struct {
		r    *wire.Result
		want syscall.Errno
	}{
		{replace(1, 4, 7), syscall.ESTALE},  // planned at another epoch
		{replace(9, 4, 1), syscall.ENOENT},  // not a member
		{replace(1, 2, 1), syscall.EEXIST},  // already a member
		{replace(1, 99, 1), syscall.ENOENT}, // not registered
		{replace(2, 5, 1), syscall.EINVAL},  // same host as member 1
		{replace(0, 0, 1), syscall.EINVAL},
		{synced(4, 1), syscall.EINVAL}, // not syncing
	} {
		if syscall.Errno(c.r.Errno) != c.want {
			t.Errorf("got %v, want %v", c.r, c.want)
		}
	}
	if g := group(); g.GetEpoch() != 1 || !slices.Equal(g.GetMembers(), []uint64{1, 2, 3}) {
		t.Fatalf("refused changes changed the group: %v", g)
	}
	// The primary (1) dies: 4 replaces it and syncs; 2 becomes primary.
	if r := replace(1, 4, 1); r.Errno != 0 || r.Start != 2 {
		t.Fatalf("replace: %v", r)
	}
	g := group()
	if !slices.Equal(g.GetMembers(), []uint64{2, 3, 4}) || !slices.Equal(g.GetSyncing(), []uint64{4}) || g.GetPrimary() != 2 || g.GetEpoch() != 2 {
		t.Fatalf("after replace: %v", g)
	}
	if r := synced(4, 1); syscall.Errno(r.Errno) != syscall.ESTALE {
		t.Fatalf("sync reported at an old epoch: %v", r)
	}
	if r := synced(4, 2); r.Errno != 0 {
		t.Fatalf("synced: %v", r)
	}
	if g := group(); len(g.GetSyncing()) != 0 || g.GetEpoch() != 3 {
		t.Fatalf("after sync: %v", g)
	}
	// With no spare, a dead member is dropped; the last full member is
	// never dropped.
	if r := replace(3, 0, 3); r.Errno != 0 {
		t.Fatalf("drop: %v", r)
	}
	if r := replace(4, 0, 4); r.Errno != 0 {
		t.Fatalf("drop: %v", r)
	}
	if r := replace(2, 0, 5); syscall.Errno(r.Errno) != syscall.EINVAL {
		t.Fatalf("dropping the last member: %v", r)
	}
	// A server coming back joins as a syncing member.
	if r := replace(0, 3, 5); r.Errno != 0 {
		t.Fatalf("add: %v", r)
	}
	if g := group(); !slices.Equal(g.GetMembers(), []uint64{2, 3}) || !slices.Equal(g.GetSyncing(), []uint64{3}) || g.GetPrimary() != 2 {
		t.Fatalf("after add: %v", g)
	}
}
