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

type tokenCache struct {
	mu sync.Mutex
	m  map[uint64][]byte
}

// tokenOf returns the token to send for ref: the renewed one if it
// outlives ref's own.
func (c *Client) tokenOf(ref *wire.ChunkRef) []byte {
	tok := ref.GetToken()
	c.tokens.mu.Lock()
	t := c.tokens.m[ref.GetHandle()]
	c.tokens.mu.Unlock()
	if t != nil && (tok == nil || chunktoken.Expiry(t).After(chunktoken.Expiry(tok))) {
		return t
	}
	return tok
}

// renewToken reads ref's record again from its ministry, as the user of
// ctx, and keeps its token. It fails with EACCES when the ministry gives
// none (the user may not access the file, or the chunk is no longer the
// file's).
func (c *Client) renewToken(ctx context.Context, ref *wire.ChunkRef) error {
	if ref.GetIno() == 0 {
		return fmt.Errorf("%w: chunk %d: its access token was refused, and no file is known to ask a new one for", syscall.EACCES, ref.GetHandle())
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
				c.tokens.m = map[uint64][]byte{}
			}
			c.tokens.m[ch.GetHandle()] = ch.GetToken()
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
