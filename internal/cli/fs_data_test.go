package cli

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/govfs/govfs/internal/testcluster"
)

func TestProgressLine(t *testing.T) {
	p := &progress{label: "put /x", total: 100 << 20}
	got := p.line(45<<20, 2*time.Second)
	want := "put /x  [==========>             ]  45.0 MiB / 100.0 MiB   45%  22.5 MiB/s"
	if got != want {
		t.Errorf("line =\n%q, want\n%q", got, want)
	}
	p.total = -1
	if got := p.line(3<<20, time.Second); got != "put /x  3.0 MiB  3.0 MiB/s" {
		t.Errorf("line of unknown size = %q", got)
	}
	p.total = 10
	if got := p.line(10, 0); !strings.Contains(got, "[========================]") || !strings.Contains(got, "100%") {
		t.Errorf("line when done = %q", got)
	}
}

func TestProgressDrawsOnlyLargeTransfers(t *testing.T) {
	var buf bytes.Buffer
	small := startProgress(&buf, "get /s", 1000)
	small.add(1000)
	small.draw()
	small.Finish()
	if buf.Len() != 0 {
		t.Errorf("a small transfer drew %q", buf.String())
	}
	big := startProgress(&buf, "get /b", 64<<20)
	big.add(32 << 20)
	big.Finish() // no tick yet: nothing drawn, nothing to finish
	big = startProgress(&buf, "get /b", 64<<20)
	big.add(32 << 20)
	big.draw()
	big.add(32 << 20)
	big.Finish()
	out := buf.String()
	if !strings.HasPrefix(out, "\rget /b  [") || !strings.Contains(out, " 50%") || !strings.HasSuffix(out, "\n") ||
		!strings.Contains(out, "64.0 MiB / 64.0 MiB  100%") {
		t.Errorf("progress output %q", out)
	}
	var nilBar *progress // stderr not a terminal
	nilBar.add(5)
	nilBar.Finish()
	if nilBar.counter() == nil {
		t.Error("nil progress counter is nil")
	}
	if isTerminal(&buf) {
		t.Error("a buffer is a terminal")
	}
}

func TestParseFSAppend(t *testing.T) {
	var stderr bytes.Buffer
	inv, err := parseFS([]string{"append", "--verify", "-", "/log"}, &stderr)
	if err != nil || inv.sub != "append" || !inv.verify || inv.args[0] != "-" || inv.args[1] != "/log" {
		t.Fatalf("append: %+v, %v", inv, err)
	}
	if _, err := parseFS([]string{"append", "/only"}, &stderr); err == nil {
		t.Error("append with one argument parsed")
	}
}

// TestFSDataCommands runs put, get and append against a process cluster
// with 3 chunk servers and 1 MiB chunks.
func TestFSDataCommands(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "govfs")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/govfs/govfs/cmd/govfs").CombinedOutput(); err != nil {
		t.Fatalf("build govfs: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	c, err := testcluster.StartReady(ctx, testcluster.ProcConfig{Binary: bin, Dir: filepath.Join(dir, "cluster"), Nodes: 3,
		Tick: 50 * time.Millisecond, Chunks: 3, ChunkArgs: []string{"--chunk-size", "1048576"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	meta := strings.Join(c.Addrs(), ",")
	run := func(args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if err := Run(ctx, append([]string{"fs", "--meta", meta, "--tls", c.ClientTLSDir()}, args...), &out, &errb); err != nil {
			t.Fatalf("govfs fs %v: %v (stderr %q)", args, err, errb.String())
		}
		if errb.Len() != 0 {
			t.Errorf("govfs fs %v wrote to stderr (not a terminal): %q", args, errb.String())
		}
		return out.String()
	}
	data := make([]byte, 2<<20+300)
	rand.New(rand.NewSource(5)).Read(data)
	local := filepath.Join(dir, "in.bin")
	if err := os.WriteFile(local, data, 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	hexSum := hex.EncodeToString(sum[:])

	if out := run("put", "--verify", local, "/in.bin"); out != fmt.Sprintf("%s  /in.bin (%d bytes)\n", hexSum, len(data)) {
		t.Errorf("put --verify printed %q", out)
	}
	copyPath := filepath.Join(dir, "copy.bin")
	if out := run("get", "--verify", "/in.bin", copyPath); !strings.HasPrefix(out, hexSum+"  ") {
		t.Errorf("get --verify printed %q", out)
	}
	if got, err := os.ReadFile(copyPath); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("get: %d bytes, %v", len(got), err)
	}
	// Into an existing directory: the file goes inside it, as cp does.
	into := filepath.Join(dir, "into")
	if err := os.Mkdir(into, 0o755); err != nil {
		t.Fatal(err)
	}
	run("get", "/in.bin", into)
	if got, err := os.ReadFile(filepath.Join(into, "in.bin")); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("get into a directory: %d bytes, %v", len(got), err)
	}
	// A missing directory is refused before anything is downloaded, with
	// the user's path in the message (not a temporary name).
	var errb bytes.Buffer
	missing := filepath.Join(dir, "no-such-dir", "x.bin")
	err = Run(ctx, []string{"fs", "--meta", meta, "--tls", c.ClientTLSDir(), "get", "/in.bin", missing}, io.Discard, &errb)
	if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "no-such-dir")) || strings.Contains(err.Error(), ".govfs-") {
		t.Fatalf("get into a missing directory: %v", err)
	}

	// append creates the file. With 1 MiB chunks records are 256 KiB (a
	// quarter chunk): 2 MiB + 300 bytes is 9 records; a record that does
	// not fit in the rest of a chunk goes to the next, after padding.
	var want []byte
	place := func(in []byte) int64 { // where one writer's records land
		first := int64(-1)
		for len(in) > 0 {
			rec := in[:min(len(in), 256<<10)]
			in = in[len(rec):]
			pos := int64(len(want))
			if pos%(1<<20)+int64(len(rec)) > 1<<20 {
				want = append(want, make([]byte, 1<<20-pos%(1<<20))...)
			}
			if first < 0 {
				first = int64(len(want))
			}
			want = append(want, rec...)
		}
		return first
	}
	// More than one record: a note on stderr says what happened.
	appendRun := func(args ...string) (string, string) {
		t.Helper()
		var out, errb bytes.Buffer
		if err := Run(ctx, append([]string{"fs", "--meta", meta, "--tls", c.ClientTLSDir(), "append"}, args...), &out, &errb); err != nil {
			t.Fatalf("govfs fs append %v: %v (stderr %q)", args, err, errb.String())
		}
		return out.String(), errb.String()
	}
	out, note := appendRun("--verify", local, "/log")
	if want := fmt.Sprintf("%d\n%s  /log (%d bytes)\n", place(data), hexSum, len(data)); out != want {
		t.Fatalf("first append printed %q, want %q", out, want)
	}
	if !strings.Contains(note, "9 records of up to 256.0 KiB, contiguous from offset 0") {
		t.Errorf("first append's note: %q", note)
	}
	out, note = appendRun(local, "/log")
	if want := fmt.Sprintf("%d\n", place(data)); out != want {
		t.Fatalf("second append printed %q, want %q", out, want)
	}
	if !strings.Contains(note, "9 records") || !strings.Contains(note, "not contiguous") || !strings.Contains(note, "fs put") {
		t.Errorf("second append's note: %q", note)
	}
	var got bytes.Buffer
	if err := Run(ctx, []string{"fs", "--meta", meta, "--tls", c.ClientTLSDir(), "cat", "/log"}, &got, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Fatalf("cat /log: %d bytes, want %d: the records and padding differ", got.Len(), len(want))
	}
}
