package metanode_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/metanode"
	"github.com/govfs/govfs/internal/rpc"
	"github.com/govfs/govfs/internal/testcluster"
	"github.com/govfs/govfs/internal/wire"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

func metaClient(t *testing.T, addr string) wire.MetaClient {
	cc, err := rpc.Dial(addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return wire.NewMetaClient(cc)
}

func leaderClient(t *testing.T, c *testcluster.InProc) (wire.MetaClient, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := c.Leader(ctx, ids.RootMinistry)
	if err != nil {
		t.Fatal(err)
	}
	return metaClient(t, c.Peers[l]), c.Peers[l]
}

func listRoot(t *testing.T, mc wire.MetaClient) []string {
	resp, err := mc.Read(context.Background(), &wire.ReadRequest{Group: 1, Consistency: wire.ReadConsistency_LINEARIZABLE,
		Op: &wire.ReadRequest_Readdir{Readdir: &wire.ReaddirReq{Ino: 1}}})
	if err != nil || resp.GetStatus().GetCode() != wire.Code_OK {
		t.Fatalf("readdir /: %v %v", err, resp.GetStatus())
	}
	var names []string
	for _, e := range resp.GetEntries() {
		names = append(names, string(e.GetName()))
	}
	return names
}

var seq uint64

func create(name []byte, parent uint64) *wire.Command {
	seq++
	return &wire.Command{Version: 1, Req: &wire.RequestID{ClientId: 77, Seq: seq, FirstIncomplete: seq},
		Op: &wire.Command_Create{Create: &wire.CreateOp{Parent: parent, Name: name, Type: wire.FileType_REGULAR, Mode: 0o644, Exclusive: true}}}
}

func batchOf(cmds ...*wire.Command) *wire.Command {
	return &wire.Command{Version: 1, Op: &wire.Command_Batch{Batch: &wire.BatchOp{Cmds: cmds}}}
}

func withIno(c *wire.Command, ino uint64) *wire.Command {
	c.GetCreate().Ino = ino
	return c
}

func TestBadInputGetsClearErrorAndChangesNothing(t *testing.T) {
	c := testcluster.NewInProc(t, 3)
	mc, addr := leaderClient(t, c)
	ctx := context.Background()
	waitClusterID(t, c)
	before := listRoot(t, mc)

	cases := []struct {
		name  string
		cmd   *wire.Command
		group uint64
		code  wire.Code
		errno syscall.Errno
	}{
		{"slash", create([]byte("a/b"), 1), 1, wire.Code_ERRNO, syscall.EINVAL},
		{"nul", create([]byte("a\x00b"), 1), 1, wire.Code_ERRNO, syscall.EINVAL},
		{"empty", create(nil, 1), 1, wire.Code_ERRNO, syscall.EINVAL},
		{"dot", create([]byte("."), 1), 1, wire.Code_ERRNO, syscall.EINVAL},
		{"dotdot", create([]byte(".."), 1), 1, wire.Code_ERRNO, syscall.EINVAL},
		{"too long", create(bytes.Repeat([]byte("x"), 256), 1), 1, wire.Code_ERRNO, syscall.ENAMETOOLONG},
		{"unknown parent", create([]byte("x"), 987654321), 1, wire.Code_ERRNO, syscall.ENOENT},
		{"unknown group", create([]byte("x"), 1), 42, wire.Code_UNKNOWN_GROUP, 0},
		{"president group", create([]byte("x"), 1), 0, wire.Code_INVALID, 0},
		{"no op", &wire.Command{Version: 1}, 1, wire.Code_INVALID, 0},
		{"bad version", &wire.Command{Version: 9, Op: create([]byte("x"), 1).Op}, 1, wire.Code_INVALID, 0},
		{"internal op", &wire.Command{Version: 1, Op: &wire.Command_GrantInodes{GrantInodes: &wire.GrantInodesOp{Start: 5, End: 9}}}, 1, wire.Code_INVALID, 0},
		{"empty batch", batchOf(), 1, wire.Code_INVALID, 0},
		{"batch with a request id", func() *wire.Command {
			b := batchOf(create([]byte("x"), 1))
			b.Req = &wire.RequestID{ClientId: 77, Seq: 1000}
			return b
		}(), 1, wire.Code_INVALID, 0},
		{"batched create without inode number", batchOf(create([]byte("x"), 1)), 1, wire.Code_INVALID, 0},
		{"nested batch", batchOf(batchOf()), 1, wire.Code_INVALID, 0},
		{"batched reservation", batchOf(&wire.Command{Version: 1, Req: &wire.RequestID{ClientId: 77, Seq: 1001},
			Op: &wire.Command_ReserveInodes{ReserveInodes: &wire.ReserveInodesOp{Count: 1}}}), 1, wire.Code_INVALID, 0},
		{"batch of two clients", batchOf(withIno(create([]byte("x"), 1), 5000), func() *wire.Command {
			c := withIno(create([]byte("y"), 1), 5001)
			c.Req.ClientId = 78
			return c
		}()), 1, wire.Code_INVALID, 0},
		{"batch with a bad name", batchOf(withIno(create([]byte("a/b"), 1), 5000)), 1, wire.Code_ERRNO, syscall.EINVAL},
		{"reservation of 0", &wire.Command{Version: 1, Req: &wire.RequestID{ClientId: 77, Seq: 1002},
			Op: &wire.Command_ReserveInodes{ReserveInodes: &wire.ReserveInodesOp{}}}, 1, wire.Code_ERRNO, syscall.EINVAL},
		{"create with an unreserved inode", withIno(create([]byte("x"), 1), 5000), 1, wire.Code_ERRNO, syscall.EINVAL},
	}
	for _, tc := range cases {
		// Right after formation the ministry answers creates with a
		// retryable UNAVAILABLE until the president's first inode grant
		// lands; a client retries, and so does this test.
		var st *wire.Status
		for deadline := time.Now().Add(10 * time.Second); ; {
			resp, err := mc.Mutate(ctx, &wire.MutateRequest{Group: tc.group, Cmd: tc.cmd})
			if err != nil {
				t.Fatalf("%s: rpc error %v", tc.name, err)
			}
			st = resp.GetStatus()
			if st.GetCode() != wire.Code_UNAVAILABLE || tc.code == wire.Code_UNAVAILABLE || time.Now().After(deadline) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if st.GetCode() != tc.code || syscall.Errno(st.GetErrno()) != tc.errno {
			t.Errorf("%s: got %v errno %d (%s), want %v errno %d", tc.name, st.GetCode(), st.GetErrno(), st.GetMessage(), tc.code, tc.errno)
		}
		if st.GetMessage() == "" {
			t.Errorf("%s: error without a message", tc.name)
		}
	}
	// Unknown inode numbers on reads.
	resp, err := mc.Read(ctx, &wire.ReadRequest{Group: 1, Op: &wire.ReadRequest_GetAttr{GetAttr: &wire.GetAttrReq{Ino: 123456789}}})
	if err != nil || resp.GetStatus().GetCode() != wire.Code_ERRNO || syscall.Errno(resp.GetStatus().GetErrno()) != syscall.ENOENT {
		t.Errorf("getattr of unknown inode: %v %v", err, resp.GetStatus())
	}
	if resp, _ := mc.Read(ctx, &wire.ReadRequest{Group: 1}); resp.GetStatus().GetCode() != wire.Code_INVALID {
		t.Errorf("read without op: %v", resp.GetStatus())
	}
	// Another cluster's request.
	if resp, _ := mc.Mutate(ctx, &wire.MutateRequest{ClusterId: "not-this-one", Group: 1, Cmd: create([]byte("x"), 1)}); resp.GetStatus().GetCode() != wire.Code_WRONG_CLUSTER {
		t.Errorf("wrong cluster id: %v", resp.GetStatus())
	}
	// An oversized message is refused by the transport.
	_, err = mc.Mutate(ctx, &wire.MutateRequest{Group: 1, Cmd: create(bytes.Repeat([]byte("y"), rpc.MaxMessageSize+1), 1)})
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("oversized message: got %v, want ResourceExhausted", err)
	}
	// Garbage bytes on the gRPC port do not hurt the node.
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	conn.Write(bytes.Repeat([]byte{0xde, 0xad, 0xbe, 0xef}, 4096))
	conn.Close()
	// Raft traffic from a node that is not a member is refused.
	cc, _ := rpc.Dial(addr, nil)
	defer cc.Close()
	ack, err := wire.NewRaftClient(cc).Send(ctx, &wire.RaftBatch{From: 9, To: 1, Msgs: []*wire.RaftMessage{{Group: 1, Msg: []byte{1, 2, 3}}}})
	if err != nil || ack.GetStatus().GetCode() != wire.Code_INVALID || !strings.Contains(ack.GetStatus().GetMessage(), "not a member") {
		t.Errorf("raft batch from non-member: %v %v", err, ack.GetStatus())
	}
	// A bare MsgSnap (snapshot data comes only through SendSnapshot) or a
	// node-local message type is refused, even from a member.
	for _, typ := range []pb.MessageType{pb.MsgSnap, pb.MsgProp, pb.MsgHup} {
		raw, _ := proto.Marshal(&pb.Message{Type: typ.Enum(), From: new(uint64(2)), To: new(uint64(1)), Term: new(uint64(99)),
			Snapshot: &pb.Snapshot{Metadata: &pb.SnapshotMetadata{Index: new(uint64(1 << 40)), Term: new(uint64(99))}}})
		cc1, _ := rpc.Dial(c.Peers[1], nil)
		ack, err := wire.NewRaftClient(cc1).Send(ctx, &wire.RaftBatch{From: 2, To: 1, Msgs: []*wire.RaftMessage{{Group: 1, Msg: raw}}})
		cc1.Close()
		if err != nil || ack.GetStatus().GetCode() != wire.Code_INVALID {
			t.Errorf("raft batch with %v: %v %v", typ, err, ack.GetStatus())
		}
	}
	if after := listRoot(t, mc); strings.Join(after, ",") != strings.Join(before, ",") {
		t.Fatalf("bad input changed the namespace: %v -> %v", before, after)
	}
	// And the node still works.
	if resp, err := mc.Mutate(ctx, &wire.MutateRequest{Group: 1, Cmd: create([]byte("fine"), 1)}); err != nil || resp.GetStatus().GetCode() != wire.Code_OK {
		t.Fatalf("good create after bad input: %v %v", err, resp.GetStatus())
	}
}

func waitClusterID(t *testing.T, c *testcluster.InProc) {
	deadline := time.Now().Add(10 * time.Second)
	for _, id := range []ids.NodeID{1, 2, 3} {
		for c.Node(id).ClusterID() == "" {
			if time.Now().After(deadline) {
				t.Fatalf("node %v never learned the cluster id", id)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func TestStartRefusesWrongIdentity(t *testing.T) {
	c := testcluster.NewInProc(t, 3)
	ctx := context.Background()
	// Wait until node 1 has learned the cluster id, then stop it.
	deadline := time.Now().Add(10 * time.Second)
	for c.Node(1).ClusterID() == "" && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	dir1 := c.DataDir(1)
	c.Stop(1)

	base := func() metanode.Config {
		cfg := metanode.DefaultConfig()
		cfg.ID, cfg.Listen, cfg.Peers, cfg.DataDir, cfg.Logger = 1, c.Peers[1], c.Peers, dir1, quiet()
		return cfg
	}
	// A busy listen address fails the start promptly (it used to hang in
	// shutting down a raft host that had not started).
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	cfgBusy := base()
	cfgBusy.Listen = busy.Addr().String()
	cfgBusy.Peers = map[ids.NodeID]string{1: busy.Addr().String(), 2: c.Peers[2], 3: c.Peers[3]}
	cfgBusy.DataDir = t.TempDir()
	done := make(chan error, 1)
	go func() {
		n, err := metanode.Start(ctx, cfgBusy)
		if n != nil {
			n.Stop()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "listen on") {
			t.Errorf("start on a busy address: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("start on a busy address hangs")
	}

	cases := []struct {
		name string
		mod  func(*metanode.Config)
		want string
	}{
		{"other node's dir", func(cfg *metanode.Config) {
			cfg.ID = 2
			cfg.Listen = c.Peers[2]
		}, "belongs to node 1"},
		{"conflicting peers", func(cfg *metanode.Config) {
			p := map[ids.NodeID]string{1: c.Peers[1], 2: c.Peers[2], 3: "127.0.0.1:1"}
			cfg.Peers = p
		}, "conflicts with the members"},
		{"not a member", func(cfg *metanode.Config) { cfg.ID = 7 }, "not a member"},
	}
	for _, tc := range cases {
		cfg := base()
		tc.mod(&cfg)
		n, err := metanode.Start(ctx, cfg)
		if err == nil {
			n.Stop()
			t.Fatalf("%s: start succeeded", tc.name)
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %q does not say %q", tc.name, err, tc.want)
		}
	}

	// A data directory of another cluster: stop this cluster, form a new
	// one on the same addresses, and start its node 1 on the old node 1's
	// directory (same id, same peers): the peers' cluster id differs.
	c.StopAll()
	other := testcluster.NewInProcAt(t, c.Peers)
	waitClusterID(t, other)
	other.Stop(1)
	cfg := base()
	cfg.Transport = other.Net.Transport(1)
	n, err := metanode.Start(ctx, cfg)
	if err == nil {
		n.Stop()
		t.Fatal("a data directory of another cluster was accepted")
	}
	if !strings.Contains(err.Error(), "belongs to cluster") || !strings.Contains(err.Error(), "empty one to form a new cluster") {
		t.Errorf("foreign data dir: %v", err)
	}
}
