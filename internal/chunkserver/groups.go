package chunkserver

import (
	"bufio"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/govfs/govfs/internal/dataproto"
	"github.com/govfs/govfs/internal/wire"
)

// groupTable is what the president last said about this server's replica
// groups (from heartbeat replies).
type groupTable struct {
	mu     sync.Mutex
	groups map[uint64]*wire.ReplicaGroup
	addrs  map[uint64]string
}

func (t *groupTable) set(groups []*wire.ReplicaGroup, addrs map[uint64]string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.groups = map[uint64]*wire.ReplicaGroup{}
	for _, g := range groups {
		t.groups[g.GetId()] = g
	}
	t.addrs = addrs
}

func (t *groupTable) get(id uint64) (*wire.ReplicaGroup, map[uint64]string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.groups[id], t.addrs
}

// peerConn is one data connection to another chunk server, used for one
// request at a time.
type peerConn struct {
	mu sync.Mutex
	c  net.Conn
	r  *dataproto.Reader
	w  *bufio.Writer
	n  uint64
}

// peers caches a connection per member address.
type peers struct {
	mu    sync.Mutex
	conns map[string]*peerConn
}

func (p *peers) get(addr string) *peerConn {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		p.conns = map[string]*peerConn{}
	}
	pc, ok := p.conns[addr]
	if !ok {
		pc = &peerConn{}
		p.conns[addr] = pc
	}
	return pc
}

func (p *peers) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, pc := range p.conns {
		pc.mu.Lock()
		if pc.c != nil {
			_ = pc.c.Close()
		}
		pc.mu.Unlock()
	}
}

// call sends f to addr and returns the reply; a broken connection is
// dropped and redialed on the next call.
func (p *peers) call(addr string, f *dataproto.Frame) (*dataproto.Frame, error) {
	pc := p.get(addr)
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if pc.c == nil {
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			return nil, fmt.Errorf("dial %s: %w", addr, err)
		}
		pc.c, pc.r, pc.w = c, dataproto.NewReader(bufio.NewReader(c), 0), bufio.NewWriter(c)
	}
	fail := func(err error) (*dataproto.Frame, error) {
		_ = pc.c.Close()
		pc.c = nil
		return nil, fmt.Errorf("%s: %w", addr, err)
	}
	pc.n++
	f.RequestID = pc.n
	_ = pc.c.SetDeadline(time.Now().Add(10 * time.Second))
	if err := dataproto.WriteFrame(pc.w, f); err != nil {
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
