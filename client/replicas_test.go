package client

import (
	"slices"
	"testing"
	"time"

	"github.com/govfs/govfs/internal/clock"
	"github.com/govfs/govfs/internal/wire"
)

func TestReadOrder(t *testing.T) {
	clk := clock.NewManual(time.Unix(1000, 0))
	c := &Client{cfg: Config{Host: "h9", Rack: "r2", Clock: clk}}
	c.mu.chunkServers = map[uint64]*wire.ChunkServer{
		1: {Id: 1, Host: "h1", Rack: "r1"},
		2: {Id: 2, Host: "h2", Rack: "r2"},
		3: {Id: 3, Host: "h3", Rack: "r3"},
		4: {Id: 4, Host: "h9", Rack: "r4"},
	}
	g := &wire.ReplicaGroup{Members: []uint64{1, 2, 3}}
	// Same rack first; the others by expected time (all unknown: equal).
	if got := c.readOrder(g, 1<<20); got[0] != 2 || len(got) != 3 {
		t.Fatalf("order %v: want the same-rack member 2 first", got)
	}
	// Same host beats same rack; a syncing member is never read.
	g2 := &wire.ReplicaGroup{Members: []uint64{1, 2, 4}, Syncing: []uint64{1}}
	if got := c.readOrder(g2, 1<<20); !slices.Equal(got, []uint64{4, 2}) {
		t.Fatalf("order %v: want [4 2]", got)
	}
	// Among equally near members: fewer bytes in flight, then faster.
	far := &wire.ReplicaGroup{Members: []uint64{1, 3}}
	busy := c.load.begin(1, 64<<20, clk.Now)
	if got := c.readOrder(far, 1<<20); got[0] != 3 {
		t.Fatalf("order %v: want the idle member 3 first", got)
	}
	clk.Advance(10 * time.Millisecond)
	busy(true) // 64 MiB in 10 ms: member 1 is fast
	slow := c.load.begin(3, 1<<20, clk.Now)
	clk.Advance(100 * time.Millisecond)
	slow(true) // 1 MiB in 100 ms: member 3 is slow
	if got := c.readOrder(far, 1<<20); got[0] != 1 {
		t.Fatalf("order %v: want the faster member 1 first", got)
	}
	// A member that just failed goes last.
	c.load.begin(1, 1, clk.Now)(false)
	if got := c.readOrder(far, 1<<20); got[0] != 3 {
		t.Fatalf("order %v: want member 3 first after member 1 failed", got)
	}
	clk.Advance(failMemory + time.Second)
	if got := c.readOrder(far, 1<<20); got[0] != 1 {
		t.Fatalf("order %v: member 1's failure should be forgotten", got)
	}
}
