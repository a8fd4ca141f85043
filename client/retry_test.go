package client

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/govfs/govfs/internal/clock"
)

func TestBackoffFullJitter(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	b := backoff{base: backoffBase, cap: backoffCap, int64n: r.Int64N}
	var got []time.Duration
	for i := 0; i < 12; i++ {
		d := b.next()
		ceil := min(backoffBase<<i, backoffCap)
		if d < 0 || d > ceil {
			t.Fatalf("wait %d = %v, want within [0, %v]", i, d, ceil)
		}
		got = append(got, d)
	}
	// Same seed, same waits.
	r2 := rand.New(rand.NewPCG(1, 2))
	b2 := backoff{base: backoffBase, cap: backoffCap, int64n: r2.Int64N}
	for i, want := range got {
		if d := b2.next(); d != want {
			t.Fatalf("replay wait %d = %v, want %v", i, d, want)
		}
	}
}

func TestBackoffNoOverflow(t *testing.T) {
	b := backoff{base: backoffBase, cap: backoffCap, int64n: func(n int64) int64 { return n - 1 }}
	for i := 0; i < 200; i++ {
		if d := b.next(); d < 0 || d > backoffCap {
			t.Fatalf("wait %d = %v, out of [0, cap]", i, d)
		}
	}
	if d := b.next(); d != backoffCap {
		t.Fatalf("late wait = %v, want the cap %v with max jitter", d, backoffCap)
	}
}

// stepClock is a clock whose After fires at once and advances Now, so
// retry loops run without sleeping.
type stepClock struct {
	now   time.Time
	waits []time.Duration
}

func (c *stepClock) Now() time.Time { return c.now }
func (c *stepClock) After(d time.Duration) <-chan time.Time {
	c.waits = append(c.waits, d)
	c.now = c.now.Add(d)
	ch := make(chan time.Time, 1)
	ch <- c.now
	return ch
}
func (c *stepClock) NewTicker(time.Duration) clock.Ticker { panic("not used") }

func newTestRetrier(budget time.Duration) (*retrier, *stepClock) {
	clk := &stepClock{now: time.Unix(1000, 0)}
	r := rand.New(rand.NewPCG(7, 7))
	return &retrier{clock: clk, budget: budget, int64n: r.Int64N}, clk
}

func TestRetrySucceedsAfterFailures(t *testing.T) {
	r, clk := newTestRetrier(time.Minute)
	calls := 0
	err := r.do(context.Background(), func(context.Context) (bool, error) {
		calls++
		if calls < 4 {
			return true, errors.New("unavailable")
		}
		return false, nil
	})
	if err != nil || calls != 4 {
		t.Fatalf("do = %v after %d calls, want nil after 4", err, calls)
	}
	if len(clk.waits) != 3 {
		t.Fatalf("waited %d times, want 3", len(clk.waits))
	}
	for i, w := range clk.waits {
		if w > backoffBase<<i {
			t.Errorf("wait %d = %v, above %v", i, w, backoffBase<<i)
		}
	}
}

func TestRetryFinalError(t *testing.T) {
	r, _ := newTestRetrier(time.Minute)
	calls := 0
	err := r.do(context.Background(), func(context.Context) (bool, error) {
		calls++
		return false, syscall.ENOENT
	})
	if !errors.Is(err, syscall.ENOENT) || calls != 1 {
		t.Fatalf("do = %v after %d calls, want ENOENT after 1", err, calls)
	}
}

func TestRetryBudget(t *testing.T) {
	r, clk := newTestRetrier(3 * time.Second)
	start := clk.now
	calls := 0
	last := errors.New("node down")
	err := r.do(context.Background(), func(context.Context) (bool, error) {
		calls++
		return true, last
	})
	if !errors.Is(err, syscall.ETIMEDOUT) || !errors.Is(err, last) {
		t.Fatalf("do = %v, want ETIMEDOUT wrapping the last error", err)
	}
	if spent := clk.now.Sub(start); spent != 3*time.Second {
		t.Fatalf("spent %v of simulated time, want exactly the 3s budget", spent)
	}
	if calls < 4 {
		t.Fatalf("only %d calls in a 3s budget", calls)
	}
}

func TestRetryContextCanceled(t *testing.T) {
	r, _ := newTestRetrier(time.Minute)
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	err := r.do(ctx, func(context.Context) (bool, error) {
		calls++
		if calls == 2 {
			cancel()
		}
		return true, errors.New("unavailable")
	})
	if !errors.Is(err, context.Canceled) || calls != 2 {
		t.Fatalf("do = %v after %d calls, want context.Canceled after 2", err, calls)
	}
	if Errno(err) != syscall.EINTR {
		t.Fatalf("Errno(%v) = %v, want EINTR", err, Errno(err))
	}
}

func TestRetryContextDeadline(t *testing.T) {
	r, _ := newTestRetrier(time.Minute)
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	err := r.do(ctx, func(context.Context) (bool, error) { t.Fatal("attempt after deadline"); return false, nil })
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, syscall.ETIMEDOUT) {
		t.Fatalf("do = %v, want DeadlineExceeded and ETIMEDOUT", err)
	}
}

// New against addresses where nothing listens answers ECONNREFUSED (not a
// timeout after the whole connect budget), naming the addresses.
func TestConnectAllRefused(t *testing.T) {
	var addrs []string
	for range 2 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addrs = append(addrs, l.Addr().String())
		l.Close()
	}
	_, err := New(t.Context(), Config{MetaAddrs: addrs, ConnectTimeout: 30 * time.Second})
	if !errors.Is(err, syscall.ECONNREFUSED) || !strings.Contains(err.Error(), addrs[1]) {
		t.Fatalf("connect to closed ports: %v", err)
	}
}
