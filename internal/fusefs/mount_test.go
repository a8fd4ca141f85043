package fusefs_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	binenc "encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/govfs/govfs/client"
	"github.com/govfs/govfs/internal/fusefs"
	"github.com/govfs/govfs/internal/testcluster"
)

var binary string

func TestMain(m *testing.M) {
	// GOVFS_TEST_BINARY runs the tests against a prebuilt govfs (an
	// older commit's, for before-and-after figures).
	if b := os.Getenv("GOVFS_TEST_BINARY"); b != "" {
		binary = b
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "govfs-fusefs-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "govfs")
	out, err := exec.Command("go", "build", "-o", binary, "github.com/govfs/govfs/cmd/govfs").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build govfs: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// canMount skips the test when this machine cannot mount FUSE.
func canMount(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("no /dev/fuse: %v", err)
	}
	if os.Geteuid() != 0 {
		if _, err := exec.LookPath("fusermount3"); err != nil {
			t.Skip("not root and no fusermount3 (apt-get install fuse3)")
		}
	}
}

func startCluster(t *testing.T) *testcluster.ProcCluster {
	t.Helper()
	return testcluster.StartForTest(t, 60*time.Second, testcluster.ProcConfig{Binary: binary, Dir: t.TempDir(), Nodes: 3,
		Tick: 50 * time.Millisecond, Chunks: 3, ChunkArgs: []string{"--chunk-size", "4194304"}})
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// mounted reports whether dir is a mount point (in /proc/self/mountinfo).
func mounted(dir string) bool {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == dir {
			return true
		}
	}
	return false
}

// mountProc runs `govfs mount` on a new directory and returns it; at
// cleanup the mount is unmounted (lazily if busy) and the process stopped
// by PID, also when the test failed.
func mountProc(t *testing.T, c *testcluster.ProcCluster, extra ...string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(t.TempDir(), "mount.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"mount", "--meta", strings.Join(c.Addrs(), ","), "--tls", c.ClientTLSDir()}, extra...)
	cmd := exec.Command(binary, append(args, dir)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Killed with the test binary if it dies without its cleanup (a
	// timeout panic), like the cluster's processes.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		if mounted(dir) {
			if err := fusefs.Unmount(dir, false); err != nil {
				t.Logf("unmount %s: %v; detaching", dir, err)
				_ = fusefs.Unmount(dir, true)
			}
		}
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(cmd.Process.Pid, syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(10 * time.Second):
				_ = syscall.Kill(cmd.Process.Pid, syscall.SIGKILL)
				<-exited
			}
		}
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("mount log:\n%s", tail(b, 4000))
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	// Until the process says so too (see startMount: go-fuse's poll
	// hack).
	for !mounted(dir) || !strings.Contains(readLog(t, logPath), " mounted on ") {
		select {
		case err := <-exited:
			b, _ := os.ReadFile(logPath)
			t.Fatalf("govfs mount exited: %v\n%s", err, b)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("mount did not appear within 20 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return dir
}

func wantErrno(t *testing.T, what string, err error, want syscall.Errno) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Errorf("%s: got %v, want %v", what, err, want)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestMount drives a real mount of a 3+3 process cluster through the
// os package and standard tools.
func TestMount(t *testing.T) {
	canMount(t)
	c := startCluster(t)
	mnt := mountProc(t, c)
	p := func(rel string) string { return filepath.Join(mnt, rel) }

	t.Run("namespace", func(t *testing.T) {
		must(t, os.Mkdir(p("a"), 0o755))
		must(t, os.WriteFile(p("a/f"), []byte("hello, govfs\n"), 0o644))
		b, err := os.ReadFile(p("a/f"))
		if err != nil || string(b) != "hello, govfs\n" {
			t.Fatalf("read back: %q %v", b, err)
		}
		st, err := os.Stat(p("a/f"))
		must(t, err)
		if st.Size() != 13 || !st.Mode().IsRegular() {
			t.Fatalf("stat a/f: size %d mode %v", st.Size(), st.Mode())
		}
		// The mode is stored as the kernel sends it (no daemon umask).
		old := syscall.Umask(0)
		err = os.Mkdir(p("a/open"), 0o777)
		syscall.Umask(old)
		must(t, err)
		if st, err := os.Stat(p("a/open")); err != nil || st.Mode().Perm() != 0o777 {
			t.Fatalf("mkdir 0777 with umask 0: %v %v", st.Mode(), err)
		}
		must(t, syscall.Chmod(p("a/f"), 0o4751))
		if st, _ := os.Stat(p("a/f")); st.Mode()&(os.ModePerm|os.ModeSetuid) != 0o751|os.ModeSetuid {
			t.Fatalf("chmod 04751: mode %v", st.Mode())
		}
		ents, err := os.ReadDir(p("a"))
		must(t, err)
		if len(ents) != 2 || ents[0].Name() != "f" || ents[1].Name() != "open" || !ents[1].IsDir() {
			t.Fatalf("ls a: %v", ents)
		}
		must(t, os.Rename(p("a/f"), p("a/g")))
		must(t, os.Link(p("a/g"), p("a/h")))
		sg, _ := os.Stat(p("a/g"))
		sh, _ := os.Stat(p("a/h"))
		if sg.Sys().(*syscall.Stat_t).Ino != sh.Sys().(*syscall.Stat_t).Ino || sh.Sys().(*syscall.Stat_t).Nlink != 2 {
			t.Fatalf("hard link: inodes %d %d nlink %d", sg.Sys().(*syscall.Stat_t).Ino, sh.Sys().(*syscall.Stat_t).Ino, sh.Sys().(*syscall.Stat_t).Nlink)
		}
		must(t, os.Symlink("g", p("a/s")))
		if tgt, err := os.Readlink(p("a/s")); err != nil || tgt != "g" {
			t.Fatalf("readlink: %q %v", tgt, err)
		}
		if b, err := os.ReadFile(p("a/s")); err != nil || string(b) != "hello, govfs\n" {
			t.Fatalf("read through symlink: %q %v", b, err)
		}
		must(t, os.Remove(p("a/g")))
		if b, err := os.ReadFile(p("a/h")); err != nil || string(b) != "hello, govfs\n" {
			t.Fatalf("read the other link: %q %v", b, err)
		}
		must(t, os.Remove(p("a/open")))
		must(t, syscall.Mkfifo(p("a/fifo"), 0o600))
		if st, err := os.Lstat(p("a/fifo")); err != nil || st.Mode()&os.ModeNamedPipe == 0 {
			t.Fatalf("mkfifo: %v %v", st, err)
		}
		must(t, unix.Setxattr(p("a/h"), "user.color", []byte("blue"), 0))
		buf := make([]byte, 64)
		if n, err := unix.Getxattr(p("a/h"), "user.color", buf); err != nil || string(buf[:n]) != "blue" {
			t.Fatalf("getxattr: %q %v", buf[:n], err)
		}
		var sfs syscall.Statfs_t
		must(t, syscall.Statfs(mnt, &sfs))
		if sfs.Blocks == 0 || sfs.Bsize == 0 {
			t.Fatalf("statfs: %+v", sfs)
		}
	})

	t.Run("acl", func(t *testing.T) {
		// An access ACL equal to the mode bits is a chmod (acl.go);
		// anything else is refused and changes nothing.
		must(t, os.Mkdir(p("acl"), 0o755))
		f := p("acl/f")
		must(t, os.WriteFile(f, []byte("x"), 0o600))
		acl := func(version uint32, ents ...[3]uint32) []byte {
			b := binenc.LittleEndian.AppendUint32(nil, version)
			for _, e := range ents {
				b = binenc.LittleEndian.AppendUint16(b, uint16(e[0]))
				b = binenc.LittleEndian.AppendUint16(b, uint16(e[1]))
				b = binenc.LittleEndian.AppendUint32(b, e[2])
			}
			return b
		}
		const none = ^uint32(0)
		perm := func() os.FileMode {
			st, err := os.Stat(f)
			must(t, err)
			return st.Mode() & (os.ModePerm | os.ModeSetuid | os.ModeSetgid | os.ModeSticky)
		}
		must(t, unix.Setxattr(f, "system.posix_acl_access", acl(2, [3]uint32{1, 7, none}, [3]uint32{4, 5, none}, [3]uint32{0x20, 4, none}), 0))
		if got := perm(); got != 0o754 {
			t.Fatalf("after a minimal ACL of 0754: mode %v", got)
		}
		must(t, syscall.Chmod(f, 0o4700))
		must(t, unix.Setxattr(f, "system.posix_acl_access", acl(2, [3]uint32{1, 7, none}, [3]uint32{4, 5, none}, [3]uint32{0x20, 5, none}), 0))
		if got := perm(); got != 0o755|os.ModeSetuid {
			t.Fatalf("a minimal ACL on a setuid file: mode %v, want the setuid bit kept", got)
		}
		named := acl(2, [3]uint32{1, 7, none}, [3]uint32{2, 7, 1000}, [3]uint32{4, 5, none}, [3]uint32{0x10, 7, none}, [3]uint32{0x20, 0, none})
		wantErrno(t, "an ACL naming a user", unix.Setxattr(f, "system.posix_acl_access", named, 0), syscall.EOPNOTSUPP)
		for name, bad := range map[string][]byte{
			"version 1":       acl(1, [3]uint32{1, 7, none}, [3]uint32{4, 5, none}, [3]uint32{0x20, 4, none}),
			"no other entry":  acl(2, [3]uint32{1, 7, none}, [3]uint32{4, 5, none}),
			"truncated":       acl(2, [3]uint32{1, 7, none}, [3]uint32{4, 5, none}, [3]uint32{0x20, 4, none})[:20],
			"permission bits": acl(2, [3]uint32{1, 8, none}, [3]uint32{4, 5, none}, [3]uint32{0x20, 4, none}),
		} {
			if err := unix.Setxattr(f, "system.posix_acl_access", bad, 0); err == nil {
				t.Fatalf("a malformed ACL (%s) was taken", name)
			}
		}
		if got := perm(); got != 0o755|os.ModeSetuid {
			t.Fatalf("refused ACLs changed the mode to %v", got)
		}
		wantErrno(t, "a default ACL", unix.Setxattr(p("acl"), "system.posix_acl_default", acl(2, [3]uint32{1, 7, none}, [3]uint32{4, 5, none}, [3]uint32{0x20, 5, none}), 0), syscall.EOPNOTSUPP)
		_, err := unix.Getxattr(f, "system.posix_acl_access", make([]byte, 64))
		wantErrno(t, "read the access ACL", err, syscall.ENODATA)
		// cp -a sets permissions with such an ACL (coreutils 9): the
		// copies keep their modes, in a directory this mount made.
		src := t.TempDir()
		for i, m := range []os.FileMode{0o751, 0o640, 0o604} {
			name := filepath.Join(src, "m"+strconv.Itoa(i))
			must(t, os.WriteFile(name, []byte("mode"), 0o600))
			must(t, os.Chmod(name, m))
		}
		if out, err := exec.Command("cp", "-a", src, p("acl/copy")).CombinedOutput(); err != nil {
			t.Fatalf("cp -a: %v: %s", err, out)
		}
		for i, m := range []os.FileMode{0o751, 0o640, 0o604} {
			if st, err := os.Stat(p("acl/copy/m" + strconv.Itoa(i))); err != nil || st.Mode().Perm() != m {
				t.Fatalf("cp -a of a file of mode %v: %v, %v", m, st.Mode(), err)
			}
		}
	})

	t.Run("errnos", func(t *testing.T) {
		must(t, os.MkdirAll(p("e/full"), 0o755))
		must(t, os.WriteFile(p("e/file"), nil, 0o644))
		must(t, os.WriteFile(p("e/full/x"), nil, 0o644))
		_, err := os.Stat(p("e/missing"))
		wantErrno(t, "stat missing", err, syscall.ENOENT)
		_, err = os.Open(p("e/missing/x"))
		wantErrno(t, "open under missing dir", err, syscall.ENOENT)
		wantErrno(t, "mkdir existing", os.Mkdir(p("e/full"), 0o755), syscall.EEXIST)
		_, err = os.OpenFile(p("e/file"), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		wantErrno(t, "O_EXCL existing", err, syscall.EEXIST)
		wantErrno(t, "link onto existing", os.Link(p("e/file"), p("e/full/x")), syscall.EEXIST)
		wantErrno(t, "symlink onto existing", os.Symlink("x", p("e/file")), syscall.EEXIST)
		wantErrno(t, "rmdir non-empty", syscall.Rmdir(p("e/full")), syscall.ENOTEMPTY)
		wantErrno(t, "unlink a directory", syscall.Unlink(p("e/full")), syscall.EISDIR)
		_, err = os.OpenFile(p("e/full"), os.O_WRONLY, 0)
		wantErrno(t, "open a directory for writing", err, syscall.EISDIR)
		wantErrno(t, "rmdir a file", syscall.Rmdir(p("e/file")), syscall.ENOTDIR)
		_, err = os.Stat(p("e/file/x"))
		wantErrno(t, "path through a file", err, syscall.ENOTDIR)
		long := strings.Repeat("n", 256)
		wantErrno(t, "create a 256-byte name", os.WriteFile(p("e/"+long), nil, 0o644), syscall.ENAMETOOLONG)
		wantErrno(t, "mkdir a 256-byte name", os.Mkdir(p("e/"+long), 0o755), syscall.ENAMETOOLONG)
		_, err = os.Stat(p("e/" + long))
		wantErrno(t, "stat a 256-byte name", err, syscall.ENAMETOOLONG)
		must(t, os.WriteFile(p("e/"+strings.Repeat("n", 255)), nil, 0o644))
		wantErrno(t, "rename a dir into itself", os.Rename(p("e/full"), p("e/full/sub")), syscall.EINVAL)
		wantErrno(t, "RENAME_NOREPLACE", unix.Renameat2(unix.AT_FDCWD, p("e/file"), unix.AT_FDCWD, p("e/full/x"), unix.RENAME_NOREPLACE), syscall.EEXIST)
		must(t, os.WriteFile(p("e/file"), []byte("one"), 0o644))
		must(t, os.WriteFile(p("e/full/x"), []byte("two"), 0o644))
		must(t, unix.Renameat2(unix.AT_FDCWD, p("e/file"), unix.AT_FDCWD, p("e/full/x"), unix.RENAME_EXCHANGE))
		if a, b := readString(t, p("e/file")), readString(t, p("e/full/x")); a != "two" || b != "one" {
			t.Fatalf("RENAME_EXCHANGE: file=%q x=%q", a, b)
		}
		wantErrno(t, "getxattr missing", getxattr(p("e/file"), "user.none"), syscall.ENODATA)
	})

	t.Run("file-io", func(t *testing.T) {
		// O_TRUNC on an existing file, then O_APPEND.
		must(t, os.WriteFile(p("io"), []byte("0123456789"), 0o644))
		must(t, os.WriteFile(p("io"), []byte("ab"), 0o644))
		f, err := os.OpenFile(p("io"), os.O_WRONLY|os.O_APPEND, 0)
		must(t, err)
		_, err = f.WriteString("cd")
		must(t, err)
		must(t, f.Close())
		if s := readString(t, p("io")); s != "abcd" {
			t.Fatalf("O_TRUNC then O_APPEND: %q", s)
		}
		// Overwrite in the middle, write past the end (a hole), truncate.
		f, err = os.OpenFile(p("io"), os.O_RDWR, 0)
		must(t, err)
		_, err = f.WriteAt([]byte("XY"), 1)
		must(t, err)
		_, err = f.WriteAt([]byte("end"), 10)
		must(t, err)
		got := make([]byte, 13)
		if n, err := f.ReadAt(got, 0); err != nil || n != 13 || string(got) != "aXYd\x00\x00\x00\x00\x00\x00end" {
			t.Fatalf("read own writes: %q %d %v", got, n, err)
		}
		must(t, f.Truncate(3))
		must(t, f.Close())
		if s := readString(t, p("io")); s != "aXY" {
			t.Fatalf("after truncate: %q", s)
		}
		// An open file that is unlinked stays usable until closed.
		f, err = os.OpenFile(p("gone"), os.O_RDWR|os.O_CREATE, 0o644)
		must(t, err)
		_, err = f.WriteString("still here")
		must(t, err)
		must(t, os.Remove(p("gone")))
		if _, err := os.Stat(p("gone")); !errors.Is(err, syscall.ENOENT) {
			t.Fatalf("stat after unlink: %v", err)
		}
		got = make([]byte, 10)
		if _, err := f.ReadAt(got, 0); err != nil || string(got) != "still here" {
			t.Fatalf("read an unlinked open file: %q %v", got, err)
		}
		must(t, f.Close())
		ents, err := os.ReadDir(mnt)
		must(t, err)
		for _, e := range ents {
			if e.Name() == "gone" || strings.HasPrefix(e.Name(), ".govfs-hidden") {
				t.Fatalf("listed after unlink: %s", e.Name())
			}
		}
	})

	t.Run("large-file", func(t *testing.T) {
		data := make([]byte, 20<<20+4321)
		rand.New(rand.NewSource(7)).Read(data)
		f, err := os.Create(p("big.bin"))
		must(t, err)
		// 128 KiB writes, as cp does.
		if _, err := io.CopyBuffer(f, bytes.NewReader(data), make([]byte, 128<<10)); err != nil {
			t.Fatal(err)
		}
		must(t, f.Close())
		f, err = os.Open(p("big.bin"))
		must(t, err)
		h := sha256.New()
		n, err := io.Copy(h, f)
		f.Close()
		must(t, err)
		if n != int64(len(data)) || !bytes.Equal(h.Sum(nil), sha256sum(data)) {
			t.Fatalf("read back %d bytes of %d; sha256 differs", n, len(data))
		}
		// The cluster has it too, through the client library.
		cl := newClient(t, c, c.Addrs())
		var out bytes.Buffer
		if _, err := cl.ReadFile(context.Background(), "/big.bin", &out); err != nil || !bytes.Equal(sha256sum(out.Bytes()), sha256sum(data)) {
			t.Fatalf("client read: %d bytes, %v", out.Len(), err)
		}
	})

	t.Run("tar", func(t *testing.T) {
		src := filepath.Join(t.TempDir(), "src")
		makeTree(t, src)
		tarball := filepath.Join(t.TempDir(), "tree.tar")
		run(t, "tar", "-C", src, "-cf", tarball, ".")
		must(t, os.Mkdir(p("untar"), 0o755))
		run(t, "tar", "-C", p("untar"), "-xf", tarball)
		run(t, "diff", "-r", "--no-dereference", src, p("untar"))
		// And back out, through tar reading the mount.
		back := filepath.Join(t.TempDir(), "back")
		must(t, os.Mkdir(back, 0o755))
		cmd := exec.Command("sh", "-c", fmt.Sprintf("tar -C %q -cf - . | tar -C %q -xf -", p("untar"), back))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("tar out: %v\n%s", err, out)
		}
		run(t, "diff", "-r", "--no-dereference", src, back)
		run(t, "rm", "-rf", p("untar"))
		if _, err := os.Stat(p("untar")); !errors.Is(err, syscall.ENOENT) {
			t.Fatalf("after rm -rf: %v", err)
		}
	})

	t.Run("close-to-open", func(t *testing.T) {
		other := mountProc(t, c)
		must(t, os.WriteFile(p("shared"), []byte("version 1"), 0o644))
		if s := readString(t, filepath.Join(other, "shared")); s != "version 1" {
			t.Fatalf("other mount read %q", s)
		}
		must(t, os.WriteFile(p("shared"), []byte("version two"), 0o644))
		if s := readString(t, filepath.Join(other, "shared")); s != "version two" {
			t.Fatalf("other mount read %q after the second close", s)
		}
	})

	// Last: with every chunk server gone, the error of a buffered write
	// reaches the application at close.
	t.Run("flush-error", func(t *testing.T) {
		quick := mountProc(t, c, "--timeout", "2s")
		f, err := os.Create(filepath.Join(quick, "doomed"))
		must(t, err)
		for i := c.Procs() - 1; i >= len(c.Addrs()); i-- {
			c.Kill(i)
		}
		if _, err := f.Write(make([]byte, 64<<10)); err != nil {
			t.Logf("write failed early: %v", err)
		}
		err = f.Close()
		if err == nil {
			t.Fatal("close succeeded with every chunk server dead")
		}
		t.Logf("close: %v", err)
		// Exactly one full extent (the default 8 MiB write buffer): it is
		// pushed in the background by the last write, so only the
		// background push can fail, and close must still say so.
		g, err := os.Create(filepath.Join(quick, "doomed-extent"))
		must(t, err)
		for range 8 {
			if _, err := g.Write(make([]byte, 1<<20)); err != nil {
				t.Logf("write failed early: %v", err)
				break
			}
		}
		if err := g.Close(); err == nil {
			t.Fatal("close succeeded after a full extent's background push failed")
		}
	})
}

func sha256sum(b []byte) []byte { s := sha256.Sum256(b); return s[:] }

func readString(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func getxattr(path, name string) error {
	_, err := unix.Getxattr(path, name, make([]byte, 64))
	return err
}

func run(t *testing.T, name string, args ...string) {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, tail(out, 3000))
	}
}

func newClient(t *testing.T, c *testcluster.ProcCluster, addrs []string) *client.Client {
	t.Helper()
	cfg := client.DefaultConfig()
	cfg.MetaAddrs = addrs
	cfg.TLSDir = c.ClientTLSDir()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := client.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// makeTree writes a small source-like tree: nested directories, text
// files of many sizes (empty, one byte, across the 4 KiB page, the
// inline limit and 1 MiB), a symlink, a hard link and an executable.
func makeTree(t *testing.T, root string) {
	t.Helper()
	rng := rand.New(rand.NewSource(11))
	sizes := []int{0, 1, 100, 4095, 4096, 4097, client.DefaultInlineMax, client.DefaultInlineMax + 1, 70000, 1<<20 + 3}
	for d := 0; d < 4; d++ {
		dir := filepath.Join(root, fmt.Sprintf("pkg%d", d), "sub")
		must(t, os.MkdirAll(dir, 0o755))
		for i, size := range sizes {
			var b bytes.Buffer
			w := bufio.NewWriter(&b)
			for b.Len()+w.Buffered() < size {
				fmt.Fprintf(w, "line %d of file %d in %d: %x\n", b.Len()+w.Buffered(), i, d, rng.Int63())
			}
			w.Flush()
			must(t, os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%d.go", i)), b.Bytes()[:size], 0o644))
		}
	}
	must(t, os.WriteFile(filepath.Join(root, "run.sh"), []byte("#!/bin/sh\necho hi\n"), 0o755))
	must(t, os.Symlink("pkg0/sub/f3.go", filepath.Join(root, "link")))
	must(t, os.Link(filepath.Join(root, "pkg1/sub/f2.go"), filepath.Join(root, "hard")))
}
