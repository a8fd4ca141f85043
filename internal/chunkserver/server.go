package chunkserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/govfs/govfs/internal/chunkstore"
	"github.com/govfs/govfs/internal/chunktoken"
	"github.com/govfs/govfs/internal/dataproto"
	"github.com/govfs/govfs/internal/rpc"
	"github.com/govfs/govfs/internal/wire"
)

// Config configures a chunk server.
type Config struct {
	// Listen is the data service's TCP address (HOST:PORT); it is also
	// the address registered with the president.
	Listen string
	// DataDir holds the chunk store.
	DataDir string
	// MetaAddrs are metadata node addresses used to find the cluster.
	MetaAddrs []string
	// Host, Rack and Pod place this server. Host defaults to the machine's
	// host name, so two servers on one machine count as one host and never
	// hold two replicas of a group; a single-machine test cluster gives
	// each server its own Host.
	Host, Rack, Pod string
	// ChunkSize is used when the store is created (default 64 MiB).
	ChunkSize int64
	// NoSync skips fsync (tests only).
	NoSync bool
	// HTTPListen, when set, serves /metrics and /healthz.
	HTTPListen string
	// DebugListen, when set, serves /debug/pprof (loopback only: the CLI
	// refuses other addresses).
	DebugListen string
	// RepairRate bounds, in bytes per second, how fast a primary copies
	// chunks to a new member of its group (DefaultRepairRate when 0;
	// negative for no limit).
	RepairRate int64
	// ScrubInterval is how often every block is verified
	// (DefaultScrubInterval when 0; negative to never scrub).
	ScrubInterval time.Duration
	Logger        *slog.Logger
	// MaxConnsPerPeer bounds the data connections one remote IP may hold
	// open (rpc.DefaultMaxConnsPerPeer when 0).
	MaxConnsPerPeer int
	// Security is the server's TLS (its chunk certificate, the cluster
	// CA) for the data port and its calls; nil is plaintext (--insecure).
	Security *rpc.Security
}

// leaseTimeout is how long a chunk server serves without a successful
// heartbeat. The president declares a server dead (and may hand its
// groups to others) only after 10 s without one, so a server cut off from
// the president stops answering before its replacement can exist: no
// client reads data its group has since overwritten.
const leaseTimeout = 7 * time.Second

// Defaults for Config.
const (
	DefaultRepairRate    = 100 << 20
	DefaultScrubInterval = 24 * time.Hour
)

// Validate names the first bad field.
func (c *Config) Validate() error {
	switch {
	case c.Listen == "":
		return errors.New("--listen is required: HOST:PORT for the data service")
	case c.DataDir == "":
		return errors.New("--data is required: the directory of the chunk store")
	case len(c.MetaAddrs) == 0:
		return errors.New("--meta is required: metadata node addresses (HOST:PORT,...)")
	case c.Rack == "":
		return errors.New("--rack is required: the rack this server is in (placement never puts two replicas on one host, and spreads them over racks)")
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return fmt.Errorf("--listen %q: %w", c.Listen, err)
	}
	return nil
}

// Server is a running chunk server.
type Server struct {
	cfg       Config
	log       *slog.Logger
	store     *chunkstore.Store
	lis       net.Listener
	pool      *rpc.Pool
	clusterID string
	id        uint64

	stop chan struct{}
	wg   sync.WaitGroup
	mu   sync.Mutex
	// conns are the open data connections, closed by Stop.
	conns map[net.Conn]struct{}
	// meta is the address of the metadata node that last answered as the
	// president's leader.
	meta string
	// lastBeat is when a heartbeat last succeeded (guarded by mu); see
	// leaseTimeout.
	lastBeat time.Time

	groups groupTable
	// tokens checks clients' chunk access tokens with the keys of the
	// last heartbeat's answer.
	tokens chunktoken.Verifier
	// keyFetch spaces the heartbeats learnKey sends on demand: last is
	// when the last one ended.
	keyFetch struct {
		mu   sync.Mutex
		last time.Time
	}
	// groupFetch spaces the heartbeats learnGroup sends on demand, as
	// keyFetch does learnKey's.
	groupFetch struct {
		mu   sync.Mutex
		last time.Time
	}
	// beatMu keeps heartbeats one at a time (the ticker's and learnKey's):
	// an older answer applied after a newer one would take back a group
	// change or a key just learnt.
	beatMu sync.Mutex
	peers  dataproto.Pool
	locks  chunkLocks
	// reconciled maps a chunk handle to the group epoch at which this
	// primary last saw every full member agree on it (guarded by mu).
	reconciled map[uint64]uint64
	// syncs are the copy passes this primary runs for syncing members,
	// keyed by group and member (guarded by mu).
	syncs map[syncKey]*syncState
	// repairs are the chunks being repaired (guarded by mu).
	repairs map[uint64]bool
	// toReconcile maps chunks whose members may differ after a failed
	// mutation to their group (guarded by mu); see reconcileLater.
	toReconcile  map[uint64]reconcileNote
	reconcileGen uint64
	appends      appendTable
	load         loadMeter
	met          *metrics // nil without HTTPListen
	http         *http.Server
	debug        *rpc.DebugServer // nil without DebugListen
	// ready maps group id -> the epoch at which every member was seen to
	// know the group (guarded by mu); see groupReady.
	ready map[uint64]uint64
}

// Start finds the cluster, opens the store, starts the data service and
// registers with the president. It returns once registered.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.RepairRate == 0 {
		cfg.RepairRate = DefaultRepairRate
	}
	if cfg.ScrubInterval == 0 {
		cfg.ScrubInterval = DefaultScrubInterval
	}
	if cfg.Host == "" {
		h, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("chunk server: --host not given and the host name is unknown: %w", err)
		}
		cfg.Host = h
	}
	s := &Server{cfg: cfg, log: cfg.Logger, pool: rpc.NewPool(cfg.Security), stop: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	s.peers.TLS = cfg.Security.ClientTLS()
	// Each client write is forwarded to two replicas: twice the
	// client's idle connections (dataproto defaultMaxIdle).
	s.peers.MaxIdle = 64
	ok := false
	defer func() {
		if !ok {
			s.Stop()
		}
	}()
	cid, err := s.findCluster(ctx)
	if err != nil {
		return nil, err
	}
	s.clusterID = cid
	sc := chunkstore.DefaultConfig()
	sc.Dir, sc.ClusterID, sc.NoSync, sc.Logger = cfg.DataDir, cid, cfg.NoSync, cfg.Logger
	if cfg.ChunkSize > 0 {
		sc.ChunkSize = cfg.ChunkSize
	}
	if s.store, err = chunkstore.Open(sc); err != nil {
		return nil, fmt.Errorf("chunk server: %w", err)
	}
	if s.lis, err = net.Listen("tcp", cfg.Listen); err != nil {
		return nil, fmt.Errorf("chunk server: listen on %s (is another process using it?): %w", cfg.Listen, err)
	}
	s.lis = rpc.LimitPerPeer(s.lis, cfg.MaxConnsPerPeer, cfg.Logger)
	// Register and learn our replica groups before serving: a member
	// that answered "unknown group" to a primary's forward would miss a
	// mutation and go stale. Clients wait in the listen backlog meanwhile.
	if err := s.register(ctx); err != nil {
		return nil, err
	}
	s.heartbeat()
	if cfg.DebugListen != "" {
		if s.debug, err = rpc.StartDebug(cfg.DebugListen); err != nil {
			return nil, fmt.Errorf("chunk server: %w", err)
		}
	}
	if cfg.HTTPListen != "" {
		if err := s.startHTTP(cfg.HTTPListen); err != nil {
			return nil, err
		}
	}
	s.wg.Go(s.serve)
	s.wg.Go(s.heartbeats)
	s.wg.Go(s.syncLoop)
	s.wg.Go(s.reconcileLoop)
	if cfg.ScrubInterval >= 0 {
		s.wg.Go(func() { s.scrubLoop(cfg.ScrubInterval) })
	}
	ok = true
	s.log.Info("chunk server started", "id", s.id, "listen", s.lis.Addr().String(), "store", s.store.ID(), "cluster", cid)
	return s, nil
}

// ID is the server id the president assigned.
func (s *Server) ID() uint64 { return s.id }

// Addr is the data service address.
func (s *Server) Addr() string { return s.lis.Addr().String() }

// Stop stops serving, waits for the server's goroutines and closes the
// store.
func (s *Server) Stop() {
	select {
	case <-s.stop:
		return
	default:
	}
	close(s.stop)
	if s.lis != nil {
		_ = s.lis.Close()
	}
	s.debug.Stop()
	if s.http != nil {
		_ = s.http.Close()
	}
	s.mu.Lock()
	for c := range s.conns {
		_ = c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	s.peers.Close()
	s.pool.Close()
	if s.store != nil {
		_ = s.store.Close()
	}
}

// findCluster asks the metadata nodes for the cluster id.
func (s *Server) findCluster(ctx context.Context) (string, error) {
	var last error = errors.New("no metadata node answered")
	// Wait as long as ctx allows (metadata nodes starting at the same
	// time may take a while under load), saying so every 10 s.
	nextWarn := time.Now().Add(10 * time.Second)
	for {
		if time.Now().After(nextWarn) {
			s.log.Warn("still looking for the cluster", "meta", s.cfg.MetaAddrs, "last", last)
			nextWarn = time.Now().Add(10 * time.Second)
		}
		for _, a := range s.cfg.MetaAddrs {
			cc, err := s.pool.Get(a)
			if err != nil {
				last = err
				continue
			}
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			info, err := wire.NewMetaClient(cc).ClusterInfo(cctx, &wire.ClusterInfoRequest{})
			cancel()
			if err != nil {
				last = fmt.Errorf("%s: %w", a, err)
				continue
			}
			if info.GetClusterId() != "" {
				return info.GetClusterId(), nil
			}
			last = fmt.Errorf("%s: cluster not initialised yet", a)
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("chunk server: find the cluster at %v: %w (last: %v)", s.cfg.MetaAddrs, ctx.Err(), last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// president calls fn against the president's leader, following
// NOT_LEADER hints, until it succeeds or ctx ends.
func (s *Server) president(ctx context.Context, fn func(ctx context.Context, mc wire.MetaClient) (*wire.Status, error)) error {
	var last error
	for {
		s.mu.Lock()
		addrs := append([]string{s.meta}, s.cfg.MetaAddrs...)
		s.mu.Unlock()
		for _, a := range addrs {
			if a == "" {
				continue
			}
			cc, err := s.pool.Get(a)
			if err != nil {
				last = err
				continue
			}
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			st, err := fn(cctx, wire.NewMetaClient(cc))
			cancel()
			switch {
			case err != nil:
				last = fmt.Errorf("%s: %w", a, err)
			case st.GetCode() == wire.Code_OK:
				s.mu.Lock()
				s.meta = a
				s.mu.Unlock()
				return nil
			case st.GetCode() == wire.Code_NOT_LEADER || st.GetCode() == wire.Code_UNAVAILABLE:
				last = fmt.Errorf("%s: %v: %s", a, st.GetCode(), st.GetMessage())
				if h := st.GetLeaderAddr(); h != "" {
					s.mu.Lock()
					s.meta = h
					s.mu.Unlock()
				}
			default:
				return fmt.Errorf("%s: %v: %s", a, st.GetCode(), st.GetMessage())
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), last)
		case <-s.stop:
			return errors.New("chunk server stopping")
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (s *Server) register(ctx context.Context) error {
	_, capacity, err := s.store.Usage()
	if err != nil {
		return fmt.Errorf("chunk server: measure capacity: %w", err)
	}
	// As long as ctx allows: the president may still be electing.
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	op := &wire.RegisterChunkServerOp{Server: &wire.ChunkServer{Addr: s.lis.Addr().String(), Host: s.cfg.Host,
		Rack: s.cfg.Rack, Pod: s.cfg.Pod, StoreId: s.store.ID(), Capacity: capacity, ChunkSize: s.store.ChunkSize()}}
	err = s.president(rctx, func(ctx context.Context, mc wire.MetaClient) (*wire.Status, error) {
		resp, err := mc.Mutate(ctx, &wire.MutateRequest{ClusterId: s.clusterID, Group: 0,
			Cmd: &wire.Command{Version: 1, Op: &wire.Command_RegisterChunkServer{RegisterChunkServer: op}}})
		if err == nil && resp.GetStatus().GetCode() == wire.Code_OK {
			s.id = resp.GetResult().GetStart()
		}
		return resp.GetStatus(), err
	})
	if err != nil {
		return fmt.Errorf("chunk server: register with the president: %w", err)
	}
	return nil
}

func (s *Server) heartbeats() {
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for {
		s.heartbeat()
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
	}
}

func (s *Server) heartbeat() {
	s.beatMu.Lock()
	defer s.beatMu.Unlock()
	used, capacity, err := s.store.Usage()
	if err != nil {
		s.log.Warn("measure usage", "err", err)
	}
	chunks, err := s.store.List()
	if err != nil {
		s.log.Warn("list chunks", "err", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err = s.president(ctx, func(ctx context.Context, mc wire.MetaClient) (*wire.Status, error) {
		inFlight, readRate, writeRate := s.load.sample()
		resp, err := mc.ChunkHeartbeat(ctx, &wire.ChunkHeartbeatRequest{ClusterId: s.clusterID, ServerId: s.id,
			Capacity: capacity, Used: used, Chunks: uint64(len(chunks)),
			BytesInFlight: inFlight, ReadBytesPerS: readRate, WriteBytesPerS: writeRate})
		if err == nil && resp.GetStatus().GetCode() == wire.Code_OK {
			s.groups.set(resp.GetGroups(), resp.GetMemberAddrs())
			keys := make([]chunktoken.Key, 0, len(resp.GetTokenKeys()))
			for _, k := range resp.GetTokenKeys() {
				keys = append(keys, chunktoken.Key{ID: k.GetId(), Secret: k.GetSecret()})
			}
			s.tokens.SetKeys(keys)
			s.mu.Lock()
			s.lastBeat = time.Now()
			s.mu.Unlock()
		}
		return resp.GetStatus(), err
	})
	if err != nil {
		s.log.Warn("heartbeat", "err", err)
	}
}
