package chunkserver

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/govfs/govfs/internal/chunkstore"
	"github.com/govfs/govfs/internal/dataproto"
	"github.com/govfs/govfs/internal/wire"
)

// maxReadLength bounds one read request.
const maxReadLength = 8 << 20

func (s *Server) serve() {
	for {
		c, err := s.lis.Accept()
		if err != nil {
			select {
			case <-s.stop:
				return
			default:
			}
			s.log.Warn("accept", "err", err)
			time.Sleep(10 * time.Millisecond) // e.g. out of file descriptors
			continue
		}
		s.mu.Lock()
		select {
		case <-s.stop:
			// Accepted as Stop ran: it will not close this one for us.
			s.mu.Unlock()
			_ = c.Close()
			return
		default:
		}
		s.conns[c] = struct{}{}
		s.mu.Unlock()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.serveConn(c)
			s.mu.Lock()
			delete(s.conns, c)
			s.mu.Unlock()
			_ = c.Close()
		}()
	}
}

// serveConn answers frames in order until the peer closes the connection
// or sends a bad frame (which ends the connection: the stream can no
// longer be trusted).
func (s *Server) serveConn(c net.Conn) {
	r := dataproto.NewReader(bufio.NewReader(c), dataproto.DefaultMaxPayload)
	w := bufio.NewWriter(c)
	for {
		f, err := r.Next()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) && !errors.Is(err, io.EOF) {
				s.log.Debug("data connection ended", "peer", c.RemoteAddr().String(), "err", err)
			}
			return
		}
		reply := s.handle(f)
		if err := dataproto.WriteFrame(w, reply); err != nil {
			return
		}
		if err := w.Flush(); err != nil {
			return
		}
	}
}

func (s *Server) handle(f *dataproto.Frame) *dataproto.Frame {
	reply := &dataproto.Frame{Type: replyType(f.Type), RequestID: f.RequestID, Handle: f.Handle, Group: f.Group,
		Epoch: f.Epoch, Offset: f.Offset}
	fail := func(st dataproto.Status, format string, args ...any) *dataproto.Frame {
		reply.Status, reply.Payload = st, []byte(fmt.Sprintf(format, args...))
		return reply
	}
	// Every request names the replica group and the epoch the requester
	// believes in; a stale one is refused so it cannot act on a group that
	// has changed (members, primary).
	g, addrs := s.groups.get(f.Group)
	if g == nil {
		return fail(dataproto.StatusStaleEpoch, "replica group %d is not known to chunk server %d (yet)", f.Group, s.id)
	}
	if g.GetEpoch() != f.Epoch {
		return fail(dataproto.StatusStaleEpoch, "replica group %d is at epoch %d, request names %d", f.Group, g.GetEpoch(), f.Epoch)
	}
	h := chunkstore.Handle(f.Handle)
	switch f.Type {
	case dataproto.TypeWrite, dataproto.TypeAppend:
		if g.GetPrimary() != s.id {
			return fail(dataproto.StatusNotPrimary, "chunk server %d is not the primary of group %d; send to %d at %s",
				s.id, f.Group, g.GetPrimary(), addrs[g.GetPrimary()])
		}
		if err := s.groupReady(g, addrs); err != nil {
			// Retryable: members learn a new group within a heartbeat.
			return fail(dataproto.StatusStaleEpoch, "replica group %d is not ready: %v", f.Group, err)
		}
		return s.order(f, g, addrs, reply)
	case dataproto.TypeReplicate:
		return s.replicate(f, h, reply)
	case dataproto.TypeRead:
		if s.isStale(f.Handle) {
			return fail(dataproto.StatusStaleVersion, "chunk %d on server %d missed a mutation and awaits repair; read another member", f.Handle, s.id)
		}
		if len(f.Payload) != 4 {
			return fail(dataproto.StatusInvalid, "read: payload must be the 4-byte length wanted")
		}
		n := binary.BigEndian.Uint32(f.Payload)
		if n > maxReadLength {
			return fail(dataproto.StatusInvalid, "read: more than 8 MiB asked at once")
		}
		data, err := s.store.Read(h, f.Offset, int(n))
		if err != nil {
			reply.Status, reply.Payload = status(err)
			return reply
		}
		info, err := s.store.Stat(h)
		if err != nil {
			reply.Status, reply.Payload = status(err)
			return reply
		}
		reply.Version, reply.Payload = info.Version, data
		return reply
	default:
		return fail(dataproto.StatusInvalid, "unexpected frame type %v", f.Type)
	}
}

// replicate applies a mutation the primary ordered. Versions must follow
// each other exactly: a member that missed one (it was down, or the
// primary's forward failed) would otherwise apply later mutations over a
// hole and serve a chunk that silently differs from the others. Such a
// member refuses the mutation and marks the chunk stale, refusing reads
// of it until it is repaired (repair is not built yet: the write fails
// with a clear error instead of diverging).
func (s *Server) replicate(f *dataproto.Frame, h chunkstore.Handle, reply *dataproto.Frame) *dataproto.Frame {
	unlock := s.locks.lock(f.Handle)
	defer unlock()
	cur := uint64(0)
	if info, err := s.store.Stat(h); err == nil {
		cur = info.Version
	} else if !errors.Is(err, chunkstore.ErrNotFound) {
		reply.Status, reply.Payload = status(err)
		return reply
	}
	if f.Version == cur && cur > 0 {
		// A resend of the mutation this member already applied (the
		// primary's connection broke before the reply): versions are
		// unique per chunk, so it is the same mutation.
		reply.Status, reply.Version = dataproto.StatusOK, cur
		return reply
	}
	if f.Version != cur+1 {
		s.markStale(f.Handle)
		reply.Status = dataproto.StatusStaleVersion
		reply.Payload = []byte(fmt.Sprintf("chunk %d is at version %d on server %d, mutation is version %d: a mutation was missed; the chunk needs repair",
			f.Handle, cur, s.id, f.Version))
		return reply
	}
	reply.Status, reply.Payload = status(s.store.Write(h, f.Offset, f.Payload, f.Version))
	reply.Version = f.Version
	return reply
}

// groupReady checks, once per group epoch, that every other member knows
// the group at this epoch before the primary orders its first mutation:
// a member that does not yet would refuse it after the primary applied it
// locally, leaving that member a version behind for good (until repair).
func (s *Server) groupReady(g *wire.ReplicaGroup, addrs map[uint64]string) error {
	s.mu.Lock()
	ready := s.ready[g.GetId()] == g.GetEpoch()
	s.mu.Unlock()
	if ready {
		return nil
	}
	for _, m := range g.GetMembers() {
		if m == s.id {
			continue
		}
		// Reading chunk handle 0 (never allocated) answers NotFound from a
		// member that knows the group, StaleEpoch from one that does not.
		rf, err := s.peers.Call(addrs[m], &dataproto.Frame{Type: dataproto.TypeRead, Group: g.GetId(), Epoch: g.GetEpoch(),
			Payload: binary.BigEndian.AppendUint32(nil, 0)})
		if err != nil {
			return fmt.Errorf("member %d: %w", m, err)
		}
		if rf.Status != dataproto.StatusNotFound && rf.Status != dataproto.StatusOK {
			return fmt.Errorf("member %d: status %d: %s", m, rf.Status, rf.Payload)
		}
	}
	s.mu.Lock()
	if s.ready == nil {
		s.ready = map[uint64]uint64{}
	}
	s.ready[g.GetId()] = g.GetEpoch()
	s.mu.Unlock()
	return nil
}

func (s *Server) markStale(h uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stale == nil {
		s.stale = map[uint64]bool{}
	}
	s.stale[h] = true
}

func (s *Server) isStale(h uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stale[h]
}

// order is the primary's part of a write or append: it fixes the new
// version (and, for an append, the offset), applies the mutation locally,
// forwards it to every other member and acknowledges only when all of
// them have it durably. Mutations of one chunk are ordered by a per-chunk
// lock so versions and offsets are the same on every replica.
func (s *Server) order(f *dataproto.Frame, g *wire.ReplicaGroup, addrs map[uint64]string, reply *dataproto.Frame) *dataproto.Frame {
	h := chunkstore.Handle(f.Handle)
	unlock := s.locks.lock(f.Handle)
	defer unlock()
	v := uint64(1)
	if info, err := s.store.Stat(h); err == nil {
		v = info.Version + 1
	} else if !errors.Is(err, chunkstore.ErrNotFound) {
		reply.Status, reply.Payload = status(err)
		return reply
	}
	off := f.Offset
	var err error
	if f.Type == dataproto.TypeAppend {
		off, err = s.store.Append(h, f.Payload, v)
	} else {
		err = s.store.Write(h, off, f.Payload, v)
	}
	if err != nil {
		reply.Status, reply.Payload = status(err)
		return reply
	}
	// Fan out to the other members in parallel.
	// NB: a member that fails leaves the group inconsistent until repair
	// (not built yet); the client sees the failure and may retry, which
	// orders a new version.
	others := slices.DeleteFunc(slices.Clone(g.GetMembers()), func(m uint64) bool { return m == s.id })
	errs := make([]error, len(others))
	var wg sync.WaitGroup
	for i, m := range others {
		wg.Go(func() {
			rf, err := s.peers.Call(addrs[m], &dataproto.Frame{Type: dataproto.TypeReplicate, Handle: f.Handle,
				Group: f.Group, Epoch: f.Epoch, Version: v, Offset: off, Payload: f.Payload})
			switch {
			case err != nil:
				errs[i] = fmt.Errorf("replica %d: %w", m, err)
			case rf.Status != dataproto.StatusOK:
				errs[i] = fmt.Errorf("replica %d: status %d: %s", m, rf.Status, rf.Payload)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		reply.Status, reply.Payload = dataproto.StatusInternal, []byte(err.Error())
		return reply
	}
	reply.Status, reply.Version, reply.Offset = dataproto.StatusOK, v, off
	return reply
}

func replyType(t dataproto.Type) dataproto.Type {
	switch t {
	case dataproto.TypeWrite:
		return dataproto.TypeWriteReply
	case dataproto.TypeAppend:
		return dataproto.TypeAppendReply
	case dataproto.TypeReplicate:
		return dataproto.TypeReplicateReply
	default:
		return dataproto.TypeReadReply
	}
}

// chunkLocks serialises the primary's ordering of one chunk's mutations.
type chunkLocks struct {
	mu sync.Mutex
	m  map[uint64]*lockEntry
}

type lockEntry struct {
	mu   sync.Mutex
	refs int
}

func (l *chunkLocks) lock(h uint64) func() {
	l.mu.Lock()
	if l.m == nil {
		l.m = map[uint64]*lockEntry{}
	}
	e := l.m[h]
	if e == nil {
		e = &lockEntry{}
		l.m[h] = e
	}
	e.refs++
	l.mu.Unlock()
	e.mu.Lock()
	return func() {
		e.mu.Unlock()
		l.mu.Lock()
		if e.refs--; e.refs == 0 {
			delete(l.m, h)
		}
		l.mu.Unlock()
	}
}

// status maps a store error to a reply status and a message payload.
func status(err error) (dataproto.Status, []byte) {
	var ce *chunkstore.CorruptError
	switch {
	case err == nil:
		return dataproto.StatusOK, nil
	case errors.As(err, &ce):
		return dataproto.StatusCorrupt, []byte(err.Error())
	case errors.Is(err, chunkstore.ErrStaleVersion):
		return dataproto.StatusStaleVersion, []byte(err.Error())
	case errors.Is(err, chunkstore.ErrNotFound):
		return dataproto.StatusNotFound, []byte(err.Error())
	case errors.Is(err, chunkstore.ErrChunkFull):
		return dataproto.StatusChunkFull, []byte(err.Error())
	case errors.Is(err, syscall.ENOSPC):
		return dataproto.StatusNoSpace, []byte(err.Error())
	case errors.Is(err, syscall.EINVAL), errors.Is(err, syscall.EFBIG):
		return dataproto.StatusInvalid, []byte(err.Error())
	default:
		return dataproto.StatusInternal, []byte(err.Error())
	}
}
