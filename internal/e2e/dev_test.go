package e2e

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// startDev runs `govfs dev --dir dir` and returns the process and the
// GOVFS_META value it printed.
func startDev(t *testing.T, dir string) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(binary, "dev", "--dir", dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			_ = cmd.Wait()
		}
	})
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "export GOVFS_META="); ok {
				found <- v
			}
		}
		close(found)
		_, _ = io.Copy(io.Discard, out)
	}()
	select {
	case v, ok := <-found:
		if !ok {
			t.Fatal("govfs dev exited without printing GOVFS_META")
		}
		return cmd, v
	case <-time.After(60 * time.Second):
		t.Fatal("govfs dev did not come up")
	}
	return nil, ""
}

func govfs(t *testing.T, meta string, args ...string) string {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), "GOVFS_META="+meta)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("govfs %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// metaPidsUnder lists govfs meta and chunk processes whose --data lies
// under dir.
func metaPidsUnder(dir string) []string {
	var pids []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		cl := strings.ReplaceAll(string(b), "\x00", " ")
		if (strings.Contains(cl, " meta ") || strings.Contains(cl, " chunk ")) && strings.Contains(cl, dir) {
			pids = append(pids, e.Name())
		}
	}
	return pids
}

// TestDevClusterRestartsWithItsData runs `govfs dev`, uses it from
// another process with GOVFS_META, stops it with SIGINT (all nodes must
// stop), and starts it again on the same directory: the metadata is back.
func TestDevClusterRestartsWithItsData(t *testing.T) {
	dir := t.TempDir()
	dev, meta := startDev(t, dir)
	govfs(t, meta, "fs", "mkdir", "-p", "/kept/a")
	govfs(t, meta, "fs", "touch", "/kept/a/file")
	if out := govfs(t, meta, "admin", "status"); !strings.Contains(out, "ministry") || strings.Count(out, "alive") != 3 {
		t.Fatalf("admin status:\n%s", out)
	}
	_ = dev.Process.Signal(syscall.SIGINT)
	done := make(chan error, 1)
	go func() { done <- dev.Wait() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("govfs dev did not stop on SIGINT")
	}
	if pids := metaPidsUnder(dir); len(pids) != 0 {
		t.Fatalf("meta or chunk processes still running after govfs dev stopped: %v", pids)
	}
	_, meta2 := startDev(t, dir)
	if meta2 != meta {
		t.Fatalf("restart chose other addresses: %s vs %s", meta2, meta)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		cmd := exec.CommandContext(ctx, binary, "fs", "ls", "/kept/a")
		cmd.Env = append(os.Environ(), "GOVFS_META="+meta2)
		out, err := cmd.CombinedOutput()
		if err == nil && strings.TrimSpace(string(out)) == "file" {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("metadata not back after restart: %v %s", err, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
