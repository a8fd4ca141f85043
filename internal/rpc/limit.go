package rpc

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpcpeer "google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/govfs/govfs/internal/certs"
	"github.com/govfs/govfs/internal/wire"
)

// DefaultMaxConnsPerPeer bounds the connections one remote address (IP)
// may hold open to one listener: far above what a client needs (a few
// pooled connections per process, many processes per host), far below
// what exhausts a server's descriptors.
const DefaultMaxConnsPerPeer = 1024

// LimitPerPeer wraps l so that a remote IP holding max open connections
// has further ones closed at once (logged, at most once per burst); max
// <= 0 is DefaultMaxConnsPerPeer.
func LimitPerPeer(l net.Listener, max int, log *slog.Logger) net.Listener {
	if max <= 0 {
		max = DefaultMaxConnsPerPeer
	}
	return &peerLimiter{Listener: l, max: max, log: log, open: map[string]int{}}
}

type peerLimiter struct {
	net.Listener
	max int
	log *slog.Logger

	mu      sync.Mutex
	open    map[string]int
	refused map[string]bool // logged since the peer was last under the limit
}

func peerIP(c net.Conn) string {
	host, _, err := net.SplitHostPort(c.RemoteAddr().String())
	if err != nil {
		return c.RemoteAddr().String()
	}
	return host
}

func (p *peerLimiter) Accept() (net.Conn, error) {
	for {
		c, err := p.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ip := peerIP(c)
		p.mu.Lock()
		if p.open[ip] >= p.max {
			first := !p.refused[ip]
			if p.refused == nil {
				p.refused = map[string]bool{}
			}
			p.refused[ip] = true
			p.mu.Unlock()
			_ = c.Close()
			if first && p.log != nil {
				p.log.Warn("connection refused: the peer holds too many open connections", "peer", ip, "limit", p.max)
			}
			continue
		}
		p.open[ip]++
		delete(p.refused, ip)
		p.mu.Unlock()
		return &countedConn{Conn: c, release: func() { p.release(ip) }}, nil
	}
}

func (p *peerLimiter) release(ip string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.open[ip]--; p.open[ip] <= 0 {
		delete(p.open, ip)
	}
}

type countedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *countedConn) Close() error {
	c.once.Do(c.release)
	return c.Conn.Close()
}

// DefaultMaxInFlightPerClient bounds the requests one client (a client or
// admin certificate; on a plaintext node, a remote IP) may have in
// progress on a node at once: a busy mount keeps a few hundred, and each
// waiting request holds a goroutine and its message.
const DefaultMaxInFlightPerClient = 4096

// InFlightLimiter refuses a client's request while it already has max in
// progress (ResourceExhausted, retried by the client library). Nodes and
// chunk servers are not limited: their requests are the cluster's own
// work. Chain it after Authorize, which names the caller.
type InFlightLimiter struct {
	max int
	mu  sync.Mutex
	n   map[string]int
}

// NewInFlightLimiter returns a limiter of max requests per client (max <=
// 0: DefaultMaxInFlightPerClient).
func NewInFlightLimiter(max int) *InFlightLimiter {
	if max <= 0 {
		max = DefaultMaxInFlightPerClient
	}
	return &InFlightLimiter{max: max, n: map[string]int{}}
}

// key names the client a request counts against ("" when not limited).
func (l *InFlightLimiter) key(ctx context.Context) string {
	c := CallerOf(ctx)
	if c.Secure {
		if c.Role != certs.RoleClient && c.Role != certs.RoleAdmin {
			return ""
		}
		return c.Identity.String()
	}
	if p, ok := grpcpeer.FromContext(ctx); ok && p.Addr != nil {
		if host, _, err := net.SplitHostPort(p.Addr.String()); err == nil {
			return host
		}
		return p.Addr.String()
	}
	return ""
}

// enter counts a request in, or refuses it.
func (l *InFlightLimiter) enter(ctx context.Context) (func(), error) {
	k := l.key(ctx)
	if k == "" {
		return func() {}, nil
	}
	l.mu.Lock()
	if l.n[k] >= l.max {
		l.mu.Unlock()
		return nil, status.Errorf(codes.ResourceExhausted, "%s has %d requests in progress on this node, the most a client may (--max-inflight-per-client); retry later", k, l.max)
	}
	l.n[k]++
	l.mu.Unlock()
	return func() {
		l.mu.Lock()
		if l.n[k]--; l.n[k] <= 0 {
			delete(l.n, k)
		}
		l.mu.Unlock()
	}, nil
}

// clusterMethod says whether a method is the cluster's own traffic
// (raft, heartbeats), which a plaintext node cannot tell from a client's
// by certificate and must never refuse.
func clusterMethod(full string) bool {
	// (The prefix was "/govfs.Raft/" until session 22, which matched no
	// method: raft traffic between plaintext nodes counted against their
	// address's bound.)
	return strings.HasPrefix(full, "/"+wire.Raft_ServiceDesc.ServiceName+"/") || strings.HasSuffix(full, "/MetaHeartbeat") || strings.HasSuffix(full, "/ChunkHeartbeat")
}

// Unary is the unary server interceptor.
func (l *InFlightLimiter) Unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if clusterMethod(info.FullMethod) {
		return h(ctx, req)
	}
	done, err := l.enter(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	return h(ctx, req)
}

// Stream is the stream server interceptor.
func (l *InFlightLimiter) Stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if clusterMethod(info.FullMethod) {
		return h(srv, ss)
	}
	done, err := l.enter(ss.Context())
	if err != nil {
		return err
	}
	defer done()
	return h(srv, ss)
}
