package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/govfs/govfs/client"
	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/testcluster"
)

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "govfs-e2e-bin")
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

// startCluster starts 3 metadata processes with a 50 ms tick (election
// timeout 500 ms) and stops them (by PID) at cleanup.
func startCluster(t *testing.T) *testcluster.ProcCluster {
	t.Helper()
	return testcluster.StartForTest(t, 60*time.Second, testcluster.ProcConfig{Binary: binary, Dir: t.TempDir(), Nodes: 3, Tick: 50 * time.Millisecond})
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

func newClient(t *testing.T, c *testcluster.ProcCluster, addrs []string, opTimeout time.Duration) *client.Client {
	t.Helper()
	cfg := client.DefaultConfig()
	cfg.MetaAddrs = addrs
	cfg.TLSDir = c.ClientTLSDir()
	cfg.CallTimeout = time.Second
	cfg.OpTimeout = opTimeout
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := client.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// groupLeader returns the index of the process leading group g.
func groupLeader(t *testing.T, c *testcluster.ProcCluster, g uint64) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	i, err := c.Leader(ctx, ids.GroupID(g))
	if err != nil {
		t.Fatal(err)
	}
	return i
}
