package dataproto

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"net"
	"sync"
	"time"
)

// Pool keeps connections per address for request/reply calls: a call
// takes an idle connection (or dials one), so calls to one address run in
// parallel, one per connection. A connection that fails is closed; up to
// MaxIdle idle connections per address are kept.
type Pool struct {
	// Timeout bounds a call (dial, send, reply); 10 s when zero.
	Timeout time.Duration
	// MaxIdle bounds the idle connections kept per address;
	// defaultMaxIdle when zero.
	MaxIdle int
	// TLS, when set, secures every connection (mutual TLS: it carries
	// this process's certificate); nil is plain TCP.
	TLS *tls.Config

	mu     sync.Mutex
	idle   map[string][]*poolConn
	closed bool
}

// defaultMaxIdle is enough idle connections per address for the calls
// a busy client runs at once (32 new files' writes; a chunk server's
// peer pool, which forwards each to two replicas, sets 64): with 8, a
// burst of small writes closed most connections as they came back and
// dialed them again for the next burst, and the TLS handshakes (key
// exchange, certificate checks) took 38 % of a chunk server's CPU
// during cp -a of /usr/include (pprof). An idle connection costs a
// socket and two 4 KiB buffers, and counts against the chunk servers'
// connections per peer address (rpc.DefaultMaxConnsPerPeer, 1024: many
// clients behind one address share it).
const defaultMaxIdle = 32

type poolConn struct {
	c net.Conn
	r *Reader
	w *bufio.Writer
	n uint64
}

func (p *Pool) take(addr string, timeout time.Duration) (pc *poolConn, reused bool, err error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, false, fmt.Errorf("dataproto: pool closed")
	}
	if l := p.idle[addr]; len(l) > 0 {
		pc := l[len(l)-1]
		p.idle[addr] = l[:len(l)-1]
		p.mu.Unlock()
		return pc, true, nil
	}
	p.mu.Unlock()
	return p.dial(addr, timeout)
}

func (p *Pool) dial(addr string, timeout time.Duration) (*poolConn, bool, error) {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, false, fmt.Errorf("dataproto: dial %s: %w", addr, err)
	}
	if p.TLS != nil {
		tc := tls.Client(c, p.TLS)
		_ = tc.SetDeadline(time.Now().Add(timeout))
		if err := tc.Handshake(); err != nil {
			_ = c.Close()
			return nil, false, fmt.Errorf("dataproto: TLS handshake with %s: %w", addr, err)
		}
		_ = tc.SetDeadline(time.Time{})
		c = tc
	}
	return &poolConn{c: c, r: NewReader(bufio.NewReader(c), 0), w: bufio.NewWriter(c)}, false, nil
}

func (p *Pool) give(addr string, pc *poolConn) {
	max := p.MaxIdle
	if max <= 0 {
		max = defaultMaxIdle
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || len(p.idle[addr]) >= max {
		_ = pc.c.Close()
		return
	}
	if p.idle == nil {
		p.idle = map[string][]*poolConn{}
	}
	p.idle[addr] = append(p.idle[addr], pc)
}

// Close closes every idle connection; calls in flight finish and close
// theirs.
func (p *Pool) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for addr, l := range p.idle {
		for _, pc := range l {
			_ = pc.c.Close()
		}
		delete(p.idle, addr)
	}
}

// Call sends f to addr and returns the reply (f.RequestID is set here).
// An idle connection the peer has closed (it restarted) fails the first
// call on it; that call is retried once on a new connection. NB: the
// request may then reach the peer twice if the first copy got through;
// requests must tolerate that (replicas accept a repeated mutation of the
// version they already hold).
func (p *Pool) Call(addr string, f *Frame) (*Frame, error) {
	timeout := p.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	pc, reused, err := p.take(addr, timeout)
	if err != nil {
		return nil, err
	}
	r, err := p.call(addr, pc, f, timeout)
	if err != nil && reused {
		if pc, _, err = p.dial(addr, timeout); err != nil {
			return nil, err
		}
		r, err = p.call(addr, pc, f, timeout)
	}
	return r, err
}

func (p *Pool) call(addr string, pc *poolConn, f *Frame, timeout time.Duration) (*Frame, error) {
	fail := func(err error) (*Frame, error) {
		_ = pc.c.Close()
		return nil, fmt.Errorf("dataproto: %s: %w", addr, err)
	}
	// A copy: callers may send one frame to several addresses at once.
	req := *f
	pc.n++
	req.RequestID = pc.n
	f = &req
	_ = pc.c.SetDeadline(time.Now().Add(timeout))
	if err := WriteFrame(pc.w, f); err != nil {
		return fail(err)
	}
	if err := pc.w.Flush(); err != nil {
		return fail(err)
	}
	r, err := pc.r.Next()
	if err != nil {
		return fail(err)
	}
	if r.RequestID != f.RequestID {
		return fail(fmt.Errorf("reply to request %d, want %d", r.RequestID, f.RequestID))
	}
	p.give(addr, pc)
	return r, nil
}
