package chunkserver

import (
	"encoding/binary"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/govfs/govfs/internal/chunkstore"
	"github.com/govfs/govfs/internal/dataproto"
	"github.com/govfs/govfs/internal/rpc"
	"github.com/govfs/govfs/internal/wire"
	"google.golang.org/protobuf/proto"
)

// bareServer is a chunk server without a president: its group table is
// set by the test (as a heartbeat reply would) and its lease is fresh.
func bareServer(t *testing.T, id uint64) *Server {
	t.Helper()
	sc := chunkstore.DefaultConfig()
	sc.Dir, sc.ClusterID, sc.NoSync, sc.ChunkSize = t.TempDir(), "review", true, 1<<20
	sc.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := chunkstore.Open(sc)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{cfg: Config{RepairRate: -1}, log: sc.Logger, store: st, lis: lis, pool: rpc.NewPool(nil), id: id,
		stop: make(chan struct{}), conns: map[net.Conn]struct{}{}, lastBeat: time.Now()}
	s.wg.Add(1)
	go func() { defer s.wg.Done(); s.serve() }()
	t.Cleanup(s.Stop)
	return s
}

func setGroup(s *Server, g *wire.ReplicaGroup, addrs map[uint64]string) {
	s.groups.set([]*wire.ReplicaGroup{proto.Clone(g).(*wire.ReplicaGroup)}, addrs)
}

// A member that has just been reported full (MemberSyncedOp committed,
// epoch e+1) and has learnt it from its heartbeat refuses the primary's
// forwards at epoch e with StaleEpoch. The primary, still at e, sees it as
// syncing, but must not acknowledge the write: the member may be full
// already, and would lack an acknowledged write (found in review).
func TestWriteFailsWhenAMemberIsAtANewerEpoch(t *testing.T) {
	p, c, m := bareServer(t, 1), bareServer(t, 2), bareServer(t, 3)
	addrs := map[uint64]string{1: p.Addr(), 2: c.Addr(), 3: m.Addr()}
	const grp = 7
	ge := &wire.ReplicaGroup{Id: grp, Members: []uint64{1, 2, 3}, Primary: 1, Epoch: 5, Syncing: []uint64{3}}
	for _, s := range []*Server{p, c, m} {
		setGroup(s, ge, addrs)
	}
	h := handle(grp, 1)
	d := dial(t, p.Addr())
	if r := d.call(&dataproto.Frame{Type: dataproto.TypeWrite, Handle: h, Group: grp, Epoch: 5, Payload: []byte("old-bytes")}); r.Status != dataproto.StatusOK {
		t.Fatalf("first write: %v %s", r.Status, r.Payload)
	}
	// The sync pass is done and the president made m full at epoch 6; m's
	// heartbeat comes first.
	g6 := &wire.ReplicaGroup{Id: grp, Members: []uint64{1, 2, 3}, Primary: 1, Epoch: 6}
	setGroup(m, g6, addrs)
	r := d.call(&dataproto.Frame{Type: dataproto.TypeWrite, Handle: h, Group: grp, Epoch: 5, Payload: []byte("NEW-bytes")})
	if r.Status == dataproto.StatusOK {
		t.Fatalf("write acknowledged at version %d although member 3 refused it (it is at a newer epoch)", r.Version)
	}
}

// A delayed install of an older copy (one whose sender timed out and moved
// on) must not replace a newer copy that holds acknowledged mutations: an
// install names the version it expects to replace (found in review).
func TestDelayedInstallIsRefused(t *testing.T) {
	s := bareServer(t, 1)
	const grp = 7
	setGroup(s, &wire.ReplicaGroup{Id: grp, Members: []uint64{1}, Primary: 1, Epoch: 1}, map[uint64]string{1: s.Addr()})
	h := handle(grp, 1)
	d := dial(t, s.Addr())
	for _, w := range []string{"v1", "v2", "v3"} {
		if r := d.call(&dataproto.Frame{Type: dataproto.TypeWrite, Handle: h, Group: grp, Epoch: 1, Payload: []byte(w)}); r.Status != dataproto.StatusOK {
			t.Fatal(r.Status)
		}
	}
	install := func(expect uint64, v uint64, data string) *dataproto.Frame {
		payload := binary.BigEndian.AppendUint64(nil, expect)
		return d.call(&dataproto.Frame{Type: dataproto.TypeInstall, Handle: h, Group: grp, Epoch: 1, Version: v, Offset: int64(len(data)),
			Payload: append(payload, data...)})
	}
	// Made when the copy was at version 0 (absent): refused now.
	if r := install(0, 1, "v1"); r.Status != dataproto.StatusStaleVersion {
		t.Fatalf("install expecting no copy, over version 3: %v %s", r.Status, r.Payload)
	}
	if got := d.call(readReq(grp, 1, h, 0, 10)); got.Version != 3 || string(got.Payload) != "v3" {
		t.Fatalf("after a refused install: %q version %d", got.Payload, got.Version)
	}
	// One that expects the copy as it is replaces it.
	if r := install(3, 4, "four"); r.Status != dataproto.StatusOK {
		t.Fatalf("install expecting version 3: %v %s", r.Status, r.Payload)
	}
	if got := d.call(readReq(grp, 1, h, 0, 10)); got.Version != 4 || string(got.Payload) != "four" {
		t.Fatalf("after the install: %q version %d", got.Payload, got.Version)
	}
	// A malformed one (no expected version) changes nothing.
	if r := d.call(&dataproto.Frame{Type: dataproto.TypeInstall, Handle: h, Group: grp, Epoch: 1, Version: 9, Offset: 2, Payload: []byte("v9")}); r.Status != dataproto.StatusInvalid {
		t.Fatalf("install without an expected version: %v", r.Status)
	}
}
