package clustermap

import (
	"syscall"
	"testing"

	"github.com/govfs/govfs/internal/engine"
	"github.com/govfs/govfs/internal/wire"
)

func newStore(t *testing.T) *engine.Batch {
	e, err := engine.Open(t.TempDir(), engine.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	b := e.NewBatch()
	t.Cleanup(b.Close)
	return b
}

func cmd(client, seq uint64, op any) *wire.Command {
	c := &wire.Command{Version: 1, Req: &wire.RequestID{ClientId: client, Seq: seq, FirstIncomplete: seq}}
	switch o := op.(type) {
	case *wire.InitClusterOp:
		c.Op = &wire.Command_InitCluster{InitCluster: o}
	case *wire.AllocInodesOp:
		c.Op = &wire.Command_AllocInodes{AllocInodes: o}
	case *wire.CreateOp:
		c.Op = &wire.Command_Create{Create: o}
	}
	return c
}

func TestInitAndAllocate(t *testing.T) {
	b := newStore(t)
	var m Map
	apply := func(c *wire.Command) *wire.Result {
		t.Helper()
		r, err := m.Apply(b, 1, c)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := apply(cmd(1, 1, &wire.AllocInodesOp{Ministry: 1, Count: 10})); syscall.Errno(r.Errno) != syscall.EAGAIN {
		t.Fatalf("alloc before init = %v, want EAGAIN", r)
	}
	apply(cmd(1, 2, &wire.InitClusterOp{ClusterId: "abc"}))
	if r := apply(cmd(1, 3, &wire.InitClusterOp{ClusterId: "other"})); r.Message != "abc" {
		t.Fatalf("second init changed the cluster id: %v", r)
	}
	if id, _ := ClusterID(b); id != "abc" {
		t.Fatalf("cluster id %q", id)
	}
	r1 := apply(cmd(1, 4, &wire.AllocInodesOp{Ministry: 1, Count: 10}))
	r2 := apply(cmd(1, 5, &wire.AllocInodesOp{Ministry: 1, Count: 5}))
	if r1.Start != 2 || r1.End != 12 || r2.Start != 12 || r2.End != 17 {
		t.Fatalf("grants %v %v: want [2,12) then [12,17)", r1, r2)
	}
	// A retried request gets the first answer, not a second range.
	if r := apply(cmd(1, 5, &wire.AllocInodesOp{Ministry: 1, Count: 5})); r.Start != 12 {
		t.Fatalf("retry answered %v", r)
	}
	if next, _ := NextIno(b); next != 17 {
		t.Fatalf("next ino %d after a retried grant, want 17", next)
	}
	for _, bad := range []*wire.Command{
		cmd(1, 6, &wire.AllocInodesOp{Ministry: 1, Count: 0}),
		cmd(1, 7, &wire.AllocInodesOp{Ministry: 1, Count: MaxAlloc + 1}),
		cmd(1, 8, &wire.CreateOp{Name: []byte("x")}),
	} {
		if r := apply(bad); syscall.Errno(r.Errno) != syscall.EINVAL {
			t.Errorf("%v = %v, want EINVAL", bad, r)
		}
	}
	if _, err := m.Apply(b, 1, &wire.Command{Version: 2}); err == nil {
		t.Fatal("unknown command version accepted")
	}
}
