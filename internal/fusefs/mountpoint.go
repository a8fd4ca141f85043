package fusefs

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// CheckMountPoint refuses what a user of a network file system would not
// want to happen silently: stacking a second mount on a FUSE mount (the
// first one's files vanish behind it), and hiding the files of a
// non-empty directory (unless nonEmpty). Mount checks it; the CLI also
// checks it before it connects to the cluster.
func CheckMountPoint(dir string, nonEmpty bool) error {
	st, err := os.Stat(dir)
	if errors.Is(err, syscall.ENOTCONN) {
		return fmt.Errorf("%s is a dead FUSE mount (its server exited): run 'govfs umount %s' (or fusermount3 -u) first", dir, dir)
	}
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	if fstype, source, ok := mountAt(dir); ok && strings.HasPrefix(fstype, "fuse") {
		return fmt.Errorf("%s is already a FUSE mount (%s, %s): unmount it first (govfs umount %s)", dir, source, fstype, dir)
	}
	if nonEmpty {
		return nil
	}
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	names, err := f.Readdirnames(1)
	if err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	if len(names) > 0 {
		return fmt.Errorf("%s is not empty (it holds %q, ...): the mount would hide its files; mount on an empty directory, or pass --nonempty", dir, names[0])
	}
	return nil
}

// IsMounted says whether dir is a mount point (of any file system).
func IsMounted(dir string) bool {
	_, _, ok := mountAt(dir)
	return ok
}

// mountAt reports the file system type and source of the mount whose
// mount point is exactly dir (from /proc/self/mountinfo; the last one
// stacked wins).
func mountAt(dir string) (fstype, source string, ok bool) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", "", false
	}
	defer f.Close()
	return findMount(f, dir)
}

// findMount scans mountinfo lines: "id parent major:minor root mountpoint
// options [optional fields] - fstype source super-options", the mount
// point with spaces and the like escaped as octal (\040).
func findMount(r io.Reader, dir string) (fstype, source string, ok bool) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		sep := -1
		for i, f := range fields {
			if f == "-" {
				sep = i
				break
			}
		}
		if len(fields) < 5 || sep < 0 || sep+2 >= len(fields) {
			continue
		}
		if unescapeMount(fields[4]) == dir {
			fstype, source, ok = fields[sep+1], fields[sep+2], true
		}
	}
	return fstype, source, ok
}

func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// Holders lists the processes using files under dir (see holders).
func Holders(dir string) []string { return holders(dir) }

// holders lists the processes using files under dir, as fuser -m would
// name them: those whose working directory, root or an open descriptor is
// inside it ("pid (command)"). Processes this user may not inspect are
// not seen.
func holders(dir string) []string {
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	inside := func(p string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }
	var out []string
	for _, e := range procs {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		base := filepath.Join("/proc", e.Name())
		uses := false
		for _, l := range []string{"cwd", "root"} {
			if t, err := os.Readlink(filepath.Join(base, l)); err == nil && inside(t) {
				uses = true
			}
		}
		if !uses {
			fds, _ := os.ReadDir(filepath.Join(base, "fd"))
			for _, fd := range fds {
				if t, err := os.Readlink(filepath.Join(base, "fd", fd.Name())); err == nil && inside(t) {
					uses = true
					break
				}
			}
		}
		if uses {
			comm, _ := os.ReadFile(filepath.Join(base, "comm"))
			out = append(out, fmt.Sprintf("%d (%s)", pid, strings.TrimSpace(string(comm))))
		}
	}
	sort.Strings(out)
	return out
}

// busyError explains an unmount refused with EBUSY.
func busyError(dir string, err error) error {
	if !errors.Is(err, syscall.EBUSY) && !strings.Contains(err.Error(), "busy") {
		return err
	}
	who := "no process this user can see; an open file of another user, or a mount inside it"
	if h := holders(dir); len(h) > 0 {
		const show = 8
		who = strings.Join(h[:min(len(h), show)], ", ")
		if len(h) > show {
			who += fmt.Sprintf(" and %d more", len(h)-show)
		}
	}
	return fmt.Errorf("%w\n%s is in use by %s: close those files (or cd out), or detach it now with 'govfs umount --lazy %s' (it goes away when they are closed)",
		err, dir, who, dir)
}
