package client

import (
	"syscall"
	"testing"
)

// An inline (small-file) write by another client must revoke a read lease
// before it is acknowledged, like a chmod does.
func TestInlineWriteRevokesReadLease(t *testing.T) {
	cl := leaseCluster(t)
	a, b := leaseClient(t, cl.Addrs()), leaseClient(t, cl.Addrs())
	ino := leaseFile(t, a, "f")
	var ra revokeCounter
	l := acquireSoon(t, a, ino, LeaseRead, 0, 0, &ra)
	// B has not seen A's create yet: catch up linearizably first (its
	// session reads may go to a clerk behind the create).
	if _, err := b.Stat(t.Context(), "/f", Linearizable()); err != nil {
		t.Fatal(err)
	}
	f, err := b.Open(t.Context(), "/f", syscall.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(t.Context(), []byte("hello"), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	attr, _ := b.Stat(t.Context(), "/f", Linearizable())
	t.Logf("size after B's write: %d", attr.GetSize())
	if ra.revoked.Load() == 0 && l.Valid() {
		t.Fatalf("B's small write was acknowledged while A's read lease is still valid and unrevoked (size now %d)", attr.GetSize())
	}
}
