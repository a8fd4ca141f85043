package multiraft

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/govfs/govfs/internal/clock"
	"github.com/govfs/govfs/internal/engine"
	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/wire"
	"github.com/prometheus/client_golang/prometheus"
	pb "go.etcd.io/raft/v3/raftpb"
)

// StateMachine is one group's replicated state machine. Apply runs on the
// group's worker, in log order, with rw a view of the group's state range
// inside the batch that also records the applied index.
type StateMachine interface {
	Apply(rw engine.ReadWriter, index uint64, cmd *wire.Command) (*wire.Result, error)
}

// GroupMessage is a raft message of one group.
type GroupMessage struct {
	Group ids.GroupID
	Msg   *pb.Message
}

// SnapshotSource is a point-in-time view of a group's state range handed
// to the transport; Release must be called when streaming ends.
type SnapshotSource interface {
	// Scan calls fn with every key (relative to the state prefix) and value.
	Scan(fn func(k, v []byte) bool) error
	Release()
}

// Transport carries raft traffic between nodes. Send must not block for
// long (drop rather than wait: raft retransmits). SendSnapshot streams in
// the background and reports the outcome through Host.ReportSnapshot.
type Transport interface {
	Send(to ids.NodeID, msgs []GroupMessage)
	SendSnapshot(to ids.NodeID, g ids.GroupID, msg *pb.Message, src SnapshotSource)
}

// TestingKnobs are failure hooks at named Ready-loop steps; nil in
// production.
type TestingKnobs struct {
	// BeforePersist is called before the batch of a Ready round is
	// committed; returning an error fails the node as a disk error would.
	BeforePersist func() error
	// BeforeInstallPage is called before each full page of a snapshot
	// install is committed; an error fails the node mid-install.
	BeforeInstallPage func(page int) error
}

// Config configures a Host.
type Config struct {
	NodeID    ids.NodeID
	Engine    *engine.Engine
	Transport Transport
	Clock     clock.Clock
	Logger    *slog.Logger
	Registry  prometheus.Registerer

	// TickInterval is the raft tick; ElectionTicks and HeartbeatTicks are
	// in ticks.
	TickInterval   time.Duration
	ElectionTicks  int
	HeartbeatTicks int
	// SnapshotEvery applied entries a group truncates its log (maybeCompact:
	// a leader keeps what its followers lack, at most KeepEntries; further
	// behind ones get a snapshot).
	SnapshotEvery uint64
	KeepEntries   uint64
	// ApplyWorkers is the size of the apply worker pool.
	ApplyWorkers int
	// MaxSizePerMsg bounds the bytes of entries in one MsgApp.
	MaxSizePerMsg uint64
	Knobs         *TestingKnobs
	// BatchDelay, when positive, makes a loaded loop (woken again within
	// 4×BatchDelay of its last round) wait that long before the next round
	// so that more proposals share it. 200 µs doubled the entries per
	// MsgApp in govfs bench meta at equal throughput; idle latency is
	// unaffected.
	BatchDelay time.Duration
}

// DefaultConfig returns production defaults (100 ms ticks, 1 s election
// timeout).
func DefaultConfig() Config {
	return Config{
		Clock:          clock.Real{},
		Logger:         slog.Default(),
		TickInterval:   100 * time.Millisecond,
		ElectionTicks:  10,
		HeartbeatTicks: 1,
		SnapshotEvery:  256,
		KeepEntries:    5000,
		ApplyWorkers:   4,
		MaxSizePerMsg:  1 << 20,
		BatchDelay:     200 * time.Microsecond,
	}
}

// Validate names the first bad field.
func (c *Config) Validate() error {
	switch {
	case c.NodeID == 0:
		return errors.New("multiraft: NodeID must be non-zero")
	case c.Engine == nil:
		return errors.New("multiraft: Engine is required")
	case c.Transport == nil:
		return errors.New("multiraft: Transport is required")
	case c.Clock == nil:
		return errors.New("multiraft: Clock is required")
	case c.TickInterval <= 0:
		return fmt.Errorf("multiraft: TickInterval %v must be positive", c.TickInterval)
	case c.HeartbeatTicks <= 0 || c.ElectionTicks <= c.HeartbeatTicks:
		return fmt.Errorf("multiraft: ElectionTicks (%d) must exceed HeartbeatTicks (%d) > 0", c.ElectionTicks, c.HeartbeatTicks)
	case c.SnapshotEvery == 0:
		return errors.New("multiraft: SnapshotEvery must be positive")
	case c.ApplyWorkers <= 0:
		return errors.New("multiraft: ApplyWorkers must be positive")
	}
	return nil
}

// ElectionTimeout is the wall time of an election timeout.
func (c *Config) ElectionTimeout() time.Duration {
	return time.Duration(c.ElectionTicks) * c.TickInterval
}
