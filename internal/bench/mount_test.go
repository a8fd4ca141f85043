package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/govfs/govfs/internal/testcluster"
)

// TestRunMount runs a small mount workload on a real `govfs mount` of a
// 3+3 process cluster, a local directory and a go-fuse loopback mount.
func TestRunMount(t *testing.T) {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("no /dev/fuse: %v", err)
	}
	if os.Geteuid() != 0 {
		if _, err := exec.LookPath("fusermount3"); err != nil {
			t.Skip("not root and no fusermount3 (apt-get install fuse3)")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := testcluster.StartReady(ctx, testcluster.ProcConfig{Binary: govfsBin, Dir: t.TempDir(), Nodes: 3, Chunks: 3,
		Tick: 50 * time.Millisecond, ChunkArgs: []string{"--chunk-size", "4194304"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	var log bytes.Buffer
	g, err := MountGovFS(ctx, govfsBin, c.Addrs(), c.ClientTLSDir(), t.TempDir(), &log)
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	defer g.Unmount()
	src := t.TempDir()
	lo, err := MountLoopback(src, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer lo.Unmount()
	var out bytes.Buffer
	rep, err := RunMount(ctx, MountConfig{
		Targets: []MountTarget{{TargetGovFS, g.Dir}, {TargetLocal, t.TempDir()}, {TargetLoopback, lo.Dir}},
		Procs:   2, Files: 20, Data: true, Size: 3 << 20, Ops: 40,
	}, &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	t.Log(out.String())
	for _, layout := range []string{LayoutOwn, LayoutShared} {
		for _, tg := range []string{TargetGovFS, TargetLocal, TargetLoopback} {
			res := rep.Meta[layout][tg]
			if len(res) != len(MountMetaPhases) {
				t.Fatalf("%s %s: %d phases", layout, tg, len(res))
			}
			for i, p := range res {
				want := 2 * 20
				if p.Name == MPhaseReaddir {
					want = 2 * 3
				}
				if p.Name != MountMetaPhases[i] || p.Ops != want || p.Errors != 0 {
					t.Errorf("%s %s: phase %+v, want %s with %d ops", layout, tg, p, MountMetaPhases[i], want)
				}
			}
		}
	}
	if d := rep.Data[TargetGovFS]; len(d) != 4 || d[0].Bytes != 3<<20 || d[2].Ops != 40 {
		t.Fatalf("data: %+v", d)
	}
	line, err := rep.JSON()
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Workload string
		Meta     map[string]map[string]map[string]float64
		Data     map[string]map[string]float64
	}
	if err := json.Unmarshal(line, &v); err != nil {
		t.Fatalf("%v: %s", err, line)
	}
	if v.Workload != "mount" || v.Meta["shared"]["create"]["ratio_loopback"] <= 0 || v.Data["seq_write"]["local_mb_per_s"] <= 0 {
		t.Fatalf("JSON: %s", line)
	}
	if ents, _ := os.ReadDir(src); len(ents) != 0 {
		t.Errorf("loopback source not cleaned: %v", ents)
	}
}
