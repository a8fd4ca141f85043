package fusefs_test

import (
	"os"
	"path/filepath"
	"strconv"
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
	cl := newClient(t, c.Addrs())

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
