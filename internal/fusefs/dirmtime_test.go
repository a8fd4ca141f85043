package fusefs_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/govfs/govfs/client"
)

// TestDirMtimeAfterQueuedChanges is, first, what rsync -a does to a
// directory: make it and set its times at once, fill it (names queued
// under the directory lease), and later look at its times again to
// decide whether to set them once more. What the mount reports then must be what the
// cluster has: the filling moved mtime on. rsync -a -n -i listed
// ".d..t......" for directories whose lookup, once the kernel had
// forgotten the name, was answered from the attributes the mount held
// from the first setattr.
func TestDirMtimeAfterQueuedChanges(t *testing.T) {
	m, cl := clusterMount(t, "--entry-timeout", "50ms")
	mnt := m.dir

	old := time.Date(2011, 3, 4, 5, 6, 7, 0, time.UTC)
	const dirs = 10
	top := filepath.Join(mnt, "top")
	must(t, os.Mkdir(top, 0o755))
	for i := range dirs {
		d := filepath.Join(top, "d"+strconv.Itoa(i))
		must(t, os.Mkdir(d, 0o755))
		must(t, os.Chtimes(d, old, old))
	}
	for i := range dirs {
		name := "d" + strconv.Itoa(i)
		d := filepath.Join(top, name)
		// Through a descriptor of the directory, as rsync does: no
		// lookup of its name while it fills.
		dfd, err := unix.Open(d, unix.O_PATH|unix.O_DIRECTORY, 0)
		must(t, err)
		for j := range 3 {
			f := "f" + strconv.Itoa(j)
			fd, err := unix.Openat(dfd, f+".tmp", unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY, 0o600)
			must(t, err)
			_, err = unix.Write(fd, []byte("data "+f))
			must(t, err)
			must(t, unix.Close(fd))
			must(t, unix.Renameat(dfd, f+".tmp", dfd, f))
		}
		must(t, unix.Close(dfd))
		time.Sleep(100 * time.Millisecond) // the kernel forgets the name
		// A change in top keeps its directory lease busy, as rsync's
		// next file does.
		must(t, os.WriteFile(filepath.Join(top, "g"+strconv.Itoa(i)), nil, 0o644))
		st, err := os.Stat(d)
		must(t, err)
		a, err := cl.Stat(t.Context(), "/top/"+name, client.Linearizable())
		must(t, err)
		cluster := time.Unix(0, a.GetMtimeNs())
		if cluster.Equal(old) {
			t.Errorf("cluster says %s mtime %v: the names made in it did not move it on", name, cluster.UTC())
		}
		if !st.ModTime().Equal(cluster) {
			t.Errorf("mount says %s mtime %v, the cluster %v", name, st.ModTime().UTC(), cluster.UTC())
		}
	}

	// cp -a and rsync set a file's times right after close(2), while the
	// kernel releases the descriptor in the background: the times must
	// hold, and the release must not turn into EBADF. Every other file
	// is bigger than the inline limit: its bytes go to chunk servers in
	// the background, and its release waits for them without holding
	// up the utimensat (git clone's copies).
	for i := range 200 {
		f := filepath.Join(top, "t"+strconv.Itoa(i))
		data := []byte("some data " + f)
		if i%2 == 1 {
			data = bytes.Repeat(data, 70000/len(data)+1)
		}
		must(t, os.WriteFile(f, data, 0o600))
		must(t, os.Chtimes(f, old, old))
		st, err := os.Stat(f)
		must(t, err)
		if !st.ModTime().Equal(old) || st.Size() != int64(len(data)) {
			t.Fatalf("%s: mtime %v size %d after utimens to %v, want size %d", f, st.ModTime().UTC(), st.Size(), old, len(data))
		}
	}
	fsyncDir(t, top)
	for i := range 200 {
		a, err := cl.Stat(t.Context(), "/top/t"+strconv.Itoa(i), client.Linearizable())
		must(t, err)
		if !time.Unix(0, a.GetMtimeNs()).Equal(old) {
			t.Fatalf("the cluster has t%d with mtime %v, want %v", i, time.Unix(0, a.GetMtimeNs()).UTC(), old)
		}
	}
}

// TestCopyAttributesOfNewFiles does to new files what cp -a and tar do:
// write the bytes, then fchown, fchmod and futimens before close. While
// the file's create is still queued under the directory lease those
// changes queue behind it (client.SetattrDeferred); what the mount
// answers at once must be what the cluster has once the directory is
// fsynced.
func TestCopyAttributesOfNewFiles(t *testing.T) {
	m, cl := clusterMount(t)
	mnt := m.dir
	dir := filepath.Join(mnt, "copy")
	must(t, os.Mkdir(dir, 0o755))

	type want struct {
		data         []byte
		mode         os.FileMode
		uid, gid     int
		atime, mtime time.Time
	}
	wants := map[string]want{}
	for i := range 40 {
		name := "f" + strconv.Itoa(i)
		w := want{data: []byte(strings.Repeat("x", i*100) + name), mode: os.FileMode(0o600 + i%3*0o40),
			uid: 1000 + i, gid: 2000 + i, atime: time.Unix(1500000000+int64(i), 7000), mtime: time.Unix(1400000000+int64(i), 123456000)}
		if i%5 == 0 {
			w.data = make([]byte, 20000+i) // past the inline limit: through chunks
		}
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		must(t, err)
		_, err = f.Write(w.data)
		must(t, err)
		times := func() {
			must(t, unix.Futimes(int(f.Fd()), []unix.Timeval{unix.NsecToTimeval(w.atime.UnixNano()), unix.NsecToTimeval(w.mtime.UnixNano())}))
		}
		if i%2 == 1 {
			times() // tar's order: times, owner, mode
		}
		must(t, f.Chown(w.uid, w.gid))
		must(t, f.Chmod(w.mode))
		if i%2 == 0 {
			times() // cp -a's
		}
		if i%10 == 3 {
			// A chown of a setuid file clears the bit (the ministry
			// does; the mount must not answer it from what it holds).
			must(t, f.Chmod(w.mode|os.ModeSetuid))
			must(t, f.Chown(w.uid+1, w.gid))
			w.uid++
			times()
		}
		must(t, f.Close())
		wants[name] = w
	}
	check := func(when string, stat func(name string) (os.FileMode, int, int, int64, time.Time, time.Time)) {
		t.Helper()
		for name, w := range wants {
			mode, uid, gid, size, atime, mtime := stat(name)
			if mode != w.mode || uid != w.uid || gid != w.gid || size != int64(len(w.data)) || !atime.Equal(w.atime) || !mtime.Equal(w.mtime) {
				t.Errorf("%s: %s is mode %v uid %d gid %d size %d atime %v mtime %v, want %v %d %d %d %v %v",
					when, name, mode, uid, gid, size, atime, mtime, w.mode, w.uid, w.gid, len(w.data), w.atime, w.mtime)
			}
		}
	}
	fromMount := func(name string) (os.FileMode, int, int, int64, time.Time, time.Time) {
		var st unix.Stat_t
		must(t, unix.Lstat(filepath.Join(dir, name), &st))
		return os.FileMode(st.Mode & 0o7777), int(st.Uid), int(st.Gid), st.Size,
			time.Unix(st.Atim.Unix()), time.Unix(st.Mtim.Unix())
	}
	check("mount, at once", fromMount)
	fsyncDir(t, dir)
	check("mount, after fsync", fromMount)
	check("cluster", func(name string) (os.FileMode, int, int, int64, time.Time, time.Time) {
		a, err := cl.Stat(t.Context(), "/copy/"+name, client.Linearizable())
		must(t, err)
		return os.FileMode(a.GetMode() & 0o7777), int(a.GetUid()), int(a.GetGid()), int64(a.GetSize()),
			time.Unix(0, a.GetAtimeNs()), time.Unix(0, a.GetMtimeNs())
	})
	for name, w := range wants {
		got, err := os.ReadFile(filepath.Join(dir, name))
		must(t, err)
		if !bytes.Equal(got, w.data) {
			t.Errorf("%s: read back %d bytes, want the %d written", name, len(got), len(w.data))
		}
	}
}

// TestCopyAttributesOfNewDirectories does to directories what cp -a, tar
// and rsync do once they filled one: set its times, owner and mode (in
// their orders). Under the directory's lease the mount answers those
// itself and queues them (setattrDirQueued); what it answers must be
// what the cluster has once the directory is fsynced, nlink included.
// A setattr the ministry would adjust (setgid of a group the caller is
// not in is kept here: root) or that needs the mtime after an entry
// change is asked of the ministry.
func TestCopyAttributesOfNewDirectories(t *testing.T) {
	m, cl := clusterMount(t, "--log-level", "debug")
	mnt := m.dir
	top := filepath.Join(mnt, "copy")
	must(t, os.Mkdir(top, 0o755))

	type want struct {
		mode         os.FileMode
		uid, gid     int
		atime, mtime time.Time
		nlink        uint64
	}
	wants := map[string]*want{}
	answered := map[string]unix.Stat_t{}
	for i := range 12 {
		name := "d" + strconv.Itoa(i)
		d := filepath.Join(top, name)
		must(t, os.Mkdir(d, 0o700))
		for j := range 3 {
			must(t, os.WriteFile(filepath.Join(d, "f"+strconv.Itoa(j)), []byte("file "+strconv.Itoa(j)), 0o644))
		}
		w := &want{mode: os.FileMode(0o750 + i%3), uid: 1000 + i, gid: 2000 + i,
			atime: time.Unix(1500000000+int64(i), 7000), mtime: time.Unix(1400000000+int64(i), 123456000), nlink: 2}
		for k := range i % 3 {
			must(t, os.Mkdir(filepath.Join(d, "sub"+strconv.Itoa(k)), 0o755))
			w.nlink++
		}
		if i%4 == 3 {
			w.mode |= os.ModeSetgid | os.ModeSticky
		}
		// Through a descriptor, as tar does, and read back through it
		// at once (a getattr: the kernel keeps no setattr answer).
		fd, err := unix.Open(d, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		must(t, err)
		times := func() {
			must(t, unix.Futimes(fd, []unix.Timeval{unix.NsecToTimeval(w.atime.UnixNano()), unix.NsecToTimeval(w.mtime.UnixNano())}))
		}
		owner := func() { must(t, unix.Fchown(fd, w.uid, w.gid)) }
		mode := func() { must(t, unix.Fchmod(fd, uint32(w.mode.Perm())|modeBits(w.mode))) }
		switch i % 3 {
		case 0: // cp -a, tar
			times()
			owner()
			mode()
		case 1: // rsync
			owner()
			mode()
			times()
		case 2: // times, then an entry change moves the mtime on, then
			// the owner (answered by the ministry) and the times again
			times()
			must(t, os.WriteFile(filepath.Join(d, "late"), nil, 0o600))
			owner()
			mode()
			times()
		}
		var st unix.Stat_t
		must(t, unix.Fstat(fd, &st))
		must(t, unix.Close(fd))
		answered[name] = st
		wants[name] = w
	}
	check := func(when string, stat func(name string) (os.FileMode, int, int, time.Time, time.Time, uint64)) {
		t.Helper()
		for name, w := range wants {
			mode, uid, gid, atime, mtime, nlink := stat(name)
			if mode != w.mode || uid != w.uid || gid != w.gid || !atime.Equal(w.atime) || !mtime.Equal(w.mtime) || nlink != w.nlink {
				t.Errorf("%s: %s is mode %v uid %d gid %d atime %v mtime %v nlink %d, want %v %d %d %v %v %d",
					when, name, mode, uid, gid, atime, mtime, nlink, w.mode, w.uid, w.gid, w.atime, w.mtime, w.nlink)
			}
		}
	}
	fromMount := func(name string) (os.FileMode, int, int, time.Time, time.Time, uint64) {
		var st unix.Stat_t
		must(t, unix.Lstat(filepath.Join(top, name), &st))
		return unixMode(st.Mode), int(st.Uid), int(st.Gid), time.Unix(st.Atim.Unix()), time.Unix(st.Mtim.Unix()), st.Nlink
	}
	check("mount, at once (fstat)", func(name string) (os.FileMode, int, int, time.Time, time.Time, uint64) {
		st := answered[name]
		return unixMode(st.Mode), int(st.Uid), int(st.Gid), time.Unix(st.Atim.Unix()), time.Unix(st.Mtim.Unix()), st.Nlink
	})
	check("mount, by name", fromMount)
	if n := strings.Count(readLog(t, m.log), "directory setattr queued under its lease"); n < 12 {
		t.Errorf("%d directory setattrs answered by the mount, want at least 12", n)
	}
	for name := range wants {
		fsyncDir(t, filepath.Join(top, name))
	}
	check("mount, after fsync", fromMount)
	check("cluster", func(name string) (os.FileMode, int, int, time.Time, time.Time, uint64) {
		a, err := cl.Stat(t.Context(), "/copy/"+name, client.Linearizable())
		must(t, err)
		return unixMode(a.GetMode()), int(a.GetUid()), int(a.GetGid()), time.Unix(0, a.GetAtimeNs()), time.Unix(0, a.GetMtimeNs()), uint64(a.GetNlink())
	})
}

// clusterMount starts a cluster, a mount of it on a new directory (with
// the extra flags) and a library client of it.
func clusterMount(t *testing.T, extra ...string) (*mountProcess, *client.Client) {
	t.Helper()
	canMount(t)
	c := startCluster(t)
	m := startMount(t, c, emptyDir(t), extra...)
	return m, newClient(t, c, c.Addrs())
}

// modeBits returns the setuid, setgid and sticky bits of m as chmod(2)
// takes them.
func modeBits(m os.FileMode) uint32 {
	var b uint32
	if m&os.ModeSetuid != 0 {
		b |= unix.S_ISUID
	}
	if m&os.ModeSetgid != 0 {
		b |= unix.S_ISGID
	}
	if m&os.ModeSticky != 0 {
		b |= unix.S_ISVTX
	}
	return b
}

// unixMode turns permission and setuid/setgid/sticky bits into an
// os.FileMode (as os.Chmod takes them).
func unixMode(m uint32) os.FileMode {
	mode := os.FileMode(m & 0o777)
	if m&unix.S_ISUID != 0 {
		mode |= os.ModeSetuid
	}
	if m&unix.S_ISGID != 0 {
		mode |= os.ModeSetgid
	}
	if m&unix.S_ISVTX != 0 {
		mode |= os.ModeSticky
	}
	return mode
}

// TestDirSetattrAnswers checks what the mount answers for a directory
// setattr it queues (setattrDirQueued, logged at debug level) against
// what the cluster has once the directory is fsynced, where the answer
// depends on what the mount tracked: a chmod right after the change that
// took the directory's lease (the grant's mtime is not the one that
// change leaves), a new directory's, and one after an open file's hidden
// name went at its last close (an entry change made outside the
// directory's request path): found in review, each answered a stale
// mtime before it was fixed, and now goes to the ministry (the mtime is
// not known here). And cp -a's order, times then mode, answered here.
func TestDirSetattrAnswers(t *testing.T) {
	m, cl := clusterMount(t, "--log-level", "debug")
	mnt := m.dir
	ctx := t.Context()

	// a: made by another client, leased by the mount's second create.
	if _, err := cl.Mkdir(ctx, "/a", 0o700); err != nil {
		t.Fatal(err)
	}
	a := filepath.Join(mnt, "a")
	for _, f := range []string{"f1", "f2"} {
		must(t, os.WriteFile(filepath.Join(a, f), nil, 0o600))
	}
	must(t, os.Chmod(a, 0o750))

	// top/new: made under top's lease, leased from the start.
	top := filepath.Join(mnt, "top")
	must(t, os.Mkdir(top, 0o755))
	must(t, os.WriteFile(filepath.Join(top, "x"), nil, 0o600))
	nd := filepath.Join(top, "new")
	must(t, os.Mkdir(nd, 0o700))
	must(t, os.WriteFile(filepath.Join(nd, "f"), nil, 0o600))
	must(t, os.Mkdir(filepath.Join(nd, "sub"), 0o700))
	must(t, os.Chmod(nd, 0o755))

	// h: an open file unlinked (hidden name), the times set, the file
	// closed (the hidden name goes), then a chmod.
	hd := filepath.Join(mnt, "h")
	must(t, os.Mkdir(hd, 0o700))
	for _, f := range []string{"g1", "g2"} {
		must(t, os.WriteFile(filepath.Join(hd, f), nil, 0o600))
	}
	open, err := os.Open(filepath.Join(hd, "g1"))
	must(t, err)
	must(t, os.Remove(filepath.Join(hd, "g1")))
	old := time.Unix(1300000000, 0)
	must(t, os.Chtimes(hd, old, old))
	must(t, open.Close())
	time.Sleep(100 * time.Millisecond) // the release follows close(2)
	must(t, os.Chmod(hd, 0o755))

	// top/t: filled, then its times and mode set (cp -a's order): both
	// answered here, the chmod with the mtime the utimens set.
	td := filepath.Join(top, "t")
	must(t, os.Mkdir(td, 0o700))
	must(t, os.WriteFile(filepath.Join(td, "f"), nil, 0o600))
	must(t, os.Chtimes(td, old, old))
	must(t, os.Chmod(td, 0o755))

	answered := map[string]bool{}
	for _, rel := range []string{"/a", "/top/new", "/h", "/top/t"} {
		fsyncDir(t, filepath.Join(mnt, rel))
		at, err := cl.Stat(ctx, rel, client.Linearizable())
		must(t, err)
		var last string
		for _, line := range strings.Split(readLog(t, m.log), "\n") {
			if strings.Contains(line, "directory setattr queued under its lease") && strings.Contains(line, " dir="+strconv.FormatUint(at.GetIno(), 10)+" ") {
				last = line
			}
		}
		if last == "" {
			continue // asked of the ministry: its answer is the cluster's
		}
		answered[rel] = true
		want := " mode=" + strconv.FormatUint(uint64(at.GetMode()), 8) + " uid=" + strconv.FormatUint(uint64(at.GetUid()), 10) +
			" gid=" + strconv.FormatUint(uint64(at.GetGid()), 10) + " mtime=" + strconv.FormatInt(at.GetMtimeNs(), 10) +
			" nlink=" + strconv.FormatUint(uint64(at.GetNlink()), 10)
		if !strings.Contains(last, want) {
			t.Errorf("%s: the mount answered\n  %s\nthe cluster has%s", rel, last, want)
		}
	}
	if !answered["/top/t"] {
		t.Error("the mount answered no setattr of top/t (times, then mode, under its lease)")
	}
}

// TestLeasedDirAttrAfterQueuedChanges: a directory's attributes
// answered under its lease while changes of its entries are queued
// (leasedDirAttr: rm -rf's fstat of every directory it returns to) are
// the ones the cluster has once the queue is applied: mtime and ctime
// the last queued change's time, nlink from the listing.
func TestLeasedDirAttrAfterQueuedChanges(t *testing.T) {
	m, cl := clusterMount(t, "--log-level", "debug")
	mnt := m.dir
	d := filepath.Join(mnt, "d")
	must(t, os.Mkdir(d, 0o755))
	fd, err := unix.Open(d, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	must(t, err)
	defer unix.Close(fd)
	compare := func(step, name string, fd int) {
		t.Helper()
		var st unix.Stat_t
		must(t, unix.Fstat(fd, &st))
		must(t, unix.Fsync(fd))
		a, err := cl.Stat(t.Context(), name, client.Linearizable())
		must(t, err)
		if st.Mtim.Nano() != a.GetMtimeNs() || st.Ctim.Nano() != a.GetCtimeNs() || st.Nlink != uint64(a.GetNlink()) || st.Mode != a.GetMode()|unix.S_IFDIR {
			t.Errorf("%s: the mount answered %s mtime %d ctime %d nlink %d mode %o; the cluster has %d %d %d %o",
				step, name, st.Mtim.Nano(), st.Ctim.Nano(), st.Nlink, st.Mode, a.GetMtimeNs(), a.GetCtimeNs(), a.GetNlink(), a.GetMode()|unix.S_IFDIR)
		}
	}
	for i := range 4 {
		must(t, os.WriteFile(filepath.Join(d, "f"+strconv.Itoa(i)), []byte("x"), 0o644))
	}
	compare("creates", "/d", fd)
	must(t, os.Mkdir(filepath.Join(d, "s1"), 0o755))
	must(t, os.Mkdir(filepath.Join(d, "s2"), 0o755))
	must(t, os.Rename(filepath.Join(d, "f0"), filepath.Join(d, "g0")))
	must(t, os.Remove(filepath.Join(d, "f1")))
	compare("mkdirs, a rename, an unlink", "/d", fd)
	must(t, os.Remove(filepath.Join(d, "s2")))
	must(t, os.Rename(filepath.Join(d, "f2"), filepath.Join(d, "s1", "f2")))
	compare("rmdir, a rename into a subdirectory", "/d", fd)
	sfd, err := unix.Open(filepath.Join(d, "s1"), unix.O_RDONLY|unix.O_DIRECTORY, 0)
	must(t, err)
	defer unix.Close(sfd)
	compare("the subdirectory renamed into", "/d/s1", sfd)
	// The leased subdirectory itself renamed: its ctime moves.
	must(t, os.WriteFile(filepath.Join(d, "s1", "f5"), nil, 0o644))
	must(t, os.Rename(filepath.Join(d, "s1"), filepath.Join(d, "s3")))
	compare("a leased directory renamed", "/d/s3", sfd)
	compare("its parent", "/d", fd)
	// A file unlinked while open is hidden, and its hidden name removed
	// at its last close: an entry change of d too.
	f, err := os.Open(filepath.Join(d, "g0"))
	must(t, err)
	must(t, os.Remove(filepath.Join(d, "g0")))
	must(t, os.WriteFile(filepath.Join(d, "f6"), nil, 0o644))
	must(t, f.Close())
	time.Sleep(100 * time.Millisecond) // the kernel's release is asynchronous
	compare("a hidden name removed at close", "/d", fd)
	if n := strings.Count(readLog(t, m.log), "directory attributes answered under its lease"); n == 0 {
		t.Errorf("no directory attributes were answered under the lease: the test checked nothing of it")
	}
}
