package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/govfs/govfs/client"
	"github.com/govfs/govfs/internal/rpc"
	"github.com/govfs/govfs/internal/wire"
)

// creates runs one writer per directory, each creating dir/f0, dir/f1,
// ... (bytes: the path) until stopped, and records every acknowledged
// path.
type creates struct {
	mu    sync.Mutex
	acked []string
	stop  chan struct{}
	wg    sync.WaitGroup
}

func startCreates(t *testing.T, ctx context.Context, cl *client.Client, dirs ...string) *creates {
	c := &creates{stop: make(chan struct{})}
	for _, dir := range dirs {
		c.wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-c.stop:
					return
				default:
				}
				p := fmt.Sprintf("%s/f%d", dir, i)
				if err := put(ctx, cl, p, p); err != nil {
					t.Errorf("create %s: %v", p, err)
					return
				}
				c.mu.Lock()
				c.acked = append(c.acked, p)
				c.mu.Unlock()
			}
		})
	}
	return c
}

func (c *creates) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.acked)
}

// last is the newest acknowledged path.
func (c *creates) last() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.acked[len(c.acked)-1]
}

// finish stops the writers and returns every acknowledged path.
func (c *creates) finish() []string {
	close(c.stop)
	c.wg.Wait()
	return c.acked
}

// groupStatusAt asks the node at addr for its status of group g (nil if
// it does not answer or does not host g).
func groupStatusAt(ctx context.Context, pool *rpc.Pool, addr string, g uint64) *wire.GroupStatus {
	for _, gs := range nodeStatusAt(ctx, pool, addr).GetGroups() {
		if gs.GetGroup() == g {
			return gs
		}
	}
	return nil
}

// nodeStatusAt asks the node at addr for its status (nil if it does not
// answer within a second).
func nodeStatusAt(ctx context.Context, pool *rpc.Pool, addr string) *wire.StatusResponse {
	cc, err := pool.Get(addr)
	if err != nil {
		return nil
	}
	sctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	st, err := wire.NewMetaClient(cc).Status(sctx, &wire.StatusRequest{})
	if err != nil {
		return nil
	}
	return st
}
