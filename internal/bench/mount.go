package bench

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// Phases of the mount workload (RunMountMeta), in run order.
const (
	MPhaseMkdir   = "mkdir"
	MPhaseCreate  = "create"
	MPhaseStat    = "stat"
	MPhaseWrite   = "write_4k"
	MPhaseRead    = "read_4k"
	MPhaseReaddir = "readdir"
	MPhaseRename  = "rename"
	MPhaseUnlink  = "unlink"
	MPhaseRmdir   = "rmdir"
)

// MountMetaPhases lists the mount workload's phases in run order.
var MountMetaPhases = []string{MPhaseMkdir, MPhaseCreate, MPhaseStat, MPhaseWrite, MPhaseRead,
	MPhaseReaddir, MPhaseRename, MPhaseUnlink, MPhaseRmdir}

// Layouts of the mount workload's files.
const (
	LayoutOwn    = "own"    // each worker in its own directory
	LayoutShared = "shared" // every worker in one directory
)

// Defaults of MountConfig.
const (
	DefaultMountProcs = 4
	DefaultMountFiles = 2000
	DefaultMountSize  = 1 << 30
	DefaultMountOps   = 4000
)

// Target names: where a workload ran.
const (
	TargetGovFS    = "govfs"
	TargetLocal    = "local"
	TargetLoopback = "loopback"
)

// MountTarget is a directory the mount workload runs in.
type MountTarget struct {
	Name string // TargetGovFS, TargetLocal or TargetLoopback
	Dir  string
}

// MountConfig configures RunMount.
type MountConfig struct {
	// Targets, first the GovFS mount; the others are the baselines.
	Targets []MountTarget
	// Procs is the number of parallel workers (default 4). They are
	// goroutines of this process, each locked to its own OS thread, so
	// that the kernel sees 4 threads issuing system calls at once (the
	// FUSE request path is the same as for 4 processes).
	Procs int
	// Files per worker (default 2000).
	Files int
	// Layouts to run: LayoutOwn and/or LayoutShared (default both).
	Layouts []string
	// Data runs the data workload after the metadata one.
	Data bool
	// Size of the data workload's file (default 1 GiB).
	Size int64
	// Ops of each random 4 KiB data phase, split over Procs (default 4000).
	Ops int
	// Cold drops the page cache before each read phase (root only).
	Cold bool
}

// MountReport is the result of RunMount.
type MountReport struct {
	Procs, Files int
	// Meta[layout][target] are the phases of one run of the workload.
	Meta map[string]map[string][]PhaseResult
	// Data[target] are the data phases (MB/s or IOPS in PhaseResult
	// terms: Ops and Elapsed; Bytes for sequential phases).
	Data    map[string][]DataResult
	Layouts []string
	Targets []string
	Size    int64
	Cache   string
}

// DataResult is one data phase on one target.
type DataResult struct {
	Name     string
	Bytes    int64 // sequential phases
	Ops      int   // random phases
	Elapsed  time.Duration
	P50, P99 time.Duration
}

// Rate is MB/s for sequential phases, IOPS for random ones.
func (d DataResult) Rate() float64 {
	if d.Elapsed <= 0 {
		return 0
	}
	if d.Bytes > 0 {
		return float64(d.Bytes) / (1 << 20) / d.Elapsed.Seconds()
	}
	return float64(d.Ops) / d.Elapsed.Seconds()
}

func (c *MountConfig) defaults() {
	if c.Procs <= 0 {
		c.Procs = DefaultMountProcs
	}
	if c.Files <= 0 {
		c.Files = DefaultMountFiles
	}
	if len(c.Layouts) == 0 {
		c.Layouts = []string{LayoutOwn, LayoutShared}
	}
	if c.Size <= 0 {
		c.Size = DefaultMountSize
	}
	if c.Ops <= 0 {
		c.Ops = DefaultMountOps
	}
}

// RunMount runs the metadata workload (and, with cfg.Data, the data
// workload) on every target, one after another, and prints a line per
// phase and target to out.
func RunMount(ctx context.Context, cfg MountConfig, out io.Writer) (*MountReport, error) {
	cfg.defaults()
	if len(cfg.Targets) == 0 {
		return nil, errors.New("bench mount: no targets")
	}
	rep := &MountReport{Procs: cfg.Procs, Files: cfg.Files, Meta: map[string]map[string][]PhaseResult{},
		Data: map[string][]DataResult{}, Layouts: cfg.Layouts, Size: cfg.Size, Cache: "warm"}
	if cfg.Cold {
		rep.Cache = "cold"
	}
	for _, tg := range cfg.Targets {
		rep.Targets = append(rep.Targets, tg.Name)
	}
	for _, layout := range cfg.Layouts {
		rep.Meta[layout] = map[string][]PhaseResult{}
		for _, tg := range cfg.Targets {
			settle()
			res, err := RunMountMeta(ctx, tg.Dir, layout, cfg.Procs, cfg.Files)
			if err != nil {
				return nil, fmt.Errorf("bench mount: %s, %s dirs: %w", tg.Name, layout, err)
			}
			rep.Meta[layout][tg.Name] = res
			for _, p := range res {
				fmt.Fprintf(out, "%-6s %-8s %s\n", layout, tg.Name, p)
			}
		}
		rep.printMetaRatios(out, layout)
	}
	if cfg.Data {
		for _, tg := range cfg.Targets {
			settle()
			res, err := RunMountData(ctx, tg.Dir, cfg)
			if err != nil {
				return nil, fmt.Errorf("bench mount: %s data: %w", tg.Name, err)
			}
			rep.Data[tg.Name] = res
			for _, d := range res {
				unit := "IOPS"
				if d.Bytes > 0 {
					unit = "MB/s"
				}
				fmt.Fprintf(out, "data   %-8s %-13s %s=%9.1f  p50=%v p99=%v\n", tg.Name, d.Name, unit, d.Rate(), d.P50, d.P99)
			}
		}
	}
	return rep, nil
}

// settle writes the machine's dirty pages back before a target's run,
// outside the timed phases, so that one target's leftovers do not land
// in the next one's: a peer that does not sync (MooseFS with chunk fsync
// 0, the local disk) left tens of MB to write back, and GovFS's phases
// right after it, whose commits fsync, ran 30-40 % slower (4 own mkdir
// 3,756/s after a MooseFS run, 5,750-6,311/s alone on the same cluster).
func settle() {
	syscall.Sync()
}

func (r *MountReport) printMetaRatios(out io.Writer, layout string) {
	g := r.Meta[layout][TargetGovFS]
	for i, p := range g {
		line := fmt.Sprintf("%-6s %-8s ops/s=%8.0f", layout, p.Name, p.OpsPerSec())
		for _, tg := range r.Targets[1:] {
			b := r.Meta[layout][tg]
			if i < len(b) && b[i].OpsPerSec() > 0 {
				line += fmt.Sprintf("  %s=%8.0f (govfs/%s %.3f)", tg, b[i].OpsPerSec(), tg, p.OpsPerSec()/b[i].OpsPerSec())
			}
		}
		fmt.Fprintln(out, line)
	}
}

// mountWorker is one worker's names in the metadata workload.
type mountWorker struct {
	dir    string // where its entries live
	prefix string // name prefix ("" in its own directory, "w<k>-" in a shared one)
}

func (w mountWorker) path(kind string, i int) string {
	return filepath.Join(w.dir, w.prefix+kind+strconv.Itoa(i))
}

// RunMountMeta runs the metadata phases in a new directory under dir:
// procs workers with files entries each, in their own directories
// (LayoutOwn) or all in one (LayoutShared). Phases, each timed over all
// workers: mkdir d<i>; create f<i> (O_CREAT|O_EXCL, close); stat f<i>
// (lstat); write_4k (open f<i> O_WRONLY, write 4 KiB, close); read_4k
// (open, read 4 KiB, close); readdir (each worker lists its directory
// with lstat of every entry, 3 times; one op is one listing); rename
// f<i> → g<i>; unlink g<i>; rmdir d<i>. The phases that change anything
// (all but stat, read_4k and readdir) end with an fsync of each worker's
// directory inside the timed window, so what they count is durable.
func RunMountMeta(ctx context.Context, dir, layout string, procs, files int) ([]PhaseResult, error) {
	var b [4]byte
	if _, err := crand.Read(b[:]); err != nil {
		return nil, err
	}
	top := filepath.Join(dir, "bench-mount-"+layout+"-"+hex.EncodeToString(b[:]))
	if err := os.Mkdir(top, 0o755); err != nil {
		return nil, err
	}
	defer os.RemoveAll(top)
	workers := make([]mountWorker, procs)
	for k := range workers {
		switch layout {
		case LayoutOwn:
			workers[k] = mountWorker{dir: filepath.Join(top, "w"+strconv.Itoa(k))}
			if err := os.Mkdir(workers[k].dir, 0o755); err != nil {
				return nil, err
			}
		case LayoutShared:
			workers[k] = mountWorker{dir: top, prefix: "w" + strconv.Itoa(k) + "-"}
		default:
			return nil, fmt.Errorf("unknown layout %q", layout)
		}
	}
	want := 2 * files // readdir: d<i> and f<i> of each worker
	if layout == LayoutShared {
		want *= procs
	}
	block := make([]byte, 4096)
	rand.New(rand.NewSource(1)).Read(block)
	ops := map[string]func(w mountWorker, rec *recorder){
		MPhaseMkdir: func(w mountWorker, rec *recorder) {
			for i := range files {
				rec.do(func() error { return os.Mkdir(w.path("d", i), 0o755) })
			}
		},
		MPhaseCreate: func(w mountWorker, rec *recorder) {
			for i := range files {
				rec.do(func() error {
					f, err := os.OpenFile(w.path("f", i), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
					if err != nil {
						return err
					}
					return f.Close()
				})
			}
		},
		MPhaseStat: func(w mountWorker, rec *recorder) {
			for i := range files {
				rec.do(func() error { _, err := os.Lstat(w.path("f", i)); return err })
			}
		},
		MPhaseWrite: func(w mountWorker, rec *recorder) {
			for i := range files {
				rec.do(func() error {
					f, err := os.OpenFile(w.path("f", i), os.O_WRONLY, 0)
					if err != nil {
						return err
					}
					if _, err := f.Write(block); err != nil {
						f.Close()
						return err
					}
					return f.Close()
				})
			}
		},
		MPhaseRead: func(w mountWorker, rec *recorder) {
			buf := make([]byte, len(block))
			for i := range files {
				rec.do(func() error {
					f, err := os.Open(w.path("f", i))
					if err != nil {
						return err
					}
					defer f.Close()
					if _, err := io.ReadFull(f, buf); err != nil {
						return err
					}
					if !bytes.Equal(buf, block) {
						return fmt.Errorf("%s: read back other bytes", w.path("f", i))
					}
					return nil
				})
			}
		},
		MPhaseReaddir: func(w mountWorker, rec *recorder) {
			for range 3 {
				rec.do(func() error {
					ents, err := os.ReadDir(w.dir)
					if err != nil {
						return err
					}
					for _, e := range ents {
						if _, err := e.Info(); err != nil {
							return err
						}
					}
					rec.entries += int64(len(ents))
					if len(ents) != want {
						return fmt.Errorf("readdir %s: %d entries, want %d", w.dir, len(ents), want)
					}
					return nil
				})
			}
		},
		MPhaseRename: func(w mountWorker, rec *recorder) {
			for i := range files {
				rec.do(func() error { return os.Rename(w.path("f", i), w.path("g", i)) })
			}
		},
		MPhaseUnlink: func(w mountWorker, rec *recorder) {
			for i := range files {
				rec.do(func() error { return syscall.Unlink(w.path("g", i)) })
			}
		},
		MPhaseRmdir: func(w mountWorker, rec *recorder) {
			for i := range files {
				rec.do(func() error { return syscall.Rmdir(w.path("d", i)) })
			}
		},
	}
	var out []PhaseResult
	for _, name := range MountMetaPhases {
		res := runThreads(ctx, name, procs, func(k int, rec *recorder) {
			ops[name](workers[k], rec)
			if changesNamespace[name] {
				// Inside the timed window: the phase's changes count once
				// they are durable. The mount answers creates, renames
				// and unlinks under a directory lease at once and sends
				// them later (docs/fuse.md, "Asynchronous creates"); the
				// fsync of the directory waits until they are committed,
				// as a local disk's journal or MooseFS's master has them.
				if err := fsyncDir(workers[k].dir); err != nil {
					rec.fail(err)
				}
			}
		})
		if res.Errors > 0 {
			return out, fmt.Errorf("%s: %d of %d operations failed; first: %w", name, res.Errors, res.Ops, res.FirstErr)
		}
		out = append(out, res)
	}
	return out, nil
}

// changesNamespace: the mount phases that end with an fsync of each
// worker's directory, timed.
var changesNamespace = map[string]bool{MPhaseMkdir: true, MPhaseCreate: true, MPhaseWrite: true,
	MPhaseRename: true, MPhaseUnlink: true, MPhaseRmdir: true}

func fsyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("fsync %s: %w", dir, err)
	}
	return nil
}

// runThreads runs fn for procs workers at once, each on its own locked
// OS thread, and merges their timings.
func runThreads(ctx context.Context, name string, procs int, fn func(k int, rec *recorder)) PhaseResult {
	recs := make([]recorder, procs)
	gate := make(chan struct{})
	var ready, wg sync.WaitGroup
	for k := range recs {
		recs[k].ctx = ctx
		ready.Add(1)
		wg.Go(func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			ready.Done()
			<-gate
			fn(k, &recs[k])
		})
	}
	ready.Wait()
	start := time.Now()
	close(gate)
	wg.Wait()
	return collect(name, time.Since(start), recs)
}

// RunMountData runs, in dir, with plain system calls (what fio's psync
// engine does): seq_write (one file of cfg.Size in 1 MiB writes, then
// fsync, both timed), seq_read (1 MiB reads), rand_read_4k (cfg.Ops
// preads of 4 KiB at random aligned offsets by cfg.Procs threads, each
// with its own descriptor) and rand_write_4k (the same with pwrite, then
// one fsync per thread, timed).
func RunMountData(ctx context.Context, dir string, cfg MountConfig) ([]DataResult, error) {
	cfg.defaults()
	f, err := os.CreateTemp(dir, "bench-mount-data-")
	if err != nil {
		return nil, err
	}
	path := f.Name()
	defer os.Remove(path)
	var out []DataResult
	buf := make([]byte, seqRequestBytes)
	start := time.Now()
	src := newPattern(cfg.Size)
	for {
		n, _ := io.ReadFull(src, buf)
		if n == 0 {
			break
		}
		if _, err := f.Write(buf[:n]); err != nil {
			f.Close()
			return nil, fmt.Errorf("seq_write: %w", err)
		}
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return nil, fmt.Errorf("seq_write: fsync: %w", err)
	}
	out = append(out, DataResult{Name: PhaseSeqWrite, Bytes: cfg.Size, Elapsed: time.Since(start)})
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("seq_write: close: %w", err)
	}
	if cfg.Cold {
		if err := DropCaches(); err != nil {
			return nil, err
		}
	}
	if f, err = os.Open(path); err != nil {
		return nil, err
	}
	start = time.Now()
	var n int64
	for {
		k, err := f.Read(buf)
		n += int64(k)
		if err == io.EOF || k == 0 {
			break
		}
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("seq_read: %w", err)
		}
	}
	f.Close()
	if n != cfg.Size {
		return nil, fmt.Errorf("seq_read: %d bytes of %d", n, cfg.Size)
	}
	out = append(out, DataResult{Name: PhaseSeqRead, Bytes: n, Elapsed: time.Since(start)})
	for _, name := range []string{PhaseRandRead, PhaseRandWrite} {
		if name == PhaseRandRead && cfg.Cold {
			if err := DropCaches(); err != nil {
				return nil, err
			}
		}
		d, err := randomSyscalls(ctx, name, path, cfg)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

func randomSyscalls(ctx context.Context, name, path string, cfg MountConfig) (DataResult, error) {
	write := name == PhaseRandWrite
	files := make([]*os.File, cfg.Procs)
	for k := range files {
		flag := os.O_RDONLY
		if write {
			flag = os.O_WRONLY
		}
		f, err := os.OpenFile(path, flag, 0)
		if err != nil {
			return DataResult{}, err
		}
		defer f.Close()
		files[k] = f
	}
	blocks := cfg.Size / randomBlock
	res := runThreads(ctx, name, cfg.Procs, func(k int, rec *recorder) {
		n := cfg.Ops / cfg.Procs
		if k < cfg.Ops%cfg.Procs {
			n++
		}
		r := rand.New(rand.NewSource(int64(k) + 1))
		b := make([]byte, randomBlock)
		r.Read(b)
		for range n {
			off := r.Int63n(blocks) * randomBlock
			rec.do(func() error {
				if write {
					_, err := files[k].WriteAt(b, off)
					return err
				}
				_, err := files[k].ReadAt(b, off)
				return err
			})
		}
		if write {
			// Durable at the end, as fio's end_fsync; not an op.
			if err := files[k].Sync(); err != nil && rec.firstErr == nil {
				rec.errs++
				rec.firstErr = err
			}
		}
	})
	if res.Errors > 0 {
		return DataResult{}, fmt.Errorf("%s: %w", name, res.FirstErr)
	}
	return DataResult{Name: name, Ops: res.Ops, Elapsed: res.Elapsed, P50: res.P50, P99: res.P99}, nil
}

// JSON is the report as one line:
//
//	{"workload":"mount","procs":4,"files_per_proc":2000,
//	 "meta":{"own":{"mkdir":{"ops_per_s":N,"p50_ms":N,"p99_ms":N,"local_ops_per_s":N,"loopback_ops_per_s":N,
//	   "ratio_local":N,"ratio_loopback":N},...},"shared":{...}},
//	 "data":{"seq_write":{"mb_per_s":N,"local_mb_per_s":N,"loopback_mb_per_s":N,...},
//	   "rand_read_4k":{"iops":N,"local_iops":N,...},...},"size_bytes":N,"cache":"warm"}
func (r *MountReport) JSON() ([]byte, error) {
	var b bytes.Buffer
	fmt.Fprintf(&b, `{"workload":"mount","procs":%d,"files_per_proc":%d,"meta":{`, r.Procs, r.Files)
	for li, layout := range r.Layouts {
		if li > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%q:{", layout)
		for i, p := range r.Meta[layout][TargetGovFS] {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `%q:{"ops_per_s":%v,"p50_ms":%v,"p99_ms":%v`, p.Name, round(p.OpsPerSec(), 1), round(ms(p.P50), 3), round(ms(p.P99), 3))
			for _, tg := range r.Targets[1:] {
				if bs := r.Meta[layout][tg]; i < len(bs) && bs[i].OpsPerSec() > 0 {
					fmt.Fprintf(&b, `,"%s_ops_per_s":%v,"ratio_%s":%v`, tg, round(bs[i].OpsPerSec(), 1), tg, round(p.OpsPerSec()/bs[i].OpsPerSec(), 4))
				}
			}
			b.WriteByte('}')
		}
		b.WriteByte('}')
	}
	b.WriteString(`},"data":{`)
	for i, d := range r.Data[TargetGovFS] {
		if i > 0 {
			b.WriteByte(',')
		}
		unit := "iops"
		if d.Bytes > 0 {
			unit = "mb_per_s"
		}
		fmt.Fprintf(&b, `%q:{%q:%v`, d.Name, unit, round(d.Rate(), 1))
		if d.Bytes == 0 {
			fmt.Fprintf(&b, `,"p50_us":%v,"p99_us":%v`, round(float64(d.P50)/1e3, 1), round(float64(d.P99)/1e3, 1))
		}
		for _, tg := range r.Targets[1:] {
			if bs := r.Data[tg]; i < len(bs) && bs[i].Rate() > 0 {
				fmt.Fprintf(&b, `,"%s_%s":%v,"ratio_%s":%v`, tg, unit, round(bs[i].Rate(), 1), tg, round(d.Rate()/bs[i].Rate(), 4))
			}
		}
		b.WriteByte('}')
	}
	fmt.Fprintf(&b, `},"size_bytes":%d,"cache":%q}`, r.Size, r.Cache)
	if !json.Valid(b.Bytes()) {
		return nil, errors.New("bench mount: built invalid JSON")
	}
	return b.Bytes(), nil
}

// Mounted is a mount the bench made: a `govfs mount` process or an
// in-process go-fuse loopback.
type Mounted struct {
	Dir  string
	stop func() error
}

// Unmount unmounts and stops serving.
func (m *Mounted) Unmount() error { return m.stop() }

// MountGovFS runs `bin mount --meta ADDRS --tls TLSDIR DIR` (a separate
// process, as a user would; --insecure when tlsDir is empty) on a new
// directory under parent and waits until it is mounted.
func MountGovFS(ctx context.Context, bin string, addrs []string, tlsDir, parent string, logTo io.Writer) (*Mounted, error) {
	dir, err := os.MkdirTemp(parent, "govfs-bench-mnt-")
	if err != nil {
		return nil, err
	}
	sec := []string{"--insecure"}
	if tlsDir != "" {
		sec = []string{"--tls", tlsDir}
	}
	cmd := exec.Command(bin, append(append([]string{"mount", "--meta", strings.Join(addrs, ",")}, sec...), dir)...)
	cmd.Stdout, cmd.Stderr = logTo, logTo
	// Its own session, as a FUSE daemon's (mfsmount's is): the kernel's
	// autogroup scheduling shares CPU between sessions, and the mount
	// would otherwise share one with the benchmark's load
	// (testcluster.procAttr).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		os.Remove(dir)
		return nil, err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop := func() error {
		err := unmount(dir)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		os.Remove(dir)
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	for !isMounted(dir) {
		select {
		case err := <-exited:
			os.Remove(dir)
			return nil, fmt.Errorf("govfs mount exited: %v", err)
		case <-ctx.Done():
			_ = stop()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = stop()
			return nil, errors.New("govfs mount: not mounted after 30 s")
		}
	}
	return &Mounted{Dir: dir, stop: stop}, nil
}

// MountLoopback mounts src with go-fuse's loopback file system (served
// by this process) on a new directory under parent, with the same 1 s
// entry and attribute timeouts as `govfs mount`.
func MountLoopback(src, parent string) (*Mounted, error) {
	dir, err := os.MkdirTemp(parent, "govfs-bench-loop-")
	if err != nil {
		return nil, err
	}
	root, err := fs.NewLoopbackRoot(src)
	if err != nil {
		return nil, err
	}
	sec := time.Second
	srv, err := fs.Mount(dir, root, &fs.Options{EntryTimeout: &sec, AttrTimeout: &sec,
		MountOptions: fuse.MountOptions{FsName: "loopback", Name: "loopback", DirectMount: os.Geteuid() == 0, MaxBackground: 64}})
	if err != nil {
		os.Remove(dir)
		return nil, fmt.Errorf("loopback mount: %w", err)
	}
	return &Mounted{Dir: dir, stop: func() error {
		err := srv.Unmount()
		srv.Wait()
		os.Remove(dir)
		return err
	}}, nil
}

// isMounted reports whether dir is a mount point (/proc/self/mountinfo).
func isMounted(dir string) bool {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == dir {
			return true
		}
	}
	return false
}

// unmount unmounts dir: umount2 as root, else fusermount3 -u.
func unmount(dir string) error {
	if os.Geteuid() == 0 {
		return syscall.Unmount(dir, 0)
	}
	out, err := exec.Command("fusermount3", "-u", dir).CombinedOutput()
	if err != nil {
		return fmt.Errorf("fusermount3 -u %s: %w: %s", dir, err, out)
	}
	return nil
}
