package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/govfs/govfs/internal/certs"
	"github.com/govfs/govfs/internal/chunkserver"
)

func runChunk(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("govfs chunk", flag.ContinueOnError)
	fs.SetOutput(stderr)
	withSynopsis(fs, stderr, chunkUsage)
	listen := fs.String("listen", "", "HOST:PORT of the data service (also registered with the president)")
	data := fs.String("data", "", "directory of the chunk store")
	meta := fs.String("meta", "", "metadata node addresses, comma-separated")
	rack := fs.String("rack", "", "rack of this server")
	pod := fs.String("pod", "", "pod of this server (optional)")
	host := fs.String("host", "", "host name for placement: never two replicas of a group on one host (default: this machine's host name)")
	chunkSize := fs.Int64("chunk-size", 64<<20, "chunk size when the store is created (a multiple of 64 KiB)")
	repairRate := fs.Int64("repair-rate", chunkserver.DefaultRepairRate>>20, "MiB/s a primary may spend copying chunks to a new member of its group (0: no limit)")
	scrub := fs.Duration("scrub-interval", chunkserver.DefaultScrubInterval, "how often every block is verified against its checksum (0: never)")
	httpAddr := fs.String("http", "", "HOST:PORT to serve /metrics and /healthz on (optional)")
	debugAddr := fs.String("debug-listen", "", "loopback HOST:PORT for /debug/pprof (off when empty)")
	maxConns := fs.Int("max-conns-per-peer", 1024, "data connections one remote IP may hold open; more are closed at once")
	level := fs.String("log-level", "info", "debug, info, warn or error")
	var tlsFlags serverTLSFlags
	tlsFlags.register(fs, certs.RoleChunk)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("chunk: unexpected arguments %q", fs.Args())
	}
	if *repairRate < 0 || *scrub < 0 {
		return fmt.Errorf("chunk: --repair-rate and --scrub-interval must not be negative")
	}
	rate := *repairRate << 20
	if rate == 0 {
		rate = -1 // no limit
	}
	every := *scrub
	if every == 0 {
		every = -1 // never
	}
	log, err := newLogger(stderr, *level)
	if err != nil {
		return err
	}
	sec, err := tlsFlags.security(ctx, "chunk", log, *listen)
	if err != nil {
		return err
	}
	dbg, err := debugListen("chunk", *debugAddr)
	if err != nil {
		return err
	}
	if *maxConns <= 0 {
		return fmt.Errorf("chunk: --max-conns-per-peer %d must be positive", *maxConns)
	}
	var addrs []string
	for _, a := range strings.Split(*meta, ",") {
		if a = strings.TrimSpace(a); a != "" {
			addrs = append(addrs, a)
		}
	}
	s, err := chunkserver.Start(ctx, chunkserver.Config{Listen: *listen, DataDir: *data, MetaAddrs: addrs,
		Host: *host, Rack: *rack, Pod: *pod, ChunkSize: *chunkSize, RepairRate: rate, ScrubInterval: every, HTTPListen: *httpAddr, DebugListen: dbg, Logger: log, Security: sec, MaxConnsPerPeer: *maxConns})
	if err != nil {
		return fmt.Errorf("chunk: %w", err)
	}
	<-ctx.Done()
	s.Stop()
	return nil
}
