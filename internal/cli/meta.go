package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/govfs/govfs/internal/certs"
	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/metanode"
	"github.com/govfs/govfs/internal/rpc"
)

func runMeta(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("govfs meta", flag.ContinueOnError)
	fs.SetOutput(stderr)
	withSynopsis(fs, stderr, metaUsage)
	id := fs.String("id", "", "this node's id (a positive integer listed in --peers)")
	listen := fs.String("listen", "", "HOST:PORT to serve gRPC on")
	peers := fs.String("peers", "", "every initial member as ID=HOST:PORT,... (including this node)")
	join := fs.String("join", "", "HOST:PORT,... of running metadata nodes: add this node to that cluster (instead of --id and --peers); restart it with the same flags")
	data := fs.String("data", "", "data directory")
	httpAddr := fs.String("http", "", "HOST:PORT for /metrics and /healthz (off when empty)")
	debugAddr := fs.String("debug-listen", "", "loopback HOST:PORT for /debug/pprof (off when empty)")
	maxConns := fs.Int("max-conns-per-peer", 1024, "connections one remote IP may hold open to this node; more are closed at once")
	maxInFlight := fs.Int("max-inflight-per-client", rpc.DefaultMaxInFlightPerClient, "requests one client certificate (plaintext: one remote IP) may have in progress on this node; more are refused as resource exhausted (the library retries)")
	tick := fs.Duration("tick", 100*time.Millisecond, "raft tick; the election timeout is 10 ticks")
	level := fs.String("log-level", "info", "debug, info, warn or error")
	snapEvery := fs.Uint64("snapshot-every", 256, "applied entries between a group's log truncations (raft snapshot points; the state is copied only when a follower needs it)")
	logKeep := fs.Uint64("log-keep", 5000, "most log entries a minister keeps for a follower that is behind (down, or slow); one further behind catches up by a streamed snapshot")
	batchDelay := fs.Duration("batch-delay", 200*time.Microsecond, "under load, wait this long before a raft round so more proposals share it (0 disables)")
	gcInterval := fs.Duration("gc-interval", metanode.DefaultGCInterval, "how often the president's leader collects unreferenced chunks (negative disables)")
	gcGrace := fs.Duration("gc-grace", metanode.DefaultGCGrace, "how long a chunk copy must stay unreferenced before it is deleted (clients may cache released chunk lists that long)")
	gcMaxDeletes := fs.Int("gc-max-deletes", metanode.DefaultGCMaxDeletes, "at most this many chunk copies deleted per collection round")
	gcDeleteRate := fs.Int("gc-delete-rate", metanode.DefaultGCDeleteRate, "at most this many chunk copies deleted per second")
	replaceDead := fs.Duration("replace-dead-after", metanode.DefaultReplaceDeadAfter, "replace a ministry member that sent no heartbeat for this long with a live node (as the president's leader; 0 or negative: never)")
	movePauses := fs.String("testing-move-pause", "", "for failure tests only: STEP=DURATION,... makes this node, as the president's leader, wait at that step of every subtree move (steps: "+strings.Join(metanode.MovePauseSteps, ", ")+")")
	tokenLife := fs.Duration("chunk-token-lifetime", metanode.DefaultChunkTokenLifetime, "how long the chunk access tokens this node hands out stay valid; on the president's leader also how often the signing key changes (docs/security.md)")
	leaseTTL := fs.Duration("lease-ttl", 10*time.Second, "time to live of byte-range leases granted by this node as a minister; a new minister grants none for one TTL (the same on every node)")
	var tlsFlags serverTLSFlags
	tlsFlags.register(fs, certs.RoleNode)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("meta: unexpected arguments %q", fs.Args())
	}
	log, err := newLogger(stderr, *level)
	if err != nil {
		return err
	}
	cfg := metanode.DefaultConfig()
	if cfg.Security, err = tlsFlags.security(ctx, "meta", log, *listen); err != nil {
		return err
	}
	switch {
	case *join != "":
		if *peers != "" || *id != "" {
			return fmt.Errorf("meta: --join adds a node to a running cluster and gives it an id: leave out --id and --peers (they form a new cluster)")
		}
		for _, a := range strings.Split(*join, ",") {
			if a = strings.TrimSpace(a); a != "" {
				cfg.Join = append(cfg.Join, a)
			}
		}
	case *id == "":
		return fmt.Errorf("meta: --id is required (with --peers, to form a cluster), or --join ADDRS to add this node to a running one")
	default:
		if cfg.ID, err = ids.ParseNodeID(*id); err != nil {
			return fmt.Errorf("meta: --id: %w", err)
		}
		if cfg.Peers, err = metanode.ParsePeers(*peers); err != nil {
			return fmt.Errorf("meta: %w", err)
		}
	}
	cfg.Listen, cfg.DataDir, cfg.HTTPListen, cfg.TickInterval, cfg.Logger = *listen, *data, *httpAddr, *tick, log
	if cfg.DebugListen, err = debugListen("meta", *debugAddr); err != nil {
		return err
	}
	if *maxConns <= 0 {
		return fmt.Errorf("meta: --max-conns-per-peer %d must be positive", *maxConns)
	}
	cfg.MaxConnsPerPeer = *maxConns
	if *maxInFlight <= 0 {
		return fmt.Errorf("meta: --max-inflight-per-client %d must be positive", *maxInFlight)
	}
	cfg.MaxInFlightPerClient = *maxInFlight
	if *batchDelay < 0 {
		return fmt.Errorf("meta: --batch-delay %v must not be negative", *batchDelay)
	}
	cfg.BatchDelay = *batchDelay
	if cfg.MovePauses, err = parseMovePauses(*movePauses); err != nil {
		return fmt.Errorf("meta: --testing-move-pause: %w", err)
	}
	if *snapEvery == 0 {
		return fmt.Errorf("meta: --snapshot-every must be positive")
	}
	cfg.SnapshotEvery = *snapEvery
	if *logKeep == 0 {
		return fmt.Errorf("meta: --log-keep must be positive")
	}
	cfg.LogKeep = *logKeep
	if *gcInterval == 0 {
		return fmt.Errorf("meta: --gc-interval 0: give a positive interval, or a negative one to disable chunk garbage collection")
	}
	if *gcGrace <= 0 || *gcMaxDeletes <= 0 || *gcDeleteRate <= 0 {
		return fmt.Errorf("meta: --gc-grace, --gc-max-deletes and --gc-delete-rate must be positive")
	}
	if *leaseTTL <= 0 {
		return fmt.Errorf("meta: --lease-ttl %v must be positive", *leaseTTL)
	}
	cfg.LeaseTTL = *leaseTTL
	if *tokenLife < time.Second {
		return fmt.Errorf("meta: --chunk-token-lifetime %v: give at least 1s (clients renew expired tokens, so short is safe but costs requests)", *tokenLife)
	}
	cfg.ChunkTokenLifetime = *tokenLife
	cfg.ReplaceDeadAfter = *replaceDead
	if *replaceDead <= 0 {
		cfg.ReplaceDeadAfter = -1
	}
	cfg.GCInterval, cfg.GCGrace, cfg.GCMaxDeletes, cfg.GCDeleteRate = *gcInterval, *gcGrace, *gcMaxDeletes, *gcDeleteRate
	n, err := metanode.Start(ctx, cfg)
	if err != nil {
		return fmt.Errorf("meta: %w", err)
	}
	select {
	case <-ctx.Done():
		n.Stop()
		return nil
	case <-n.Fatal():
		err := n.Err()
		n.Stop()
		return fmt.Errorf("meta: node stopped: %w", err)
	}
}

// parseMovePauses parses STEP=DURATION,... (--testing-move-pause).
func parseMovePauses(s string) (map[string]time.Duration, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	out := map[string]time.Duration{}
	for _, part := range strings.Split(s, ",") {
		step, d, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok || !slices.Contains(metanode.MovePauseSteps, step) {
			return nil, fmt.Errorf("%q: give STEP=DURATION with STEP one of %s", part, strings.Join(metanode.MovePauseSteps, ", "))
		}
		v, err := time.ParseDuration(d)
		if err != nil || v <= 0 || v > 10*time.Minute {
			return nil, fmt.Errorf("%q: the duration must be positive and at most 10m", part)
		}
		out[step] = v
	}
	return out, nil
}
