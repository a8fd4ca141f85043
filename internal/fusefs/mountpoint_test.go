package fusefs

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

func TestFindMount(t *testing.T) {
	info := `22 1 0:21 / /proc rw,nosuid shared:12 - proc proc rw
98 22 0:47 / /mnt/with\040space rw,nosuid,nodev,relatime shared:50 - fuse.govfs govfs:abc rw,user_id=0,group_id=0
99 22 0:48 / /mnt/g rw,relatime - fuse govfs:def rw
`
	for _, tc := range []struct{ dir, fstype, source string }{
		{"/mnt/with space", "fuse.govfs", "govfs:abc"},
		{"/mnt/g", "fuse", "govfs:def"},
		{"/proc", "proc", "proc"},
	} {
		fstype, source, ok := findMount(strings.NewReader(info), tc.dir)
		if !ok || fstype != tc.fstype || source != tc.source {
			t.Errorf("%s: %q %q %v", tc.dir, fstype, source, ok)
		}
	}
	if _, _, ok := findMount(strings.NewReader(info), "/mnt"); ok {
		t.Error("/mnt is not a mount point here")
	}
}

func TestCheckMountPoint(t *testing.T) {
	dir := t.TempDir()
	if err := CheckMountPoint(dir, false); err != nil {
		t.Fatalf("an empty directory: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "precious"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := CheckMountPoint(dir, false); err == nil || !strings.Contains(err.Error(), "--nonempty") || !strings.Contains(err.Error(), "precious") {
		t.Fatalf("a non-empty directory: %v", err)
	}
	if err := CheckMountPoint(dir, true); err != nil {
		t.Fatalf("a non-empty directory with --nonempty: %v", err)
	}
	if err := CheckMountPoint(filepath.Join(dir, "precious"), true); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Fatalf("a file: %v", err)
	}
	// /proc is a mount point, but not a FUSE one: only its contents speak.
	if err := CheckMountPoint("/proc", true); err != nil {
		t.Fatalf("/proc with --nonempty: %v", err)
	}
}

// TestBusyErrorNamesHolders: the explanation of a refused unmount names
// the processes with their working directory or a descriptor inside.
func TestBusyErrorNamesHolders(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command("sleep", "30")
	cmd.Dir = dir
	if err := cmd.Start(); err != nil {
		t.Skip("no sleep binary:", err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	err := busyError(dir, syscall.EBUSY)
	want := strconv.Itoa(cmd.Process.Pid) + " (sleep)"
	if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "govfs umount --lazy "+dir) {
		t.Fatalf("busy error %q does not name %s and --lazy", err, want)
	}
	if got := busyError(dir, syscall.ENOENT); got != syscall.ENOENT {
		t.Fatalf("another error was rewritten: %v", got)
	}
}
