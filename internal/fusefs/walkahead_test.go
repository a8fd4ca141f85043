package fusefs_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"
)

// mountCounter reads a counter from a mount's --metrics address.
func mountCounter(t *testing.T, addr, name string) int {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	m := regexp.MustCompile(`(?m)^` + name + ` (\S+)`).FindStringSubmatch(string(body))
	if m == nil {
		t.Fatalf("%s: no %s", addr, name)
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return int(v)
}

// TestWalkAhead: a mount that reads a directory's files in the order it
// listed them finds most of them already under a read lease (asked for
// ahead, with their attributes and bytes, small files' bytes stored in
// the kernel's page cache), and still reads every change
// another client made before opening: to a file whose lease was taken
// ahead and not yet opened, to small (inline) and chunk files alike.
func TestWalkAhead(t *testing.T) {
	canMount(t)
	c := startCluster(t)
	addr := freeAddr(t)
	w := mountProc(t, c)
	r := mountProc(t, c, "--metrics", addr)
	const files = 60
	content := func(i, gen int) []byte {
		size := 1000 // inline
		if i%3 == 0 {
			size = 70 << 10 // in a chunk
		}
		return bytes.Repeat([]byte(fmt.Sprintf("%d.%d|", i, gen)), size/6)
	}
	d := filepath.Join(w, "d")
	must(t, os.Mkdir(d, 0o755))
	for i := range files {
		must(t, os.WriteFile(filepath.Join(d, fmt.Sprintf("f%02d", i)), content(i, 0), 0o644))
	}
	f, err := os.Open(w)
	must(t, err)
	must(t, f.Sync()) // the writer's queue committed
	f.Close()

	rd := filepath.Join(r, "d")
	ents := listAll(t, rd, files)
	asked0, hits0 := mountCounter(t, addr, "govfs_mount_walk_ahead_leases_total"), mountCounter(t, addr, "govfs_mount_leased_opens_total")
	stored0 := mountCounter(t, addr, "govfs_mount_walk_ahead_stored_bytes_total")
	read := func(i int) []byte {
		b, err := os.ReadFile(filepath.Join(rd, ents[i].Name()))
		must(t, err)
		return b
	}
	half := files / 2
	for i := range half {
		if got := read(i); !bytes.Equal(got, content(i, 0)) {
			t.Fatalf("%s: read %d bytes, not what was written", ents[i].Name(), len(got))
		}
		// A reader slower than the walk-ahead: the count of opens that
		// found a lease is then not a race (a fast reader outruns it and
		// asks for its leases itself, which is correct too).
		time.Sleep(50 * time.Millisecond)
	}
	// The reader's own write of a file whose bytes it read ahead is
	// what it reads next (no stored page lies over it).
	own := filepath.Join(rd, ents[half].Name())
	must(t, os.WriteFile(own, content(half, 2), 0o644))
	if got, err := os.ReadFile(own); err != nil || !bytes.Equal(got, content(half, 2)) {
		t.Fatalf("%s, written through this mount after its bytes were read ahead: read %.20q... %v, want %.20q...", own, got, err, content(half, 2))
	}
	// The reader has leases ahead of where it is: the writer changes
	// those files now, and each change revokes the reader's lease first.
	for i := half; i < files; i++ {
		must(t, os.WriteFile(filepath.Join(d, ents[i].Name()), content(i, 1), 0o644))
	}
	for i := half; i < files; i++ {
		if got := read(i); !bytes.Equal(got, content(i, 1)) {
			t.Fatalf("%s, changed by another mount after this one took its lease ahead: read %.20q..., want %.20q...", ents[i].Name(), got, content(i, 1))
		}
	}
	asked := mountCounter(t, addr, "govfs_mount_walk_ahead_leases_total") - asked0
	hits := mountCounter(t, addr, "govfs_mount_leased_opens_total") - hits0
	stored := mountCounter(t, addr, "govfs_mount_walk_ahead_stored_bytes_total") - stored0
	t.Logf("%d files read in listing order: %d leases asked for ahead, %d opens found one, %d bytes read ahead into the page cache", files, asked, hits, stored)
	if stored == 0 {
		t.Fatal("no file's bytes were read ahead")
	}
	// The first half follows the listing untouched: all but the first
	// few opens find their lease.
	if asked < half || hits < half-walkFirstForTest {
		t.Fatalf("walk-ahead asked %d leases and %d opens found one; want at least %d and %d", asked, hits, half, half-walkFirstForTest)
	}
}

// listAll lists dir until it shows want entries (at most 5 s): another
// mount's listing shows a writer's creates once a replica applied them,
// within milliseconds of the writer's fsync (docs/fuse.md), not at once.
func listAll(t *testing.T, dir string, want int) []os.DirEntry {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		ents, err := os.ReadDir(dir)
		must(t, err)
		if len(ents) == want {
			return ents
		}
		if time.Now().After(deadline) {
			t.Fatalf("listed %d entries of %s, want %d", len(ents), dir, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestWalkLookups: a walk whose kernel entries expired has its lookups
// answered by the mount, from a listing read under the directory's
// listing lease or under the files' own read leases; a name another mount unlinks or renames away during the
// walk is not found by it afterwards (the change revokes that lease
// before it is acknowledged), and the rest still read right.
func TestWalkLookups(t *testing.T) {
	canMount(t)
	c := startCluster(t)
	addr := freeAddr(t)
	w := mountProc(t, c, "--async-dirs=false")
	r := mountProc(t, c, "--metrics", addr)
	const files = 40
	d := filepath.Join(w, "d")
	must(t, os.Mkdir(d, 0o755))
	for i := range files {
		p := filepath.Join(d, fmt.Sprintf("f%02d", i))
		must(t, os.WriteFile(p, []byte(p), 0o644))
	}
	rd := filepath.Join(r, "d")
	ents := listAll(t, rd, files)
	time.Sleep(1500 * time.Millisecond) // the kernel's entries expire (1 s)
	// Answered from the walk's listing or under the file's own lease
	// (leasedLookup), whichever comes first.
	answered := func() int {
		return mountCounter(t, addr, "govfs_mount_walk_lookups_total") + mountCounter(t, addr, "govfs_mount_leased_lookups_total")
	}
	local0 := answered()
	gone := map[string]bool{ents[30].Name(): true, ents[31].Name(): true}
	for i, e := range ents {
		if i == 20 {
			// Another mount removes two names ahead of the walk.
			must(t, os.Remove(filepath.Join(d, ents[30].Name())))
			must(t, os.Rename(filepath.Join(d, ents[31].Name()), filepath.Join(w, "moved")))
		}
		b, err := os.ReadFile(filepath.Join(rd, e.Name()))
		switch {
		case i >= 20 && gone[e.Name()]:
			if !os.IsNotExist(err) {
				t.Fatalf("%s, removed by another mount during the walk: %q, %v; want ENOENT", e.Name(), b, err)
			}
		case err != nil || string(b) != filepath.Join(d, e.Name()):
			t.Fatalf("%s: %q, %v", e.Name(), b, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	local := answered() - local0
	t.Logf("%d files walked after their entries expired: %d lookups answered by the mount", files, local)
	if local < 10 {
		t.Fatalf("%d lookups answered by the mount; want most of the first 20", local)
	}
}

// walkFirstForTest: the opens that may miss before the window is ahead
// (the first, whose own lease is asked for then).
const walkFirstForTest = 2

// TestWalkAheadNextDir: once a walk reaches the end of a directory's
// listing, the first files of the directory this mount listed next are
// asked for ahead (find | xargs cat goes on there), so their opens find
// a lease; another mount's change of one of them is still read.
func TestWalkAheadNextDir(t *testing.T) {
	canMount(t)
	c := startCluster(t)
	addr := freeAddr(t)
	w := mountProc(t, c)
	r := mountProc(t, c, "--metrics", addr)
	for _, d := range []string{"a", "b"} {
		must(t, os.Mkdir(filepath.Join(w, d), 0o755))
		for i := range 3 {
			p := filepath.Join(w, d, fmt.Sprintf("f%d", i))
			must(t, os.WriteFile(p, []byte(p), 0o644))
		}
	}
	f, err := os.Open(w)
	must(t, err)
	must(t, f.Sync())
	f.Close()
	for _, d := range []string{"a", "b"} { // the listing order
		listAll(t, filepath.Join(r, d), 3)
	}
	asked0 := mountCounter(t, addr, "govfs_mount_walk_ahead_leases_total")
	for i := range 3 {
		p := filepath.Join(r, "a", fmt.Sprintf("f%d", i))
		if b, err := os.ReadFile(p); err != nil || string(b) != filepath.Join(w, "a", fmt.Sprintf("f%d", i)) {
			t.Fatalf("%s: %q, %v", p, b, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	// a/f1 and a/f2 at a/f0's open, then b/f0 and b/f1.
	if asked := mountCounter(t, addr, "govfs_mount_walk_ahead_leases_total") - asked0; asked < 4 {
		t.Fatalf("%d leases asked for ahead while a's files were read; want a's two and b's first two", asked)
	}
	// b/f0 was asked for ahead; another mount changes it now, and the
	// change revokes that lease first.
	must(t, os.WriteFile(filepath.Join(w, "b", "f0"), []byte("changed"), 0o644))
	hits0 := mountCounter(t, addr, "govfs_mount_leased_opens_total")
	if b, err := os.ReadFile(filepath.Join(r, "b", "f0")); err != nil || string(b) != "changed" {
		t.Fatalf("b/f0 after another mount changed it: %q, %v", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(r, "b", "f1")); err != nil || string(b) != filepath.Join(w, "b", "f1") {
		t.Fatalf("b/f1: %q, %v", b, err)
	}
	if got := mountCounter(t, addr, "govfs_mount_leased_opens_total") - hits0; got < 1 {
		t.Fatalf("%d opens of the next directory's first files found a lease asked for ahead", got)
	}
}
