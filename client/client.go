package client

import (
	"context"
	crand "crypto/rand"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/govfs/govfs/internal/certs"
	"github.com/govfs/govfs/internal/dataproto"
	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/wire"
)

// certWatchInterval is how often a client looks for a renewed certificate.
const certWatchInterval = 5 * time.Second

// maxMsgSize bounds gRPC messages both ways.
const maxMsgSize = 16 << 20

// maxOwners bounds the ino→ministry cache; when full an eighth of it is
// dropped at random. A forgotten owner costs a REDIRECT, never a wrong
// answer: the root ministry redirects an inode it does not hold to the
// ministry it moved to or whose inode range it came from.
const maxOwners = 1 << 16

var errClosed = errors.New("govfs: client is closed")

// Client talks to a GovFS cluster. Create one with New; it is safe for
// concurrent use. Close releases its connections.
type Client struct {
	cfg       Config
	log       *slog.Logger
	clientID  uint64
	clusterID string // set once in New, read-only afterwards
	retry     retrier
	load      replicaLoad

	mu struct {
		sync.Mutex
		closed bool
		// rand is cfg.Rand; not safe for concurrent use on its own.
		rand    interface{ Int64N(int64) int64 }
		members []*wire.Member
		// addrs are the addresses tried when no better hint exists:
		// members' addresses, then seed addresses not among them.
		addrs []string
		// groupAddrs are the addresses of a group's members when the
		// cluster map says (ministries); other groups use addrs.
		groupAddrs map[ids.GroupID][]string
		conns      map[string]*grpc.ClientConn
		leader     map[ids.GroupID]string
		// cursor is where the leader search for a group continues.
		cursor map[ids.GroupID]int
		// readPref is the member reads go to while it works.
		readPref string
		// silent: nodes whose calls the guard abandoned (guard.go),
		// avoided until the time given unless they answer meanwhile.
		silent  map[string]time.Time
		applied map[ids.GroupID]uint64
		owners  map[ids.Ino]ids.GroupID
		// epochs: the highest epoch of each ministry this Client has
		// seen (maps, REDIRECT and STALE_EPOCH answers); named in
		// every call to the ministry (call.go).
		epochs map[ids.GroupID]uint64
		// mapFetched: when the cluster map was last fetched to learn
		// an unknown ministry's members (admin.go refreshMap).
		mapFetched time.Time
		nextSeq    uint64
		inflight   map[uint64]struct{}
		// lowest is the smallest seq in inflight while it is not empty
		// (newCommand's first_incomplete, kept rather than searched for:
		// a scan of a queue's thousands of commands per new command was
		// 18 % of the mount's CPU during cp -a).
		lowest uint64
		// data plane, from ClusterInfo: replica groups by id, chunk
		// server data addresses by id, the cluster's chunk size.
		rgroups    map[uint64]*wire.ReplicaGroup
		chunkAddrs map[uint64]string
		// chunkServers are the registered chunk servers by id (for their
		// place: host, rack, pod).
		chunkServers map[uint64]*wire.ChunkServer
		chunkSize    int64
	}
	data dataproto.Pool
	// tokens are renewed chunk access tokens (tokens.go).
	tokens tokenCache
	// handles is a pool of chunk handles allocated ahead (handles.go).
	handles handlePool
	// newWrites bounds new files' background writes (newfile.go).
	newWrites chan struct{}
	// outageSince is when calls started failing for longer than
	// outageAfter (UnixNano; 0: none), for the log (call.go).
	outageSince atomic.Int64
	// leases renews the leases this Client holds (lease.go).
	leases leaseKeeper
	// newLeases keeps the leases granted with creates (newlease.go).
	newLeases newLeases
	// releases queues leases given back, acquires lease tries: both
	// go in batches (release.go, acquire.go, batch.go).
	releases groupQueues[releaseItem]
	acquires acquirer
	// leaseToken numbers this Client's lease acquisitions (LeaseRequest
	// token: a retried acquire gets its first grant back).
	leaseToken atomic.Uint64
	// changing tracks the synchronous changes of each inode on their
	// way (writebehind.go); behindWrites counts the writes queued behind.
	changing     inoChanges
	behindWrites atomic.Uint64
	// behindHeldForTest, set by a test before any write, runs between a
	// write's upgrade and its queueing (writebehind.go).
	behindHeldForTest func()
	// deferred queues metadata changes sent later in batches (async.go).
	deferred deferredQueue
	// routeStats counts calls and redirects (call.go).
	routeStats routeCounters
	// tls is the connections' TLS (nil: plaintext); stopWatch ends its
	// certificate watcher.
	tls       *tls.Config
	store     *certs.Store
	stopWatch func()
}

// New connects to the cluster reachable at cfg.MetaAddrs: it asks some
// node for ClusterInfo (retrying across addresses within cfg.OpTimeout)
// to learn the cluster id and the member list. Zero fields of cfg take
// their defaults.
func New(ctx context.Context, cfg Config) (*Client, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	id, err := randomClientID()
	if err != nil {
		return nil, fmt.Errorf("client: choose client id: %w", err)
	}
	c := &Client{cfg: cfg, log: cfg.Logger, clientID: id, newWrites: make(chan struct{}, maxNewWrites)}
	if cfg.TLSDir != "" {
		store, err := certs.Load(cfg.TLSDir, nil)
		if err != nil {
			return nil, &Error{Op: "load client certificate", Path: cfg.TLSDir, Err: err}
		}
		c.tls, c.store = store.ClientConfig(), store
		c.data.TLS = c.tls
		wctx, cancel := context.WithCancel(context.Background())
		c.stopWatch = cancel
		go store.Watch(wctx, certWatchInterval, func(err error) {
			c.log.Warn("client certificate changed but could not be loaded; keeping the old one", "err", err)
		})
	}
	c.mu.rand = cfg.Rand
	c.mu.addrs = dedup(cfg.MetaAddrs)
	c.mu.groupAddrs = map[ids.GroupID][]string{}
	c.mu.conns = map[string]*grpc.ClientConn{}
	c.mu.leader = map[ids.GroupID]string{}
	c.mu.cursor = map[ids.GroupID]int{}
	c.mu.applied = map[ids.GroupID]uint64{}
	c.mu.owners = map[ids.Ino]ids.GroupID{}
	c.mu.epochs = map[ids.GroupID]uint64{}
	c.mu.inflight = map[uint64]struct{}{}
	c.mu.nextSeq = 1
	c.mu.readPref = c.mu.addrs[c.mu.rand.Int64N(int64(len(c.mu.addrs)))]
	c.retry = retrier{clock: cfg.Clock, budget: cfg.OpTimeout, int64n: c.int64n}

	// Finding the cluster has its own, shorter budget: if no listed node
	// answers ClusterInfo within ConnectTimeout the cluster is down or the
	// addresses are wrong, and a person at a shell should hear so soon.
	connect := c.retry
	connect.budget = cfg.ConnectTimeout
	info, err := c.fetchClusterInfo(ctx, &connect, true)
	if err != nil {
		c.Close()
		return nil, &Error{Op: "connect", Path: strings.Join(cfg.MetaAddrs, ","), Err: err}
	}
	c.clusterID = info.GetClusterId()
	c.applyClusterInfo(info)
	c.log.Debug("connected", slog.String("cluster", c.clusterID),
		slog.Uint64("client", c.clientID), slog.Int("members", len(info.GetMembers())))
	return c, nil
}

func randomClientID() (uint64, error) {
	var b [8]byte
	for {
		if _, err := crand.Read(b[:]); err != nil {
			return 0, err
		}
		if id := binary.LittleEndian.Uint64(b[:]); id != 0 {
			return id, nil
		}
	}
}

func dedup(in []string) []string {
	var out []string
	for _, a := range in {
		if !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}

// Close sends the deferred metadata changes (async.go), then closes all
// connections. Calls in flight fail.
func (c *Client) Close() error {
	// Before the leases go: another client's change could otherwise come
	// between a directory lease's end and its holder's deferred changes.
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.OpTimeout)
	c.flushDeferred(ctx)
	cancel()
	c.leases.close() // before c.mu: its loops use the connections
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mu.closed = true
	c.data.Close()
	if c.stopWatch != nil {
		c.stopWatch()
	}
	var errs []error
	for addr, cc := range c.mu.conns {
		if err := cc.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close %s: %w", addr, err))
		}
		delete(c.mu.conns, addr)
	}
	return errors.Join(errs...)
}

// ClusterID returns the id of the cluster this Client talks to.
func (c *Client) ClusterID() string { return c.clusterID }

// ClientID returns this Client's random non-zero id (RequestID.client_id).
func (c *Client) ClientID() uint64 { return c.clientID }

// Members returns the metadata nodes as learned from ClusterInfo.
func (c *Client) Members() []*wire.Member {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*wire.Member, len(c.mu.members))
	for i, m := range c.mu.members {
		out[i] = &wire.Member{Id: m.GetId(), Addr: m.GetAddr(), CertName: m.GetCertName()}
	}
	return out
}

func (c *Client) int64n(n int64) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.rand.Int64N(n)
}

// conn returns the Meta client for addr, dialing lazily.
func (c *Client) conn(addr string) (wire.MetaClient, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.closed {
		return nil, errClosed
	}
	if cc, ok := c.mu.conns[addr]; ok {
		return wire.NewMetaClient(cc), nil
	}
	creds := insecure.NewCredentials()
	if c.tls != nil {
		creds = credentials.NewTLS(c.tls)
	}
	cc, err := grpc.NewClient(addr,
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(
			grpc.MaxCallRecvMsgSize(maxMsgSize),
			grpc.MaxCallSendMsgSize(maxMsgSize)))
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	c.mu.conns[addr] = cc
	return wire.NewMetaClient(cc), nil
}

// fetchClusterInfo asks the known addresses in turn until one answers
// with an initialized cluster. With refusedFinal (the first connect only), when every address
// refuses connections for allRefusedFor, it gives up then. Later calls keep trying
// for their whole budget: a cluster restarting refuses for a while.
func (c *Client) fetchClusterInfo(ctx context.Context, r *retrier, refusedFinal bool) (*wire.ClusterInfoResponse, error) {
	var info *wire.ClusterInfoResponse
	next := 0
	// refused: the addresses whose last attempt was refused outright
	// (nothing listens there). When all are, for allRefusedFor, the
	// answer is final at once rather than after the whole budget: a
	// wrong address or a stopped cluster, which a person at a shell
	// should hear about in a second, not ten.
	refused := map[string]bool{}
	// mismatched: addresses whose handshake failed for a reason that
	// will not pass by retrying (plaintext against TLS, another
	// cluster's CA, an expired certificate), with the explanation.
	mismatched := map[string]string{}
	start := c.cfg.Clock.Now()
	err := r.do(ctx, func(ctx context.Context) (bool, error) {
		c.mu.Lock()
		addrs := slices.Clone(c.mu.addrs)
		c.mu.Unlock()
		addr := addrs[next%len(addrs)]
		next++
		cl, err := c.conn(addr)
		if err != nil {
			return false, err
		}
		cctx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
		resp, err := cl.ClusterInfo(cctx, &wire.ClusterInfoRequest{})
		cancel()
		if err != nil {
			retry, ferr := c.rpcFailed(ctx, addr, err)
			if strings.Contains(err.Error(), "connection refused") {
				refused[addr] = true
			} else {
				delete(refused, addr)
			}
			if why := securityMismatch(err, c.tls != nil); why != "" {
				mismatched[addr] = why
			} else {
				delete(mismatched, addr)
			}
			if refusedFinal && len(mismatched) == len(addrs) {
				return false, fmt.Errorf("%w: %s (%s: %v)", syscall.EACCES, mismatched[addr], addr, err)
			}
			if refusedFinal && retry && len(refused) == len(addrs) && c.cfg.Clock.Now().Sub(start) >= allRefusedFor {
				return false, fmt.Errorf("%w: every metadata address refused the connection for %v (%s): nothing listens there; is the cluster running, and are the addresses (--meta, GOVFS_META) right?",
					syscall.ECONNREFUSED, allRefusedFor, strings.Join(addrs, ", "))
			}
			return retry, ferr
		}
		delete(refused, addr)
		switch st := resp.GetStatus(); st.GetCode() {
		case wire.Code_OK:
		case wire.Code_UNAVAILABLE, wire.Code_NOT_LEADER, wire.Code_UNKNOWN_GROUP:
			return true, fmt.Errorf("%s: %v: %s", addr, st.GetCode(), st.GetMessage())
		default:
			return false, fmt.Errorf("%s: %w", addr, finalStatusErr(st))
		}
		if resp.GetClusterId() == "" {
			return true, fmt.Errorf("%s: cluster not initialized yet", addr)
		}
		info = resp
		return false, nil
	})
	return info, err
}

// securityMismatch explains a failed connection that retrying will not
// mend: the two sides disagree on TLS, or a certificate is not accepted.
func securityMismatch(err error, secure bool) string {
	msg := err.Error()
	switch {
	case !secure && strings.Contains(msg, "server preface"):
		return "the metadata nodes closed a plaintext connection: the cluster runs mutual TLS; give a client certificate directory (--tls DIR or GOVFS_TLS; client.Config.TLSDir)"
	case secure && strings.Contains(msg, "first record does not look like a TLS handshake"):
		return "the metadata nodes speak plaintext (the cluster runs --insecure): connect with --insecure (no client.Config.TLSDir)"
	case secure && (strings.Contains(msg, "certificate") || strings.Contains(msg, "tls:")) && !strings.Contains(msg, "timeout"):
		return "the TLS handshake failed: the certificate is not accepted (another cluster's CA, expired, or revoked?); check the client certificate directory with 'govfs admin cert show DIR'"
	}
	return ""
}

// allRefusedFor is how long every address must refuse connections before
// New gives up (nodes restarting refuse for a moment).
const allRefusedFor = time.Second

// applyClusterInfo installs the member list and group memberships.
func (c *Client) applyClusterInfo(info *wire.ClusterInfoResponse) {
	c.mu.Lock()
	defer c.mu.Unlock()
	members := slices.Clone(info.GetMembers())
	slices.SortFunc(members, func(a, b *wire.Member) int {
		switch {
		case a.GetId() < b.GetId():
			return -1
		case a.GetId() > b.GetId():
			return 1
		}
		return 0
	})
	byID := map[uint64]string{}
	var addrs []string
	for _, m := range members {
		byID[m.GetId()] = m.GetAddr()
		if m.GetAddr() != "" {
			addrs = append(addrs, m.GetAddr())
		}
	}
	addrs = dedup(append(addrs, c.cfg.MetaAddrs...))
	c.mu.members = members
	c.mu.addrs = addrs
	c.mu.rgroups = map[uint64]*wire.ReplicaGroup{}
	for _, g := range info.GetReplicaGroups() {
		c.mu.rgroups[g.GetId()] = g
	}
	c.mu.chunkAddrs = map[uint64]string{}
	c.mu.chunkServers = map[uint64]*wire.ChunkServer{}
	for _, s := range info.GetChunkServers() {
		c.mu.chunkServers[s.GetId()] = s
		c.mu.chunkAddrs[s.GetId()] = s.GetAddr()
	}
	c.mu.chunkSize = info.GetChunkSize()
	c.mu.groupAddrs = map[ids.GroupID][]string{}
	for _, m := range info.GetMinistries() {
		var ga []string
		for _, id := range m.GetMembers() {
			if a := byID[id]; a != "" {
				ga = append(ga, a)
			}
		}
		if len(ga) > 0 {
			c.mu.groupAddrs[ids.GroupID(m.GetGroup())] = ga
		}
		if g := ids.GroupID(m.GetGroup()); m.GetEpoch() > c.mu.epochs[g] {
			c.mu.epochs[g] = m.GetEpoch()
		}
	}
	if len(members) > 0 && !slices.ContainsFunc(members, func(m *wire.Member) bool { return m.GetAddr() == c.mu.readPref }) {
		c.mu.readPref = members[c.mu.rand.Int64N(int64(len(members)))].GetAddr()
	}
}

// Status asks the node at addr for its status (no retries).
func (c *Client) Status(ctx context.Context, addr string) (*wire.StatusResponse, error) {
	cl, err := c.conn(addr)
	if err != nil {
		return nil, opErr("status", addr, err)
	}
	cctx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
	defer cancel()
	resp, err := cl.Status(cctx, &wire.StatusRequest{})
	if err != nil {
		if ctx.Err() != nil {
			return nil, opErr("status", addr, ctxError(ctx.Err(), err))
		}
		st := status.Convert(err)
		return nil, opErr("status", addr, fmt.Errorf("%v: %s", st.Code(), st.Message()))
	}
	if st := resp.GetStatus(); st.GetCode() != wire.Code_OK {
		return nil, opErr("status", addr, finalStatusErr(st))
	}
	if id := resp.GetClusterId(); id != "" && id != c.clusterID {
		return nil, opErr("status", addr, fmt.Errorf("%w: node is in cluster %q, not %q", ErrWrongCluster, id, c.clusterID))
	}
	return resp, nil
}
