package client

import (
	"bytes"
	"sync"
	"syscall"
	"testing"
)

// TestSettled: after a File's own writes, Settled says the attributes
// the ministry holds (same version, size and mtime as a fresh stat) and
// SettledRead a small file's bytes; each kind of change keeps it so, a
// failed or overlapping write does not.
func TestSettled(t *testing.T) {
	ctx := t.Context()
	c := dataClient(t)
	dir := testDir(t, c)
	check := func(f *File, path string, want []byte, inline bool) {
		t.Helper()
		a, ok := f.Settled()
		if !ok {
			t.Fatalf("%s: not settled after its own writes", path)
		}
		st, err := c.Stat(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		if a.GetVersion() != st.GetVersion() || a.GetSize() != st.GetSize() || a.GetMtimeNs() != st.GetMtimeNs() {
			t.Fatalf("%s: settled version %d size %d mtime %d; the ministry: %d %d %d", path, a.GetVersion(), a.GetSize(), a.GetMtimeNs(), st.GetVersion(), st.GetSize(), st.GetMtimeNs())
		}
		r := f.SettledRead()
		if !inline {
			if r != nil {
				t.Fatalf("%s: SettledRead of a file in chunks", path)
			}
			return
		}
		if r == nil || !bytes.Equal(r.GetInlineData(), want) || r.GetAttr().GetVersion() != st.GetVersion() {
			t.Fatalf("%s: SettledRead %v", path, r)
		}
	}
	// Inline: writes, then a truncate.
	p := dir + "/small"
	f, err := c.Open(ctx, p, syscall.O_RDWR|syscall.O_CREAT, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := f.Settled(); ok {
		t.Fatal("settled before any change")
	}
	want := bytes.Repeat([]byte("a"), 1000)
	if _, err := f.WriteAt(ctx, want, 0); err != nil {
		t.Fatal(err)
	}
	check(f, p, want, true)
	if _, err := f.WriteAt(ctx, []byte("bb"), 500); err != nil {
		t.Fatal(err)
	}
	copy(want[500:], "bb")
	check(f, p, want, true)
	if err := f.Truncate(ctx, 600); err != nil {
		t.Fatal(err)
	}
	check(f, p, want[:600], true)
	// Past the inline limit: into chunks, then an overwrite inside the
	// size, which is unsettled until Sync records its mtime.
	big := bytes.Repeat([]byte("c"), 100<<10)
	if _, err := f.WriteAt(ctx, big, 0); err != nil {
		t.Fatal(err)
	}
	check(f, p, nil, false)
	if _, err := f.WriteAt(ctx, []byte("dd"), 10); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.Settled(); ok {
		t.Fatal("settled with an overwrite's mtime not yet recorded")
	}
	if err := f.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	check(f, p, nil, false)
	// A write that fails leaves it unsettled for good.
	if _, err := f.WriteAt(ctx, []byte("x"), MaxFileSize); err == nil {
		t.Fatal("a write past the maximum size succeeded")
	}
	if _, ok := f.Settled(); ok {
		t.Fatal("settled after a failed write")
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}

	// Inline writes of one File at once: its bytes are not offered.
	p = dir + "/racy"
	g, err := c.Open(ctx, p, syscall.O_RDWR|syscall.O_CREAT, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = g.WriteAt(ctx, bytes.Repeat([]byte{byte('0' + i)}, 100), int64(i*50))
		}()
	}
	wg.Wait()
	if r := g.SettledRead(); r != nil {
		got := readAll(t, c, p)
		if !bytes.Equal(r.GetInlineData(), got) {
			t.Fatalf("overlapping inline writes: SettledRead offers %q, the file is %q", r.GetInlineData(), got)
		}
	}
}
