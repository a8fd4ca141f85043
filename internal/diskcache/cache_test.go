package diskcache

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func open(t *testing.T, dir string, limit int64) *Cache {
	t.Helper()
	c, err := Open(dir, "cluster-a", limit, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// settle waits until the background writer has stored every queued block.
func settle(t *testing.T, c *Cache) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; {
		c.mu.Lock()
		n := len(c.inflight)
		c.mu.Unlock()
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d blocks still queued", n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestBlocks(t *testing.T) {
	dir := t.TempDir()
	c := open(t, dir, 0)
	data := bytes.Repeat([]byte("block"), 1000)
	if _, ok := c.Get(7, 3, 0); ok {
		t.Fatal("hit in an empty cache")
	}
	c.Put(7, 3, 0, data)
	settle(t, c)
	if b, ok := c.Get(7, 3, 0); !ok || !bytes.Equal(b, data) {
		t.Fatalf("get after put: %v, %d bytes", ok, len(b))
	}
	// Another version or block of the inode is another entry.
	if _, ok := c.Get(7, 4, 0); ok {
		t.Fatal("hit for another version")
	}
	if _, ok := c.Get(7, 3, 1); ok {
		t.Fatal("hit for another block")
	}
	c.Close()

	// Reopened: the block is still there; a damaged one is a miss and
	// is removed.
	c2 := open(t, dir, 0)
	if b, ok := c2.Get(7, 3, 0); !ok || !bytes.Equal(b, data) {
		t.Fatal("block lost across a reopen")
	}
	p := filepath.Join(dir, blocksDir, key{7, 3, 0}.name())
	raw, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	raw[len(raw)-1] ^= 1
	if err := os.WriteFile(p, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, ok := c2.Get(7, 3, 0); ok {
		t.Fatal("a damaged block was served")
	}
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Fatalf("damaged block not removed: %v", err)
	}
	// Forget drops every block of the inode.
	c2.Put(7, 5, 0, data)
	c2.Put(7, 5, 1, data)
	c2.Put(8, 1, 0, data)
	settle(t, c2)
	c2.Forget(7)
	if _, ok := c2.Get(7, 5, 1); ok {
		t.Fatal("forgotten inode still cached")
	}
	if _, ok := c2.Get(8, 1, 0); !ok {
		t.Fatal("another inode was forgotten too")
	}
}

func TestEviction(t *testing.T) {
	c := open(t, t.TempDir(), 3*(4096+blockHdr))
	data := make([]byte, 4096)
	for blk := range int64(5) {
		c.Put(1, 1, blk, data)
		settle(t, c)
	}
	// Use block 2, then add one more: the least recently used go.
	if _, ok := c.Get(1, 1, 2); !ok {
		t.Fatal("block 2 evicted too early")
	}
	c.Put(1, 1, 5, data)
	settle(t, c)
	for blk, want := range map[int64]bool{0: false, 1: false, 2: true, 3: false, 4: true, 5: true} {
		if _, ok := c.Get(1, 1, blk); ok != want {
			t.Errorf("block %d cached = %v, want %v", blk, ok, want)
		}
	}
}

func TestOtherCluster(t *testing.T) {
	dir := t.TempDir()
	c := open(t, dir, 0)
	if _, err := Open(dir, "cluster-a", 0, nil); err == nil || !strings.Contains(err.Error(), "in use by another mount") {
		t.Fatalf("second open of a cache dir in use: %v", err)
	}
	c.Close()
	_, err := Open(dir, "cluster-b", 0, nil)
	if err == nil || !strings.Contains(err.Error(), "belongs to cluster cluster-a") {
		t.Fatalf("open of another cluster's dir: %v", err)
	}
}

func TestJournals(t *testing.T) {
	dir := t.TempDir()
	c := open(t, dir, 0)
	j, err := c.NewJournal(42, 1000)
	if err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	if err := j.WriteAt([]byte("hello "), 1000); err != nil {
		t.Fatal(err)
	}
	if err := j.WriteAt([]byte("world"), 1006); err != nil {
		t.Fatal(err)
	}
	if err := j.WriteAt([]byte("W"), 1006); err != nil { // an overwrite inside
		t.Fatal(err)
	}
	if err := j.WriteAt([]byte("x"), 999); err == nil {
		t.Fatal("a write before the extent was taken")
	}
	done, err := c.NewJournal(43, 0)
	if err != nil {
		t.Fatal(err)
	}
	done.Remove()
	// A journal left by a crash (never removed), and garbage.
	if err := os.WriteFile(filepath.Join(dir, dirtyDir, "junk"), []byte("nope"), 0o600); err != nil {
		t.Fatal(err)
	}
	c.Close()

	c2 := open(t, dir, 0)
	ds, errs := c2.Leftovers()
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), "junk") {
		t.Fatalf("errors %v, want one for the junk file", errs)
	}
	if len(ds) != 1 {
		t.Fatalf("%d leftovers, want 1", len(ds))
	}
	d := ds[0]
	if d.Ino != 42 || d.Off != 1000 || string(d.Data) != "hello World" || d.LastWrite.Before(before.Add(-time.Second)) {
		t.Fatalf("leftover %+v (%q)", d, d.Data)
	}
	p, err := c2.Lost(d, "the file was removed")
	if err != nil {
		t.Fatal(err)
	}
	note, err := os.ReadFile(p + ".txt")
	if err != nil || !strings.Contains(string(note), "the file was removed") {
		t.Fatalf("lost note %q: %v", note, err)
	}
	if ds, _ := c2.Leftovers(); len(ds) != 0 {
		t.Fatalf("%d leftovers after Lost", len(ds))
	}
}
