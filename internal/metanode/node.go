package metanode

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/govfs/govfs/internal/chunktoken"
	"github.com/govfs/govfs/internal/clock"
	"github.com/govfs/govfs/internal/clustermap"
	"github.com/govfs/govfs/internal/engine"
	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/multiraft"
	"github.com/govfs/govfs/internal/namespace"
	"github.com/govfs/govfs/internal/rpc"
	"github.com/govfs/govfs/internal/wire"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
)

// Node is a running metadata node.
type Node struct {
	cfg       Config
	log       *slog.Logger
	eng       *engine.Engine
	host      *multiraft.Host
	transport *rpc.RaftTransport
	grpc      *grpc.Server
	lis       net.Listener
	http      *http.Server
	debug     *rpc.DebugServer // nil without DebugListen
	pool      *rpc.Pool
	clusterID atomic.Value // string
	ident     *identity
	chunks    chunkLiveness
	gc        *collector
	leases    *leaseService
	maps      mapCache
	// rangeOwners: the president's inode ranges, for route checks
	// (route.go).
	rangeOwners rangeOwnerCache
	// signer and verifier hold the chunk token keys (tokens.go).
	signer   chunktoken.Signer
	verifier chunktoken.Verifier
	// clientIDs binds client ids to certificates (clientids.go).
	clientIDs clientIDs
	// events are the recent notable log lines (dashboard.go).
	events *events
	// alive is what the president's leader last logged about servers'
	// liveness (maintain goroutine only).
	alive  livenessLog
	epochs epochCache
	// ops counts requests served per group; nodes is the president
	// members' view of every metadata node's heartbeats (nodeload.go).
	ops     opsCounter
	nodes   metaLiveness
	started time.Time
	moves   moveRunner
	hostMu  sync.Mutex // serialises hostMinistry
	// lastCampaign: when this node last stood for election in a ministry
	// it was chosen to lead (maintain loop only).
	lastCampaign map[ids.GroupID]time.Time
	// Membership changes (members.go; maintain loop only): when this
	// node last changed a group's configuration as its leader, last
	// checked whether it may drop a group it left, last warned that no
	// node can replace a dead member.
	lastMemberChange map[ids.GroupID]time.Time
	lastDropCheck    map[ids.GroupID]time.Time
	lastNoSpare      time.Time

	// Commands this node sends to other nodes' groups (moves, grants).
	reqClient   uint64
	reqMu       sync.Mutex
	reqSeq      uint64
	reqInflight map[uint64]bool

	stop     chan struct{}
	wg       sync.WaitGroup
	inflight sync.WaitGroup // gRPC handlers running
}

// ministrySM adapts the namespace state machine to multiraft.
type ministrySM struct{}

func (ministrySM) Apply(rw engine.ReadWriter, _ uint64, cmd *wire.Command) (*wire.Result, error) {
	return namespace.Apply(rw, cmd)
}

// Start opens the store, checks identity and starts serving. The returned
// node runs until Stop.
func Start(ctx context.Context, cfg Config) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	cfg.setGCDefaults()
	eng, err := engine.Open(cfg.DataDir, engine.Options{})
	if errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EWOULDBLOCK) {
		return nil, fmt.Errorf("data directory %s is locked by another process (is a govfs meta already running on it?): %w", cfg.DataDir, err)
	}
	if err != nil {
		return nil, fmt.Errorf("open data directory %s (is it a GovFS metadata directory, and not in use by another process?): %w", cfg.DataDir, err)
	}
	// The node's log also feeds the dashboard's recent events.
	evs := &events{}
	cfg.Logger = slog.New(&eventHandler{next: cfg.Logger.Handler(), ev: evs})
	log := cfg.Logger
	if cfg.ID != 0 {
		log = log.With("node", uint64(cfg.ID)) // a joining node learns its id below
	}
	n := &Node{cfg: cfg, log: log, events: evs, eng: eng, pool: rpc.NewPool(cfg.Security), stop: make(chan struct{}),
		lastCampaign: map[ids.GroupID]time.Time{}, started: cfg.Clock.Now(),
		lastMemberChange: map[ids.GroupID]time.Time{}, lastDropCheck: map[ids.GroupID]time.Time{}}
	ok := false
	defer func() {
		if !ok {
			n.closeAll()
		}
	}()
	stored, err := loadIdentity(eng)
	if err != nil {
		return nil, err
	}
	if err := checkIdentity(&cfg, stored); err != nil {
		return nil, err
	}
	if stored == nil && len(cfg.Join) > 0 {
		if stored, err = n.join(ctx); err != nil {
			return nil, err
		}
	}
	if stored == nil {
		stored = &identity{NodeID: cfg.ID, Peers: cfg.Peers}
		if err := saveIdentity(eng, stored); err != nil {
			return nil, fmt.Errorf("record node identity: %w", err)
		}
	}
	if stored.Joined {
		// A joined node's id comes from its data directory; its address
		// book starts with the initial members and grows from the map.
		cfg.ID = stored.NodeID
		cfg.Peers = map[ids.NodeID]string{}
		for id, a := range stored.Peers {
			cfg.Peers[id] = a
		}
		cfg.Peers[cfg.ID] = cfg.Listen
		n.cfg = cfg
		n.log = cfg.Logger.With("node", uint64(cfg.ID))
	}
	n.ident = stored
	n.reqClient = newReqClient()
	n.clusterID.Store(stored.ClusterID)
	if err := n.checkPeersCluster(ctx); err != nil {
		return nil, err
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	cfg.Security.RegisterMetrics(reg)
	n.gc = newCollector(n, reg)
	// The address book: the initial members, then every node the map
	// listed when this node last saw it.
	book := map[ids.NodeID]string{}
	for id, a := range stored.Addrs {
		book[id] = a
	}
	for id, a := range cfg.Peers {
		book[id] = a
	}
	n.transport = rpc.NewRaftTransport(cfg.ID, book, n.ClusterID, cfg.Security, n.log)
	hc := multiraft.DefaultConfig()
	hc.NodeID = cfg.ID
	hc.Engine = eng
	hc.Transport = n.transport
	if cfg.Transport != nil {
		hc.Transport = cfg.Transport
	}
	hc.Clock = cfg.Clock
	hc.Logger = n.log
	hc.Registry = reg
	hc.TickInterval = cfg.TickInterval
	if cfg.BatchDelay >= 0 {
		hc.BatchDelay = cfg.BatchDelay
	}
	if cfg.SnapshotEvery > 0 {
		hc.SnapshotEvery = cfg.SnapshotEvery
	}
	if cfg.LogKeep > 0 {
		hc.KeepEntries = cfg.LogKeep
	}
	host, err := multiraft.NewHost(hc)
	if err != nil {
		return nil, err
	}
	// The initial members host the president group and the root
	// ministry; any node hosts the ministries the map gave it since.
	if !stored.Joined {
		peers := sortedIDs(stored.Peers)
		if err := host.AddGroup(ids.PresidentGroup, clustermap.Map{}, peers); err != nil {
			return nil, err
		}
		// The root ministry, unless this node left it (membership
		// change) or hosts it again as a new member (below).
		rootElsewhere := slices.Contains(stored.Dropped, uint64(ids.RootMinistry)) ||
			slices.ContainsFunc(stored.Groups, func(hg hostedGroup) bool { return hg.Group == uint64(ids.RootMinistry) })
		if !rootElsewhere {
			if err := host.AddGroup(ids.RootMinistry, ministrySM{}, peers); err != nil {
				return nil, err
			}
		}
	}
	for _, hg := range stored.Groups {
		var err error
		if hg.Joined {
			err = host.JoinGroup(ids.GroupID(hg.Group), ministrySM{})
		} else {
			err = host.AddGroup(ids.GroupID(hg.Group), ministrySM{}, nodeIDs(hg.Members))
		}
		if err != nil {
			return nil, err
		}
	}
	n.host = host
	n.leases = newLeaseService(n)
	n.transport.SetHost(host)
	if cfg.OnHost != nil {
		cfg.OnHost(host)
	}

	lis, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("listen on %s (is another process using it?): %w", cfg.Listen, err)
	}
	n.lis = rpc.LimitPerPeer(lis, cfg.MaxConnsPerPeer, n.log)
	// Track handlers so the store is closed only after the last one has
	// returned (grpc.Server.Stop does not wait for them).
	authUnary, authStream := rpc.Authorize(cfg.Security, methodRoles())
	limit := rpc.NewInFlightLimiter(cfg.MaxInFlightPerClient)
	rpcMetrics := rpc.NewServerMetrics(reg)
	opts := append(rpc.ServerOptions(), cfg.Security.ServerOption(),
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			n.inflight.Add(1)
			defer n.inflight.Done()
			return h(ctx, req)
		}, rpcMetrics.Unary, authUnary, limit.Unary),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			n.inflight.Add(1)
			defer n.inflight.Done()
			return h(srv, ss)
		}, rpcMetrics.Stream, authStream, limit.Stream))
	n.grpc = grpc.NewServer(opts...)
	wire.RegisterRaftServer(n.grpc, n.transport.Service())
	wire.RegisterMetaServer(n.grpc, &metaService{n: n})
	host.Start()
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		if err := n.grpc.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			n.log.Error("grpc serve", "err", err)
		}
	}()
	if cfg.DebugListen != "" {
		if n.debug, err = rpc.StartDebug(cfg.DebugListen); err != nil {
			return nil, err
		}
	}
	if cfg.HTTPListen != "" {
		reg.MustRegister(newNodeCollector(n))
		if err := n.startHTTP(reg); err != nil {
			return nil, err
		}
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		n.maintain()
	}()
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		n.leases.watch(n.stop)
	}()
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		n.heartbeat()
	}()
	ok = true
	n.log.Info("metadata node started", "listen", lis.Addr().String(), "data", cfg.DataDir, "cluster", n.ClusterID())
	return n, nil
}

// checkPeersCluster asks reachable peers for their cluster id and refuses
// to start when it differs from the one in this data directory.
func (n *Node) checkPeersCluster(ctx context.Context) error {
	mine := n.ClusterID()
	if mine == "" {
		return nil
	}
	addrs := map[string]ids.NodeID{}
	for id, addr := range n.cfg.Peers {
		if id != n.cfg.ID {
			addrs[addr] = id
		}
	}
	for _, a := range n.cfg.Join {
		if _, ok := addrs[a]; !ok {
			addrs[a] = 0
		}
	}
	for addr, id := range addrs {
		cc, err := n.pool.Get(addr)
		if err != nil {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		info, err := wire.NewMetaClient(cc).ClusterInfo(cctx, &wire.ClusterInfoRequest{})
		cancel()
		if err != nil {
			continue
		}
		if theirs := info.GetClusterId(); theirs != "" && theirs != mine {
			who := "node at " + addr
			if id != 0 {
				who = fmt.Sprintf("peer %v at %s", id, addr)
			}
			return fmt.Errorf("data directory %s belongs to cluster %s but the %s is in cluster %s: use the data directory of this cluster, or an empty one to form a new cluster (or join this one)",
				n.cfg.DataDir, mine, who, theirs)
		}
	}
	return nil
}

func (n *Node) startHTTP(reg *prometheus.Registry) error {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		if err := n.healthy(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	n.serveDashboard(mux)
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if err := n.ready(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	lis, err := net.Listen("tcp", n.cfg.HTTPListen)
	if err != nil {
		return fmt.Errorf("listen for HTTP on %s: %w", n.cfg.HTTPListen, err)
	}
	n.http = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		_ = n.http.Serve(lis)
	}()
	return nil
}

// Addr is the address the gRPC server listens on.
func (n *Node) Addr() string { return n.lis.Addr().String() }

// ClusterID returns the cluster id ("" until group 0 initialised it).
func (n *Node) ClusterID() string {
	s, _ := n.clusterID.Load().(string)
	return s
}

// Fatal is closed when the node hit an unrecoverable error.
func (n *Node) Fatal() <-chan struct{} { return n.host.Fatal() }

// Err is the fatal error, if any.
func (n *Node) Err() error { return n.host.Err() }

// Host exposes the raft host (tests, status).
func (n *Node) Host() *multiraft.Host { return n.host }

// Stop stops serving and closes the store.
func (n *Node) Stop() {
	select {
	case <-n.stop:
		return
	default:
	}
	close(n.stop)
	n.closeAll()
}

func (n *Node) closeAll() {
	if n.transport != nil {
		n.transport.StopInbound() // the peers' raft streams, which a graceful stop would wait for
	}
	if n.grpc != nil {
		stopped := make(chan struct{})
		go func() { n.grpc.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-time.After(2 * time.Second):
			n.grpc.Stop()
		}
	}
	n.debug.Stop()
	if n.http != nil {
		_ = n.http.Close()
	}
	if n.host != nil {
		n.host.Stop() // handlers waiting on proposals or reads return now
	}
	n.wg.Wait()
	if n.transport != nil {
		n.transport.Close()
	}
	handlersDone := make(chan struct{})
	go func() { n.inflight.Wait(); close(handlersDone) }()
	select {
	case <-handlersDone:
	case <-time.After(10 * time.Second):
		n.log.Error("gRPC handlers still running after 10 s; closing the store anyway")
	}
	n.pool.Close()
	if n.eng != nil {
		_ = n.eng.Close()
	}
}

func (n *Node) stateReader(g ids.GroupID) engine.Reader {
	return engine.Prefixed{RW: engine.ReadOnly{Reader: n.eng}, Prefix: engine.StatePrefix(uint64(g))}
}
