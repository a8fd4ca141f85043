package testcluster

import (
	"context"
	"os"
	"testing"
	"time"
)

// StartForTest starts a process cluster for t (StartReady within
// timeout), stops every process by PID at cleanup, and, when t failed,
// logs how each process's log ends. A cluster that does not start fails
// t with StartReady's error, which names the processes that exited.
func StartForTest(t testing.TB, timeout time.Duration, cfg ProcConfig) *ProcCluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c, err := StartReady(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Stop()
		if !t.Failed() {
			return
		}
		for i := 0; i < c.Procs(); i++ {
			if b, err := os.ReadFile(c.LogPath(i)); err == nil {
				if len(b) > 2000 {
					b = b[len(b)-2000:]
				}
				t.Logf("%s (end):\n%s", c.LogPath(i), b)
			}
		}
	})
	return c
}
