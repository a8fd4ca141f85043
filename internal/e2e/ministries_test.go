package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/govfs/govfs/client"
	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/rpc"
	"github.com/govfs/govfs/internal/testcluster"
	"github.com/govfs/govfs/internal/wire"
)

// Many ministries (issue 11): five metadata processes, three founders and
// two that join; subtrees delegated with Assign; routing, EXDEV, bad
// input, a restart and a kill -9 of a delegated ministry's minister.

func put(ctx context.Context, cl *client.Client, path, data string) error {
	_, err := cl.WriteFile(ctx, path, strings.NewReader(data), 0o644)
	return err
}

func get(ctx context.Context, cl *client.Client, path string) (string, error) {
	var b strings.Builder
	_, err := cl.ReadFile(ctx, path, &b)
	return b.String(), err
}

func startFiveNodes(t *testing.T, dir string) *testcluster.ProcCluster {
	t.Helper()
	return testcluster.StartForTest(t, 120*time.Second, testcluster.ProcConfig{Binary: binary, Dir: dir, Nodes: 5, Tick: 50 * time.Millisecond})
}

// ministryOf returns the ministry of group g in the map (nil if none).
func ministryOf(info *wire.ClusterInfoResponse, g uint64) *wire.Ministry {
	for _, m := range info.GetMinistries() {
		if m.GetGroup() == g {
			return m
		}
	}
	return nil
}

// rawLookup looks name up in directory parent in group g directly, at
// the given node (linearizable), returning the answer's status.
func rawLookup(ctx context.Context, pool *rpc.Pool, addr string, g, parent uint64, name string) (*wire.ReadResponse, error) {
	cc, err := pool.Get(addr)
	if err != nil {
		return nil, err
	}
	return wire.NewMetaClient(cc).Read(ctx, &wire.ReadRequest{Group: g, Consistency: wire.ReadConsistency_LINEARIZABLE,
		Op: &wire.ReadRequest_Lookup{Lookup: &wire.LookupReq{Parent: parent, Name: []byte(name)}}})
}

func TestMinistriesAssignRouteAndRefuse(t *testing.T) {
	dir := t.TempDir()
	c := startFiveNodes(t, dir)
	cl := newClient(t, c, c.Addrs(), 30*time.Second)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()

	for _, p := range []string{"/projects", "/other"} {
		if _, err := cl.Mkdir(ctx, p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// A client that learns the map before the assign (ministry 1 at
	// epoch 1) and is used again only after it.
	old := newClient(t, c, c.Addrs(), 30*time.Second)
	if _, err := old.Stat(ctx, "/other"); err != nil {
		t.Fatal(err)
	}
	mv, err := cl.Assign(ctx, "/projects", client.AssignOptions{New: true})
	if err != nil {
		t.Fatal(err)
	}
	if mv.GetState() != wire.MoveState_MOVE_DONE || mv.GetTarget() <= 1 || mv.GetSource() != 1 {
		t.Fatalf("assign /projects: %v", mv)
	}
	checkEpochs(ctx, t, c, old, mv.GetTarget())
	target := mv.GetTarget()
	info, err := cl.ClusterMap(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m := ministryOf(info, target)
	if m == nil || len(m.GetMembers()) != 3 || len(m.GetSubtrees()) != 1 || m.GetSubtrees()[0].GetPath() != "/projects" || m.GetEpoch() != 2 {
		t.Fatalf("ministry %d in the map: %v", target, m)
	}
	// The new ministry is led by a node other than the root minister
	// (its first member, the least loaded, is chosen to lead).
	deadline := time.Now().Add(30 * time.Second)
	for {
		l1, lt := groupLeader(t, c, 1), groupLeader(t, c, target)
		if l1 != lt && uint64(lt+1) == m.GetMembers()[0] {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ministry 1 led by node %d, ministry %d by node %d (preferred %d)", l1+1, target, lt+1, m.GetMembers()[0])
		}
		time.Sleep(100 * time.Millisecond)
	}

	// Creates in both subtrees at once; every acknowledged one is there,
	// and those under /projects are held by the new ministry alone.
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for _, d := range []string{"/projects", "/other"} {
		wg.Go(func() {
			for i := range 100 {
				if err := put(ctx, cl, fmt.Sprintf("%s/f%d", d, i), d); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	projects, err := cl.Stat(ctx, "/projects")
	if err != nil {
		t.Fatal(err)
	}
	pool := rpc.NewPool(c.Security())
	defer pool.Close()
	var inTarget, redirected bool
	for _, a := range c.Addrs() {
		r, err := rawLookup(ctx, pool, a, target, projects.GetIno(), "f7")
		if err == nil && r.GetStatus().GetCode() == wire.Code_OK {
			inTarget = true
		}
		r, err = rawLookup(ctx, pool, a, 1, projects.GetIno(), "f7")
		if err == nil && r.GetStatus().GetCode() == wire.Code_REDIRECT && r.GetStatus().GetMinistry() == target {
			redirected = true
		}
	}
	if !inTarget || !redirected {
		t.Fatalf("/projects/f7: found in ministry %d: %v; ministry 1 redirects there: %v", target, inTarget, redirected)
	}
	// A fresh client with no routing knowledge reaches both by path and
	// by inode number (ministry 1 redirects).
	fresh := newClient(t, c, c.Addrs()[:1], 30*time.Second)
	for _, d := range []string{"/projects", "/other"} {
		for i := range 100 {
			b, err := get(ctx, fresh, fmt.Sprintf("%s/f%d", d, i))
			if err != nil || b != d {
				t.Fatalf("%s/f%d = %q, %v", d, i, b, err)
			}
		}
	}
	a, err := cl.Stat(ctx, "/projects/f3")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := newClient(t, c, c.Addrs()[:1], 30*time.Second).GetAttr(ctx, ids.Ino(a.GetIno())); err != nil {
		t.Fatalf("GetAttr by inode number from a fresh client: %v", err)
	}

	// Across ministries: EXDEV, never ENOENT; the delegated root cannot
	// be removed or renamed away.
	if err := cl.Rename(ctx, "/projects/f1", "/other/g1", 0); !errors.Is(err, syscall.EXDEV) {
		t.Errorf("rename across ministries: %v, want EXDEV", err)
	}
	if err := cl.Rename(ctx, "/other/f1", "/projects/g1", 0); !errors.Is(err, syscall.EXDEV) {
		t.Errorf("rename across ministries (other way): %v, want EXDEV", err)
	}
	if _, err := cl.Link(ctx, "/projects/f2", "/other/l2"); !errors.Is(err, syscall.EXDEV) {
		t.Errorf("link across ministries: %v, want EXDEV", err)
	}
	if err := cl.Rename(ctx, "/projects", "/renamed", 0); !errors.Is(err, syscall.EXDEV) {
		t.Errorf("rename of a delegated root: %v, want EXDEV", err)
	}
	if err := cl.Rmdir(ctx, "/projects"); !errors.Is(err, syscall.EBUSY) && !errors.Is(err, syscall.ENOTEMPTY) {
		t.Errorf("rmdir of a delegated root: %v, want EBUSY", err)
	}
	if err := cl.Rename(ctx, "/projects/f1", "/projects/g1", 0); err != nil {
		t.Errorf("rename inside the new ministry: %v", err)
	}

	// Bad input: a clear error and nothing changes.
	before, err := cl.ClusterMap(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Mkdir(ctx, "/empty", 0o755); err != nil {
		t.Fatal(err)
	}
	bad := []struct {
		path string
		o    client.AssignOptions
		want syscall.Errno
	}{
		{"/", client.AssignOptions{New: true}, syscall.EINVAL},
		{"/other/f1", client.AssignOptions{New: true}, syscall.ENOTDIR},
		{"/missing", client.AssignOptions{New: true}, syscall.ENOENT},
		{"/projects", client.AssignOptions{New: true}, syscall.EEXIST},
		{"/empty", client.AssignOptions{Ministry: 99}, syscall.ENOENT},
		{"/empty", client.AssignOptions{Ministry: 1}, syscall.EINVAL},
		{"/empty", client.AssignOptions{New: true, Nodes: []uint64{1, 2, 77}}, syscall.EINVAL},
	}
	for _, b := range bad {
		_, err := cl.Assign(ctx, b.path, b.o)
		if !errors.Is(err, b.want) {
			t.Errorf("assign %s %+v: %v, want %v", b.path, b.o, err, b.want)
		} else {
			t.Logf("assign %s %+v: %v (%s)", b.path, b.o, err, client.ErrorDetail(err))
		}
	}
	after, err := cl.ClusterMap(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(after.GetMinistries()) != len(before.GetMinistries()) {
		t.Errorf("refused assigns changed the ministries: %d before, %d after", len(before.GetMinistries()), len(after.GetMinistries()))
	}

	checkAssignRefusals(ctx, t, c, cl, target)
	checkMapNotModified(ctx, t, c)

	// An existing ministry takes a second subtree, and gives it back.
	// The request is sent twice with one request id, as a client whose
	// first answer was lost does: both answers are the same move.
	empty, err := cl.Stat(ctx, "/empty")
	if err != nil {
		t.Fatal(err)
	}
	areq := &wire.AssignRequest{Path: "/empty", Ino: empty.GetIno(), Parent: 1, Name: []byte("empty"), Source: 1, Target: target,
		Req: &wire.RequestID{ClientId: 5151, Seq: 1, FirstIncomplete: 1}}
	first := rawAssign(ctx, t, c, areq)
	again := rawAssign(ctx, t, c, areq)
	if first.GetStatus().GetCode() != wire.Code_OK || first.GetMove().GetState() != wire.MoveState_MOVE_DONE ||
		again.GetStatus().GetCode() != wire.Code_OK || again.GetMove().GetId() != first.GetMove().GetId() {
		t.Fatalf("assign /empty to %d, sent twice: %v, then %v", target, first, again)
	}
	if err := put(ctx, cl, "/empty/in", "in"); err != nil {
		t.Fatal(err)
	}
	if err := cl.Remove(ctx, "/empty/in"); err != nil {
		t.Fatal(err)
	}
	if mv, err := cl.Unassign(ctx, "/empty"); err != nil || mv.GetState() != wire.MoveState_MOVE_DONE || mv.GetTarget() != 1 {
		t.Fatalf("unassign /empty: %v %v", mv, err)
	}
	if err := put(ctx, cl, "/empty/back", "back"); err != nil {
		t.Fatal(err)
	}
	if err := cl.Rename(ctx, "/empty/back", "/other/back", 0); err != nil {
		t.Errorf("rename after unassign (both in ministry 1 again): %v", err)
	}

	// Everything survives a restart of every process; the joined nodes
	// come back with their ids and their ministries.
	c.Stop()
	c2 := startFiveNodes(t, dir)
	cl2 := newClient(t, c2, c2.Addrs(), 30*time.Second)
	for _, d := range []string{"/projects", "/other"} {
		for i := 2; i < 100; i++ {
			b, err := get(ctx, cl2, fmt.Sprintf("%s/f%d", d, i))
			if err != nil || b != d {
				t.Fatalf("after restart: %s/f%d = %q, %v", d, i, b, err)
			}
		}
	}
	if err := put(ctx, cl2, "/projects/after", "a"); err != nil {
		t.Fatalf("create in the delegated subtree after restart: %v", err)
	}
}

// TestDelegatedMinisterKilled kills the minister of a delegated ministry
// with SIGKILL while clients create in it and in the root ministry's
// subtree: the ministry comes back, the other subtree goes on, and every
// acknowledged create is there afterwards.
func TestDelegatedMinisterKilled(t *testing.T) {
	c := startFiveNodes(t, t.TempDir())
	cl := newClient(t, c, c.Addrs(), 60*time.Second)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	for _, p := range []string{"/a", "/b"} {
		if _, err := cl.Mkdir(ctx, p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	mv, err := cl.Assign(ctx, "/a", client.AssignOptions{New: true, Nodes: []uint64{4, 5, 1}})
	if err != nil || mv.GetState() != wire.MoveState_MOVE_DONE {
		t.Fatalf("assign: %v %v", mv, err)
	}
	g := mv.GetTarget()
	type acked struct {
		mu    sync.Mutex
		names []string
	}
	var ack [2]acked
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for k, d := range []string{"/a", "/b"} {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				p := fmt.Sprintf("%s/f%d", d, i)
				if err := put(ctx, cl, p, p); err != nil {
					t.Errorf("create %s: %v", p, err)
					return
				}
				ack[k].mu.Lock()
				ack[k].names = append(ack[k].names, p)
				ack[k].mu.Unlock()
			}
		})
	}
	count := func(k int) int {
		ack[k].mu.Lock()
		defer ack[k].mu.Unlock()
		return len(ack[k].names)
	}
	time.Sleep(time.Second)
	victim := groupLeader(t, c, g)
	if victim == groupLeader(t, c, 1) {
		t.Logf("note: node %d leads both ministries", victim+1)
	}
	b0 := count(1)
	c.Kill(victim)
	killed := time.Now()
	// The ministry is back: a create in /a is acknowledged again.
	a0 := count(0)
	for count(0) == a0 {
		if time.Since(killed) > 30*time.Second {
			t.Fatalf("no create in /a acknowledged within 30 s of killing node %d", victim+1)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("ministry %d back %v after its minister (node %d) was killed; /b meanwhile: %d creates", g, time.Since(killed).Round(time.Millisecond), victim+1, count(1)-b0)
	checkDeadInMap(ctx, t, cl, uint64(victim+1))
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()
	if err := c.Start(victim); err != nil {
		t.Fatal(err)
	}
	check := newClient(t, c, c.Addrs(), 60*time.Second)
	for k := range ack {
		for _, p := range ack[k].names {
			b, err := get(ctx, check, p)
			if err != nil || b != p {
				t.Fatalf("acknowledged %s: %q, %v", p, b, err)
			}
		}
	}
	t.Logf("%d + %d acknowledged creates all present", count(0), count(1))
}

// checkEpochs: after the first assign ministry 1 is at epoch 2. Requests
// naming epoch 1 (stale) or 50 (never reached) are refused with a clear
// status and change nothing; a REDIRECT names the target's epoch and
// minister; a Client that knew epoch 1 catches up by itself.
func checkEpochs(ctx context.Context, t *testing.T, c *testcluster.ProcCluster, old *client.Client, target uint64) {
	t.Helper()
	pool := rpc.NewPool(c.Security())
	defer pool.Close()
	cc, err := pool.Get(c.Addrs()[groupLeader(t, c, 1)])
	if err != nil {
		t.Fatal(err)
	}
	mc := wire.NewMetaClient(cc)
	probe := func(seq uint64) *wire.Command {
		return &wire.Command{Version: 1, Req: &wire.RequestID{ClientId: 4242, Seq: seq, FirstIncomplete: seq},
			Op: &wire.Command_Create{Create: &wire.CreateOp{Parent: 1, Name: []byte("epoch-probe"), Type: wire.FileType_REGULAR, Mode: 0o644, Exclusive: true}}}
	}
	for i, tc := range []struct {
		epoch uint64
		code  wire.Code
	}{{1, wire.Code_STALE_EPOCH}, {50, wire.Code_INVALID}} {
		resp, err := mc.Mutate(ctx, &wire.MutateRequest{Group: 1, Epoch: tc.epoch, Cmd: probe(uint64(i + 1))})
		st := resp.GetStatus()
		if err != nil || st.GetCode() != tc.code || st.GetMessage() == "" || (tc.code == wire.Code_STALE_EPOCH && st.GetEpoch() != 2) {
			t.Fatalf("create naming epoch %d of ministry 1: %v %v, want %v", tc.epoch, err, st, tc.code)
		}
		t.Logf("epoch %d: %v: %s", tc.epoch, st.GetCode(), st.GetMessage())
		r, err := mc.Read(ctx, &wire.ReadRequest{Group: 1, Epoch: tc.epoch, Op: &wire.ReadRequest_GetAttr{GetAttr: &wire.GetAttrReq{Ino: 1}}})
		if err != nil || r.GetStatus().GetCode() != tc.code {
			t.Fatalf("read naming epoch %d: %v %v, want %v", tc.epoch, err, r.GetStatus(), tc.code)
		}
		l, err := mc.Lease(ctx, &wire.LeaseRequest{Group: 1, Epoch: tc.epoch, ClientId: 4242, Op: wire.LeaseOp_LEASE_ACQUIRE, Ino: 1, Mode: wire.LeaseMode_LEASE_READ})
		if err != nil || l.GetStatus().GetCode() != tc.code {
			t.Fatalf("lease naming epoch %d: %v %v, want %v", tc.epoch, err, l.GetStatus(), tc.code)
		}
	}
	if r, _ := rawLookup(ctx, pool, c.Addrs()[groupLeader(t, c, 1)], 1, 1, "epoch-probe"); r.GetStatus().GetCode() != wire.Code_ERRNO {
		t.Fatalf("a refused create changed the namespace: %v", r.GetStatus())
	}
	// The current epoch is served; a REDIRECT names the target's epoch
	// (2: created at 1, grew with the assign) and its minister.
	if resp, err := mc.Mutate(ctx, &wire.MutateRequest{Group: 1, Epoch: 2, Cmd: probe(3)}); err != nil || resp.GetStatus().GetCode() != wire.Code_OK {
		t.Fatalf("create naming the current epoch: %v %v", err, resp.GetStatus())
	}
	proj, err := old.Stat(ctx, "/projects")
	if err != nil {
		t.Fatalf("stat through a client that knew the old epoch: %v", err)
	}
	r, err := mc.Read(ctx, &wire.ReadRequest{Group: 1, Epoch: 2, Op: &wire.ReadRequest_GetAttr{GetAttr: &wire.GetAttrReq{Ino: proj.GetIno()}}})
	if st := r.GetStatus(); err != nil || st.GetCode() != wire.Code_REDIRECT || st.GetMinistry() != target || st.GetEpoch() != 2 {
		t.Fatalf("getattr of /projects at ministry 1: %v %v, want REDIRECT to %d at epoch 2", err, st, target)
	} else {
		t.Logf("REDIRECT: ministry %d epoch %d minister %q: %s", st.GetMinistry(), st.GetEpoch(), st.GetLeaderAddr(), st.GetMessage())
	}
	if err := put(ctx, old, "/other/from-old-client", "x"); err != nil {
		t.Fatalf("create through a client that knew the old epoch: %v", err)
	}
	if err := old.Remove(ctx, "/epoch-probe"); err != nil {
		t.Fatal(err)
	}
	if err := old.Remove(ctx, "/other/from-old-client"); err != nil {
		t.Fatal(err)
	}
}

// checkDeadInMap: the president's members notice a killed node from its
// missing heartbeats and say so in the map (the others alive, the root
// ministry busy); a new ministry is not placed on it.
func checkDeadInMap(ctx context.Context, t *testing.T, cl *client.Client, dead uint64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		info, err := cl.ClusterMap(ctx)
		if err != nil {
			t.Fatal(err)
		}
		reported, alive := false, 0
		for _, nl := range info.GetNodeLoads() {
			switch {
			case nl.GetNodeId() == dead:
				reported = nl.GetKnown() && !nl.GetAlive()
			case nl.GetAlive() && nl.GetLastHeartbeatMsAgo() >= 0:
				alive++
			}
		}
		ops := ministryOf(info, 1).GetOpsPerS()
		if reported && alive == 4 && ops > 0 {
			t.Logf("node %d reported dead, 4 alive; ministry 1 at %.0f ops/s", dead, ops)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("map after killing node %d: dead reported %v, %d others alive, ministry 1 %.0f ops/s: %v", dead, reported, alive, ops, info.GetNodeLoads())
		}
		time.Sleep(200 * time.Millisecond)
	}
	if _, err := cl.Mkdir(ctx, "/dead-node-check", 0o755); err != nil {
		t.Fatal(err)
	}
	nodes := []uint64{dead}
	for id := uint64(1); len(nodes) < 3; id++ {
		if id != dead {
			nodes = append(nodes, id)
		}
	}
	_, err := cl.Assign(ctx, "/dead-node-check", client.AssignOptions{New: true, Nodes: nodes})
	if !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("assign to nodes %v (node %d dead): %v, want EINVAL", nodes, dead, err)
	}
	t.Logf("assign to a dead node: %v (%s)", err, client.ErrorDetail(err))
}

// rawAssign sends req to the president's leader (found by trying every
// node) and returns its answer.
func rawAssign(ctx context.Context, t *testing.T, c *testcluster.ProcCluster, req *wire.AssignRequest) *wire.AssignResponse {
	t.Helper()
	pool := rpc.NewPool(c.Security())
	defer pool.Close()
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; ; i++ {
		cc, err := pool.Get(c.Addrs()[i%len(c.Addrs())])
		if err != nil {
			t.Fatal(err)
		}
		resp, err := wire.NewMetaClient(cc).Assign(ctx, req)
		if err == nil && resp.GetStatus().GetCode() != wire.Code_NOT_LEADER {
			return resp
		}
		if time.Now().After(deadline) {
			t.Fatalf("assign %s: no president leader answered: %v %v", req.GetPath(), err, resp.GetStatus())
		}
	}
}

// checkAssignRefusals: assigns whose source or (unassign) target do not
// hold what the client's stale view says are refused with EINVAL naming
// the right ministry, at once, and change nothing.
func checkAssignRefusals(ctx context.Context, t *testing.T, c *testcluster.ProcCluster, cl *client.Client, target uint64) {
	t.Helper()
	before, err := cl.ClusterMap(ctx)
	if err != nil {
		t.Fatal(err)
	}
	other, err := cl.Stat(ctx, "/other")
	if err != nil {
		t.Fatal(err)
	}
	projects, err := cl.Stat(ctx, "/projects")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		what string
		req  *wire.AssignRequest
		want string
	}{
		{"assign /other naming the wrong source", &wire.AssignRequest{Path: "/other", Ino: other.GetIno(), Parent: 1, Name: []byte("other"),
			Source: target, New: true, Req: &wire.RequestID{ClientId: 5152, Seq: 1, FirstIncomplete: 1}}, "belongs to ministry 1"},
		{"unassign /projects to a ministry that does not hold its parent", &wire.AssignRequest{Path: "/projects", Ino: projects.GetIno(), Parent: 1,
			Name: []byte("projects"), Source: target, Target: target, Unassign: true, Req: &wire.RequestID{ClientId: 5152, Seq: 2, FirstIncomplete: 2}},
			"the parent of /projects belongs to ministry 1"},
	} {
		start := time.Now()
		resp := rawAssign(ctx, t, c, tc.req)
		st := resp.GetStatus()
		if st.GetCode() != wire.Code_ERRNO || syscall.Errno(st.GetErrno()) != syscall.EINVAL || !strings.Contains(st.GetMessage(), tc.want) {
			t.Fatalf("%s: %v, want EINVAL %q", tc.what, st, tc.want)
		}
		t.Logf("%s: refused in %v: %s", tc.what, time.Since(start).Round(time.Millisecond), st.GetMessage())
	}
	after, err := cl.ClusterMap(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(after.GetMoves()) != len(before.GetMoves()) || len(after.GetMinistries()) != len(before.GetMinistries()) {
		t.Fatalf("refused assigns changed the map: %d moves, %d ministries before; %d, %d after",
			len(before.GetMoves()), len(before.GetMinistries()), len(after.GetMoves()), len(after.GetMinistries()))
	}
}

// checkMapNotModified: a president member answers a ClusterInfo naming
// the map index it is at with not_modified and no map (how idle nodes
// poll), and a stale index with the whole map.
func checkMapNotModified(ctx context.Context, t *testing.T, c *testcluster.ProcCluster) {
	t.Helper()
	cc, err := rpc.Dial(c.Addrs()[0], c.Security()) // a founder: a president member
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	mc := wire.NewMetaClient(cc)
	for try := 0; ; try++ {
		full, err := mc.ClusterInfo(ctx, &wire.ClusterInfoRequest{})
		if err != nil || full.GetMapIndex() == 0 || len(full.GetMembers()) == 0 {
			t.Fatalf("ClusterInfo of a president member: %v, %v (want the map and its index)", full, err)
		}
		same, err := mc.ClusterInfo(ctx, &wire.ClusterInfoRequest{KnownIndex: full.GetMapIndex()})
		if err != nil {
			t.Fatal(err)
		}
		if same.GetMapIndex() != full.GetMapIndex() && try < 20 {
			continue // the map changed in between (an inode grant)
		}
		if !same.GetNotModified() || len(same.GetMembers()) != 0 || len(same.GetMinistries()) != 0 {
			t.Fatalf("ClusterInfo with the current index %d: not_modified %v, %d members: want not_modified and no map",
				full.GetMapIndex(), same.GetNotModified(), len(same.GetMembers()))
		}
		old, err := mc.ClusterInfo(ctx, &wire.ClusterInfoRequest{KnownIndex: full.GetMapIndex() - 1})
		if err != nil || old.GetNotModified() || len(old.GetMembers()) == 0 {
			t.Fatalf("ClusterInfo with an older index: %v, %v (want the whole map)", old, err)
		}
		return
	}
}

// TestNewMinistriesSpreadTheirMinisters: on three nodes every ministry has
// the same members, so the one chosen to lead decides where the work
// goes: two new ministries get the two nodes that do not lead the root
// ministry, and their ministers end up there.
func TestNewMinistriesSpreadTheirMinisters(t *testing.T) {
	c := startCluster(t)
	cl := newClient(t, c, c.Addrs(), 30*time.Second)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	rootLeader := uint64(groupLeader(t, c, 1) + 1)
	leaders := map[uint64]bool{rootLeader: true}
	for _, p := range []string{"/a", "/b"} {
		if _, err := cl.Mkdir(ctx, p, 0o755); err != nil {
			t.Fatal(err)
		}
		mv, err := cl.Assign(ctx, p, client.AssignOptions{New: true})
		if err != nil || mv.GetState() != wire.MoveState_MOVE_DONE {
			t.Fatalf("assign %s: %v %v", p, mv, err)
		}
		info, err := cl.ClusterMap(ctx)
		if err != nil {
			t.Fatal(err)
		}
		first := ministryOf(info, mv.GetTarget()).GetMembers()[0]
		if leaders[first] {
			t.Fatalf("ministry %d for %s is to be led by node %d, which already leads one (leaders so far %v)", mv.GetTarget(), p, first, leaders)
		}
		leaders[first] = true
		waitUntil(t, 30*time.Second, fmt.Sprintf("node %d to lead ministry %d", first, mv.GetTarget()), func() bool {
			return uint64(groupLeader(t, c, mv.GetTarget())+1) == first
		})
	}
}
