package dataproto

import (
	"bufio"
	"fmt"
	"net"
	"sync"
	"time"
)

// Pool keeps one connection per address for request/reply calls, one
// call at a time per connection. A connection that fails is dropped and
// redialed on the next call.
type Pool struct {
	// Timeout bounds a call (dial, send, reply); 10 s when zero.
	Timeout time.Duration

	mu    sync.Mutex
	conns map[string]*poolConn
}

type poolConn struct {
	mu sync.Mutex
	c  net.Conn
	r  *Reader
	w  *bufio.Writer
	n  uint64
}

func (p *Pool) conn(addr string) *poolConn {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		p.conns = map[string]*poolConn{}
	}
	pc, ok := p.conns[addr]
	if !ok {
		pc = &poolConn{}
		p.conns[addr] = pc
	}
	return pc
}

// Close closes every connection.
func (p *Pool) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, pc := range p.conns {
		pc.mu.Lock()
		if pc.c != nil {
			_ = pc.c.Close()
			pc.c = nil
		}
		pc.mu.Unlock()
	}
}

// Call sends f to addr and returns the reply (f.RequestID is set here).
func (p *Pool) Call(addr string, f *Frame) (*Frame, error) {
	timeout := p.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	pc := p.conn(addr)
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if pc.c == nil {
		c, err := net.DialTimeout("tcp", addr, timeout)
		if err != nil {
			return nil, fmt.Errorf("dataproto: dial %s: %w", addr, err)
		}
		pc.c, pc.r, pc.w = c, NewReader(bufio.NewReader(c), 0), bufio.NewWriter(c)
	}
	fail := func(err error) (*Frame, error) {
		_ = pc.c.Close()
		pc.c = nil
		return nil, fmt.Errorf("dataproto: %s: %w", addr, err)
	}
	pc.n++
	f.RequestID = pc.n
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
	return r, nil
}
