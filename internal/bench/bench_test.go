package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/govfs/govfs/client"
	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/testcluster"
)

// govfsBin is the govfs binary built by TestMain.
var govfsBin string

func TestMain(m *testing.M) {
	os.Exit(func() int {
		dir, err := os.MkdirTemp("", "govfs-bench-test-bin-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		govfsBin = filepath.Join(dir, "govfs")
		cmd := exec.Command("go", "build", "-o", govfsBin, "github.com/govfs/govfs/cmd/govfs")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "build govfs:", err)
			return 1
		}
		return m.Run()
	}())
}

func TestPercentile(t *testing.T) {
	ms := func(n ...int) []time.Duration {
		var out []time.Duration
		for _, x := range n {
			out = append(out, time.Duration(x)*time.Millisecond)
		}
		return out
	}
	hundred := make([]int, 100)
	for i := range hundred {
		hundred[i] = i + 1
	}
	for _, tc := range []struct {
		in   []time.Duration
		p    float64
		want time.Duration
	}{
		{nil, 50, 0},
		{ms(7), 50, 7 * time.Millisecond},
		{ms(7), 99, 7 * time.Millisecond},
		{ms(1, 2), 50, 1 * time.Millisecond},
		{ms(1, 2, 3, 4), 50, 2 * time.Millisecond},
		{ms(1, 2, 3, 4), 99, 4 * time.Millisecond},
		{ms(1, 2, 3, 4), 100, 4 * time.Millisecond},
		{ms(hundred...), 50, 50 * time.Millisecond},
		{ms(hundred...), 99, 99 * time.Millisecond},
		{ms(hundred...), 1, 1 * time.Millisecond},
		{ms(hundred...), 0, 1 * time.Millisecond},
	} {
		if got := Percentile(tc.in, tc.p); got != tc.want {
			t.Errorf("Percentile(%v, %v) = %v, want %v", tc.in, tc.p, got, tc.want)
		}
	}
}

func TestParsePhases(t *testing.T) {
	for _, s := range []string{"", "all"} {
		got, err := ParsePhases(s)
		if err != nil || !slices.Equal(got, MetaPhases) {
			t.Errorf("ParsePhases(%q) = %v, %v; want all", s, got, err)
		}
	}
	got, err := ParsePhases("stat, create,stat")
	if err != nil || !slices.Equal(got, []string{"stat", "create"}) {
		t.Errorf("ParsePhases = %v, %v", got, err)
	}
	for _, s := range []string{"bogus", "create,bogus", ","} {
		if _, err := ParsePhases(s); err == nil {
			t.Errorf("ParsePhases(%q) succeeded", s)
		}
	}
}

func TestReportJSON(t *testing.T) {
	rep := &MetaReport{
		Phases: []PhaseResult{
			{Name: "mkdir", Ops: 100, Elapsed: time.Second, P50: 1500 * time.Microsecond, P99: 3 * time.Millisecond},
			{Name: "create", Ops: 50, Elapsed: time.Second},
		},
		MeanEntriesPerAppend: 3.14159, Clients: 4, FilesPerClient: 25,
	}
	b, err := rep.JSON()
	if err != nil {
		t.Fatal(err)
	}
	want := `{"workload":"meta","phases":{"mkdir":{"ops_per_s":100,"p50_ms":1.5,"p99_ms":3},"create":{"ops_per_s":50,"p50_ms":0,"p99_ms":0}},"mean_entries_per_append":3.14,"clients":4,"files_per_client":25,"ministries":1}`
	if string(b) != want {
		t.Errorf("JSON =\n%s\nwant\n%s", b, want)
	}
}

// startCluster starts a 3-node cluster (mutual TLS) and returns its
// addresses and the admin certificate's directory.
func startCluster(t *testing.T) ([]string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	c, err := testcluster.StartReady(ctx, testcluster.ProcConfig{Binary: govfsBin, Dir: t.TempDir(), Nodes: 3})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	return c.Addrs(), c.ClientTLSDir()
}

func TestRunMeta(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-process cluster")
	}
	addrs, tlsDir := startCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	rep, err := RunMeta(ctx, MetaConfig{MetaAddrs: addrs, TLSDir: tlsDir, Clients: 4, Files: 20, Conns: 2, Cleanup: true}, &out)
	t.Logf("output:\n%s", out.String())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range rep.Phases {
		names = append(names, p.Name)
		if p.OpsPerSec() <= 0 || p.Errors != 0 {
			t.Errorf("phase %s: ops/s %v, errors %d", p.Name, p.OpsPerSec(), p.Errors)
		}
	}
	if !slices.Equal(names, MetaPhases) {
		t.Errorf("phases = %v, want %v", names, MetaPhases)
	}
	wantOps := map[string]int{"mkdir": 80, "create": 80, "stat": 4 * 80, "readdir": 40, "rename": 80, "unlink": 160}
	for name, n := range wantOps {
		if p, _ := rep.Phase(name); p.Ops != n {
			t.Errorf("phase %s: %d ops, want %d", name, p.Ops, n)
		}
	}
	if p, _ := rep.Phase("readdir"); p.Entries != 40*40 {
		t.Errorf("readdir listed %d entries, want %d", p.Entries, 40*40)
	}
	if rep.MeanEntriesPerAppend <= 0 {
		t.Errorf("mean entries per append = %v", rep.MeanEntriesPerAppend)
	}
	for _, name := range MetaPhases {
		if !strings.Contains(out.String(), name+" ") {
			t.Errorf("output has no %s line", name)
		}
	}

	line, err := rep.JSON()
	if err != nil {
		t.Fatal(err)
	}
	var parsed struct {
		Workload string `json:"workload"`
		Phases   map[string]struct {
			OpsPerSec float64 `json:"ops_per_s"`
			P50       float64 `json:"p50_ms"`
			P99       float64 `json:"p99_ms"`
		} `json:"phases"`
		MeanEntriesPerAppend float64 `json:"mean_entries_per_append"`
		Clients              int     `json:"clients"`
		FilesPerClient       int     `json:"files_per_client"`
	}
	if err := json.Unmarshal(line, &parsed); err != nil {
		t.Fatalf("JSON line %s: %v", line, err)
	}
	if parsed.Workload != "meta" || parsed.Clients != 4 || parsed.FilesPerClient != 20 || len(parsed.Phases) != len(MetaPhases) {
		t.Errorf("JSON line %s", line)
	}
	for name, p := range parsed.Phases {
		if p.OpsPerSec <= 0 || p.P99 < p.P50 {
			t.Errorf("JSON phase %s = %+v", name, p)
		}
	}

	// The bench tree is gone.
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
		if strings.HasPrefix(string(e.GetName()), "bench-") {
			t.Errorf("bench tree /%s left behind", e.GetName())
		}
	}
}

// TestRunMetaSubset runs phases that need untimed setup and reports only
// the ones asked for.
func TestRunMetaSubset(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-process cluster")
	}
	addrs, tlsDir := startCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	rep, err := RunMeta(ctx, MetaConfig{MetaAddrs: addrs, TLSDir: tlsDir, Clients: 3, Files: 10, Phases: []string{"unlink", "stat"}, Cleanup: true}, &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	var names []string
	for _, p := range rep.Phases {
		names = append(names, p.Name)
	}
	if !slices.Equal(names, []string{"stat", "unlink"}) {
		t.Errorf("phases = %v", names)
	}
	if p, _ := rep.Phase("unlink"); p.Ops != 30 {
		t.Errorf("unlink ops = %d, want 30 (no directories made)", p.Ops)
	}
}

func TestRunData(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	c, err := testcluster.StartReady(ctx, testcluster.ProcConfig{Binary: govfsBin, Dir: t.TempDir(), Nodes: 3, Chunks: 3,
		ChunkArgs: []string{"--chunk-size", "1048576"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	var out bytes.Buffer
	rep, err := RunData(ctx, DataConfig{MetaAddrs: c.Addrs(), TLSDir: c.ClientTLSDir(), Size: 3<<20 + 100, Clients: 3, Ops: 40}, &out)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range rep.Phases {
		names = append(names, p.Name)
	}
	if !slices.Equal(names, []string{PhaseSeqWrite, PhaseSeqRead, PhaseRandRead, PhaseRandWrite}) {
		t.Fatalf("phases %v", names)
	}
	if p := rep.Phases[0]; p.MBPerSec <= 0 || p.LocalMBPerSec <= 0 {
		t.Fatalf("seq_write %+v", p)
	}
	for _, p := range rep.Phases[2:] {
		if p.Ops != 40 || p.Clients != 3 || p.IOPS <= 0 || p.LocalIOPS <= 0 || p.P50 <= 0 || p.P99 < p.P50 || p.LocalP99 < p.LocalP50 {
			t.Fatalf("%s %+v", p.Name, p)
		}
	}
	line, err := rep.JSON()
	if err != nil {
		t.Fatal(err)
	}
	var parsed struct {
		Workload string                        `json:"workload"`
		Phases   map[string]map[string]float64 `json:"phases"`
	}
	if err := json.Unmarshal(line, &parsed); err != nil || parsed.Workload != "data" {
		t.Fatalf("JSON %s: %v", line, err)
	}
	for phase, keys := range map[string][]string{
		PhaseSeqWrite:  {"mb_per_s", "local_mb_per_s", "ratio"},
		PhaseSeqRead:   {"mb_per_s", "local_mb_per_s", "ratio"},
		PhaseRandRead:  {"iops", "local_iops", "ratio", "p50_us", "p99_us"},
		PhaseRandWrite: {"iops", "local_iops", "ratio", "p50_us", "p99_us"},
	} {
		for _, k := range keys {
			if parsed.Phases[phase][k] <= 0 {
				t.Errorf("JSON %s: %s.%s missing or not positive", line, phase, k)
			}
		}
	}
	// The human report has a line per random phase.
	if !strings.Contains(out.String(), "rand_read_4k  IOPS=") || !strings.Contains(out.String(), "rand_write_4k IOPS=") {
		t.Errorf("human output lacks rand_write_4k:\n%s", out.String())
	}
}

func TestRunLocks(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	c, err := testcluster.StartReady(ctx, testcluster.ProcConfig{Binary: govfsBin, Dir: t.TempDir(), Nodes: 3, Chunks: 3,
		ChunkArgs: []string{"--chunk-size", "1048576"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	var out bytes.Buffer
	rep, err := RunLocks(ctx, LocksConfig{MetaAddrs: c.Addrs(), TLSDir: c.ClientTLSDir(), RowSizes: []int64{300_000}, Writers: []int{1, 3},
		FixedWriters: 3, FixedRow: 300_000, LocalDir: t.TempDir()}, &out)
	if err != nil {
		t.Fatal(err)
	}
	// (300 KB, 3 writers) once, not twice; then (300 KB, 1 writer).
	var got []string
	for _, p := range rep.Points {
		got = append(got, fmt.Sprintf("%s/%d/%d", p.Experiment, p.RowBytes, p.Writers))
		if len(p.ByRow) != p.Writers || len(p.WholeFile) != p.Writers || p.Unlocked <= 0 || p.Local <= 0 {
			t.Errorf("point %+v: want a duration per writer and both baselines", p)
		}
		for _, d := range append(slices.Clone(p.ByRow), p.WholeFile...) {
			if d <= 0 {
				t.Errorf("point %+v: a writer's duration is %v", p, d)
			}
		}
	}
	want := []string{"one_row/300000/3", "ten_rows/300000/3", "one_row/300000/1", "ten_rows/300000/1"}
	if !slices.Equal(got, want) {
		t.Fatalf("points %v, want %v", got, want)
	}
	line, err := rep.JSON()
	if err != nil || !strings.Contains(string(line), `"workload":"locks"`) {
		t.Fatalf("JSON %s: %v", line, err)
	}
	if !strings.Contains(out.String(), "ten_rows") {
		t.Errorf("human output:\n%s", out.String())
	}
}
