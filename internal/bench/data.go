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
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/govfs/govfs/client"
)

// Defaults of DataConfig.
const (
	DefaultDataSize = 1 << 30
	// DefaultDataClients is how many clients run the random phases.
	DefaultDataClients = 8
	// DefaultDataOps is how many operations each random phase runs, in
	// all (split evenly over the clients).
	DefaultDataOps = 4000
)

// randomBlock is the request size of the random phases.
const randomBlock = 4 << 10

// DataConfig configures RunData.
type DataConfig struct {
	MetaAddrs []string
	// TLSDir is the client certificate directory ("" for an --insecure cluster).
	TLSDir string
	// Size of the file written and read (default 1 GiB).
	Size int64
	// LocalDir is where the local-disk baseline runs ("" = temp dir).
	LocalDir string
	// Clients run the random phases in parallel, each with its own
	// client.Client and File (default 8).
	Clients int
	// Ops is the number of 4 KiB operations of each random phase, split
	// evenly over the clients (default 4000). A fixed count, not a
	// duration, so GovFS and the local baseline do exactly the same
	// operations at the same offsets.
	Ops int
	// Cold drops the page cache (as root: sync, then 3 >
	// /proc/sys/vm/drop_caches) before every read phase, GovFS's and the
	// local one alike, so both read from the disk; otherwise both read
	// warm, right after the file was written.
	Cold bool
}

// DropCaches empties the kernel's page cache (root only), so the next
// read comes from the disk.
func DropCaches() error {
	syscall.Sync()
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0); err != nil {
		return fmt.Errorf("bench data: drop the page cache (needs root; or use --cache warm): %w", err)
	}
	return nil
}

// Data phase names, in the order they run.
const (
	PhaseSeqWrite   = "seq_write"
	PhaseSeqRead    = "seq_read"
	PhaseRandRead   = "rand_read_4k"
	PhaseRandWrite  = "rand_write_4k"
	seqRequestBytes = 1 << 20
)

// DataPhase is one measured phase with its same-run local baseline:
// throughput for the sequential phases, operations per second and
// latency percentiles for the random ones.
type DataPhase struct {
	Name          string
	MBPerSec      float64
	LocalMBPerSec float64
	// Random phases only.
	IOPS, LocalIOPS    float64
	P50, P99           time.Duration
	LocalP50, LocalP99 time.Duration
	Ops, Clients       int
}

func (p DataPhase) random() bool { return p.Ops > 0 }

// Rate is GovFS's figure: MB/s, or IOPS for a random phase.
func (p DataPhase) Rate() float64 {
	if p.random() {
		return p.IOPS
	}
	return p.MBPerSec
}

// Ratio is GovFS over local: of throughput, or of IOPS.
func (p DataPhase) Ratio() float64 {
	if p.random() {
		return p.IOPS / p.LocalIOPS
	}
	return p.MBPerSec / p.LocalMBPerSec
}

// DataReport is the result of RunData.
type DataReport struct {
	Phases []DataPhase
	Size   int64
	// Cache is "cold" or "warm" (DataConfig.Cold).
	Cache string
	// Insecure: the cluster ran plaintext (--insecure), not mutual TLS.
	Insecure bool
}

// Phase returns the phase called name.
func (r *DataReport) Phase(name string) (DataPhase, bool) {
	for _, p := range r.Phases {
		if p.Name == name {
			return p, true
		}
	}
	return DataPhase{}, false
}

func (c *DataConfig) maybeDrop() error {
	if !c.Cold {
		return nil
	}
	return DropCaches()
}

// RunData measures, through the client (3 replicas, every write
// acknowledged only when durable on every member):
//
//   - seq_write: one file of cfg.Size bytes written with WriteFile (1 MiB
//     requests, a few in parallel); local: 1 MiB writes, then one fsync.
//   - seq_read: the file read back with ReadFile; local: 1 MiB reads.
//   - rand_read_4k: cfg.Ops reads of 4 KiB at random 4 KiB-aligned
//     offsets of that file by cfg.Clients clients (ReadAt); local: pread
//     on the local file with as many goroutines, same offsets.
//   - rand_write_4k: the same with writes (WriteAt, each growing the size
//     and setting mtime in the ministry); local: pwrite + fdatasync per
//     write, as GovFS acknowledges only durable writes.
//
// Each GovFS phase is followed at once by its local baseline on a file of
// the same size in cfg.LocalDir, so both see the same machine load.
// Cache state: with cfg.Cold the page cache is dropped before each read
// phase and each local read baseline, so both read from the disk (the
// chunk servers' files and the local file alike). Without it every read
// phase runs warm, right after the file was written and read, with both
// in the page cache as far as memory holds.
func RunData(ctx context.Context, cfg DataConfig, out io.Writer) (*DataReport, error) {
	if cfg.Size <= 0 {
		cfg.Size = DefaultDataSize
	}
	if cfg.Clients <= 0 {
		cfg.Clients = DefaultDataClients
	}
	if cfg.Ops <= 0 {
		cfg.Ops = DefaultDataOps
	}
	if cfg.Size < randomBlock {
		return nil, fmt.Errorf("bench data: size %d is less than one %d-byte block", cfg.Size, randomBlock)
	}
	newClient := func() (*client.Client, error) {
		return client.New(ctx, client.Config{MetaAddrs: cfg.MetaAddrs, TLSDir: cfg.TLSDir, OpTimeout: 5 * time.Minute})
	}
	cl, err := newClient()
	if err != nil {
		return nil, fmt.Errorf("bench data: %w", err)
	}
	defer cl.Close()
	path := fmt.Sprintf("/bench-data-%d", time.Now().UnixNano())
	defer func() { _ = cl.Remove(context.WithoutCancel(ctx), path) }()
	local, err := newLocalFile(cfg.LocalDir)
	if err != nil {
		return nil, err
	}
	defer local.remove()
	rep := &DataReport{Size: cfg.Size, Cache: "warm"}
	if cfg.Cold {
		rep.Cache = "cold"
	}
	report := func(p DataPhase) {
		rep.Phases = append(rep.Phases, p)
		if p.random() {
			fmt.Fprintf(out, "%-13s IOPS=%8.1f p50=%8v p99=%8v  local IOPS=%9.1f p50=%8v p99=%8v  govfs/local=%.4f\n",
				p.Name, p.IOPS, p.P50, p.P99, p.LocalIOPS, p.LocalP50, p.LocalP99, p.Ratio())
		} else {
			fmt.Fprintf(out, "%-13s MB/s=%8.1f  local MB/s=%8.1f  govfs/local=%.3f\n", p.Name, p.MBPerSec, p.LocalMBPerSec, p.Ratio())
		}
	}
	mbps := func(d time.Duration) float64 { return float64(cfg.Size) / (1 << 20) / d.Seconds() }

	start := time.Now()
	if _, err := cl.WriteFile(ctx, path, newPattern(cfg.Size), 0o644); err != nil {
		return nil, fmt.Errorf("bench data: write: %w", err)
	}
	write := time.Since(start)
	lw, err := local.writeSeq(cfg.Size)
	if err != nil {
		return nil, err
	}
	report(DataPhase{Name: PhaseSeqWrite, MBPerSec: mbps(write), LocalMBPerSec: mbps(lw)})

	if err := cfg.maybeDrop(); err != nil {
		return nil, err
	}
	start = time.Now()
	n, err := cl.ReadFile(ctx, path, io.Discard)
	if err != nil {
		return nil, fmt.Errorf("bench data: read: %w", err)
	}
	if n != cfg.Size {
		return nil, fmt.Errorf("bench data: read %d bytes of %d", n, cfg.Size)
	}
	read := time.Since(start)
	if err := cfg.maybeDrop(); err != nil {
		return nil, err
	}
	lr, err := local.readSeq()
	if err != nil {
		return nil, err
	}
	report(DataPhase{Name: PhaseSeqRead, MBPerSec: mbps(read), LocalMBPerSec: mbps(lr)})

	for _, name := range []string{PhaseRandRead, PhaseRandWrite} {
		p, err := randomPhase(ctx, name, cfg, newClient, path, local)
		if err != nil {
			return nil, err
		}
		report(p)
	}
	return rep, nil
}

// randomPhase runs one random 4 KiB phase on GovFS, then on the local
// file with the same offsets.
func randomPhase(ctx context.Context, name string, cfg DataConfig, newClient func() (*client.Client, error), path string, local *localFile) (DataPhase, error) {
	write := name == PhaseRandWrite
	flags := syscall.O_RDONLY
	if write {
		flags = syscall.O_WRONLY
	}
	// Set up every client before the clock starts.
	files := make([]*client.File, cfg.Clients)
	for w := range files {
		cl, err := newClient()
		if err != nil {
			return DataPhase{}, fmt.Errorf("bench data: %s: %w", name, err)
		}
		defer cl.Close()
		if files[w], err = cl.Open(ctx, path, flags, 0); err != nil {
			return DataPhase{}, fmt.Errorf("bench data: %s: %w", name, err)
		}
		defer files[w].Close()
	}
	if !write {
		if err := cfg.maybeDrop(); err != nil {
			return DataPhase{}, err
		}
	}
	govfs, err := runRandom(ctx, cfg, cfg.Size, func(w int, off int64, buf []byte) error {
		if write {
			_, err := files[w].WriteAt(ctx, buf, off)
			return err
		}
		n, err := files[w].ReadAt(ctx, buf, off)
		if err == nil && n != len(buf) {
			err = fmt.Errorf("read %d bytes at %d", n, off)
		}
		return err
	})
	if err != nil {
		return DataPhase{}, fmt.Errorf("bench data: %s: %w", name, err)
	}
	if !write {
		if err := cfg.maybeDrop(); err != nil {
			return DataPhase{}, err
		}
	}
	loc, err := runRandom(ctx, cfg, cfg.Size, func(_ int, off int64, buf []byte) error {
		if write {
			if _, err := local.f.WriteAt(buf, off); err != nil {
				return err
			}
			return syscall.Fdatasync(int(local.f.Fd()))
		}
		_, err := local.f.ReadAt(buf, off)
		return err
	})
	if err != nil {
		return DataPhase{}, fmt.Errorf("bench data: local baseline %s: %w", name, err)
	}
	return DataPhase{Name: name, IOPS: govfs.iops, LocalIOPS: loc.iops, P50: govfs.p50, P99: govfs.p99,
		LocalP50: loc.p50, LocalP99: loc.p99, Ops: govfs.ops, Clients: cfg.Clients}, nil
}

type randomResult struct {
	ops      int
	iops     float64
	p50, p99 time.Duration
}

// runRandom runs cfg.Ops operations of 4 KiB split over cfg.Clients
// goroutines; worker w draws its offsets (4 KiB-aligned, uniform over the
// file) from a generator seeded with w, so two runs use the same offsets.
// Writes carry random bytes.
func runRandom(ctx context.Context, cfg DataConfig, size int64, op func(w int, off int64, buf []byte) error) (randomResult, error) {
	lat := make([][]time.Duration, cfg.Clients)
	errs := make([]error, cfg.Clients)
	blocks := size / randomBlock
	var wg sync.WaitGroup
	start := time.Now()
	for w := range cfg.Clients {
		n := cfg.Ops / cfg.Clients
		if w < cfg.Ops%cfg.Clients {
			n++
		}
		wg.Go(func() {
			r := rand.New(rand.NewSource(int64(w) + 1))
			buf := make([]byte, randomBlock)
			r.Read(buf)
			lat[w] = make([]time.Duration, 0, n)
			for range n {
				if errs[w] = ctx.Err(); errs[w] != nil {
					return
				}
				off := r.Int63n(blocks) * randomBlock
				t0 := time.Now()
				if errs[w] = op(w, off, buf); errs[w] != nil {
					return
				}
				lat[w] = append(lat[w], time.Since(t0))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return randomResult{}, err
	}
	all := slices.Concat(lat...)
	slices.Sort(all)
	return randomResult{ops: len(all), iops: float64(len(all)) / elapsed.Seconds(),
		p50: Percentile(all, 50), p99: Percentile(all, 99)}, nil
}

// localFile is the local-disk baseline's file, kept for all phases.
type localFile struct {
	f    *os.File
	size int64
}

func newLocalFile(dir string) (*localFile, error) {
	f, err := os.CreateTemp(dir, "govfs-bench-data-")
	if err != nil {
		return nil, fmt.Errorf("bench data: local baseline: %w", err)
	}
	return &localFile{f: f}, nil
}

func (l *localFile) remove() {
	l.f.Close()
	os.Remove(l.f.Name())
}

// writeSeq writes size bytes in 1 MiB writes and fsyncs them.
func (l *localFile) writeSeq(size int64) (time.Duration, error) {
	start := time.Now()
	if _, err := io.CopyBuffer(onlyWriter{l.f}, newPattern(size), make([]byte, seqRequestBytes)); err != nil {
		return 0, fmt.Errorf("bench data: local baseline write: %w", err)
	}
	if err := l.f.Sync(); err != nil {
		return 0, fmt.Errorf("bench data: local baseline write: %w", err)
	}
	l.size = size
	return time.Since(start), nil
}

// readSeq reads the file back in 1 MiB reads.
func (l *localFile) readSeq() (time.Duration, error) {
	start := time.Now()
	if _, err := io.CopyBuffer(io.Discard, onlyReader{io.NewSectionReader(l.f, 0, l.size)}, make([]byte, seqRequestBytes)); err != nil {
		return 0, fmt.Errorf("bench data: local baseline read: %w", err)
	}
	return time.Since(start), nil
}

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

// JSON is the report as one line:
//
//	{"workload":"data","phases":{"seq_write":{"mb_per_s":N,"local_mb_per_s":N,"ratio":N},"seq_read":{...},
//	 "rand_read_4k":{"iops":N,"local_iops":N,"ratio":N,...},"rand_write_4k":{...}},"size_bytes":N,"cache":"cold"}
//
// Random phases also carry p50_us, p99_us, local_p50_us, local_p99_us,
// ops and clients.
func (r *DataReport) JSON() ([]byte, error) {
	type seqPhase struct {
		MBPerSec      float64 `json:"mb_per_s"`
		LocalMBPerSec float64 `json:"local_mb_per_s"`
		Ratio         float64 `json:"ratio"`
	}
	type randPhase struct {
		IOPS       float64 `json:"iops"`
		LocalIOPS  float64 `json:"local_iops"`
		Ratio      float64 `json:"ratio"`
		P50us      float64 `json:"p50_us"`
		P99us      float64 `json:"p99_us"`
		LocalP50us float64 `json:"local_p50_us"`
		LocalP99us float64 `json:"local_p99_us"`
		Ops        int     `json:"ops"`
		Clients    int     `json:"clients"`
	}
	us := func(d time.Duration) float64 { return round(float64(d)/float64(time.Microsecond), 1) }
	var b bytes.Buffer
	b.WriteString(`{"workload":"data","phases":{`)
	for i, p := range r.Phases {
		if i > 0 {
			b.WriteByte(',')
		}
		var v any = seqPhase{round(p.MBPerSec, 1), round(p.LocalMBPerSec, 1), round(p.Ratio(), 4)}
		if p.random() {
			v = randPhase{round(p.IOPS, 1), round(p.LocalIOPS, 1), round(p.Ratio(), 4),
				us(p.P50), us(p.P99), us(p.LocalP50), us(p.LocalP99), p.Ops, p.Clients}
		}
		enc, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(&b, "%q:%s", p.Name, enc)
	}
	fmt.Fprintf(&b, `},"size_bytes":%d,"cache":%q,"insecure":%v}`, r.Size, r.Cache, r.Insecure)
	if !json.Valid(b.Bytes()) {
		return nil, errors.New("bench data: built invalid JSON")
	}
	return b.Bytes(), nil
}
