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
	host  *multiraft.Host
	peers map[ids.NodeID]*peer
	// certNames: the certificate each node speaks with, from the map
	// (Member.cert_name); traffic from another certificate is refused.
	certNames map[ids.NodeID]string

	stop chan struct{}
	// ctx is cancelled by Close so that in-flight sends and snapshot
	// streams end at shutdown instead of running out their deadlines.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

type peer struct {
	q chan []multiraft.GroupMessage
}

// NewRaftTransport returns a transport for node self; clusterID reports
// the cluster id once known ("" before); sec secures its connections.
func NewRaftTransport(self ids.NodeID, addrs map[ids.NodeID]string, clusterID func() string, sec *Security, log *slog.Logger) *RaftTransport {
	ctx, cancel := context.WithCancel(context.Background())
	return &RaftTransport{self: self, addrs: addrs, clusterID: clusterID, pool: NewPool(sec), log: log,
		peers: map[ids.NodeID]*peer{}, stop: make(chan struct{}), ctx: ctx, cancel: cancel}
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
	t.mu.Lock()
	t.host = h
	t.mu.Unlock()
}

func (t *RaftTransport) getHost() *multiraft.Host {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.host
}

// Close stops the senders and waits for them.
func (t *RaftTransport) Close() {
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
// RaftBatch per RPC.
func (t *RaftTransport) sender(to ids.NodeID, p *peer) {
	defer t.wg.Done()
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
		if err := t.sendBatch(to, addr, batch); err != nil {
			t.log.Debug("raft send failed", "to", uint64(to), "err", err)
			if h := t.getHost(); h != nil {
				h.ReportUnreachable(to)
			}
		}
	}
}

func (t *RaftTransport) sendBatch(to ids.NodeID, addr string, batch []multiraft.GroupMessage) error {
	if addr == "" {
		return fmt.Errorf("no address for node %v", to)
	}
	rb := &wire.RaftBatch{ClusterId: t.clusterID(), From: uint64(t.self), To: uint64(to), Msgs: make([]*wire.RaftMessage, 0, len(batch))}
	for _, gm := range batch {
		b, err := proto.Marshal(gm.Msg)
		if err != nil {
			return err
		}
		rb.Msgs = append(rb.Msgs, &wire.RaftMessage{Group: uint64(gm.Group), Msg: b})
	}
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
func (t *RaftTransport) checkCert(ctx context.Context, from uint64) error {
	if c := CallerOf(ctx); c.Secure {
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
	t := s.t
	if err := t.checkCert(ctx, b.GetFrom()); err != nil {
		return nil, err
	}
	if st := t.checkPeer(b.GetClusterId(), b.GetFrom(), b.GetTo()); st != nil {
		return &wire.RaftAck{Status: st}, nil
	}
	h := t.getHost()
	if h == nil {
		return &wire.RaftAck{Status: &wire.Status{Code: wire.Code_UNAVAILABLE, Message: "starting"}}, nil
	}
	msgs := make([]multiraft.GroupMessage, 0, len(b.GetMsgs()))
	for _, rm := range b.GetMsgs() {
		m := &pb.Message{}
		if err := proto.Unmarshal(rm.GetMsg(), m); err != nil {
			return &wire.RaftAck{Status: &wire.Status{Code: wire.Code_INVALID, Message: "undecodable raft message: " + err.Error()}}, nil
		}
		if m.GetFrom() != b.GetFrom() || m.GetTo() != b.GetTo() {
			return &wire.RaftAck{Status: &wire.Status{Code: wire.Code_INVALID, Message: "raft message endpoints do not match the batch"}}, nil
		}
		switch m.GetType() {
		case pb.MsgSnap:
			// Snapshot data only arrives through SendSnapshot; a bare
			// MsgSnap would make raft install state nobody sent.
			return &wire.RaftAck{Status: &wire.Status{Code: wire.Code_INVALID, Message: "MsgSnap must be streamed with SendSnapshot"}}, nil
		case pb.MsgProp, pb.MsgHup, pb.MsgBeat, pb.MsgUnreachable, pb.MsgSnapStatus, pb.MsgCheckQuorum:
			return &wire.RaftAck{Status: &wire.Status{Code: wire.Code_INVALID, Message: fmt.Sprintf("raft message type %v is local to a node", m.GetType())}}, nil
		}
		msgs = append(msgs, multiraft.GroupMessage{Group: ids.GroupID(rm.GetGroup()), Msg: m})
	}
	h.Receive(msgs)
	return &wire.RaftAck{Status: &wire.Status{}}, nil
}

// SendSnapshot implements wire.RaftServer.
func (s *RaftService) SendSnapshot(stream wire.Raft_SendSnapshotServer) error {
	t := s.t
	hdr, err := stream.Recv()
	if err != nil {
		return err
	}
	if err := t.checkCert(stream.Context(), hdr.GetFrom()); err != nil {
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
