package client

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/govfs/govfs/internal/wire"
)

// Routing with epochs (call.go): every ministry call names the epoch the
// Client believes; STALE_EPOCH brings it up to date; REDIRECT names the
// ministry, its epoch and its minister; a redirect loop ends.

func TestCallsNameTheEpochAndCatchUpOnStaleEpoch(t *testing.T) {
	fc := startFake(t, 2)
	fc.ministries = []*wire.Ministry{{Group: 1, Members: []uint64{1, 2}, Epoch: 3}}
	c := newTestClient(t, fc)
	// The ministry's epoch grew to 4 after the Client read the map:
	// requests naming 3 are refused and change nothing.
	fc.set(func(_ int, req *wire.MutateRequest) *wire.MutateResponse {
		if req.GetEpoch() != 4 {
			return &wire.MutateResponse{Status: &wire.Status{Code: wire.Code_STALE_EPOCH, Epoch: 4, Message: "ministry 1 is at epoch 4"}}
		}
		return &wire.MutateResponse{Status: ok(), Result: &wire.Result{Attr: &wire.Attr{Ino: 3}}}
	}, nil)
	if _, err := c.MkdirAt(context.Background(), 1, "x", 0o700); err != nil {
		t.Fatal(err)
	}
	muts, _ := fc.seen()
	if len(muts) != 2 || muts[0].req.GetEpoch() != 3 || muts[1].req.GetEpoch() != 4 {
		var got []uint64
		for _, m := range muts {
			got = append(got, m.req.GetEpoch())
		}
		t.Fatalf("epochs sent: %v, want [3 4]", got)
	}
	if muts[0].req.GetCmd().GetReq().GetSeq() != muts[1].req.GetCmd().GetReq().GetSeq() {
		t.Fatalf("the retry after STALE_EPOCH is a new request: %v", muts)
	}
	// A node whose map is behind the Client (it names a lower epoch) is
	// not believed: the Client keeps its epoch and asks another node.
	fc.set(func(node int, req *wire.MutateRequest) *wire.MutateResponse {
		if node == 0 {
			return &wire.MutateResponse{Status: &wire.Status{Code: wire.Code_STALE_EPOCH, Epoch: 2, Message: "node behind"}}
		}
		return &wire.MutateResponse{Status: ok(), Result: &wire.Result{Attr: &wire.Attr{Ino: 4}}}
	}, nil)
	if _, err := c.MkdirAt(context.Background(), 1, "y", 0o700); err != nil {
		t.Fatal(err)
	}
	muts, _ = fc.seen()
	for _, m := range muts {
		if m.req.GetEpoch() != 4 {
			t.Fatalf("epoch went back to %d after a lagging node's answer", m.req.GetEpoch())
		}
	}
	if muts[len(muts)-1].node != 1 {
		t.Fatalf("mutation not retried at the other node: %v", muts)
	}
}

func TestRedirectCarriesEpochAndMinister(t *testing.T) {
	fc := startFake(t, 2)
	fc.ministries = []*wire.Ministry{{Group: 1, Members: []uint64{1, 2}, Epoch: 2}, {Group: 5, Members: []uint64{1, 2}, Epoch: 1}}
	c := newTestClient(t, fc)
	fc.set(func(node int, req *wire.MutateRequest) *wire.MutateResponse {
		if req.GetGroup() == 1 {
			return &wire.MutateResponse{Status: &wire.Status{Code: wire.Code_REDIRECT, Ministry: 5, Epoch: 7, LeaderAddr: fc.addrs[1]}}
		}
		return &wire.MutateResponse{Status: ok(), Result: &wire.Result{Attr: &wire.Attr{Ino: 21}}}
	}, nil)
	if _, err := c.MkdirAt(context.Background(), 20, "x", 0o700); err != nil {
		t.Fatal(err)
	}
	muts, _ := fc.seen()
	last := muts[len(muts)-1]
	if len(muts) != 2 || last.req.GetGroup() != 5 || last.req.GetEpoch() != 7 || last.node != 1 {
		t.Fatalf("after REDIRECT(5, epoch 7, node 2): %d calls, last to group %d epoch %d node %d", len(muts), last.req.GetGroup(), last.req.GetEpoch(), last.node+1)
	}
	if c.owner(20) != 5 {
		t.Fatalf("owner of 20 = %v, want 5", c.owner(20))
	}
}

func TestRedirectLoopGivesUp(t *testing.T) {
	fc := startFake(t, 1)
	c := newTestClient(t, fc)
	// Ministries 2 and 3 each say the other holds inode 9.
	fc.set(nil, func(_ int, req *wire.ReadRequest) *wire.ReadResponse {
		to := uint64(2)
		if req.GetGroup() == 2 {
			to = 3
		}
		return &wire.ReadResponse{Status: &wire.Status{Code: wire.Code_REDIRECT, Ministry: to, Message: "elsewhere"}}
	})
	_, err := c.GetAttr(context.Background(), 9)
	if !errors.Is(err, syscall.EIO) || !strings.Contains(err.Error(), "redirect loop") {
		t.Fatalf("GetAttr through a redirect loop: %v, want EIO naming the loop", err)
	}
	if _, reads := fc.seen(); len(reads) > maxRedirects+1 {
		t.Fatalf("%d reads for one GetAttr: the bound is %d hops", len(reads), maxRedirects)
	}
}

// TestOutageLogged: a call that keeps meeting UNAVAILABLE for longer
// than outageAfter logs the outage once, and the next call that succeeds
// logs the recovery.
func TestOutageLogged(t *testing.T) {
	fc := startFake(t, 1)
	var logs strings.Builder
	var mu sync.Mutex
	cfg := DefaultConfig()
	cfg.MetaAddrs = fc.addrs[:1]
	cfg.CallTimeout, cfg.OpTimeout = time.Second, 10*time.Second
	cfg.Logger = slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return logs.Write(p)
	}), nil))
	c, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var down atomic.Bool
	down.Store(true)
	fc.set(func(_ int, req *wire.MutateRequest) *wire.MutateResponse {
		if down.Load() {
			return &wire.MutateResponse{Status: &wire.Status{Code: wire.Code_UNAVAILABLE, Message: "no leader"}}
		}
		return &wire.MutateResponse{Status: ok(), Result: &wire.Result{Attr: &wire.Attr{Ino: 3}}}
	}, nil)
	time.AfterFunc(outageAfter+time.Second, func() { down.Store(false) })
	if _, err := c.MkdirAt(context.Background(), 1, "x", 0o700); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	got := logs.String()
	mu.Unlock()
	if strings.Count(got, "metadata service unreachable") != 1 || !strings.Contains(got, "metadata service reachable again") {
		t.Fatalf("log:\n%s", got)
	}
}

type writerFunc func(p []byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
