package gctest

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/govfs/govfs/internal/chunkserver"
	"github.com/govfs/govfs/internal/chunkstore"
	"github.com/govfs/govfs/internal/dataproto"
	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/metanode"
	"github.com/govfs/govfs/internal/rpc"
	"github.com/govfs/govfs/internal/testcluster"
	"github.com/govfs/govfs/internal/wire"
)

const chunkSize = 1 << 20

func quiet() *slog.Logger {
	if os.Getenv("GOVFS_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// cluster is n metadata nodes over the real gRPC transport, with the
// collector's settings changed by tweak.
type cluster struct {
	t     *testing.T
	nodes []*metanode.Node
	addrs []string
	metas []wire.MetaClient
}

func freeAddr(t *testing.T) string {
	a, err := testcluster.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func startCluster(t *testing.T, n int, tweak func(*metanode.Config)) *cluster {
	peers := map[ids.NodeID]string{}
	for i := 1; i <= n; i++ {
		peers[ids.NodeID(i)] = freeAddr(t)
	}
	c := &cluster{t: t}
	for i := 1; i <= n; i++ {
		cfg := metanode.DefaultConfig()
		cfg.ID, cfg.Listen, cfg.Peers, cfg.DataDir = ids.NodeID(i), peers[ids.NodeID(i)], peers, t.TempDir()
		cfg.TickInterval = 10 * time.Millisecond
		cfg.Logger = quiet().With("meta", i)
		tweak(&cfg)
		node, err := metanode.Start(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(node.Stop)
		cc, err := rpc.Dial(node.Addr(), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		c.nodes = append(c.nodes, node)
		c.addrs = append(c.addrs, node.Addr())
		c.metas = append(c.metas, wire.NewMetaClient(cc))
	}
	return c
}

// mutate proposes op to group g through whichever node leads it,
// retrying while the cluster forms, and fails the test on an errno.
func (c *cluster) mutate(g ids.GroupID, cmd *wire.Command) *wire.Result {
	c.t.Helper()
	cmd.Version = 1
	var last string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		for _, m := range c.metas {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			resp, err := m.Mutate(ctx, &wire.MutateRequest{Group: uint64(g), Cmd: cmd})
			cancel()
			switch {
			case err != nil:
				last = err.Error()
			case resp.GetStatus().GetCode() == wire.Code_OK:
				return resp.GetResult()
			case resp.GetStatus().GetCode() == wire.Code_ERRNO:
				c.t.Fatalf("%v: %s", cmd.GetOp(), resp.GetStatus().GetMessage())
			default:
				last = resp.GetStatus().String()
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.t.Fatalf("%v: no answer: %s", cmd.GetOp(), last)
	return nil
}

func (c *cluster) info() *wire.ClusterInfoResponse {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := c.metas[0].ClusterInfo(ctx, &wire.ClusterInfoRequest{})
	if err != nil {
		c.t.Fatal(err)
	}
	return info
}

func startChunk(t *testing.T, meta []string, dir string) *chunkserver.Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Each server its own host and rack: they share this machine.
	s, err := chunkserver.Start(ctx, chunkserver.Config{Listen: "127.0.0.1:0", DataDir: dir, MetaAddrs: meta, Host: dir,
		Rack: "r-" + filepath.Base(dir), NoSync: true, ChunkSize: chunkSize, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// startGroup starts three chunk servers and waits for the replica group
// the president makes of them; it returns the group and the servers'
// addresses by id.
func (c *cluster) startGroup() (*wire.ReplicaGroup, map[uint64]string) {
	t := c.t
	t.Helper()
	addr := map[uint64]string{}
	for i := 0; i < 3; i++ {
		s := startChunk(t, c.addrs, t.TempDir())
		addr[s.ID()] = s.Addr()
	}
	var grp *wire.ReplicaGroup
	waitFor(t, "a replica group", func() bool {
		gs := c.info().GetReplicaGroups()
		if len(gs) == 1 && len(gs[0].GetMembers()) == 3 {
			grp = gs[0]
		}
		return grp != nil
	})
	return grp, addr
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !ok(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// held lists the chunks a server holds.
func held(t *testing.T, pool *dataproto.Pool, addr string) []uint64 {
	t.Helper()
	r, err := pool.Call(addr, &dataproto.Frame{Type: dataproto.TypeList})
	if err != nil || r.Status != dataproto.StatusOK {
		t.Fatalf("list %s: %s", addr, describe(r, err))
	}
	es, err := dataproto.DecodeList(r.Payload)
	if err != nil {
		t.Fatal(err)
	}
	var hs []uint64
	for _, e := range es {
		hs = append(hs, e.Handle)
	}
	slices.Sort(hs)
	return hs
}

// TestCollectorDeletesExactlyTheGarbage writes chunk copies straight to
// chunk servers, records some of them in the ministry, and checks that
// after the grace period exactly the unreferenced copies (released by
// unlink, never recorded, or left on a server outside the chunk's group)
// are gone and the referenced ones stay; then that truncating the file
// releases its chunks to the collector too.
func TestCollectorDeletesExactlyTheGarbage(t *testing.T) {
	const grace = 2 * time.Second
	c := startCluster(t, 3, func(cfg *metanode.Config) {
		cfg.GCInterval = 100 * time.Millisecond
		cfg.GCGrace = grace
	})
	mk := func(name string) ids.Ino {
		res := c.mutate(ids.RootMinistry, &wire.Command{Op: &wire.Command_Create{Create: &wire.CreateOp{
			Parent: uint64(ids.RootIno), Name: []byte(name), Type: wire.FileType_REGULAR, Mode: 0o644, Exclusive: true}}})
		return ids.Ino(res.GetAttr().GetIno())
	}
	f, g := mk("f"), mk("g")

	grp, addr := c.startGroup()
	alloc := c.mutate(ids.PresidentGroup, &wire.Command{Op: &wire.Command_AllocChunkHandles{AllocChunkHandles: &wire.AllocChunkHandlesOp{Count: 4}}})
	var hs []uint64
	for i := uint64(0); i < 4; i++ {
		h, err := dataproto.MakeHandle(grp.GetId(), alloc.GetStart()+i)
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
	}
	// a, b: chunks 0 and 1 of f. c: chunk 0 of g, released by unlink.
	// d: never recorded (a writer that died between allocating and
	// recording, as far as the collector can tell).
	a, b, cc, d := hs[0], hs[1], hs[2], hs[3]
	record := func(ino ids.Ino, index, h uint64) {
		c.mutate(ids.RootMinistry, &wire.Command{Op: &wire.Command_SetChunk{SetChunk: &wire.SetChunkOp{Ino: uint64(ino),
			Chunk: &wire.ChunkRef{Index: index, Handle: h, Group: grp.GetId()}}}})
	}
	record(f, 0, a)
	record(f, 1, b)
	record(g, 0, cc)

	pool := &dataproto.Pool{Timeout: 5 * time.Second}
	defer pool.Close()
	content := func(h uint64) []byte { return bytes.Repeat(binary.BigEndian.AppendUint64(nil, h), 1000) }
	write := func(h uint64) {
		t.Helper()
		// Refused (stale epoch) until every member knows the group.
		waitFor(t, fmt.Sprintf("a write of chunk %x", h), func() bool {
			r, err := pool.Call(addr[grp.GetPrimary()], &dataproto.Frame{Type: dataproto.TypeWrite, Handle: h, Group: grp.GetId(),
				Epoch: grp.GetEpoch(), Payload: content(h)})
			return err == nil && r.Status == dataproto.StatusOK
		})
	}
	firstWrite := time.Now()
	for _, h := range hs {
		write(h)
	}
	c.mutate(ids.RootMinistry, &wire.Command{Op: &wire.Command_Unlink{Unlink: &wire.UnlinkOp{Parent: uint64(ids.RootIno), Name: []byte("g")}}})

	// A fourth server, outside the group, holds a leftover copy of a (as
	// a replaced member would): put it in its store before it starts.
	dir4 := t.TempDir()
	sc := chunkstore.DefaultConfig()
	sc.Dir, sc.ClusterID, sc.ChunkSize, sc.NoSync, sc.Logger = dir4, c.info().GetClusterId(), chunkSize, true, quiet()
	st, err := chunkstore.Open(sc)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Write(chunkstore.Handle(a), 0, content(a), 1); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	outsider := startChunk(t, c.addrs, dir4)
	if slices.Contains(grp.GetMembers(), outsider.ID()) {
		t.Fatalf("the fourth server %d is a member of %v", outsider.ID(), grp)
	}

	members := grp.GetMembers()
	want := func(hs ...uint64) []uint64 { slices.Sort(hs); return hs }
	// Nothing is deleted before the grace period has passed since the
	// copies were written (checked only while that is still true).
	for _, m := range members {
		got := held(t, pool, addr[m])
		if time.Since(firstWrite) < grace && !slices.Equal(got, want(a, b, cc, d)) {
			t.Fatalf("server %d holds %x within the grace period, want %x", m, got, want(a, b, cc, d))
		}
	}

	// After it, exactly the garbage goes.
	waitFor(t, "the garbage copies to be deleted", func() bool {
		for _, m := range members {
			if got := held(t, pool, addr[m]); slices.Contains(got, cc) || slices.Contains(got, d) {
				return false
			}
		}
		return len(held(t, pool, outsider.Addr())) == 0
	})
	if since := time.Since(firstWrite); since < grace {
		t.Fatalf("garbage deleted %v after it was written, before the grace period of %v", since, grace)
	}
	for _, m := range members {
		if got := held(t, pool, addr[m]); !slices.Equal(got, want(a, b)) {
			t.Fatalf("server %d holds %x after collection, want %x", m, got, want(a, b))
		}
		for _, h := range []uint64{a, b} {
			r, err := pool.Call(addr[m], &dataproto.Frame{Type: dataproto.TypeRead, Handle: h, Group: grp.GetId(), Epoch: grp.GetEpoch(),
				Payload: binary.BigEndian.AppendUint32(nil, chunkSize)})
			if err != nil || r.Status != dataproto.StatusOK || !bytes.Equal(r.Payload, content(h)) {
				t.Fatalf("read of kept chunk %x on server %d: %s", h, m, describe(r, err))
			}
		}
	}

	// Truncating f to zero releases a and b: they go too, after the grace.
	released := time.Now()
	c.mutate(ids.RootMinistry, &wire.Command{Op: &wire.Command_Setattr{Setattr: &wire.SetattrOp{Ino: uint64(f),
		Valid: uint32(wire.SetattrField_SETATTR_SIZE), Size: 0}}})
	waitFor(t, "the truncated file's chunks to be deleted", func() bool {
		for _, m := range members {
			if len(held(t, pool, addr[m])) != 0 {
				return false
			}
		}
		return true
	})
	if since := time.Since(released); since < grace {
		t.Fatalf("released chunks deleted %v after the truncate, before the grace period of %v", since, grace)
	}
}

func describe(r *dataproto.Frame, err error) string {
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("status %d: %s (%d bytes)", r.Status, r.Payload, len(r.Payload))
}

// TestNewLeaderWaitsAFullGrace: the marks are the president leader's
// memory, so after a leader change an unreferenced copy is deleted no
// earlier than a full grace period after the change, however long the old
// leader had seen it as garbage.
func TestNewLeaderWaitsAFullGrace(t *testing.T) {
	const grace = 1500 * time.Millisecond
	c := startCluster(t, 3, func(cfg *metanode.Config) {
		cfg.GCInterval = 100 * time.Millisecond
		cfg.GCGrace = grace
	})
	var servers []*chunkserver.Server
	for i := 0; i < 3; i++ {
		servers = append(servers, startChunk(t, c.addrs, t.TempDir()))
	}
	var grp *wire.ReplicaGroup
	waitFor(t, "a replica group", func() bool {
		if gs := c.info().GetReplicaGroups(); len(gs) == 1 && len(gs[0].GetMembers()) == 3 {
			grp = gs[0]
		}
		return grp != nil
	})
	addr := map[uint64]string{}
	for _, s := range servers {
		addr[s.ID()] = s.Addr()
	}
	alloc := c.mutate(ids.PresidentGroup, &wire.Command{Op: &wire.Command_AllocChunkHandles{AllocChunkHandles: &wire.AllocChunkHandlesOp{Count: 1}}})
	h, err := dataproto.MakeHandle(grp.GetId(), alloc.GetStart())
	if err != nil {
		t.Fatal(err)
	}
	pool := &dataproto.Pool{Timeout: 5 * time.Second}
	defer pool.Close()
	waitFor(t, "a write", func() bool {
		r, err := pool.Call(addr[grp.GetPrimary()], &dataproto.Frame{Type: dataproto.TypeWrite, Handle: h, Group: grp.GetId(),
			Epoch: grp.GetEpoch(), Payload: []byte("never recorded")})
		return err == nil && r.Status == dataproto.StatusOK
	})
	written := time.Now()
	// Let the first leader see the copy as garbage for most of the grace
	// period (the wall-clock wait is the point of the test).
	<-time.After(grace - 300*time.Millisecond)
	for _, m := range grp.GetMembers() {
		if got := held(t, pool, addr[m]); !slices.Equal(got, []uint64{h}) && time.Since(written) < grace {
			t.Fatalf("server %d holds %x within the grace period", m, got)
		}
	}
	var leader *metanode.Node
	for _, n := range c.nodes {
		if _, me := n.Host().Leader(ids.PresidentGroup); me {
			leader = n
		}
	}
	if leader == nil {
		t.Fatal("no president leader")
	}
	leader.Stop()
	stopped := time.Now()
	waitFor(t, "the copy to be deleted by the new leader", func() bool {
		for _, m := range grp.GetMembers() {
			if len(held(t, pool, addr[m])) != 0 {
				return false
			}
		}
		return true
	})
	if since := time.Since(stopped); since < grace {
		t.Fatalf("deleted %v after the leader change, before a full grace period of %v", since, grace)
	}
}

// TestCollectorReadsMinistriesHostedElsewhere gives a subtree to a
// ministry whose only replica is on a fourth node (which joined), so the
// president's leader has no replica of it: the collector reads its chunk
// records over RPC, keeps the chunk its file references and deletes the
// one it released.
func TestCollectorReadsMinistriesHostedElsewhere(t *testing.T) {
	const grace = time.Second
	tweak := func(cfg *metanode.Config) {
		cfg.GCInterval = 100 * time.Millisecond
		cfg.GCGrace = grace
	}
	c := startCluster(t, 3, tweak)
	cfg := metanode.DefaultConfig()
	cfg.Join, cfg.Listen, cfg.DataDir = c.addrs, freeAddr(t), t.TempDir()
	cfg.TickInterval, cfg.Logger = 10*time.Millisecond, quiet().With("meta", 4)
	tweak(&cfg)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	n4, err := metanode.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n4.Stop)
	cc4, err := rpc.Dial(n4.Addr(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc4.Close() })
	c.metas = append(c.metas, wire.NewMetaClient(cc4))

	big := c.mutate(ids.RootMinistry, &wire.Command{Op: &wire.Command_Create{Create: &wire.CreateOp{
		Parent: uint64(ids.RootIno), Name: []byte("big"), Type: wire.FileType_DIRECTORY, Mode: 0o755, Exclusive: true}}}).GetAttr().GetIno()
	var target uint64
	waitFor(t, "the assign of /big to a ministry on node 4", func() bool {
		for _, m := range c.metas[:3] {
			actx, acancel := context.WithTimeout(ctx, 20*time.Second)
			resp, err := m.Assign(actx, &wire.AssignRequest{Path: "/big", Ino: big, Parent: uint64(ids.RootIno), Name: []byte("big"),
				Source: uint64(ids.RootMinistry), New: true, Members: []uint64{4}, Req: &wire.RequestID{ClientId: 77, Seq: 1, FirstIncomplete: 1}})
			acancel()
			if err == nil && resp.GetStatus().GetCode() == wire.Code_OK && resp.GetMove().GetState() == wire.MoveState_MOVE_DONE {
				target = resp.GetMove().GetTarget()
				return true
			}
		}
		return false
	})
	g := ids.GroupID(target)
	mk := func(name string) ids.Ino {
		res := c.mutate(g, &wire.Command{Op: &wire.Command_Create{Create: &wire.CreateOp{
			Parent: big, Name: []byte(name), Type: wire.FileType_REGULAR, Mode: 0o644, Exclusive: true}}})
		return ids.Ino(res.GetAttr().GetIno())
	}
	kept, gone := mk("kept"), mk("gone")

	grp, addr := c.startGroup()
	alloc := c.mutate(ids.PresidentGroup, &wire.Command{Op: &wire.Command_AllocChunkHandles{AllocChunkHandles: &wire.AllocChunkHandlesOp{Count: 2}}})
	hk, err := dataproto.MakeHandle(grp.GetId(), alloc.GetStart())
	if err != nil {
		t.Fatal(err)
	}
	hg, err := dataproto.MakeHandle(grp.GetId(), alloc.GetStart()+1)
	if err != nil {
		t.Fatal(err)
	}
	for ino, h := range map[ids.Ino]uint64{kept: hk, gone: hg} {
		c.mutate(g, &wire.Command{Op: &wire.Command_SetChunk{SetChunk: &wire.SetChunkOp{Ino: uint64(ino),
			Chunk: &wire.ChunkRef{Index: 0, Handle: h, Group: grp.GetId()}}}})
	}
	pool := &dataproto.Pool{Timeout: 5 * time.Second}
	defer pool.Close()
	for _, h := range []uint64{hk, hg} {
		waitFor(t, fmt.Sprintf("a write of chunk %x", h), func() bool {
			r, err := pool.Call(addr[grp.GetPrimary()], &dataproto.Frame{Type: dataproto.TypeWrite, Handle: h, Group: grp.GetId(),
				Epoch: grp.GetEpoch(), Payload: []byte("data")})
			return err == nil && r.Status == dataproto.StatusOK
		})
	}
	c.mutate(g, &wire.Command{Op: &wire.Command_Unlink{Unlink: &wire.UnlinkOp{Parent: big, Name: []byte("gone")}}})
	waitFor(t, "the released chunk to be deleted", func() bool {
		for _, m := range grp.GetMembers() {
			if slices.Contains(held(t, pool, addr[m]), hg) {
				return false
			}
		}
		return true
	})
	// Rounds after that keep the referenced one.
	time.Sleep(3 * grace)
	for _, m := range grp.GetMembers() {
		if got := held(t, pool, addr[m]); !slices.Equal(got, []uint64{hk}) {
			t.Fatalf("server %d holds %x, want only the referenced %x", m, got, hk)
		}
	}
}
