package e2e

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// startDev runs `govfs dev --dir dir` and returns the process and the
// environment it printed export lines for (GOVFS_META and GOVFS_TLS).
func startDev(t *testing.T, dir string) (*exec.Cmd, []string) {
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
	found := make(chan []string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		var env []string
		for sc.Scan() {
			if v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "export "); ok {
				env = append(env, v)
				if len(env) == 2 {
					found <- env
				}
			}
		}
		close(found)
		_, _ = io.Copy(io.Discard, out)
	}()
	select {
	case env, ok := <-found:
		if !ok {
			t.Fatal("govfs dev exited without printing GOVFS_META and GOVFS_TLS")
		}
		if !strings.HasPrefix(env[0], "GOVFS_META=") || !strings.HasPrefix(env[1], "GOVFS_TLS=") {
			t.Fatalf("govfs dev printed exports %q, want GOVFS_META and GOVFS_TLS", env)
		}
		return cmd, env
	case <-time.After(60 * time.Second):
		t.Fatal("govfs dev did not come up")
	}
	return nil, nil
}

func govfs(t *testing.T, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), env...)
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
	if !slices.Equal(meta2, meta) {
		t.Fatalf("restart chose other addresses or certificates: %s vs %s", meta2, meta)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		cmd := exec.CommandContext(ctx, binary, "fs", "ls", "/kept/a")
		cmd.Env = append(os.Environ(), meta2...)
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
