package e2e

import (
	"context"
	"fmt"
	"path"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/govfs/govfs/client"
	"github.com/govfs/govfs/internal/rpc"
	"github.com/govfs/govfs/internal/testcluster"
	"github.com/govfs/govfs/internal/wire"
)

// TestDeadMinistryMemberReplaced: a member of a delegated ministry is
// killed; after --replace-dead-after the president gives its place to a
// live node, which joins empty and catches up; a second member can then
// die without the ministry losing its quorum (it would have without the
// replacement). The dead node, back, leaves the group and deletes its
// replica. Every acknowledged write is there with its bytes.
func TestDeadMinistryMemberReplaced(t *testing.T) {
	c := testcluster.StartForTest(t, 120*time.Second, testcluster.ProcConfig{Binary: binary, Dir: t.TempDir(), Nodes: 5,
		Tick: 50 * time.Millisecond, ExtraArgs: []string{"--replace-dead-after", "3s", "--snapshot-every", "200", "--log-keep", "100"}})
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

	w := startCreates(t, ctx, cl, "/r")
	waitUntil(t, 30*time.Second, "300 creates in /r", func() bool { return w.count() >= 300 })

	c.Kill(4) // node 5
	killed := time.Now()
	var members []uint64
	waitUntil(t, 60*time.Second, "node 5 replaced in the map", func() bool {
		info, err := cl.ClusterMap(ctx)
		if err != nil {
			return false
		}
		members = ministryOf(info, g).GetMembers()
		return len(members) == 3 && !slices.Contains(members, 5)
	})
	added := members[2]
	t.Logf("node 5 replaced by node %d %v after it was killed: members %v", added, time.Since(killed).Round(100*time.Millisecond), members)
	pool := rpc.NewPool(c.Security())
	defer pool.Close()
	groupAt := func(i int) *wire.GroupStatus { return groupStatusAt(ctx, pool, c.Addrs()[i], g) }
	waitUntil(t, 60*time.Second, fmt.Sprintf("node %d to vote in ministry %d", added, g), func() bool {
		gs := groupAt(int(added) - 1)
		return gs != nil && slices.Equal(sortedCopy(gs.GetVoters()), sortedCopy(members)) && gs.GetApplied() > 0
	})
	t.Logf("voters of ministry %d now %v", g, members)

	// A second original member dies: {3, new} of 3 still commit.
	c.Kill(3) // node 4
	n0 := w.count()
	waitUntil(t, 60*time.Second, "creates after a second member died", func() bool { return w.count() >= n0+100 })

	// The first dead node comes back: it is out of the group and drops
	// its replica. Meanwhile it must not serve what it holds: a file
	// created after it died is never answered ENOENT by it.
	late := w.last()
	rootIno, err := cl.Stat(ctx, "/r")
	if err != nil {
		t.Fatal(err)
	}
	// And it must not vote: the group's term does not move while it is
	// back (PreVote; its campaigns reach members that hear a leader).
	before := groupAt(int(members[0]) - 1)
	if err := c.Start(4); err != nil {
		t.Fatal(err)
	}
	staleChecks := 0
	waitUntil(t, 60*time.Second, "node 5 to drop its replica", func() bool {
		cc, err := pool.Get(c.Addrs()[4])
		if err != nil {
			return false
		}
		for _, cons := range []wire.ReadConsistency{wire.ReadConsistency_SESSION, wire.ReadConsistency_LINEARIZABLE} {
			rctx, rcancel := context.WithTimeout(ctx, time.Second)
			r, err := wire.NewMetaClient(cc).Read(rctx, &wire.ReadRequest{Group: g, Consistency: cons,
				Op: &wire.ReadRequest_Lookup{Lookup: &wire.LookupReq{Parent: rootIno.GetIno(), Name: []byte(path.Base(late))}}})
			rcancel()
			if err == nil && r.GetStatus().GetCode() == wire.Code_ERRNO && syscall.Errno(r.GetStatus().GetErrno()) == syscall.ENOENT {
				t.Fatalf("node 5, back after it was replaced, answered %v lookup of %s with ENOENT: stale state served", cons, late)
			}
			staleChecks++
		}
		sctx, scancel := context.WithTimeout(ctx, time.Second)
		defer scancel()
		st, err := wire.NewMetaClient(cc).Status(sctx, &wire.StatusRequest{})
		return err == nil && !slices.ContainsFunc(st.GetGroups(), func(gs *wire.GroupStatus) bool { return gs.GetGroup() == g })
	})
	if after := groupAt(int(members[0]) - 1); before == nil || after == nil || after.GetTerm() != before.GetTerm() {
		t.Fatalf("ministry %d's term moved while the replaced node was back: %v -> %v", g, before, after)
	}
	if err := c.Start(3); err != nil {
		t.Fatal(err)
	}
	acked := w.finish()
	check := newClient(t, c, c.Addrs(), 60*time.Second)
	for _, p := range acked {
		if b, err := get(ctx, check, p); err != nil || b != p {
			t.Fatalf("acknowledged %s: %q, %v", p, b, err)
		}
	}
	t.Logf("%d acknowledged creates all present; %d reads at the returned node, none stale", len(acked), staleChecks)
}

func sortedCopy(l []uint64) []uint64 {
	out := slices.Clone(l)
	slices.Sort(out)
	return out
}

// waitUntil polls cond every 50 ms until it holds or limit passes.
func waitUntil(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", limit, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// nodesHosting returns the addresses (of addrs) whose node hosts a replica
// of group g, by asking each for its status; a node that does not answer
// counts as hosting it (nothing is known).
func nodesHosting(ctx context.Context, sec *rpc.Security, addrs []string, g uint64) []string {
	var out []string
	for _, a := range addrs {
		cc, err := rpc.Dial(a, sec)
		if err != nil {
			out = append(out, a)
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		st, err := wire.NewMetaClient(cc).Status(sctx, &wire.StatusRequest{})
		cancel()
		cc.Close()
		if err != nil || slices.ContainsFunc(st.GetGroups(), func(gs *wire.GroupStatus) bool { return gs.GetGroup() == g }) {
			out = append(out, a)
		}
	}
	return out
}

// TestJoinedOnlyMinistryRestartsWithoutThePresident: a ministry whose
// three members all joined later (none of them in --peers) is restarted
// while no president member is up: its members find each other from the
// addresses their data directories remember, elect a minister, and
// every acknowledged write is there once the rest of the cluster is back.
func TestJoinedOnlyMinistryRestartsWithoutThePresident(t *testing.T) {
	c := testcluster.StartForTest(t, 120*time.Second, testcluster.ProcConfig{Binary: binary, Dir: t.TempDir(), Nodes: 6, Tick: 50 * time.Millisecond})
	cl := newClient(t, c, c.Addrs(), 60*time.Second)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	if _, err := cl.Mkdir(ctx, "/j", 0o755); err != nil {
		t.Fatal(err)
	}
	mv, err := cl.Assign(ctx, "/j", client.AssignOptions{New: true, Nodes: []uint64{4, 5, 6}})
	if err != nil || mv.GetState() != wire.MoveState_MOVE_DONE {
		t.Fatalf("assign /j to nodes 4,5,6: %v %v", mv, err)
	}
	g := mv.GetTarget()
	var acked []string
	for i := range 50 {
		p := fmt.Sprintf("/j/f%d", i)
		if err := put(ctx, cl, p, p); err != nil {
			t.Fatal(err)
		}
		acked = append(acked, p)
	}
	for i := range 6 {
		c.Kill(i)
	}
	for i := 3; i < 6; i++ {
		if err := c.Start(i); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, 30*time.Second, fmt.Sprintf("ministry %d to elect a minister among nodes 4-6 with no president member up", g), func() bool {
		cc, err := rpc.Dial(c.Addrs()[3], c.Security())
		if err != nil {
			return false
		}
		defer cc.Close()
		sctx, scancel := context.WithTimeout(ctx, time.Second)
		defer scancel()
		st, err := wire.NewMetaClient(cc).Status(sctx, &wire.StatusRequest{})
		if err != nil {
			return false
		}
		for _, gs := range st.GetGroups() {
			if gs.GetGroup() == g && gs.GetLeader() >= 4 {
				return true
			}
		}
		return false
	})
	for i := range 3 {
		if err := c.Start(i); err != nil {
			t.Fatal(err)
		}
	}
	fresh := newClient(t, c, c.Addrs(), 60*time.Second)
	for _, p := range acked {
		if b, err := get(ctx, fresh, p); err != nil || b != p {
			t.Fatalf("acknowledged %s: %q, %v", p, b, err)
		}
	}
}
