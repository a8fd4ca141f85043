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
	canMount(t)
	c := startCluster(t)
	mnt := filepath.Join(t.TempDir(), "m")
	must(t, os.Mkdir(mnt, 0o755))
	startMount(t, c, mnt, "--entry-timeout", "50ms")
	cl := newClient(t, c, c.Addrs())

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
	// hold, and the release must not turn into EBADF.
	for i := range 200 {
		f := filepath.Join(top, "t"+strconv.Itoa(i))
		must(t, os.WriteFile(f, []byte("some data "+f), 0o600))
		must(t, os.Chtimes(f, old, old))
		st, err := os.Stat(f)
		must(t, err)
		if !st.ModTime().Equal(old) {
			t.Fatalf("%s: mtime %v after utimens to %v", f, st.ModTime().UTC(), old)
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
	canMount(t)
	c := startCluster(t)
	mnt := filepath.Join(t.TempDir(), "m")
	must(t, os.Mkdir(mnt, 0o755))
	startMount(t, c, mnt)
	cl := newClient(t, c, c.Addrs())
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
