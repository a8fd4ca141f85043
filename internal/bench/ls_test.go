package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/govfs/govfs/client"
	"github.com/govfs/govfs/internal/ids"
)

// TestRunLs lists over two ministries in both orders on a 3-process
// cluster: every request answered with the directory's 10 entries, the
// first request of each client for the delegated directory redirected
// (and only that one), and the tree and its ministry given back after.
func TestRunLs(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-process cluster")
	}
	addrs, tlsDir := startCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	cfg := LsConfig{MetaAddrs: addrs, TLSDir: tlsDir, Ministries: 2, Clients: 4, Requests: 400, Files: 10, Orders: []string{OrderBatch, OrderStride}, Cleanup: true}
	reps, err := RunLs(ctx, cfg, &out)
	t.Logf("output:\n%s", out.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(reps) != 2 || reps[0].Order != OrderBatch || reps[1].Order != OrderStride {
		t.Fatalf("reports: %v", reps)
	}
	for _, r := range reps {
		// 4 fresh clients, each redirected once for s2's directory.
		if r.Requests != 400 || r.Failed != 0 || r.OpsPerSec <= 0 || r.P50Ms > r.P99Ms || r.P99Ms > r.MaxMs || r.Redirected != 4.0/400 {
			t.Errorf("%s: %+v", r.Order, r)
		}
		line, err := r.JSON()
		if err != nil {
			t.Fatal(err)
		}
		var parsed map[string]any
		if err := json.Unmarshal(line, &parsed); err != nil || parsed["workload"] != "ls" || parsed["ministries"] != 2.0 || parsed["p999_ms"] == nil {
			t.Errorf("JSON line %s: %v", line, err)
		}
	}
	cl, err := client.New(ctx, client.Config{MetaAddrs: addrs, TLSDir: tlsDir})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ents, err := cl.ReaddirAll(ctx, ids.RootIno, client.Linearizable()) // a fresh client may ask a clerk behind
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.HasPrefix(string(e.GetName()), "benchls-") {
			t.Errorf("bench tree /%s left behind", e.GetName())
		}
	}
	info, err := cl.ClusterMap(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range info.GetMinistries() {
		if m.GetGroup() != 1 && len(m.GetSubtrees()) != 0 {
			t.Errorf("ministry %d still holds %v", m.GetGroup(), m.GetSubtrees())
		}
	}
	if _, err := RunLs(ctx, LsConfig{MetaAddrs: addrs, TLSDir: tlsDir, Ministries: 1, Clients: 2, Requests: 10, Files: 1, Orders: []string{"sideways"}}, &out); err == nil {
		t.Error("an unknown order was accepted")
	}
}
