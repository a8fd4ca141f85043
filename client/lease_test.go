package client

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/metanode"
	"github.com/govfs/govfs/internal/testcluster"
	"github.com/govfs/govfs/internal/wire"
)

// leaseTTL is the TTL of the in-process clusters of the lease tests:
// short, so expiry and fencing take a second, not ten.
const leaseTTL = time.Second

func leaseCluster(t *testing.T) *testcluster.InProc {
	t.Helper()
	return testcluster.NewInProcConfig(t, 3, func(c *metanode.Config) { c.LeaseTTL = leaseTTL })
}

func leaseClient(t *testing.T, addrs []string) *Client {
	t.Helper()
	cfg := DefaultConfig()
	cfg.MetaAddrs = addrs
	cfg.OpTimeout = 20 * time.Second
	c, err := New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// leaseFile creates a file and returns its inode.
func leaseFile(t *testing.T, c *Client, name string) ids.Ino {
	t.Helper()
	f, err := c.Open(t.Context(), "/"+name, syscall.O_RDWR|syscall.O_CREAT, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	ino := f.Ino()
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return ino
}

// revokeCounter is an OnRevoke that counts calls.
type revokeCounter struct{ revoked, lost atomic.Int32 }

func (r *revokeCounter) on(_ *Lease, lost bool) {
	if lost {
		r.lost.Add(1)
	} else {
		r.revoked.Add(1)
	}
}

// stopMinister stops the root ministry's leader and returns when.
func stopMinister(t *testing.T, cl *testcluster.InProc) time.Time {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	old, err := cl.Leader(ctx, ids.RootMinistry)
	if err != nil {
		t.Fatal(err)
	}
	cl.Stop(old)
	return time.Now()
}

// awaitFirstLease waits out a fence, if any, on a freshly formed cluster
// (there is none for the first minister, but a test must not depend on
// which node won which election).
func acquireSoon(t *testing.T, c *Client, ino ids.Ino, mode LeaseMode, off, n int64, rc *revokeCounter) *Lease {
	t.Helper()
	opts := LeaseOptions{Wait: 3 * leaseTTL}
	if rc != nil {
		opts.OnRevoke = rc.on
	}
	l, err := c.AcquireLease(t.Context(), ino, mode, off, n, opts)
	if err != nil {
		t.Fatalf("acquire %v [%d,+%d) on %v: %v", mode, off, n, ino, err)
	}
	return l
}

func TestLeaseConflictRevokeAndOpenRegions(t *testing.T) {
	cl := leaseCluster(t)
	a, b := leaseClient(t, cl.Addrs()), leaseClient(t, cl.Addrs())
	ino := leaseFile(t, a, "f")
	var ra revokeCounter
	wa := acquireSoon(t, a, ino, LeaseWrite, 0, 100, &ra)
	if !wa.Valid() {
		t.Fatal("fresh lease not valid")
	}
	// B's try on an overlapping range fails at once and revokes nothing.
	start := time.Now()
	if _, err := b.AcquireLease(t.Context(), ino, LeaseRead, 50, 100, LeaseOptions{}); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("conflicting try: %v, want EAGAIN", err)
	}
	if time.Since(start) > leaseTTL/2 {
		t.Fatalf("a try took %v", time.Since(start))
	}
	// A disjoint range coexists (open region).
	wb := acquireSoon(t, b, ino, LeaseWrite, 100, 100, nil)
	// A's lease is renewed in the background past its TTL.
	time.Sleep(2 * leaseTTL)
	if !wa.Valid() || !wb.Valid() || ra.revoked.Load()+ra.lost.Load() != 0 {
		t.Fatalf("after 2 TTLs: valid %v %v, revokes %d lost %d", wa.Valid(), wb.Valid(), ra.revoked.Load(), ra.lost.Load())
	}
	// B waits for an overlapping range: A is asked to give its lease
	// back, does so, and B gets the range well before A's lease would
	// have expired.
	start = time.Now()
	rb := acquireSoon(t, b, ino, LeaseRead, 0, 150, nil)
	if took := time.Since(start); took > leaseTTL*3/4 {
		t.Fatalf("revoke took %v (TTL %v): the holder did not give the lease back", took, leaseTTL)
	}
	if ra.revoked.Load() != 1 {
		t.Fatalf("A's OnRevoke ran %d times", ra.revoked.Load())
	}
	select {
	case <-wa.Done():
	case <-time.After(time.Second):
		t.Fatal("A's lease not ended after the revoke")
	}
	if wa.Valid() {
		t.Fatal("A's revoked lease still valid")
	}
	// Now A conflicts with B's read lease.
	if _, err := a.AcquireLease(t.Context(), ino, LeaseWrite, 0, 10, LeaseOptions{}); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("A's write over B's read lease: %v, want EAGAIN", err)
	}
	for _, l := range []*Lease{rb, wb} {
		if err := l.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	acquireSoon(t, a, ino, LeaseWrite, 0, 0, nil)
}

func TestLeaseOfUnreachableHolderExpires(t *testing.T) {
	cl := leaseCluster(t)
	a, b := leaseClient(t, cl.Addrs()), leaseClient(t, cl.Addrs())
	ino := leaseFile(t, a, "f")
	acquireSoon(t, a, ino, LeaseWrite, 0, 0, nil)
	// A vanishes without releasing (Close stops renewing; nothing is
	// sent).
	a.Close()
	start := time.Now()
	acquireSoon(t, b, ino, LeaseWrite, 0, 0, nil)
	if took := time.Since(start); took < leaseTTL/2 || took > 3*leaseTTL {
		t.Fatalf("B got the lease after %v; want about one TTL (%v)", took, leaseTTL)
	}
}

func TestReadLeaseIsRevokedBeforeAChange(t *testing.T) {
	cl := leaseCluster(t)
	a, b := leaseClient(t, cl.Addrs()), leaseClient(t, cl.Addrs())
	ino := leaseFile(t, a, "f")
	var ra revokeCounter
	ra2 := &ra
	var revokedAt atomic.Int64
	l, err := a.AcquireLease(t.Context(), ino, LeaseRead, 0, 0, LeaseOptions{Wait: 3 * leaseTTL, OnRevoke: func(l *Lease, lost bool) {
		revokedAt.Store(time.Now().UnixNano())
		ra2.on(l, lost)
	}})
	if err != nil {
		t.Fatal(err)
	}
	// A's own change does not revoke its read lease.
	if err := a.Chmod(t.Context(), "/f", 0o600); err != nil {
		t.Fatal(err)
	}
	if !l.Valid() {
		t.Fatal("the holder's own chmod ended its read lease")
	}
	// B's chmod returns only after A was asked to give the lease back.
	if err := b.Chmod(t.Context(), "/f", 0o640); err != nil {
		t.Fatal(err)
	}
	done := time.Now().UnixNano()
	if ra.revoked.Load() != 1 || revokedAt.Load() == 0 || revokedAt.Load() > done {
		t.Fatalf("revokes %d at %d, chmod done at %d", ra.revoked.Load(), revokedAt.Load(), done)
	}
	// Later reads see the change (linearizable: A's session reads may go
	// to a clerk that has not applied B's change yet).
	attr, err := a.Stat(t.Context(), "/f", Linearizable())
	if err != nil || attr.GetMode()&0o777 != 0o640 {
		t.Fatalf("stat after the change: %v %o", err, attr.GetMode())
	}
}

// TestLeaseReclaimedAfterMinisterChange: when the minister stops, its
// clients' leases and locks are taken over by the new minister
// (reclaim): none is lost, a conflicting lock is never granted while its
// holder keeps it, and the new minister's fence ends once every client
// with a lease session has checked in, well before one TTL.
func TestLeaseReclaimedAfterMinisterChange(t *testing.T) {
	const ttl = 3 * time.Second
	cl := testcluster.NewInProcConfig(t, 3, func(c *metanode.Config) { c.LeaseTTL = ttl })
	a, b, idle := leaseClient(t, cl.Addrs()), leaseClient(t, cl.Addrs()), leaseClient(t, cl.Addrs())
	f, g, u := leaseFile(t, a, "f"), leaseFile(t, a, "g"), leaseFile(t, a, "u")
	var ra revokeCounter
	wait := LeaseOptions{Wait: 3 * ttl, OnRevoke: ra.on}
	w, err := a.AcquireLease(t.Context(), f, LeaseWrite, 0, 0, wait)
	if err != nil {
		t.Fatal(err)
	}
	lockOpts := wait
	lockOpts.Lock, lockOpts.Owner = true, 1
	lock, err := a.AcquireLease(t.Context(), g, LeaseWrite, 0, 0, lockOpts)
	if err != nil {
		t.Fatal(err)
	}
	// A client that held a lease and gave it back still has a session:
	// its empty keepalives count as its reclaim.
	l, err := idle.AcquireLease(t.Context(), u, LeaseRead, 0, 0, LeaseOptions{Wait: 3 * ttl})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	stopped := stopMinister(t, cl)
	// B's conflicting lock is refused throughout: A's lock was taken over.
	bLock := LeaseOptions{Lock: true, Owner: 2}
	var fenceOver time.Duration
	for time.Since(stopped) < ttl+ttl/2 {
		if _, err := b.AcquireLease(t.Context(), g, LeaseWrite, 0, 0, bLock); err == nil {
			t.Fatalf("B was granted A's lock %v after the minister stopped", time.Since(stopped))
		} else if !errors.Is(err, syscall.EAGAIN) {
			t.Fatalf("B's lock try: %v", err)
		}
		// A lease nobody holds: granted as soon as the fence ends.
		if fenceOver == 0 {
			if l, err := b.AcquireLease(t.Context(), u, LeaseRead, 0, 0, LeaseOptions{}); err == nil {
				fenceOver = time.Since(stopped)
				_ = l.Release(t.Context())
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	if fenceOver == 0 || fenceOver >= ttl {
		t.Fatalf("the new minister's fence lasted %v (TTL %v): the leases were not reclaimed", fenceOver, ttl)
	}
	t.Logf("a lease was granted %v after the minister stopped (TTL %v)", fenceOver.Round(time.Millisecond), ttl)
	if ra.lost.Load() != 0 || ra.revoked.Load() != 0 || !w.Valid() || !lock.Valid() {
		t.Fatalf("A's leases after the change: lost %d revoked %d, write valid %v, lock valid %v",
			ra.lost.Load(), ra.revoked.Load(), w.Valid(), lock.Valid())
	}
	// The reclaimed write lease decides conflicts: B's read lease waits
	// for A to give it back.
	var rb revokeCounter
	acquireSoon(t, b, f, LeaseRead, 0, 0, &rb)
	if ra.revoked.Load() != 1 {
		t.Fatalf("A's write lease revoked %d times", ra.revoked.Load())
	}
	// Once A unlocks, B's lock is granted.
	if err := lock.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	bLock.Wait = 3 * ttl
	if _, err := b.AcquireLease(t.Context(), g, LeaseWrite, 0, 0, bLock); err != nil {
		t.Fatalf("B's lock after A's unlock: %v", err)
	}
	// A change by A waits for B's read lease to be given back.
	if err := a.Chmod(t.Context(), "/f", 0o600); err != nil {
		t.Fatal(err)
	}
	if rb.revoked.Load() != 1 {
		t.Fatalf("B's read lease revoked %d times", rb.revoked.Load())
	}
}

// TestLeaseFenceWaitsForAMissingHolder: a client with a lease session
// that does not check in with the new minister (it stopped) keeps the
// fence up for one TTL, the time its leases could still be live.
func TestLeaseFenceWaitsForAMissingHolder(t *testing.T) {
	cl := leaseCluster(t)
	a, b := leaseClient(t, cl.Addrs()), leaseClient(t, cl.Addrs())
	ino := leaseFile(t, a, "f")
	acquireSoon(t, a, ino, LeaseWrite, 0, 0, nil)
	a.Close() // stops renewing without releasing
	stopped := stopMinister(t, cl)
	other := leaseFile(t, b, "g")
	acquireSoon(t, b, other, LeaseRead, 0, 0, nil)
	if took := time.Since(stopped); took < leaseTTL {
		t.Fatalf("a lease was granted %v after the minister stopped although a holder (TTL %v) never reclaimed: no fence", took, leaseTTL)
	}
}

func TestLeaseBadInput(t *testing.T) {
	cl := leaseCluster(t)
	a := leaseClient(t, cl.Addrs())
	ino := leaseFile(t, a, "f")
	for _, tc := range []struct {
		mode     LeaseMode
		off, len int64
	}{{0, 0, 0}, {LeaseRead, -1, 0}, {LeaseRead, 0, -5}, {LeaseWrite, MaxFileSize, 1}} {
		if _, err := a.AcquireLease(t.Context(), ino, tc.mode, tc.off, tc.len, LeaseOptions{}); !errors.Is(err, syscall.EINVAL) {
			t.Errorf("acquire %+v: %v, want EINVAL", tc, err)
		}
	}
	// A malformed request straight to a node is refused.
	cc, err := a.conn(cl.Addrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	resp, err := cc.Lease(t.Context(), &wire.LeaseRequest{Group: 1, Ino: uint64(ino), Mode: wire.LeaseMode_LEASE_READ})
	if err != nil || resp.GetStatus().GetCode() != wire.Code_INVALID {
		t.Fatalf("lease without client id: %v %v", err, resp.GetStatus())
	}
	resp, err = cc.Lease(t.Context(), &wire.LeaseRequest{Group: 0, ClientId: 1})
	if err != nil || resp.GetStatus().GetCode() != wire.Code_INVALID {
		t.Fatalf("lease on the president group: %v %v", err, resp.GetStatus())
	}
}

// TestLeaseBeingGivenBackIsReclaimed: a lease whose holder is still
// flushing for a revoke when the minister dies is taken over revoked:
// the waiting client gets it only after the holder's release, not when
// the new minister's fence ends (found in review: a directory lease
// holder still sending its queued creates, a writer still syncing).
func TestLeaseBeingGivenBackIsReclaimed(t *testing.T) {
	const ttl = 6 * time.Second
	cl := testcluster.NewInProcConfig(t, 3, func(c *metanode.Config) { c.LeaseTTL = ttl })
	a, b := leaseClient(t, cl.Addrs()), leaseClient(t, cl.Addrs())
	ino := leaseFile(t, a, "f")
	revoking, unblock := make(chan struct{}), make(chan struct{})
	var unblockOnce sync.Once
	release := func() { unblockOnce.Do(func() { close(unblock) }) }
	t.Cleanup(release) // before the clients close, also when the test fails
	var released atomic.Int64
	if _, err := a.AcquireLease(t.Context(), ino, LeaseWrite, 0, 0, LeaseOptions{Wait: 3 * ttl, OnRevoke: func(_ *Lease, lost bool) {
		if lost {
			t.Error("the lease being given back was lost")
		}
		close(revoking)
		<-unblock // a slow flush
		released.Store(time.Now().UnixNano())
	}}); err != nil {
		t.Fatal(err)
	}
	granted := make(chan error, 1)
	go func() {
		_, err := b.AcquireLease(t.Context(), ino, LeaseWrite, 0, 0, LeaseOptions{Wait: 3 * ttl})
		granted <- err
	}()
	<-revoking
	stopped := stopMinister(t, cl)
	select {
	case err := <-granted:
		t.Fatalf("B was granted the lease (%v) %v after the stop, while A was still giving it back", err, time.Since(stopped))
	case <-time.After(1500 * time.Millisecond): // past the new minister's fence
	}
	t.Logf("unblocking A %v after the stop", time.Since(stopped))
	release()
	if err := <-granted; err != nil {
		t.Fatalf("B's lease after A's release: %v", err)
	}
	if released.Load() == 0 {
		t.Fatal("B was granted before A released")
	}
}

// TestReadLeaseForOpenCarriesAttr: a whole-file read lease asked for an
// open comes with the file's attributes as they are after the grant
// (another client's change made just before is in them), and only then.
func TestReadLeaseForOpenCarriesAttr(t *testing.T) {
	cl := leaseCluster(t)
	a, b := leaseClient(t, cl.Addrs()), leaseClient(t, cl.Addrs())
	ino := leaseFile(t, a, "f")
	const leaseFileData = "hello, lease"
	wf, err := b.Open(t.Context(), "/f", syscall.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wf.WriteAt(t.Context(), []byte(leaseFileData), 0); err != nil {
		t.Fatal(err)
	}
	if err := wf.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Chmod(t.Context(), "/f", 0o604); err != nil {
		t.Fatal(err)
	}
	l, err := a.AcquireLease(t.Context(), ino, LeaseRead, 0, 0, LeaseOptions{Open: true})
	if err != nil {
		t.Fatal(err)
	}
	want, err := a.Stat(t.Context(), "/f", Linearizable())
	if err != nil {
		t.Fatal(err)
	}
	got := l.Attr()
	if got == nil || got.GetIno() != uint64(ino) || got.GetMode() != want.GetMode() || got.GetVersion() != want.GetVersion() {
		t.Fatalf("lease attributes %v, the file's %v", got, want)
	}
	// A File made from the grant's read reads the file's bytes.
	f, err := a.FileOfLease(l, got, syscall.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 16)
	if n, err := f.ReadAt(t.Context(), buf, 0); string(buf[:n]) != leaseFileData || (err != nil && err != io.EOF) {
		t.Fatalf("read through the lease's File: %q, %v", buf[:n], err)
	}
	if err := l.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	// Not asked: none given; a byte range or a write lease never has them.
	for _, tc := range []struct {
		mode     LeaseMode
		off, len int64
		opts     LeaseOptions
	}{{LeaseRead, 0, 0, LeaseOptions{}}, {LeaseRead, 0, 10, LeaseOptions{Open: true}}, {LeaseWrite, 0, 0, LeaseOptions{Open: true}}} {
		l, err := a.AcquireLease(t.Context(), ino, tc.mode, tc.off, tc.len, tc.opts)
		if err != nil {
			t.Fatal(err)
		}
		if l.Attr() != nil {
			t.Errorf("%v [%d,+%d) %+v: attributes given", tc.mode, tc.off, tc.len, tc.opts)
		}
		if err := l.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
}

// TestReleasesBatched: leases given back at once go to the minister in
// a few requests of many ids, not one each, and every one of them is
// given back: another client then gets a write lease on each file at
// once, without waiting for a revoke.
func TestReleasesBatched(t *testing.T) {
	cl := leaseCluster(t)
	a, b := leaseClient(t, cl.Addrs()), leaseClient(t, cl.Addrs())
	const files = 200
	leases := make([]*Lease, files)
	inos := make([]ids.Ino, files)
	for i := range files {
		inos[i] = leaseFile(t, a, "f"+string(rune('a'+i/26))+string(rune('a'+i%26)))
		leases[i] = acquireSoon(t, a, inos[i], LeaseRead, 0, 0, nil)
	}
	before := a.RouteStats().Calls
	var wg sync.WaitGroup
	errs := make(chan error, files)
	for _, l := range leases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := l.Release(t.Context()); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("release: %v", err)
	}
	if calls := a.RouteStats().Calls - before; calls > files/2 {
		t.Fatalf("%d leases given back at once took %d requests, want at most %d", files, calls, files/2)
	} else {
		t.Logf("%d releases in %d requests", files, calls)
	}
	for i, ino := range inos {
		l, err := b.AcquireLease(t.Context(), ino, LeaseWrite, 0, 0, LeaseOptions{})
		if err != nil {
			t.Fatalf("file %d: a write lease after the read lease was given back: %v", i, err)
		}
		_ = l.Release(t.Context())
	}
}

// TestAcquiresBatched: lease tries asked at once go in a few requests,
// each answered as if alone: granted, or refused with EAGAIN and what is
// in the way when another client holds a conflicting lease. The
// minister refuses malformed batches, changing nothing.
func TestAcquiresBatched(t *testing.T) {
	cl := leaseCluster(t)
	a, b := leaseClient(t, cl.Addrs()), leaseClient(t, cl.Addrs())
	const files = 200
	inos := make([]ids.Ino, files)
	for i := range files {
		inos[i] = leaseFile(t, a, "g"+string(rune('a'+i/26))+string(rune('a'+i%26)))
	}
	// B holds a write lease on every tenth file: A's read tries on
	// those are refused.
	for i := 0; i < files; i += 10 {
		acquireSoon(t, b, inos[i], LeaseWrite, 0, 0, nil)
	}
	before := a.RouteStats().Calls
	leases := make([]*Lease, files)
	errs := make([]error, files)
	var wg sync.WaitGroup
	for i, ino := range inos {
		wg.Add(1)
		go func() {
			defer wg.Done()
			leases[i], errs[i] = a.AcquireLease(t.Context(), ino, LeaseRead, 0, 0, LeaseOptions{})
		}()
	}
	wg.Wait()
	calls := a.RouteStats().Calls - before
	for i := range files {
		if i%10 == 0 {
			cf, ok := ConflictOf(errs[i])
			if !errors.Is(errs[i], syscall.EAGAIN) || !ok || cf.Mode != LeaseWrite {
				t.Fatalf("file %d, write-leased by B: %v (conflict %+v), want EAGAIN naming B's write lease", i, errs[i], cf)
			}
			continue
		}
		if errs[i] != nil || !leases[i].Valid() || leases[i].Ino() != inos[i] {
			t.Fatalf("file %d: %v", i, errs[i])
		}
	}
	// A refusal comes back in the batch: the whole lot takes a few
	// requests (the first alone, the rest batched behind it).
	if calls > files/2 {
		t.Fatalf("%d lease tries at once took %d requests, want at most %d", files, calls, files/2)
	}
	t.Logf("%d tries in %d requests", files, calls)
	// Each grant is a real lease: B's write try on a file A holds is
	// refused.
	if _, err := b.AcquireLease(t.Context(), inos[1], LeaseWrite, 0, 0, LeaseOptions{}); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("B's write try on a file A holds a read lease on: %v, want EAGAIN", err)
	}

	// Malformed batches: INVALID, nothing granted.
	g := ids.RootMinistry
	for name, req := range map[string]*wire.LeaseRequest{
		"empty":   {Op: wire.LeaseOp_LEASE_ACQUIRE_BATCH},
		"waiting": {Op: wire.LeaseOp_LEASE_ACQUIRE_BATCH, Acquires: []*wire.LeaseRequest{{Op: wire.LeaseOp_LEASE_ACQUIRE, Ino: uint64(inos[5]), Mode: wire.LeaseMode_LEASE_WRITE, WaitMs: 100}}},
		"nested":  {Op: wire.LeaseOp_LEASE_ACQUIRE_BATCH, Acquires: []*wire.LeaseRequest{{Op: wire.LeaseOp_LEASE_ACQUIRE_BATCH}}},
		"too many": {Op: wire.LeaseOp_LEASE_ACQUIRE_BATCH, Acquires: func() []*wire.LeaseRequest {
			var r []*wire.LeaseRequest
			for range 257 {
				r = append(r, &wire.LeaseRequest{Op: wire.LeaseOp_LEASE_ACQUIRE, Ino: uint64(inos[5]), Mode: wire.LeaseMode_LEASE_WRITE})
			}
			return r
		}()},
	} {
		if _, err := b.leaseCall(t.Context(), g, req, 0); !errors.Is(err, syscall.EINVAL) {
			t.Fatalf("%s batch: %v, want EINVAL", name, err)
		}
	}
	// None of them granted B a write lease on file 5: A's read lease
	// there is intact.
	if !leases[5].Valid() {
		t.Fatal("A's read lease ended after B's malformed batches")
	}
	if _, err := a.AcquireLease(t.Context(), inos[5], LeaseRead, 0, 0, LeaseOptions{}); err != nil {
		t.Fatalf("A's second read lease on file 5: %v", err)
	}
}
