package multiraft_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/govfs/govfs/internal/engine"
	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/multiraft"
)

// stateOf returns group g's state keys and values on node id.
func (c *cluster) stateOf(id ids.NodeID, g uint64) map[string][]byte {
	out := map[string][]byte{}
	p := engine.StatePrefix(g)
	if err := c.engs[id].Scan(p, engine.PrefixEnd(p), func(k, v []byte) bool {
		out[string(k[len(p):])] = bytes.Clone(v)
		return true
	}); err != nil {
		c.t.Fatal(err)
	}
	return out
}

// TestSnapshotInstallResumesAfterCrash: a follower that missed ~8 MiB of
// state catches up by a snapshot that is staged on its disk as it streams
// and copied over its state range in pages; killed in the middle of the
// copy (its state range half replaced), it finishes the install at the
// next start from the staging area, which is then gone, and holds exactly
// what the leader holds.
func TestSnapshotInstallResumesAfterCrash(t *testing.T) {
	c := newClusterOf(t, 20, padSM{})
	if _, err := c.propose(1, 7, 1); err != nil {
		t.Fatal(err)
	}
	l := c.leader(1)
	victim := peers[0]
	if victim == l {
		victim = peers[1]
	}
	c.kill(victim)
	const n = 128
	for s := uint64(2); s <= n; s++ {
		if _, err := c.propose(1, 7, s); err != nil {
			t.Fatal(err)
		}
	}
	crashed := errors.New("injected crash in the middle of a snapshot install")
	c.knobs[victim] = &multiraft.TestingKnobs{BeforeInstallPage: func(page int) error {
		if page == 3 {
			return crashed
		}
		return nil
	}}
	c.start(victim)
	select {
	case <-c.hosts[victim].Fatal():
	case <-time.After(20 * time.Second):
		t.Fatal("the follower never installed a snapshot (the knob was not reached)")
	}
	if err := c.hosts[victim].Err(); !errors.Is(err, crashed) {
		t.Fatalf("follower failed with %v, want the injected crash", err)
	}
	if v, _ := c.engs[victim].Get(engine.GroupKey(1, 'i')); v == nil {
		t.Fatal("no install marker after a crash in the middle of the copy")
	}
	half := len(c.stateOf(victim, 1))
	if half == 0 || half >= n {
		t.Fatalf("state range after the crash has %d keys: want a partial copy (0 < k < %d)", half, n)
	}
	c.kill(victim)
	delete(c.knobs, victim)
	c.start(victim)
	if v, _ := c.engs[victim].Get(engine.GroupKey(1, 'i')); v != nil {
		t.Fatal("install marker still there after the restart")
	}
	c.waitAll(1, c.hosts[c.leader(1)].Applied(1))
	staged := 0
	sp := engine.GroupKey(1, 'S')
	_ = c.engs[victim].Scan(sp, engine.PrefixEnd(sp), func(k, v []byte) bool { staged++; return true })
	if staged != 0 {
		t.Fatalf("%d staged keys left after the install", staged)
	}
	got, want := c.stateOf(victim, 1), c.stateOf(c.leader(1), 1)
	if len(got) != n || len(want) != n {
		t.Fatalf("follower holds %d requests, leader %d, want %d", len(got), len(want), n)
	}
	for k, v := range want {
		if !bytes.Equal(got[k], v) {
			t.Fatalf("follower's value of %x differs from the leader's", k)
		}
	}
	// And it goes on replicating after the install.
	if _, err := c.propose(1, 7, n+1); err != nil {
		t.Fatal(err)
	}
	c.waitAll(1, c.hosts[c.leader(1)].Applied(1))
	if len(c.stateOf(victim, 1)) != n+1 {
		t.Fatal("follower did not apply the entry after the snapshot")
	}
}
