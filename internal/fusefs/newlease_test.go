package fusefs_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// TestNewFileLeases: files this mount created under its directory lease
// get their read leases once their creates are applied, so opening one
// again (for writing, as bench mount's write_4k does, or for reading)
// asks the ministry nothing; and another client's change of such a file
// revokes the lease first, so the mount then reads the change, and its
// unlink, so the name is gone.
func TestNewFileLeases(t *testing.T) {
	canMount(t)
	c := startCluster(t)
	addr := freeAddr(t)
	mnt := mountProc(t, c, "--metrics", addr, "--new-file-leases")
	cl := newClient(t, c, c.Addrs())
	ctx := t.Context()
	dir := filepath.Join(mnt, "new")
	must(t, os.Mkdir(dir, 0o755))
	const files = 40
	name := func(i int) string { return filepath.Join(dir, "f"+strconv.Itoa(i)) }
	for i := range files {
		must(t, os.WriteFile(name(i), []byte("v0 "+strconv.Itoa(i)), 0o644))
	}
	fsyncDir(t, dir)
	// The leases are asked for in the background once the creates were
	// applied; all but the first creates (before the directory lease)
	// were queued.
	var asked int
	waitFor(t, "leases of the new files", func() error {
		asked = mountCounter(t, addr, "govfs_mount_new_file_leases_total")
		if asked < files-5 {
			return errors.New("asked for " + strconv.Itoa(asked) + " new files' leases")
		}
		return nil
	})
	time.Sleep(200 * time.Millisecond) // the last grants
	opens0 := mountCounter(t, addr, "govfs_mount_leased_opens_total")
	for i := range files {
		f, err := os.OpenFile(name(i), os.O_WRONLY, 0)
		must(t, err)
		_, err = f.WriteAt([]byte("v1"), 0)
		must(t, err)
		must(t, f.Close())
	}
	if got := mountCounter(t, addr, "govfs_mount_leased_opens_total") - opens0; got < asked {
		t.Fatalf("%d of %d opens of files whose leases were asked for at their create asked the ministry nothing", got, asked)
	}
	for i := range files {
		want := "v1 " + strconv.Itoa(i)
		if got, err := os.ReadFile(name(i)); err != nil || string(got) != want {
			t.Fatalf("%s: %q, %v; want %q", name(i), got, err, want)
		}
	}

	// Renamed here (queued under the directory lease): once applied, the
	// moved files' attributes are the rename's answer, kept under their
	// leases: a stat asks nothing and says what the ministry says.
	for i := 10; i < files; i++ {
		must(t, os.Rename(name(i), name(i)+"-moved"))
	}
	fsyncDir(t, dir)
	time.Sleep(100 * time.Millisecond)
	reqs0 := mountCounter(t, addr, "govfs_mount_metadata_requests_total")
	for i := 10; i < files; i++ {
		st, err := os.Stat(name(i) + "-moved")
		must(t, err)
		a, err := cl.Stat(ctx, "/new/f"+strconv.Itoa(i)+"-moved")
		must(t, err)
		sys := st.Sys().(*syscall.Stat_t)
		if ctime := sys.Ctim.Nano(); ctime != a.GetCtimeNs() || uint64(st.Size()) != a.GetSize() {
			t.Fatalf("%s-moved through the mount: ctime %d size %d; the ministry: ctime %d size %d", name(i), ctime, st.Size(), a.GetCtimeNs(), a.GetSize())
		}
	}
	if got := mountCounter(t, addr, "govfs_mount_metadata_requests_total") - reqs0; got > 3 {
		t.Fatalf("stat of %d files renamed here under their leases made %d requests", files-10, got)
	}

	// Another client rewrites one and removes another: the mount sees
	// both at once (a lookup served by a clerk that had not applied the
	// unlink yet found the name; linearizeLookups).
	clientWrite(t, cl, "/new/f3", []byte("rewritten elsewhere"), syscall.O_TRUNC)
	if got, err := os.ReadFile(name(3)); err != nil || !bytes.Equal(got, []byte("rewritten elsewhere")) {
		t.Fatalf("f3 after another client rewrote it: %q, %v", got, err)
	}
	must(t, cl.Remove(ctx, "/new/f4"))
	if st, err := os.Stat(name(4)); !errors.Is(err, os.ErrNotExist) {
		sys := st.Sys().(*syscall.Stat_t)
		_, cerr := cl.Stat(ctx, "/new/f4")
		time.Sleep(1500 * time.Millisecond)
		_, err2 := os.Stat(name(4))
		_, err3 := os.ReadFile(name(4))
		t.Fatalf("f4 after another client removed it: %v (ino %d nlink %d size %d), want ENOENT; ministry %v; later %v; read %v", err, sys.Ino, sys.Nlink, st.Size(), cerr, err2, err3)
	}
}

// TestCreateLeases: with the default flags, the files a mount creates
// under its directory lease get their read leases in the answer to the
// batch that created them (--create-leases), at no request of their
// own: a stat past the attribute timeout and an open for writing ask
// the ministry nothing, and another client's change still revokes the
// lease first, so the mount reads it.
func TestCreateLeases(t *testing.T) {
	canMount(t)
	c := startCluster(t)
	addr := freeAddr(t)
	mnt := mountProc(t, c, "--metrics", addr)
	cl := newClient(t, c, c.Addrs())
	dir := filepath.Join(mnt, "cl")
	must(t, os.Mkdir(dir, 0o755))
	const files = 40
	name := func(i int) string { return filepath.Join(dir, "f"+strconv.Itoa(i)) }
	for i := range files {
		f, err := os.OpenFile(name(i), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		must(t, err)
		must(t, f.Close())
	}
	reqs0 := mountCounter(t, addr, "govfs_mount_metadata_requests_total")
	fsyncDir(t, dir)
	var got int
	waitFor(t, "leases granted with the creates", func() error {
		got = mountCounter(t, addr, "govfs_mount_new_file_leases_total")
		if got < files-5 { // the first creates, before the directory lease, were not queued
			return errors.New("took " + strconv.Itoa(got) + " new files' leases")
		}
		return nil
	})
	// The fsync sent the queue: a few batches, and nothing else (no
	// lease requests of their own).
	if n := mountCounter(t, addr, "govfs_mount_metadata_requests_total") - reqs0; n > 5 {
		t.Fatalf("sending %d queued creates and taking %d leases made %d requests", files, got, n)
	}
	time.Sleep(1200 * time.Millisecond) // past the attribute timeout
	reqs0 = mountCounter(t, addr, "govfs_mount_metadata_requests_total")
	opens0 := mountCounter(t, addr, "govfs_mount_leased_opens_total")
	for i := range files {
		if _, err := os.Stat(name(i)); err != nil {
			t.Fatal(err)
		}
	}
	if n := mountCounter(t, addr, "govfs_mount_metadata_requests_total") - reqs0; n > files-got+2 {
		t.Fatalf("stat of %d files, %d of them leased with their creates, past the attribute timeout: %d requests", files, got, n)
	}
	reqs0 = mountCounter(t, addr, "govfs_mount_metadata_requests_total")
	for i := range files {
		f, err := os.OpenFile(name(i), os.O_WRONLY, 0)
		must(t, err)
		_, err = f.WriteAt([]byte("v1 "+strconv.Itoa(i)), 0)
		must(t, err)
		must(t, f.Close())
	}
	if n := mountCounter(t, addr, "govfs_mount_leased_opens_total") - opens0; n < got {
		t.Fatalf("%d of %d opens of files leased with their creates asked the ministry nothing", n, got)
	}
	// A leased file's write is its lease's upgrade (write-behind: the
	// close is answered under it) and a share of a commit: the grant read
	// its chunk table too (none), so the write does not read it first.
	if n := mountCounter(t, addr, "govfs_mount_metadata_requests_total") - reqs0; n > 2*files+2*(files-got)+2 {
		t.Fatalf("open, write and close of %d files, %d of them leased with their creates: %d requests", files, got, n)
	}
	for i := range files {
		want := "v1 " + strconv.Itoa(i)
		if b, err := os.ReadFile(name(i)); err != nil || string(b) != want {
			t.Fatalf("%s: %q, %v; want %q", name(i), b, err, want)
		}
	}
	// Another client's change revokes the lease before it is acknowledged.
	clientWrite(t, cl, "/cl/f7", []byte("rewritten elsewhere"), syscall.O_TRUNC)
	if b, err := os.ReadFile(name(7)); err != nil || string(b) != "rewritten elsewhere" {
		t.Fatalf("f7 after another client rewrote it: %q, %v", b, err)
	}
	must(t, cl.Chmod(t.Context(), "/cl/f8", 0o600))
	if st, err := os.Stat(name(8)); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("f8 after another client's chmod 600: %v, %v", st.Mode(), err)
	}
}
