package lease

import (
	"testing"
	"time"
)

// A change draining readers (intent left, no read lease live) must keep an
// older waiting reader from being granted until DoneDraining.
func TestOlderWaitingReaderDoesNotOvertakeADrain(t *testing.T) {
	now := time.Unix(1000, 0)
	tb := New(Config{TTL: 10 * time.Second})
	w := Request{Client: 1, Ino: 7, Mode: Write, Off: 0, End: ToEnd}
	if out, _ := tb.Acquire(now, w, 0); !out.Granted {
		t.Fatal("writer")
	}
	r := Request{Client: 2, Ino: 7, Mode: Read, Off: 0, End: ToEnd}
	if out, _ := tb.Acquire(now, r, 5*time.Second); out.Granted {
		t.Fatal("reader granted over writer")
	}
	tb.Release(now, 1, []ID{1})
	// Client 3 starts a setattr: no read lease to drain, intent stays.
	busy, _, _ := tb.DrainReaders(now, 3, 7, 11*time.Second, false)
	if busy {
		t.Fatal("busy")
	}
	// Before the change commits, the older waiting reader asks again.
	if out, _ := tb.Acquire(now.Add(time.Millisecond), r, 5*time.Second); out.Granted {
		t.Fatalf("read lease %d granted while a change is being proposed: it will never be revoked", out.Lease.ID)
	}
}
