package nemesis

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/govfs/govfs/client"
	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/rpc"
	"github.com/govfs/govfs/internal/testcluster"
	"github.com/govfs/govfs/internal/wire"
)

// TestMinisterCutOffFromClerksStepsDown is the thesis' §6.2 case: the
// minister of a delegated ministry loses its clerks but still reaches the
// president's members. It must step down (CheckQuorum) rather than keep
// acknowledging; the clerks elect a new minister and clients go on; a
// change sent to the old minister is never acknowledged; after healing
// every acknowledged create is there once and the rejected one nowhere.
func TestMinisterCutOffFromClerksStepsDown(t *testing.T) {
	c := testcluster.NewInProc(t, 5)
	seed := testSeed(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl := newClient(t, c.Addrs(), seed, 30*time.Second, time.Second)
	if _, err := cl.Mkdir(ctx, "/sub", 0o755); err != nil {
		t.Fatal(err)
	}
	mv, err := cl.Assign(ctx, "/sub", client.AssignOptions{New: true, Nodes: []uint64{3, 4, 5}})
	if err != nil || mv.GetState() != wire.MoveState_MOVE_DONE {
		t.Fatalf("assign /sub: %v %v", mv, err)
	}
	g := ids.GroupID(mv.GetTarget())
	sub, err := cl.Stat(ctx, "/sub")
	if err != nil {
		t.Fatal(err)
	}
	// Node 3, the first member, is handed the ministry.
	minister := ids.NodeID(3)
	waitFor(t, 30*time.Second, fmt.Sprintf("node %v to lead %v", minister, g), func() bool {
		_, me := c.Node(minister).Host().Leader(g)
		return me
	})

	var mu sync.Mutex
	var acked []string
	stop := make(chan struct{})
	var wg sync.WaitGroup
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(acked)
	}
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			name := fmt.Sprintf("f%d", i)
			if _, err := cl.CreateAt(ctx, ids.Ino(sub.GetIno()), name, 0o644, true); err != nil {
				t.Logf("create %s: %v (not acknowledged)", name, err)
				continue
			}
			mu.Lock()
			acked = append(acked, name)
			mu.Unlock()
		}
	})
	waitFor(t, 10*time.Second, "creates before the partition", func() bool { return count() >= 20 })

	c.Net.Partition([]ids.NodeID{minister}, []ids.NodeID{4, 5})
	cut := time.Now()
	defer c.Net.Heal()
	t.Logf("minister %v of %v cut off from its clerks 4 and 5 (not from the president's members 1 and 2)", minister, g)
	waitFor(t, 30*time.Second, "the cut-off minister to step down and a clerk to lead", func() bool {
		_, old := c.Node(minister).Host().Leader(g)
		_, l4 := c.Node(4).Host().Leader(g)
		_, l5 := c.Node(5).Host().Leader(g)
		return !old && (l4 || l5)
	})
	t.Logf("stepped down and replaced %v after the cut", time.Since(cut).Round(time.Millisecond))
	// The president is unaffected: its group still has a leader that
	// answers.
	if _, err := cl.ClusterMap(ctx); err != nil {
		t.Fatalf("cluster map during the partition: %v", err)
	}
	// A change sent to the old minister is not acknowledged.
	pool := rpc.NewPool(nil)
	defer pool.Close()
	cc, err := pool.Get(c.Peers[minister])
	if err != nil {
		t.Fatal(err)
	}
	mctx, mcancel := context.WithTimeout(ctx, 2*time.Second)
	resp, err := wire.NewMetaClient(cc).Mutate(mctx, &wire.MutateRequest{Group: uint64(g), Cmd: &wire.Command{Version: 1,
		Req: &wire.RequestID{ClientId: 0x6e6d, Seq: 1, FirstIncomplete: 1},
		Op: &wire.Command_Create{Create: &wire.CreateOp{Parent: sub.GetIno(), Name: []byte("iso"), Type: wire.FileType_REGULAR,
			Mode: 0o644, Exclusive: true, Cred: &wire.Cred{}}}}})
	mcancel()
	if err == nil && resp.GetStatus().GetCode() == wire.Code_OK {
		t.Fatalf("the cut-off minister acknowledged a create: %v", resp)
	}
	// Clients go on with the new minister.
	n0 := count()
	waitFor(t, 30*time.Second, "creates acknowledged by the new minister", func() bool { return count() >= n0+20 })

	c.Net.Heal()
	close(stop)
	wg.Wait()
	check := newClient(t, c.Addrs(), seed+1, 30*time.Second, time.Second)
	ents, err := check.ReaddirAll(ctx, ids.Ino(sub.GetIno()), client.Linearizable())
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]int{}
	for _, e := range ents {
		have[string(e.GetName())]++
	}
	for _, name := range acked {
		if have[name] != 1 {
			t.Errorf("acknowledged create %s: %d entries", name, have[name])
		}
	}
	if have["iso"] != 0 {
		t.Errorf("the create sent only to the cut-off minister exists")
	}
	t.Logf("%d acknowledged creates all present once", len(acked))
}

// waitFor polls cond every 10 ms until it holds or limit passes.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", limit, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
