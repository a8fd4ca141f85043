package client

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"time"

	"github.com/govfs/govfs/internal/chunktoken"
	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/wire"
)

// Chunk handles come from the president (AllocChunkHandlesOp), each with
// the allocation token a ministry asks for before it records the chunk in
// a file. Asking for one per new chunk cost a commit on the president per
// file written; the client asks for handlePoolSize at a time and keeps
// the rest here. A handle is used once; one never used is simply never
// written (a number, no chunk). The pool forgets handles whose token is
// half-way to expiry (chunk servers refuse an expired one), and holds
// them at most handlePoolAge.

// handlePoolSize is how many chunk handles one allocation asks for.
const handlePoolSize = 64

// handlePoolAge bounds how long a pooled handle is kept.
const handlePoolAge = 5 * time.Minute

type handlePool struct {
	mu   sync.Mutex
	free []pooledHandle
}

type pooledHandle struct {
	number uint64
	token  []byte
	useBy  time.Time
}

// takeHandle returns a chunk number the president allocated to this
// client and its allocation token (nil on a plaintext cluster): from the
// pool, else from a new allocation, whose other handles fill the pool. It
// does not wait for the deferred changes (nothing it does depends on the
// namespace).
func (c *Client) takeHandle(ctx context.Context, route ids.Ino) (uint64, []byte, error) {
	p := &c.handles
	now := c.cfg.Clock.Now()
	p.mu.Lock()
	for len(p.free) > 0 {
		h := p.free[0]
		p.free = p.free[1:]
		if now.Before(h.useBy) {
			p.mu.Unlock()
			return h.number, h.token, nil
		}
	}
	p.free = nil
	p.mu.Unlock()
	cmd := c.newCommand(func(cmd *wire.Command) {
		cmd.Op = &wire.Command_AllocChunkHandles{AllocChunkHandles: &wire.AllocChunkHandlesOp{Count: handlePoolSize}}
	})
	res, resp, _, err := c.mutateResp(ctx, ids.PresidentGroup, route, cmd, false, mutateExtra{})
	if err != nil {
		return 0, nil, fmt.Errorf("allocate chunk handles: %w", err)
	}
	start, end, first := res.GetStart(), res.GetEnd(), resp.GetChunkToken()
	if start == 0 || end <= start {
		return 0, nil, fmt.Errorf("%w: allocate chunk handles: empty range [%d, %d)", syscall.EIO, start, end)
	}
	var rest []pooledHandle
	useBy := poolUseBy(now, first)
	switch toks := resp.GetChunkTokens(); {
	case first == nil:
		// Plaintext: no tokens to expire.
		for h := start + 1; h < end; h++ {
			rest = append(rest, pooledHandle{number: h, useBy: useBy})
		}
	case uint64(len(toks)) == end-start:
		for i, h := 1, start+1; h < end; i, h = i+1, h+1 {
			rest = append(rest, pooledHandle{number: h, token: toks[i], useBy: useBy})
		}
	}
	// Otherwise only the first handle has a token (a president that
	// signs one): the others are left unused.
	if len(rest) > 0 {
		p.mu.Lock()
		p.free = append(p.free, rest...)
		p.mu.Unlock()
	}
	return start, first, nil
}

// poolUseBy is when handles allocated at now with a token like tok leave
// the pool: handlePoolAge, or a quarter of the token's life if shorter
// (the life as this client's clock sees it; a token already expired by
// it is used once, at once, as before pooling).
func poolUseBy(now time.Time, tok []byte) time.Time {
	if tok == nil {
		return now.Add(handlePoolAge)
	}
	life := chunktoken.Expiry(tok).Sub(now)
	return now.Add(min(handlePoolAge, life/4))
}
