package fusefs_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/govfs/govfs/client"
)

// TestMountReadLease: a mount reading a file holds a read lease on it;
// another client's change waits until the mount gave the lease back,
// having dropped the kernel's caches of the file, so even a descriptor
// kept open across the change reads the new bytes and stat shows the new
// size at once (without leases, an open descriptor may keep serving the
// page cache).
func TestMountReadLease(t *testing.T) {
	canMount(t)
	c := startCluster(t)
	mnt := mountProc(t, c)
	cl := newClient(t, c, c.Addrs())
	ctx := t.Context()
	const size = 64 << 10
	f, err := cl.Open(ctx, "/leased", syscall.O_RDWR|syscall.O_CREAT, 0o644)
	must(t, err)
	_, err = f.WriteAt(ctx, bytes.Repeat([]byte("a"), size), 0)
	must(t, err)
	must(t, f.Close())

	fd, err := os.Open(filepath.Join(mnt, "leased"))
	must(t, err)
	defer fd.Close()
	buf := make([]byte, size)
	if n, err := fd.ReadAt(buf, 0); n != size || !bytes.Equal(buf, bytes.Repeat([]byte("a"), size)) {
		t.Fatalf("first read: %d bytes, %v", n, err)
	}
	// Read again: served by the page cache.
	if _, err := fd.ReadAt(buf[:4096], 0); err != nil {
		t.Fatal(err)
	}

	// Another client overwrites the first 4 KiB and closes: its close
	// (the mtime update) returns once the mount gave its lease back.
	f, err = cl.Open(ctx, "/leased", syscall.O_RDWR, 0)
	must(t, err)
	_, err = f.WriteAt(ctx, bytes.Repeat([]byte("b"), 4096), 0)
	must(t, err)
	must(t, f.Close())
	if _, err := fd.ReadAt(buf[:4096], 0); err != nil || !bytes.Equal(buf[:4096], bytes.Repeat([]byte("b"), 4096)) {
		t.Fatalf("the open descriptor read %q... after another client's write (%v)", buf[:8], err)
	}

	// The mount leases the file again on this open; another client grows
	// the file, and stat through the mount shows the new size at once.
	fd2, err := os.Open(filepath.Join(mnt, "leased"))
	must(t, err)
	fd2.Close()
	// At the end, under the lease: answered by the mount (no request).
	if n, err := fd.ReadAt(buf[:4], size); n != 0 || err == nil {
		t.Fatalf("read at the end: %d bytes, %v; want 0 and EOF", n, err)
	}
	f, err = cl.Open(ctx, "/leased", syscall.O_RDWR, 0)
	must(t, err)
	_, err = f.WriteAt(ctx, []byte("tail"), size)
	must(t, err)
	must(t, f.Close())
	st, err := os.Stat(filepath.Join(mnt, "leased"))
	must(t, err)
	if st.Size() != size+4 {
		t.Fatalf("size through the mount %d, want %d", st.Size(), size+4)
	}
	// The descriptor that found the end under the lease now reads the
	// bytes another client added past it (the lease was revoked first).
	if n, err := fd.ReadAt(buf[:8], size); n != 4 || string(buf[:4]) != "tail" {
		t.Fatalf("read past the old end after another client grew the file: %d bytes %q, %v", n, buf[:n], err)
	}
}

// TestReadBackNewSmallFiles: a new small file's bytes wait behind its
// create under the directory lease (nothing reached the minister yet)
// when it is opened again for reading at once: the read lease's grant
// must not stand for the file then (it would say empty), nor the end of
// file be answered from it. Also while another descriptor still holds
// the file open for writing and appends to it.
func TestReadBackNewSmallFiles(t *testing.T) {
	canMount(t)
	c := startCluster(t)
	mnt := mountProc(t, c)
	dir := filepath.Join(mnt, "new")
	must(t, os.Mkdir(dir, 0o755))
	for i := range 40 {
		p := filepath.Join(dir, "f"+strconv.Itoa(i))
		want := bytes.Repeat([]byte{byte('a' + i%26)}, 1+i*37)
		must(t, os.WriteFile(p, want, 0o644))
		if got, err := os.ReadFile(p); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s read back right after it was written: %d bytes, %v; want %d", p, len(got), err, len(want))
		}
	}
	// A writer keeps the file open and grows it; each reader opens it
	// afresh and must see every byte written before its open.
	p := filepath.Join(dir, "grown")
	w, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	must(t, err)
	defer w.Close()
	var want []byte
	for i := range 20 {
		chunk := bytes.Repeat([]byte{byte('A' + i)}, 100)
		_, err := w.Write(chunk)
		must(t, err)
		want = append(want, chunk...)
		if got, err := os.ReadFile(p); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("reader after %d appends of an open writer: %d bytes, %v; want %d", i+1, len(got), err, len(want))
		}
	}
}

// TestUnlinkRevokesReadLease: another client's unlink, or rename onto
// the name, of a file the mount holds a read lease on revokes the lease
// first, so fstat of a descriptor kept open shows the link gone at once,
// not the attributes cached under the lease.
func TestUnlinkRevokesReadLease(t *testing.T) {
	canMount(t)
	c := startCluster(t)
	mnt := mountProc(t, c)
	cl := newClient(t, c, c.Addrs())
	ctx := t.Context()
	for _, how := range []string{"unlink", "rename onto"} {
		name := "/victim-" + strconv.Itoa(len(how))
		f, err := cl.Open(ctx, name, syscall.O_RDWR|syscall.O_CREAT, 0o644)
		must(t, err)
		_, err = f.WriteAt(ctx, []byte("data"), 0)
		must(t, err)
		must(t, f.Close())
		fd, err := os.Open(filepath.Join(mnt, name))
		must(t, err)
		var st syscall.Stat_t
		must(t, syscall.Fstat(int(fd.Fd()), &st))
		if st.Nlink != 1 {
			t.Fatalf("%s: nlink %d before, want 1", name, st.Nlink)
		}
		if how == "unlink" {
			must(t, cl.Remove(ctx, name))
		} else {
			g, err := cl.Open(ctx, name+".new", syscall.O_RDWR|syscall.O_CREAT, 0o644)
			must(t, err)
			must(t, g.Close())
			must(t, cl.Rename(ctx, name+".new", name, 0))
		}
		// The inode is gone with its last link (another client's open
		// does not keep it: docs/fuse.md), so ENOENT; a link count of 0
		// would do too. Not the cached 1.
		if err := syscall.Fstat(int(fd.Fd()), &st); err == nil && st.Nlink != 0 {
			t.Fatalf("fstat of a descriptor kept open after another client's %s: nlink %d, want 0 or ENOENT", how, st.Nlink)
		}
		fd.Close()
	}
}

// TestWrittenFileReadBack: a mount that writes an existing file holds a
// read lease on it from the open, and at the close knows its
// attributes (and a small file's bytes) from the answers to its own
// writes: reading the file back asks the ministry nothing, and still
// gives what every client sees. Times set while the file is open, and
// another client's later change, are not hidden by what it kept.
func TestWrittenFileReadBack(t *testing.T) {
	canMount(t)
	c := startCluster(t)
	addr := freeAddr(t)
	mnt := mountProc(t, c, "--metrics", addr)
	cl := newClient(t, c, c.Addrs())
	ctx := t.Context()
	const files = 20
	content := func(i, gen int) []byte {
		size := 3000 // inline
		if i%4 == 0 {
			size = 100 << 10 // in a chunk
		}
		return bytes.Repeat([]byte(fmt.Sprintf("%d.%d|", i, gen)), size/6)
	}
	for i := range files {
		f, err := cl.Open(ctx, "/w"+strconv.Itoa(i), syscall.O_RDWR|syscall.O_CREAT, 0o644)
		must(t, err)
		must(t, f.Close())
	}
	settled0 := mountCounter(t, addr, "govfs_mount_settled_writes_total")
	for i := range files {
		// Opened without O_TRUNC (the file is empty), as bench mount's
		// write_4k does.
		fd, err := os.OpenFile(filepath.Join(mnt, "w"+strconv.Itoa(i)), os.O_WRONLY, 0)
		must(t, err)
		_, err = fd.Write(content(i, 0))
		must(t, err)
		must(t, fd.Close())
	}
	// The kernel releases a descriptor after close(2) returns.
	deadline := time.Now().Add(10 * time.Second)
	for mountCounter(t, addr, "govfs_mount_settled_writes_total")-settled0 < files && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := mountCounter(t, addr, "govfs_mount_settled_writes_total") - settled0; got != files {
		t.Fatalf("%d of %d written files' attributes known at their release", got, files)
	}
	opens0 := mountCounter(t, addr, "govfs_mount_leased_opens_total")
	check := func(i, gen int) {
		t.Helper()
		p := filepath.Join(mnt, "w"+strconv.Itoa(i))
		if got, err := os.ReadFile(p); err != nil || !bytes.Equal(got, content(i, gen)) {
			t.Fatalf("%s read back: %d bytes %.12q..., %v; want %d bytes %.12q...", p, len(got), got, err, len(content(i, gen)), content(i, gen))
		}
		st, err := os.Stat(p)
		must(t, err)
		a, err := cl.Stat(ctx, "/w"+strconv.Itoa(i))
		must(t, err)
		if uint64(st.Size()) != a.GetSize() || st.ModTime().UnixNano() != a.GetMtimeNs() {
			t.Fatalf("%s through the mount: size %d mtime %d; the ministry: size %d mtime %d", p, st.Size(), st.ModTime().UnixNano(), a.GetSize(), a.GetMtimeNs())
		}
	}
	for i := range files {
		check(i, 0)
	}
	if got := mountCounter(t, addr, "govfs_mount_leased_opens_total") - opens0; got < files {
		t.Fatalf("%d of %d opens of files this mount wrote were answered under its lease", got, files)
	}

	// Times set by path while the file is open for writing come after
	// the write: the release must not take the write's mtime.
	p := filepath.Join(mnt, "w1")
	fd, err := os.OpenFile(p, os.O_WRONLY, 0)
	must(t, err)
	_, err = fd.WriteAt(content(1, 1), 0)
	must(t, err)
	when := time.Unix(1_500_000_000, 123_000_000)
	must(t, os.Chtimes(p, when, when))
	must(t, fd.Close())
	time.Sleep(100 * time.Millisecond) // the release
	st, err := os.Stat(p)
	must(t, err)
	if !st.ModTime().Equal(when) {
		t.Fatalf("mtime after utimens of an open, written file: %v, want %v", st.ModTime(), when)
	}
	check(1, 1)

	// Another client's change revokes the lease first: the mount reads
	// the new bytes and size, not what its own writes left.
	for _, i := range []int{0, 2} {
		clientWrite(t, cl, "/w"+strconv.Itoa(i), content(i+1, 7), syscall.O_TRUNC)
		p := filepath.Join(mnt, "w"+strconv.Itoa(i))
		if got, err := os.ReadFile(p); err != nil || !bytes.Equal(got, content(i+1, 7)) {
			t.Fatalf("%s after another client rewrote it: %d bytes %.12q..., %v", p, len(got), got, err)
		}
	}
}

// TestLeasedLookup: once the entries of files this mount holds read
// leases on expired, their lookups are answered under those leases (no
// request); another client's change of a name (rename away, exchange,
// unlink, rename over it) revokes the lease of the file the name held
// first, so a lookup afterwards never finds the old file.
func TestLeasedLookup(t *testing.T) {
	canMount(t)
	c := startCluster(t)
	addr := freeAddr(t)
	mnt := mountProc(t, c, "--metrics", addr)
	cl := newClient(t, c, c.Addrs())
	ctx := t.Context()
	_, err := cl.Mkdir(ctx, "/d", 0o755)
	must(t, err)
	const files = 10
	content := func(i int) []byte { return []byte(fmt.Sprintf("file %d\n", i)) }
	for i := range files {
		clientWrite(t, cl, "/d/f"+strconv.Itoa(i), content(i), syscall.O_CREAT)
	}
	d := filepath.Join(mnt, "d")
	read := func(name string) ([]byte, error) { return os.ReadFile(filepath.Join(d, name)) }
	for i := range files {
		if got, err := read("f" + strconv.Itoa(i)); err != nil || !bytes.Equal(got, content(i)) {
			t.Fatalf("f%d: %q, %v", i, got, err)
		}
	}
	expire := func() { time.Sleep(1200 * time.Millisecond) } // the 1 s entry timeout
	expire()
	before := mountCounter(t, addr, "govfs_mount_leased_lookups_total")
	for i := range files {
		if got, err := read("f" + strconv.Itoa(i)); err != nil || !bytes.Equal(got, content(i)) {
			t.Fatalf("f%d after its entry expired: %q, %v", i, got, err)
		}
	}
	if got := mountCounter(t, addr, "govfs_mount_leased_lookups_total") - before; got < files {
		t.Fatalf("%d of %d lookups answered under the files' leases", got, files)
	}

	// Another client changes names; each change revokes the lease of
	// the file the name held before it is acknowledged.
	must(t, cl.Rename(ctx, "/d/f1", "/d/g1", 0))
	must(t, cl.Rename(ctx, "/d/f2", "/d/f3", client.RenameExchange))
	must(t, cl.Remove(ctx, "/d/f4"))
	must(t, cl.Rename(ctx, "/d/f6", "/d/f5", 0))
	expire()
	if _, err := read("f1"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("f1 after another client renamed it away: %v, want ENOENT", err)
	}
	if got, err := read("g1"); err != nil || !bytes.Equal(got, content(1)) {
		t.Fatalf("g1: %q, %v", got, err)
	}
	if got, err := read("f2"); err != nil || !bytes.Equal(got, content(3)) {
		t.Fatalf("f2 after an exchange with f3: %q, %v; want %q", got, err, content(3))
	}
	if got, err := read("f3"); err != nil || !bytes.Equal(got, content(2)) {
		t.Fatalf("f3 after an exchange with f2: %q, %v; want %q", got, err, content(2))
	}
	if _, err := read("f4"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("f4 after another client removed it: %v, want ENOENT", err)
	}
	if got, err := read("f5"); err != nil || !bytes.Equal(got, content(6)) {
		t.Fatalf("f5 after f6 was renamed over it: %q, %v; want %q", got, err, content(6))
	}
	if _, err := read("f6"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("f6 after it was renamed away: %v, want ENOENT", err)
	}
}

// TestLeaseKeptPastForget: a file's read lease outlives the kernel's
// forget of its inode (keptfiles.go): the next node of the file takes
// it over, so reading the file again asks for no new lease; another
// client's change revokes it wherever it is, on the forgotten node or
// on the node that took it over, and the mount then reads the change.
func TestLeaseKeptPastForget(t *testing.T) {
	canMount(t)
	c := startCluster(t)
	addr := freeAddr(t)
	mnt := mountProc(t, c, "--metrics", addr)
	cl := newClient(t, c, c.Addrs())
	ctx := t.Context()
	_, err := cl.Mkdir(ctx, "/k", 0o755)
	must(t, err)
	const files = 10
	content := func(i, gen int) []byte {
		size := 100 + gen*1000 // inline
		if i%2 == 1 {
			size = 20<<10 + gen*1000 // in a chunk
		}
		return bytes.Repeat([]byte(fmt.Sprintf("%d.%d|", i, gen)), size/4)
	}
	write := func(i, gen int) {
		clientWrite(t, cl, "/k/f"+strconv.Itoa(i), content(i, gen), syscall.O_CREAT|syscall.O_TRUNC)
	}
	for i := range files {
		write(i, 0)
	}
	check := func(i, gen int) {
		t.Helper()
		p := filepath.Join(mnt, "k", "f"+strconv.Itoa(i))
		// stat first: the kernel keeps attributes given under a lease
		// until the revoke drops them.
		st, err := os.Stat(p)
		must(t, err)
		if st.Size() != int64(len(content(i, gen))) {
			t.Fatalf("%s: size %d, want %d (generation %d)", p, st.Size(), len(content(i, gen)), gen)
		}
		got, err := os.ReadFile(p)
		if err != nil || !bytes.Equal(got, content(i, gen)) {
			t.Fatalf("%s: %d bytes %.10q..., %v; want generation %d (%d bytes)", p, len(got), got, err, gen, len(content(i, gen)))
		}
	}
	for i := range files {
		check(i, 0)
	}
	forget := func() {
		dropKernelCaches(t)
		time.Sleep(300 * time.Millisecond) // the kernel's forgets reach the mount
	}
	forget()
	adopted0 := mountCounter(t, addr, "govfs_mount_adopted_leases_total")
	for i := 1; i < files; i++ {
		check(i, 0)
	}
	if got := mountCounter(t, addr, "govfs_mount_adopted_leases_total") - adopted0; got < files/2 {
		t.Fatalf("%d of %d leases taken over after the kernel forgot the files", got, files-1)
	}
	// f0's lease is still on its forgotten node; f1's moved to a new
	// node. Another client rewrites both: each revoke finds its holder.
	write(0, 1)
	write(1, 1)
	check(0, 1)
	check(1, 1)
	// Forgotten again with the leases taken over once: a change now
	// passes through two forgotten nodes' hands.
	forget()
	write(2, 1)
	check(2, 1)
	for i := 3; i < files; i++ {
		check(i, 0)
	}
}

// TestOwnLinkUnderLease: this mount's own link and unlink of a file it
// holds a read lease on change its nlink; the minister revokes only
// other clients' leases, so the mount itself must stop serving the
// attributes held under its lease (found in review).
func TestOwnLinkUnderLease(t *testing.T) {
	canMount(t)
	c := startCluster(t)
	mnt := mountProc(t, c)
	p := filepath.Join(mnt, "a")
	must(t, os.WriteFile(p, []byte("data"), 0o644))
	// The create's release, then the read lease.
	time.Sleep(200 * time.Millisecond)
	if _, err := os.ReadFile(p); err != nil {
		t.Fatal(err)
	}
	nlink := func(want uint64) {
		t.Helper()
		time.Sleep(1200 * time.Millisecond) // the kernel's own 1 s caches
		var st syscall.Stat_t
		must(t, syscall.Stat(p, &st))
		if st.Nlink != want {
			t.Fatalf("nlink %d, want %d", st.Nlink, want)
		}
	}
	must(t, os.Link(p, filepath.Join(mnt, "b")))
	nlink(2)
	if _, err := os.ReadFile(p); err != nil { // leased again
		t.Fatal(err)
	}
	must(t, os.Remove(filepath.Join(mnt, "b")))
	nlink(1)
}

// TestKeptLeaseAfterOwnUnlink: a lease kept past the kernel's forget is
// taken over before this mount's own unlink of another name of the
// file marks its attributes stale, so stat afterwards shows the new link
// count, not the one held under the kept lease (found in review).
func TestKeptLeaseAfterOwnUnlink(t *testing.T) {
	canMount(t)
	c := startCluster(t)
	mnt := mountProc(t, c)
	cl := newClient(t, c, c.Addrs())
	ctx := t.Context()
	f, err := cl.Open(ctx, "/a", syscall.O_RDWR|syscall.O_CREAT, 0o644)
	must(t, err)
	_, err = f.WriteAt(ctx, []byte("data"), 0)
	must(t, err)
	must(t, f.Close())
	_, err = cl.Link(ctx, "/a", "/b")
	must(t, err)
	a := filepath.Join(mnt, "a")
	if _, err := os.ReadFile(a); err != nil { // the read lease
		t.Fatal(err)
	}
	dropKernelCaches(t)
	// The forgets reach the mount; a listing then makes new nodes that
	// no operation has used yet.
	time.Sleep(300 * time.Millisecond)
	if _, err := os.ReadDir(mnt); err != nil {
		t.Fatal(err)
	}
	must(t, os.Remove(filepath.Join(mnt, "b")))
	time.Sleep(1200 * time.Millisecond) // the kernel's own 1 s caches
	var st syscall.Stat_t
	must(t, syscall.Stat(a, &st))
	if st.Nlink != 1 {
		t.Fatalf("nlink %d after this mount removed the other name, want 1", st.Nlink)
	}
}

// clientWrite writes data at the start of path through client cl (opened
// with flags | O_RDWR) and closes it.
func clientWrite(t *testing.T, cl *client.Client, path string, data []byte, flags int) {
	t.Helper()
	ctx := t.Context()
	f, err := cl.Open(ctx, path, syscall.O_RDWR|flags, 0o644)
	must(t, err)
	_, err = f.WriteAt(ctx, data, 0)
	must(t, err)
	must(t, f.Close())
}
