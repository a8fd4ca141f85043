package chunktoken

import (
	"errors"
	"testing"
	"time"
)

func TestCheck(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	k1 := Key{ID: 1, Secret: []byte("0123456789abcdef0123456789abcdef"), Created: t0}
	k2 := Key{ID: 2, Secret: []byte("fedcba9876543210fedcba9876543210"), Created: t0.Add(time.Hour)}
	var v Verifier
	v.SetKeys([]Key{k1})
	const handle = 7<<40 | 42
	tok := Mint(k1, handle, Read, t0.Add(time.Minute), "client/alice")
	if len(tok) != Size {
		t.Fatalf("token is %d bytes", len(tok))
	}
	ok := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	bad := func(err, want error) {
		t.Helper()
		if !errors.Is(err, want) {
			t.Fatalf("got %v, want %v", err, want)
		}
	}
	ok(v.Check(tok, handle, Read, "client/alice", t0))
	// The chunk number is what is signed: the same chunk in whatever group.
	ok(v.Check(tok, 9<<40|42, Read, "client/alice", t0))
	bad(v.Check(tok, handle+1, Read, "client/alice", t0), ErrForged)
	bad(v.Check(tok, handle, Read, "client/bob", t0), ErrForged)
	bad(v.Check(tok, handle, Write, "client/alice", t0), ErrAccess)
	bad(v.Check(tok, handle, Read, "client/alice", t0.Add(2*time.Minute)), ErrExpired)
	bad(v.Check(nil, handle, Read, "client/alice", t0), ErrMissing)
	bad(v.Check(tok[:20], handle, Read, "client/alice", t0), ErrMalformed)
	// Raising the access or the expiry breaks the MAC.
	forged := append([]byte(nil), tok...)
	forged[1] = byte(Read | Write)
	bad(v.Check(forged, handle, Write, "client/alice", t0), ErrForged)
	forged = append([]byte(nil), tok...)
	forged[7]++
	bad(v.Check(forged, handle, Read, "client/alice", t0), ErrForged)
	// A token of a key the verifier does not hold (rotated out, or not
	// learnt yet) is renewable; a forged one is not.
	tok2 := Mint(k2, handle, Read|Write, t0.Add(2*time.Hour), "client/alice")
	err := v.Check(tok2, handle, Write, "client/alice", t0)
	bad(err, ErrUnknownKey)
	if !Renewable(err) || Renewable(v.Check(tok, handle+1, Read, "client/alice", t0)) {
		t.Fatal("Renewable misjudges")
	}
	v.SetKeys([]Key{k1, k2})
	ok(v.Check(tok2, handle, Write, "client/alice", t0.Add(time.Hour)))
	// A zero time skips the expiry (an allocation proof).
	ok(v.Check(tok, handle, Read, "client/alice", time.Time{}))
	if s := (Read | Write | Alloc).String(); s != "read+write+alloc" {
		t.Fatalf("access string %q", s)
	}
	if got := Expiry(tok2); !got.Equal(t0.Add(2 * time.Hour)) {
		t.Fatalf("expiry %v", got)
	}
}

func TestSignerSettles(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	var s Signer
	if _, ok := s.Key(t0, time.Second); ok {
		t.Fatal("a key out of nothing")
	}
	s.SetKeys([]Key{{ID: 2, Created: t0.Add(time.Hour)}, {ID: 1, Created: t0}})
	// Key 2 is too new to have reached every chunk server: key 1 signs.
	if k, _ := s.Key(t0.Add(time.Hour+5*time.Second), 10*time.Second); k.ID != 1 {
		t.Fatalf("signed with key %d, want 1", k.ID)
	}
	if k, _ := s.Key(t0.Add(time.Hour+10*time.Second), 10*time.Second); k.ID != 2 {
		t.Fatalf("signed with key %d, want 2", k.ID)
	}
	// Only new keys (a new cluster): the newest.
	s.SetKeys([]Key{{ID: 5, Created: t0}})
	if k, _ := s.Key(t0, time.Minute); k.ID != 5 {
		t.Fatalf("signed with key %d, want 5", k.ID)
	}
}
