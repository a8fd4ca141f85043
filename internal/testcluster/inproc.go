package testcluster

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/govfs/govfs/internal/clock"
	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/metanode"
	"github.com/govfs/govfs/internal/multiraft"
	"github.com/govfs/govfs/internal/multiraft/raftsim"
)

// InProc is a cluster of metadata nodes inside the test process. Raft
// traffic goes through a raftsim.Network (partitions, drops); clients use
// the real gRPC Meta service of each node on 127.0.0.1.
type InProc struct {
	t     testing.TB
	Net   *raftsim.Network
	Clock clock.Clock
	Peers map[ids.NodeID]string
	dir   string
	// configure, when set, adjusts each node's Config before it starts.
	configure func(*metanode.Config)

	mu    sync.Mutex
	nodes map[ids.NodeID]*metanode.Node
}

// NewInProc starts n nodes with a fast tick (10 ms, election timeout
// 100 ms) and stops them at test cleanup.
func NewInProc(t testing.TB, n int) *InProc { return NewInProcConfig(t, n, nil) }

// NewInProcConfig is NewInProc with each node's Config adjusted by
// configure (e.g. a short lease TTL).
func NewInProcConfig(t testing.TB, n int, configure func(*metanode.Config)) *InProc {
	// Ports are picked by binding :0 and releasing them; a concurrent test
	// can take one first, so try fresh ports a few times.
	for attempt := 1; ; attempt++ {
		peers := map[ids.NodeID]string{}
		var ports portPicker
		for i := 1; i <= n; i++ {
			a, err := ports.pick()
			if err != nil {
				t.Fatal(err)
			}
			peers[ids.NodeID(i)] = a
		}
		c, err := newInProc(t, peers, configure)
		if err == nil {
			return c
		}
		if attempt == 3 || !strings.Contains(err.Error(), "address already in use") {
			t.Fatal(err)
		}
	}
}

// NewInProcAt is NewInProc on the given member addresses (a second
// cluster on the same addresses as a stopped first one, for tests of
// data directories that belong to another cluster).
func NewInProcAt(t testing.TB, peers map[ids.NodeID]string) *InProc {
	c, err := newInProc(t, peers, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func newInProc(t testing.TB, peers map[ids.NodeID]string, configure func(*metanode.Config)) (*InProc, error) {
	c := &InProc{t: t, Net: raftsim.NewNetwork(1), Clock: clock.Real{}, Peers: peers,
		dir: t.TempDir(), nodes: map[ids.NodeID]*metanode.Node{}, configure: configure}
	for i := 1; i <= len(peers); i++ {
		if err := c.start(ids.NodeID(i)); err != nil {
			c.StopAll()
			return nil, err
		}
	}
	t.Cleanup(c.StopAll)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := c.WaitReady(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// DataDir is node id's data directory.
func (c *InProc) DataDir(id ids.NodeID) string { return filepath.Join(c.dir, id.String()) }

// Start (re)starts node id on its data directory.
func (c *InProc) Start(id ids.NodeID) {
	if err := c.start(id); err != nil {
		c.t.Fatal(err)
	}
}

func (c *InProc) start(id ids.NodeID) error {
	cfg := metanode.DefaultConfig()
	cfg.ID = id
	cfg.Listen = c.Peers[id]
	cfg.Peers = c.Peers
	cfg.DataDir = c.DataDir(id)
	cfg.TickInterval = 10 * time.Millisecond
	cfg.Clock = c.Clock
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg.Transport = c.Net.Transport(id)
	cfg.OnHost = func(h *multiraft.Host) { c.Net.Register(id, h) }
	if c.configure != nil {
		c.configure(&cfg)
	}
	var n *metanode.Node
	var err error
	// A restart may race the release of the node's own port.
	for i := 0; i < 25; i++ {
		n, err = metanode.Start(context.Background(), cfg)
		if err == nil || !strings.Contains(err.Error(), "address already in use") {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("start node %v: %w", id, err)
	}
	c.mu.Lock()
	c.nodes[id] = n
	c.mu.Unlock()
	return nil
}

// Stop stops node id (as a crash would, as far as clients see: in-flight
// requests fail; what was acknowledged is on disk).
func (c *InProc) Stop(id ids.NodeID) {
	c.mu.Lock()
	n := c.nodes[id]
	delete(c.nodes, id)
	c.mu.Unlock()
	if n == nil {
		return
	}
	c.Net.Unregister(id)
	n.Stop()
}

// StopAll stops every node.
func (c *InProc) StopAll() {
	for id := range c.Peers {
		c.Stop(id)
	}
	c.Net.Wait()
}

// Node returns a running node (nil if stopped).
func (c *InProc) Node(id ids.NodeID) *metanode.Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[id]
}

// Addrs lists every node's gRPC address, node 1 first.
func (c *InProc) Addrs() []string {
	var out []string
	for i := 1; i <= len(c.Peers); i++ {
		out = append(out, c.Peers[ids.NodeID(i)])
	}
	return out
}

// Leader waits for and returns the leader of g among running nodes.
func (c *InProc) Leader(ctx context.Context, g ids.GroupID) (ids.NodeID, error) {
	for {
		c.mu.Lock()
		for id, n := range c.nodes {
			if _, me := n.Host().Leader(g); me {
				c.mu.Unlock()
				return id, nil
			}
		}
		c.mu.Unlock()
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("no leader for %v", g)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// WaitReady waits until the root directory is readable.
func (c *InProc) WaitReady(ctx context.Context) error {
	p := &ProcCluster{layout: layout{Addrs: c.Addrs()}, cfg: ProcConfig{Dir: c.dir}}
	return p.WaitReady(ctx)
}
