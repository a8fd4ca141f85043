package lease

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/govfs/govfs/internal/ids"
)

func buffered(c ClientID, ino ids.Ino) Request {
	r := req(c, ino, Write, 0, 0)
	r.Buffered = true
	return r
}

// TestBufferedLease: a buffered write lease (write-behind) is recalled by
// whatever needs the file's current bytes: another client's change
// drains it as a read lease, and another client's request, even a try,
// revokes it and says so.
func TestBufferedLease(t *testing.T) {
	tb, clk := newTable(t)
	now := clk.Now()
	b := mustGrant(t, tb, now, buffered(1, 7), 0)
	// The holder's own read lease coexists; another client's try is
	// refused, and revokes it (unlike a plain write lease's).
	mustGrant(t, tb, now, req(1, 7, Read, 0, 0), 0)
	out := mustRefuse(t, tb, now, req(2, 7, Read, 0, 0), 0)
	if !out.Buffered || len(out.Revoked) != 1 || out.Revoked[0].ID != b.ID {
		t.Fatalf("a try against a buffered lease: %+v, want it revoked and Buffered", out)
	}
	// A plain write lease is not revoked by a try.
	w := mustGrant(t, tb, now, req(3, 8, Write, 0, 0), 0)
	if out := mustRefuse(t, tb, now, req(2, 8, Read, 0, 0), 0); out.Buffered || len(out.Revoked) != 0 {
		t.Fatalf("a try against a plain write lease %d: %+v, want nothing revoked", w.ID, out)
	}
	// Another client's change drains a buffered lease (not a plain
	// write lease: writers of disjoint rows share a file).
	b9 := mustGrant(t, tb, now, buffered(1, 9), 0)
	busy, _, revoked := tb.DrainReaders(now, 2, 9, time.Second, false)
	if !busy || len(revoked) != 1 || revoked[0].ID != b9.ID {
		t.Fatalf("drain of a buffered lease: busy %v, revoked %v", busy, revoked)
	}
	if busy, _, revoked := tb.DrainReaders(now, 2, 8, time.Second, false); busy || len(revoked) != 0 {
		t.Fatalf("drain of a plain write lease: busy %v, revoked %v", busy, revoked)
	}
	// The holder's own change does not.
	if busy, _, _ := tb.DrainReaders(now, 1, 9, time.Second, false); busy {
		t.Fatal("the holder's own change waits for its own buffered lease")
	}
	// A drain's intent keeps new buffered leases out, as read leases.
	tb.DrainReaders(now, 2, 11, time.Second, false)
	mustRefuse(t, tb, now, buffered(3, 11), 0)
	mustGrant(t, tb, now, buffered(2, 11), 0) // the changer's own
	// Malformed: a buffered lease is whole-file write, not a lock.
	for _, r := range []Request{func() Request { r := buffered(1, 10); r.Mode = Read; return r }(),
		func() Request { r := buffered(1, 10); r.Lock = true; return r }(),
		func() Request { r := buffered(1, 10); r.End = 100; return r }(),
		func() Request { r := buffered(1, 10); r.Dir = true; return r }()} {
		if _, err := tb.Acquire(now, r, 0); !errors.Is(err, ErrBadRequest) {
			t.Fatalf("%+v: %v, want ErrBadRequest", r, err)
		}
	}
}

// TestPinKeepsLeaseFromExpiring: a lease pinned by a change being
// proposed under it outlives its expiry until unpinned; a lease the
// client does not hold cannot be pinned.
func TestPinKeepsLeaseFromExpiring(t *testing.T) {
	tb, clk := newTable(t)
	b := mustGrant(t, tb, clk.Now(), buffered(1, 7), 0)
	if lost := tb.Pin(clk.Now(), 2, []ID{b.ID}, 0); !slices.Equal(lost, []ID{b.ID}) {
		t.Fatalf("another client pinned lease %d: lost %v", b.ID, lost)
	}
	if lost := tb.Pin(clk.Now(), 1, []ID{b.ID, b.ID + 100}, 0); !slices.Equal(lost, []ID{b.ID + 100}) {
		t.Fatalf("pin of an unknown lease: lost %v", lost)
	}
	if lost := tb.Pin(clk.Now(), 1, []ID{b.ID}, 0); lost != nil {
		t.Fatalf("pin of a held lease: lost %v", lost)
	}
	clk.Advance(2 * ttl)
	// Pinned past its expiry: still there, so another client's change
	// still waits for it.
	if busy, _, _ := tb.DrainReaders(clk.Now(), 2, 7, time.Second, false); !busy {
		t.Fatal("a pinned lease expired under its change")
	}
	tb.Unpin([]ID{b.ID})
	if busy, _, _ := tb.DrainReaders(clk.Now(), 2, 7, time.Second, true); busy {
		t.Fatal("an unpinned lease past its expiry is still held")
	}
	if lost := tb.Pin(clk.Now(), 1, []ID{b.ID}, 0); len(lost) != 1 {
		t.Fatalf("pin of an expired lease: lost %v", lost)
	}
}

// TestUpgradeAndDowngrade: a whole-file read lease becomes buffered in
// place (same id and expiry) only while no other client holds, asks for
// or drains the file; a downgrade makes it a read lease again.
func TestUpgradeAndDowngrade(t *testing.T) {
	tb, clk := newTable(t)
	now := clk.Now()
	r := mustGrant(t, tb, now, req(1, 7, Read, 0, 0), 0)
	clk.Advance(time.Second)
	out, err := tb.Upgrade(clk.Now(), 1, r.ID)
	if err != nil || !out.Granted || !out.Lease.Buffered || out.Lease.Mode != Write || out.Lease.ID != r.ID || !out.Lease.Expires.Equal(r.Expires) {
		t.Fatalf("upgrade: %+v, %v; want the same lease, buffered, same expiry", out, err)
	}
	// Buffered now: another client's try revokes it.
	if o := mustRefuse(t, tb, clk.Now(), req(2, 7, Read, 0, 0), 0); !o.Buffered {
		t.Fatalf("a try after the upgrade: %+v", o)
	}
	if err := tb.Downgrade(clk.Now(), 1, r.ID, 0); err != nil {
		t.Fatal(err)
	}
	if l := tb.Leases(clk.Now(), 7); len(l) != 1 || l[0].Buffered || l[0].Mode != Read {
		t.Fatalf("after the downgrade: %+v", l)
	}
	// Another client's read lease is in the way of an upgrade; so is its
	// drain. Nothing changes.
	r8 := mustGrant(t, tb, clk.Now(), req(1, 8, Read, 0, 0), 0)
	o8 := mustGrant(t, tb, clk.Now(), req(2, 8, Read, 0, 0), 0)
	if out, err := tb.Upgrade(clk.Now(), 1, r8.ID); err != nil || out.Granted || out.Conflict == nil || out.Conflict.ID != o8.ID {
		t.Fatalf("upgrade beside another reader: %+v, %v", out, err)
	}
	r9 := mustGrant(t, tb, clk.Now(), req(1, 9, Read, 0, 0), 0)
	tb.DrainReaders(clk.Now(), 2, 9, time.Second, false)
	if out, err := tb.Upgrade(clk.Now(), 1, r9.ID); err != nil || out.Granted {
		t.Fatalf("upgrade of a lease being drained: %+v, %v", out, err)
	}
	// Not the client's, or not a whole-file read lease: refused.
	if _, err := tb.Upgrade(clk.Now(), 2, r.ID); !errors.Is(err, ErrNotUpgradable) {
		t.Fatalf("upgrade of another client's lease: %v", err)
	}
	part := mustGrant(t, tb, clk.Now(), req(1, 10, Read, 0, 100), 0)
	if _, err := tb.Upgrade(clk.Now(), 1, part.ID); !errors.Is(err, ErrNotUpgradable) {
		t.Fatalf("upgrade of a range lease: %v", err)
	}
	if tb.Leases(clk.Now(), 10)[0].Buffered || tb.Leases(clk.Now(), 8)[0].Buffered {
		t.Fatal("a refused upgrade changed the lease")
	}
}

// TestPinOnlyBuffered: a read lease is not pinned (its holder's queued
// write would land where another client may read past it), except by a
// retry of the batch whose apply downgraded it; a lease released while
// pinned goes once unpinned.
func TestPinOnlyBuffered(t *testing.T) {
	tb, clk := newTable(t)
	r := mustGrant(t, tb, clk.Now(), req(1, 7, Read, 0, 0), 0)
	if lost := tb.Pin(clk.Now(), 1, []ID{r.ID}, 5); len(lost) != 1 {
		t.Fatalf("a read lease was pinned: lost %v", lost)
	}
	if out, err := tb.Upgrade(clk.Now(), 1, r.ID); err != nil || !out.Granted {
		t.Fatal(out, err)
	}
	if lost := tb.Pin(clk.Now(), 1, []ID{r.ID}, 5); lost != nil {
		t.Fatalf("pin of the upgraded lease: lost %v", lost)
	}
	tb.Unpin([]ID{r.ID})
	if err := tb.Downgrade(clk.Now(), 1, r.ID, 5); err != nil {
		t.Fatal(err)
	}
	if lost := tb.Pin(clk.Now(), 1, []ID{r.ID}, 5); lost != nil {
		t.Fatalf("a retry of the batch that downgraded it: lost %v", lost)
	}
	if lost := tb.Pin(clk.Now(), 1, []ID{r.ID}, 6); len(lost) != 1 {
		t.Fatalf("another batch pinned a read lease: lost %v", lost)
	}
	// Released while pinned: still held (a change of another client
	// waits) until unpinned.
	if n := tb.Release(clk.Now(), 1, []ID{r.ID}); n != 1 {
		t.Fatalf("release: %d", n)
	}
	if busy, at, _ := tb.DrainReaders(clk.Now(), 2, 7, time.Second, false); !busy || !at.After(clk.Now()) {
		t.Fatalf("a lease released while pinned: busy %v, retry at %v (now %v)", busy, at, clk.Now())
	}
	tb.Unpin([]ID{r.ID})
	if busy, _, _ := tb.DrainReaders(clk.Now(), 2, 7, time.Second, true); busy {
		t.Fatal("a lease released while pinned is still held once unpinned")
	}
}
