package lease

import (
	"errors"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/govfs/govfs/internal/clock"
	"github.com/govfs/govfs/internal/ids"
)

const ttl = 10 * time.Second

func newTable(t *testing.T) (*Table, *clock.Manual) {
	t.Helper()
	return New(Config{TTL: ttl}), clock.NewManual(time.Unix(1000, 0))
}

func req(c ClientID, ino ids.Ino, m Mode, off, length uint64) Request {
	return Request{Client: c, Ino: ino, Mode: m, Off: off, End: RangeEnd(off, length)}
}

func mustGrant(t *testing.T, tb *Table, now time.Time, r Request, wait time.Duration) Lease {
	t.Helper()
	out, err := tb.Acquire(now, r, wait)
	if err != nil {
		t.Fatalf("acquire %+v: %v", r, err)
	}
	if !out.Granted {
		t.Fatalf("acquire %+v refused (retry at %v)", r, out.RetryAt)
	}
	return out.Lease
}

func mustRefuse(t *testing.T, tb *Table, now time.Time, r Request, wait time.Duration) Outcome {
	t.Helper()
	out, err := tb.Acquire(now, r, wait)
	if err != nil {
		t.Fatalf("acquire %+v: %v", r, err)
	}
	if out.Granted {
		t.Fatalf("acquire %+v granted %d, want refused", r, out.Lease.ID)
	}
	return out
}

func TestGrantAndConflicts(t *testing.T) {
	tb, clk := newTable(t)
	now := clk.Now()
	r1 := mustGrant(t, tb, now, req(1, 7, Read, 0, 0), 0)
	if r1.Expires != now.Add(ttl) || r1.End != ToEnd {
		t.Fatalf("lease %+v: want whole file, expiring in one TTL", r1)
	}
	// Readers share.
	mustGrant(t, tb, now, req(2, 7, Read, 0, 0), 0)
	// A writer conflicts with both readers; a try (wait 0) revokes nothing.
	out := mustRefuse(t, tb, now, req(3, 7, Write, 100, 10), 0)
	if len(out.Revoked) != 0 || out.RetryAt != now.Add(ttl) {
		t.Fatalf("try: revoked %v, retry at %v; want nothing revoked, retry at expiry", out.Revoked, out.RetryAt)
	}
	// The same client's leases never conflict with each other.
	mustGrant(t, tb, now, req(1, 10, Read, 0, 0), 0)
	mustGrant(t, tb, now, req(1, 10, Write, 0, 10), 0)
	mustGrant(t, tb, now, req(1, 10, Write, 5, 10), 0)
	// Other inodes are independent.
	mustGrant(t, tb, now, req(3, 8, Write, 0, 0), 0)
	// Bad requests.
	for _, bad := range []Request{req(1, 7, 0, 0, 0), {Client: 1, Ino: 7, Mode: Read, Off: 5, End: 5}, req(0, 7, Read, 0, 0), req(1, 0, Read, 0, 0)} {
		if _, err := tb.Acquire(now, bad, 0); !errors.Is(err, ErrBadRequest) {
			t.Errorf("acquire %+v: err %v, want ErrBadRequest", bad, err)
		}
	}
}

func TestOpenRegionsCoexist(t *testing.T) {
	tb, clk := newTable(t)
	now := clk.Now()
	const row = 10 << 20
	for c := ClientID(1); c <= 6; c++ {
		mustGrant(t, tb, now, req(c, 9, Write, uint64(c-1)*row, row), time.Second)
	}
	// Rows touch but do not overlap; a seventh writer straddling rows 2
	// and 3 conflicts with exactly those two.
	out := mustRefuse(t, tb, now, req(7, 9, Write, 2*row-1, 2), time.Second)
	var holders []ClientID
	for _, l := range out.Revoked {
		holders = append(holders, l.Client)
	}
	if !slices.Equal(holders, []ClientID{2, 3}) {
		t.Fatalf("revoked holders %v, want [2 3]", holders)
	}
	// A reader of row 6 (0-based 5) conflicts only with writer 6.
	out = mustRefuse(t, tb, now, req(8, 9, Read, 5*row, row), 0)
	if out.RetryAt != now.Add(ttl) {
		t.Fatalf("retry at %v", out.RetryAt)
	}
	// Past the last row nothing is held.
	mustGrant(t, tb, now, req(8, 9, Read, 6*row, 0), 0)
}

func TestExpiryAndRenewal(t *testing.T) {
	tb, clk := newTable(t)
	w := mustGrant(t, tb, clk.Now(), req(1, 7, Write, 0, 0), 0)
	clk.Advance(ttl / 3)
	if revoke, lost := tb.Renew(clk.Now(), 1, []ID{w.ID}); len(revoke)+len(lost) != 0 {
		t.Fatalf("renew: revoke %v lost %v", revoke, lost)
	}
	// Renewed at TTL/3: still held just before TTL/3+TTL.
	clk.Advance(ttl - time.Millisecond)
	mustRefuse(t, tb, clk.Now(), req(2, 7, Read, 0, 0), 0)
	// Another client cannot renew it.
	if _, lost := tb.Renew(clk.Now(), 2, []ID{w.ID}); !slices.Equal(lost, []ID{w.ID}) {
		t.Fatalf("renew by another client: lost %v", lost)
	}
	// An unreachable holder (no renewal) loses it at TTL.
	clk.Advance(time.Millisecond)
	mustGrant(t, tb, clk.Now(), req(2, 7, Read, 0, 0), 0)
	if _, lost := tb.Renew(clk.Now(), 1, []ID{w.ID}); !slices.Equal(lost, []ID{w.ID}) {
		t.Fatalf("renew after expiry: lost %v, want [%d]", lost, w.ID)
	}
	if tb.Len() != 1 {
		t.Fatalf("table holds %d leases, want 1", tb.Len())
	}
}

func TestRevokeFlow(t *testing.T) {
	tb, clk := newTable(t)
	w := mustGrant(t, tb, clk.Now(), req(1, 7, Write, 0, 100), 0)
	// Client 2 wants an overlapping write and waits: w is revoked.
	out := mustRefuse(t, tb, clk.Now(), req(2, 7, Write, 50, 100), 5*time.Second)
	if len(out.Revoked) != 1 || out.Revoked[0].ID != w.ID {
		t.Fatalf("revoked %v, want [%d]", out.Revoked, w.ID)
	}
	// Asking again revokes nothing new.
	if out := mustRefuse(t, tb, clk.Now(), req(2, 7, Write, 50, 100), 5*time.Second); len(out.Revoked) != 0 {
		t.Fatalf("second ask revoked %v again", out.Revoked)
	}
	// The holder learns it on its keepalive; renewals no longer extend a
	// revoked lease.
	clk.Advance(time.Second)
	revoke, lost := tb.Renew(clk.Now(), 1, []ID{w.ID})
	if !slices.Equal(revoke, []ID{w.ID}) || len(lost) != 0 {
		t.Fatalf("renew: revoke %v lost %v", revoke, lost)
	}
	if r, _ := tb.Check(clk.Now(), 1, []ID{w.ID}); !slices.Equal(r, []ID{w.ID}) {
		t.Fatalf("check: revoke %v", r)
	}
	// Meanwhile a third client's non-conflicting request is not held up.
	mustGrant(t, tb, clk.Now(), req(3, 7, Write, 1000, 10), 0)
	// The holder flushes and releases; the waiter gets it.
	if n := tb.Release(clk.Now(), 1, []ID{w.ID}); n != 1 {
		t.Fatalf("release: %d", n)
	}
	mustGrant(t, tb, clk.Now(), req(2, 7, Write, 50, 100), 5*time.Second)

	// A holder that never answers: the revoked lease ends one TTL after
	// its last renewal however often it renews.
	w2 := mustGrant(t, tb, clk.Now(), req(4, 8, Write, 0, 0), 0)
	mustRefuse(t, tb, clk.Now(), req(5, 8, Read, 0, 0), 20*time.Second)
	for range 5 {
		clk.Advance(ttl / 3)
		tb.Renew(clk.Now(), 4, []ID{w2.ID})
		if clk.Now().Before(w2.Expires) {
			mustRefuse(t, tb, clk.Now(), req(5, 8, Read, 0, 0), 20*time.Second)
		}
	}
	mustGrant(t, tb, clk.Now(), req(5, 8, Read, 0, 0), 20*time.Second)
}

func TestWaitingWriterIsNotStarvedByReaders(t *testing.T) {
	tb, clk := newTable(t)
	r1 := mustGrant(t, tb, clk.Now(), req(1, 7, Read, 0, 0), 0)
	mustRefuse(t, tb, clk.Now(), req(2, 7, Write, 0, 0), 5*time.Second)
	// A new reader queues behind the waiting writer, even though it does
	// not conflict with the current reader.
	out := mustRefuse(t, tb, clk.Now(), req(3, 7, Read, 0, 0), 0)
	if out.RetryAt != clk.Now().Add(5*time.Second) {
		t.Fatalf("retry at %v, want the writer's wait end", out.RetryAt)
	}
	tb.Release(clk.Now(), 1, []ID{r1.ID})
	mustGrant(t, tb, clk.Now(), req(2, 7, Write, 0, 0), 5*time.Second)
	// Once the writer gave up waiting (intent expired) readers go ahead
	// again after it releases.
	clk.Advance(6 * time.Second)
	mustRefuse(t, tb, clk.Now(), req(3, 7, Read, 0, 0), 0)
}

func TestIntentExpiresWhenWaiterGivesUp(t *testing.T) {
	tb, clk := newTable(t)
	w := mustGrant(t, tb, clk.Now(), req(1, 7, Write, 0, 0), 0)
	mustRefuse(t, tb, clk.Now(), req(2, 7, Write, 0, 0), time.Second)
	tb.Release(clk.Now(), 1, []ID{w.ID})
	// Client 2 stopped asking; after its wait, client 3 is not blocked.
	mustRefuse(t, tb, clk.Now(), req(3, 7, Read, 0, 0), 0)
	clk.Advance(time.Second)
	mustGrant(t, tb, clk.Now(), req(3, 7, Read, 0, 0), 0)
}

func TestDrainReaders(t *testing.T) {
	tb, clk := newTable(t)
	r1 := mustGrant(t, tb, clk.Now(), req(1, 7, Read, 0, 0), 0)
	mustGrant(t, tb, clk.Now(), req(2, 7, Read, 0, 0), 0)
	w := mustGrant(t, tb, clk.Now(), req(3, 8, Write, 0, 10), 0)
	// Client 2 changes inode 7: client 1's read lease is revoked, its own
	// is not.
	busy, at, revoked := tb.DrainReaders(clk.Now(), 2, 7, 5*time.Second, false)
	if !busy || at != r1.Expires || len(revoked) != 1 || revoked[0].ID != r1.ID {
		t.Fatalf("drain: busy %v at %v revoked %v", busy, at, revoked)
	}
	// No new reader of 7 from another client meanwhile.
	mustRefuse(t, tb, clk.Now(), req(4, 7, Read, 0, 0), 0)
	tb.Release(clk.Now(), 1, []ID{r1.ID})
	if busy, _, _ := tb.DrainReaders(clk.Now(), 2, 7, 5*time.Second, true); busy {
		t.Fatal("still busy after the reader released")
	}
	if !tb.Draining(clk.Now(), 7) || tb.Draining(clk.Now(), 9) {
		t.Fatal("Draining does not say which inode a change is on its way for")
	}
	tb.DoneDraining(2, 7)
	if tb.Draining(clk.Now(), 7) {
		t.Fatal("Draining after the change was done")
	}
	mustGrant(t, tb, clk.Now(), req(4, 7, Read, 0, 0), 0)
	// An abandoned change keeps its intent until it expires.
	tb.DrainReaders(clk.Now(), 2, 9, time.Second, false)
	tb.AbandonDraining(2, 9)
	if !tb.Draining(clk.Now(), 9) {
		t.Fatal("an abandoned change's intent went before it expired")
	}
	clk.Advance(2 * time.Second)
	if tb.Draining(clk.Now(), 9) {
		t.Fatal("an expired intent still counts")
	}
	// DrainedSince: a change made and done after the mark counts, one
	// done before it does not.
	mark := tb.DrainMark()
	if tb.DrainedSince(clk.Now(), 9, mark) || tb.DrainedSince(clk.Now(), 7, mark) {
		t.Fatal("DrainedSince counts changes done before the mark")
	}
	tb.DrainReaders(clk.Now(), 2, 9, time.Second, false)
	tb.DoneDraining(2, 9)
	if !tb.DrainedSince(clk.Now(), 9, mark) || tb.DrainedSince(clk.Now(), 10, mark) {
		t.Fatal("DrainedSince misses a change made and done after the mark, or counts another inode's")
	}
	// Write leases are not drained (writers on disjoint rows grow the file
	// concurrently).
	if busy, _, _ := tb.DrainReaders(clk.Now(), 4, 8, time.Second, false); busy {
		t.Fatal("a write lease blocked a mutation")
	}
	if _, lost := tb.Renew(clk.Now(), 3, []ID{w.ID}); len(lost) != 0 {
		t.Fatal("drain dropped a write lease")
	}
}

// RecallDirWriters revokes other clients' write directory leases only,
// and leaves nothing behind: the holder may take one again at once, and
// a lease granted after the recall is not waited for.
func TestRecallDirWriters(t *testing.T) {
	tb, clk := newTable(t)
	dw := req(1, 7, Write, 0, 0)
	dw.Dir = true
	w := mustGrant(t, tb, clk.Now(), dw, 0)
	other := mustGrant(t, tb, clk.Now(), req(2, 8, Write, 0, 0), 0) // a plain write lease elsewhere
	// The holder's own read recalls nothing.
	if held, revoked := tb.RecallDirWriters(clk.Now(), 1, 7); len(held)+len(revoked) != 0 {
		t.Fatalf("own recall: held %v revoked %v", held, revoked)
	}
	held, revoked := tb.RecallDirWriters(clk.Now(), 3, 7)
	if !slices.Equal(held, []ID{w.ID}) || len(revoked) != 1 || revoked[0].ID != w.ID {
		t.Fatalf("recall: held %v revoked %v", held, revoked)
	}
	if busy, at := tb.StillHeld(clk.Now(), held); !busy || at != w.Expires {
		t.Fatalf("still held: %v at %v, want true at %v", busy, at, w.Expires)
	}
	// Asked again while it is still held: listed, not revoked twice.
	if again, revoked := tb.RecallDirWriters(clk.Now(), 5, 7); !slices.Equal(again, held) || len(revoked) != 0 {
		t.Fatalf("second recall: held %v revoked %v", again, revoked)
	}
	tb.Release(clk.Now(), 1, []ID{w.ID})
	if busy, _ := tb.StillHeld(clk.Now(), held); busy {
		t.Fatal("still busy after the holder released")
	}
	// No intent: the holder takes its directory lease again at once, and
	// the first recall does not wait for the new one.
	mustGrant(t, tb, clk.Now(), dw, 0)
	if busy, _ := tb.StillHeld(clk.Now(), held); busy {
		t.Fatal("a lease granted after the recall kept it busy")
	}
	// Read directory leases and plain write leases are not recalled.
	dr := req(4, 9, Read, 0, 0)
	dr.Dir = true
	mustGrant(t, tb, clk.Now(), dr, 0)
	for _, ino := range []ids.Ino{8, 9} {
		if held, revoked := tb.RecallDirWriters(clk.Now(), 3, ino); len(held)+len(revoked) != 0 {
			t.Fatalf("recall on %d: held %v revoked %v", ino, held, revoked)
		}
	}
	if _, lost := tb.Renew(clk.Now(), 2, []ID{other.ID}); len(lost) != 0 {
		t.Fatal("the recall dropped a plain write lease")
	}
	// An expired holder keeps nothing busy.
	held, _ = tb.RecallDirWriters(clk.Now(), 3, 7)
	clk.Advance(2 * ttl)
	if busy, _ := tb.StillHeld(clk.Now(), held); busy || len(held) != 1 {
		t.Fatalf("an expired lease kept the recall busy (held %v)", held)
	}
}

// DrainAll (a subtree move) revokes write leases too, waits for locks
// without revoking them, and keeps every new request out meanwhile.
func TestDrainAll(t *testing.T) {
	tb, clk := newTable(t)
	w := mustGrant(t, tb, clk.Now(), req(3, 8, Write, 0, 10), 0)
	lk := req(4, 8, Read, 100, 10)
	lk.Lock = true
	l := mustGrant(t, tb, clk.Now(), lk, 0)
	busy, _, revoked := tb.DrainAll(clk.Now(), 9, 8, 5*time.Second, false)
	if !busy || len(revoked) != 1 || revoked[0].ID != w.ID {
		t.Fatalf("drain all: busy %v revoked %v, want the write lease revoked", busy, revoked)
	}
	if rv, _ := tb.Renew(clk.Now(), 3, []ID{w.ID}); len(rv) != 1 {
		t.Fatal("the revoked write lease is renewed")
	}
	if rv, _ := tb.Renew(clk.Now(), 4, []ID{l.ID}); len(rv) != 0 {
		t.Fatal("a lock was revoked")
	}
	// No new lease of any kind, no lock, while the move drains.
	mustRefuse(t, tb, clk.Now(), req(5, 8, Write, 200, 10), 0)
	lk2 := req(6, 8, Write, 300, 10)
	lk2.Lock = true
	mustRefuse(t, tb, clk.Now(), lk2, 0)
	tb.Release(clk.Now(), 3, []ID{w.ID})
	if busy, _, _ := tb.DrainAll(clk.Now(), 9, 8, 5*time.Second, true); !busy {
		t.Fatal("a held lock did not keep the drain busy")
	}
	tb.Release(clk.Now(), 4, []ID{l.ID})
	if busy, _, _ := tb.DrainAll(clk.Now(), 9, 8, 5*time.Second, true); busy {
		t.Fatal("still busy with nothing held")
	}
	tb.DoneDraining(9, 8)
	mustGrant(t, tb, clk.Now(), req(5, 8, Write, 200, 10), 0)
}

func TestNewMinisterFencing(t *testing.T) {
	tb, clk := newTable(t)
	old := mustGrant(t, tb, clk.Now(), req(1, 7, Write, 0, 0), 0)
	tb.StartTerm(clk.Now())
	if _, lost := tb.Renew(clk.Now(), 1, []ID{old.ID}); !slices.Equal(lost, []ID{old.ID}) {
		t.Fatalf("a new term still knows lease %d", old.ID)
	}
	// Nothing, read or write, for one TTL.
	for _, r := range []Request{req(2, 7, Write, 0, 0), req(2, 9, Read, 0, 0), req(1, 7, Write, 0, 0)} {
		out := mustRefuse(t, tb, clk.Now(), r, time.Second)
		if out.RetryAt != clk.Now().Add(ttl) {
			t.Fatalf("retry at %v, want fence end", out.RetryAt)
		}
	}
	clk.Advance(ttl - time.Millisecond)
	mustRefuse(t, tb, clk.Now(), req(2, 7, Write, 0, 0), 0)
	clk.Advance(time.Millisecond)
	l := mustGrant(t, tb, clk.Now(), req(2, 7, Write, 0, 0), 0)
	if l.ID <= old.ID {
		t.Fatalf("lease id %d reused (old %d)", l.ID, old.ID)
	}
}

func TestMaxPerClient(t *testing.T) {
	tb := New(Config{TTL: ttl, MaxPerClient: 2})
	now := time.Unix(0, 0)
	mustGrant(t, tb, now, req(1, 7, Read, 0, 0), 0)
	mustGrant(t, tb, now, req(1, 8, Read, 0, 0), 0)
	if _, err := tb.Acquire(now, req(1, 9, Read, 0, 0), 0); !errors.Is(err, ErrTooMany) {
		t.Fatalf("third lease: %v", err)
	}
	mustGrant(t, tb, now, req(2, 9, Read, 0, 0), 0)
}

// TestMaxClients: past the bound on clients, a new client is refused
// while one holding leases still gets more; room comes back when a
// client's last lease goes.
func TestMaxClients(t *testing.T) {
	tb := New(Config{TTL: ttl, MaxClients: 2})
	now := time.Unix(0, 0)
	mustGrant(t, tb, now, req(1, 7, Read, 0, 0), 0)
	mustGrant(t, tb, now, req(2, 7, Read, 0, 0), 0)
	if _, err := tb.Acquire(now, req(3, 7, Read, 0, 0), 0); !errors.Is(err, ErrTooMany) {
		t.Fatalf("a third client: %v", err)
	}
	mustGrant(t, tb, now, req(1, 8, Read, 0, 0), 0)
	// All leases expire: the table has room again.
	mustGrant(t, tb, now.Add(2*ttl), req(3, 7, Read, 0, 0), 0)
}

func lockReq(c ClientID, owner uint64, ino ids.Ino, m Mode, off, length uint64) Request {
	r := req(c, ino, m, off, length)
	r.Lock, r.Owner = true, owner
	return r
}

// Locks (fcntl/flock through a mount) conflict only with locks, between
// owners even of one client, are never revoked, and a held lock can be
// split or downgraded past a queue.
func TestLocks(t *testing.T) {
	tb, clk := newTable(t)
	now := clk.Now()
	// A caching read lease and a write lock coexist.
	mustGrant(t, tb, now, req(2, 7, Read, 0, 0), 0)
	w := mustGrant(t, tb, now, lockReq(1, 11, 7, Write, 0, 100), 0)
	// Another owner of the same client conflicts with it.
	out := mustRefuse(t, tb, now, lockReq(1, 12, 7, Read, 50, 10), 0)
	if out.Conflict == nil || out.Conflict.ID != w.ID {
		t.Fatalf("conflict %+v, want lease %d", out.Conflict, w.ID)
	}
	// A waiting request of another client revokes nothing and queues.
	out = mustRefuse(t, tb, now, lockReq(2, 21, 7, Write, 0, 0), time.Minute)
	if len(out.Revoked) != 0 {
		t.Fatalf("a lock was revoked: %v", out.Revoked)
	}
	// The holder renews it: no revoke pending.
	clk.Advance(ttl / 2)
	if revoke, lost := tb.Renew(clk.Now(), 1, []ID{w.ID}); len(revoke)+len(lost) != 0 {
		t.Fatalf("renew: revoke %v lost %v", revoke, lost)
	}
	// Splitting the held lock ([0,40) write, [60,100) read) is granted
	// ahead of the queued writer; a new range [200,300) is not.
	mustGrant(t, tb, clk.Now(), lockReq(1, 11, 7, Write, 0, 40), 0)
	mustGrant(t, tb, clk.Now(), lockReq(1, 11, 7, Read, 60, 40), 0)
	mustRefuse(t, tb, clk.Now(), lockReq(1, 11, 7, Write, 200, 100), 0)
	// A change by another client drains caching readers, not locks.
	busy, _, revoked := tb.DrainReaders(clk.Now(), 3, 7, time.Second, false)
	if !busy || len(revoked) != 1 || revoked[0].Lock {
		t.Fatalf("drain: busy %v revoked %v, want the one caching read lease", busy, revoked)
	}
}

// Lease ids start where the config says (a minister's term), and a
// request refused for the per-client bound leaves no intent behind.
func TestFirstIDAndRefusedIntent(t *testing.T) {
	clk := clock.NewManual(time.Unix(1000, 0))
	tb := New(Config{TTL: ttl, FirstID: 7 << 32, MaxPerClient: 1})
	l := mustGrant(t, tb, clk.Now(), req(1, 5, Read, 0, 0), 0)
	if l.ID != 7<<32 {
		t.Fatalf("first id %d, want %d", l.ID, uint64(7)<<32)
	}
	// Client 1 is at its bound: a waiting request fails with ErrTooMany
	// and must not hold client 2's conflicting request back.
	if _, err := tb.Acquire(clk.Now(), req(1, 6, Write, 0, 0), time.Minute); !errors.Is(err, ErrTooMany) {
		t.Fatalf("acquire past the bound: %v", err)
	}
	mustGrant(t, tb, clk.Now(), req(2, 6, Read, 0, 0), 0)
}

// A retried acquisition (same token) gets its first grant back, not a
// second lease; another token is another acquisition.
func TestTokenRetry(t *testing.T) {
	tb, clk := newTable(t)
	r := req(1, 9, Write, 0, 100)
	r.Token = 42
	first := mustGrant(t, tb, clk.Now(), r, 0)
	again := mustGrant(t, tb, clk.Now(), r, 0)
	if again.ID != first.ID || len(tb.byClient[1]) != 1 {
		t.Fatalf("retry granted %d (client holds %d), want the first lease %d again", again.ID, len(tb.byClient[1]), first.ID)
	}
	r.Token = 43
	if other := mustGrant(t, tb, clk.Now(), r, 0); other.ID == first.ID {
		t.Fatal("a new acquisition got the old lease")
	}
	// Once the lease is gone the token names nothing.
	tb.Release(clk.Now(), 1, []ID{first.ID})
	r.Token = 42
	if l := mustGrant(t, tb, clk.Now(), r, 0); l.ID == first.ID {
		t.Fatal("a released lease came back")
	}
}

// An owner upgrading its read lock is not queued behind a writer that
// waits for that very lock (which would deadlock both), and a waiter
// asking again with a new token keeps its place.
func TestLockUpgradePastQueue(t *testing.T) {
	tb, clk := newTable(t)
	now := clk.Now()
	mustGrant(t, tb, now, lockReq(1, 11, 7, Read, 0, 100), 0)
	w := lockReq(2, 21, 7, Write, 0, 100)
	w.Token = 1
	mustRefuse(t, tb, now, w, time.Minute) // queued behind the read lock
	mustGrant(t, tb, now, lockReq(1, 11, 7, Write, 0, 100), time.Minute)
	w.Token = 2
	mustRefuse(t, tb, now, w, time.Minute)
	if n := len(tb.intents[7]); n != 1 {
		t.Fatalf("%d intents for one waiter asking twice, want 1", n)
	}
}

// TestDirLeases: a directory lease is exclusive, drained by another
// client's entry change (not by its holder's own), and the drain's intent
// keeps new directory leases out until the change is done.
func TestDirLeases(t *testing.T) {
	tb, clk := newTable(t)
	now := clk.Now()
	dir := func(c ClientID) Request { r := req(c, 9, Write, 0, 0); r.Dir = true; return r }
	l := mustGrant(t, tb, now, dir(1), 0)
	mustRefuse(t, tb, now, dir(2), 0)
	// The holder's own change drains nothing.
	if busy, _, revoked := tb.DrainReaders(now, 1, 9, time.Second, false); busy || len(revoked) != 0 {
		t.Fatalf("own change: busy %v, revoked %v", busy, revoked)
	}
	tb.DoneDraining(1, 9)
	// Another client's change revokes it and waits for it.
	busy, at, revoked := tb.DrainReaders(now, 2, 9, time.Second, false)
	if !busy || at != l.Expires || len(revoked) != 1 || revoked[0].ID != l.ID {
		t.Fatalf("other's change: busy %v at %v revoked %v; want the directory lease revoked", busy, at, revoked)
	}
	tb.Release(now, 1, []ID{l.ID})
	if busy, _, _ := tb.DrainReaders(now, 2, 9, time.Second, true); busy {
		t.Fatal("still busy after the release")
	}
	// Until that change is done, nobody else gets a directory lease.
	mustRefuse(t, tb, now, dir(3), 0)
	tb.DoneDraining(2, 9)
	mustGrant(t, tb, now, dir(3), 0)
	// A plain write lease is not drained by entry changes.
	w := mustGrant(t, tb, now, req(4, 10, Write, 0, 0), 0)
	if busy, _, revoked := tb.DrainReaders(now, 2, 10, 0, false); busy || len(revoked) != 0 {
		t.Fatalf("write lease %d drained: busy %v, revoked %v", w.ID, busy, revoked)
	}
	// A directory lease must be a whole-range lease, not a lock.
	bad := req(5, 11, Read, 10, 20)
	bad.Dir = true
	if _, err := tb.Acquire(now, bad, 0); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("directory lease on a byte range: %v, want ErrBadRequest", err)
	}
	bad = lockReq(5, 1, 11, Read, 0, 0)
	bad.Dir = true
	if _, err := tb.Acquire(now, bad, 0); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("directory lock: %v, want ErrBadRequest", err)
	}
}

// TestDirReadLeases: read directory leases (listings cached) are shared,
// keep a write directory lease of another client out (a try is refused,
// nothing revoked), and are drained by another client's entry change.
func TestDirReadLeases(t *testing.T) {
	tb, clk := newTable(t)
	now := clk.Now()
	dir := func(c ClientID, m Mode) Request { r := req(c, 9, m, 0, 0); r.Dir = true; return r }
	r1 := mustGrant(t, tb, now, dir(1, Read), 0)
	r2 := mustGrant(t, tb, now, dir(2, Read), 0)
	mustRefuse(t, tb, now, dir(3, Write), 0)
	// Nor may a holder of one take the write one while another client
	// holds a read one.
	mustRefuse(t, tb, now, dir(1, Write), 0)
	busy, _, revoked := tb.DrainReaders(now, 3, 9, time.Second, false)
	if !busy || len(revoked) != 2 {
		t.Fatalf("another client's entry change: busy %v, revoked %v; want both read directory leases revoked", busy, revoked)
	}
	tb.Release(now, 1, []ID{r1.ID})
	tb.Release(now, 2, []ID{r2.ID})
	if busy, _, _ := tb.DrainReaders(now, 3, 9, time.Second, true); busy {
		t.Fatal("still busy after the releases")
	}
	tb.DoneDraining(3, 9)
	mustGrant(t, tb, now, dir(1, Read), 0)
}

// TestDrainIntentSharedByConcurrentChanges: two changes of one inode by
// one client in progress at once share the intent; it keeps readers out
// until the second is done, not only the first.
func TestDrainIntentSharedByConcurrentChanges(t *testing.T) {
	tb, clk := newTable(t)
	now := clk.Now()
	tb.DrainReaders(now, 2, 7, time.Second, false)
	tb.DrainReaders(now, 2, 7, time.Second, false)
	tb.DrainReaders(now, 2, 7, time.Second, true) // the second polling again
	tb.DoneDraining(2, 7)
	mustRefuse(t, tb, now, req(1, 7, Read, 0, 0), 0)
	tb.DoneDraining(2, 7)
	mustGrant(t, tb, now, req(1, 7, Read, 0, 0), 0)
}

// TestAbandonedDrainKeepsIntentUntilExpiry: a change that gave up
// waiting leaves its intent (readers stay out while the client asks
// again) but no longer holds it: the retry's DoneDraining drops it.
func TestAbandonedDrainKeepsIntentUntilExpiry(t *testing.T) {
	tb, clk := newTable(t)
	now := clk.Now()
	tb.DrainReaders(now, 2, 7, time.Second, false)
	tb.AbandonDraining(2, 7)
	mustRefuse(t, tb, now, req(1, 7, Read, 0, 0), 0)
	tb.DrainReaders(now, 2, 7, time.Second, false) // the client's retry
	tb.DoneDraining(2, 7)
	mustGrant(t, tb, now, req(1, 7, Read, 0, 0), 0)
}

// TestReclaimAfterMinisterChange: holders take their leases over from a
// previous minister during the fence, under the same ids; conflicting or
// late reclaims are refused; EndFence lets new grants in at once, and
// the reclaimed leases still decide conflicts (locks included).
func TestReclaimAfterMinisterChange(t *testing.T) {
	old, clk := newTable(t)
	w := mustGrant(t, old, clk.Now(), req(1, 7, Write, 0, 100), 0)
	lk := req(2, 7, Write, 200, 300)
	lk.Lock, lk.Owner = true, 42
	lock := mustGrant(t, old, clk.Now(), lk, 0)
	r := mustGrant(t, old, clk.Now(), req(3, 9, Read, 0, 0), 0)

	tb := New(Config{TTL: ttl, FirstID: 1 << 32})
	tb.StartTerm(clk.Now())
	clk.Advance(ttl / 10)
	for _, l := range []Lease{w, lock, r} {
		if err := tb.Reclaim(clk.Now(), l); err != nil {
			t.Fatalf("reclaim %d: %v", l.ID, err)
		}
	}
	if err := tb.Reclaim(clk.Now(), w); err != nil {
		t.Fatalf("a repeated reclaim: %v", err)
	}
	// A holder claiming a range that conflicts with a reclaimed lease is
	// mistaken: refused. So is a different lease under a taken id.
	bad := Lease{ID: 77, Request: req(4, 7, Write, 50, 60)}
	if err := tb.Reclaim(clk.Now(), bad); !errors.Is(err, ErrNotReclaimable) {
		t.Fatalf("conflicting reclaim: %v", err)
	}
	taken := Lease{ID: w.ID, Request: req(4, 8, Read, 0, 0)}
	if err := tb.Reclaim(clk.Now(), taken); !errors.Is(err, ErrNotReclaimable) {
		t.Fatalf("reclaim under a taken id: %v", err)
	}
	// An id of this table's own range was never a predecessor's.
	if err := tb.Reclaim(clk.Now(), Lease{ID: 1<<32 + 5, Request: req(4, 20, Read, 0, 0)}); !errors.Is(err, ErrNotReclaimable) {
		t.Fatalf("reclaim of an id of this term: %v", err)
	}
	// A lease being given back when the minister changed stays revoked:
	// its holder releases it, nothing renews it.
	giving := mustGrant(t, old, clk.Now(), req(4, 21, Read, 0, 0), 0)
	giving.Revoked = true
	if err := tb.Reclaim(clk.Now(), giving); err != nil {
		t.Fatal(err)
	}
	if revoke, _ := tb.Renew(clk.Now(), 4, []ID{giving.ID}); !slices.Equal(revoke, []ID{giving.ID}) {
		t.Fatalf("a reclaimed revoked lease renewed: revoke %v", revoke)
	}
	tb.Release(clk.Now(), 4, []ID{giving.ID})
	// Malformed descriptions are refused and change nothing.
	for _, l := range []Lease{{ID: 80, Request: req(4, 7, 0, 0, 0)}, {ID: 81, Request: req(0, 7, Read, 0, 0)},
		{ID: 82, Request: Request{Client: 4, Ino: 7, Mode: Read, Off: 10, End: 10}}} {
		if err := tb.Reclaim(clk.Now(), l); !errors.Is(err, ErrBadRequest) {
			t.Fatalf("reclaim of %+v: %v, want ErrBadRequest", l.Request, err)
		}
	}
	if tb.Len() != 3 {
		t.Fatalf("%d leases after the refused reclaims, want 3", tb.Len())
	}
	// Still fenced: nothing new.
	mustRefuse(t, tb, clk.Now(), req(5, 11, Read, 0, 0), 0)
	tb.EndFence(clk.Now())
	if tb.Fenced(clk.Now()) {
		t.Fatal("fenced after EndFence")
	}
	mustGrant(t, tb, clk.Now(), req(5, 11, Read, 0, 0), 0)
	// The reclaimed leases are renewed as the holders' own and decide
	// conflicts.
	if revoke, lost := tb.Renew(clk.Now(), 1, []ID{w.ID}); len(revoke)+len(lost) != 0 {
		t.Fatalf("renew a reclaimed lease: revoke %v lost %v", revoke, lost)
	}
	mustRefuse(t, tb, clk.Now(), req(5, 7, Read, 10, 10), 0)
	other := req(5, 7, Write, 250, 260)
	other.Lock, other.Owner = true, 1
	mustRefuse(t, tb, clk.Now(), other, 0)
	// After the fence nothing more is reclaimed.
	late := Lease{ID: 99, Request: req(6, 12, Read, 0, 0)}
	if err := tb.Reclaim(clk.Now(), late); !errors.Is(err, ErrNotReclaimable) {
		t.Fatalf("reclaim after the fence: %v", err)
	}
	// Unrenewed, a reclaimed lease expires a TTL after its reclaim.
	clk.Advance(ttl)
	mustGrant(t, tb, clk.Now(), other, 0)
}

// TestExpireSkipMatchesFullScan runs random operations on two tables,
// one of which scans every lease and intent at every call (scanAt
// cleared first, as before the skip existed), and checks that they
// answer alike: expire's skip (scanAt) and the revoked-lease index
// (revokedOf) change no answer.
func TestExpireSkipMatchesFullScan(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 27))
	fast, ref := New(Config{TTL: ttl}), New(Config{TTL: ttl})
	now := time.Unix(1000, 0)
	held := map[ClientID][]ID{}
	for i := range 20000 {
		now = now.Add(time.Duration(rng.IntN(700)) * time.Millisecond)
		ref.scanAt = time.Time{}
		c := ClientID(1 + rng.IntN(4))
		ino := ids.Ino(1 + rng.IntN(12))
		wait := time.Duration(rng.IntN(3)) * ttl / 4
		var a, b any
		switch op := rng.IntN(13); op {
		case 0, 1, 2:
			m := Read
			if rng.IntN(3) == 0 {
				m = Write
			}
			r := req(c, ino, m, 0, 0)
			r.Dir = rng.IntN(4) == 0
			o1, e1 := fast.Acquire(now, r, wait)
			o2, e2 := ref.Acquire(now, r, wait)
			a, b = []any{o1, e1 == nil}, []any{o2, e2 == nil}
			if o1.Granted {
				held[c] = append(held[c], o1.Lease.ID)
			}
		case 3:
			r1, l1 := fast.Renew(now, c, held[c])
			r2, l2 := ref.Renew(now, c, held[c])
			a, b = []any{r1, l1}, []any{r2, l2}
		case 4:
			a, b = fast.RevokedOf(now, c), ref.RevokedOf(now, c)
		case 5:
			if len(held[c]) > 0 {
				k := rng.IntN(len(held[c]))
				list := []ID{held[c][k]}
				a, b = fast.Release(now, c, list), ref.Release(now, c, list)
			}
		case 6:
			b1, t1, v1 := fast.DrainReaders(now, c, ino, wait, false)
			b2, t2, v2 := ref.DrainReaders(now, c, ino, wait, false)
			a, b = []any{b1, t1, v1}, []any{b2, t2, v2}
		case 7:
			fast.DoneDraining(c, ino)
			ref.DoneDraining(c, ino)
			a, b = fast.ClientLeases(now, c), ref.ClientLeases(now, c)
		case 8:
			r1, l1 := fast.Check(now, c, held[c])
			r2, l2 := ref.Check(now, c, held[c])
			a, b = []any{r1, l1}, []any{r2, l2}
		case 9:
			h1, v1 := fast.RecallDirWriters(now, c, ino)
			h2, v2 := ref.RecallDirWriters(now, c, ino)
			a, b = []any{h1, v1}, []any{h2, v2}
		case 10:
			again := rng.IntN(2) == 0
			b1, t1, v1 := fast.DrainAll(now, c, ino, wait, again)
			b2, t2, v2 := ref.DrainAll(now, c, ino, wait, again)
			a, b = []any{b1, t1, v1}, []any{b2, t2, v2}
			if rng.IntN(2) == 0 {
				fast.AbandonDraining(c, ino)
				ref.AbandonDraining(c, ino)
			}
		case 11:
			a, b = fast.Leases(now, ino), ref.Leases(now, ino)
		case 12:
			if rng.IntN(40) == 0 {
				// A new term: everything forgotten, then leases of the
				// predecessor reclaimed during the fence.
				fast.StartTerm(now)
				ref.StartTerm(now)
				held = map[ClientID][]ID{}
			}
		}
		// The revoked index against a walk of every lease's flag (after
		// RevokedOf's own expiry), and against the always-scanning table.
		for cl := ClientID(1); cl <= 4; cl++ {
			got := fast.RevokedOf(now, cl)
			var walk []ID
			for id, l := range fast.byClient[cl] {
				if l.Revoked {
					walk = append(walk, id)
				}
			}
			slices.Sort(walk)
			if !slices.Equal(got, walk) {
				t.Fatalf("step %d: RevokedOf(%d) %v, the leases' flags say %v", i, cl, got, walk)
			}
			ref.scanAt = time.Time{}
			if want := ref.RevokedOf(now, cl); !slices.Equal(got, want) {
				t.Fatalf("step %d: RevokedOf(%d) %v with skipped scans, %v scanning always", i, cl, got, want)
			}
		}
		if next := fast.NextExpiry(); !next.IsZero() && fast.scanAt.After(next) {
			t.Fatalf("step %d: expiry scan due at %v, after the earliest expiry %v", i, fast.scanAt, next)
		}
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("step %d: skipping scans answered %+v, scanning always %+v", i, a, b)
		}
		if fast.Len() < ref.Len() {
			t.Fatalf("step %d: %d leases with skipped scans, %d scanning always: one expired early", i, fast.Len(), ref.Len())
		}
	}
	if len(fast.revokedOf) == 0 && len(ref.revokedOf) == 0 {
		t.Log("no revoked lease left at the end")
	}
}
