package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"os"
	"time"

	"github.com/govfs/govfs/client"
)

// DataConfig configures RunData.
type DataConfig struct {
	MetaAddrs []string
	// Size of the file written and read (default 1 GiB).
	Size int64
	// LocalDir is where the local-disk baseline runs ("" = temp dir).
	LocalDir string
}

// DataPhase is one measured phase with its same-run local baseline.
type DataPhase struct {
	Name          string
	MBPerSec      float64
	LocalMBPerSec float64
}

// DataReport is the result of RunData.
type DataReport struct {
	Phases []DataPhase
	Size   int64
}

// RunData measures sequential write and read of one file of cfg.Size
// bytes in 1 MiB requests through the client (3 replicas, every chunk
// write acknowledged only when durable on every member), and the same
// pattern on a local file (written, fsync'd, read back) in the same run.
// NB: random 4 KiB phases need ranged reads and writes in the client,
// which are not built yet; they are not reported.
func RunData(ctx context.Context, cfg DataConfig, out io.Writer) (*DataReport, error) {
	if cfg.Size <= 0 {
		cfg.Size = 1 << 30
	}
	cl, err := client.New(ctx, client.Config{MetaAddrs: cfg.MetaAddrs, OpTimeout: 5 * time.Minute})
	if err != nil {
		return nil, fmt.Errorf("bench data: %w", err)
	}
	defer cl.Close()
	path := fmt.Sprintf("/bench-data-%d", time.Now().UnixNano())
	defer func() { _ = cl.Remove(context.WithoutCancel(ctx), path) }()

	start := time.Now()
	if _, err := cl.WriteFile(ctx, path, newPattern(cfg.Size), 0o644); err != nil {
		return nil, fmt.Errorf("bench data: write: %w", err)
	}
	write := time.Since(start)
	start = time.Now()
	n, err := cl.ReadFile(ctx, path, io.Discard)
	if err != nil {
		return nil, fmt.Errorf("bench data: read: %w", err)
	}
	if n != cfg.Size {
		return nil, fmt.Errorf("bench data: read %d bytes of %d", n, cfg.Size)
	}
	read := time.Since(start)

	lw, lr, err := localBaseline(cfg.LocalDir, cfg.Size)
	if err != nil {
		return nil, err
	}
	mbps := func(d time.Duration) float64 { return float64(cfg.Size) / (1 << 20) / d.Seconds() }
	rep := &DataReport{Size: cfg.Size, Phases: []DataPhase{
		{Name: "seq_write", MBPerSec: mbps(write), LocalMBPerSec: mbps(lw)},
		{Name: "seq_read", MBPerSec: mbps(read), LocalMBPerSec: mbps(lr)},
	}}
	for _, p := range rep.Phases {
		fmt.Fprintf(out, "%-10s MB/s=%8.1f  local MB/s=%8.1f  govfs/local=%.3f\n", p.Name, p.MBPerSec, p.LocalMBPerSec, p.MBPerSec/p.LocalMBPerSec)
	}
	return rep, nil
}

// localBaseline writes size bytes to a local file in 1 MiB writes, fsyncs
// it, then reads it back, timing both.
func localBaseline(dir string, size int64) (write, read time.Duration, err error) {
	f, err := os.CreateTemp(dir, "govfs-bench-data-")
	if err != nil {
		return 0, 0, fmt.Errorf("bench data: local baseline: %w", err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	start := time.Now()
	if _, err := io.CopyBuffer(onlyWriter{f}, newPattern(size), make([]byte, requestSizeLocal)); err != nil {
		return 0, 0, fmt.Errorf("bench data: local baseline write: %w", err)
	}
	if err := f.Sync(); err != nil {
		return 0, 0, err
	}
	write = time.Since(start)
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return 0, 0, err
	}
	start = time.Now()
	if _, err := io.CopyBuffer(io.Discard, onlyReader{f}, make([]byte, requestSizeLocal)); err != nil {
		return 0, 0, fmt.Errorf("bench data: local baseline read: %w", err)
	}
	return write, time.Since(start), nil
}

const requestSizeLocal = 1 << 20

// onlyWriter/onlyReader hide ReadFrom/WriteTo so the copy really moves
// 1 MiB requests, as the GovFS side does.
type onlyWriter struct{ io.Writer }
type onlyReader struct{ io.Reader }

// pattern yields size bytes of incompressible data cheaply (a random
// 1 MiB block, varied per block so chunks differ).
type pattern struct {
	block []byte
	left  int64
	n     uint64
	off   int
}

func newPattern(size int64) *pattern {
	b := make([]byte, 1<<20)
	rand.New(rand.NewSource(1)).Read(b)
	return &pattern{block: b, left: size}
}

func (p *pattern) Read(b []byte) (int, error) {
	if p.left <= 0 {
		return 0, io.EOF
	}
	if p.off == len(p.block) {
		p.off = 0
		p.n++
		p.block[0], p.block[1] = byte(p.n), byte(p.n>>8)
	}
	n := copy(b, p.block[p.off:])
	if int64(n) > p.left {
		n = int(p.left)
	}
	p.off += n
	p.left -= int64(n)
	return n, nil
}

// JSON is the report as one line: {"workload":"data","phases":{...}}.
func (r *DataReport) JSON() ([]byte, error) {
	type phase struct {
		MBPerSec      float64 `json:"mb_per_s"`
		LocalMBPerSec float64 `json:"local_mb_per_s"`
		Ratio         float64 `json:"ratio"`
	}
	var b bytes.Buffer
	b.WriteString(`{"workload":"data","phases":{`)
	for i, p := range r.Phases {
		if i > 0 {
			b.WriteByte(',')
		}
		v, err := json.Marshal(phase{round(p.MBPerSec, 1), round(p.LocalMBPerSec, 1), round(p.MBPerSec/p.LocalMBPerSec, 4)})
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(&b, "%q:%s", p.Name, v)
	}
	fmt.Fprintf(&b, `},"size_bytes":%d}`, r.Size)
	if !json.Valid(b.Bytes()) {
		return nil, errors.New("bench data: built invalid JSON")
	}
	return b.Bytes(), nil
}
