package client

import (
	"bytes"
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/govfs/govfs/internal/ids"
)

// behindFile opens ino (made by leaseFile) on c for writing behind,
// under a read lease it takes, as the mount does.
func behindFile(t *testing.T, c *Client, ino ids.Ino) *File {
	t.Helper()
	l, err := c.AcquireLease(t.Context(), ino, LeaseRead, 0, 0, LeaseOptions{Wait: 3 * leaseTTL})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Release(context.Background()) })
	f, _, err := c.OpenIno(t.Context(), ino, syscall.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteBehind(func() *Lease { return l })
	return f
}

// queuedUnder returns the buffered lease c's queued write of ino waits
// under (nil: none queued).
func queuedUnder(c *Client, ino ids.Ino) *Lease {
	q := &c.deferred
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, op := range q.pending {
		if op.changes == ino && op.buffered != nil {
			return op.buffered
		}
	}
	return nil
}

// TestWriteBehindCloseToOpen: a small write answered at once under a
// buffered lease is seen by another client's next open (its lease
// request, a try, waits while the holder sends it), not before it is
// applied.
func TestWriteBehindCloseToOpen(t *testing.T) {
	cl := leaseCluster(t)
	a, b := leaseClient(t, cl.Addrs()), leaseClient(t, cl.Addrs())
	ctx := t.Context()
	ino := leaseFile(t, a, "f")
	release := holdSender(t, a)
	f := behindFile(t, a, ino)
	want := bytes.Repeat([]byte("write-behind "), 300)
	if n, err := f.WriteAt(ctx, want, 0); err != nil || n != len(want) {
		t.Fatalf("write: %d, %v", n, err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("close of a file written behind: %v", err)
	}
	if queuedUnder(a, ino) == nil {
		t.Fatal("the write is not queued under a buffered lease")
	}
	// B opens as the mount does (a read lease, a try, with the open's
	// read): it must wait for A's queue, held here for 300 ms.
	held := 300 * time.Millisecond
	go func() {
		time.Sleep(held)
		release()
	}()
	start := time.Now()
	l, err := b.AcquireLease(ctx, ino, LeaseRead, 0, 0, LeaseOptions{Open: true})
	if err != nil {
		t.Fatalf("another client's open: %v", err)
	}
	if waited := time.Since(start); waited < held {
		t.Fatalf("the open was granted after %v, before the holder's queue left", waited)
	}
	if got := l.opened.GetInlineData(); !bytes.Equal(got, want) || l.Attr().GetSize() != uint64(len(want)) {
		t.Fatalf("another client's open reads %d bytes (size %d), want the %d written behind", len(got), l.Attr().GetSize(), len(want))
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// A's next File writes behind again (its lease was given back).
	f2 := behindFile(t, a, ino)
	if _, err := f2.WriteAt(ctx, []byte("again"), 0); err != nil {
		t.Fatal(err)
	}
	if err := f2.Close(); err != nil {
		t.Fatal(err)
	}
	a.FlushDeferred(ctx)
	copy(want, "again")
	if got := readAllOf(t, b, ino); !bytes.Equal(got, want) {
		t.Fatalf("after a flush another client reads %q..., want %q...", got[:20], want[:20])
	}
}

// TestWriteBehindOrderedBeforeAnotherChange: another client's change of
// a file written behind waits for the queued write and applies after it.
func TestWriteBehindOrderedBeforeAnotherChange(t *testing.T) {
	cl := leaseCluster(t)
	a, b := leaseClient(t, cl.Addrs()), leaseClient(t, cl.Addrs())
	ctx := t.Context()
	ino := leaseFile(t, a, "f")
	release := holdSender(t, a)
	f := behindFile(t, a, ino)
	if _, err := f.WriteAt(ctx, bytes.Repeat([]byte{'x'}, 4096), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(200 * time.Millisecond)
		release()
	}()
	// B cuts the file to 10 bytes: applied after A's 4,096, so 10 stay.
	if err := b.Truncate(ctx, "/f", 10); err != nil {
		t.Fatalf("truncate by another client: %v", err)
	}
	if got := readAllOf(t, b, ino); !bytes.Equal(got, bytes.Repeat([]byte{'x'}, 10)) {
		t.Fatalf("after another client's truncate to 10: %d bytes %q", len(got), got)
	}
}

// TestWriteBehindLostLeaseIsNotApplied: a write whose buffered lease the
// minister no longer holds is refused unapplied (ESTALE, reported by the
// next Sync), while the rest of its batch applies.
func TestWriteBehindLostLeaseIsNotApplied(t *testing.T) {
	cl := leaseCluster(t)
	a, b := leaseClient(t, cl.Addrs()), leaseClient(t, cl.Addrs())
	ctx := t.Context()
	lostIno, keptIno := leaseFile(t, a, "lost"), leaseFile(t, a, "kept")
	release := holdSender(t, a)
	lost, kept := behindFile(t, a, lostIno), behindFile(t, a, keptIno)
	for _, f := range []*File{lost, kept} {
		if _, err := f.WriteAt(ctx, []byte("bytes"), 0); err != nil {
			t.Fatal(err)
		}
	}
	l := queuedUnder(a, lostIno)
	if l == nil || queuedUnder(a, keptIno) == nil {
		t.Fatal("the writes are not queued under buffered leases")
	}
	// The minister forgets the first lease (as if it had expired while
	// A was cut off): A does not know.
	if err := a.release(ctx, l.group, l.id); err != nil {
		t.Fatal(err)
	}
	release()
	a.FlushDeferred(ctx)
	if err := lost.Sync(ctx); !errors.Is(err, syscall.EIO) {
		t.Fatalf("sync of a write whose lease was lost: %v, want EIO", err)
	}
	if err := kept.Sync(ctx); err != nil {
		t.Fatalf("sync of the other write of the batch: %v", err)
	}
	if got := readAllOf(t, b, lostIno); len(got) != 0 {
		t.Fatalf("the write under a lost lease was applied: %q", got)
	}
	if got := readAllOf(t, b, keptIno); string(got) != "bytes" {
		t.Fatalf("the other write of the batch: %q", got)
	}
}

// TestWriteBehindFailureReportedAfterClose: a write answered at a close
// whose lease was lost is reported by the next Sync of the file on the
// same Client, by another File (the first one is closed).
func TestWriteBehindFailureReportedAfterClose(t *testing.T) {
	cl := leaseCluster(t)
	a := leaseClient(t, cl.Addrs())
	ctx := t.Context()
	ino := leaseFile(t, a, "f")
	release := holdSender(t, a)
	f := behindFile(t, a, ino)
	if _, err := f.WriteAt(ctx, []byte("lost"), 0); err != nil {
		t.Fatal(err)
	}
	l := queuedUnder(a, ino)
	if l == nil {
		t.Fatal("not queued behind")
	}
	if err := a.release(ctx, l.group, l.id); err != nil {
		t.Fatal(err)
	}
	// Closed before the write is answered (Close does not wait for it).
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	release()
	a.FlushDeferred(ctx)
	g, _, err := a.OpenIno(ctx, ino, syscall.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if err := g.Sync(ctx); !errors.Is(err, syscall.EIO) {
		t.Fatalf("sync of the file after a lost write answered at its close: %v, want EIO", err)
	}
	if err := g.Sync(ctx); err != nil {
		t.Fatalf("the failure is reported twice: %v", err)
	}
}

// TestWriteBehindRecallBeforeQueued: another client's open that recalls
// the lease between its upgrade and the write's queueing still waits for
// the write (found in review: the holder flushed what was queued then,
// and gave the lease back before the write was in the queue).
func TestWriteBehindRecallBeforeQueued(t *testing.T) {
	cl := leaseCluster(t)
	a, b := leaseClient(t, cl.Addrs()), leaseClient(t, cl.Addrs())
	ctx := t.Context()
	ino := leaseFile(t, a, "f")
	var l *Lease
	granted := make(chan struct{})
	a.behindHeldForTest = func() {
		go func() {
			defer close(granted)
			var err error
			if l, err = b.AcquireLease(ctx, ino, LeaseRead, 0, 0, LeaseOptions{Open: true}); err != nil {
				t.Error(err)
			}
		}()
		select {
		case <-granted:
			t.Error("another client's open was granted before the write answered at the close was queued")
		case <-time.After(300 * time.Millisecond):
		}
	}
	f := behindFile(t, a, ino)
	if _, err := f.WriteAt(ctx, []byte("queued late"), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	<-granted
	if l == nil {
		t.FailNow()
	}
	if got := l.opened.GetInlineData(); string(got) != "queued late" {
		t.Fatalf("the open that recalled the lease reads %q", got)
	}
}
