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
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/govfs/govfs/client"
	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/wire"
)

// Phase names of the meta workload, in the order they run.
const (
	PhaseMkdir   = "mkdir"
	PhaseCreate  = "create"
	PhaseStat    = "stat"
	PhaseReaddir = "readdir"
	PhaseRename  = "rename"
	PhaseUnlink  = "unlink"
)

// MetaPhases lists every phase of the meta workload in run order.
var MetaPhases = []string{PhaseMkdir, PhaseCreate, PhaseStat, PhaseReaddir, PhaseRename, PhaseUnlink}

// Repetitions that lengthen the cheap read phases (see the package doc).
const (
	statPasses    = 4
	readdirPasses = 10
)

// Defaults for zero MetaConfig fields.
const (
	DefaultClients = 64
	DefaultFiles   = 500
	// DefaultConns is how many client.Client instances the workers share
	// (round-robin). Measured with 64 workers × 100 files on a local
	// 3-node cluster (2 CPUs): 64 Clients (one per worker) gave mkdir
	// 2264, create 1946, stat 10099 ops/s; 8 Clients 4074, 3260, 13704;
	// 1 Client 2889, 3045, 18015. Writes all go to the one group leader
	// whatever the count, and gRPC multiplexes streams over a connection,
	// so more Clients only add connections and per-Client state; 8 keeps
	// the best write figures and still spreads reads over the members
	// (each Client picks its preferred read member at random), which
	// matters on machines where the nodes do not share two cores.
	DefaultConns = 8
)

// MetaConfig configures RunMeta.
type MetaConfig struct {
	// MetaAddrs are host:port addresses of metadata nodes.
	MetaAddrs []string
	// TLSDir is the client certificate directory ("" for an --insecure cluster).
	TLSDir string
	// Clients is the number of parallel workers (default 64).
	Clients int
	// Files is the number of files (and directories) per worker
	// (default 500).
	Files int
	// Conns is the number of client.Client instances the workers share
	// round-robin (default DefaultConns, at most Clients).
	Conns int
	// Phases to run and report, any subset of MetaPhases; they always
	// run in MetaPhases order. Empty means all.
	Phases []string
	// Cleanup removes the bench tree at the end (best effort).
	Cleanup bool
	// OpTimeout is the clients' per-operation budget (client default when 0).
	OpTimeout time.Duration
	// Logger receives client debug logs; nil discards.
	Logger *slog.Logger
	// Ministries, when above 1, spreads the workers over that many
	// subtrees of the bench directory (s1 … sK): s1 stays with the root
	// ministry, each other one is assigned to a new ministry first
	// (untimed), as the thesis' experiments did with /1 … /n.
	Ministries int
}

// ParsePhases parses a comma-separated phase list; "" and "all" mean
// every phase.
func ParsePhases(s string) ([]string, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "all" {
		return slices.Clone(MetaPhases), nil
	}
	var out []string
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		if !slices.Contains(MetaPhases, p) {
			return nil, fmt.Errorf("unknown phase %q (want some of %s, or all)", p, strings.Join(MetaPhases, ","))
		}
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no phases given")
	}
	return out, nil
}

// PhaseResult is the outcome of one phase.
type PhaseResult struct {
	Name    string
	Ops     int
	Errors  int
	Elapsed time.Duration
	P50     time.Duration
	P99     time.Duration
	// Entries is the number of directory entries listed (readdir only).
	Entries int64
	// FirstErr is the first failure seen, if any.
	FirstErr error
	// SubtreeDone is, with several ministries, when each subtree's last
	// worker finished (s1 first), counted from the phase's start: the
	// phase ends with the slowest.
	SubtreeDone []time.Duration
}

// OpsPerSec is the phase's throughput over its wall time.
func (p PhaseResult) OpsPerSec() float64 {
	if p.Elapsed <= 0 {
		return 0
	}
	return float64(p.Ops) / p.Elapsed.Seconds()
}

// EntriesPerSec is the readdir phase's entry throughput.
func (p PhaseResult) EntriesPerSec() float64 {
	if p.Elapsed <= 0 {
		return 0
	}
	return float64(p.Entries) / p.Elapsed.Seconds()
}

// String is the human line for the phase.
func (p PhaseResult) String() string {
	s := fmt.Sprintf("%-8s ops/s=%7.0f  p50=%.2fms  p99=%.2fms  (%d ops, %.2f s)",
		p.Name, p.OpsPerSec(), ms(p.P50), ms(p.P99), p.Ops, p.Elapsed.Seconds())
	if p.Name == PhaseReaddir {
		s += fmt.Sprintf("  entries/s=%.0f", p.EntriesPerSec())
	}
	if len(p.SubtreeDone) > 0 {
		parts := make([]string, len(p.SubtreeDone))
		for i, d := range p.SubtreeDone {
			parts[i] = fmt.Sprintf("%.2f", d.Seconds())
		}
		s += "  subtrees done at " + strings.Join(parts, "/") + " s"
	}
	if p.Errors > 0 {
		s += fmt.Sprintf("  ERRORS=%d", p.Errors)
	}
	return s
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// MetaReport is the result of RunMeta.
type MetaReport struct {
	Testbed
	// Phases are the timed phases in run order.
	Phases []PhaseResult
	// MeanEntriesPerAppend is the largest mean number of entries per raft
	// append message over the members (the leader's figure: followers
	// send few appends).
	MeanEntriesPerAppend float64
	Clients              int
	FilesPerClient       int
	// Dir is the bench tree's path.
	Dir string
	// Ministries the workers were spread over.
	Ministries int
	// Local holds the same phases run against a local directory in the
	// same run (see RunLocalMeta); empty when not measured.
	Local []PhaseResult
}

// localOps returns the local baseline's ops/s of a phase (0 if absent).
func (r *MetaReport) localOps(name string) float64 {
	for _, p := range r.Local {
		if p.Name == name {
			return p.OpsPerSec()
		}
	}
	return 0
}

// Compare is the human line comparing a phase with the local baseline.
func (r *MetaReport) Compare(p PhaseResult) string {
	l := r.localOps(p.Name)
	if l == 0 {
		return ""
	}
	return fmt.Sprintf("%-8s local ops/s=%8.0f  govfs/local=%.3f", p.Name, l, p.OpsPerSec()/l)
}

// Phase returns the named phase's result.
func (r *MetaReport) Phase(name string) (PhaseResult, bool) {
	for _, p := range r.Phases {
		if p.Name == name {
			return p, true
		}
	}
	return PhaseResult{}, false
}

// JSON is the report as one line of JSON (no trailing newline):
// {"workload":"meta","phases":{"create":{"ops_per_s":N,"p50_ms":N,"p99_ms":N},...},
// "mean_entries_per_append":N,"clients":P,"files_per_client":N},
// with phases in run order.
func (r *MetaReport) JSON() ([]byte, error) {
	return json.Marshal(jsonReport{
		Workload:             "meta",
		Phases:               orderedPhases{phases: r.Phases, report: r},
		MeanEntriesPerAppend: round(r.MeanEntriesPerAppend, 2),
		Clients:              r.Clients,
		FilesPerClient:       r.FilesPerClient,
		Ministries:           max(r.Ministries, 1),
		Testbed:              r.Testbed,
	})
}

type jsonReport struct {
	Workload string `json:"workload"`
	Testbed
	Phases               orderedPhases `json:"phases"`
	MeanEntriesPerAppend float64       `json:"mean_entries_per_append"`
	Clients              int           `json:"clients"`
	FilesPerClient       int           `json:"files_per_client"`
	Ministries           int           `json:"ministries"`
}

type jsonPhase struct {
	OpsPerSec float64 `json:"ops_per_s"`
	P50ms     float64 `json:"p50_ms"`
	P99ms     float64 `json:"p99_ms"`
	// The local-directory baseline of the same run, when measured.
	LocalOpsPerSec float64 `json:"local_ops_per_s,omitempty"`
	Ratio          float64 `json:"ratio,omitempty"`
	// SubtreeDoneS: PhaseResult.SubtreeDone in seconds.
	SubtreeDoneS []float64 `json:"subtree_done_s,omitempty"`
}

// orderedPhases marshals as an object whose keys keep run order.
type orderedPhases struct {
	phases []PhaseResult
	report *MetaReport
}

func (o orderedPhases) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, p := range o.phases {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(p.Name)
		jp := jsonPhase{
			OpsPerSec: round(p.OpsPerSec(), 1),
			P50ms:     round(ms(p.P50), 3),
			P99ms:     round(ms(p.P99), 3),
		}
		for _, d := range p.SubtreeDone {
			jp.SubtreeDoneS = append(jp.SubtreeDoneS, round(d.Seconds(), 3))
		}
		if l := o.report.localOps(p.Name); l > 0 {
			jp.LocalOpsPerSec = round(l, 1)
			jp.Ratio = round(p.OpsPerSec()/l, 4)
		}
		v, err := json.Marshal(jp)
		if err != nil {
			return nil, err
		}
		b.Write(k)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

func round(x float64, digits int) float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return 0
	}
	p := math.Pow(10, float64(digits))
	return math.Round(x*p) / p
}

// Percentile returns the nearest-rank p-th percentile (0 < p <= 100) of
// sorted, or 0 when it is empty.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	i := int(math.Ceil(p/100*float64(n))) - 1
	return sorted[max(0, min(i, n-1))]
}

// worker is one parallel actor with its own directory.
type worker struct {
	k      int
	cl     *client.Client
	dir    ids.Ino
	parent ids.Ino // the top directory, or its subtree s<i>
	name   string  // its directory's name under parent

	files      []ids.Ino // inode of file i (0: not created)
	filePrefix string    // current name prefix of the files: "f" or "g"
	dirs       bool      // d<i> exist
}

func (w *worker) fileName(i int) string { return w.filePrefix + strconv.Itoa(i) }

// recorder times one worker's operations in one phase.
type recorder struct {
	ctx      context.Context
	lat      []time.Duration
	errs     int
	firstErr error
	entries  int64
}

func (r *recorder) do(op func() error) {
	if err := r.ctx.Err(); err != nil {
		// Cancelled: skip the rest of the phase, failing it once.
		if r.firstErr == nil {
			r.errs++
			r.firstErr = err
		}
		return
	}
	start := time.Now()
	err := op()
	r.lat = append(r.lat, time.Since(start))
	if err != nil {
		r.errs++
		if r.firstErr == nil {
			r.firstErr = err
		}
	}
}

// fail records an error of the phase that is not one of its timed
// operations.
func (r *recorder) fail(err error) {
	r.errs++
	if r.firstErr == nil {
		r.firstErr = err
	}
}

type metaRun struct {
	cfg     MetaConfig
	clients []*client.Client
	workers []*worker
	top     ids.Ino
	topName string
	// ministries created for the run (Ministries > 1)
	ministries []uint64
}

// RunMeta runs the meta workload against the cluster at cfg.MetaAddrs,
// writes one human line per phase and the raft batching figure to out,
// and returns the report. It fails if any operation failed.
func RunMeta(ctx context.Context, cfg MetaConfig, out io.Writer) (*MetaReport, error) {
	if len(cfg.MetaAddrs) == 0 {
		return nil, errors.New("bench: no metadata node addresses")
	}
	if cfg.Clients <= 0 {
		cfg.Clients = DefaultClients
	}
	if cfg.Files <= 0 {
		cfg.Files = DefaultFiles
	}
	if cfg.Conns <= 0 {
		cfg.Conns = DefaultConns
	}
	cfg.Conns = min(cfg.Conns, cfg.Clients)
	if len(cfg.Phases) == 0 {
		cfg.Phases = MetaPhases
	}
	for _, p := range cfg.Phases {
		if !slices.Contains(MetaPhases, p) {
			return nil, fmt.Errorf("bench: unknown phase %q", p)
		}
	}
	r := &metaRun{cfg: cfg}
	defer r.closeClients()
	if err := r.connect(ctx); err != nil {
		return nil, err
	}
	if err := r.setup(ctx); err != nil {
		return nil, err
	}
	rep := &MetaReport{Clients: cfg.Clients, FilesPerClient: cfg.Files, Dir: "/" + r.topName, Ministries: cfg.Ministries}
	runErr := r.runPhases(ctx, rep, out)
	if runErr == nil {
		rep.MeanEntriesPerAppend, runErr = r.meanEntriesPerAppend(ctx)
		if runErr == nil {
			fmt.Fprintf(out, "mean entries per raft append: %.2f (max over members)\n", rep.MeanEntriesPerAppend)
		}
	}
	if cfg.Cleanup {
		// Best effort, with a fresh deadline so that a cancelled run
		// still tidies up.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		if err := r.cleanup(cctx); err != nil {
			fmt.Fprintf(out, "warning: could not remove %s: %v\n", rep.Dir, err)
		}
		cancel()
	}
	if runErr != nil {
		return rep, runErr
	}
	return rep, nil
}

func (r *metaRun) connect(ctx context.Context) error {
	r.clients = make([]*client.Client, r.cfg.Conns)
	errs := make([]error, r.cfg.Conns)
	var wg sync.WaitGroup
	for i := range r.clients {
		wg.Go(func() {
			ccfg := client.DefaultConfig()
			ccfg.MetaAddrs = r.cfg.MetaAddrs
			ccfg.TLSDir = r.cfg.TLSDir
			if r.cfg.OpTimeout > 0 {
				ccfg.OpTimeout = r.cfg.OpTimeout
				ccfg.CallTimeout = min(ccfg.CallTimeout, r.cfg.OpTimeout)
			}
			if r.cfg.Logger != nil {
				ccfg.Logger = r.cfg.Logger
			}
			r.clients[i], errs[i] = client.New(ctx, ccfg)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	return nil
}

func (r *metaRun) closeClients() {
	for _, c := range r.clients {
		if c != nil {
			c.Close()
		}
	}
}

// setup makes the top directory and one directory per worker (untimed).
func (r *metaRun) setup(ctx context.Context) error {
	var b [6]byte
	if _, err := crand.Read(b[:]); err != nil {
		return err
	}
	r.topName = "bench-" + hex.EncodeToString(b[:])
	a, err := r.clients[0].MkdirAt(ctx, ids.RootIno, r.topName, 0o755)
	if err != nil {
		return fmt.Errorf("bench: mkdir /%s: %w", r.topName, err)
	}
	r.top = ids.Ino(a.GetIno())
	// The subtrees the workers are spread over.
	subs := []ids.Ino{r.top}
	if k := r.cfg.Ministries; k > 1 {
		subs = subs[:0]
		for i := 1; i <= k; i++ {
			name := "s" + strconv.Itoa(i)
			a, err := r.clients[0].MkdirAt(ctx, r.top, name, 0o755)
			if err != nil {
				return fmt.Errorf("bench: mkdir /%s/%s: %w", r.topName, name, err)
			}
			subs = append(subs, ids.Ino(a.GetIno()))
			if i == 1 {
				continue
			}
			path := "/" + r.topName + "/" + name
			mv, err := r.clients[0].Assign(ctx, path, client.AssignOptions{New: true})
			if err != nil {
				return fmt.Errorf("bench: assign %s to a new ministry: %w", path, err)
			}
			if mv.GetState() != wire.MoveState_MOVE_DONE {
				return fmt.Errorf("bench: assign %s: move %d ended %v: %s", path, mv.GetId(), mv.GetState(), mv.GetError())
			}
			r.ministries = append(r.ministries, mv.GetTarget())
		}
	}
	r.workers = make([]*worker, r.cfg.Clients)
	for k := range r.workers {
		r.workers[k] = &worker{
			k: k, cl: r.clients[k%len(r.clients)], name: "w" + strconv.Itoa(k),
			files: make([]ids.Ino, r.cfg.Files), filePrefix: "f",
		}
	}
	errs := make([]error, len(r.workers))
	var wg sync.WaitGroup
	for k, w := range r.workers {
		wg.Go(func() {
			w.parent = subs[k%len(subs)]
			a, err := w.cl.MkdirAt(ctx, w.parent, w.name, 0o755)
			if err != nil {
				errs[k] = fmt.Errorf("bench: mkdir /%s/%s: %w", r.topName, w.name, err)
				return
			}
			w.dir = ids.Ino(a.GetIno())
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

type phaseFunc func(ctx context.Context, w *worker, rec *recorder)

func (r *metaRun) phaseFunc(name string) phaseFunc {
	switch name {
	case PhaseMkdir:
		return r.mkdir
	case PhaseCreate:
		return r.create
	case PhaseStat:
		return r.stat
	case PhaseReaddir:
		return r.readdir
	case PhaseRename:
		return r.rename
	case PhaseUnlink:
		return r.unlink
	}
	panic("bench: unknown phase " + name)
}

func (r *metaRun) runPhases(ctx context.Context, rep *MetaReport, out io.Writer) error {
	want := func(p string) bool { return slices.Contains(r.cfg.Phases, p) }
	needFiles := want(PhaseStat) || want(PhaseReaddir) || want(PhaseRename) || want(PhaseUnlink)
	for _, name := range MetaPhases {
		timed := want(name)
		if !timed && !(name == PhaseCreate && needFiles) {
			continue
		}
		res := r.runPhase(ctx, name, r.phaseFunc(name))
		if timed {
			rep.Phases = append(rep.Phases, res)
			fmt.Fprintln(out, res.String())
		}
		if res.Errors > 0 {
			what := "phase"
			if !timed {
				what = "setup phase"
			}
			return fmt.Errorf("bench: %s %s: %d of %d operations failed; first: %w", what, name, res.Errors, res.Ops, res.FirstErr)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	return nil
}

// runPhase runs fn on every worker in parallel and merges their timings.
func (r *metaRun) runPhase(ctx context.Context, name string, fn phaseFunc) PhaseResult {
	recs := make([]recorder, len(r.workers))
	done := make([]time.Duration, len(r.workers))
	startGate := make(chan struct{})
	var start time.Time
	var wg sync.WaitGroup
	for k, w := range r.workers {
		recs[k].ctx = ctx
		recs[k].lat = make([]time.Duration, 0, 2*statPasses*r.cfg.Files)
		wg.Go(func() {
			<-startGate
			fn(ctx, w, &recs[k])
			done[k] = time.Since(start)
		})
	}
	start = time.Now()
	close(startGate)
	wg.Wait()
	res := collect(name, time.Since(start), recs)
	if k := r.cfg.Ministries; k > 1 {
		// Workers are spread over the subtrees round robin (setup).
		res.SubtreeDone = make([]time.Duration, k)
		for i, d := range done {
			res.SubtreeDone[i%k] = max(res.SubtreeDone[i%k], d)
		}
	}
	return res
}

// collect sums the workers' records of one phase.
func collect(name string, elapsed time.Duration, recs []recorder) PhaseResult {
	res := PhaseResult{Name: name, Elapsed: elapsed}
	var all []time.Duration
	for k := range recs {
		rc := &recs[k]
		all = append(all, rc.lat...)
		res.Errors += rc.errs
		res.Entries += rc.entries
		if res.FirstErr == nil && rc.firstErr != nil {
			res.FirstErr = rc.firstErr
		}
	}
	slices.Sort(all)
	res.Ops = len(all)
	res.P50, res.P99 = Percentile(all, 50), Percentile(all, 99)
	return res
}

func (r *metaRun) mkdir(ctx context.Context, w *worker, rec *recorder) {
	for i := range r.cfg.Files {
		rec.do(func() error {
			_, err := w.cl.MkdirAt(ctx, w.dir, "d"+strconv.Itoa(i), 0o755)
			return err
		})
	}
	w.dirs = true
}

func (r *metaRun) create(ctx context.Context, w *worker, rec *recorder) {
	for i := range w.files {
		rec.do(func() error {
			a, err := w.cl.CreateAt(ctx, w.dir, w.fileName(i), 0o644, true)
			if err == nil {
				w.files[i] = ids.Ino(a.GetIno())
			}
			return err
		})
	}
}

func (r *metaRun) stat(ctx context.Context, w *worker, rec *recorder) {
	for range statPasses {
		for _, ino := range w.files {
			rec.do(func() error {
				a, err := w.cl.GetAttr(ctx, ino)
				if err == nil && a.GetType() != wire.FileType_REGULAR {
					err = fmt.Errorf("stat ino %d: type %v, want a regular file", ino, a.GetType())
				}
				return err
			})
		}
	}
}

func (r *metaRun) readdir(ctx context.Context, w *worker, rec *recorder) {
	want := len(w.files)
	if w.dirs {
		want += r.cfg.Files
	}
	for range readdirPasses {
		rec.do(func() error {
			ents, err := w.cl.ReaddirAll(ctx, w.dir)
			if err != nil {
				return err
			}
			rec.entries += int64(len(ents))
			if len(ents) != want {
				return fmt.Errorf("readdir /%s/%s: %d entries, want %d", r.topName, w.name, len(ents), want)
			}
			return nil
		})
	}
}

func (r *metaRun) rename(ctx context.Context, w *worker, rec *recorder) {
	for i := range w.files {
		rec.do(func() error {
			return w.cl.RenameAt(ctx, w.dir, "f"+strconv.Itoa(i), w.dir, "g"+strconv.Itoa(i), 0)
		})
	}
	w.filePrefix = "g"
}

func (r *metaRun) unlink(ctx context.Context, w *worker, rec *recorder) {
	for i := range w.files {
		rec.do(func() error { return w.cl.UnlinkAt(ctx, w.dir, w.fileName(i)) })
		w.files[i] = 0
	}
	if w.dirs {
		for i := range r.cfg.Files {
			rec.do(func() error { return w.cl.RmdirAt(ctx, w.dir, "d"+strconv.Itoa(i)) })
		}
		w.dirs = false
	}
}

// meanEntriesPerAppend asks every member for its status and returns the
// largest mean entries per append.
func (r *metaRun) meanEntriesPerAppend(ctx context.Context) (float64, error) {
	cl := r.clients[0]
	members := cl.Members()
	if len(members) == 0 {
		return 0, errors.New("bench: the cluster reported no members")
	}
	best := 0.0
	var errs []error
	for _, m := range members {
		st, err := cl.Status(ctx, m.GetAddr())
		if err != nil {
			errs = append(errs, err)
			continue
		}
		best = max(best, st.GetMeanEntriesPerAppend())
	}
	if len(errs) == len(members) {
		return 0, fmt.Errorf("bench: status: %w", errors.Join(errs...))
	}
	return best, nil
}

// cleanup removes the bench tree, worker directories in parallel.
func (r *metaRun) cleanup(ctx context.Context) error {
	if r.top == 0 {
		return nil
	}
	errs := make([]error, len(r.workers))
	var wg sync.WaitGroup
	for k, w := range r.workers {
		if w.dir == 0 {
			continue
		}
		wg.Go(func() { errs[k] = removeTree(ctx, w.cl, w.parent, w.name, w.dir) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	// Subtrees given to ministries for the run go back to the root
	// ministry (now that they are empty) before they are removed.
	for i := range r.ministries {
		path := fmt.Sprintf("/%s/s%d", r.topName, i+2)
		if _, err := r.clients[0].Unassign(ctx, path); err != nil {
			return fmt.Errorf("give %s back: %w", path, err)
		}
	}
	return removeTree(ctx, r.clients[0], ids.RootIno, r.topName, r.top)
}

// removeTree removes directory name (inode ino) in parent with all it
// holds, depth first. Listings are linearizable: with session reads a
// Client may list entries that another Client already removed. Entries
// that are already gone are fine.
func removeTree(ctx context.Context, cl *client.Client, parent ids.Ino, name string, ino ids.Ino) error {
	ents, err := cl.ReaddirAll(ctx, ino, client.Linearizable())
	if err != nil {
		return ignoreENOENT(err)
	}
	for _, e := range ents {
		n := string(e.GetName())
		if e.GetType() == wire.FileType_DIRECTORY {
			err = removeTree(ctx, cl, ino, n, ids.Ino(e.GetIno()))
		} else {
			err = cl.UnlinkAt(ctx, ino, n)
		}
		if err = ignoreENOENT(err); err != nil {
			return err
		}
	}
	return ignoreENOENT(cl.RmdirAt(ctx, parent, name))
}

func ignoreENOENT(err error) error {
	if errors.Is(err, syscall.ENOENT) {
		return nil
	}
	return err
}
