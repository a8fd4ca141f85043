package client

import (
	"bytes"
	"testing"
	"time"

	"github.com/govfs/govfs/internal/chunktoken"
	"github.com/govfs/govfs/internal/wire"
)

// TestTokenOfPicksByAccess: among a record's token and renewed ones, a
// request gets the longest-lived token that allows it, so a reader's
// read-only renewal does not take a writer's place.
func TestTokenOfPicksByAccess(t *testing.T) {
	k := chunktoken.Key{ID: 1, Secret: bytes.Repeat([]byte{7}, 32)}
	now := time.Unix(1_800_000_000, 0)
	const h = 5<<40 | 9
	readLate := chunktoken.Mint(k, h, chunktoken.Read, now.Add(2*time.Hour), "client/m")
	rwEarly := chunktoken.Mint(k, h, chunktoken.Read|chunktoken.Write, now.Add(time.Hour), "client/m")
	readLater := chunktoken.Mint(k, h, chunktoken.Read, now.Add(3*time.Hour), "client/m")
	c := &Client{}
	c.tokens.m = map[uint64]map[chunktoken.Access][]byte{h: {
		chunktoken.Read | chunktoken.Write: rwEarly,
		chunktoken.Read:                    readLater,
	}}
	ref := &wire.ChunkRef{Handle: h, Token: readLate}
	if got := c.tokenOf(ref, chunktoken.Write); !bytes.Equal(got, rwEarly) {
		t.Fatal("a write was not given the read+write token")
	}
	if got := c.tokenOf(ref, chunktoken.Read); !bytes.Equal(got, readLater) {
		t.Fatal("a read was not given the longest-lived read token")
	}
	// Nothing allows it: the longest-lived, for the server to refuse.
	if got := c.tokenOf(&wire.ChunkRef{Handle: h + 1, Token: readLate}, chunktoken.Write); !bytes.Equal(got, readLate) {
		t.Fatal("no token allows a write: the record's should be sent")
	}
}
