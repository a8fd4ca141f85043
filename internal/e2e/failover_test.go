package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/rpc"
	"github.com/govfs/govfs/internal/testcluster"
	"github.com/govfs/govfs/internal/wire"
)

// TestKillLeaderDuringCreates kills -9 the root minister while 8 clients
// create files. Clients must carry on after the election; every
// acknowledged create must exist afterwards on every node; none may be
// answered EEXIST (which would mean a retry was applied twice).
func TestKillLeaderDuringCreates(t *testing.T) {
	c := startCluster(t)
	admin := newClient(t, c, c.Addrs(), 30*time.Second)
	ctx := context.Background()
	dir, err := admin.Mkdir(ctx, "/stream", 0o755)
	if err != nil {
		t.Fatal(err)
	}

	const workers = 8
	type ack struct {
		name string
		at   time.Time
	}
	var (
		mu    sync.Mutex
		acked []ack
		errs  []error
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		cl := newClient(t, c, c.Addrs(), 30*time.Second)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				name := fmt.Sprintf("w%d-%05d", w, i)
				_, err := cl.CreateAt(ctx, ids.Ino(dir.GetIno()), name, 0o644, true)
				mu.Lock()
				if err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", name, err))
				} else {
					acked = append(acked, ack{name, time.Now()})
				}
				mu.Unlock()
				if err != nil {
					return
				}
			}
		}()
	}
	time.Sleep(700 * time.Millisecond)
	victim := groupLeader(t, c, 1)
	killedAt := time.Now()
	c.Kill(victim)
	t.Logf("killed node %d (leader of group 1) at %v", victim+1, killedAt.Format(time.StampMilli))
	time.Sleep(2500 * time.Millisecond)
	if err := c.Start(victim); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1000 * time.Millisecond)
	close(stop)
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	for _, err := range errs {
		if errors.Is(err, syscall.EEXIST) {
			t.Errorf("a create was applied twice (retry not deduplicated): %v", err)
		} else {
			t.Errorf("client did not carry on after the election: %v", err)
		}
	}
	// Unavailability window: the longest gap between acknowledgements
	// that spans the kill.
	sort.Slice(acked, func(i, j int) bool { return acked[i].at.Before(acked[j].at) })
	var before, after int
	var window time.Duration
	for i := 1; i < len(acked); i++ {
		if acked[i-1].at.Before(killedAt) && !acked[i].at.Before(killedAt) {
			window = acked[i].at.Sub(acked[i-1].at)
		}
	}
	for _, a := range acked {
		if a.at.Before(killedAt) {
			before++
		} else {
			after++
		}
	}
	t.Logf("acknowledged creates: %d before the kill, %d after; unavailability window %v (election timeout 500 ms)", before, after, window)
	if before == 0 || after == 0 {
		t.Fatalf("want creates acknowledged both before (%d) and after (%d) the kill", before, after)
	}

	// Every acknowledged create exists, read linearizably through each node.
	want := map[string]bool{}
	for _, a := range acked {
		want[a.name] = true
	}
	for i, addr := range c.Addrs() {
		// Each node's own answer (a raw Meta client: the client library
		// would route to whichever member it prefers), linearizable so a
		// node that is catching up waits until it has everything.
		var have map[string]bool
		var err error
		deadline := time.Now().Add(20 * time.Second)
		for {
			have, err = namesVia(ctx, c.Security(), addr, dir.GetIno(), wire.ReadConsistency_LINEARIZABLE)
			if err == nil || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if err != nil {
			t.Fatalf("readdir via node %d: %v", i+1, err)
		}
		for n := range want {
			if !have[n] {
				t.Errorf("node %d: acknowledged create %s is missing", i+1, n)
			}
		}
		// Nothing beyond what was attempted: at most one in-flight create
		// per worker may exist without an acknowledgement.
		if extra := len(have) - len(want); extra < 0 || extra > workers {
			t.Errorf("node %d: %d entries for %d acknowledged creates", i+1, len(have), len(want))
		}
	}
}

// killWriteRestart kills -9 a follower of the root ministry, creates n
// files in dir while it is down, restarts it and waits until the node
// alone serves all of them (session reads through that node only: the
// client has seen nothing, so it reads the node's own state). It returns
// the victim's index.
func killWriteRestart(t *testing.T, c *testcluster.ProcCluster, dir string, n int) int {
	t.Helper()
	ctx := context.Background()
	admin := newClient(t, c, c.Addrs(), 30*time.Second)
	victim := (groupLeader(t, c, 1) + 1) % 3
	c.Kill(victim)
	if _, err := admin.Mkdir(ctx, dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if _, err := admin.Create(ctx, fmt.Sprintf("%s/f%03d", dir, i), 0o644, true); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Start(victim); err != nil {
		t.Fatal(err)
	}
	// Read through the restarted node itself (a raw Meta client: the
	// client library would learn the other members and read from them).
	attr, err := admin.Stat(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		got, err := countEntriesVia(ctx, c.Security(), c.Addrs()[victim], attr.GetIno())
		if err == nil && got == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("restarted node %d never caught up: %d entries, err %v", victim+1, got, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// A fresh connection: the client's old one to this address may still
	// be backing off from the kill.
	cc, err := rpc.Dial(c.Addrs()[victim], c.Security())
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, err := wire.NewMetaClient(cc).Status(sctx, &wire.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range st.GetGroups() {
		if g.GetRole() == "" || g.GetApplied() == 0 {
			t.Errorf("restarted node group %d: role %q applied %d", g.GetGroup(), g.GetRole(), g.GetApplied())
		}
	}
	return victim
}

// TestRestartedNodeCatchesUp kills -9 a follower, writes while it is down,
// restarts it and checks that it serves the new data itself.
func TestRestartedNodeCatchesUp(t *testing.T) {
	killWriteRestart(t, startCluster(t), "/while-down", 300)
}

// TestRestartedNodeCatchesUpBySnapshot is TestRestartedNodeCatchesUp with
// logs truncated every 100 entries, so the restarted node is too far
// behind for the log and must install a streamed snapshot.
func TestRestartedNodeCatchesUpBySnapshot(t *testing.T) {
	rctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := testcluster.StartReady(rctx, testcluster.ProcConfig{Binary: binary, Dir: t.TempDir(), Nodes: 3,
		Tick: 50 * time.Millisecond, ExtraArgs: []string{"--snapshot-every", "100", "--log-keep", "50", "--log-level", "info"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	victim := killWriteRestart(t, c, "/snap", 600)
	logb, err := os.ReadFile(c.LogPath(victim))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(logb), "installed snapshot") {
		t.Fatalf("node %d caught up without installing a snapshot; log:\n%s", victim+1, tail(logb, 2000))
	}
}

// countEntriesVia counts directory ino's entries as node addr alone
// serves them (session read with no minimum index: its own state).
func countEntriesVia(ctx context.Context, sec *rpc.Security, addr string, ino uint64) (int, error) {
	names, err := namesVia(ctx, sec, addr, ino, wire.ReadConsistency_SESSION)
	return len(names), err
}

// namesVia lists directory ino as node addr alone serves it.
func namesVia(ctx context.Context, sec *rpc.Security, addr string, ino uint64, cons wire.ReadConsistency) (map[string]bool, error) {
	cc, err := rpc.Dial(addr, sec)
	if err != nil {
		return nil, err
	}
	defer cc.Close()
	mc := wire.NewMetaClient(cc)
	names := map[string]bool{}
	var cookie []byte
	for {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		resp, err := mc.Read(rctx, &wire.ReadRequest{Group: 1, Consistency: cons,
			Op: &wire.ReadRequest_Readdir{Readdir: &wire.ReaddirReq{Ino: ino, Cookie: cookie, Limit: 1024}}})
		cancel()
		if err != nil {
			return names, err
		}
		if st := resp.GetStatus(); st.GetCode() != wire.Code_OK {
			return names, fmt.Errorf("%v: %s", st.GetCode(), st.GetMessage())
		}
		for _, e := range resp.GetEntries() {
			names[string(e.GetName())] = true
		}
		if resp.GetEof() {
			return names, nil
		}
		cookie = resp.GetNextCookie()
	}
}
