package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/govfs/govfs/client"
	"github.com/govfs/govfs/internal/rpc"
	"github.com/govfs/govfs/internal/testcluster"
	"github.com/govfs/govfs/internal/wire"
)

// TestReplicaMovedByHand: `govfs admin move-replica` moves a delegated
// ministry's replica off its minister, and `govfs admin drain` moves
// every ministry replica off a president voter, both while a client
// creates files in both ministries. The new nodes vote, the old ones drop
// their replicas, the president voter keeps its president replica, and
// every acknowledged create is there with its bytes. Bad requests are
// refused with a clear error and change nothing.
func TestReplicaMovedByHand(t *testing.T) {
	c := testcluster.StartForTest(t, 120*time.Second, testcluster.ProcConfig{Binary: binary, Dir: t.TempDir(), Nodes: 5,
		Tick: 50 * time.Millisecond, ExtraArgs: []string{"--snapshot-every", "200", "--log-keep", "100"}})
	cl := newClient(t, c, c.Addrs(), 60*time.Second)
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	if _, err := cl.Mkdir(ctx, "/r", 0o755); err != nil {
		t.Fatal(err)
	}
	mv, err := cl.Assign(ctx, "/r", client.AssignOptions{New: true, Nodes: []uint64{3, 4, 5}})
	if err != nil || mv.GetState() != wire.MoveState_MOVE_DONE {
		t.Fatalf("assign /r: %v %v", mv, err)
	}
	g := mv.GetTarget()
	pool := rpc.NewPool(c.Security())
	defer pool.Close()
	status := func(node uint64) *wire.StatusResponse { return nodeStatusAt(ctx, pool, c.Addrs()[node-1]) }
	groupAt := func(node, group uint64) *wire.GroupStatus { return groupStatusAt(ctx, pool, c.Addrs()[node-1], group) }
	leaderOf := func(group uint64) uint64 {
		for node := uint64(1); node <= 5; node++ {
			if gs := groupAt(node, group); gs != nil && gs.GetLeader() == node {
				return node
			}
		}
		return 0
	}
	membersOf := func(group uint64) []uint64 {
		info, err := cl.ClusterMap(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return ministryOf(info, group).GetMembers()
	}

	w := startCreates(t, ctx, cl, "/r", "")
	waitUntil(t, 30*time.Second, "200 creates", func() bool { return w.count() >= 200 })

	// Bad requests: each refused, the map unchanged.
	before := membersOf(g)
	rootBefore := membersOf(1)
	for _, bad := range []struct {
		what               string
		ministry, from, to uint64
		want               syscall.Errno
	}{
		{"a node that does not exist", g, 99, 0, syscall.ENOENT},
		{"to a node that does not exist", g, 3, 99, syscall.ENOENT},
		{"from a node outside the ministry", g, 1, 2, syscall.ENOENT},
		{"to a node already a member", g, 3, 4, syscall.EEXIST},
		{"a ministry that does not exist", 77, 3, 1, syscall.ENOENT},
		{"the president group", 0, 1, 4, syscall.EOPNOTSUPP},
	} {
		_, err := cl.MoveReplica(ctx, bad.ministry, bad.from, bad.to)
		if !errors.Is(err, bad.want) {
			t.Errorf("move-replica %s: %v, want %v", bad.what, err, bad.want)
		} else {
			t.Logf("move-replica %s: %v", bad.what, err)
		}
	}
	if got := membersOf(g); !slices.Equal(got, before) {
		t.Fatalf("refused requests changed ministry %d's members: %v -> %v", g, before, got)
	}
	if got := membersOf(1); !slices.Equal(got, rootBefore) {
		t.Fatalf("refused requests changed the root ministry's members: %v -> %v", rootBefore, got)
	}

	// 1. The delegated ministry's minister gives its replica to node 1,
	// through the CLI.
	var minister uint64
	waitUntil(t, 20*time.Second, fmt.Sprintf("a minister of %d", g), func() bool { minister = leaderOf(g); return minister != 0 })
	n0 := w.count()
	start := time.Now()
	out, err := exec.Command(binary, "admin", "move-replica", fmt.Sprint(g), "--from", fmt.Sprint(minister), "--to", "1",
		"--meta", strings.Join(c.Addrs(), ","), "--tls", c.ClientTLSDir(), "--timeout", "60s").CombinedOutput()
	if err != nil {
		t.Fatalf("govfs admin move-replica: %v\n%s", err, out)
	}
	t.Logf("move-replica of ministry %d off its minister (node %d) took %v:\n%s", g, minister, time.Since(start).Round(time.Millisecond), out)
	want := slices.Clone(before)
	want[slices.Index(want, minister)] = 1
	if got := membersOf(g); !slices.Equal(got, want) {
		t.Fatalf("ministry %d's members after the move: %v, want %v", g, got, want)
	}
	if gs := groupAt(1, g); gs == nil || !slices.Equal(sortedCopy(gs.GetVoters()), sortedCopy(want)) {
		t.Fatalf("node 1's view of ministry %d after the command returned: %v, want voters %v", g, gs, want)
	}
	waitUntil(t, 30*time.Second, fmt.Sprintf("node %d to drop its replica of %d", minister, g), func() bool {
		st := status(minister)
		return st != nil && !slices.ContainsFunc(st.GetGroups(), func(gs *wire.GroupStatus) bool { return gs.GetGroup() == g })
	})
	waitUntil(t, 30*time.Second, "creates after the move", func() bool { return w.count() >= n0+100 })

	// 2. Drain node 2: a president voter and a member of the root
	// ministry, which moves to a node outside it; node 2 keeps its
	// president replica.
	n1 := w.count()
	start = time.Now()
	out, err = exec.Command(binary, "admin", "drain", "2", "--json",
		"--meta", strings.Join(c.Addrs(), ","), "--tls", c.ClientTLSDir(), "--timeout", "60s").CombinedOutput()
	if err != nil {
		t.Fatalf("govfs admin drain 2: %v\n%s", err, out)
	}
	var rep struct {
		Moves []struct {
			Ministry, From, To uint64
			Members            []uint64
			Done               bool
		}
		Stays []uint64
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("govfs admin drain --json: %v\n%s", err, out)
	}
	t.Logf("drain of node 2 took %v: %s", time.Since(start).Round(time.Millisecond), out)
	if len(rep.Moves) != 1 || rep.Moves[0].Ministry != 1 || rep.Moves[0].From != 2 || !rep.Moves[0].Done ||
		slices.Contains(rep.Moves[0].Members, 2) || !slices.Equal(rep.Stays, []uint64{0}) {
		t.Fatalf("drain of node 2: %+v; want the root ministry moved off it, done, and the president group staying", rep)
	}
	waitUntil(t, 30*time.Second, "node 2 to drop its root ministry replica", func() bool {
		st := status(2)
		return st != nil && !slices.ContainsFunc(st.GetGroups(), func(gs *wire.GroupStatus) bool { return gs.GetGroup() == 1 }) &&
			slices.ContainsFunc(st.GetGroups(), func(gs *wire.GroupStatus) bool { return gs.GetGroup() == 0 })
	})
	waitUntil(t, 30*time.Second, "creates after the drain", func() bool { return w.count() >= n1+100 })
	// A drain of a node holding nothing moves nothing.
	if resp, err := cl.Drain(ctx, 2, 0); err != nil || len(resp.GetMoves()) != 0 {
		t.Fatalf("second drain of node 2: %v, %v; want nothing to move", resp, err)
	}

	acked := w.finish()
	check := newClient(t, c, c.Addrs(), 60*time.Second)
	for _, p := range acked {
		if b, err := get(ctx, check, p); err != nil || b != p {
			t.Fatalf("acknowledged %s: %q, %v", p, b, err)
		}
	}
	t.Logf("%d acknowledged creates all present", len(acked))
}
