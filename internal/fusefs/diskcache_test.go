package fusefs_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/govfs/govfs/client"
	"github.com/govfs/govfs/internal/bench"
)

// TestMountDiskCache checks --cache-dir with real mount processes:
//   - writes accepted by write(2) but never flushed survive a kill -9 of
//     the mount: the next mount on the cache directory commits them;
//   - when another client changed the file after the crash, they are not
//     committed over its change but kept in lost/ with a note, and logged;
//   - blocks read once are served from the cache: with every chunk server
//     dead and the kernel's page cache dropped, the file still reads back
//     whole.
func TestMountDiskCache(t *testing.T) {
	canMount(t)
	c := startCluster(t)
	cl := newClient(t, c, c.Addrs())
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cacheDir := filepath.Join(t.TempDir(), "cache")
	mnt := filepath.Join(t.TempDir(), "mnt")
	must(t, os.Mkdir(mnt, 0o755))
	p := func(name string) string { return filepath.Join(mnt, name) }

	// Unflushed writes, then kill -9.
	m := startMount(t, c, mnt, "--cache-dir", cacheDir)
	want := bytes.Repeat([]byte("journaled "), 30_000) // 300 KB in 3 writes
	f, err := os.OpenFile(p("g"), os.O_CREATE|os.O_WRONLY, 0o644)
	must(t, err)
	for i := range 3 {
		_, err := f.WriteAt(want[i*100_000:(i+1)*100_000], int64(i*100_000))
		must(t, err)
	}
	m.kill(t)
	f.Close() // fails: the mount is gone
	if a, err := cl.Stat(ctx, "/g"); err != nil || a.GetSize() != 0 {
		t.Fatalf("before recovery: /g %v, %v; want an empty file (nothing was pushed)", a, err)
	}
	m = startMount(t, c, mnt, "--cache-dir", cacheDir)
	// Another client committed them (the new mount, before it said it
	// was mounted); this one reads from a clerk, which may not have
	// applied that yet (CI, stop 30: 0 bytes): a linearizable stat
	// first makes its later reads at least that fresh.
	if a, err := cl.Stat(ctx, "/g", client.Linearizable()); err != nil || a.GetSize() != uint64(len(want)) {
		t.Fatalf("after recovery: /g %v, %v; want %d bytes", a, err, len(want))
	}
	var got bytes.Buffer
	if _, err := cl.ReadFile(ctx, "/g", &got); err != nil || !bytes.Equal(got.Bytes(), want) {
		t.Fatalf("after recovery: /g is %d bytes (%v), want the %d written before the kill", got.Len(), err, len(want))
	}

	// Unflushed writes, kill -9, then another client writes the file.
	f, err = os.OpenFile(p("h"), os.O_CREATE|os.O_WRONLY, 0o644)
	must(t, err)
	_, err = f.Write(bytes.Repeat([]byte("mine "), 10_000))
	must(t, err)
	m.kill(t)
	f.Close()
	time.Sleep(10 * time.Millisecond) // the other client's mtime is later
	theirs := []byte("the other client's bytes\n")
	if _, err := cl.WriteFile(ctx, "/h", bytes.NewReader(theirs), 0o644); err != nil {
		t.Fatal(err)
	}
	m = startMount(t, c, mnt, "--cache-dir", cacheDir)
	got.Reset()
	if _, err := cl.ReadFile(ctx, "/h", &got); err != nil || !bytes.Equal(got.Bytes(), theirs) {
		t.Fatalf("/h after recovery: %q, %v; want the other client's bytes kept", got.String(), err)
	}
	notes, _ := filepath.Glob(filepath.Join(cacheDir, "lost", "*.txt"))
	if len(notes) != 1 {
		t.Fatalf("lost notes %v, want one", notes)
	}
	note, _ := os.ReadFile(notes[0])
	kept, err := os.ReadFile(strings.TrimSuffix(notes[0], ".txt"))
	if err != nil || !strings.Contains(string(note), "modified") || !bytes.Contains(kept, []byte("mine mine")) {
		t.Fatalf("lost journal: note %q, %d bytes (%v)", note, len(kept), err)
	}
	b, _ := os.ReadFile(m.log)
	if !strings.Contains(string(b), "NOT committed") {
		t.Errorf("mount log does not report the journal it did not commit:\n%s", tail(b, 2000))
	}

	// Read cache: read a 3 MiB file once, then with the chunk servers
	// dead and the page cache dropped.
	big := make([]byte, 3<<20+1234)
	for i := range big {
		big[i] = byte(i*7 + i>>12)
	}
	if _, err := cl.WriteFile(ctx, "/big", bytes.NewReader(big), 0o644); err != nil {
		t.Fatal(err)
	}
	first, err := os.ReadFile(p("big"))
	if err != nil || !bytes.Equal(first, big) {
		t.Fatalf("first read: %d bytes, %v", len(first), err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		blocks, _ := filepath.Glob(filepath.Join(cacheDir, "blocks", "*-*-*"))
		if len(blocks) >= 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d blocks cached after reading 4 MiB worth", len(blocks))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if os.Geteuid() != 0 {
		t.Skip("dropping the page cache needs root: the cache-only read is not checked")
	}
	for i := 3; i < c.Procs(); i++ {
		c.Kill(i) // every chunk server
	}
	must(t, bench.DropCaches())
	again, err := os.ReadFile(p("big"))
	if err != nil || sha256.Sum256(again) != sha256.Sum256(big) {
		t.Fatalf("read with every chunk server dead: %d bytes, %v; want the cached copy", len(again), err)
	}
}
