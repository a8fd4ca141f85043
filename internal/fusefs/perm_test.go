package fusefs_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/govfs/govfs/internal/certs"
)

// asUser runs a shell script as uid/gid and returns its combined output.
func asUser(t *testing.T, uid, gid uint32, script string) (string, error) {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid}}
	cmd.Dir = "/"
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

func modeOf(t *testing.T, p string) os.FileMode {
	t.Helper()
	st, err := os.Stat(p)
	must(t, err)
	return st.Mode()
}

// TestMountPermissions checks, as an unprivileged user on a mount with
// --allow-other --default-permissions, what the kernel and the mount
// must do together: permission bits, the sticky directory, setuid and
// setgid cleared by a write and by chown, chown refused to a non-owner.
func TestMountPermissions(t *testing.T) {
	canMount(t)
	if os.Geteuid() != 0 {
		t.Skip("switching users needs root")
	}
	// With the kernel checking first, and with the mount's and the
	// ministry's checks alone.
	t.Run("default_permissions", func(t *testing.T) { mountPermissions(t, "--allow-other", "--default-permissions") })
	t.Run("ministry_checks_only", func(t *testing.T) { mountPermissions(t, "--allow-other") })
}

func mountPermissions(t *testing.T, opts ...string) {
	const nobody, nogroup = 65534, 65534
	c := startCluster(t)
	mnt := mountProc(t, c, opts...)
	for d := filepath.Dir(mnt); d != os.TempDir() && d != "/" && d != "."; d = filepath.Dir(d) {
		must(t, os.Chmod(d, 0o755)) // t.TempDir is 0700 on the way
	}
	pub := filepath.Join(mnt, "pub")
	must(t, os.Mkdir(pub, 0o777))
	// syscall.Chmod: os.Chmod takes Go's mode bits, where 0o1000 is not
	// the sticky bit.
	must(t, syscall.Chmod(pub, 0o1777)) // sticky, like /tmp
	if m := modeOf(t, pub); m&os.ModeSticky == 0 {
		t.Fatalf("pub: mode %v, want sticky", m)
	}

	// setuid and setgid go when the owner (not root) writes.
	f := filepath.Join(pub, "tool")
	if out, err := asUser(t, nobody, nogroup, "echo v1 > "+f+" && chmod 6755 "+f+" && echo v2 >> "+f); err != nil {
		t.Fatalf("as nobody: %v: %s", err, out)
	}
	if m := modeOf(t, f); m&(os.ModeSetuid|os.ModeSetgid) != 0 || m.Perm() != 0o755 {
		t.Fatalf("after a write by its owner: mode %v, want 0755 without setuid/setgid", m)
	}
	// ... and when root gives the file away.
	must(t, syscall.Chmod(f, 0o4755))
	if m := modeOf(t, f); m&os.ModeSetuid == 0 {
		t.Fatalf("chmod 4755: mode %v", m)
	}
	must(t, os.Chown(f, 1, 1))
	if m := modeOf(t, f); m&os.ModeSetuid != 0 {
		t.Fatalf("after chown: mode %v, want setuid cleared", m)
	}

	// The sticky bit: nobody may not remove or rename root's file.
	rootFile := filepath.Join(pub, "rootfile")
	must(t, os.WriteFile(rootFile, []byte("root's"), 0o666))
	for _, script := range []string{"rm -f " + rootFile, "mv " + rootFile + " " + pub + "/stolen"} {
		if out, err := asUser(t, nobody, nogroup, script); err == nil || !strings.Contains(out, "not permitted") {
			t.Errorf("%q as nobody in a sticky directory: %v %q, want EPERM", script, err, out)
		}
	}
	if _, err := os.Stat(rootFile); err != nil {
		t.Fatalf("root's file after nobody's attempts: %v", err)
	}

	// Permission bits.
	secret := filepath.Join(mnt, "secret")
	must(t, os.WriteFile(secret, []byte("x"), 0o600))
	if out, err := asUser(t, nobody, nogroup, "cat "+secret); err == nil || !strings.Contains(out, "Permission denied") {
		t.Errorf("nobody reading a 0600 root file: %v %q, want EACCES", err, out)
	}
	if out, err := asUser(t, nobody, nogroup, "touch "+mnt+"/newfile"); err == nil || !strings.Contains(out, "Permission denied") {
		t.Errorf("nobody creating in root's 0755 directory: %v %q, want EACCES", err, out)
	}
	// chown by a non-owner, and giving one's file away, are refused.
	if out, err := asUser(t, nobody, nogroup, "chown 1 "+secret); err == nil || !strings.Contains(out, "not permitted") {
		t.Errorf("nobody chowning root's file: %v %q, want EPERM", err, out)
	}
	own := filepath.Join(pub, "own")
	if out, err := asUser(t, nobody, nogroup, "touch "+own+" && chown 1 "+own); err == nil || !strings.Contains(out, "not permitted") {
		t.Errorf("nobody giving its file away: %v %q, want EPERM", err, out)
	}
	// The new file belongs to its creator.
	st, err := os.Stat(own)
	must(t, err)
	if s := st.Sys().(*syscall.Stat_t); s.Uid != nobody || s.Gid != nogroup {
		t.Errorf("nobody's new file is %d:%d", s.Uid, s.Gid)
	}
	// Opens, listings and access(2) by the permission bits; chmod of
	// another's file refused.
	private := filepath.Join(mnt, "private")
	must(t, os.Mkdir(private, 0o700))
	must(t, os.Chmod(rootFile, 0o666)) // (WriteFile's 0666 met the umask)
	for script, want := range map[string]string{
		"ls " + private:                                   "Permission denied",
		"echo x >> " + secret:                             "Permission denied",
		"test -w " + secret + " || exit 3":                "",
		"chmod 777 " + secret:                             "not permitted",
		"truncate -s 0 " + filepath.Join(pub, "rootfile"): "",
	} {
		out, err := asUser(t, nobody, nogroup, script)
		switch {
		case want == "" && strings.HasPrefix(script, "test"):
			if err == nil {
				t.Errorf("%q as nobody: access(W_OK) said yes on root's 0600 file", script)
			}
		case want == "":
			if err != nil {
				t.Errorf("%q as nobody: %v %q (root's 0666 file)", script, err, out)
			}
		case err == nil || !strings.Contains(out, want):
			t.Errorf("%q as nobody: %v %q, want %q", script, err, out, want)
		}
	}
	if b, err := os.ReadFile(secret); err != nil || string(b) != "x" {
		t.Errorf("root's 0600 file after nobody's attempts: %q %v", b, err)
	}
	if m := modeOf(t, secret); m.Perm() != 0o600 {
		t.Errorf("root's 0600 file after nobody's chmod: %v", m)
	}
}

// TestSquashMountUsersReadTheirFiles: through a mount whose certificate
// squashes root, a user reads and rewrites a 0600 file of their own (the
// chunk access tokens are asked for in that user's name, not the
// squashed mount's), and another user cannot read it.
func TestSquashMountUsersReadTheirFiles(t *testing.T) {
	canMount(t)
	if os.Geteuid() != 0 {
		t.Skip("switching users needs root")
	}
	c := startCluster(t)
	b, err := certs.Issue(c.CADir(), certs.Identity{Role: certs.RoleClient, Name: "squashhost", AnyUID: true, AnyGID: true, Squash: true}, 0, time.Now())
	must(t, err)
	dir := filepath.Join(t.TempDir(), "squash-tls")
	must(t, b.Write(dir))
	mnt := mountProc(t, c, "--allow-other", "--tls", dir)
	for d := filepath.Dir(mnt); d != os.TempDir() && d != "/" && d != "."; d = filepath.Dir(d) {
		must(t, os.Chmod(d, 0o755))
	}
	// Root is squashed: a directory for the user is made with the
	// operators' certificate, then given to uid 1000.
	adm := newClient(t, c, c.Addrs())
	ctx := t.Context()
	if _, err := adm.Mkdir(ctx, "/home1000", 0o700); err != nil {
		t.Fatal(err)
	}
	must(t, adm.Chown(ctx, "/home1000", 1000, 1000))
	// A 0700 home: its owner looks up and lists in it (the mount asks
	// the ministry in the user's name, not as the squashed mount), others
	// cannot.
	if out, err := asUser(t, 1000, 1000, "touch "+filepath.Join(mnt, "home1000", "f")+" && ls "+filepath.Join(mnt, "home1000")+" && getfattr -n user.x "+filepath.Join(mnt, "home1000", "f")+" 2>/dev/null; echo listed"); err != nil || !strings.Contains(out, "f") || !strings.HasSuffix(out, "listed") {
		t.Fatalf("uid 1000 in their 0700 home through a squash mount: %v: %s", err, out)
	}
	if out, err := asUser(t, 1001, 1001, "ls "+filepath.Join(mnt, "home1000")); err == nil {
		t.Fatalf("uid 1001 listed uid 1000's 0700 home: %s", out)
	}
	p := filepath.Join(mnt, "home1000", "private")
	// More than one chunk (4 MiB chunks): the table has several records.
	script := "head -c 9000000 /dev/urandom > " + p + " && chmod 600 " + p + " && sha256sum < " + p + " && cat " + p + " > /dev/null && echo ok"
	out, err := asUser(t, 1000, 1000, script)
	if err != nil || !strings.HasSuffix(out, "ok") {
		t.Fatalf("uid 1000 writing and reading their 0600 file through a squash mount: %v: %s", err, out)
	}
	if out, err := asUser(t, 1001, 1001, "cat "+p+" > /dev/null"); err == nil {
		t.Fatalf("uid 1001 read uid 1000's 0600 file: %s", out)
	}
	// After a remount (nothing cached), the owner still reads it whole.
	mnt2 := mountProc(t, c, "--allow-other", "--tls", dir)
	p2 := filepath.Join(mnt2, "home1000", "private")
	out2, err := asUser(t, 1000, 1000, "sha256sum < "+p2)
	if err != nil || strings.Fields(out2)[0] != strings.Fields(out)[0] {
		t.Fatalf("uid 1000 reading their file through a fresh squash mount: %v: %q vs %q", err, out2, out)
	}
}
