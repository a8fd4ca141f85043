package bench

// The move benchmark (issue 11): a populated subtree is assigned to a
// new ministry while clients create and stat inside it and elsewhere.
// It reports how long the move took, the longest single operation a
// client inside the subtree saw while it ran (the pause), and the
// throughput outside the subtree during the move against the same
// clients' throughput just before it, measured in the same run. Every
// operation counted is synchronous (committed before it returns), and
// afterwards every file, those created during the move included, is
// checked to be there.

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/govfs/govfs/client"
	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/wire"
)

// MoveConfig configures RunMove.
type MoveConfig struct {
	MetaAddrs []string
	// TLSDir is the client certificate directory ("" for an --insecure cluster).
	TLSDir string
	// Files in the subtree before the move, spread over Dirs directories.
	Files, Dirs int
	// Clients create and stat during the run, half inside the subtree
	// and half outside; Conns client connections are shared by them.
	Clients, Conns int
	// Window is how long the throughput before the move is measured.
	Window    time.Duration
	OpTimeout time.Duration
}

// Move benchmark defaults (the figures).
const (
	DefaultMoveFiles   = 100_000
	DefaultMoveDirs    = 100
	DefaultMoveClients = 16
)

// MoveReport is the move benchmark's result.
type MoveReport struct {
	Testbed
	Files   int    `json:"files"`
	Dirs    int    `json:"dirs"`
	Clients int    `json:"clients"`
	Dir     string `json:"dir"`
	// Seconds from the assign until the move was DONE.
	MoveSeconds float64 `json:"move_s"`
	Target      uint64  `json:"target_ministry"`
	// The longest create or stat of a client inside the subtree that
	// overlapped the move; refused: those that failed (a retryable
	// error after the client's bound).
	LongestPauseMs float64 `json:"longest_pause_ms"`
	InsideOps      int     `json:"inside_ops_during"`
	InsideRefused  int     `json:"inside_refused"`
	// Operations per second of the clients outside the subtree, in the
	// window before the move and while it ran.
	OutsideBefore float64 `json:"outside_ops_per_s_before"`
	OutsideDuring float64 `json:"outside_ops_per_s_during"`
	OutsideRatio  float64 `json:"outside_ratio"`
	OutsideFailed int     `json:"outside_failed"`
	// Files found afterwards (the populated ones and every create
	// acknowledged during the run).
	Verified int `json:"verified_files"`
}

// JSON is the report as one JSON line.
func (r *MoveReport) JSON() ([]byte, error) {
	return json.Marshal(struct {
		Workload string `json:"workload"`
		*MoveReport
	}{"move", r})
}

// moveOp is one timed operation of a load client.
type moveOp struct {
	start, end time.Time
	err        error
}

// RunMove runs the move benchmark against the cluster at cfg.MetaAddrs.
func RunMove(ctx context.Context, cfg MoveConfig, out io.Writer) (*MoveReport, error) {
	if len(cfg.MetaAddrs) == 0 {
		return nil, errors.New("bench move: no metadata node addresses")
	}
	if cfg.Files <= 0 || cfg.Dirs <= 0 || cfg.Clients < 2 {
		return nil, fmt.Errorf("bench move: --files %d and --dirs %d must be positive and --clients %d at least 2", cfg.Files, cfg.Dirs, cfg.Clients)
	}
	if cfg.Window <= 0 {
		cfg.Window = 5 * time.Second
	}
	cfg.Conns = max(1, min(cfg.Conns, cfg.Clients))
	r := &metaRun{cfg: MetaConfig{MetaAddrs: cfg.MetaAddrs, TLSDir: cfg.TLSDir, Conns: cfg.Conns, OpTimeout: cfg.OpTimeout}}
	defer r.closeClients()
	if err := r.connect(ctx); err != nil {
		return nil, err
	}
	cl := r.clients[0]
	var b [6]byte
	if _, err := crand.Read(b[:]); err != nil {
		return nil, err
	}
	top := "benchmove-" + hex.EncodeToString(b[:])
	rep := &MoveReport{Files: cfg.Files, Dirs: cfg.Dirs, Clients: cfg.Clients, Dir: "/" + top + "/tree"}
	topA, err := cl.MkdirAt(ctx, ids.RootIno, top, 0o755)
	if err != nil {
		return nil, fmt.Errorf("bench move: mkdir /%s: %w", top, err)
	}
	treeA, err := cl.MkdirAt(ctx, ids.Ino(topA.GetIno()), "tree", 0o755)
	if err != nil {
		return nil, err
	}
	outA, err := cl.MkdirAt(ctx, ids.Ino(topA.GetIno()), "out", 0o755)
	if err != nil {
		return nil, err
	}
	// Populate (untimed): Dirs directories, Files files round robin.
	dirs := make([]ids.Ino, cfg.Dirs)
	for i := range dirs {
		a, err := cl.MkdirAt(ctx, ids.Ino(treeA.GetIno()), "d"+strconv.Itoa(i), 0o755)
		if err != nil {
			return nil, err
		}
		dirs[i] = ids.Ino(a.GetIno())
	}
	fmt.Fprintf(out, "bench move: creating %d files in %d directories of %s\n", cfg.Files, cfg.Dirs, rep.Dir)
	var next atomic.Int64
	var perr error
	var pmu sync.Mutex
	var wg sync.WaitGroup
	for w := range cfg.Clients {
		wg.Go(func() {
			c := r.clients[w%len(r.clients)]
			for {
				i := int(next.Add(1)) - 1
				if i >= cfg.Files {
					return
				}
				if _, err := c.CreateAt(ctx, dirs[i%cfg.Dirs], "f"+strconv.Itoa(i), 0o644, true); err != nil {
					pmu.Lock()
					perr = errors.Join(perr, fmt.Errorf("populate f%d: %w", i, err))
					pmu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	if perr != nil {
		return nil, fmt.Errorf("bench move: %w", perr)
	}

	// Load: each client creates a file in its own directory and stats
	// it, again and again; clients 0..n/2-1 inside the subtree.
	inside := cfg.Clients / 2
	type loadClient struct {
		dir   ids.Ino
		ops   []moveOp
		names []string // acknowledged creates
	}
	lcs := make([]*loadClient, cfg.Clients)
	for k := range lcs {
		parent, name := ids.Ino(outA.GetIno()), "w"+strconv.Itoa(k)
		if k < inside {
			parent = ids.Ino(treeA.GetIno())
		}
		a, err := cl.MkdirAt(ctx, parent, name, 0o755)
		if err != nil {
			return nil, err
		}
		lcs[k] = &loadClient{dir: ids.Ino(a.GetIno())}
	}
	stop := make(chan struct{})
	for k, lc := range lcs {
		wg.Go(func() {
			c := r.clients[k%len(r.clients)]
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				name := "c" + strconv.Itoa(i)
				s := time.Now()
				a, err := c.CreateAt(ctx, lc.dir, name, 0o644, true)
				lc.ops = append(lc.ops, moveOp{s, time.Now(), err})
				if err != nil {
					continue
				}
				lc.names = append(lc.names, name)
				s = time.Now()
				_, err = c.GetAttr(ctx, ids.Ino(a.GetIno()))
				lc.ops = append(lc.ops, moveOp{s, time.Now(), err})
			}
		})
	}
	time.Sleep(time.Second) // warm up
	before0 := time.Now()
	time.Sleep(cfg.Window)
	before1 := time.Now()
	fmt.Fprintf(out, "bench move: assigning %s to a new ministry under load\n", rep.Dir)
	mv, aerr := cl.Assign(ctx, rep.Dir, client.AssignOptions{New: true})
	if aerr == nil && mv.GetState() != wire.MoveState_MOVE_DONE && mv.GetState() != wire.MoveState_MOVE_ABORTED {
		mv, aerr = cl.WaitMove(ctx, mv.GetId())
	}
	moved := time.Now()
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()
	if aerr != nil {
		return nil, fmt.Errorf("bench move: assign %s: %w", rep.Dir, aerr)
	}
	if mv.GetState() != wire.MoveState_MOVE_DONE {
		return nil, fmt.Errorf("bench move: the move of %s was aborted: %s", rep.Dir, mv.GetError())
	}
	rep.Target = mv.GetTarget()
	rep.MoveSeconds = round(moved.Sub(before1).Seconds(), 3)
	var outBefore, outDuring int
	var longest time.Duration
	for k, lc := range lcs {
		for _, op := range lc.ops {
			overlaps := op.end.After(before1) && op.start.Before(moved)
			if k < inside {
				if overlaps {
					rep.InsideOps++
					longest = max(longest, op.end.Sub(op.start))
					if op.err != nil {
						rep.InsideRefused++
					}
				}
				continue
			}
			if op.err != nil {
				rep.OutsideFailed++
				continue
			}
			switch {
			case !op.end.Before(before0) && op.end.Before(before1):
				outBefore++
			case !op.end.Before(before1) && op.end.Before(moved):
				outDuring++
			}
		}
	}
	rep.LongestPauseMs = round(ms(longest), 1)
	rep.OutsideBefore = round(float64(outBefore)/before1.Sub(before0).Seconds(), 1)
	rep.OutsideDuring = round(float64(outDuring)/moved.Sub(before1).Seconds(), 1)
	if rep.OutsideBefore > 0 {
		rep.OutsideRatio = round(rep.OutsideDuring/rep.OutsideBefore, 2)
	}

	// Everything is there, read through a fresh client (redirects).
	fresh := &metaRun{cfg: MetaConfig{MetaAddrs: cfg.MetaAddrs, TLSDir: cfg.TLSDir, Conns: 1, OpTimeout: cfg.OpTimeout}}
	defer fresh.closeClients()
	if err := fresh.connect(ctx); err != nil {
		return nil, err
	}
	fc := fresh.clients[0]
	count := func(dir ids.Ino) (map[string]bool, error) {
		ents, err := fc.ReaddirAll(ctx, dir)
		if err != nil {
			return nil, err
		}
		names := map[string]bool{}
		for _, e := range ents {
			names[string(e.GetName())] = true
		}
		return names, nil
	}
	for i, d := range dirs {
		names, err := count(d)
		if err != nil {
			return nil, fmt.Errorf("bench move: verify d%d: %w", i, err)
		}
		for f := i; f < cfg.Files; f += cfg.Dirs {
			if !names["f"+strconv.Itoa(f)] {
				return nil, fmt.Errorf("bench move: verify: d%d/f%d is missing after the move", i, f)
			}
			rep.Verified++
		}
	}
	for k, lc := range lcs {
		names, err := count(lc.dir)
		if err != nil {
			return nil, fmt.Errorf("bench move: verify w%d: %w", k, err)
		}
		for _, n := range lc.names {
			if !names[n] {
				return nil, fmt.Errorf("bench move: verify: w%d/%s was acknowledged but is missing", k, n)
			}
			rep.Verified++
		}
	}
	fmt.Fprintf(out, "move of %d files: %.2f s; longest pause inside %.0f ms (%d ops overlapped the move, %d refused); outside %.0f ops/s before, %.0f during (ratio %.2f, %d failed); %d files verified\n",
		cfg.Files, rep.MoveSeconds, rep.LongestPauseMs, rep.InsideOps, rep.InsideRefused, rep.OutsideBefore, rep.OutsideDuring, rep.OutsideRatio, rep.OutsideFailed, rep.Verified)
	return rep, nil
}
