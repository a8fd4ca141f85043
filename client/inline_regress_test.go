package client

import (
	"bytes"
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/govfs/govfs/internal/ids"
)

// pastInline is an offset past the inline limit (5000 when it was 4 KiB).
const pastInline = DefaultInlineMax + 904

func readAll(t *testing.T, c *Client, path string) []byte {
	t.Helper()
	var out bytes.Buffer
	if _, err := c.ReadFile(t.Context(), path, &out); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// Truncate to 0 of an inline file, then a write past the inline limit
// through the same File: the truncated bytes come back.
func TestInlineRegressTruncateZeroThenGrowResurrects(t *testing.T) {
	ctx := t.Context()
	c := dataClient(t)
	path := testDir(t, c) + "/f"
	f, err := c.Open(ctx, path, syscall.O_RDWR|syscall.O_CREAT, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(ctx, bytes.Repeat([]byte("A"), 4000), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(ctx, []byte("x"), pastInline); err != nil {
		t.Fatal(err)
	}
	got := readAll(t, c, path)
	want := make([]byte, pastInline+1)
	want[pastInline] = 'x'
	if !bytes.Equal(got, want) {
		t.Fatalf("after truncate(0)+write past the limit: %d bytes, [0:8]=%q, want zeros", len(got), got[:8])
	}
}

// Truncate to a smaller non-zero size, then growth past the limit.
func TestInlineRegressTruncateShrinkThenGrowResurrects(t *testing.T) {
	ctx := t.Context()
	c := dataClient(t)
	path := testDir(t, c) + "/f"
	f, err := c.Open(ctx, path, syscall.O_RDWR|syscall.O_CREAT, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(ctx, bytes.Repeat([]byte("A"), 4000), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(ctx, 10); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(ctx, []byte("x"), pastInline); err != nil {
		t.Fatal(err)
	}
	got := readAll(t, c, path)
	want := make([]byte, pastInline+1)
	copy(want, bytes.Repeat([]byte("A"), 10))
	want[pastInline] = 'x'
	if !bytes.Equal(got, want) {
		t.Fatalf("after truncate(10)+write past the limit: %d bytes, [8:16]=%q, want AA then zeros", len(got), got[8:16])
	}
}

// A File that last saw the file inline (B) writes past the limit after
// another File (A) moved the file to chunks and overwrote its head: B
// copies its stale inline bytes over A's acknowledged write.
func TestInlineRegressStaleInlineCopyClobbers(t *testing.T) {
	ctx := t.Context()
	c := dataClient(t)
	path := testDir(t, c) + "/f"
	b, err := c.Open(ctx, path, syscall.O_RDWR|syscall.O_CREAT, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := b.WriteAt(ctx, []byte("old-head"), 0); err != nil {
		t.Fatal(err)
	}
	c2 := dataClient(t)
	a, err := c2.Open(ctx, path, syscall.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("N"), 2*DefaultInlineMax+1808) // past the limit: moves to chunks
	if _, err := a.WriteAt(ctx, big, 0); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.WriteAt(ctx, []byte("z"), 4*DefaultInlineMax+3616); err != nil {
		t.Fatal(err)
	}
	got := readAll(t, c, path)
	if !bytes.Equal(got[:len(big)], big) {
		t.Fatalf("A's acknowledged bytes overwritten: head is %q", got[:12])
	}
}

type countWriter struct{ n int64 }

func (w *countWriter) Write(p []byte) (int, error) { w.n += int64(len(p)); return len(p), nil }

// A small inline file grown sparse by truncate stays inline; ReadFile
// then builds the whole file in memory at once.
func TestInlineRegressReadFileSparseInline(t *testing.T) {
	ctx := t.Context()
	c := dataClient(t)
	path := testDir(t, c) + "/f"
	f, err := c.Open(ctx, path, syscall.O_RDWR|syscall.O_CREAT, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(ctx, []byte("hdr"), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(ctx, 1<<49); err != nil {
		t.Fatal(err)
	}
	f.Close()
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("ReadFile of a 512 TiB sparse inline file panicked: %v", r)
		}
	}()
	var w countWriter
	ctx2, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err = c.ReadFile(ctx2, path, &w)
	t.Logf("ReadFile: %v, %d bytes", err, w.n)
}

// OpenIno with O_TRUNC of an inline file, then a write and a read through
// that File: the bytes read at open (before the truncate) must not come
// back.
func TestInlineRegressOpenTruncPrimed(t *testing.T) {
	ctx := t.Context()
	c := dataClient(t)
	path := testDir(t, c) + "/f"
	if _, err := c.WriteFile(ctx, path, bytes.NewReader([]byte("hello world")), 0o644); err != nil {
		t.Fatal(err)
	}
	a, err := c.Stat(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	f, _, err := c.OpenIno(ctx, ids.Ino(a.GetIno()), syscall.O_RDWR|syscall.O_TRUNC)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(ctx, []byte("Z"), 3); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if n, err := f.ReadAt(ctx, buf, 0); n != 4 || !bytes.Equal(buf, []byte("\x00\x00\x00Z")) {
		t.Fatalf("read %q (%d, %v), want three zeros and Z", buf[:n], n, err)
	}
}
