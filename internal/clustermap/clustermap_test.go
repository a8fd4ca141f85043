package clustermap

import (
	"syscall"
	"testing"

	"github.com/govfs/govfs/internal/engine"
	"github.com/govfs/govfs/internal/wire"
	"google.golang.org/protobuf/reflect/protoreflect"
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
	// Answers below the client's first incomplete request are dropped, and
	// a late copy of such a request is refused rather than applied again.
	late := cmd(1, 5, &wire.AllocInodesOp{Ministry: 1, Count: 5})
	c9 := cmd(1, 19, &wire.AllocInodesOp{Ministry: 1, Count: 1})
	c9.Req.FirstIncomplete = 19
	apply(c9)
	if v, _ := b.Get(dedupKey(&wire.RequestID{ClientId: 1, Seq: 5})); v != nil {
		t.Fatal("answer below first_incomplete kept")
	}
	if r := apply(late); syscall.Errno(r.Errno) != syscall.EINVAL {
		t.Fatalf("late copy of a dropped request = %v, want EINVAL", r)
	}
	if next, _ := NextIno(b); next != 18 {
		t.Fatalf("next ino %d, want 18 (the late copy must not allocate)", next)
	}
}

func TestChunkServersAndReplicaGroups(t *testing.T) {
	b := newStore(t)
	var m Map
	seq := uint64(100)
	apply := func(op isCommandOp) *wire.Result {
		t.Helper()
		seq++
		c := &wire.Command{Version: 1, Req: &wire.RequestID{ClientId: 0x67676767, Seq: seq, FirstIncomplete: seq}}
		switch o := op.(type) {
		case *wire.RegisterChunkServerOp:
			c.Op = &wire.Command_RegisterChunkServer{RegisterChunkServer: o}
		case *wire.CreateReplicaGroupOp:
			c.Op = &wire.Command_CreateReplicaGroup{CreateReplicaGroup: o}
		case *wire.AllocChunkHandlesOp:
			c.Op = &wire.Command_AllocChunkHandles{AllocChunkHandles: o}
		}
		r, err := m.Apply(b, seq, c)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	reg := func(store, host string) *wire.Result {
		return apply(&wire.RegisterChunkServerOp{Server: &wire.ChunkServer{Addr: host + ":9000", Host: host, Rack: "r-" + host, StoreId: store, Capacity: 1 << 40, ChunkSize: 1 << 26}})
	}
	a, bb, c := reg("sa", "ha"), reg("sb", "hb"), reg("sc", "hc")
	if a.Start != 1 || bb.Start != 2 || c.Start != 3 {
		t.Fatalf("ids %d %d %d, want 1 2 3", a.Start, bb.Start, c.Start)
	}
	// The same store re-registering (new address) keeps its id.
	if r := apply(&wire.RegisterChunkServerOp{Server: &wire.ChunkServer{Addr: "ha:9999", Host: "ha", StoreId: "sa", Capacity: 5, ChunkSize: 1 << 26}}); r.Start != 1 {
		t.Fatalf("re-registration got id %d", r.Start)
	}
	if s, _ := ChunkServer(b, 1); s.GetAddr() != "ha:9999" || s.GetCapacity() != 5 {
		t.Fatalf("re-registration not recorded: %v", s)
	}
	// A store registered by a certificate stays that certificate's: the
	// same name may re-register, a plaintext registration keeps the
	// name, another name is refused and changes nothing.
	certReg := func(name, addr string) *wire.Result {
		return apply(&wire.RegisterChunkServerOp{Server: &wire.ChunkServer{Addr: addr, Host: "ha", StoreId: "sa", Capacity: 5, ChunkSize: 1 << 26, CertName: name}})
	}
	if r := certReg("cs-a", "ha:9999"); r.Errno != 0 || r.Start != 1 {
		t.Fatalf("registration with a certificate name: %v", r)
	}
	if r := certReg("", "ha:9999"); r.Errno != 0 {
		t.Fatalf("plaintext re-registration: %v", r)
	}
	if s, _ := ChunkServer(b, 1); s.GetCertName() != "cs-a" {
		t.Fatalf("plaintext re-registration dropped the certificate name: %v", s)
	}
	if r := certReg("rogue", "evil:1"); syscall.Errno(r.Errno) != syscall.EPERM {
		t.Fatalf("another certificate taking over store sa = %v, want EPERM", r)
	}
	if s, _ := ChunkServer(b, 1); s.GetAddr() != "ha:9999" || s.GetCertName() != "cs-a" {
		t.Fatalf("a refused takeover changed the record: %v", s)
	}
	for _, bad := range []*wire.RegisterChunkServerOp{{}, {Server: &wire.ChunkServer{Addr: "x:1", Host: "x"}}, {Server: &wire.ChunkServer{StoreId: "s", Host: "x"}},
		{Server: &wire.ChunkServer{StoreId: "s", Addr: "x:1", Host: "x", Capacity: -1, ChunkSize: 1 << 26}},
		{Server: &wire.ChunkServer{StoreId: "s", Addr: "x:1", Host: "x", Capacity: 1}},
		{Server: &wire.ChunkServer{StoreId: "s", Addr: "x:1", Host: "x", Capacity: 1, ChunkSize: 1 << 20}}} {
		if r := apply(bad); syscall.Errno(r.Errno) != syscall.EINVAL {
			t.Errorf("register %v = %v, want EINVAL", bad, r)
		}
	}
	g := apply(&wire.CreateReplicaGroupOp{Members: []uint64{2, 1, 3}})
	if g.Errno != 0 || g.Start != 1 {
		t.Fatalf("create group = %v", g)
	}
	if r := apply(&wire.CreateReplicaGroupOp{Members: []uint64{1, 9}}); syscall.Errno(r.Errno) != syscall.ENOENT {
		t.Errorf("group with an unknown member = %v", r)
	}
	reg("sd", "ha") // a second store on host ha
	if r := apply(&wire.CreateReplicaGroupOp{Members: []uint64{1, 4}}); syscall.Errno(r.Errno) != syscall.EINVAL {
		t.Errorf("group with two members on one host = %v", r)
	}
	if r := apply(&wire.CreateReplicaGroupOp{}); syscall.Errno(r.Errno) != syscall.EINVAL {
		t.Errorf("empty group = %v", r)
	}
	groups, err := ReplicaGroups(b)
	if err != nil || len(groups) != 1 || groups[0].GetPrimary() != 2 || groups[0].GetEpoch() != 1 {
		t.Fatalf("groups %v %v (dedup records of client 0x67… must not show up)", groups, err)
	}
	servers, err := ChunkServers(b)
	if err != nil || len(servers) != 4 {
		t.Fatalf("servers %d %v", len(servers), err)
	}
	h1 := apply(&wire.AllocChunkHandlesOp{Count: 100})
	h2 := apply(&wire.AllocChunkHandlesOp{Count: 1})
	if h1.Start != 1 || h1.End != 101 || h2.Start != 101 {
		t.Fatalf("handle grants %v %v", h1, h2)
	}
	if r := apply(&wire.AllocChunkHandlesOp{}); syscall.Errno(r.Errno) != syscall.EINVAL {
		t.Errorf("zero handles = %v", r)
	}
}

type isCommandOp interface{ ProtoReflect() protoreflect.Message }
