package fusefs_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// readdirCount returns how many READDIR and READDIRPLUS requests the
// mount serving metrics on addr answered.
func readdirCount(t *testing.T, addr string) int {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	n := 0
	for _, m := range regexp.MustCompile(`(?m)^govfs_mount_op_seconds_count\{op="readdir(?:plus)?",status="[^"]*"\} (\S+)`).FindAllStringSubmatch(string(body), -1) {
		v, _ := strconv.ParseFloat(m[1], 64)
		n += int(v)
	}
	return n
}

// names lists dir through the mount, sorted.
func names(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("list %s: %v", dir, err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// TestListingsKeptUnderReadLease: a directory listed twice is listed
// from the kernel's cache while the mount holds a read lease on it (no
// READDIR reaches the mount), and every change another client makes to
// its entries is in the next listing as soon as the change is
// acknowledged; so is the mount's own change, and the removal of a
// directory whose listing was kept.
func TestListingsKeptUnderReadLease(t *testing.T) {
	canMount(t)
	c := startCluster(t)
	addr := freeAddr(t)
	// Without reading subdirectories' first pages ahead: this test
	// counts the listing's own requests, and d has one (e).
	a := mountProc(t, c, "--metrics", addr, "--list-ahead=false")
	// B's changes are synchronous: with asynchronous directories they
	// are acknowledged before other clients can see them (docs/fuse.md).
	b := mountProc(t, c, "--async-dirs=false")

	d := filepath.Join(a, "d")
	must(t, os.Mkdir(d, 0o755))
	// Past a kernel page of cached entries and the mount's page of 512.
	const files = 1200
	var want []string
	for i := range files {
		name := "f" + strconv.Itoa(i)
		must(t, os.WriteFile(filepath.Join(d, name), nil, 0o644))
		want = append(want, name)
	}
	must(t, os.Mkdir(filepath.Join(d, "e"), 0o755))
	want = append(want, "e")
	slices.Sort(want)
	fsyncDir(t, d)

	check := func(what string, want []string) {
		t.Helper()
		if got := names(t, d); !slices.Equal(got, want) {
			t.Fatalf("%s: mount A lists %d names, want %d (first difference: %v)", what, len(got), len(want), firstNameDiff(got, want))
		}
	}
	// Without a lease (the 5 s after a revoke) A lists from a clerk,
	// which may apply B's change a moment later (docs/fuse.md); a kept
	// listing not dropped would stay wrong.
	eventually := func(what string, want []string) {
		t.Helper()
		waitFor(t, what, func() error {
			if got := names(t, d); !slices.Equal(got, want) {
				return fmt.Errorf("mount A lists %d names, want %d (first difference: %v)", len(got), len(want), firstNameDiff(got, want))
			}
			return nil
		})
	}
	// The first two listings ask the ministry; the third asks for the
	// lease in the background; the one after the grant fills the
	// kernel's cache; the rest come from the cache.
	check("first listing", want)
	check("second listing", want)
	check("third listing", want)
	untilCached := func(what string) {
		t.Helper()
		waitFor(t, what, func() error {
			before := readdirCount(t, addr)
			check(what, want)
			if after := readdirCount(t, addr); after != before {
				return fmt.Errorf("a listing sent %d READDIR requests to the mount", after-before)
			}
			return nil
		})
	}
	untilCached("listing once the lease is granted")
	before := readdirCount(t, addr)
	for range 5 {
		check("cached listing", want)
	}
	if after := readdirCount(t, addr); after != before {
		t.Fatalf("five listings under the read lease sent %d READDIR requests to the mount, want 0", after-before)
	}

	bd := filepath.Join(b, "d")
	// Another mount's create, unlink, rename within, rename in and out,
	// and chmod: each is in A's next listing once B's call returned.
	must(t, os.WriteFile(filepath.Join(bd, "new"), []byte("x"), 0o644))
	want = sorted(append(want, "new"))
	// The revoke makes A's next opendir ask whether d is still a
	// directory, linearizably: the first page comes with d's
	// attributes, so the listing costs one request per page, not one
	// more for the opendir. (The stat first: the kernel's lookup of d,
	// if its entry expired, is not the listing's.)
	_, err := os.Stat(d)
	must(t, err)
	const requests = "govfs_mount_metadata_requests_total"
	r0 := mountCounter(t, addr, requests)
	check("after B's create", want)
	if got, pages := mountCounter(t, addr, requests)-r0, (len(want)+511)/512; got != pages {
		t.Fatalf("the listing after a revoke made %d requests to the ministry, want %d (a page each, the first with the directory's attributes)", got, pages)
	}

	eventually("relisting", want)
	must(t, os.Remove(filepath.Join(bd, "f1")))
	want = without(want, "f1")
	eventually("after B's unlink", want)

	must(t, os.Rename(filepath.Join(bd, "f2"), filepath.Join(bd, "g2")))
	want = sorted(append(without(want, "f2"), "g2"))
	eventually("after B's rename within", want)

	must(t, os.WriteFile(filepath.Join(b, "outside"), nil, 0o644))
	must(t, os.Rename(filepath.Join(b, "outside"), filepath.Join(bd, "moved-in")))
	want = sorted(append(want, "moved-in"))
	eventually("after B's rename into it", want)
	must(t, os.Rename(filepath.Join(bd, "f3"), filepath.Join(b, "moved-out")))
	want = without(want, "f3")
	eventually("after B's rename out of it", want)

	// A's own change, while the listing is kept again (the backoff
	// after a revoke is 5 s).
	time.Sleep(5500 * time.Millisecond)
	check("listing after the backoff", want)
	untilCached("listing under a new lease")
	before = readdirCount(t, addr)
	check("cached listing again", want)
	if after := readdirCount(t, addr); after != before {
		t.Fatalf("a listing under the new lease sent %d READDIR requests, want 0", after-before)
	}
	must(t, os.WriteFile(filepath.Join(d, "mine"), nil, 0o644))
	want = sorted(append(want, "mine"))
	check("after A's own create", want)
	must(t, os.Remove(filepath.Join(d, "mine")))
	want = without(want, "mine")
	check("after A's own unlink", want)

	// A kept directory removed by another mount: A's next opendir says
	// it is gone.
	e := filepath.Join(d, "e")
	for range 3 {
		if got := names(t, e); len(got) != 0 {
			t.Fatalf("e lists %v", got)
		}
	}
	must(t, os.Remove(filepath.Join(bd, "e")))
	if _, err := os.ReadDir(e); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("listing a directory another mount removed: %v, want ENOENT", err)
	}
	want = without(want, "e")
	check("after B's rmdir", want)
}

func sorted(s []string) []string { slices.Sort(s); return s }

func without(s []string, name string) []string {
	return slices.DeleteFunc(slices.Clone(s), func(x string) bool { return x == name })
}

func firstNameDiff(got, want []string) string {
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			return "got " + got[i] + ", want " + want[i]
		}
	}
	return "lengths differ"
}
