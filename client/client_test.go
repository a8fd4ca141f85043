package client

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/govfs/govfs/internal/wire"
)

// fakeCluster is a set of in-process Meta servers whose answers a test
// scripts through its handler functions.
type fakeCluster struct {
	mu      sync.Mutex
	addrs   []string
	mutates []seenMutate
	reads   []seenRead
	// onMutate and onRead answer requests; node is the index of the server.
	onMutate func(node int, req *wire.MutateRequest) *wire.MutateResponse
	onRead   func(node int, req *wire.ReadRequest) *wire.ReadResponse
	// ministries, when set, are the map's ministries (ClusterInfo).
	ministries []*wire.Ministry
	infos      int
}

type seenMutate struct {
	node int
	req  *wire.MutateRequest
}

type seenRead struct {
	node int
	req  *wire.ReadRequest
}

type fakeNode struct {
	wire.UnimplementedMetaServer
	fc *fakeCluster
	i  int
}

func (n *fakeNode) Mutate(_ context.Context, req *wire.MutateRequest) (*wire.MutateResponse, error) {
	n.fc.mu.Lock()
	n.fc.mutates = append(n.fc.mutates, seenMutate{n.i, proto.Clone(req).(*wire.MutateRequest)})
	h := n.fc.onMutate
	n.fc.mu.Unlock()
	return h(n.i, req), nil
}

func (n *fakeNode) Read(_ context.Context, req *wire.ReadRequest) (*wire.ReadResponse, error) {
	n.fc.mu.Lock()
	n.fc.reads = append(n.fc.reads, seenRead{n.i, proto.Clone(req).(*wire.ReadRequest)})
	h := n.fc.onRead
	n.fc.mu.Unlock()
	return h(n.i, req), nil
}

func (n *fakeNode) ClusterInfo(context.Context, *wire.ClusterInfoRequest) (*wire.ClusterInfoResponse, error) {
	resp := &wire.ClusterInfoResponse{Status: &wire.Status{}, ClusterId: "test-cluster", NodeId: uint64(n.i + 1)}
	n.fc.mu.Lock()
	n.fc.infos++
	for _, m := range n.fc.ministries {
		resp.Ministries = append(resp.Ministries, proto.Clone(m).(*wire.Ministry))
	}
	n.fc.mu.Unlock()
	for i, a := range n.fc.addrs {
		resp.Members = append(resp.Members, &wire.Member{Id: uint64(i + 1), Addr: a})
	}
	return resp, nil
}

func (n *fakeNode) Status(context.Context, *wire.StatusRequest) (*wire.StatusResponse, error) {
	return &wire.StatusResponse{Status: &wire.Status{}, ClusterId: "test-cluster", NodeId: uint64(n.i + 1), Addr: n.fc.addrs[n.i]}, nil
}

func startFake(t *testing.T, nodes int) *fakeCluster {
	t.Helper()
	fc := &fakeCluster{}
	var lis []net.Listener
	for i := 0; i < nodes; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lis = append(lis, l)
		fc.addrs = append(fc.addrs, l.Addr().String())
	}
	for i, l := range lis {
		s := grpc.NewServer()
		wire.RegisterMetaServer(s, &fakeNode{fc: fc, i: i})
		go s.Serve(l)
		t.Cleanup(s.Stop)
	}
	return fc
}

func (fc *fakeCluster) set(m func(int, *wire.MutateRequest) *wire.MutateResponse, r func(int, *wire.ReadRequest) *wire.ReadResponse) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	fc.onMutate, fc.onRead = m, r
	fc.mutates, fc.reads = nil, nil
}

func (fc *fakeCluster) seen() ([]seenMutate, []seenRead) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	return fc.mutates, fc.reads
}

func newTestClient(t *testing.T, fc *fakeCluster) *Client {
	t.Helper()
	cfg := DefaultConfig()
	cfg.MetaAddrs = fc.addrs[:1]
	cfg.Rand = rand.New(rand.NewPCG(3, 4))
	cfg.CallTimeout = 2 * time.Second
	cfg.OpTimeout = 10 * time.Second
	c, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func ok() *wire.Status { return &wire.Status{} }

// dirLookups answers lookups of any name as a directory with ino 10+len(name).
func dirLookups(_ int, req *wire.ReadRequest) *wire.ReadResponse {
	if l := req.GetLookup(); l != nil {
		return &wire.ReadResponse{Status: ok(), AppliedIndex: 5, Attr: &wire.Attr{Ino: 10 + uint64(len(l.GetName())), Type: wire.FileType_DIRECTORY}}
	}
	return &wire.ReadResponse{Status: &wire.Status{Code: wire.Code_ERRNO, Errno: uint32(syscall.ENOENT)}}
}

func TestNewLearnsCluster(t *testing.T) {
	fc := startFake(t, 3)
	c := newTestClient(t, fc)
	if c.ClusterID() != "test-cluster" {
		t.Fatalf("ClusterID = %q", c.ClusterID())
	}
	if m := c.Members(); len(m) != 3 || m[2].GetAddr() != fc.addrs[2] {
		t.Fatalf("Members = %v", m)
	}
	if c.ClientID() == 0 {
		t.Fatal("client id is zero")
	}
	st, err := c.Status(context.Background(), fc.addrs[1])
	if err != nil || st.GetNodeId() != 2 {
		t.Fatalf("Status = %v, %v", st, err)
	}
}

func TestMutateFollowsLeaderAndKeepsRequestID(t *testing.T) {
	fc := startFake(t, 3)
	c := newTestClient(t, fc)
	leader := 2
	fc.set(func(node int, req *wire.MutateRequest) *wire.MutateResponse {
		if node != leader {
			return &wire.MutateResponse{Status: &wire.Status{Code: wire.Code_NOT_LEADER, LeaderAddr: fc.addrs[leader]}}
		}
		return &wire.MutateResponse{Status: ok(), AppliedIndex: 42,
			Result: &wire.Result{Attr: &wire.Attr{Ino: 77, Type: wire.FileType_DIRECTORY, Mode: 0o755}}}
	}, dirLookups)

	a, err := c.Mkdir(context.Background(), "/a", 0o40755)
	if err != nil {
		t.Fatal(err)
	}
	if a.GetIno() != 77 {
		t.Fatalf("Mkdir attr = %v", a)
	}
	muts, _ := fc.seen()
	if len(muts) < 1 || muts[len(muts)-1].node != leader {
		t.Fatalf("last mutation went to node %v, want %d", muts, leader)
	}
	first := muts[0].req
	for _, m := range muts {
		if !proto.Equal(m.req.GetCmd(), first.GetCmd()) {
			t.Fatalf("retried command changed:\n%v\n%v", first.GetCmd(), m.req.GetCmd())
		}
		if m.req.GetClusterId() != "test-cluster" || m.req.GetGroup() != 1 {
			t.Fatalf("request = %v", m.req)
		}
	}
	cmd := first.GetCmd()
	if cmd.GetVersion() != 1 || cmd.GetReq().GetClientId() != c.ClientID() || cmd.GetReq().GetSeq() != 1 || cmd.GetReq().GetFirstIncomplete() != 1 {
		t.Fatalf("command header = %v", cmd)
	}
	if cr := cmd.GetCreate(); cr.GetParent() != 1 || string(cr.GetName()) != "a" || cr.GetMode() != 0o755 || cr.GetType() != wire.FileType_DIRECTORY {
		t.Fatalf("create op = %v", cr)
	}

	// The leader is remembered, seq grows, and reads carry the applied
	// index seen (session consistency).
	if _, err := c.Mkdir(context.Background(), "/b/c", 0o755); err != nil {
		t.Fatal(err)
	}
	muts, reads := fc.seen()
	last := muts[len(muts)-1]
	if last.node != leader || last.req.GetCmd().GetReq().GetSeq() != 2 {
		t.Fatalf("second mkdir went to node %d with %v", last.node, last.req.GetCmd().GetReq())
	}
	if last.req.GetCmd().GetCreate().GetParent() != 11 {
		t.Fatalf("second mkdir parent = %d, want 11 (lookup of b)", last.req.GetCmd().GetCreate().GetParent())
	}
	if len(reads) != 1 || reads[0].req.GetMinIndex() != 42 {
		t.Fatalf("reads = %v, want one lookup with min_index 42", reads)
	}
}

func TestErrnoMapping(t *testing.T) {
	fc := startFake(t, 1)
	c := newTestClient(t, fc)
	fc.set(func(int, *wire.MutateRequest) *wire.MutateResponse {
		return &wire.MutateResponse{Status: ok(), Result: &wire.Result{Errno: uint32(syscall.EEXIST)}}
	}, func(_ int, req *wire.ReadRequest) *wire.ReadResponse {
		if req.GetLookup() != nil && string(req.GetLookup().GetName()) == "bad" {
			return &wire.ReadResponse{Status: &wire.Status{Code: wire.Code_INVALID, Message: "name is bad"}}
		}
		if req.GetLookup() != nil && string(req.GetLookup().GetName()) == "other" {
			return &wire.ReadResponse{Status: &wire.Status{Code: wire.Code_WRONG_CLUSTER, Message: "cluster x"}}
		}
		return &wire.ReadResponse{Status: &wire.Status{Code: wire.Code_ERRNO, Errno: uint32(syscall.ENOENT)}}
	})
	ctx := context.Background()
	err := func() error { _, err := c.Mkdir(ctx, "/a", 0o755); return err }()
	if !errors.Is(err, syscall.EEXIST) || err.Error() != `govfs: mkdir "/a": file exists` {
		t.Fatalf("Mkdir err = %v", err)
	}
	var ce *Error
	if !errors.As(err, &ce) || ce.Op != "mkdir" || ce.Path != "/a" {
		t.Fatalf("Mkdir err %#v is not a *Error", err)
	}
	if _, err := c.Stat(ctx, "/nope"); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("Stat err = %v, want ENOENT", err)
	}
	if _, err := c.Stat(ctx, "/bad"); !errors.Is(err, syscall.EINVAL) || !strings.Contains(err.Error(), "name is bad") {
		t.Fatalf("Stat err = %v, want EINVAL with message", err)
	}
	if _, err := c.Stat(ctx, "/other"); !errors.Is(err, ErrWrongCluster) {
		t.Fatalf("Stat err = %v, want ErrWrongCluster", err)
	}
}

func TestValidationBeforeRPC(t *testing.T) {
	fc := startFake(t, 1)
	c := newTestClient(t, fc)
	fc.set(func(int, *wire.MutateRequest) *wire.MutateResponse { t.Error("unexpected mutate"); return nil },
		func(int, *wire.ReadRequest) *wire.ReadResponse { t.Error("unexpected read"); return nil })
	ctx := context.Background()
	long := "/" + strings.Repeat("x", 256)
	cases := []struct {
		err  error
		want syscall.Errno
	}{
		{func() error { _, err := c.Mkdir(ctx, "rel", 0o755); return err }(), syscall.EINVAL},
		{func() error { _, err := c.Mkdir(ctx, "", 0o755); return err }(), syscall.EINVAL},
		{func() error { _, err := c.Mkdir(ctx, "/", 0o755); return err }(), syscall.EEXIST},
		{func() error { _, err := c.Stat(ctx, long); return err }(), syscall.ENAMETOOLONG},
		{c.Rmdir(ctx, "/"), syscall.EBUSY},
		{c.Remove(ctx, "/"), syscall.EISDIR},
		{c.Rename(ctx, "/a", "/b", 3), syscall.EINVAL},
		{func() error { _, err := c.Symlink(ctx, "", "/l"); return err }(), syscall.ENOENT},
		{func() error { _, err := c.Lookup(ctx, 1, "a/b"); return err }(), syscall.EINVAL},
		{c.Truncate(ctx, "/f", -1), syscall.EINVAL},
	}
	for i, tc := range cases {
		if !errors.Is(tc.err, tc.want) {
			t.Errorf("case %d: err = %v, want %v", i, tc.err, tc.want)
		}
	}
}

func TestRedirectUpdatesOwner(t *testing.T) {
	fc := startFake(t, 1)
	c := newTestClient(t, fc)
	fc.set(nil, func(_ int, req *wire.ReadRequest) *wire.ReadResponse {
		if req.GetGroup() == 1 && req.GetGetAttr().GetIno() == 5 {
			return &wire.ReadResponse{Status: &wire.Status{Code: wire.Code_REDIRECT, Ministry: 2}}
		}
		if l := req.GetLookup(); l != nil {
			// /d is a referral to ministry 3.
			return &wire.ReadResponse{Status: ok(), Attr: &wire.Attr{Ino: 9, Type: wire.FileType_DIRECTORY}, Ministry: 3}
		}
		return &wire.ReadResponse{Status: ok(), AppliedIndex: 7, Attr: &wire.Attr{Ino: req.GetGetAttr().GetIno()}}
	})
	ctx := context.Background()
	if _, err := c.GetAttr(ctx, 5); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Stat(ctx, "/d"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetAttr(ctx, 9); err != nil {
		t.Fatal(err)
	}
	_, reads := fc.seen()
	var groups []uint64
	for _, r := range reads {
		groups = append(groups, r.req.GetGroup())
	}
	// Stat of the referral reads its attributes from ministry 3 itself.
	want := []uint64{1, 2, 1, 3, 3}
	if len(groups) != len(want) {
		t.Fatalf("read groups = %v, want %v", groups, want)
	}
	for i := range want {
		if groups[i] != want[i] {
			t.Fatalf("read groups = %v, want %v", groups, want)
		}
	}
	if c.owner(5) != 2 || c.owner(9) != 3 {
		t.Fatalf("owners: 5->%v 9->%v", c.owner(5), c.owner(9))
	}
}

func TestReaddirPages(t *testing.T) {
	fc := startFake(t, 1)
	c := newTestClient(t, fc)
	names := []string{"a", "b", "c", "d", "e"}
	fc.set(nil, func(_ int, req *wire.ReadRequest) *wire.ReadResponse {
		if req.GetGetAttr() != nil {
			return &wire.ReadResponse{Status: ok(), Attr: &wire.Attr{Ino: 1, Type: wire.FileType_DIRECTORY}}
		}
		rd := req.GetReaddir()
		resp := &wire.ReadResponse{Status: ok()}
		for _, n := range names {
			if n > string(rd.GetCookie()) && len(resp.Entries) < 2 {
				resp.Entries = append(resp.Entries, &wire.DirEntry{Name: []byte(n), Ino: uint64(n[0])})
			}
		}
		last := string(resp.Entries[len(resp.Entries)-1].GetName())
		resp.Eof = last == "e"
		return resp
	})
	ents, err := c.Readdir(context.Background(), "/")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range ents {
		got = append(got, string(e.GetName()))
	}
	if strings.Join(got, ",") != "a,b,c,d,e" {
		t.Fatalf("Readdir = %v", got)
	}
}

func TestUnavailableMovesOn(t *testing.T) {
	fc := startFake(t, 3)
	c := newTestClient(t, fc)
	fc.set(func(node int, req *wire.MutateRequest) *wire.MutateResponse {
		if node != 1 {
			return &wire.MutateResponse{Status: &wire.Status{Code: wire.Code_UNAVAILABLE}}
		}
		return &wire.MutateResponse{Status: ok(), Result: &wire.Result{Attr: &wire.Attr{Ino: 3}}}
	}, nil)
	if _, err := c.MkdirAt(context.Background(), 1, "x", 0o700); err != nil {
		t.Fatal(err)
	}
	muts, _ := fc.seen()
	if muts[len(muts)-1].node != 1 {
		t.Fatalf("mutations: %v", muts)
	}
}

func TestConfigValidate(t *testing.T) {
	cfg := DefaultConfig()
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "MetaAddrs") {
		t.Fatalf("Validate without addrs = %v", err)
	}
	cfg.MetaAddrs = []string{"127.0.0.1:1"}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	cfg.OpTimeout = time.Millisecond
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "OpTimeout") {
		t.Fatalf("Validate short OpTimeout = %v", err)
	}
}
