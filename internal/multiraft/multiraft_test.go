package multiraft_test

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/govfs/govfs/internal/clock"
	"github.com/govfs/govfs/internal/engine"
	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/multiraft"
	"github.com/govfs/govfs/internal/multiraft/raftsim"
	"github.com/govfs/govfs/internal/wire"
	"github.com/prometheus/client_golang/prometheus"
)

// logSM records every applied request as "r"<client><seq> → index, and
// counts applications so double application is visible.
type logSM struct{}

func (logSM) Apply(rw engine.ReadWriter, index uint64, cmd *wire.Command) (*wire.Result, error) {
	k := binary.BigEndian.AppendUint64([]byte("r"), cmd.GetReq().GetClientId())
	k = binary.BigEndian.AppendUint64(k, cmd.GetReq().GetSeq())
	if v, err := rw.Get(k); err != nil {
		return nil, err
	} else if v != nil {
		return &wire.Result{Start: binary.BigEndian.Uint64(v)}, nil
	}
	if err := rw.Set(k, binary.BigEndian.AppendUint64(nil, index)); err != nil {
		return nil, err
	}
	return &wire.Result{Start: index}, nil
}

type cluster struct {
	t         testing.TB
	clk       *clock.Manual
	net       *raftsim.Network
	dirs      map[ids.NodeID]string
	hosts     map[ids.NodeID]*multiraft.Host
	engs      map[ids.NodeID]*engine.Engine
	stop      chan struct{}
	wg        sync.WaitGroup
	snapEvery uint64
	// sm is the state machine of every group (logSM when nil); knobs,
	// the failure hooks of a node's next start.
	sm    multiraft.StateMachine
	knobs map[ids.NodeID]*multiraft.TestingKnobs
	// cacheBytes sizes the engines' block caches (0: the default).
	cacheBytes int64
	// keep is KeepEntries (0: 10); regs, each node's metrics.
	keep uint64
	regs map[ids.NodeID]*prometheus.Registry
}

var peers = []ids.NodeID{1, 2, 3}

func newCluster(t *testing.T, snapEvery uint64) *cluster {
	return newClusterOf(t, snapEvery, nil)
}

func newClusterOf(t testing.TB, snapEvery uint64, sm multiraft.StateMachine) *cluster {
	return newClusterKeep(t, snapEvery, sm, 0)
}

// newClusterKeep is newClusterOf with KeepEntries keep (0: 10).
func newClusterKeep(t testing.TB, snapEvery uint64, sm multiraft.StateMachine, keep uint64) *cluster {
	c := &cluster{t: t, clk: clock.NewManual(time.Unix(1000, 0)), net: raftsim.NewNetwork(1),
		dirs: map[ids.NodeID]string{}, hosts: map[ids.NodeID]*multiraft.Host{}, engs: map[ids.NodeID]*engine.Engine{},
		stop: make(chan struct{}), snapEvery: snapEvery, sm: sm, knobs: map[ids.NodeID]*multiraft.TestingKnobs{}, keep: keep}
	for _, id := range peers {
		c.dirs[id] = t.TempDir()
		c.start(id)
	}
	// Drive the manual clock: one 10 ms tick per real millisecond.
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		for {
			select {
			case <-c.stop:
				return
			case <-time.After(time.Millisecond):
				c.clk.Advance(10 * time.Millisecond)
			}
		}
	}()
	t.Cleanup(c.close)
	return c
}

func (c *cluster) start(id ids.NodeID) {
	e, err := engine.Open(c.dirs[id], engine.Options{CacheBytes: c.cacheBytes})
	if err != nil {
		c.t.Fatal(err)
	}
	cfg := multiraft.DefaultConfig()
	cfg.NodeID = id
	cfg.Engine = e
	cfg.Transport = c.net.Transport(id)
	cfg.Clock = c.clk
	cfg.TickInterval = 10 * time.Millisecond
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg.SnapshotEvery = c.snapEvery
	cfg.KeepEntries = 10
	if c.keep > 0 {
		cfg.KeepEntries = c.keep
	}
	if c.regs == nil {
		c.regs = map[ids.NodeID]*prometheus.Registry{}
	}
	c.regs[id] = prometheus.NewRegistry()
	cfg.Registry = c.regs[id]
	cfg.Knobs = c.knobs[id]
	h, err := multiraft.NewHost(cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	var sm multiraft.StateMachine = logSM{}
	if c.sm != nil {
		sm = c.sm
	}
	for _, g := range []ids.GroupID{0, 1} {
		if err := h.AddGroup(g, sm, peers); err != nil {
			c.t.Fatal(err)
		}
	}
	c.hosts[id], c.engs[id] = h, e
	c.net.Register(id, h)
	h.Start()
}

func (c *cluster) kill(id ids.NodeID) {
	c.net.Unregister(id)
	c.hosts[id].Stop()
	c.engs[id].Close()
	delete(c.hosts, id)
	delete(c.engs, id)
}

func (c *cluster) close() {
	close(c.stop)
	c.wg.Wait()
	for id := range c.hosts {
		c.kill(id)
	}
	c.net.Wait()
}

func (c *cluster) leader(g ids.GroupID, among ...ids.NodeID) ids.NodeID {
	if len(among) == 0 {
		among = peers
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for _, id := range among {
			if h := c.hosts[id]; h != nil {
				if _, me := h.Leader(g); me {
					return id
				}
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	c.t.Fatalf("no leader for %v among %v", g, among)
	return 0
}

func (c *cluster) propose(g ids.GroupID, client, seq uint64, among ...ids.NodeID) (uint64, error) {
	deadline := time.Now().Add(10 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		l := c.leader(g, among...)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		res, _, err := c.hosts[l].Propose(ctx, g, &wire.Command{Version: 1, Req: &wire.RequestID{ClientId: client, Seq: seq}})
		cancel()
		if err == nil {
			return res.GetStart(), nil
		}
		last = err
	}
	return 0, last
}

// waitAll waits until every live host applied idx in g.
func (c *cluster) waitAll(g ids.GroupID, idx uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for id, h := range c.hosts {
		if err := h.WaitApplied(ctx, g, idx); err != nil {
			c.t.Fatalf("node %v did not apply %d in %v: %v", id, idx, g, err)
		}
	}
}

func (c *cluster) checkAll(g ids.GroupID, client uint64, seqs int) {
	for id, e := range c.engs {
		for s := 1; s <= seqs; s++ {
			k := append(engine.StatePrefix(uint64(g)), 'r')
			k = binary.BigEndian.AppendUint64(k, client)
			k = binary.BigEndian.AppendUint64(k, uint64(s))
			v, err := e.Get(k)
			if err != nil || v == nil {
				c.t.Fatalf("node %v group %v: request %d/%d missing (err %v)", id, g, client, s, err)
			}
		}
	}
}

func TestProposeReplicatesToAll(t *testing.T) {
	c := newCluster(t, 1000)
	var last uint64
	for s := uint64(1); s <= 50; s++ {
		for _, g := range []ids.GroupID{0, 1} {
			idx, err := c.propose(g, 7, s)
			if err != nil {
				t.Fatal(err)
			}
			last = max(last, idx)
		}
	}
	c.waitAll(1, c.hosts[c.leader(1)].Applied(1))
	c.waitAll(0, c.hosts[c.leader(0)].Applied(0))
	c.checkAll(0, 7, 50)
	c.checkAll(1, 7, 50)
	// A retried request returns the first index, not a new application.
	idx1, _ := c.propose(1, 7, 3)
	idx2, _ := c.propose(1, 7, 3)
	if idx1 != idx2 || idx1 == 0 || idx1 > last {
		t.Fatalf("retry of request 3 answered %d then %d; want the original index", idx1, idx2)
	}
}

func TestPartitionedLeaderStopsAcknowledging(t *testing.T) {
	c := newCluster(t, 1000)
	if _, err := c.propose(1, 9, 1); err != nil {
		t.Fatal(err)
	}
	old := c.leader(1)
	var rest []ids.NodeID
	for _, id := range peers {
		if id != old {
			rest = append(rest, id)
		}
	}
	c.net.Partition([]ids.NodeID{old}, rest)
	// The isolated leader must not acknowledge.
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	_, _, err := c.hosts[old].Propose(ctx, 1, &wire.Command{Version: 1, Req: &wire.RequestID{ClientId: 9, Seq: 2}})
	cancel()
	if err == nil {
		t.Fatal("isolated leader acknowledged a proposal")
	}
	// The majority elects and continues.
	for s := uint64(3); s <= 20; s++ {
		if _, err := c.propose(1, 9, s, rest...); err != nil {
			t.Fatal(err)
		}
	}
	newL := c.leader(1, rest...)
	// No split brain: the old leader steps down (check quorum).
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, me := c.hosts[old].Leader(1); !me {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("isolated leader still believes it leads")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := c.hosts[old].CheckReadable(1); err == nil {
		t.Fatal("cut-off replica still serves reads")
	}
	c.net.Heal()
	c.waitAll(1, c.hosts[newL].Applied(1))
	for id, e := range c.engs {
		for s := 3; s <= 20; s++ {
			k := binary.BigEndian.AppendUint64(append(engine.StatePrefix(1), 'r'), 9)
			k = binary.BigEndian.AppendUint64(k, uint64(s))
			if v, _ := e.Get(k); v == nil {
				t.Fatalf("node %v lost acknowledged request %d", id, s)
			}
		}
	}
}

func TestRestartCatchesUpBySnapshot(t *testing.T) {
	c := newCluster(t, 20)
	if _, err := c.propose(1, 5, 1); err != nil {
		t.Fatal(err)
	}
	l := c.leader(1)
	victim := followerOf(l)
	c.kill(victim)
	for s := uint64(2); s <= 200; s++ {
		if _, err := c.propose(1, 5, s); err != nil {
			t.Fatal(err)
		}
	}
	c.start(victim)
	c.waitAll(1, c.hosts[c.leader(1)].Applied(1))
	c.checkAll(1, 5, 200)
	first := uint64(0)
	for _, st := range c.hosts[c.leader(1)].Status() {
		if st.Group == 1 {
			first = st.FirstIndex
		}
	}
	if first < 100 {
		t.Fatalf("leader log first index %d: log was not truncated after snapshots", first)
	}
	// And the restarted node serves reads again.
	deadline := time.Now().Add(10 * time.Second)
	for c.hosts[victim].CheckReadable(1) != nil {
		if time.Now().After(deadline) {
			t.Fatal(errors.New("restarted node never became readable"))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestMembershipChangeReplacesAMember moves group 1 from {1,2,3} to
// {2,3,4}: node 4 joins empty and is added as a learner, catches up (by
// snapshot: the log was truncated), is promoted; node 1 is removed and
// drops its replica and key range. Every acknowledged request is on the
// new members, and the group keeps committing with node 1 gone.
func TestMembershipChangeReplacesAMember(t *testing.T) {
	c := newCluster(t, 20)
	for s := uint64(1); s <= 100; s++ {
		if _, err := c.propose(1, 11, s); err != nil {
			t.Fatal(err)
		}
	}
	c.dirs[4] = t.TempDir()
	c.start(4) // hosts groups 0 and 1 bootstrapped with {1,2,3}: drop 1 again, then join
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := c.hosts[4].RemoveGroup(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := c.hosts[4].JoinGroup(1, logSM{}); err != nil {
		t.Fatal(err)
	}
	change := func(ch multiraft.MemberChange, node ids.NodeID, done func(v, l []ids.NodeID) bool) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			l := c.leader(1, 1, 2, 3, 4)
			v, ls, err := c.hosts[l].ConfState(1)
			if err == nil && done(v, ls) {
				return
			}
			if err := c.hosts[l].ChangeMember(1, ch, node); err != nil {
				t.Logf("%v %v: %v", ch, node, err)
			}
			if time.Now().After(deadline) {
				t.Fatalf("%v of node %v not applied: voters %v learners %v", ch, node, v, ls)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	change(multiraft.AddLearner, 4, func(v, l []ids.NodeID) bool { return slices.Contains(l, 4) })
	// Caught up: node 4 applied what the leader has.
	deadline := time.Now().Add(20 * time.Second)
	for c.hosts[4].Applied(1) < c.hosts[c.leader(1)].Applied(1) {
		if time.Now().After(deadline) {
			t.Fatalf("learner at %d, leader at %d", c.hosts[4].Applied(1), c.hosts[c.leader(1)].Applied(1))
		}
		time.Sleep(5 * time.Millisecond)
	}
	change(multiraft.Promote, 4, func(v, l []ids.NodeID) bool { return slices.Contains(v, 4) && len(l) == 0 })
	if c.leader(1) == 1 {
		if err := c.hosts[1].TransferLeader(1, 2); err != nil {
			t.Fatal(err)
		}
		c.leader(1, 2)
	}
	change(multiraft.RemoveMember, 1, func(v, l []ids.NodeID) bool { return !slices.Contains(v, 1) })
	if err := c.hosts[1].RemoveGroup(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if c.hosts[1].HasGroup(1) {
		t.Fatal("node 1 still hosts group 1")
	}
	left := 0
	p := engine.GroupPrefix(1)
	_ = c.engs[1].Scan(p, engine.PrefixEnd(p), func(k, v []byte) bool { left++; return true })
	if left != 0 {
		t.Fatalf("node 1 kept %d keys of group 1 after removing it", left)
	}
	// {2,3,4} commits without node 1, even with node 1 stopped.
	c.kill(1)
	for s := uint64(101); s <= 120; s++ {
		if _, err := c.propose(1, 11, s, 2, 3, 4); err != nil {
			t.Fatal(err)
		}
	}
	c.waitAll(1, c.hosts[c.leader(1, 2, 3, 4)].Applied(1))
	for _, id := range []ids.NodeID{2, 3, 4} {
		for s := 1; s <= 120; s++ {
			k := binary.BigEndian.AppendUint64(append(engine.StatePrefix(1), 'r'), 11)
			k = binary.BigEndian.AppendUint64(k, uint64(s))
			if v, _ := c.engs[id].Get(k); v == nil {
				t.Fatalf("node %v: acknowledged request %d missing", id, s)
			}
		}
	}
}

// firstIndex is g's first log index on node id.
func (c *cluster) firstIndex(id ids.NodeID, g ids.GroupID) uint64 {
	for _, st := range c.hosts[id].Status() {
		if st.Group == g {
			return st.FirstIndex
		}
	}
	c.t.Fatalf("node %v does not host %v", id, g)
	return 0
}

func (c *cluster) snapshotsSent(id ids.NodeID) float64 {
	mfs, err := c.regs[id].Gather()
	if err != nil {
		c.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "govfs_raft_snapshots_sent_total" {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return 0
}

// TestLogTruncatedToFollowers: with every follower in step, each node's
// log is truncated to about 2×SnapshotEvery entries, so entries are
// deleted before they reach Pebble's tables; a leader keeps what a
// stopped follower lacks (up to KeepEntries), and that follower catches
// up from the log, with no snapshot; once it has, the log is short again.
func TestLogTruncatedToFollowers(t *testing.T) {
	const every = 20
	c := newClusterKeep(t, every, nil, 1000)
	propose := func(from, to uint64) {
		t.Helper()
		for s := from; s <= to; s++ {
			if _, err := c.propose(1, 7, s); err != nil {
				t.Fatal(err)
			}
		}
	}
	short := func(what string) {
		t.Helper()
		l := c.leader(1)
		applied := c.hosts[l].Applied(1)
		c.waitAll(1, applied)
		// One more round so every node truncated after the others
		// caught up (the leader truncates every `every` entries).
		propose(1000, 1000+2*every)
		applied = c.hosts[l].Applied(1)
		c.waitAll(1, applied)
		for id := range c.hosts {
			if first := c.firstIndex(id, 1); first+3*every < applied {
				t.Fatalf("%s: node %v keeps the log from %d, applied %d: more than %d entries", what, id, first, applied, 3*every)
			}
		}
	}
	propose(1, 300)
	short("all in step")
	l := c.leader(1)
	victim := followerOf(l)
	c.kill(victim)
	propose(301, 500)
	l = c.leader(1)
	c.start(victim)
	c.waitAll(1, c.hosts[l].Applied(1))
	c.checkAll(1, 7, 500)
	if n := c.snapshotsSent(l); n != 0 {
		t.Fatalf("the leader sent %v snapshots to a follower 200 entries behind with 1,000 kept", n)
	}
	short("after the catch-up")
}

// followerOf returns the first of peers that is not leader l.
func followerOf(l ids.NodeID) ids.NodeID {
	for _, id := range peers {
		if id != l {
			return id
		}
	}
	return 0
}
