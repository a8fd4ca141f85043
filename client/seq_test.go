package client

import (
	"math/rand/v2"
	"testing"

	"github.com/govfs/govfs/internal/clock"
	"github.com/govfs/govfs/internal/wire"
)

// TestFirstIncompleteIsLowestInFlight: a command's first_incomplete is
// the smallest seq still in flight (its own included), as finish calls
// in any order, repeated, leave it.
func TestFirstIncompleteIsLowestInFlight(t *testing.T) {
	c := &Client{cfg: Config{Clock: clock.Real{}, Cred: &wire.Cred{}}}
	c.mu.inflight = map[uint64]struct{}{}
	c.mu.nextSeq = 1
	rng := rand.New(rand.NewPCG(3, 5))
	var live []uint64
	for step := range 20000 {
		if len(live) == 0 || rng.IntN(5) < 3 {
			cmd := c.newCommand(func(*wire.Command) {})
			seq := cmd.GetReq().GetSeq()
			live = append(live, seq)
			want := seq
			for _, s := range live {
				want = min(want, s)
			}
			if got := cmd.GetReq().GetFirstIncomplete(); got != want {
				t.Fatalf("step %d: first_incomplete %d, want %d (in flight %v)", step, got, want, live)
			}
			continue
		}
		i := rng.IntN(len(live))
		c.finish(live[i])
		if rng.IntN(4) == 0 {
			c.finish(live[i]) // finished twice: harmless
		}
		live = append(live[:i], live[i+1:]...)
	}
}
