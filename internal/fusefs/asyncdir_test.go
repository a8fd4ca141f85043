package fusefs_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/govfs/govfs/client"
)

// listNames lists dir through the library client, linearizably.
func listNames(t *testing.T, cl *client.Client, dir string) []string {
	t.Helper()
	ents, err := cl.Readdir(t.Context(), dir, client.Linearizable())
	must(t, err)
	var names []string
	for _, e := range ents {
		names = append(names, string(e.GetName()))
	}
	sort.Strings(names)
	return names
}

func fsyncDir(t *testing.T, dir string) {
	t.Helper()
	d, err := os.Open(dir)
	must(t, err)
	defer d.Close()
	must(t, d.Sync())
}

// TestMountAsyncDirs checks asynchronous creates (asyncdir.go) with two
// mount processes of one cluster: a mount creating, renaming and
// removing many entries in a directory answers them itself; after fsync
// of the directory the cluster has exactly those entries, with the data
// written; the other mount's O_EXCL create of a name the first one just
// created fails with EEXIST (its create revokes the directory lease, and
// the holder sends its queue first), and its own create is seen by the
// first mount; entries created and fsynced before a kill -9 of the mount
// are all there.
func TestMountAsyncDirs(t *testing.T) {
	canMount(t)
	c := startCluster(t)
	dirA, dirB := filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")
	must(t, os.Mkdir(dirA, 0o755))
	must(t, os.Mkdir(dirB, 0o755))
	ma := startMount(t, c, dirA, "--log-level", "debug")
	startMount(t, c, dirB)
	cl := newClient(t, c, c.Addrs())

	d := filepath.Join(dirA, "d")
	must(t, os.Mkdir(d, 0o755))
	const files = 300
	var want []string
	start := time.Now()
	for i := range files {
		name := "f" + strconv.Itoa(i)
		f, err := os.OpenFile(filepath.Join(d, name), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o640)
		must(t, err)
		if i%10 == 0 {
			_, err = f.WriteString("content of " + name)
			must(t, err)
		}
		must(t, f.Close())
		want = append(want, name)
	}
	must(t, os.Mkdir(filepath.Join(d, "sub"), 0o750))
	must(t, os.Symlink("f2", filepath.Join(d, "link")))
	must(t, syscall.Mkfifo(filepath.Join(d, "fifo"), 0o600))
	must(t, os.Rename(filepath.Join(d, "f3"), filepath.Join(d, "g3")))
	must(t, os.Remove(filepath.Join(d, "f4")))
	wantErrno(t, "O_EXCL create of an existing name", func() error {
		_, err := os.OpenFile(filepath.Join(d, "f5"), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		return err
	}(), syscall.EEXIST)
	wantErrno(t, "unlink of a missing name", os.Remove(filepath.Join(d, "f4")), syscall.ENOENT)
	wantErrno(t, "unlink of a directory", syscall.Unlink(filepath.Join(d, "sub")), syscall.EISDIR)
	wantErrno(t, "rename of a missing name", os.Rename(filepath.Join(d, "f4"), filepath.Join(d, "h")), syscall.ENOENT)
	wantErrno(t, "RENAME_NOREPLACE onto a name", unix.Renameat2(unix.AT_FDCWD, filepath.Join(d, "f6"), unix.AT_FDCWD, filepath.Join(d, "f7"), unix.RENAME_NOREPLACE), syscall.EEXIST)
	t.Logf("%d creates and changes through mount A in %v", files+5, time.Since(start).Round(time.Millisecond))
	if b, err := os.ReadFile(ma.log); err != nil || !strings.Contains(string(b), "directory lease taken") {
		t.Fatalf("mount A never took a directory lease (log: %v)", err)
	}
	want = slices.DeleteFunc(want, func(s string) bool { return s == "f3" || s == "f4" })
	want = append(want, "g3", "sub", "link", "fifo")
	sort.Strings(want)

	// This mount sees its own changes at once.
	ents, err := os.ReadDir(d)
	must(t, err)
	var got []string
	for _, e := range ents {
		got = append(got, e.Name())
	}
	sort.Strings(got)
	if !slices.Equal(got, want) {
		t.Fatalf("mount A lists %d entries, want %d", len(got), len(want))
	}
	st, err := os.Lstat(filepath.Join(d, "sub"))
	must(t, err)
	if !st.IsDir() || st.Mode().Perm() != 0o750 {
		t.Fatalf("sub: mode %v", st.Mode())
	}
	if target, err := os.Readlink(filepath.Join(d, "link")); err != nil || target != "f2" {
		t.Fatalf("readlink: %q, %v", target, err)
	}

	// After fsync of the directory the cluster has exactly that.
	fsyncDir(t, d)
	if got := listNames(t, cl, "/d"); !slices.Equal(got, want) {
		t.Fatalf("the cluster lists %d entries after fsync, want %d: %v", len(got), len(want), got)
	}
	for i := 0; i < files; i += 10 {
		name := "f" + strconv.Itoa(i)
		if i == 0 || name == "f3" || name == "f4" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dirB, "d", name))
		must(t, err)
		if string(b) != "content of "+name {
			t.Fatalf("mount B reads %q from %s", b, name)
		}
	}

	// A name A created a moment ago is taken for B's O_EXCL create.
	for i := range 5 {
		name := "x" + strconv.Itoa(i)
		f, err := os.OpenFile(filepath.Join(d, name), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		must(t, err)
		must(t, f.Close())
		_, err = os.OpenFile(filepath.Join(dirB, "d", name), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		wantErrno(t, "mount B's O_EXCL create of "+name+" just created by mount A", err, syscall.EEXIST)
		// And B's own create shows on A.
		bname := "b" + strconv.Itoa(i)
		f, err = os.OpenFile(filepath.Join(dirB, "d", bname), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		must(t, err)
		must(t, f.Close())
		waitFor(t, "mount A to see "+bname, func() error { _, err := os.Lstat(filepath.Join(d, bname)); return err })
	}

	// A directory A makes under its parent's lease holds its own lease
	// from the start (MakeDirDeferred, newDirLease): A answers the creates
	// in it at once; B's O_EXCL create there of a name A made recalls that
	// lease first, and B's own create shows on A.
	n := filepath.Join(dirA, "n")
	must(t, os.Mkdir(n, 0o755))
	for i := range 2 {
		must(t, os.WriteFile(filepath.Join(n, "pre"+strconv.Itoa(i)), nil, 0o600))
	}
	sub := filepath.Join(n, "sub")
	must(t, os.Mkdir(sub, 0o755))
	must(t, os.WriteFile(filepath.Join(sub, "x"), []byte("made in a new directory"), 0o600))
	if !strings.Contains(readLog(t, ma.log), "directory made with its lease") {
		t.Fatal("mount A did not lease the directory it made before its create was applied")
	}
	_, err = os.OpenFile(filepath.Join(dirB, "n", "sub", "x"), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	wantErrno(t, "mount B's O_EXCL create of a name mount A made in its new directory", err, syscall.EEXIST)
	must(t, os.WriteFile(filepath.Join(dirB, "n", "sub", "y"), nil, 0o600))
	waitFor(t, "mount A to see n/sub/y", func() error { _, err := os.Lstat(filepath.Join(sub, "y")); return err })
	if b, err := os.ReadFile(filepath.Join(dirB, "n", "sub", "x")); err != nil || string(b) != "made in a new directory" {
		t.Fatalf("mount B reads n/sub/x: %q, %v", b, err)
	}

	// Close-to-open without fsync: a file A created under its directory
	// lease and closed is found and read whole by B's very next open,
	// although A's create and the file's chunk (written in the
	// background after close) may still be queued. B's lookup that finds
	// nothing recalls A's directory lease, so A's queue is applied first
	// (CI once failed TestMount's close-to-open this way, before the
	// recall; with a chunk-sized file the create waits for its chunk,
	// and the open failed every time).
	var dst syscall.Stat_t
	must(t, syscall.Stat(d, &dst))
	dirAttr := " dir=" + strconv.FormatUint(dst.Ino, 10) + " "
	leaseLines := func(what string) int {
		n := 0
		for _, line := range strings.Split(readLog(t, ma.log), "\n") {
			if strings.Contains(line, "directory lease "+what) && strings.Contains(line, dirAttr) {
				n++
			}
		}
		return n
	}
	recalls := 0
	for round := range 3 {
		time.Sleep(2100 * time.Millisecond) // A's backoff after a recall
		name := "cto" + strconv.Itoa(round)
		body := bytes.Repeat([]byte(name), 16<<10)
		must(t, os.WriteFile(filepath.Join(d, "pre"+strconv.Itoa(round)), nil, 0o600))
		must(t, os.WriteFile(filepath.Join(d, name), body, 0o600))
		revoked := leaseLines("revoked")
		if taken := leaseLines("taken"); taken <= revoked {
			t.Fatalf("round %d: mount A holds no directory lease on d (taken %d times, revoked %d)", round, taken, revoked)
		}
		b, err := os.ReadFile(filepath.Join(dirB, "d", name))
		if err != nil || !bytes.Equal(b, body) {
			t.Fatalf("round %d: mount B's first open of %s, closed on mount A: %d bytes of %d, %v", round, name, len(b), len(body), err)
		}
		// B's lookup recalled the lease (nothing else of B's touched d),
		// unless A's batch was applied before it (a loaded machine:
		// then B's follower had the name, and no recall was needed).
		if leaseLines("revoked") > revoked {
			recalls++
		}
	}
	if recalls == 0 {
		t.Fatal("mount B's opens never recalled mount A's directory lease: the recall went untested")
	}

	// Entries created and fsynced survive a kill -9 of the mount.
	e := filepath.Join(dirA, "e")
	must(t, os.Mkdir(e, 0o755))
	var kept []string
	for i := range 100 {
		name := "k" + strconv.Itoa(i)
		f, err := os.OpenFile(filepath.Join(e, name), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		must(t, err)
		must(t, f.Close())
		kept = append(kept, name)
	}
	fsyncDir(t, e)
	ma.kill(t)
	sort.Strings(kept)
	if got := listNames(t, cl, "/e"); !slices.Equal(got, kept) {
		t.Fatalf("after kill -9: the cluster lists %d entries of %d fsynced: %v", len(got), len(kept), got)
	}
}

// waitFor retries check for up to 2 s (another client's change reaches
// every clerk within milliseconds; the kernel keeps a looked-up entry for
// the entry timeout).
func waitFor(t *testing.T, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRmdirQueued: rm -rf of directories this mount emptied under their
// directory leases queues the rmdirs too, and the cluster ends without
// them (and without their files) once the top directory is fsynced; a
// directory another client put a file in meanwhile is not removed
// (ENOTEMPTY, at once: its lease was recalled, so its rmdir goes to the
// ministry).
func TestRmdirQueued(t *testing.T) {
	canMount(t)
	c := startCluster(t)
	ma := startMount(t, c, emptyDir(t), "--log-level", "debug")
	dirA, dirB := ma.dir, mountProc(t, c, "--async-dirs=false")
	cl := newClient(t, c, c.Addrs())

	top := makeDirsOfFiles(t, filepath.Join(dirA, "t"), "s", 6)
	empty := func(k int) {
		for i := range 5 {
			must(t, os.Remove(filepath.Join(top, "s"+strconv.Itoa(k), "f"+strconv.Itoa(i))))
		}
	}
	// s5 is emptied here, then B adds a file to it.
	empty(5)
	must(t, os.WriteFile(filepath.Join(dirB, "t", "s5", "late"), nil, 0o644))
	wantErrno(t, "rmdir of a directory another mount added a file to", os.Remove(filepath.Join(top, "s5")), syscall.ENOTEMPTY)
	for k := range 5 {
		empty(k)
		must(t, os.Remove(filepath.Join(top, "s"+strconv.Itoa(k))))
	}
	if b, err := os.ReadFile(ma.log); err != nil || !strings.Contains(string(b), "rmdir queued") {
		t.Fatalf("mount A queued no rmdir (log: %v)", err)
	}
	if got := names(t, top); !slices.Equal(got, []string{"s5"}) {
		t.Fatalf("mount A lists %v in t, want [s5]", got)
	}
	fsyncDir(t, top)
	if got := listNames(t, cl, "/t"); !slices.Equal(got, []string{"s5"}) {
		t.Fatalf("the cluster has %v in /t after the fsync, want [s5]", got)
	}
	if got := listNames(t, cl, "/t/s5"); !slices.Equal(got, []string{"late"}) {
		t.Fatalf("the cluster has %v in /t/s5, want [late]", got)
	}
	for k := range 5 {
		if _, err := cl.Stat(t.Context(), "/t/s"+strconv.Itoa(k), client.Linearizable()); !errors.Is(err, syscall.ENOENT) {
			t.Fatalf("/t/s%d after its queued rmdir: %v, want ENOENT", k, err)
		}
	}
}

// makeDirsOfFiles makes directory top with dirs subdirectories prefix0,
// prefix1, ..., each with files f0-f4 of one byte, fsyncs it and
// returns it.
func makeDirsOfFiles(t *testing.T, top, prefix string, dirs int) string {
	t.Helper()
	must(t, os.Mkdir(top, 0o755))
	for k := range dirs {
		sub := filepath.Join(top, prefix+strconv.Itoa(k))
		must(t, os.Mkdir(sub, 0o755))
		for i := range 5 {
			must(t, os.WriteFile(filepath.Join(sub, "f"+strconv.Itoa(i)), []byte("x"), 0o644))
		}
	}
	fsyncDir(t, top)
	return top
}

// emptyDir returns a new empty directory (a mount point).
func emptyDir(t *testing.T) string {
	t.Helper()
	d := filepath.Join(t.TempDir(), "mnt")
	must(t, os.Mkdir(d, 0o755))
	return d
}

// readLog returns a mount's log so far.
func readLog(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	must(t, err)
	return string(b)
}

// dropKernelCaches makes the kernel forget unused dentries and inodes,
// as memory pressure would (needs root).
func dropKernelCaches(t *testing.T) {
	t.Helper()
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("2"), 0); err != nil {
		t.Skipf("cannot drop the kernel's caches: %v", err)
	}
}

// TestDirLeaseKeptPastForget: directory leases outlive the kernel's
// forget of their directories (keptdirs.go). After the kernel dropped
// its caches, rm -rf of directories this mount made queues every
// unlink and rmdir under the kept leases; another mount's create in a
// directory whose lease is kept recalls it (the create succeeds at once
// and this mount lists the new name); the cluster ends with exactly
// what both mounts did.
func TestDirLeaseKeptPastForget(t *testing.T) {
	canMount(t)
	c := startCluster(t)
	ma := startMount(t, c, emptyDir(t), "--log-level", "debug")
	dirA, dirB := ma.dir, mountProc(t, c, "--async-dirs=false")
	cl := newClient(t, c, c.Addrs())

	top := makeDirsOfFiles(t, filepath.Join(dirA, "k"), "d", 3)
	waitFor(t, "the kernel to forget the directories", func() error {
		dropKernelCaches(t) // again while some are still held
		if n := strings.Count(readLog(t, ma.log), "directory lease kept past the kernel's forget"); n < 3 {
			return errors.New(strconv.Itoa(n) + " leases kept")
		}
		return nil
	})

	// B's create in d2 recalls A's kept lease on it.
	must(t, os.WriteFile(filepath.Join(dirB, "k", "d2", "late"), []byte("b"), 0o644))
	if got := names(t, filepath.Join(top, "d2")); !slices.Contains(got, "late") {
		t.Fatalf("mount A lists %v in k/d2 after mount B's create, want late among them", got)
	}

	before := strings.Count(readLog(t, ma.log), "rmdir queued")
	for k := range 2 {
		must(t, os.RemoveAll(filepath.Join(top, "d"+strconv.Itoa(k))))
	}
	log := readLog(t, ma.log)
	if n := strings.Count(log, "directory lease kept past a forget taken over"); n < 2 {
		t.Fatalf("mount A took over %d kept leases, want at least 2", n)
	}
	if n := strings.Count(log, "rmdir queued") - before; n != 2 {
		t.Fatalf("mount A queued %d rmdirs of kept-lease directories, want 2", n)
	}
	fsyncDir(t, top)
	if got := listNames(t, cl, "/k"); !slices.Equal(got, []string{"d2"}) {
		t.Fatalf("the cluster has %v in /k after the fsync, want [d2]", got)
	}
	if got := listNames(t, cl, "/k/d2"); !slices.Equal(got, []string{"f0", "f1", "f2", "f3", "f4", "late"}) {
		t.Fatalf("the cluster has %v in /k/d2, want f0-f4 and late", got)
	}
	must(t, os.RemoveAll(filepath.Join(top, "d2")))
	fsyncDir(t, top)
	if got := listNames(t, cl, "/k"); len(got) != 0 {
		t.Fatalf("the cluster has %v in /k after rm -rf of everything, want nothing", got)
	}
}
