package client

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/govfs/govfs/internal/clock"
)

// Backoff bounds: the first wait is drawn from [0, backoffBase], each
// later one from a range twice as large, up to [0, backoffCap].
const (
	backoffBase = 10 * time.Millisecond
	backoffCap  = time.Second
)

// backoff computes exponential backoff with full jitter (the AWS
// "full jitter" scheme): wait n is uniform in [0, min(cap, base*2^n)].
type backoff struct {
	base, cap time.Duration
	// int64n returns a uniform value in [0, n); n > 0.
	int64n  func(n int64) int64
	attempt int
}

// next returns the wait before the next attempt and advances.
func (b *backoff) next() time.Duration {
	ceil := b.cap
	if b.attempt < 62 {
		if d := b.base << b.attempt; d > 0 && d < ceil {
			ceil = d
		}
	}
	b.attempt++
	return time.Duration(b.int64n(int64(ceil) + 1))
}

// retrier runs an attempt function until it succeeds, fails for good, the
// budget is spent or the context is done.
type retrier struct {
	clock  clock.Clock
	budget time.Duration
	int64n func(n int64) int64
}

// attemptFunc makes one try. It returns retry=true with the error that
// made it fail when trying again (maybe elsewhere) may help; otherwise its
// error (or nil) is final.
type attemptFunc func(ctx context.Context) (retry bool, err error)

// do calls attempt until it returns retry=false. When the budget runs out
// it returns an error wrapping syscall.ETIMEDOUT and the last failure;
// when ctx ends it returns an error wrapping ctx.Err() (and ETIMEDOUT for
// an expired deadline).
func (r *retrier) do(ctx context.Context, attempt attemptFunc) error {
	deadline := r.clock.Now().Add(r.budget)
	b := backoff{base: backoffBase, cap: backoffCap, int64n: r.int64n}
	var last error
	for tries := 1; ; tries++ {
		if err := ctx.Err(); err != nil {
			return ctxError(err, last)
		}
		retry, err := attempt(ctx)
		if !retry {
			return err
		}
		last = err
		if cerr := ctx.Err(); cerr != nil {
			return ctxError(cerr, last)
		}
		remaining := deadline.Sub(r.clock.Now())
		if remaining <= 0 {
			return fmt.Errorf("%w: gave up after %d tries in %v: %w", syscall.ETIMEDOUT, tries, r.budget, last)
		}
		// NB: the last wait is cut to what is left of the budget, so the
		// final attempt starts before the budget ends (it may overrun it
		// by up to one CallTimeout).
		wait := min(b.next(), remaining)
		select {
		case <-ctx.Done():
			return ctxError(ctx.Err(), last)
		case <-r.clock.After(wait):
		}
	}
}

// ctxError wraps the context's error, adding ETIMEDOUT for an expired
// deadline so that errors.Is works for both.
func ctxError(cerr, last error) error {
	if errors.Is(cerr, context.DeadlineExceeded) {
		if last != nil {
			return fmt.Errorf("%w: %w (last error: %v)", syscall.ETIMEDOUT, cerr, last)
		}
		return fmt.Errorf("%w: %w", syscall.ETIMEDOUT, cerr)
	}
	if last != nil {
		return fmt.Errorf("%w (last error: %v)", cerr, last)
	}
	return cerr
}
