package metanode

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sort"
	"strings"
	"time"

	"github.com/govfs/govfs/internal/clock"
	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/multiraft"
	"github.com/govfs/govfs/internal/rpc"
)

// Config configures a metadata node.
type Config struct {
	ID     ids.NodeID
	Listen string
	Peers  map[ids.NodeID]string
	// Join lists addresses of running metadata nodes: a node started with
	// it (and no ID or Peers) asks the president to admit it, and starts
	// idle. Its data directory then remembers the id it was given.
	Join    []string
	DataDir string
	// HTTPListen serves /metrics and /healthz when non-empty.
	HTTPListen string
	// DebugListen serves /debug/pprof when non-empty (loopback only: the
	// CLI refuses other addresses).
	DebugListen string
	// TickInterval is the raft tick (election timeout = 10 ticks).
	TickInterval time.Duration
	Logger       *slog.Logger

	// SnapshotEvery applied entries a group truncates its log; LogKeep
	// is the most entries a leader keeps for a follower behind (0 keeps
	// the multiraft defaults).
	SnapshotEvery uint64
	LogKeep       uint64

	// BatchDelay is the raft loop's batching wait under load (see
	// multiraft.Config.BatchDelay); negative keeps the default.
	BatchDelay time.Duration

	// GCInterval is how often the president's leader runs a chunk garbage
	// collection round (DefaultGCInterval when 0; negative disables the
	// collector). GCGrace is how long a chunk copy must have been garbage
	// in every round before it is deleted (DefaultGCGrace when 0): clients
	// may still cache a released chunk list that long. GCMaxDeletes bounds
	// the deletes of one round, GCDeleteRate their rate per second
	// (defaults when 0). See gc.go and docs/dataplane.md.
	GCInterval   time.Duration
	GCGrace      time.Duration
	GCMaxDeletes int
	GCDeleteRate int

	// LeaseTTL is the time to live of the leases this node grants as a
	// minister (lease.DefaultTTL, 10 s, when 0); a new minister grants
	// nothing for one TTL. Every metadata node of a cluster must use the
	// same value.
	LeaseTTL time.Duration

	// ReplaceDeadAfter is how long a ministry member may send no
	// heartbeat before the president's leader replaces it with a live
	// node (DefaultReplaceDeadAfter when 0; negative: never). See
	// members.go.
	ReplaceDeadAfter time.Duration

	// MovePauses makes the president's leader wait this long at the named
	// step of every subtree move (MovePauseSteps), so that an end-to-end
	// test can kill a process at that step; empty in production.
	MovePauses map[string]time.Duration

	// MaxConnsPerPeer bounds the connections one remote IP may hold open
	// to the node (rpc.DefaultMaxConnsPerPeer when 0).
	MaxConnsPerPeer int
	// MaxInFlightPerClient bounds the requests one client certificate
	// (on a plaintext node, one remote IP) may have in progress here
	// (rpc.DefaultMaxInFlightPerClient when 0).
	MaxInFlightPerClient int

	// Security is the node's TLS (its certificate, the cluster CA); nil
	// runs plaintext and trusts every caller (--insecure).
	Security *rpc.Security

	// ChunkTokenLifetime is how long the chunk access tokens this node
	// mints stay valid, and on the president's leader how often the
	// signing key changes (DefaultChunkTokenLifetime when 0). See
	// tokens.go.
	ChunkTokenLifetime time.Duration

	// Clock defaults to the wall clock; in-process tests pass a manual one.
	Clock clock.Clock
	// Transport, when set, replaces the gRPC raft transport (in-process
	// clusters use raftsim to inject partitions and drops); OnHost is then
	// called with the host so the transport can deliver to it.
	Transport multiraft.Transport
	OnHost    func(*multiraft.Host)
}

// DefaultConfig returns defaults.
func DefaultConfig() Config {
	return Config{TickInterval: 100 * time.Millisecond, Logger: slog.Default(), Clock: clock.Real{}, BatchDelay: -1,
		GCInterval: DefaultGCInterval, GCGrace: DefaultGCGrace, GCMaxDeletes: DefaultGCMaxDeletes, GCDeleteRate: DefaultGCDeleteRate,
		ReplaceDeadAfter: DefaultReplaceDeadAfter}
}

// ParsePeers parses "1=127.0.0.1:7001,2=...".
func ParsePeers(s string) (map[ids.NodeID]string, error) {
	out := map[ids.NodeID]string{}
	seen := map[string]ids.NodeID{}
	if strings.TrimSpace(s) == "" {
		return nil, errors.New("--peers is empty: list every initial member as ID=HOST:PORT, comma-separated")
	}
	for _, part := range strings.Split(s, ",") {
		id, addr, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return nil, fmt.Errorf("--peers entry %q: want ID=HOST:PORT", part)
		}
		nid, err := ids.ParseNodeID(id)
		if err != nil {
			return nil, fmt.Errorf("--peers entry %q: %w", part, err)
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return nil, fmt.Errorf("--peers entry %q: address: %w", part, err)
		}
		if _, dup := out[nid]; dup {
			return nil, fmt.Errorf("--peers names node %v twice", nid)
		}
		if other, dup := seen[addr]; dup {
			return nil, fmt.Errorf("--peers gives address %s to both node %v and node %v", addr, other, nid)
		}
		out[nid], seen[addr] = addr, nid
	}
	return out, nil
}

// FormatPeers renders peers in --peers syntax, sorted by id.
func FormatPeers(p map[ids.NodeID]string) string {
	var parts []string
	for _, id := range sortedIDs(p) {
		parts = append(parts, fmt.Sprintf("%d=%s", id, p[id]))
	}
	return strings.Join(parts, ",")
}

func sortedIDs(p map[ids.NodeID]string) []ids.NodeID {
	out := make([]ids.NodeID, 0, len(p))
	for id := range p {
		out = append(out, id)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// Validate names the first bad field and what to do.
func (c *Config) Validate() error {
	if len(c.Join) > 0 {
		switch {
		case len(c.Peers) > 0:
			return errors.New("--join and --peers exclude each other: --peers forms a new cluster from its initial members, --join adds a node to a running one")
		case c.DataDir == "":
			return errors.New("--data is required: the directory holding this node's store")
		case c.Listen == "":
			return errors.New("--listen is required: HOST:PORT to serve on (other nodes reach this node there)")
		case c.TickInterval <= 0:
			return errors.New("tick interval must be positive")
		}
		for _, a := range c.Join {
			if _, _, err := net.SplitHostPort(a); err != nil {
				return fmt.Errorf("--join address %q: %w", a, err)
			}
		}
		if _, _, err := net.SplitHostPort(c.Listen); err != nil {
			return fmt.Errorf("--listen %q: %w", c.Listen, err)
		}
		return nil
	}
	switch {
	case c.ID == 0:
		return errors.New("--id is required (a positive node id listed in --peers), or --join to add this node to a running cluster")
	case c.DataDir == "":
		return errors.New("--data is required: the directory holding this node's store")
	case c.Listen == "":
		return errors.New("--listen is required: HOST:PORT to serve on")
	case len(c.Peers) == 0:
		return errors.New("--peers is required: ID=HOST:PORT of every initial member")
	case c.TickInterval <= 0:
		return errors.New("tick interval must be positive")
	case c.ChunkTokenLifetime < 0:
		return fmt.Errorf("--chunk-token-lifetime %v must not be negative (0 = default %v)", c.ChunkTokenLifetime, DefaultChunkTokenLifetime)
	case c.LeaseTTL < 0:
		return fmt.Errorf("--lease-ttl %v must not be negative (0 = default 10s)", c.LeaseTTL)
	case c.GCGrace < 0:
		return fmt.Errorf("--gc-grace %v must not be negative: it is how long an unreferenced chunk is kept for clients that still cache it", c.GCGrace)
	case c.GCMaxDeletes < 0:
		return fmt.Errorf("--gc-max-deletes %d must not be negative (0 = default %d)", c.GCMaxDeletes, DefaultGCMaxDeletes)
	case c.GCDeleteRate < 0:
		return fmt.Errorf("--gc-delete-rate %d must not be negative (0 = default %d per second)", c.GCDeleteRate, DefaultGCDeleteRate)
	}
	if _, ok := c.Peers[c.ID]; !ok {
		return fmt.Errorf("node id %v is not a member: --peers lists %s; pick one of those ids or add this node to --peers", c.ID, FormatPeers(c.Peers))
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return fmt.Errorf("--listen %q: %w", c.Listen, err)
	}
	return nil
}

// MovePauseSteps are the steps of a move Config.MovePauses can name:
// copied (frozen and copied, before COMMITTED is recorded), committed
// (recorded, before the source is told), opening (the source sends
// clients to the target, whose copy is not open yet).
var MovePauseSteps = []string{"copied", "committed", "opening"}
