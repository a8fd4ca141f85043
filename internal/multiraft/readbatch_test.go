package multiraft

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/govfs/govfs/internal/engine"
	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/wire"
	pb "go.etcd.io/raft/v3/raftpb"
)

type noTransport struct{}

func (noTransport) Send(ids.NodeID, []GroupMessage)                                   {}
func (noTransport) SendSnapshot(ids.NodeID, ids.GroupID, *pb.Message, SnapshotSource) {}

type nopSM struct{}

func (nopSM) Apply(engine.ReadWriter, uint64, *wire.Command) (*wire.Result, error) {
	return &wire.Result{}, nil
}

// TestReadIndexBatched: ReadIndex callers that queue while the loop is
// busy share one raft read request, each answered with an index at
// least that of every write acknowledged before it asked; a caller
// arriving after that request was handed to raft gets a request of its
// own.
func TestReadIndexBatched(t *testing.T) {
	e, err := engine.Open(t.TempDir(), engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	var armed atomic.Bool
	gate, entered := make(chan struct{}), make(chan struct{}, 1)
	cfg := DefaultConfig()
	cfg.NodeID, cfg.Engine, cfg.Transport = 1, e, noTransport{}
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg.Knobs = &TestingKnobs{BeforePersist: func() error {
		if armed.CompareAndSwap(true, false) {
			entered <- struct{}{}
			<-gate
		}
		return nil
	}}
	h, err := NewHost(cfg)
	if err != nil {
		t.Fatal(err)
	}
	const g = ids.GroupID(1)
	if err := h.AddGroup(g, nopSM{}, []ids.NodeID{1}); err != nil {
		t.Fatal(err)
	}
	h.Start()
	defer h.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var seq atomic.Uint64
	tryPropose := func() (uint64, error) {
		for {
			_, idx, err := h.Propose(ctx, g, &wire.Command{Version: 1, Req: &wire.RequestID{ClientId: 9, Seq: seq.Add(1)}})
			if err == nil || ctx.Err() != nil {
				return idx, err
			}
			time.Sleep(5 * time.Millisecond) // not leader yet
		}
	}
	propose := func() uint64 {
		t.Helper()
		idx, err := tryPropose()
		if err != nil {
			t.Fatalf("propose: %v", err)
		}
		return idx
	}
	acked := propose()

	// Hold the loop inside a round, queue the readers, let it go.
	armed.Store(true)
	held := make(chan error, 1)
	go func() {
		_, err := tryPropose()
		held <- err
	}()
	<-entered
	before := h.readCtx.Load()
	const readers = 16
	got := make([]uint64, readers)
	errs := make([]error, readers)
	var wg sync.WaitGroup
	for i := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], errs[i] = h.ReadIndex(ctx, g)
		}()
	}
	r := h.replica(g)
	for deadline := time.Now().Add(10 * time.Second); ; {
		r.mu.Lock()
		n := len(r.mu.pendingReads)
		r.mu.Unlock()
		if n == readers {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d readers queued", n, readers)
		}
		time.Sleep(time.Millisecond)
	}
	close(gate)
	wg.Wait()
	if err := <-held; err != nil {
		t.Fatalf("the proposal that held the round: %v", err)
	}
	for i := range readers {
		if errs[i] != nil || got[i] < acked || got[i] != got[0] {
			t.Fatalf("reader %d: index %d, %v; want one index for all, at least %d", i, got[i], errs[i], acked)
		}
	}
	if n := h.readCtx.Load() - before; n != 1 {
		t.Fatalf("%d read requests for %d readers queued together, want 1", n, readers)
	}
	// A write acknowledged after that request: a later reader's index
	// covers it, from a request of its own.
	acked = propose()
	idx, err := h.ReadIndex(ctx, g)
	if err != nil || idx < acked {
		t.Fatalf("later reader: index %d, %v; want at least %d", idx, err, acked)
	}
	if n := h.readCtx.Load() - before; n != 2 {
		t.Fatalf("%d read requests after a later reader, want 2", n)
	}
}
