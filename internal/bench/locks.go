package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/govfs/govfs/client"
	"github.com/govfs/govfs/internal/ids"
)

// The thesis' ranged-lock experiment (govfs-thesis-kleingeld-2022 §5.2),
// with real I/O instead of sleeps: writers, each a client of its own,
// write rows of one 10-row file, locking either only the row they write
// (a write lock over the row: what fcntl does through the mount) or the
// whole file. Experiment one_row: each writer writes one random row once.
// Experiment ten_rows: each writer writes all ten rows, by row in a random
// order (ten locks) or all at once under one whole-file lock.

// LocksRows is the number of rows of the file.
const LocksRows = 10

// Locks experiments.
const (
	LocksOneRow  = "one_row"
	LocksTenRows = "ten_rows"
)

// Thesis defaults: row sizes (decimal MB) at 6 writers, and writer
// counts at 10 MB rows.
var (
	DefaultLockRowSizes = []int64{100_000, 1_000_000, 10_000_000, 20_000_000, 40_000_000, 80_000_000}
	DefaultLockWriters  = []int{1, 2, 4, 8, 16, 32}
)

const (
	defaultLockFixedWriters = 6
	defaultLockFixedRow     = 10_000_000
)

// LocksConfig configures RunLocks.
type LocksConfig struct {
	MetaAddrs []string
	// TLSDir is the client certificate directory ("" for an --insecure cluster).
	TLSDir string
	// RowSizes are swept at FixedWriters writers; Writers at FixedRow
	// bytes per row. Nil: the thesis' values.
	RowSizes     []int64
	Writers      []int
	FixedWriters int
	FixedRow     int64
	// Experiments to run (default both).
	Experiments []string
	// LocalDir is where the local-disk baseline writes ("" = temp dir).
	LocalDir string
	// SimulateMBps, when > 0, replaces each row's write and sync by a
	// sleep of its size at this rate, as the thesis did (200 MB/s): the
	// locking alone is then measured, as if every writer had a disk and
	// network of its own. 0: real I/O.
	SimulateMBps float64
}

// LocksPoint is one measured point: each writer's duration (lock to
// unlock, I/O included) with each method, and the same run's baselines:
// one writer writing the same bytes (one row, or ten) to GovFS without
// any lock, and to a local file (write + fdatasync).
type LocksPoint struct {
	Experiment string
	RowBytes   int64
	Writers    int
	ByRow      []time.Duration
	WholeFile  []time.Duration
	Unlocked   time.Duration
	Local      time.Duration
}

func meanOf(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	var s time.Duration
	for _, d := range ds {
		s += d
	}
	return s / time.Duration(len(ds))
}

// LocksReport is RunLocks' result.
type LocksReport struct {
	Points []LocksPoint
}

// RunLocks runs the sweeps and prints a line per point.
func RunLocks(ctx context.Context, cfg LocksConfig, out io.Writer) (*LocksReport, error) {
	if cfg.RowSizes == nil {
		cfg.RowSizes = DefaultLockRowSizes
	}
	if cfg.Writers == nil {
		cfg.Writers = DefaultLockWriters
	}
	if cfg.FixedWriters <= 0 {
		cfg.FixedWriters = defaultLockFixedWriters
	}
	if cfg.FixedRow <= 0 {
		cfg.FixedRow = defaultLockFixedRow
	}
	if len(cfg.Experiments) == 0 {
		cfg.Experiments = []string{LocksOneRow, LocksTenRows}
	}
	for _, e := range cfg.Experiments {
		if e != LocksOneRow && e != LocksTenRows {
			return nil, fmt.Errorf("bench locks: unknown experiment %q (want %s or %s)", e, LocksOneRow, LocksTenRows)
		}
	}
	type point struct {
		row     int64
		writers int
	}
	var points []point
	for _, r := range cfg.RowSizes {
		points = append(points, point{r, cfg.FixedWriters})
	}
	for _, w := range cfg.Writers {
		if p := (point{cfg.FixedRow, w}); !slices.Contains(points, p) {
			points = append(points, p)
		}
	}
	maxRow, maxWriters := int64(0), 0
	for _, p := range points {
		if p.row <= 0 || p.writers <= 0 {
			return nil, fmt.Errorf("bench locks: row size %d and writers %d must be positive", p.row, p.writers)
		}
		maxRow, maxWriters = max(maxRow, p.row), max(maxWriters, p.writers)
	}
	// Every writer writes the same bytes: one buffer, only read.
	buf := make([]byte, maxRow)
	_, _ = io.ReadFull(newPattern(maxRow), buf)

	clients := make([]*client.Client, maxWriters)
	defer func() {
		for _, c := range clients {
			if c != nil {
				c.Close()
			}
		}
	}()
	for i := range clients {
		c, err := client.New(ctx, client.Config{MetaAddrs: cfg.MetaAddrs, TLSDir: cfg.TLSDir, OpTimeout: 10 * time.Minute})
		if err != nil {
			return nil, fmt.Errorf("bench locks: client %d: %w", i, err)
		}
		clients[i] = c
	}
	local, err := newLocalFile(cfg.LocalDir)
	if err != nil {
		return nil, err
	}
	defer local.remove()

	rep := &LocksReport{}
	fmt.Fprintf(out, "%-9s %10s %7s %12s %12s %12s %12s %9s %9s\n", "exp", "row_bytes", "writers",
		"by_row", "whole_file", "unlocked", "local", "row/unl", "whole/unl")
	for _, p := range points {
		for _, exp := range cfg.Experiments {
			lp, err := runLocksPoint(ctx, clients[:p.writers], exp, p.row, buf[:p.row], local, cfg.SimulateMBps)
			if err != nil {
				return nil, err
			}
			rep.Points = append(rep.Points, lp)
			fmt.Fprintf(out, "%-9s %10d %7d %12v %12v %12v %12v %9.2f %9.2f\n", exp, p.row, p.writers,
				meanOf(lp.ByRow).Round(time.Millisecond), meanOf(lp.WholeFile).Round(time.Millisecond),
				lp.Unlocked.Round(time.Millisecond), lp.Local.Round(time.Millisecond),
				float64(meanOf(lp.ByRow))/float64(lp.Unlocked), float64(meanOf(lp.WholeFile))/float64(lp.Unlocked))
		}
	}
	return rep, nil
}

// runLocksPoint measures one experiment at one row size and writer count
// on a fresh file.
func runLocksPoint(ctx context.Context, clients []*client.Client, exp string, row int64, buf []byte, local *localFile, simMBps float64) (LocksPoint, error) {
	lp := LocksPoint{Experiment: exp, RowBytes: row, Writers: len(clients)}
	path := fmt.Sprintf("/bench-locks-%d", time.Now().UnixNano())
	c0 := clients[0]
	a, err := c0.Create(ctx, path, 0o644, true)
	if err != nil {
		return lp, fmt.Errorf("bench locks: create %s: %w", path, err)
	}
	defer func() { _ = c0.Remove(context.WithoutCancel(ctx), path) }()
	files := make([]*client.File, len(clients))
	for i, c := range clients {
		// By inode: a linearizable open, whichever node answers.
		f, _, err := c.OpenIno(ctx, ids.Ino(a.GetIno()), syscall.O_RDWR)
		if err != nil {
			return lp, fmt.Errorf("bench locks: open %s: %w", path, err)
		}
		defer f.Close()
		files[i] = f
	}
	rowsOf := func() []int {
		if exp == LocksOneRow {
			return []int{rand.Intn(LocksRows)}
		}
		return rand.Perm(LocksRows)
	}
	writeRows := func(f *client.File, rows []int) error {
		if simMBps > 0 {
			select {
			case <-time.After(time.Duration(float64(len(rows)) * float64(row) / (simMBps * 1e6) * float64(time.Second))):
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		for _, r := range rows {
			if _, err := f.WriteAt(ctx, buf, int64(r)*row); err != nil {
				return err
			}
		}
		return f.Sync(ctx)
	}
	// The file is written whole first (not timed): every timed write,
	// baselines and both methods, overwrites rows of an existing file.
	all := make([]int, LocksRows)
	for r := range all {
		all[r] = r
	}
	if err := writeRows(files[0], all); err != nil {
		return lp, fmt.Errorf("bench locks: fill %s: %w", path, err)
	}
	// Baselines: the bytes one writer writes, without locks.
	nrows := 1
	if exp == LocksTenRows {
		nrows = LocksRows
	}
	start := time.Now()
	if err := writeRows(files[0], all[:nrows]); err != nil {
		return lp, fmt.Errorf("bench locks: unlocked write: %w", err)
	}
	lp.Unlocked = time.Since(start)
	if simMBps == 0 {
		if lp.Local, err = local.writeRows(buf, nrows); err != nil {
			return lp, err
		}
	}

	for _, byRow := range []bool{true, false} {
		durs := make([]time.Duration, len(clients))
		errs := make([]error, len(clients))
		var ready, wg sync.WaitGroup
		gate := make(chan struct{})
		for i := range clients {
			ready.Add(1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				c, f, rows := clients[i], files[i], rowsOf()
				ready.Done()
				<-gate
				t0 := time.Now()
				errs[i] = lockedWrite(ctx, c, f, rows, row, byRow, writeRows)
				durs[i] = time.Since(t0)
			}()
		}
		ready.Wait()
		close(gate)
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				return lp, fmt.Errorf("bench locks: %s, %d writers, %d-byte rows: %w", exp, len(clients), row, err)
			}
		}
		if byRow {
			lp.ByRow = durs
		} else {
			lp.WholeFile = durs
		}
	}
	return lp, nil
}

// lockedWrite writes rows under write locks: one per row (byRow) or one
// over the whole file.
func lockedWrite(ctx context.Context, c *client.Client, f *client.File, rows []int, row int64, byRow bool, writeRows func(*client.File, []int) error) error {
	opts := client.LeaseOptions{Lock: true, Wait: 10 * time.Minute}
	if !byRow {
		l, err := c.AcquireLease(ctx, f.Ino(), client.LeaseWrite, 0, 0, opts)
		if err != nil {
			return err
		}
		defer l.Release(context.WithoutCancel(ctx))
		return writeRows(f, rows)
	}
	for _, r := range rows {
		l, err := c.AcquireLease(ctx, f.Ino(), client.LeaseWrite, int64(r)*row, row, opts)
		if err != nil {
			return err
		}
		err = writeRows(f, []int{r})
		if rerr := l.Release(context.WithoutCancel(ctx)); err == nil {
			err = rerr
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// writeRows overwrites the first n rows of buf's size in the local file
// and fdatasyncs, timed; the rows are written once untimed first, so the
// timed write overwrites as GovFS's does.
func (l *localFile) writeRows(buf []byte, n int) (time.Duration, error) {
	write := func() error {
		for r := range n {
			if _, err := l.f.WriteAt(buf, int64(r)*int64(len(buf))); err != nil {
				return fmt.Errorf("bench locks: local baseline: %w", err)
			}
		}
		if err := syscall.Fdatasync(int(l.f.Fd())); err != nil {
			return fmt.Errorf("bench locks: local baseline: %w", err)
		}
		return nil
	}
	if err := write(); err != nil {
		return 0, err
	}
	start := time.Now()
	if err := write(); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// JSON is the report as one line.
func (r *LocksReport) JSON() ([]byte, error) {
	type jp struct {
		Experiment  string  `json:"experiment"`
		RowBytes    int64   `json:"row_bytes"`
		Writers     int     `json:"writers"`
		ByRowMs     float64 `json:"by_row_mean_ms"`
		WholeFileMs float64 `json:"whole_file_mean_ms"`
		UnlockedMs  float64 `json:"unlocked_ms"`
		LocalMs     float64 `json:"local_ms"`
	}
	var ps []jp
	for _, p := range r.Points {
		ps = append(ps, jp{p.Experiment, p.RowBytes, p.Writers, round(ms(meanOf(p.ByRow)), 1),
			round(ms(meanOf(p.WholeFile)), 1), round(ms(p.Unlocked), 1), round(ms(p.Local), 1)})
	}
	return json.Marshal(map[string]any{"workload": "locks", "points": ps})
}
