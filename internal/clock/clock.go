// Package clock abstracts time so that raft ticks, timeouts and retries can
// be driven by a manual clock in tests instead of sleeping.
package clock

import (
	"sort"
	"sync"
	"time"
)

// Clock is the time source every GovFS component takes.
type Clock interface {
	Now() time.Time
	NewTicker(d time.Duration) Ticker
	After(d time.Duration) <-chan time.Time
}

// Ticker delivers ticks on C until stopped.
type Ticker interface {
	C() <-chan time.Time
	Stop()
}

// Real is the wall clock.
type Real struct{}

func (Real) Now() time.Time                         { return time.Now() }
func (Real) After(d time.Duration) <-chan time.Time { return time.After(d) }
func (Real) NewTicker(d time.Duration) Ticker       { return realTicker{time.NewTicker(d)} }

type realTicker struct{ t *time.Ticker }

func (r realTicker) C() <-chan time.Time { return r.t.C }
func (r realTicker) Stop()               { r.t.Stop() }

// Manual is a clock that moves only when Advance is called. Timers and
// tickers fire synchronously inside Advance (on buffered channels, dropping
// ticks a slow reader missed, like time.Ticker).
type Manual struct {
	mu      sync.Mutex
	now     time.Time
	waiters []*waiter
}

type waiter struct {
	at     time.Time
	period time.Duration // 0 for one-shot
	ch     chan time.Time
	done   bool
}

// NewManual returns a manual clock starting at start.
func NewManual(start time.Time) *Manual { return &Manual{now: start} }

func (m *Manual) Now() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.now
}

func (m *Manual) After(d time.Duration) <-chan time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	w := &waiter{at: m.now.Add(d), ch: make(chan time.Time, 1)}
	m.waiters = append(m.waiters, w)
	return w.ch
}

func (m *Manual) NewTicker(d time.Duration) Ticker {
	if d <= 0 {
		panic("clock: non-positive ticker period")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	w := &waiter{at: m.now.Add(d), period: d, ch: make(chan time.Time, 1)}
	m.waiters = append(m.waiters, w)
	return &manualTicker{m: m, w: w}
}

type manualTicker struct {
	m *Manual
	w *waiter
}

func (t *manualTicker) C() <-chan time.Time { return t.w.ch }
func (t *manualTicker) Stop() {
	t.m.mu.Lock()
	t.w.done = true
	t.m.mu.Unlock()
}

// Advance moves the clock forward by d, firing every timer and ticker due
// on the way in time order.
func (m *Manual) Advance(d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	end := m.now.Add(d)
	for {
		sort.SliceStable(m.waiters, func(i, j int) bool { return m.waiters[i].at.Before(m.waiters[j].at) })
		var next *waiter
		for _, w := range m.waiters {
			if !w.done {
				next = w
				break
			}
		}
		if next == nil || next.at.After(end) {
			break
		}
		m.now = next.at
		select {
		case next.ch <- next.at:
		default:
		}
		if next.period > 0 {
			next.at = next.at.Add(next.period)
		} else {
			next.done = true
		}
	}
	m.now = end
	live := m.waiters[:0]
	for _, w := range m.waiters {
		if !w.done {
			live = append(live, w)
		}
	}
	m.waiters = live
}
