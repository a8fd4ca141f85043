package client

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync"
	"syscall"
	"testing"
)

// TestOpenRangeSixWritersFillOneFile is issue 4's test: 6 writers, each
// a Client of its own, fill a different 10 MB row of one 10-row file
// through OpenRange at once; the file is exactly the expected bytes (rows
// nobody wrote are holes). Rows are not chunk aligned, so neighbouring
// rows share chunks.
func TestOpenRangeSixWritersFillOneFile(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 60 MB")
	}
	const row = 10_000_000
	rows := []int64{0, 2, 3, 5, 7, 9}
	c0 := dataClient(t)
	path := testDir(t, c0) + "/table"
	f, err := c0.Open(t.Context(), path, syscall.O_RDWR|syscall.O_CREAT|syscall.O_EXCL, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	content := func(r int64) []byte {
		b := make([]byte, row)
		for i := range b {
			b[i] = byte(int64(i)*7 + r*31 + int64(i>>16))
		}
		return b
	}
	var wg sync.WaitGroup
	errs := make([]error, len(rows))
	opened := make(chan struct{}, len(rows))
	start := make(chan struct{})
	for k, r := range rows {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cfg := DefaultConfig()
			cfg.MetaAddrs, cfg.TLSDir = c0.cfg.MetaAddrs, c0.cfg.TLSDir
			c, err := New(t.Context(), cfg)
			if err != nil {
				errs[k] = err
				opened <- struct{}{}
				return
			}
			defer c.Close()
			rf, err := c.OpenRange(t.Context(), path, r*row, row, LeaseWrite)
			opened <- struct{}{}
			if err != nil {
				errs[k] = err
				return
			}
			<-start // every writer holds its lease before anyone writes
			data := content(r)
			for off := 0; off < len(data); off += 1 << 20 {
				end := min(off+1<<20, len(data))
				if _, err := rf.WriteAt(t.Context(), data[off:end], r*row+int64(off)); err != nil {
					errs[k] = fmt.Errorf("row %d at %d: %w", r, off, err)
					rf.Close()
					return
				}
			}
			// A write outside the range is refused.
			if _, err := rf.WriteAt(t.Context(), []byte("x"), r*row+row); !errors.Is(err, syscall.EINVAL) {
				errs[k] = fmt.Errorf("row %d: write past the range: %v, want EINVAL", r, err)
			}
			if err := rf.Close(); err != nil && errs[k] == nil {
				errs[k] = fmt.Errorf("row %d: close: %w", r, err)
			}
		}()
	}
	for range rows {
		<-opened
	}
	close(start)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	want := make([]byte, 10*row)
	for _, r := range rows {
		copy(want[r*row:], content(r))
	}
	rd, err := c0.Open(t.Context(), path, syscall.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	if rd.Size() != int64(len(want)) {
		t.Fatalf("size %d, want %d", rd.Size(), len(want))
	}
	got := make([]byte, len(want)+1)
	n, err := rd.ReadAt(t.Context(), got, 0)
	if n != len(want) || !errors.Is(err, io.EOF) {
		t.Fatalf("read %d bytes (%v), want %d and EOF", n, err, len(want))
	}
	if !bytes.Equal(got[:n], want) {
		i := firstDiff(got[:n], want)
		t.Fatalf("content differs first at byte %d (row %d): got %d want %d", i, i/row, got[i], want[i])
	}
}

// TestOpenRangeWaitsForConflictingWriter: a second client's OpenRange of
// an overlapping range gets the lease once the first writer gave it back
// (revoke: its writes are synced first), and then reads them.
func TestOpenRangeWaitsForConflictingWriter(t *testing.T) {
	c0 := dataClient(t)
	cfg := DefaultConfig()
	cfg.MetaAddrs, cfg.TLSDir = c0.cfg.MetaAddrs, c0.cfg.TLSDir
	c1, err := New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	path := testDir(t, c0) + "/f"
	f, err := c0.Open(t.Context(), path, syscall.O_RDWR|syscall.O_CREAT, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	// Larger than inline small files: its bytes are on chunk servers.
	if _, err := f.WriteAt(t.Context(), make([]byte, 1<<20), 0); err != nil {
		t.Fatal(err)
	}
	f.Close()
	w, err := c0.OpenRange(t.Context(), path, 0, 1<<20, LeaseWrite)
	if err != nil {
		t.Fatal(err)
	}
	// An overwrite inside the size: recorded in the ministry only by Sync,
	// which the revoke does before the lease is given back.
	if _, err := w.WriteAt(t.Context(), []byte("hello"), 10); err != nil {
		t.Fatal(err)
	}
	before, err := c0.Stat(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	r, err := c1.OpenRange(t.Context(), path, 5, 20, LeaseRead)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	after, err := c1.Stat(t.Context(), path, Linearizable())
	if err != nil {
		t.Fatal(err)
	}
	if after.GetMtimeNs() <= before.GetMtimeNs() {
		t.Errorf("mtime not updated before the write lease was given back")
	}
	buf := make([]byte, 5)
	if _, err := r.ReadAt(t.Context(), buf, 10); err != nil || string(buf) != "hello" {
		t.Fatalf("read %q, %v", buf, err)
	}
	if _, err := r.ReadAt(t.Context(), buf, 0); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("read before the range: %v, want EINVAL", err)
	}
	if _, err := r.WriteAt(t.Context(), buf, 10); !errors.Is(err, syscall.EBADF) {
		t.Fatalf("write through a read range: %v, want EBADF", err)
	}
	// The writer's lease was revoked (its next write would wait for the
	// read lease).
	if w.Lease() != nil {
		t.Fatal("the writer still has its lease")
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}
