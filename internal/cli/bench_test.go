package cli

import (
	"context"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/govfs/govfs/internal/bench"
)

func TestParseBenchMeta(t *testing.T) {
	a, err := parseBenchMeta(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(a.meta) != 0 || a.clients != bench.DefaultClients || a.files != bench.DefaultFiles ||
		a.conns != bench.DefaultConns || !slices.Equal(a.phases, bench.MetaPhases) || a.jsonOnly {
		t.Errorf("defaults = %+v", a)
	}
	a, err = parseBenchMeta([]string{"--meta", "h1:1, h2:2,", "--clients", "4", "--files", "20",
		"--phases", "create,stat", "--json-only"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(a.meta, []string{"h1:1", "h2:2"}) || a.clients != 4 || a.files != 20 ||
		!slices.Equal(a.phases, []string{"create", "stat"}) || !a.jsonOnly {
		t.Errorf("parsed = %+v", a)
	}
	for _, args := range [][]string{
		{"--clients", "0"},
		{"--files", "-1"},
		{"--phases", "create,nope"},
		{"extra"},
		{"--both-orders"}, // one K: no order to turn
		{"--both-orders", "--ministries", "5"},
	} {
		if _, err := parseBenchMeta(args, io.Discard); err == nil {
			t.Errorf("parseBenchMeta(%q) succeeded", args)
		}
	}
}

func TestRunBenchUsage(t *testing.T) {
	var stderr strings.Builder
	if err := runBench(context.Background(), nil, io.Discard, &stderr); err == nil {
		t.Error("no workload: no error")
	}
	if err := runBench(context.Background(), []string{"nope"}, io.Discard, &stderr); err == nil {
		t.Error("unknown workload: no error")
	}
	if !strings.Contains(stderr.String(), "Usage: govfs bench") {
		t.Errorf("usage not printed: %q", stderr.String())
	}
}

func TestOtherTarget(t *testing.T) {
	dir := t.TempDir()
	tg, err := otherTarget("moosefs=" + dir)
	if err != nil || tg.Name != "moosefs" || tg.Dir != dir {
		t.Fatalf("otherTarget: %+v, %v", tg, err)
	}
	file := dir + "/f"
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"moosefs", "=" + dir, "moosefs=", "Moose=" + dir, "a-b=" + dir, "local=" + dir,
		"govfs=" + dir, "loopback=" + dir, "m=" + dir + "/missing", "m=" + file} {
		if _, err := otherTarget(v); err == nil {
			t.Errorf("otherTarget(%q) accepted", v)
		}
	}
	// Named twice.
	err = benchMount(context.Background(), []string{"--other", "m=" + dir, "--other", "m=" + dir}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "named twice") {
		t.Errorf("--other named twice: %v", err)
	}
}

// TestMinistryRatios: each K's mean over its runs against the first K's
// mean, so a 1,5,5,1 run where the machine slowed down in the middle
// does not pass for a cost of five ministries.
func TestMinistryRatios(t *testing.T) {
	rep := func(k int, mkdir, create float64) *bench.MetaReport {
		// ops over one second: OpsPerSec is the ops count.
		return &bench.MetaReport{Ministries: k, Phases: []bench.PhaseResult{
			{Name: "mkdir", Ops: int(mkdir), Elapsed: time.Second},
			{Name: "create", Ops: int(create), Elapsed: time.Second},
		}}
	}
	got := ministryRatios([]*bench.MetaReport{rep(1, 1000, 800), rep(5, 600, 800), rep(5, 1000, 400), rep(1, 600, 800)})
	want := []string{
		"mkdir    5 ministries / 1: 1.00  (means of 2 and 2 runs)",
		"create   5 ministries / 1: 0.75  (means of 2 and 2 runs)",
	}
	if !slices.Equal(got, want) {
		t.Errorf("both orders: %q, want %q", got, want)
	}
	// One run each: the plain ratio, as before the flag; a third K too.
	got = ministryRatios([]*bench.MetaReport{rep(1, 1000, 800), rep(5, 900, 400), rep(3, 500, 1600)})
	want = []string{
		"mkdir    5 ministries / 1: 0.90",
		"create   5 ministries / 1: 0.50",
		"mkdir    3 ministries / 1: 0.50",
		"create   3 ministries / 1: 2.00",
	}
	if !slices.Equal(got, want) {
		t.Errorf("one order: %q, want %q", got, want)
	}
	if got := ministryRatios([]*bench.MetaReport{rep(1, 1000, 800)}); len(got) != 0 {
		t.Errorf("one K: %q, want nothing", got)
	}
}
