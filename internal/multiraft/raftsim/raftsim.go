// Package raftsim is an in-memory multiraft.Transport for in-process
// clusters: messages are delivered through a Network that can cut links
// (partitions), drop a seeded fraction of messages, or isolate a node.
// Messages are marshalled and unmarshalled on the way so that nothing is
// shared between nodes, as over a real network.
package raftsim

import (
	"math/rand"
	"sync"

	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/multiraft"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// Network connects in-process hosts.
type Network struct {
	mu       sync.Mutex
	hosts    map[ids.NodeID]*multiraft.Host
	cut      map[[2]ids.NodeID]bool
	dropRate float64
	rand     *rand.Rand
	wg       sync.WaitGroup
	// Delivered counts messages delivered, for tests.
	delivered int
}

// NewNetwork returns a network whose drops are drawn from seed.
func NewNetwork(seed int64) *Network {
	return &Network{hosts: map[ids.NodeID]*multiraft.Host{}, cut: map[[2]ids.NodeID]bool{}, rand: rand.New(rand.NewSource(seed))}
}

// Register attaches a host under id (replacing an earlier one: a restart).
func (n *Network) Register(id ids.NodeID, h *multiraft.Host) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.hosts[id] = h
}

// Unregister detaches id (a stopped or killed node).
func (n *Network) Unregister(id ids.NodeID) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.hosts, id)
}

// Partition cuts every link between the two sides.
func (n *Network) Partition(a, b []ids.NodeID) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, x := range a {
		for _, y := range b {
			n.cut[[2]ids.NodeID{x, y}] = true
			n.cut[[2]ids.NodeID{y, x}] = true
		}
	}
}

// Heal restores every link.
func (n *Network) Heal() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.cut = map[[2]ids.NodeID]bool{}
}

// SetDropRate drops the given fraction of messages (0..1).
func (n *Network) SetDropRate(p float64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.dropRate = p
}

// Wait waits for in-flight snapshot streams.
func (n *Network) Wait() { n.wg.Wait() }

func (n *Network) route(from, to ids.NodeID) *multiraft.Host {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cut[[2]ids.NodeID{from, to}] {
		return nil
	}
	if n.dropRate > 0 && n.rand.Float64() < n.dropRate {
		return nil
	}
	h := n.hosts[to]
	if h != nil {
		n.delivered++
	}
	return h
}

// Transport returns the transport of node `from`.
func (n *Network) Transport(from ids.NodeID) multiraft.Transport { return &transport{n: n, from: from} }

type transport struct {
	n    *Network
	from ids.NodeID
}

func clone(m *pb.Message) *pb.Message {
	b, err := proto.Marshal(m)
	if err != nil {
		panic(err)
	}
	out := &pb.Message{}
	if err := proto.Unmarshal(b, out); err != nil {
		panic(err)
	}
	return out
}

func (t *transport) Send(to ids.NodeID, msgs []multiraft.GroupMessage) {
	h := t.n.route(t.from, to)
	if h == nil {
		return
	}
	out := make([]multiraft.GroupMessage, len(msgs))
	for i, m := range msgs {
		out[i] = multiraft.GroupMessage{Group: m.Group, Msg: clone(m.Msg)}
	}
	h.Receive(out)
}

func (t *transport) SendSnapshot(to ids.NodeID, g ids.GroupID, msg *pb.Message, src multiraft.SnapshotSource) {
	t.n.mu.Lock()
	sender := t.n.hosts[t.from]
	t.n.mu.Unlock()
	m := clone(msg)
	t.n.wg.Add(1)
	go func() {
		defer t.n.wg.Done()
		ok := false
		if h := t.n.route(t.from, to); h != nil {
			// Streamed as over the network: the receiver stages each
			// key as it comes.
			ok = h.ReceiveSnapshot(g, m, func(add func(k, v []byte) error) error {
				var addErr error
				err := src.Scan(func(k, v []byte) bool {
					addErr = add(k, v)
					return addErr == nil
				})
				if err == nil {
					err = addErr
				}
				return err
			}) == nil
		}
		src.Release()
		if sender != nil {
			sender.ReportSnapshot(g, to, ok)
		}
	}()
}
