package chunkserver

import (
	"bufio"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/govfs/govfs/internal/certs"
	"github.com/govfs/govfs/internal/chunkstore"
	"github.com/govfs/govfs/internal/chunktoken"
	"github.com/govfs/govfs/internal/dataproto"
	"github.com/govfs/govfs/internal/rpc"
	"github.com/govfs/govfs/internal/wire"
)

// maxReadLength bounds one read request.
const maxReadLength = 8 << 20

// maxOrderDelay is how long a mutation may wait (for the chunk's lock, the
// group's readiness, a reconcile) before it is ordered; a later one is
// refused unapplied. It is half the clients' 10 s call timeout
// (dataproto.Pool), so a request is never applied after its sender timed
// out and moved on.
const maxOrderDelay = 5 * time.Second

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
	caller := rpc.Caller{}
	if cfg := s.cfg.Security.ServerTLS(); cfg != nil {
		tc := tls.Server(c, cfg)
		// A peer that connects and says nothing must not hold a
		// goroutine and a descriptor for ever.
		_ = tc.SetDeadline(time.Now().Add(handshakeTimeout))
		if err := tc.Handshake(); err != nil {
			s.log.Info("data connection refused: TLS handshake failed", "peer", c.RemoteAddr().String(), "err", err)
			return
		}
		_ = tc.SetDeadline(time.Time{})
		cs := tc.ConnectionState()
		caller = rpc.CallerOfConn(&cs)
		c = tc
	}
	// An install carries a whole chunk.
	r := dataproto.NewReader(bufio.NewReader(c), uint32(max(dataproto.DefaultMaxPayload, s.store.ChunkSize())))
	w := bufio.NewWriter(c)
	for {
		// An idle connection is closed after dataIdleTimeout (a client's
		// pool redials), and a frame must arrive whole within it: a peer
		// that stalls cannot hold a goroutine and a descriptor for ever.
		_ = c.SetReadDeadline(time.Now().Add(dataIdleTimeout))
		f, err := r.Next()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) && !errors.Is(err, io.EOF) {
				s.log.Debug("data connection ended", "peer", c.RemoteAddr().String(), "err", err)
			}
			return
		}
		s.load.begin(f)
		var reply *dataproto.Frame
		if roles := frameRoles(f.Type); !caller.Is(roles...) {
			reply = &dataproto.Frame{Type: replyType(f.Type), RequestID: f.RequestID, Handle: f.Handle, Group: f.Group,
				Epoch: f.Epoch, Status: dataproto.StatusDenied,
				Payload: []byte(fmt.Sprintf("%v requests are for %v certificates; the caller's certificate is %s", f.Type, roles, caller.Identity))}
		} else if st, err := s.checkToken(caller, f); err != nil {
			reply = &dataproto.Frame{Type: replyType(f.Type), RequestID: f.RequestID, Handle: f.Handle, Group: f.Group,
				Epoch: f.Epoch, Status: st, Payload: []byte(fmt.Sprintf("%v of chunk %d: %v", f.Type, f.Handle, err))}
		} else {
			reply = s.handle(f)
		}
		s.load.end(f, reply)
		s.met.served(f, reply)
		// A peer that stops reading its replies is dropped.
		_ = c.SetWriteDeadline(time.Now().Add(dataWriteTimeout))
		if err := dataproto.WriteFrame(w, reply); err != nil {
			return
		}
		if err := w.Flush(); err != nil {
			return
		}
	}
}

// handshakeTimeout bounds a data connection's TLS handshake.
const handshakeTimeout = 10 * time.Second

// Deadlines of the data port (see serveConn): a connection idle this long
// is closed, and a reply must be taken by the peer within a minute.
const (
	dataIdleTimeout  = 5 * time.Minute
	dataWriteTimeout = time.Minute
)

// frameRoles is who may send a request type: clients read and change
// chunks through the primary; chunk servers also replicate, install and
// compare copies among themselves; metadata nodes list and delete copies
// (garbage collection). Nobody but a chunk server installs a chunk.
func frameRoles(t dataproto.Type) []certs.Role {
	switch t {
	case dataproto.TypeWrite, dataproto.TypeRead, dataproto.TypeAppend, dataproto.TypeTruncate:
		return []certs.Role{certs.RoleClient, certs.RoleAdmin, certs.RoleChunk}
	case dataproto.TypeList, dataproto.TypeDelete:
		return []certs.Role{certs.RoleNode, certs.RoleChunk}
	}
	return []certs.Role{certs.RoleChunk}
}

// checkToken checks the chunk access token of a client's (or an
// admin's) request on a TLS connection: chunk servers among themselves
// are trusted by their certificates' role, and a plaintext cluster
// checks nothing. A missing, expired or unknown-key token is answered
// StatusBadToken (the client asks its ministry for a fresh one), any
// other mismatch StatusDenied.
func (s *Server) checkToken(caller rpc.Caller, f *dataproto.Frame) (dataproto.Status, error) {
	if !caller.Secure || (caller.Role != certs.RoleClient && caller.Role != certs.RoleAdmin) {
		return dataproto.StatusOK, nil
	}
	var need chunktoken.Access
	switch f.Type {
	case dataproto.TypeRead:
		need = chunktoken.Read
		if f.Handle == 0 {
			return dataproto.StatusOK, nil // a readiness probe: no chunk
		}
	case dataproto.TypeWrite, dataproto.TypeAppend, dataproto.TypeTruncate:
		need = chunktoken.Write
	default:
		return dataproto.StatusOK, nil // frameRoles refused the rest
	}
	err := s.tokens.Check(f.Token, f.Handle, need, caller.Identity.String(), time.Now())
	if errors.Is(err, chunktoken.ErrUnknownKey) && s.learnKey(f.Token) {
		err = s.tokens.Check(f.Token, f.Handle, need, caller.Identity.String(), time.Now())
	}
	switch {
	case err == nil:
		return dataproto.StatusOK, nil
	case chunktoken.Renewable(err):
		return dataproto.StatusBadToken, err
	default:
		return dataproto.StatusDenied, err
	}
}

// keyFetchSpacing is the least time between the end of a heartbeat
// learnKey sent and the start of the next: tokens naming made-up keys
// cannot make a server hammer the president.
const keyFetchSpacing = 250 * time.Millisecond

// learnKey sends a heartbeat now, for the president's current token keys,
// when tok names a key newer than any this server knows, and says
// whether it knows the key then. The president mints with a new
// cluster's first key at once, before every chunk server's 2-s heartbeat
// has brought it; a client cannot cure that with a fresh token, which is
// signed with the same key, and a chunk written before the ministry
// records it (a new file's first bytes, an inline file moved to a chunk)
// has no record to ask a fresh token for: the write failed with EACCES.
// Concurrent requests wait for the one heartbeat in flight (at most its
// 2-s timeout) rather than each sending one.
func (s *Server) learnKey(tok []byte) bool {
	id, ok := chunktoken.KeyID(tok)
	if !ok || id <= s.tokens.MaxID() {
		return false // malformed, or an old key that was dropped
	}
	s.keyFetch.mu.Lock()
	defer s.keyFetch.mu.Unlock()
	if s.tokens.Knows(id) {
		return true // a heartbeat brought it while this one waited
	}
	if time.Since(s.keyFetch.last) < keyFetchSpacing {
		return false
	}
	s.heartbeat()
	s.keyFetch.last = time.Now()
	return s.tokens.Knows(id)
}

// learnGroup sends a heartbeat now, for the president's current replica
// groups, when a request names a group this server does not know, or at
// a newer epoch than it knows, and returns the group as known then. A
// group the president has just formed or changed reached its members
// only with their next 2-s heartbeat, and every request for it was
// refused until then: a fresh cluster's first file write took 1.4-2.2 s
// (the client's retries backing off). Spaced as learnKey's heartbeats
// (a request naming a made-up group cannot make the server hammer the
// president); concurrent requests wait for the one in flight.
func (s *Server) learnGroup(id, epoch uint64) (*wire.ReplicaGroup, map[uint64]string) {
	s.groupFetch.mu.Lock()
	defer s.groupFetch.mu.Unlock()
	if g, addrs := s.groups.get(id); g != nil && g.GetEpoch() >= epoch {
		return g, addrs // a heartbeat brought it while this one waited
	}
	if time.Since(s.groupFetch.last) >= keyFetchSpacing {
		s.heartbeat()
		s.groupFetch.last = time.Now()
	}
	return s.groups.get(id)
}

func (s *Server) handle(f *dataproto.Frame) *dataproto.Frame {
	received := time.Now()
	reply := &dataproto.Frame{Type: replyType(f.Type), RequestID: f.RequestID, Handle: f.Handle, Group: f.Group,
		Epoch: f.Epoch, Offset: f.Offset}
	fail := func(st dataproto.Status, format string, args ...any) *dataproto.Frame {
		reply.Status, reply.Payload = st, []byte(fmt.Sprintf(format, args...))
		return reply
	}
	s.mu.Lock()
	since := time.Since(s.lastBeat)
	s.mu.Unlock()
	if since > leaseTimeout {
		return fail(dataproto.StatusStaleEpoch, "chunk server %d has not reached the president for %v: it may have been replaced, so it serves nothing until a heartbeat succeeds",
			s.id, since.Truncate(time.Second))
	}
	switch f.Type {
	case dataproto.TypeList:
		return s.list(f, reply)
	case dataproto.TypeDelete:
		return s.deleteChunk(f, reply)
	}
	// A chunk's handle names its group (dataproto.MakeHandle); a request
	// naming another group is malformed. Handle 0 is never allocated (the
	// primary's readiness probe reads it).
	if f.Handle != 0 && dataproto.HandleGroup(f.Handle) != f.Group {
		return fail(dataproto.StatusInvalid, "chunk %d belongs to replica group %d, the request names group %d",
			f.Handle, dataproto.HandleGroup(f.Handle), f.Group)
	}
	// Every request names the replica group and the epoch the requester
	// believes in; a stale one is refused so it cannot act on a group that
	// has changed (members, primary).
	g, addrs := s.groups.get(f.Group)
	if g == nil || g.GetEpoch() < f.Epoch {
		g, addrs = s.learnGroup(f.Group, f.Epoch)
	}
	if g == nil {
		return fail(dataproto.StatusStaleEpoch, "replica group %d is not known to chunk server %d (yet)", f.Group, s.id)
	}
	if g.GetEpoch() != f.Epoch {
		return fail(dataproto.StatusStaleEpoch, "replica group %d is at epoch %d, request names %d", f.Group, g.GetEpoch(), f.Epoch)
	}
	h := chunkstore.Handle(f.Handle)
	switch f.Type {
	case dataproto.TypeWrite, dataproto.TypeAppend, dataproto.TypeTruncate:
		if g.GetPrimary() != s.id {
			return fail(dataproto.StatusNotPrimary, "chunk server %d is not the primary of group %d; send to %d at %s",
				s.id, f.Group, g.GetPrimary(), addrs[g.GetPrimary()])
		}
		if err := s.groupReady(g, addrs); err != nil {
			// Retryable: members learn a new group within a heartbeat.
			return fail(dataproto.StatusStaleEpoch, "replica group %d is not ready: %v", f.Group, err)
		}
		return s.order(f, g, addrs, reply, received)
	case dataproto.TypeReplicate:
		return s.replicate(f, h, reply)
	case dataproto.TypeInstall:
		return s.install(f, h, reply)
	case dataproto.TypeStat:
		info, err := s.store.Stat(h)
		if err != nil {
			reply.Status, reply.Payload = status(err)
			return reply
		}
		reply.Version, reply.Offset = info.Version, info.Length
		return reply
	case dataproto.TypeRead:
		if slices.Contains(g.GetSyncing(), s.id) {
			return fail(dataproto.StatusStaleVersion, "chunk server %d is still being filled as a new member of group %d; read another member", s.id, f.Group)
		}
		if len(f.Payload) != 4 {
			return fail(dataproto.StatusInvalid, "read: payload must be the 4-byte length wanted")
		}
		n := binary.BigEndian.Uint32(f.Payload)
		if n > maxReadLength {
			return fail(dataproto.StatusInvalid, "read: more than 8 MiB asked at once")
		}
		// The version the bytes were read at (fetchChunk and repair
		// check it), not one a mutation may have set since.
		data, info, err := s.store.ReadVersion(h, f.Offset, int(n))
		if err != nil {
			reply.Status, reply.Payload = status(err)
			var ce *chunkstore.CorruptError
			if errors.As(err, &ce) {
				s.repairLater(g.GetId(), h)
			}
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
// primary's forward failed) refuses the mutation with StaleVersion, and
// the primary then installs its whole copy of the chunk on it (install)
// instead of letting the member apply later mutations over a hole.
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
		// primary's connection broke before the reply): within an epoch
		// versions are unique per chunk, so it is the same mutation.
		reply.Status, reply.Version = dataproto.StatusOK, cur
		return reply
	}
	if f.Version != cur+1 {
		reply.Status, reply.Version = dataproto.StatusStaleVersion, cur
		reply.Payload = []byte(fmt.Sprintf("chunk %d is at version %d on server %d, mutation is version %d: a mutation was missed",
			f.Handle, cur, s.id, f.Version))
		return reply
	}
	var err error
	switch f.Status {
	case dataproto.MutationWrite:
		err = s.store.Write(h, f.Offset, f.Payload, f.Version)
	case mutationAppend:
		if len(f.Payload) < 8 {
			return failf(reply, dataproto.StatusInvalid, "replicated append without its request id")
		}
		if err = s.store.Write(h, f.Offset, f.Payload[8:], f.Version); err == nil {
			s.appends.note(f.Handle, binary.BigEndian.Uint64(f.Payload), f.Offset)
		}
	case dataproto.MutationPad:
		err = s.store.Pad(h, f.Version)
	case dataproto.MutationTruncate:
		err = s.store.Truncate(h, f.Offset, f.Version)
	default:
		return failf(reply, dataproto.StatusInvalid, "unknown mutation kind %d", f.Status)
	}
	reply.Status, reply.Payload = status(err)
	reply.Version = f.Version
	return reply
}

// mutationAppend is a replicated record append: the payload is the
// appender's request id (8 bytes) then the record, written at Offset;
// members remember the id so a new primary still answers a retry with
// the first offset.
const mutationAppend dataproto.Mutation = 3

func failf(reply *dataproto.Frame, st dataproto.Status, format string, args ...any) *dataproto.Frame {
	reply.Status, reply.Payload = st, []byte(fmt.Sprintf(format, args...))
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
		// Chunk handle 0 (never allocated) answers NotFound from a member
		// that knows the group, StaleEpoch from one that does not.
		rf, err := s.peers.Call(addrs[m], &dataproto.Frame{Type: dataproto.TypeStat, Group: g.GetId(), Epoch: g.GetEpoch()})
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

// order is the primary's part of a mutation: it fixes the new version
// (and, for an append, the offset), applies the mutation locally,
// forwards it to every other member and acknowledges only when every
// full member has it durably. Mutations of one chunk are ordered by a
// per-chunk lock so versions and offsets are the same on every replica.
func (s *Server) order(f *dataproto.Frame, g *wire.ReplicaGroup, addrs map[uint64]string, reply *dataproto.Frame, received time.Time) *dataproto.Frame {
	h := chunkstore.Handle(f.Handle)
	unlock := s.locks.lock(f.Handle)
	defer unlock()
	// The members must agree on the chunk before it changes: after a
	// failed mutation or a change of epoch (a new primary, a member
	// replaced) they may not.
	if err := s.reconcile(g, addrs, f.Handle); err != nil {
		return failf(reply, dataproto.StatusInternal, "chunk %d: bring the members of group %d into agreement: %v", f.Handle, g.GetId(), err)
	}
	if waited := time.Since(received); waited > maxOrderDelay {
		// The client gave up on this request long ago and may have sent
		// it again, and written after it: applying it now could put old
		// bytes over newer acknowledged ones.
		return failf(reply, dataproto.StatusInternal, "chunk %d: the request waited %v to be ordered; not applied (the client has retried it)",
			f.Handle, waited.Truncate(time.Millisecond))
	}
	if f.Type == dataproto.TypeAppend && f.Version != 0 {
		if off, ok := s.appends.lookup(f.Handle, f.Version); ok {
			// A retry of an append that was applied: the first offset,
			// never a second copy.
			info, _ := s.store.Stat(h)
			reply.Status, reply.Version, reply.Offset = dataproto.StatusOK, info.Version, off
			return reply
		}
	}
	v := uint64(1)
	cur := int64(0)
	if info, err := s.store.Stat(h); err == nil {
		v, cur = info.Version+1, info.Length
	} else if !errors.Is(err, chunkstore.ErrNotFound) {
		reply.Status, reply.Payload = status(err)
		return reply
	}
	fw := &dataproto.Frame{Type: dataproto.TypeReplicate, Handle: f.Handle, Group: f.Group, Epoch: f.Epoch, Version: v, Offset: f.Offset, Payload: f.Payload}
	full := false
	var apply func() error
	switch f.Type {
	case dataproto.TypeWrite:
		fw.Status = dataproto.MutationWrite
		apply = func() error { return s.store.Write(h, f.Offset, f.Payload, v) }
	case dataproto.TypeTruncate:
		fw.Status = dataproto.MutationTruncate
		fw.Payload = nil
		apply = func() error { return s.store.Truncate(h, f.Offset, v) }
	case dataproto.TypeAppend:
		if int64(len(f.Payload)) > s.store.ChunkSize()/4 {
			return failf(reply, dataproto.StatusInvalid, "record of %d bytes is larger than a quarter chunk (%d bytes)", len(f.Payload), s.store.ChunkSize()/4)
		}
		if int64(len(f.Payload)) > s.store.ChunkSize()-cur {
			// It does not fit: pad the chunk on every member so they all
			// agree it is full, and send the appender to the next chunk.
			full = true
			fw.Status, fw.Payload, fw.Offset = dataproto.MutationPad, nil, 0
			apply = func() error { return s.store.Pad(h, v) }
			break
		}
		fw.Offset = cur
		fw.Status = mutationAppend
		fw.Payload = binary.BigEndian.AppendUint64(make([]byte, 0, 8+len(f.Payload)), f.Version)
		fw.Payload = append(fw.Payload, f.Payload...)
		apply = func() error {
			err := s.store.Write(h, cur, f.Payload, v)
			if err == nil && f.Version != 0 {
				s.appends.note(f.Handle, f.Version, cur)
			}
			return err
		}
	}
	// The local write and the forwards run at the same time (one disk
	// write of latency instead of two). If the local one fails while
	// members succeed, the members are ahead: not acknowledged, and the
	// next mutation's reconcile takes their copy.
	localDone := make(chan error, 1)
	go func() { localDone <- apply() }()
	var localErr error
	var once sync.Once
	waitLocal := func() error {
		once.Do(func() { localErr = <-localDone })
		return localErr
	}
	ferr := s.forward(g, addrs, fw, waitLocal)
	if err := waitLocal(); err != nil {
		s.reconcileLater(f.Group, f.Handle)
		reply.Status, reply.Payload = status(err)
		return reply
	}
	if ferr != nil {
		// Not acknowledged. The members may now differ: reconcile them
		// in the background (and before the chunk's next mutation).
		s.reconcileLater(f.Group, f.Handle)
		st := dataproto.StatusInternal
		if errors.Is(ferr, errMemberNoSpace) {
			st = dataproto.StatusNoSpace // not worth retrying: a disk is full
		}
		return failf(reply, st, "%v", ferr)
	}
	if full {
		return failf(reply, dataproto.StatusChunkFull, "chunk %d is full: append to the next chunk", f.Handle)
	}
	reply.Status, reply.Version, reply.Offset = dataproto.StatusOK, v, fw.Offset
	return reply
}

// errMemberNoSpace is a member's full disk.
var errMemberNoSpace = errors.New("no space left on the member's disk")

// forward sends an ordered mutation to every other member in parallel. A
// full member that missed an earlier mutation gets the primary's whole
// copy instead, once the local mutation is done (waitLocal). Every full
// member must succeed; syncing members are best effort (their copy pass
// notices a miss).
func (s *Server) forward(g *wire.ReplicaGroup, addrs map[uint64]string, fw *dataproto.Frame, waitLocal func() error) error {
	others := slices.DeleteFunc(slices.Clone(g.GetMembers()), func(m uint64) bool { return m == s.id })
	fw.SealPayload() // one CRC for every copy sent
	errs := make([]error, len(others))
	var wg sync.WaitGroup
	for i, m := range others {
		wg.Go(func() {
			rf, err := s.peers.Call(addrs[m], fw)
			if err == nil && (rf.Status == dataproto.StatusStaleVersion || rf.Status == dataproto.StatusCorrupt) {
				// The member missed a mutation, or its copy is damaged:
				// send our whole copy, replacing the version it reported.
				expect := rf.Version
				if rf.Status == dataproto.StatusCorrupt {
					expect = anyVersion
				}
				if err = waitLocal(); err == nil {
					err = s.installOn(g, addrs, m, fw.Handle, expect)
				}
				rf = nil
			}
			switch {
			case err != nil:
				errs[i] = fmt.Errorf("replica %d: %w", m, err)
			case rf != nil && rf.Status == dataproto.StatusNoSpace:
				errs[i] = fmt.Errorf("replica %d: %w: %s", m, errMemberNoSpace, rf.Payload)
			case rf != nil && rf.Status != dataproto.StatusOK:
				errs[i] = fmt.Errorf("replica %d: status %d: %s", m, rf.Status, rf.Payload)
			}
			// A syncing member's miss does not fail the write (its copy
			// pass notices) — unless the group changed under us
			// (StaleEpoch: the member may be full already) or the member
			// is being reported full right now.
			staleEpoch := err == nil && rf != nil && rf.Status == dataproto.StatusStaleEpoch
			if errs[i] != nil && !staleEpoch && slices.Contains(g.GetSyncing(), m) && s.syncMissed(g.GetId(), m, fw.Handle) {
				errs[i] = nil
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

func replyType(t dataproto.Type) dataproto.Type {
	switch t {
	case dataproto.TypeWrite:
		return dataproto.TypeWriteReply
	case dataproto.TypeAppend:
		return dataproto.TypeAppendReply
	case dataproto.TypeReplicate:
		return dataproto.TypeReplicateReply
	case dataproto.TypeTruncate:
		return dataproto.TypeTruncateReply
	case dataproto.TypeStat:
		return dataproto.TypeStatReply
	case dataproto.TypeInstall:
		return dataproto.TypeInstallReply
	case dataproto.TypeList:
		return dataproto.TypeListReply
	case dataproto.TypeDelete:
		return dataproto.TypeDeleteReply
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
