package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/govfs/govfs/internal/testcluster"
)

// TestMetricsAndHealth: every metric the Grafana dashboard in deploy/
// queries is exported by a metadata node or a chunk server of a running
// cluster (after some traffic), and /healthz and /readyz answer ok on a
// healthy node and fail, saying why, on a node whose groups lost their
// quorum.
func TestMetricsAndHealth(t *testing.T) {
	c := testcluster.StartForTest(t, 90*time.Second, testcluster.ProcConfig{Binary: binary, Dir: t.TempDir(), Nodes: 3, Chunks: 3,
		Tick: 50 * time.Millisecond, HTTP: true, ChunkArgs: []string{"--chunk-size", "1048576"}})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cl := newClient(t, c, c.Addrs(), 30*time.Second)
	data := make([]byte, 2<<20)
	_, _ = rand.Read(data)
	if _, err := cl.WriteFile(ctx, "/f", bytes.NewReader(data), 0o644); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := cl.ReadFile(ctx, "/f", &buf); err != nil {
		t.Fatal(err)
	}
	get := func(addr, path string) (int, string) {
		t.Helper()
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	exported := map[string]bool{}
	name := regexp.MustCompile(`(?m)^(govfs_[a-z0-9_]+)`)
	for _, a := range append(c.HTTPAddrs(), c.ChunkHTTPAddrs()...) {
		_, body := get(a, "/metrics")
		for _, m := range name.FindAllStringSubmatch(body, -1) {
			exported[m[1]] = true
		}
	}
	for _, must := range []string{"govfs_raft_group_term", "govfs_raft_group_healthy", "govfs_rpc_server_seconds_count",
		"govfs_pebble_disk_bytes", "govfs_leases_held", "govfs_chunk_disk_errors_total"} {
		if !exported[must] {
			t.Errorf("%s is not exported", must)
		}
	}

	// The dashboard's queries name only exported metrics.
	raw, err := os.ReadFile(filepath.Join("..", "..", "deploy", "grafana", "govfs.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("deploy/grafana/govfs.json: %v", err)
	}
	used := regexp.MustCompile(`govfs_[a-z0-9_]+`)
	checked := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			for _, m := range used.FindAllString(tg.Expr, -1) {
				checked++
				if !exported[m] {
					t.Errorf("dashboard panel %q queries %s, which no node exports", p.Title, m)
				}
			}
		}
	}
	if checked < 20 {
		t.Fatalf("only %d metric names found in the dashboard", checked)
	}

	for _, a := range c.HTTPAddrs() {
		for _, path := range []string{"/healthz", "/readyz"} {
			if code, body := get(a, path); code != http.StatusOK || strings.TrimSpace(body) != "ok" {
				t.Errorf("%s%s on a healthy cluster: %d %q", a, path, code, body)
			}
		}
	}
	// Two of three metadata nodes stopped: the survivor's groups have no
	// quorum, and its /healthz says so within an election timeout or two.
	c.Kill(1)
	c.Kill(2)
	survivor := c.HTTPAddrs()[0]
	var code int
	var body string
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if code, body = get(survivor, "/healthz"); code == http.StatusServiceUnavailable {
			break
		}
	}
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "leader") {
		t.Fatalf("/healthz of a node without quorum: %d %q", code, body)
	}
	if code, _ := get(survivor, "/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz of a node without quorum: %d", code)
	}
	// Each group notices on its own clock (a leader steps down after an
	// election timeout without its quorum): the president's too, soon.
	unhealthy := fmt.Sprintf("govfs_raft_group_healthy{group=%q,kind=%q} 0", "0", "president")
	var m string
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if _, m = get(survivor, "/metrics"); strings.Contains(m, unhealthy) {
			break
		}
	}
	if !strings.Contains(m, unhealthy) {
		t.Errorf("the survivor's metrics do not show the president group unhealthy")
	}

	// Back up: healthy and ready again, and the acknowledged file intact.
	for _, i := range []int{1, 2} {
		if err := c.Start(i); err != nil {
			t.Fatal(err)
		}
	}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if code, body = get(survivor, "/readyz"); code == http.StatusOK {
			break
		}
	}
	if code != http.StatusOK {
		t.Fatalf("/readyz after the restarts: %d %q", code, body)
	}
	buf.Reset()
	if _, err := cl.ReadFile(ctx, "/f", &buf); err != nil || !bytes.Equal(buf.Bytes(), data) {
		t.Fatalf("/f after the restarts: %v", err)
	}
}
