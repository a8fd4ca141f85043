package rpc

import (
	"log/slog"
	"net"
	"sync"
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
