package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/govfs/govfs/internal/testcluster"
)

// TestFSAgainstCluster runs the fs and admin commands against a real
// in-process cluster, as a user would from a shell.
func TestFSAgainstCluster(t *testing.T) {
	c := testcluster.NewInProc(t, 3)
	meta := strings.Join(c.Addrs(), ",")
	run := func(args ...string) (string, error) {
		t.Helper()
		var out, errb bytes.Buffer
		err := Run(context.Background(), append([]string{args[0], "--meta", meta, "--insecure"}, args[1:]...), &out, &errb)
		return out.String(), err
	}
	must := func(args ...string) string {
		t.Helper()
		out, err := run(args...)
		if err != nil {
			t.Fatalf("govfs %v: %v", args, err)
		}
		return out
	}
	must("fs", "mkdir", "-p", "/proj/src")
	must("fs", "touch", "/proj/src/main.go", "/proj/README")
	must("fs", "ln", "-s", "/proj/README", "/proj/link")
	must("fs", "ln", "/proj/README", "/proj/hard")
	must("fs", "mv", "/proj/src/main.go", "/proj/src/app.go")
	ls := must("fs", "ls", "-l", "/proj")
	for _, want := range []string{"README", "hard", "link -> /proj/README", "src", "drwxr-xr-x"} {
		if !strings.Contains(ls, want) {
			t.Errorf("ls -l /proj lacks %q:\n%s", want, ls)
		}
	}
	if out := must("fs", "readlink", "/proj/link"); strings.TrimSpace(out) != "/proj/README" {
		t.Errorf("readlink = %q", out)
	}
	if st := must("fs", "stat", "/proj/README"); !strings.Contains(st, "Links: 2") {
		t.Errorf("stat after ln lacks Links: 2:\n%s", st)
	}
	if out := must("fs", "ls", "/proj/src"); strings.TrimSpace(out) != "app.go" {
		t.Errorf("ls /proj/src after mv = %q", out)
	}
	// Errors a person can read, non-nil (non-zero exit).
	if _, err := run("fs", "rmdir", "/proj"); err == nil || !strings.Contains(err.Error(), "directory not empty") {
		t.Errorf("rmdir of a non-empty dir: %v", err)
	}
	if _, err := run("fs", "mkdir", "/proj"); err == nil || !strings.Contains(err.Error(), "file exists") {
		t.Errorf("mkdir of an existing dir: %v", err)
	}
	if _, err := run("fs", "stat", "/nope"); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("stat of a missing file: %v", err)
	}
	if _, err := run("fs", "mkdir", "/"+strings.Repeat("n", 256)); err == nil || !strings.Contains(err.Error(), "file name too long") {
		t.Errorf("mkdir with a 256-byte name: %v", err)
	}
	must("fs", "rm", "-r", "/proj")
	if out := must("fs", "ls", "/"); strings.Contains(out, "proj") {
		t.Errorf("rm -r left %q", out)
	}
	// admin status, human and JSON.
	st := must("admin", "status")
	if !strings.Contains(st, "president") || !strings.Contains(st, "ministry") {
		t.Errorf("admin status:\n%s", st)
	}
	var js struct {
		ClusterID string `json:"cluster_id"`
		Groups    []struct {
			Group  uint64 `json:"group"`
			Leader uint64 `json:"leader"`
		} `json:"groups"`
	}
	if err := json.Unmarshal([]byte(must("admin", "status", "--json")), &js); err != nil {
		t.Fatalf("admin status --json: %v", err)
	}
	if js.ClusterID == "" || len(js.Groups) != 2 || js.Groups[0].Leader == 0 || js.Groups[1].Leader == 0 {
		t.Errorf("admin status --json = %+v", js)
	}
}
