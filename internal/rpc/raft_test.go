package rpc

import (
	"context"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/multiraft"
	"github.com/govfs/govfs/internal/wire"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// recorder stands in for a multiraft.Host: it records what the transport
// delivers and reports.
type recorder struct {
	mu          sync.Mutex
	got         []*pb.Message
	unreachable map[ids.NodeID]int
	arrived     chan struct{}
}

func newRecorder() *recorder {
	return &recorder{arrived: make(chan struct{}, 1024), unreachable: map[ids.NodeID]int{}}
}

func (r *recorder) Receive(msgs []multiraft.GroupMessage) {
	r.mu.Lock()
	for _, m := range msgs {
		r.got = append(r.got, m.Msg)
	}
	r.mu.Unlock()
	r.arrived <- struct{}{}
}

func (r *recorder) ReceiveSnapshot(ids.GroupID, *pb.Message, func(add func(k, v []byte) error) error) error {
	return nil
}
func (r *recorder) ReportSnapshot(ids.GroupID, ids.NodeID, bool) {}
func (r *recorder) ReportUnreachable(to ids.NodeID) {
	r.mu.Lock()
	r.unreachable[to]++
	r.mu.Unlock()
}

// counts returns the messages received and how often peer was reported
// unreachable.
func (r *recorder) counts(peer ids.NodeID) (got, unreachable int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.got), r.unreachable[peer]
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// serve runs a gRPC server for svc on a loopback port.
func serve(t *testing.T, register func(*grpc.Server)) (addr string, srv *grpc.Server) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv = grpc.NewServer(ServerOptions()...)
	register(srv)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String(), srv
}

// oldRaft is a node from before Stream: it only has Send.
type oldRaft struct {
	wire.UnimplementedRaftServer
	svc *RaftService
}

func (o oldRaft) Send(ctx context.Context, b *wire.RaftBatch) (*wire.RaftAck, error) {
	return o.svc.Send(ctx, b)
}

func heartbeat(from, to ids.NodeID, term uint64) []multiraft.GroupMessage {
	return []multiraft.GroupMessage{{Group: 1, Msg: &pb.Message{Type: pb.MsgHeartbeat.Enum(), From: proto.Uint64(uint64(from)), To: proto.Uint64(uint64(to)), Term: proto.Uint64(term)}}}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestRaftTransportStreams(t *testing.T) {
	var clusterMu sync.Mutex
	clusterB := "c1"
	// B: the receiving node.
	recvB := newRecorder()
	tb := NewRaftTransport(2, map[ids.NodeID]string{1: "a"}, func() string {
		clusterMu.Lock()
		defer clusterMu.Unlock()
		return clusterB
	}, nil, quietLog())
	tb.setHost(recvB)
	addrB, srvB := serve(t, func(s *grpc.Server) { wire.RegisterRaftServer(s, tb.Service()) })
	// C: a node that only speaks unary Send.
	recvC := newRecorder()
	tc := NewRaftTransport(3, map[ids.NodeID]string{1: "a"}, func() string { return "c1" }, nil, quietLog())
	tc.setHost(recvC)
	addrC, _ := serve(t, func(s *grpc.Server) { wire.RegisterRaftServer(s, oldRaft{svc: tc.Service()}) })

	sendA := newRecorder()
	ta := NewRaftTransport(1, map[ids.NodeID]string{2: addrB, 3: addrC}, func() string { return "c1" }, nil, quietLog())
	ta.setHost(sendA)
	defer ta.Close()
	defer tc.Close()

	// Many batches on one stream, in order.
	for i := range 200 {
		ta.Send(2, heartbeat(1, 2, uint64(i+1)))
	}
	waitFor(t, "200 messages at B", func() bool { n, _ := recvB.counts(0); return n == 200 })
	recvB.mu.Lock()
	for i, m := range recvB.got {
		if m.GetTerm() != uint64(i+1) {
			t.Fatalf("message %d arrived with term %d: out of order", i, m.GetTerm())
		}
	}
	recvB.mu.Unlock()

	// Answers are gathered (at most one per ackEvery), but a lone batch
	// is answered too: a sender idle after it does not take the peer
	// for stalled.
	_, reportsBefore := sendA.counts(2)
	for range 3 {
		ta.Send(2, heartbeat(1, 2, 500))
		time.Sleep(time.Millisecond)
	}
	time.Sleep(streamStall + 500*time.Millisecond)
	ta.Send(2, heartbeat(1, 2, 501))
	waitFor(t, "the batches after an idle time at B", func() bool { n, _ := recvB.counts(0); return n == 204 })
	if _, u := sendA.counts(2); u != reportsBefore {
		t.Fatalf("B reported unreachable after an idle time (%d reports)", u-reportsBefore)
	}

	// The older node gets them by Send, once its answer to Stream
	// (UNIMPLEMENTED) is known: what went on the stream before is lost,
	// as any message may be, and raft sends again.
	waitFor(t, "a message at C", func() bool {
		ta.Send(3, heartbeat(1, 3, 1))
		n, _ := recvC.counts(0)
		return n > 0
	})
	time.Sleep(50 * time.Millisecond) // whatever was still queued
	before, _ := recvC.counts(0)
	for i := range 5 {
		ta.Send(3, heartbeat(1, 3, uint64(i+2)))
	}
	waitFor(t, "5 more messages at C", func() bool { n, _ := recvC.counts(0); return n == before+5 })

	// B refuses a batch (another cluster's): the stream ends, A reports B
	// unreachable and delivers nothing of it; once B accepts again, a
	// new stream carries the next batches.
	clusterMu.Lock()
	clusterB = "other"
	clusterMu.Unlock()
	// (The stream's end is seen at the next batch; raft sends every
	// tick.)
	waitFor(t, "B reported unreachable", func() bool {
		ta.Send(2, heartbeat(1, 2, 1000))
		_, u := sendA.counts(2)
		return u > reportsBefore
	})
	if n, _ := recvB.counts(0); n != 204 {
		t.Fatalf("a refused batch was delivered: %d messages", n)
	}
	clusterMu.Lock()
	clusterB = "c1"
	clusterMu.Unlock()
	waitFor(t, "delivery after the refusal", func() bool {
		ta.Send(2, heartbeat(1, 2, 2000))
		n, _ := recvB.counts(0)
		return n > 204
	})

	// A stopping node ends the streams into it, so its graceful stop
	// does not wait for its peers.
	tb.StopInbound()
	stopped := make(chan struct{})
	go func() { srvB.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("graceful stop waited for the peer's raft stream")
	}
	tb.Close()
}

// stuckRaft reads nothing from its streams, as a paused node does.
type stuckRaft struct {
	wire.UnimplementedRaftServer
}

func (stuckRaft) Stream(s wire.Raft_StreamServer) error {
	<-s.Context().Done()
	return nil
}

// A peer that reads nothing (paused, cut off) is reported unreachable
// once a batch went unanswered for streamStall, as a unary Send's
// deadline did, whether the batches are small (heartbeats, which its
// socket would go on taking: they must not pile up to reach it late) or
// large (flow control full: Send blocks); the sender goes on.
func TestRaftTransportStalledPeer(t *testing.T) {
	for _, size := range []int{0, 256 << 10} {
		addr, _ := serve(t, func(s *grpc.Server) { wire.RegisterRaftServer(s, stuckRaft{}) })
		rec := newRecorder()
		ta := NewRaftTransport(1, map[ids.NodeID]string{2: addr}, func() string { return "c1" }, nil, quietLog())
		ta.setHost(rec)
		data := make([]byte, size)
		start := time.Now()
		waitFor(t, "the stalled peer reported unreachable", func() bool {
			ta.Send(2, []multiraft.GroupMessage{{Group: 1, Msg: &pb.Message{Type: pb.MsgApp.Enum(), From: proto.Uint64(1), To: proto.Uint64(2),
				Entries: []*pb.Entry{{Data: data}}}}})
			_, u := rec.counts(2)
			return u > 0
		})
		if el := time.Since(start); el < streamStall {
			t.Fatalf("entries of %d bytes: reported unreachable after %v, before the stall bound %v", size, el, streamStall)
		}
		ta.Close()
	}
}
