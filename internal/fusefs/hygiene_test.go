package fusefs_test

import (
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestMountHygieneAndMetrics: govfs mount --metrics serves the mount's
// operations; a second mount on the mount point and a mount on a
// non-empty directory are refused, saying what to do; govfs umount of a
// busy mount names the process in it and suggests --lazy.
func TestMountHygieneAndMetrics(t *testing.T) {
	canMount(t)
	c := startCluster(t)
	addr := freeAddr(t)
	dir := mountProc(t, c, "--metrics", addr)

	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("hello metrics"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "f")); err != nil || string(b) != "hello metrics" {
		t.Fatalf("read back: %q %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "missing")); !os.IsNotExist(err) {
		t.Fatalf("stat of a missing name: %v", err)
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`govfs_mount_op_seconds_count{op="create",status="ok"}`,
		`govfs_mount_op_seconds_count{op="write",status="ok"}`,
		`govfs_mount_op_seconds_count{op="lookup",`,
		`govfs_mount_op_seconds_count{op="read",status="ok"}`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("mount metrics lack %s", want)
		}
	}
	if m := regexp.MustCompile(`(?m)^govfs_mount_written_bytes_total (\S+)`).FindStringSubmatch(string(body)); m == nil {
		t.Error("no govfs_mount_written_bytes_total")
	} else if v, _ := strconv.ParseFloat(m[1], 64); v < float64(len("hello metrics")) {
		t.Errorf("written bytes %v", v)
	}

	govfs := func(args ...string) (string, error) {
		out, err := exec.Command(binary, args...).CombinedOutput()
		return string(out), err
	}
	meta := strings.Join(c.Addrs(), ",")
	// A second mount on the mount point.
	out, err := govfs("mount", "--meta", meta, "--tls", c.ClientTLSDir(), dir)
	if err == nil || !strings.Contains(out, "already a FUSE mount") || !strings.Contains(out, "govfs umount") {
		t.Errorf("a second mount on %s: %v\n%s", dir, err, out)
	}
	// A non-empty directory.
	full := t.TempDir()
	if err := os.WriteFile(filepath.Join(full, "keep"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = govfs("mount", "--meta", meta, "--tls", c.ClientTLSDir(), full)
	if err == nil || !strings.Contains(out, "not empty") || !strings.Contains(out, "--nonempty") {
		t.Errorf("a mount on a non-empty directory: %v\n%s", err, out)
	}
	// A busy mount: a process sits in it.
	sleeper := exec.Command("sleep", "60")
	sleeper.Dir = dir
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	out, err = govfs("umount", dir)
	_ = sleeper.Process.Kill()
	_ = sleeper.Wait()
	if err == nil || !strings.Contains(out, strconv.Itoa(sleeper.Process.Pid)+" (sleep)") || !strings.Contains(out, "--lazy") {
		t.Errorf("umount of a busy mount: %v\n%s", err, out)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "f")); err != nil || string(b) != "hello metrics" {
		t.Fatalf("the mount after the refused umount: %q %v", b, err)
	}
}

// freeAddr returns a loopback address with a port free just now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
