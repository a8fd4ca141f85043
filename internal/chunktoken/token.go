// Package chunktoken makes and checks chunk access tokens (HDFS block
// access tokens): a ministry hands a client, with each chunk record, a
// short-lived token saying that the holder of one certificate may read
// or write that chunk; chunk servers serve client requests only with
// one. Tokens are HMAC-SHA256 over a key the president creates and
// rotates (clustermap token keys), which metadata nodes and chunk
// servers learn from the cluster map and heartbeats. The package is
// pure: no clock, no I/O.
package chunktoken

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

// Size is the length of a token.
const Size = 32

// SecretSize is the length of a key's secret.
const SecretSize = 32

// Access is what a token allows.
type Access uint8

// Access bits. Alloc marks the token the president hands the allocator
// of a new chunk: only it lets a client record the chunk in a file
// (SetChunk, DropInline), so a file cannot be pointed at a chunk some
// other file holds.
const (
	Read  Access = 1
	Write Access = 2
	Alloc Access = 4
)

func (a Access) String() string {
	var parts []string
	for _, b := range []struct {
		bit  Access
		name string
	}{{Read, "read"}, {Write, "write"}, {Alloc, "alloc"}} {
		if a&b.bit != 0 {
			parts = append(parts, b.name)
		}
	}
	if len(parts) == 0 || a&^(Read|Write|Alloc) != 0 {
		return fmt.Sprintf("access(%d)", uint8(a))
	}
	return strings.Join(parts, "+")
}

// Key signs tokens. ID 0 is never used.
type Key struct {
	ID      uint32
	Secret  []byte
	Created time.Time
}

// seqMask keeps the chunk number of a handle (its low 40 bits,
// dataproto.GroupBits): the number is unique in the cluster, and a token
// minted when it was allocated, before its replica group was chosen, must
// cover the handle the client then makes of it.
const seqMask = 1<<40 - 1

// Errors Check returns (wrapped with details). ErrMissing, ErrExpired and
// ErrUnknownKey are cured by a fresh token from the ministry; the others
// mean the caller was not given this access.
var (
	ErrMissing    = errors.New("chunk access token missing")
	ErrExpired    = errors.New("chunk access token expired")
	ErrUnknownKey = errors.New("chunk access token signed with a key this server does not know")
	ErrForged     = errors.New("chunk access token does not match the chunk or the certificate")
	ErrAccess     = errors.New("chunk access token does not allow this access")
	ErrMalformed  = errors.New("malformed chunk access token")
)

// Renewable says whether a fresh token may cure err.
func Renewable(err error) bool {
	return errors.Is(err, ErrMissing) || errors.Is(err, ErrExpired) || errors.Is(err, ErrUnknownKey)
}

// layout: [0] format 1, [1] access, [2:6] key id, [6:14] expiry (Unix
// ms), [14:30] MAC (first 16 bytes of HMAC-SHA256), [30:32] zero.
const format = 1

// Mint makes a token for handle's chunk, for the certificate named
// holder ("role/name"; empty on a plaintext cluster), valid until expiry.
func Mint(k Key, handle uint64, access Access, expiry time.Time, holder string) []byte {
	tok := make([]byte, Size)
	tok[0] = format
	tok[1] = byte(access)
	binary.BigEndian.PutUint32(tok[2:], k.ID)
	binary.BigEndian.PutUint64(tok[6:], uint64(expiry.UnixMilli()))
	copy(tok[14:30], mac(k.Secret, tok[:14], handle, holder))
	return tok
}

func mac(secret, head []byte, handle uint64, holder string) []byte {
	h := hmac.New(sha256.New, secret)
	h.Write([]byte("govfs chunk token\x00"))
	h.Write(head)
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], handle&seqMask)
	h.Write(b[:])
	h.Write([]byte(holder))
	return h.Sum(nil)[:16]
}

// Expiry reads a token's expiry (zero if malformed); clients use it to
// tell a stale token from a refused one in messages.
func Expiry(tok []byte) time.Time {
	if len(tok) != Size || tok[0] != format {
		return time.Time{}
	}
	return time.UnixMilli(int64(binary.BigEndian.Uint64(tok[6:])))
}

// AccessOf reads the access a token claims (0 if malformed); clients use
// it to pick, among tokens they hold, one that allows a request.
func AccessOf(tok []byte) Access {
	if len(tok) != Size || tok[0] != format {
		return 0
	}
	return Access(tok[1])
}

// KeyID reads the id of the key a token was signed with (false if
// malformed).
func KeyID(tok []byte) (uint32, bool) {
	if len(tok) != Size || tok[0] != format {
		return 0, false
	}
	return binary.BigEndian.Uint32(tok[2:]), true
}

// Verifier checks tokens against the keys it was last given. Safe for
// concurrent use.
type Verifier struct {
	mu   sync.RWMutex
	keys map[uint32][]byte
}

// SetKeys replaces the keys (the president's current ones).
func (v *Verifier) SetKeys(keys []Key) {
	m := make(map[uint32][]byte, len(keys))
	for _, k := range keys {
		m[k.ID] = k.Secret
	}
	v.mu.Lock()
	v.keys = m
	v.mu.Unlock()
}

// Len is how many keys the verifier holds.
func (v *Verifier) Len() int {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return len(v.keys)
}

// MaxID is the highest key id the verifier holds (0: none).
func (v *Verifier) MaxID() uint32 {
	v.mu.RLock()
	defer v.mu.RUnlock()
	var top uint32
	for id := range v.keys {
		top = max(top, id)
	}
	return top
}

// Knows says whether the verifier holds key id.
func (v *Verifier) Knows(id uint32) bool {
	v.mu.RLock()
	defer v.mu.RUnlock()
	_, ok := v.keys[id]
	return ok
}

// Check says whether tok lets holder have access need to handle's chunk
// at now; a zero now skips the expiry check (proof of an allocation,
// which stays true).
func (v *Verifier) Check(tok []byte, handle uint64, need Access, holder string, now time.Time) error {
	if len(tok) == 0 {
		return ErrMissing
	}
	if len(tok) != Size || tok[0] != format || tok[30] != 0 || tok[31] != 0 {
		return fmt.Errorf("%w (%d bytes, format %d)", ErrMalformed, len(tok), tok[0])
	}
	id := binary.BigEndian.Uint32(tok[2:])
	v.mu.RLock()
	secret, ok := v.keys[id]
	v.mu.RUnlock()
	if !ok {
		return fmt.Errorf("%w (key %d)", ErrUnknownKey, id)
	}
	if !hmac.Equal(tok[14:30], mac(secret, tok[:14], handle, holder)) {
		return fmt.Errorf("%w (chunk %d, certificate %q)", ErrForged, handle, holder)
	}
	if exp := Expiry(tok); !now.IsZero() && now.After(exp) {
		return fmt.Errorf("%w at %s", ErrExpired, exp.UTC().Format(time.RFC3339))
	}
	if have := Access(tok[1]); have&need != need {
		return fmt.Errorf("%w: it allows %v, the request needs %v", ErrAccess, have, need)
	}
	return nil
}

// Signer picks the key to mint with. Safe for concurrent use.
type Signer struct {
	mu   sync.RWMutex
	keys []Key // oldest first
}

// SetKeys replaces the keys (oldest first or in any order).
func (s *Signer) SetKeys(keys []Key) {
	ks := append([]Key(nil), keys...)
	for i := 1; i < len(ks); i++ {
		for j := i; j > 0 && ks[j].ID < ks[j-1].ID; j-- {
			ks[j], ks[j-1] = ks[j-1], ks[j]
		}
	}
	s.mu.Lock()
	s.keys = ks
	s.mu.Unlock()
}

// Key returns the key to sign with at now: the newest one created at
// least settle ago, so that every chunk server has had time to learn it
// from a heartbeat; the newest one when none is that old (a new
// cluster). ok is false when there is no key at all.
func (s *Signer) Key(now time.Time, settle time.Duration) (Key, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if len(s.keys) == 0 {
		return Key{}, false
	}
	for i := len(s.keys) - 1; i >= 0; i-- {
		if now.Sub(s.keys[i].Created) >= settle {
			return s.keys[i], true
		}
	}
	return s.keys[len(s.keys)-1], true
}
