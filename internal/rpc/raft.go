package rpc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/multiraft"
	"github.com/govfs/govfs/internal/wire"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// RaftTransport implements multiraft.Transport over gRPC and serves the
// receiving side (wire.RaftServer).
type RaftTransport struct {
	self      ids.NodeID
	addrs     map[ids.NodeID]string
	clusterID func() string
	pool      *Pool
	log       *slog.Logger

	mu    sync.Mutex
	host  raftHost
	peers map[ids.NodeID]*peer
	// certNames: the certificate each node speaks with, from the map
	// (Member.cert_name); traffic from another certificate is refused.
	certNames map[ids.NodeID]string

	stop chan struct{}
	// inbound is closed by StopInbound: the peers' streams into this
	// node end, so that the server's graceful stop need not wait for
	// them.
	inbound     chan struct{}
	inboundOnce sync.Once
	// ctx is cancelled by Close so that in-flight sends and snapshot
	// streams end at shutdown instead of running out their deadlines.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// raftHost is what the transport needs of a multiraft.Host (a test
// gives it a recorder).
type raftHost interface {
	Receive(msgs []multiraft.GroupMessage)
	ReceiveSnapshot(g ids.GroupID, msg *pb.Message, kvs func(add func(k, v []byte) error) error) error
	ReportSnapshot(g ids.GroupID, to ids.NodeID, ok bool)
	ReportUnreachable(to ids.NodeID)
}

type peer struct {
	q chan []multiraft.GroupMessage
}

// NewRaftTransport returns a transport for node self; clusterID reports
// the cluster id once known ("" before); sec secures its connections.
func NewRaftTransport(self ids.NodeID, addrs map[ids.NodeID]string, clusterID func() string, sec *Security, log *slog.Logger) *RaftTransport {
	ctx, cancel := context.WithCancel(context.Background())
	return &RaftTransport{self: self, addrs: addrs, clusterID: clusterID, pool: NewPool(sec), log: log,
		peers: map[ids.NodeID]*peer{}, stop: make(chan struct{}), inbound: make(chan struct{}), ctx: ctx, cancel: cancel}
}

// Addr returns the address of node id ("" when it is not a member).
func (t *RaftTransport) Addr(id ids.NodeID) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.addrs[id]
}

// SetAddrs replaces the address book (nodes join, and addresses come
// from the cluster map).
func (t *RaftTransport) SetAddrs(addrs map[ids.NodeID]string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.addrs = addrs
}

// SetHost attaches the host that receives messages.
func (t *RaftTransport) SetHost(h *multiraft.Host) {
	if h == nil {
		t.setHost(nil) // not an interface holding a nil *Host
		return
	}
	t.setHost(h)
}

func (t *RaftTransport) setHost(h raftHost) {
	t.mu.Lock()
	t.host = h
	t.mu.Unlock()
}

func (t *RaftTransport) getHost() raftHost {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.host
}

// StopInbound ends the streams peers send on into this node (they open
// new ones when it serves again): a node stopping calls it before the
// gRPC server's graceful stop, which would otherwise wait for them.
func (t *RaftTransport) StopInbound() {
	t.inboundOnce.Do(func() { close(t.inbound) })
}

// Close stops the senders and waits for them.
func (t *RaftTransport) Close() {
	t.StopInbound()
	t.mu.Lock()
	close(t.stop)
	t.mu.Unlock()
	t.cancel()
	t.wg.Wait()
	t.pool.Close()
}

// Send implements multiraft.Transport: queue for the peer's sender, drop
// when its queue is full (raft retransmits).
func (t *RaftTransport) Send(to ids.NodeID, msgs []multiraft.GroupMessage) {
	t.mu.Lock()
	p, ok := t.peers[to]
	if !ok {
		select {
		case <-t.stop:
			t.mu.Unlock()
			return
		default:
		}
		p = &peer{q: make(chan []multiraft.GroupMessage, 1024)}
		t.peers[to] = p
		t.wg.Add(1)
		go t.sender(to, p)
	}
	t.mu.Unlock()
	select {
	case p.q <- msgs:
	default:
	}
}

// maxBatchBytes bounds the entry bytes coalesced into one RaftBatch.
const maxBatchBytes = 4 << 20

func msgBytes(msgs []multiraft.GroupMessage) int {
	n := 0
	for _, gm := range msgs {
		for _, e := range gm.Msg.GetEntries() {
			n += len(e.GetData()) + 32
		}
	}
	return n
}

// sender drains a peer's queue, coalescing everything queued into one
// RaftBatch, and sends the batches on one stream to the peer (Stream).
//
// Why a stream: a unary Send per batch cost every round a new HTTP/2
// stream (headers both ways, a handler goroutine) and an answer, and the
// sender waited for that answer before the next batch. Profiles of a
// clerk during 4 KiB writes put gRPC's writes at a fifth of its CPU.
func (t *RaftTransport) sender(to ids.NodeID, p *peer) {
	defer t.wg.Done()
	var out *outStream
	defer func() { out.close() }()
	// unaryUntil: the peer answered Stream with UNIMPLEMENTED (an older
	// node); batches go by Send until then, when Stream is tried again.
	var unaryUntil time.Time
	for {
		var batch []multiraft.GroupMessage
		select {
		case <-t.stop:
			return
		case m := <-p.q:
			batch = append(batch, m...)
		}
		size := msgBytes(batch)
	drain:
		// NB: bounded by count and bytes, well under MaxMessageSize: one
		// oversized batch would fail whole, again and again.
		for len(batch) < 4096 && size < maxBatchBytes {
			select {
			case m := <-p.q:
				batch = append(batch, m...)
				size += msgBytes(m)
			default:
				break drain
			}
		}
		addr := t.Addr(to)
		if addr == "" {
			continue // not known yet: raft sends again
		}
		rb, err := t.batchOf(to, batch)
		if err == nil {
			if time.Now().Before(unaryUntil) {
				err = t.sendBatch(to, addr, rb)
			} else {
				if out != nil && out.addr != addr {
					out.close()
					out = nil
				}
				if out == nil {
					out, err = t.openStream(to, addr)
				}
				if err == nil {
					err = out.send(to, rb)
				}
				if err != nil {
					out.close()
					out = nil
				}
				if status.Code(err) == codes.Unimplemented {
					unaryUntil = time.Now().Add(time.Minute)
					err = t.sendBatch(to, addr, rb)
				}
			}
		}
		if err != nil {
			t.log.Debug("raft send failed", "to", uint64(to), "err", err)
			if h := t.getHost(); h != nil {
				h.ReportUnreachable(to)
			}
		}
	}
}

// streamStall bounds how long a stream may go without progress before
// it is given up and the peer reported unreachable, as a unary Send's
// deadline did: opening it, a batch waiting to go out (flow control
// full: the peer reads nothing), or the oldest batch sent and not yet
// answered (a paused or cut-off peer whose socket still takes bytes).
// The last keeps a peer from being handed more than streamStall's worth
// of messages that would reach it late, all at once, on its return.
const streamStall = 2 * time.Second

// outStream is a sender's stream to one peer.
type outStream struct {
	addr   string
	stream wire.Raft_StreamClient
	cancel context.CancelFunc
	// watch cancels the stream when opening it or a Send blocks past
	// streamStall.
	watch *time.Timer
	// done is closed when readAcks returns.
	done chan struct{}

	mu sync.Mutex
	// sentAt: when each batch not answered yet was sent, oldest first.
	sentAt []time.Time
	// err: why the stream ended, from readAcks (a refusal, the peer's
	// status, a broken connection).
	err error
}

func (t *RaftTransport) openStream(to ids.NodeID, addr string) (*outStream, error) {
	cc, err := t.pool.Get(addr)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(t.ctx)
	o := &outStream{addr: addr, cancel: cancel, done: make(chan struct{}), watch: time.AfterFunc(streamStall, cancel)}
	o.stream, err = wire.NewRaftClient(cc).Stream(ctx)
	if !o.watch.Stop() {
		cancel()
		return nil, fmt.Errorf("raft stream to node %v: not open after %v", to, streamStall)
	}
	if err != nil {
		cancel()
		return nil, err
	}
	go o.readAcks(to)
	return o, nil
}

// readAcks takes the peer's answers: an OK one answers the batches up to
// the count it names, in the order sent; anything else ends the stream,
// with the reason kept for the sender.
func (o *outStream) readAcks(to ids.NodeID) {
	defer close(o.done)
	var answered uint64
	for {
		ack, err := o.stream.Recv()
		if err == nil && ack.GetStatus().GetCode() != wire.Code_OK {
			err = fmt.Errorf("peer %v refused: %s", to, ack.GetStatus().GetMessage())
		}
		o.mu.Lock()
		if err != nil {
			if o.err == nil {
				o.err = err
			}
			o.mu.Unlock()
			o.cancel()
			return
		}
		if n := ack.GetDelivered(); n > answered {
			o.sentAt = o.sentAt[min(uint64(len(o.sentAt)), n-answered):]
			answered = n
		}
		o.mu.Unlock()
	}
}

// send puts rb on the stream. An error means the stream is over.
func (o *outStream) send(to ids.NodeID, rb *wire.RaftBatch) error {
	now := time.Now()
	o.mu.Lock()
	err := o.err
	stale := len(o.sentAt) > 0 && now.Sub(o.sentAt[0]) > streamStall
	o.sentAt = append(o.sentAt, now)
	o.mu.Unlock()
	if err != nil {
		return err
	}
	if stale {
		return fmt.Errorf("raft stream to node %v: a batch unanswered for over %v", to, streamStall)
	}
	o.watch.Reset(streamStall)
	err = o.stream.Send(rb)
	if !o.watch.Stop() {
		return fmt.Errorf("raft stream to node %v: nothing could be sent for %v", to, streamStall)
	}
	if err == nil {
		return nil
	}
	// Send reports io.EOF when the stream ended; its reason comes to
	// readAcks, which returns at once then.
	select {
	case <-o.done:
	case <-time.After(streamStall):
	}
	o.mu.Lock()
	reason := o.err
	o.mu.Unlock()
	if reason != nil && !errors.Is(reason, io.EOF) {
		return reason
	}
	return fmt.Errorf("raft stream to node %v ended: %w", to, err)
}

// close ends the stream (nil: nothing to do).
func (o *outStream) close() {
	if o == nil {
		return
	}
	o.watch.Stop()
	o.cancel()
}

// batchOf marshals a sender's messages into one RaftBatch.
func (t *RaftTransport) batchOf(to ids.NodeID, batch []multiraft.GroupMessage) (*wire.RaftBatch, error) {
	rb := &wire.RaftBatch{ClusterId: t.clusterID(), From: uint64(t.self), To: uint64(to), Msgs: make([]*wire.RaftMessage, 0, len(batch))}
	for _, gm := range batch {
		b, err := proto.Marshal(gm.Msg)
		if err != nil {
			return nil, err
		}
		rb.Msgs = append(rb.Msgs, &wire.RaftMessage{Group: uint64(gm.Group), Msg: b})
	}
	return rb, nil
}

// sendBatch sends one batch with a unary Send and waits for its answer.
func (t *RaftTransport) sendBatch(to ids.NodeID, addr string, rb *wire.RaftBatch) error {
	cc, err := t.pool.Get(addr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(t.ctx, 2*time.Second)
	defer cancel()
	ack, err := wire.NewRaftClient(cc).Send(ctx, rb)
	if err != nil {
		return err
	}
	if ack.GetStatus().GetCode() != wire.Code_OK {
		return fmt.Errorf("peer %v refused: %s", to, ack.GetStatus().GetMessage())
	}
	return nil
}

// SendSnapshot implements multiraft.Transport: stream the group's state
// range to the peer in chunks, then report the outcome.
func (t *RaftTransport) SendSnapshot(to ids.NodeID, g ids.GroupID, msg *pb.Message, src multiraft.SnapshotSource) {
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		err := t.streamSnapshot(to, g, msg, src)
		src.Release()
		if err != nil {
			t.log.Warn("snapshot send failed", "to", uint64(to), "group", uint64(g), "err", err)
		}
		if h := t.getHost(); h != nil {
			h.ReportSnapshot(g, to, err == nil)
		}
	}()
}

func (t *RaftTransport) streamSnapshot(to ids.NodeID, g ids.GroupID, msg *pb.Message, src multiraft.SnapshotSource) error {
	cc, err := t.pool.Get(t.Addr(to))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(t.ctx, 10*time.Minute)
	defer cancel()
	stream, err := wire.NewRaftClient(cc).SendSnapshot(ctx)
	if err != nil {
		return err
	}
	mb, err := proto.Marshal(msg)
	if err != nil {
		return err
	}
	hdr := &wire.SnapshotChunk{ClusterId: t.clusterID(), From: uint64(t.self), To: uint64(to), Group: uint64(g), Msg: mb}
	if err := stream.Send(hdr); err != nil {
		return err
	}
	chunk := &wire.SnapshotChunk{}
	size := 0
	var sendErr error
	err = src.Scan(func(k, v []byte) bool {
		chunk.Kvs = append(chunk.Kvs, &wire.KV{Key: append([]byte(nil), k...), Value: append([]byte(nil), v...)})
		size += len(k) + len(v)
		if size >= 1<<20 {
			if sendErr = stream.Send(chunk); sendErr != nil {
				return false
			}
			chunk, size = &wire.SnapshotChunk{}, 0
		}
		return true
	})
	if err != nil {
		return err
	}
	if sendErr != nil {
		return sendErr
	}
	chunk.Done = true
	if err := stream.Send(chunk); err != nil {
		return err
	}
	ack, err := stream.CloseAndRecv()
	if err != nil {
		return err
	}
	if ack.GetStatus().GetCode() != wire.Code_OK {
		return fmt.Errorf("peer refused snapshot: %s", ack.GetStatus().GetMessage())
	}
	return nil
}

// SetCertNames replaces the certificate names nodes are bound to.
func (t *RaftTransport) SetCertNames(names map[ids.NodeID]string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.certNames = names
}

// CertName is the certificate name node id is bound to ("" when none is
// recorded yet).
func (t *RaftTransport) CertName(id ids.NodeID) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.certNames[id]
}

// checkCert refuses raft traffic that claims to be node from's but comes
// from another certificate than the one node from is bound to (the role
// itself is checked by Authorize).
func (t *RaftTransport) checkCert(c Caller, from uint64) error {
	if c.Secure {
		if want := t.CertName(ids.NodeID(from)); want != "" && want != c.Name {
			return status.Errorf(codes.PermissionDenied, "raft traffic from node %d must come from certificate node/%s; the caller's certificate is %s", from, want, c.Identity)
		}
	}
	return nil
}

func (t *RaftTransport) checkPeer(cluster string, from, to uint64) *wire.Status {
	if t.Addr(ids.NodeID(from)) == "" {
		return &wire.Status{Code: wire.Code_INVALID, Message: fmt.Sprintf("node %d is not a member of this cluster", from)}
	}
	if to != uint64(t.self) {
		return &wire.Status{Code: wire.Code_INVALID, Message: fmt.Sprintf("message for node %d reached node %d: check --peers addresses", to, uint64(t.self))}
	}
	if mine := t.clusterID(); mine != "" && cluster != "" && mine != cluster {
		return &wire.Status{Code: wire.Code_WRONG_CLUSTER, Message: fmt.Sprintf("node %d belongs to cluster %s, sender to %s", uint64(t.self), mine, cluster)}
	}
	return nil
}

// RaftService is the receiving side of a RaftTransport (wire.RaftServer).
type RaftService struct {
	wire.UnimplementedRaftServer
	t *RaftTransport
}

// Service returns the gRPC service that delivers inbound raft traffic.
func (t *RaftTransport) Service() *RaftService { return &RaftService{t: t} }

// Send implements wire.RaftServer.
func (s *RaftService) Send(ctx context.Context, b *wire.RaftBatch) (*wire.RaftAck, error) {
	if err := s.t.checkCert(CallerOf(ctx), b.GetFrom()); err != nil {
		return nil, err
	}
	return &wire.RaftAck{Status: s.t.deliver(b)}, nil
}

// Stream implements wire.RaftServer: each batch is checked and delivered
// as Send does, and answered (OK, or why it was refused; a refusal ends
// the stream).
func (s *RaftService) Stream(stream wire.Raft_StreamServer) error {
	t := s.t
	caller := CallerOf(stream.Context())
	// Recv runs beside the loop so that the stream ends when the node
	// stops (StopInbound), not when the peer next sends.
	batches := make(chan *wire.RaftBatch)
	recvErr := make(chan error, 1)
	go func() {
		for {
			b, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case batches <- b:
			case <-stream.Context().Done():
				return
			}
		}
	}()
	// Answers go at most every ackEvery, and within ackEvery of a batch:
	// one per batch was a write per batch on both sides (minister CPU per
	// mkdir 0.079 / 0.072 ms with them, 0.075 / 0.070 without; 0.075
	// with no answers at all), and the sender only needs them to tell a
	// live peer from one that stopped reading (streamStall).
	var delivered uint64
	var lastAck time.Time
	pending := false
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	ack := func() error {
		lastAck, pending = time.Now(), false
		return stream.Send(&wire.RaftAck{Status: &wire.Status{}, Delivered: delivered})
	}
	for {
		select {
		case <-t.inbound:
			return status.Error(codes.Unavailable, "node stopping")
		case err := <-recvErr:
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		case <-timer.C:
			if pending {
				if err := ack(); err != nil {
					return err
				}
			}
		case b := <-batches:
			if err := t.checkCert(caller, b.GetFrom()); err != nil {
				return err
			}
			if st := t.deliver(b); st.GetCode() != wire.Code_OK {
				return stream.Send(&wire.RaftAck{Status: st, Delivered: delivered})
			}
			delivered++
			if since := time.Since(lastAck); since >= ackEvery {
				if err := ack(); err != nil {
					return err
				}
			} else if !pending {
				pending = true
				timer.Reset(ackEvery - since)
			}
		}
	}
}

// ackEvery is how often a raft stream's receiver answers at most, and
// how long a delivered batch may wait for its answer.
const ackEvery = 20 * time.Millisecond

// deliver checks a batch and hands its messages to the host: an OK
// status, or why the batch was refused (nothing of it delivered).
func (t *RaftTransport) deliver(b *wire.RaftBatch) *wire.Status {
	if st := t.checkPeer(b.GetClusterId(), b.GetFrom(), b.GetTo()); st != nil {
		return st
	}
	h := t.getHost()
	if h == nil {
		return &wire.Status{Code: wire.Code_UNAVAILABLE, Message: "starting"}
	}
	msgs := make([]multiraft.GroupMessage, 0, len(b.GetMsgs()))
	for _, rm := range b.GetMsgs() {
		m := &pb.Message{}
		if err := proto.Unmarshal(rm.GetMsg(), m); err != nil {
			return &wire.Status{Code: wire.Code_INVALID, Message: "undecodable raft message: " + err.Error()}
		}
		if m.GetFrom() != b.GetFrom() || m.GetTo() != b.GetTo() {
			return &wire.Status{Code: wire.Code_INVALID, Message: "raft message endpoints do not match the batch"}
		}
		switch m.GetType() {
		case pb.MsgSnap:
			// Snapshot data only arrives through SendSnapshot; a bare
			// MsgSnap would make raft install state nobody sent.
			return &wire.Status{Code: wire.Code_INVALID, Message: "MsgSnap must be streamed with SendSnapshot"}
		case pb.MsgProp, pb.MsgHup, pb.MsgBeat, pb.MsgUnreachable, pb.MsgSnapStatus, pb.MsgCheckQuorum:
			return &wire.Status{Code: wire.Code_INVALID, Message: fmt.Sprintf("raft message type %v is local to a node", m.GetType())}
		}
		msgs = append(msgs, multiraft.GroupMessage{Group: ids.GroupID(rm.GetGroup()), Msg: m})
	}
	h.Receive(msgs)
	return &wire.Status{}
}

// SendSnapshot implements wire.RaftServer.
func (s *RaftService) SendSnapshot(stream wire.Raft_SendSnapshotServer) error {
	t := s.t
	hdr, err := stream.Recv()
	if err != nil {
		return err
	}
	if err := t.checkCert(CallerOf(stream.Context()), hdr.GetFrom()); err != nil {
		return err
	}
	if st := t.checkPeer(hdr.GetClusterId(), hdr.GetFrom(), hdr.GetTo()); st != nil {
		return stream.SendAndClose(&wire.RaftAck{Status: st})
	}
	m := &pb.Message{}
	if err := proto.Unmarshal(hdr.GetMsg(), m); err != nil || m.GetType() != pb.MsgSnap {
		return stream.SendAndClose(&wire.RaftAck{Status: &wire.Status{Code: wire.Code_INVALID, Message: "snapshot header is not a MsgSnap"}})
	}
	if m.GetFrom() != hdr.GetFrom() || m.GetTo() != hdr.GetTo() {
		return stream.SendAndClose(&wire.RaftAck{Status: &wire.Status{Code: wire.Code_INVALID, Message: "snapshot endpoints do not match its header"}})
	}
	h := t.getHost()
	if h == nil {
		return stream.SendAndClose(&wire.RaftAck{Status: &wire.Status{Code: wire.Code_UNAVAILABLE, Message: "starting"}})
	}
	// Each chunk is staged on disk as it arrives: the receiver holds one
	// chunk, whatever the group's size.
	errEarlyEnd := errors.New("snapshot stream ended early")
	err = h.ReceiveSnapshot(ids.GroupID(hdr.GetGroup()), m, func(add func(k, v []byte) error) error {
		for {
			c, err := stream.Recv()
			if err == io.EOF {
				return errEarlyEnd
			}
			if err != nil {
				return err
			}
			for _, p := range c.GetKvs() {
				if err := add(p.GetKey(), p.GetValue()); err != nil {
					return err
				}
			}
			if c.GetDone() {
				return nil
			}
		}
	})
	if errors.Is(err, errEarlyEnd) {
		return stream.SendAndClose(&wire.RaftAck{Status: &wire.Status{Code: wire.Code_INVALID, Message: errEarlyEnd.Error()}})
	}
	if err != nil {
		return stream.SendAndClose(&wire.RaftAck{Status: &wire.Status{Code: wire.Code_INTERNAL, Message: err.Error()}})
	}
	return stream.SendAndClose(&wire.RaftAck{Status: &wire.Status{}})
}
