package fusefs_test

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"
)

// TestListingPageKept: a directory this mount holds the directory lease
// of, listed twice in a row (as rm -r does), is fetched once; a change
// this mount makes in between (a chmod of an entry, a hard link) or
// another client's create makes the next listing fetch again, and every
// listing and stat shows the change.
func TestListingPageKept(t *testing.T) {
	canMount(t)
	c := startCluster(t)
	addr := freeAddr(t)
	// Listings kept by the kernel are another mechanism (dircache.go):
	// off, so every listing reaches the mount.
	a := mountProc(t, c, "--metrics", addr, "--dir-cache=false")
	b := mountProc(t, c, "--async-dirs=false")
	d := filepath.Join(a, "d")
	must(t, os.Mkdir(d, 0o755))
	var want []string
	for i := range 64 {
		name := "f" + strconv.Itoa(i)
		must(t, os.WriteFile(filepath.Join(d, name), []byte(name), 0o644))
		want = append(want, name)
	}
	fsyncDir(t, d)
	slices.Sort(want)
	const kept = "govfs_mount_listing_pages_kept_total"
	list := func(what string, want []string) int {
		t.Helper()
		k0 := mountCounter(t, addr, kept)
		if got := names(t, d); !slices.Equal(got, want) {
			t.Fatalf("%s: listed %v, want %v", what, got, want)
		}
		return mountCounter(t, addr, kept) - k0
	}
	list("first listing", want)
	if n := list("second listing", want); n != 1 {
		t.Fatalf("second listing in a row: %d kept pages served, want 1 (the directory lease is this mount's)", n)
	}

	must(t, os.Chmod(filepath.Join(d, "f3"), 0o600))
	if n := list("listing after a chmod", want); n != 0 {
		t.Fatalf("listing after this mount's chmod of an entry served a kept page")
	}
	if fi, err := os.Lstat(filepath.Join(d, "f3")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("f3 after chmod: %v, %v; want mode 0600", fi.Mode(), err)
	}

	must(t, os.Link(filepath.Join(d, "f1"), filepath.Join(d, "hard")))
	want = append(want, "hard")
	slices.Sort(want)
	if n := list("listing after a hard link", want); n != 0 {
		t.Fatalf("listing after this mount's hard link served a kept page")
	}

	// A write buffered in the mount, pushed by a read of the same
	// descriptor (a request that changes nothing itself): the page
	// fetched before the push is not served after it.
	f, err := os.OpenFile(filepath.Join(d, "f5"), os.O_RDWR|os.O_APPEND, 0)
	must(t, err)
	defer f.Close()
	_, err = f.Write(make([]byte, 100))
	must(t, err)
	list("listing with a write buffered", want)
	list("listing with a write buffered, again", want)
	// The read pushes the buffered bytes first. What it returns is not
	// this test's business (it reads 2 bytes, before this change too:
	// the session-17 note).
	_, _ = f.ReadAt(make([]byte, 10), 0)
	if n := list("listing after the buffered write was pushed", want); n != 0 {
		t.Fatalf("listing after a push of buffered writes served a kept page")
	}
	if fi, err := os.Lstat(filepath.Join(d, "f5")); err != nil || fi.Size() != int64(len("f5"))+100 {
		t.Fatalf("f5 after the push: %v bytes, %v; want %d", fi.Size(), err, len("f5")+100)
	}

	// Another client's create revokes the directory lease first.
	list("listing before another client's create", want)
	must(t, os.WriteFile(filepath.Join(b, "d", "fromB"), []byte("b"), 0o644))
	want = append(want, "fromB")
	slices.Sort(want)
	if n := list("listing after another client's create", want); n != 0 {
		t.Fatalf("listing after another client's create served a kept page")
	}
}

// TestListAhead: listing a directory reads its subdirectories' first
// pages in the background (this mount holds their directory leases), so
// the next listing of each asks the ministry nothing. This mount's
// unlink in one subdirectory does not end the page kept of another,
// but does end the pages showing what it changed: the directory's own
// and its parent's (which shows the directory's attributes). Every
// listing shows the changes.
func TestListAhead(t *testing.T) {
	a, addr := listAheadMount(t)
	top := filepath.Join(a, "top")
	must(t, os.Mkdir(top, 0o755))
	want := map[string][]string{}
	var subdirs []string
	for i := range 6 {
		s := "s" + strconv.Itoa(i)
		subdirs = append(subdirs, s)
		must(t, os.Mkdir(filepath.Join(top, s), 0o755))
		for j := range 5 {
			name := "f" + strconv.Itoa(j)
			must(t, os.WriteFile(filepath.Join(top, s, name), []byte(name), 0o644))
			want[s] = append(want[s], name)
		}
	}
	fsyncDir(t, top)
	for s := range want {
		fsyncDir(t, filepath.Join(top, s))
	}

	listTop := func(what string) int {
		t.Helper()
		k0 := mountCounter(t, addr, pagesKept)
		if got := names(t, top); !slices.Equal(got, subdirs) {
			t.Fatalf("%s: top lists %v, want %v", what, got, subdirs)
		}
		return mountCounter(t, addr, pagesKept) - k0
	}
	a0 := mountCounter(t, addr, pagesAhead)
	listTop("first listing")
	waitAhead(t, addr, a0, 6, "one per subdirectory")
	list := func(s string) int {
		t.Helper()
		k0 := mountCounter(t, addr, pagesKept)
		if got := names(t, filepath.Join(top, s)); !slices.Equal(got, want[s]) {
			t.Fatalf("%s lists %v, want %v", s, got, want[s])
		}
		return mountCounter(t, addr, pagesKept) - k0
	}
	if n := list("s2"); n != 1 {
		t.Fatalf("s2, read ahead: %d kept pages served, want 1", n)
	}
	remove := func(s, name string) {
		t.Helper()
		must(t, os.Remove(filepath.Join(top, s, name)))
		want[s] = slices.DeleteFunc(want[s], func(n string) bool { return n == name })
	}
	// An unlink elsewhere leaves s4's page current.
	remove("s3", "f1")
	if n := list("s4"); n != 1 {
		t.Fatalf("s4 after an unlink in s3: %d kept pages served, want 1", n)
	}
	// In the directory itself, it does not.
	remove("s5", "f2")
	if n := list("s5"); n != 0 {
		t.Fatalf("s5 after an unlink in it served a kept page")
	}
	list("s3")
	// Nor top's, which shows s3's attributes (its modification time).
	listTop("top, again")
	if n := listTop("top, once more"); n != 1 {
		t.Fatalf("top listed twice in a row: %d kept pages served, want 1", n)
	}
	remove("s3", "f3")
	if n := listTop("top after an unlink in s3"); n != 0 {
		t.Fatalf("top after an unlink in its subdirectory s3 served a kept page")
	}
	list("s3")
	// An rmdir of an emptied subdirectory, and top lists the rest.
	for _, n := range slices.Clone(want["s2"]) {
		remove("s2", n)
	}
	must(t, os.Remove(filepath.Join(top, "s2")))
	subdirs = slices.DeleteFunc(subdirs, func(n string) bool { return n == "s2" })
	listTop("top after rmdir s2")
	list("s0")
}

// TestListAheadTwoLevels: after the kernel forgot a tree this mount made
// (its directory leases kept past the forget, keptdirs.go), listing the
// top reads its subdirectories' first pages ahead and theirs too, from
// the kept leases: a walker going down two levels asks the ministry for
// none of them, and lists what is there.
func TestListAheadTwoLevels(t *testing.T) {
	a, addr := listAheadMount(t)
	top := filepath.Join(a, "top")
	must(t, os.Mkdir(top, 0o755))
	// Two changes in top first: its directory lease, under which the
	// subdirectories are made with theirs (only directories this mount
	// holds the lease of are read ahead).
	var subdirs []string
	for _, name := range []string{"a", "b"} {
		must(t, os.WriteFile(filepath.Join(top, name), nil, 0o644))
		subdirs = append(subdirs, name)
	}
	want := []string{"f0", "f1", "f2"}
	for i := range 4 {
		s := "s" + strconv.Itoa(i)
		subdirs = append(subdirs, s)
		must(t, os.MkdirAll(filepath.Join(top, s, "t"), 0o755))
		for _, name := range want {
			must(t, os.WriteFile(filepath.Join(top, s, "t", name), []byte(name), 0o644))
		}
		fsyncDir(t, filepath.Join(top, s, "t"))
		fsyncDir(t, filepath.Join(top, s))
	}
	fsyncDir(t, top)
	dropKernelCaches(t)

	a0 := mountCounter(t, addr, pagesAhead)
	if got := names(t, top); !slices.Equal(got, subdirs) {
		t.Fatalf("top lists %v, want %v", got, subdirs)
	}
	waitAhead(t, addr, a0, 8, "two levels of four")
	k0 := mountCounter(t, addr, pagesKept)
	if got := names(t, filepath.Join(top, "s2", "t")); !slices.Equal(got, want) {
		t.Fatalf("s2/t lists %v, want %v", got, want)
	}
	if n := mountCounter(t, addr, pagesKept) - k0; n != 1 {
		t.Fatalf("s2/t, two levels below the listing: %d kept pages served, want 1", n)
	}
	// A change there (through a node now) and the page is not served.
	must(t, os.Remove(filepath.Join(top, "s2", "t", "f1")))
	k0 = mountCounter(t, addr, pagesKept)
	if got := names(t, filepath.Join(top, "s2", "t")); !slices.Equal(got, []string{"f0", "f2"}) {
		t.Fatalf("s2/t after an unlink lists %v", got)
	}
	if n := mountCounter(t, addr, pagesKept) - k0; n != 0 {
		t.Fatal("s2/t after an unlink in it served a kept page")
	}
}

const pagesKept, pagesAhead = "govfs_mount_listing_pages_kept_total", "govfs_mount_listing_pages_ahead_total"

// listAheadMount mounts a cluster of its own with metrics (their
// address returned), no kernel listing cache (every listing reaches the
// mount) and a long attribute timeout: a kept page is served only within
// it, and the list-ahead tests must not depend on how fast the machine is.
func listAheadMount(t *testing.T) (dir, addr string) {
	t.Helper()
	canMount(t)
	c := startCluster(t)
	addr = freeAddr(t)
	return mountProc(t, c, "--metrics", addr, "--dir-cache=false", "--attr-timeout", "60s"), addr
}

// waitAhead waits until the mount read n first pages ahead since its
// count was a0 (why: what n counts).
func waitAhead(t *testing.T, addr string, a0, n int, why string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for mountCounter(t, addr, pagesAhead)-a0 < n {
		if time.Now().After(deadline) {
			t.Fatalf("read %d first pages ahead, want %d (%s)", mountCounter(t, addr, pagesAhead)-a0, n, why)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
