package client

import (
	"context"
	"fmt"
	"sync"
	"syscall"

	"github.com/govfs/govfs/internal/chunktoken"
	"github.com/govfs/govfs/internal/dataproto"
	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/wire"
)

// Chunk access tokens (docs/security.md): a ministry hands out a token
// with every chunk record; chunk servers of a TLS cluster serve a
// client's request only with a valid one. A token expires (an hour by
// default) while a File or a mount may hold the record far longer, so a
// refused token is renewed: the chunk's record is read again and its
// fresh token kept here, by chunk handle, for every holder of the old
// record.

// maxRenewedTokens bounds the renewed tokens kept; past it the oldest
// half goes (they are renewed again if used).
const maxRenewedTokens = 1 << 14

// tokenCache holds renewed tokens by chunk handle, one per access
// (read, write, both): on a mount that works in its users' names, a
// reader's read-only renewal must not take the place of a writer's.
type tokenCache struct {
	mu sync.Mutex
	m  map[uint64]map[chunktoken.Access][]byte
}

// tokenOf returns the token to send for a request needing need on ref's
// chunk: of ref's own and the renewed ones, the longest-lived that allows
// it, else the longest-lived (the chunk server's refusal then leads to a
// renewal).
func (c *Client) tokenOf(ref *wire.ChunkRef, need chunktoken.Access) []byte {
	best, bestAny := []byte(nil), ref.GetToken()
	consider := func(t []byte) {
		if t == nil {
			return
		}
		if chunktoken.AccessOf(t)&need == need && (best == nil || chunktoken.Expiry(t).After(chunktoken.Expiry(best))) {
			best = t
		}
		if bestAny == nil || chunktoken.Expiry(t).After(chunktoken.Expiry(bestAny)) {
			bestAny = t
		}
	}
	consider(ref.GetToken())
	c.tokens.mu.Lock()
	for _, t := range c.tokens.m[ref.GetHandle()] {
		consider(t)
	}
	c.tokens.mu.Unlock()
	if best != nil {
		return best
	}
	return bestAny
}

// renewToken reads ref's record again from its ministry, as the user of
// ctx, and keeps its token. It fails with EACCES when the ministry gives
// none (the user may not access the file, or the chunk is no longer the
// file's).
func (c *Client) renewToken(ctx context.Context, ref *wire.ChunkRef) error {
	if ref.GetIno() == 0 {
		return fmt.Errorf("%w: chunk %d: its access token was refused, and no file is known to ask a new one for", syscall.EACCES, ref.GetHandle())
	}
	if c.QueuedFileChanges(ids.Ino(ref.GetIno())) {
		// A new file's chunk whose record is still queued (newfile.go):
		// the ministry knows it once the queue is applied.
		c.flushDeferred(ctx)
	}
	resp, _, err := c.read(ctx, ids.Ino(ref.GetIno()), &wire.ReadRequest{Op: &wire.ReadRequest_GetChunks{GetChunks: &wire.GetChunksReq{
		Ino: ref.GetIno(), OnlyIndex: true, Index: ref.GetIndex()}}}, []ReadOption{PastDeferred()})
	if err != nil {
		return fmt.Errorf("renew the access token of chunk %d: %w", ref.GetHandle(), err)
	}
	for _, ch := range resp.GetChunks() {
		if ch.GetHandle() == ref.GetHandle() && len(ch.GetToken()) > 0 {
			c.tokens.mu.Lock()
			if c.tokens.m == nil || len(c.tokens.m) >= maxRenewedTokens {
				c.tokens.m = map[uint64]map[chunktoken.Access][]byte{}
			}
			byAccess := c.tokens.m[ch.GetHandle()]
			if byAccess == nil {
				byAccess = map[chunktoken.Access][]byte{}
				c.tokens.m[ch.GetHandle()] = byAccess
			}
			byAccess[chunktoken.AccessOf(ch.GetToken())] = ch.GetToken()
			c.tokens.mu.Unlock()
			return nil
		}
	}
	return fmt.Errorf("%w: chunk %d of inode %d: the ministry gives no access token for it (the user may not access the file, or the chunk is no longer the file's)",
		syscall.EACCES, ref.GetHandle(), ref.GetIno())
}

// tokenRefused handles a chunk server's refusal of a token (StatusBadToken
// or StatusDenied) in a retry loop: the token is renewed and the request
// retried; a token refused again after renewal fails with EACCES unless
// the refusal is one a newer key cures (the server learns keys from its
// heartbeat). renewed counts the renewals of the caller's request.
func (c *Client) tokenRefused(ctx context.Context, ref *wire.ChunkRef, rf *dataproto.Frame, renewed *int) (bool, error) {
	cause := fmt.Errorf("chunk %d: %s", ref.GetHandle(), rf.Payload)
	if rf.Status == dataproto.StatusDenied && *renewed > 0 {
		return false, fmt.Errorf("%w: %v", syscall.EACCES, cause)
	}
	*renewed++
	if err := c.renewToken(ctx, ref); err != nil {
		return false, fmt.Errorf("%w (after %v)", err, cause)
	}
	return true, cause
}
