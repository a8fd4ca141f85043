package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/govfs/govfs/internal/bench"
	"github.com/govfs/govfs/internal/testcluster"
)

const benchUsage = `Usage: govfs bench <workload> [flags]

Workloads:
  meta   metadata operations: mkdir, create, stat, readdir, rename, unlink
  data   sequential write and read of a large file, then random 4 KiB reads
         and writes of it by several clients, each against a local file
  mount  through a FUSE mount: metadata phases by 4 threads x 2,000 files
         (own and shared directories) and data phases, each against a local
         directory, a go-fuse loopback mount of one and any directory
         named with --other (another file system's mount)
  locks  the thesis' ranged-lock experiment: writers of one 10-row file
         locking the row they write or the whole file, with real I/O
  move   assign a populated subtree (100,000 files) to a new ministry while
         clients create and stat in it and elsewhere: time to move, the
         longest pause inside, throughput outside during vs before
  ls     the thesis' list-directory experiment: 30 clients, 60,000 listings
         of 10-file directories over K = 1..5 ministries, batch and stride
         order: latency percentiles, share redirected, p99 vs K=1

Run 'govfs bench <workload> -h' for its flags.`

// runBench implements `govfs bench`.
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintln(stderr, benchUsage)
		return errors.New("govfs bench: missing workload")
	}
	switch args[0] {
	case "meta":
		return benchMeta(ctx, args[1:], stdout, stderr)
	case "data":
		return benchData(ctx, args[1:], stdout, stderr)
	case "mount":
		return benchMount(ctx, args[1:], stdout, stderr)
	case "locks":
		return benchLocks(ctx, args[1:], stdout, stderr)
	case "move":
		return benchMove(ctx, args[1:], stdout, stderr)
	case "ls":
		return benchLs(ctx, args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprintln(stdout, benchUsage)
		return nil
	default:
		fmt.Fprintln(stderr, benchUsage)
		return fmt.Errorf("govfs bench: unknown workload %q", args[0])
	}
}

// benchMetaArgs is a parsed `govfs bench meta` command line.
type benchMetaArgs struct {
	meta     []string // empty: start a local cluster
	clients  int
	files    int
	conns    int
	phases   []string
	jsonOnly bool
	timeout  time.Duration
	baseline bool     // also run the local-directory baseline
	localDir string   // where the baseline runs ("" = the temp dir)
	cpuProf  string   // write the bench process's CPU profile here
	nodeArgs []string // extra `govfs meta` flags for a local cluster
	// ministries spreads the workers over that many ministries; the
	// local cluster has metaNodes metadata nodes, each capped at nodeCPU
	// of a core when positive (the testbed).
	ministries []int64
	metaNodes  int
	nodeCPU    float64
	sec        benchSec
	// compareInsecure also runs the first K on a plaintext local cluster
	// and reports TLS / plaintext per phase.
	compareInsecure bool
	// bothOrders runs the --ministries list forward, then backward, and
	// compares the means of each K's runs (ministryRatios).
	bothOrders bool
}

func parseBenchMeta(args []string, stderr io.Writer) (*benchMetaArgs, error) {
	f := flag.NewFlagSet("govfs bench meta", flag.ContinueOnError)
	f.SetOutput(stderr)
	meta := f.String("meta", "", "comma-separated metadata node addresses (default: start a local 3-node cluster in a temporary directory)")
	clients := f.Int("clients", bench.DefaultClients, "parallel workers")
	files := f.Int("files", bench.DefaultFiles, "files (and directories) per worker")
	conns := f.Int("conns", bench.DefaultConns, "client connections shared by the workers (at most --clients)")
	phases := f.String("phases", "all", "comma-separated phases to run: "+strings.Join(bench.MetaPhases, ",")+" or all")
	jsonOnly := f.Bool("json-only", false, "print only the JSON result line")
	timeout := f.Duration("timeout", 30*time.Second, "give up on a single operation after this long")
	baseline := f.Bool("baseline", true, "also run the same phases on a local directory and report the ratios")
	localDir := f.String("local-dir", "", "directory for the local baseline (default: the system temp dir)")
	cpuProf := f.String("cpuprofile", "", "write a CPU profile of the bench client process to this file")
	nodeArgs := f.String("node-args", "", "extra flags for the nodes of the local cluster, space-separated (e.g. \"--batch-delay 0\")")
	ministries := f.String("ministries", "1", "spread the workers over K ministries: subtrees s1..sK of the bench directory, s2..sK assigned to new ministries first; a list (1,5) runs each K in turn, on a fresh local cluster each, and compares them with the first (a K listed twice: the mean of its runs)")
	metaNodes := f.Int("meta-nodes", 3, "metadata nodes of the local cluster (the first 3 form it, the others join)")
	nodeCPU := f.Float64("node-cpu", 0, "cap each metadata node of the local cluster at this fraction of one core, each in its own cgroup (the scale-out testbed; 0: no cap)")
	var sec benchSec
	sec.register(f)
	bothOrders := f.Bool("both-orders", false, "run the --ministries list forward and then backward (1,5 runs 1,5,5,1), each on a fresh local cluster, and compare the means of each K's runs: a run after another can be slower or faster for reasons of the machine's, not of K")
	compare := f.Bool("compare-insecure", false, "also run the first --ministries K on plaintext local clusters and report TLS / plaintext per phase (the cost of security; 4 runs: TLS, plaintext, plaintext, TLS)")
	if err := f.Parse(args); err != nil {
		return nil, err
	}
	if f.NArg() > 0 {
		return nil, fmt.Errorf("govfs bench meta: unexpected arguments %q", f.Args())
	}
	a := &benchMetaArgs{clients: *clients, files: *files, conns: *conns, jsonOnly: *jsonOnly, timeout: *timeout,
		baseline: *baseline, localDir: *localDir, cpuProf: *cpuProf, nodeArgs: strings.Fields(*nodeArgs),
		metaNodes: *metaNodes, nodeCPU: *nodeCPU, sec: sec, compareInsecure: *compare, bothOrders: *bothOrders}
	var err error
	if a.ministries, err = parseInts(*ministries, "--ministries"); err != nil {
		return nil, fmt.Errorf("govfs bench meta: %w", err)
	}
	if len(a.ministries) == 0 {
		return nil, errors.New("govfs bench meta: --ministries is empty: give K, or a list such as 1,5")
	}
	if a.bothOrders && len(a.ministries) < 2 {
		return nil, fmt.Errorf("govfs bench meta: --both-orders needs a list of at least two K in --ministries (such as 1,5), not %q", *ministries)
	}
	for _, k := range a.ministries {
		if k < 1 || k > 64 {
			return nil, fmt.Errorf("govfs bench meta: --ministries %d: give 1 to 64", k)
		}
		if k > 1 && a.metaNodes < 3 {
			return nil, fmt.Errorf("govfs bench meta: --ministries %d needs at least 3 metadata nodes (a new ministry has 3 replicas)", k)
		}
	}
	switch {
	case a.metaNodes < 1 || a.metaNodes > 64:
		return nil, fmt.Errorf("govfs bench meta: --meta-nodes %d: give 1 to 64", a.metaNodes)
	case a.nodeCPU < 0:
		return nil, fmt.Errorf("govfs bench meta: --node-cpu %v must not be negative", a.nodeCPU)
	}
	for _, s := range strings.Split(*meta, ",") {
		if s = strings.TrimSpace(s); s != "" {
			a.meta = append(a.meta, s)
		}
	}
	if a.compareInsecure && (len(a.meta) > 0 || a.sec.insecure) {
		return nil, errors.New("govfs bench meta: --compare-insecure runs local clusters with and without TLS; leave out --meta and --insecure")
	}
	if a.clients <= 0 || a.files <= 0 || a.conns <= 0 {
		return nil, errors.New("govfs bench meta: --clients, --files and --conns must be positive")
	}
	if a.timeout <= 0 {
		return nil, fmt.Errorf("govfs bench meta: --timeout %v must be positive", a.timeout)
	}
	if a.phases, err = bench.ParsePhases(*phases); err != nil {
		return nil, fmt.Errorf("govfs bench meta: --phases: %w", err)
	}
	return a, nil
}

func benchMeta(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	a, err := parseBenchMeta(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if a.cpuProf != "" {
		f, err := os.Create(a.cpuProf)
		if err != nil {
			return fmt.Errorf("bench meta: --cpuprofile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("bench meta: --cpuprofile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	human := stdout
	if a.jsonOnly {
		human = io.Discard
	}
	order := a.ministries
	if a.bothOrders {
		order = slices.Clone(order)
		for _, k := range slices.Backward(a.ministries) {
			order = append(order, k)
		}
	}
	var reps []*bench.MetaReport
	for _, k := range order {
		rep, err := benchMetaOnce(ctx, a, int(k), a.sec.insecure, stdout, stderr, human)
		if err != nil {
			return err
		}
		reps = append(reps, rep)
	}
	kReps := reps // the --ministries runs, before --compare-insecure's
	if a.compareInsecure {
		// TLS, plaintext, plaintext, TLS: each mode once early and once
		// late, so a machine that slows down (or warms up) during the
		// run does not pass for the cost of TLS (a TLS-then-plaintext
		// pair measured 1.25 one way round and 0.93 the other).
		k := int(a.ministries[0])
		var more []*bench.MetaReport
		for _, insecure := range []bool{true, true, false} {
			rep, err := benchMetaOnce(ctx, a, k, insecure, stdout, stderr, human)
			if err != nil {
				return err
			}
			more = append(more, rep)
		}
		tls := []*bench.MetaReport{reps[0], more[2]}
		plain := more[:2]
		for _, p := range reps[0].Phases {
			var t, pl float64
			for i := range 2 {
				tp, ok1 := tls[i].Phase(p.Name)
				pp, ok2 := plain[i].Phase(p.Name)
				if ok1 && ok2 {
					t += tp.OpsPerSec()
					pl += pp.OpsPerSec()
				}
			}
			if pl > 0 {
				fmt.Fprintf(human, "%-8s TLS / plaintext: %.2f  (%.0f vs %.0f ops/s, mean of 2 runs each, order TLS plain plain TLS)\n", p.Name, t/pl, t/2, pl/2)
			}
		}
		reps = append(reps, more...)
	}
	// K ministries against the first K of the same run.
	for _, r := range ministryRatios(kReps) {
		fmt.Fprintln(human, r)
	}
	if a.baseline {
		// The baseline: the same phases on a local directory, same run.
		local, err := bench.RunLocalMeta(ctx, bench.MetaConfig{Clients: a.clients, Files: a.files, Phases: a.phases}, a.localDir)
		if err != nil {
			return fmt.Errorf("bench meta: %w", err)
		}
		for _, rep := range reps {
			rep.Local = local
			for _, p := range rep.Phases {
				if line := rep.Compare(p); line != "" {
					fmt.Fprintln(human, line)
				}
			}
		}
	}
	for _, rep := range reps {
		if err := printJSON(stdout, rep); err != nil {
			return fmt.Errorf("bench meta: %w", err)
		}
	}
	return nil
}

// benchMetaOnce runs the workload over k ministries, on a local cluster
// started for it (fresh for every k) or on --meta.
func benchMetaOnce(ctx context.Context, a *benchMetaArgs, k int, insecure bool, stdout, stderr, human io.Writer) (*bench.MetaReport, error) {
	sec := a.sec
	sec.insecure = insecure
	t, stop, err := sec.cluster(ctx, a.meta, stderr, testcluster.ProcConfig{Nodes: a.metaNodes, ExtraArgs: a.nodeArgs, NodeCPU: a.nodeCPU})
	if err != nil {
		return nil, err
	}
	defer stop()
	addrs, external := t.addrs, len(a.meta) > 0
	if !a.jsonOnly {
		fmt.Fprintf(stdout, "bench meta: %d clients × %d files over %d connections, phases %s, %d ministries, cluster %s\n",
			a.clients, a.files, min(a.conns, a.clients), strings.Join(a.phases, ","), k, strings.Join(addrs, ","))
	}
	rep, err := bench.RunMeta(ctx, bench.MetaConfig{
		MetaAddrs:  addrs,
		TLSDir:     t.tlsDir,
		Clients:    a.clients,
		Files:      a.files,
		Conns:      a.conns,
		Phases:     a.phases,
		Cleanup:    external, // a local cluster is thrown away whole
		OpTimeout:  a.timeout,
		Ministries: k,
	}, human)
	if err != nil {
		return nil, fmt.Errorf("bench meta: %w", err)
	}
	rep.Testbed = testbedOf(external, a.metaNodes, a.nodeCPU)
	rep.Insecure = t.tlsDir == ""
	return rep, nil
}

// ministryRatios compares each K's phases with the first K's: ops/s of
// K over ops/s of the first, each the mean over that K's runs (two each
// with --both-orders, in the order the runs went), one line per K and
// phase, in the order the Ks first ran.
func ministryRatios(reps []*bench.MetaReport) []string {
	if len(reps) == 0 {
		return nil
	}
	type key struct {
		k     int
		phase string
	}
	sums := map[key]float64{}
	runs := map[int]int{}
	var ks []int
	for _, rep := range reps {
		if runs[rep.Ministries] == 0 {
			ks = append(ks, rep.Ministries)
		}
		runs[rep.Ministries]++
		for _, p := range rep.Phases {
			sums[key{rep.Ministries, p.Name}] += p.OpsPerSec()
		}
	}
	first := ks[0]
	var lines []string
	for _, k := range ks[1:] {
		for _, p := range reps[0].Phases {
			b := sums[key{first, p.Name}] / float64(runs[first])
			v, ok := sums[key{k, p.Name}]
			if !ok || b <= 0 {
				continue
			}
			line := fmt.Sprintf("%-8s %d ministries / %d: %.2f", p.Name, k, first, v/float64(runs[k])/b)
			if runs[k] > 1 || runs[first] > 1 {
				line += fmt.Sprintf("  (means of %d and %d runs)", runs[k], runs[first])
			}
			lines = append(lines, line)
		}
	}
	return lines
}

// testbedOf describes the cluster a bench ran on, for its JSON line.
func testbedOf(external bool, metaNodes int, nodeCPU float64) bench.Testbed {
	if external {
		return bench.Testbed{External: true}
	}
	return bench.Testbed{MetaNodes: metaNodes, NodeCPU: nodeCPU}
}

// startLocalCluster starts cfg (Binary and Dir filled in here) in a
// temporary directory; stop stops it and deletes the directory.
func startLocalCluster(ctx context.Context, stderr io.Writer, cfg testcluster.ProcConfig) (stop func(), t benchTarget, err error) {
	bin, err := os.Executable()
	if err != nil {
		return nil, t, fmt.Errorf("bench meta: find the govfs binary: %w", err)
	}
	dir, err := os.MkdirTemp("", "govfs-bench-")
	if err != nil {
		return nil, t, fmt.Errorf("bench meta: %w", err)
	}
	rctx, cancel := context.WithTimeout(ctx, 180*time.Second)
	cfg.Binary, cfg.Dir = bin, dir
	c, err := testcluster.StartReady(rctx, cfg)
	cancel()
	if err != nil {
		// Keep the directory: its node logs say why.
		return nil, t, fmt.Errorf("bench meta: local cluster (logs in %s): %w", dir, err)
	}
	stop = func() {
		c.Stop()
		os.RemoveAll(dir)
	}
	mode := "mutual TLS"
	if cfg.Insecure {
		mode = "plaintext"
	}
	fmt.Fprintf(stderr, "bench: started a local cluster (%d metadata nodes, %d chunk servers, %s) in %s (removed afterwards)\n", cfg.Nodes, cfg.Chunks, mode, dir)
	return stop, benchTarget{addrs: c.Addrs(), tlsDir: c.ClientTLSDir()}, nil
}

// benchCluster returns the metadata addresses of --meta or, when it is
// empty, of a local cluster (3 metadata nodes, 3 chunk servers) started
// for the run; stop ends that cluster (a no-op for --meta).
func benchCluster(ctx context.Context, meta string, sec benchSec, stderr io.Writer) (benchTarget, func(), error) {
	var addrs []string
	for _, a := range strings.Split(meta, ",") {
		if a = strings.TrimSpace(a); a != "" {
			addrs = append(addrs, a)
		}
	}
	return sec.cluster(ctx, addrs, stderr, testcluster.ProcConfig{Nodes: 3, Chunks: 3})
}

func benchMove(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := flag.NewFlagSet("govfs bench move", flag.ContinueOnError)
	f.SetOutput(stderr)
	meta := f.String("meta", "", "metadata node addresses of a running cluster with at least 3 nodes (default: start a local cluster of --meta-nodes)")
	files := f.Int("files", bench.DefaultMoveFiles, "files in the subtree before it moves")
	dirs := f.Int("dirs", bench.DefaultMoveDirs, "directories the files are spread over")
	clients := f.Int("clients", bench.DefaultMoveClients, "clients creating and statting during the run, half inside the subtree")
	conns := f.Int("conns", 8, "client connections shared by the clients")
	window := f.Duration("window", 5*time.Second, "how long the throughput before the move is measured")
	timeout := f.Duration("timeout", 60*time.Second, "give up on a single operation after this long")
	metaNodes := f.Int("meta-nodes", 5, "metadata nodes of the local cluster")
	nodeCPU := f.Float64("node-cpu", 0, "cap each metadata node of the local cluster at this fraction of one core (0: no cap)")
	jsonOnly := f.Bool("json-only", false, "print only the JSON result line")
	var sec benchSec
	sec.register(f)
	if err := f.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	switch {
	case f.NArg() > 0:
		return fmt.Errorf("govfs bench move: unexpected arguments %q", f.Args())
	case *files <= 0 || *dirs <= 0 || *clients < 2 || *conns <= 0:
		return fmt.Errorf("govfs bench move: --files and --dirs must be positive, --clients at least 2, --conns positive")
	case *metaNodes < 3 || *metaNodes > 64:
		return fmt.Errorf("govfs bench move: --meta-nodes %d: give 3 to 64 (a new ministry has 3 replicas)", *metaNodes)
	case *nodeCPU < 0 || *window <= 0 || *timeout <= 0:
		return fmt.Errorf("govfs bench move: --node-cpu must not be negative, --window and --timeout must be positive")
	}
	human := stdout
	if *jsonOnly {
		human = io.Discard
	}
	var addrs []string
	for _, a := range strings.Split(*meta, ",") {
		if a = strings.TrimSpace(a); a != "" {
			addrs = append(addrs, a)
		}
	}
	t, stop, err := sec.cluster(ctx, addrs, stderr, testcluster.ProcConfig{Nodes: *metaNodes, NodeCPU: *nodeCPU})
	if err != nil {
		return err
	}
	defer stop()
	external := len(strings.TrimSpace(*meta)) > 0
	rep, err := bench.RunMove(ctx, bench.MoveConfig{MetaAddrs: t.addrs, TLSDir: t.tlsDir, Files: *files, Dirs: *dirs, Clients: *clients, Conns: *conns,
		Window: *window, OpTimeout: *timeout}, human)
	if err != nil {
		return err
	}
	rep.Testbed = testbedOf(external, *metaNodes, *nodeCPU)
	return printJSON(stdout, rep)
}

func benchData(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := flag.NewFlagSet("govfs bench data", flag.ContinueOnError)
	f.SetOutput(stderr)
	meta := f.String("meta", "", "metadata node addresses (default: start a local cluster with 3 chunk servers)")
	size := sizeFlagInt64(f, "size", 1<<30, "file size")
	localDir := f.String("local-dir", "", "directory for the local-disk baseline (default: the system temp dir)")
	clients := f.Int("clients", bench.DefaultDataClients, "clients running the random 4 KiB phases in parallel")
	ops := f.Int("ops", bench.DefaultDataOps, "operations of each random 4 KiB phase, split over the clients")
	cacheDefault := "warm"
	if os.Geteuid() == 0 {
		cacheDefault = "cold"
	}
	cache := f.String("cache", cacheDefault, "cold: drop the page cache before every read phase (GovFS's and the local baseline's; needs root); warm: read right after writing")
	var sec benchSec
	sec.register(f)
	compare := f.Bool("compare-insecure", false, "also run on plaintext local clusters and report TLS / plaintext per phase (4 runs: TLS, plaintext, plaintext, TLS)")
	if err := f.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if *compare && (strings.TrimSpace(*meta) != "" || sec.insecure) {
		return errors.New("bench data: --compare-insecure runs local clusters with and without TLS; leave out --meta and --insecure")
	}
	if *size < 4096 {
		return fmt.Errorf("bench data: --size %d must be at least 4096", *size)
	}
	if *cache != "cold" && *cache != "warm" {
		return fmt.Errorf("bench data: --cache %q: want cold or warm", *cache)
	}
	if *clients <= 0 || *ops <= 0 {
		return fmt.Errorf("bench data: --clients %d and --ops %d must be positive", *clients, *ops)
	}
	run := func(sec benchSec) (*bench.DataReport, error) {
		t, stop, err := benchCluster(ctx, *meta, sec, stderr)
		if err != nil {
			return nil, err
		}
		defer stop()
		rep, err := bench.RunData(ctx, bench.DataConfig{MetaAddrs: t.addrs, TLSDir: t.tlsDir, Size: *size, LocalDir: *localDir,
			Clients: *clients, Ops: *ops, Cold: *cache == "cold"}, stdout)
		if rep != nil {
			rep.Insecure = t.tlsDir == ""
		}
		return rep, err
	}
	rep, err := run(sec)
	if err != nil {
		return err
	}
	if !*compare {
		return printJSON(stdout, rep)
	}
	// TLS, plaintext, plaintext, TLS (as bench meta --compare-insecure).
	plainSec := sec
	plainSec.insecure = true
	reps := []*bench.DataReport{rep}
	for _, s := range []benchSec{plainSec, plainSec, sec} {
		r, err := run(s)
		if err != nil {
			return err
		}
		reps = append(reps, r)
	}
	for _, p := range rep.Phases {
		var t, pl float64
		for i, r := range reps {
			q, ok := r.Phase(p.Name)
			if !ok {
				continue
			}
			if i == 0 || i == 3 {
				t += q.Rate()
			} else {
				pl += q.Rate()
			}
		}
		if pl > 0 {
			fmt.Fprintf(stdout, "%-12s TLS / plaintext: %.2f  (mean of 2 runs each, order TLS plain plain TLS)\n", p.Name, t/pl)
		}
	}
	for _, r := range reps {
		if err := printJSON(stdout, r); err != nil {
			return err
		}
	}
	return nil
}

func benchLocks(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := flag.NewFlagSet("govfs bench locks", flag.ContinueOnError)
	f.SetOutput(stderr)
	meta := f.String("meta", "", "metadata node addresses (default: start a local cluster with 3 chunk servers)")
	sizes := f.String("sizes", "100000,1000000,10000000,20000000,40000000,80000000", "row sizes in bytes, swept at --fixed-writers writers")
	writers := f.String("writers", "1,2,4,8,16,32", "writer counts, swept at --fixed-row bytes per row")
	fixedWriters := f.Int("fixed-writers", 6, "writers of the row-size sweep")
	fixedRow := sizeFlagInt64(f, "fixed-row", 10_000_000, "row size of the writers sweep")
	exps := f.String("experiments", "one_row,ten_rows", "one_row (each writer writes one random row), ten_rows (each writes all rows)")
	localDir := f.String("local-dir", "", "directory for the local-disk baseline (default: the system temp dir)")
	simulate := f.Float64("simulate-mbps", 0, "instead of writing, sleep as if writing at this many MB/s (the thesis used 200): measures the locking alone")
	var sec benchSec
	sec.register(f)
	if err := f.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if *simulate < 0 {
		return fmt.Errorf("bench locks: --simulate-mbps %v must not be negative", *simulate)
	}
	rowSizes, err := parseInts(*sizes, "--sizes")
	if err != nil {
		return err
	}
	ws, err := parseInts(*writers, "--writers")
	if err != nil {
		return err
	}
	cfg := bench.LocksConfig{RowSizes: rowSizes, FixedWriters: *fixedWriters, FixedRow: *fixedRow, LocalDir: *localDir, SimulateMBps: *simulate}
	for _, w := range ws {
		cfg.Writers = append(cfg.Writers, int(w))
	}
	for _, e := range strings.Split(*exps, ",") {
		if e = strings.TrimSpace(e); e != "" {
			cfg.Experiments = append(cfg.Experiments, e)
		}
	}
	if *fixedWriters <= 0 || *fixedRow <= 0 {
		return fmt.Errorf("bench locks: --fixed-writers %d and --fixed-row %d must be positive", *fixedWriters, *fixedRow)
	}
	t, stop, err := benchCluster(ctx, *meta, sec, stderr)
	if err != nil {
		return err
	}
	defer stop()
	cfg.MetaAddrs, cfg.TLSDir = t.addrs, t.tlsDir
	rep, err := bench.RunLocks(ctx, cfg, stdout)
	if err != nil {
		return err
	}
	return printJSON(stdout, rep)
}

// printJSON ends a bench run with its one-line JSON report.
func printJSON(stdout io.Writer, rep interface{ JSON() ([]byte, error) }) error {
	line, err := rep.JSON()
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "%s\n", line)
	return err
}

// parseInts parses a comma-separated list of positive integers ("" is
// an empty list).
func parseInts(s, flagName string) ([]int64, error) {
	var out []int64
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		v, err := strconv.ParseInt(part, 10, 64)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("%s: %q is not a positive integer", flagName, part)
		}
		out = append(out, v)
	}
	return out, nil
}

func benchMount(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := flag.NewFlagSet("govfs bench mount", flag.ContinueOnError)
	f.SetOutput(stderr)
	var sec benchSec
	sec.register(f)
	meta := f.String("meta", "", "metadata node addresses to mount (default: start a local cluster with 3 chunk servers)")
	mountpoint := f.String("mountpoint", "", "an existing GovFS mount to run in (default: mount --meta, or the local cluster, on a temporary directory)")
	procs := f.Int("procs", bench.DefaultMountProcs, "parallel workers (threads)")
	files := f.Int("files", bench.DefaultMountFiles, "files (and directories) per worker")
	layouts := f.String("layouts", "own,shared", "own (a directory per worker), shared (one directory), or both")
	data := f.Bool("data", true, "also run the data phases (seq 1 MiB write/read, random 4 KiB read/write)")
	size := sizeFlagInt64(f, "size", bench.DefaultMountSize, "data: file size")
	ops := f.Int("ops", bench.DefaultMountOps, "data: operations of each random 4 KiB phase, split over the workers")
	localDir := f.String("local-dir", "", "directory for the local and loopback baselines (default: the system temp dir)")
	loopback := f.Bool("loopback", true, "also run on a go-fuse loopback mount of a local directory")
	var others []bench.MountTarget
	f.Func("other", "also run in a new directory under DIR, named NAME in the figures (NAME=DIR; repeatable): e.g. moosefs=/mnt/mfs to put another file system's mount beside GovFS", func(v string) error {
		tg, err := otherTarget(v)
		if err != nil {
			return err
		}
		for _, o := range others {
			if o.Name == tg.Name {
				return fmt.Errorf("%q named twice", tg.Name)
			}
		}
		others = append(others, tg)
		return nil
	})
	cacheDefault := "warm"
	if os.Geteuid() == 0 {
		cacheDefault = "cold"
	}
	cache := f.String("cache", cacheDefault, "data: cold drops the page cache before each read phase (root); warm reads right after writing")
	jsonOnly := f.Bool("json-only", false, "print only the JSON result line")
	if err := f.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if *procs <= 0 || *files <= 0 || *ops <= 0 || *size < 4096 {
		return errors.New("bench mount: --procs, --files, --ops must be positive and --size at least 4096")
	}
	if *cache != "cold" && *cache != "warm" {
		return fmt.Errorf("bench mount: --cache %q: want cold or warm", *cache)
	}
	var ls []string
	for _, l := range strings.Split(*layouts, ",") {
		switch l = strings.TrimSpace(l); l {
		case bench.LayoutOwn, bench.LayoutShared:
			ls = append(ls, l)
		case "":
		default:
			return fmt.Errorf("bench mount: --layouts: unknown layout %q (want own, shared)", l)
		}
	}
	human := stdout
	if *jsonOnly {
		human = io.Discard
	}
	dir := *mountpoint
	if dir == "" {
		t, stop, err := benchCluster(ctx, *meta, sec, stderr)
		if err != nil {
			return err
		}
		defer stop()
		addrs := t.addrs
		bin, err := os.Executable()
		if err != nil {
			return fmt.Errorf("bench mount: find the govfs binary: %w", err)
		}
		m, err := bench.MountGovFS(ctx, bin, addrs, t.tlsDir, "", stderr)
		if err != nil {
			return fmt.Errorf("bench mount: %w", err)
		}
		defer func() {
			if err := m.Unmount(); err != nil {
				fmt.Fprintf(stderr, "bench mount: unmount %s: %v\n", m.Dir, err)
			}
		}()
		dir = m.Dir
		fmt.Fprintf(human, "bench mount: govfs mount of %s on %s\n", strings.Join(addrs, ","), dir)
	}
	local, err := os.MkdirTemp(*localDir, "govfs-bench-local-")
	if err != nil {
		return fmt.Errorf("bench mount: %w", err)
	}
	defer os.RemoveAll(local)
	targets := []bench.MountTarget{{Name: bench.TargetGovFS, Dir: dir}, {Name: bench.TargetLocal, Dir: local}}
	if *loopback {
		src, err := os.MkdirTemp(*localDir, "govfs-bench-loopsrc-")
		if err != nil {
			return fmt.Errorf("bench mount: %w", err)
		}
		defer os.RemoveAll(src)
		m, err := bench.MountLoopback(src, "")
		if err != nil {
			return fmt.Errorf("bench mount: %w", err)
		}
		defer m.Unmount()
		targets = append(targets, bench.MountTarget{Name: bench.TargetLoopback, Dir: m.Dir})
	}
	for _, o := range others {
		d, err := os.MkdirTemp(o.Dir, "govfs-bench-"+o.Name+"-")
		if err != nil {
			return fmt.Errorf("bench mount: --other %s=%s: %w", o.Name, o.Dir, err)
		}
		defer os.RemoveAll(d)
		targets = append(targets, bench.MountTarget{Name: o.Name, Dir: d})
	}
	rep, err := bench.RunMount(ctx, bench.MountConfig{Targets: targets, Procs: *procs, Files: *files, Layouts: ls,
		Data: *data, Size: *size, Ops: *ops, Cold: *cache == "cold"}, human)
	if err != nil {
		return err
	}
	return printJSON(stdout, rep)
}

// otherTarget parses --other NAME=DIR: NAME is a word that is none of
// the built-in targets' (it names JSON fields), DIR an existing directory.
func otherTarget(v string) (bench.MountTarget, error) {
	name, dir, ok := strings.Cut(v, "=")
	switch {
	case !ok || name == "" || dir == "":
		return bench.MountTarget{}, fmt.Errorf("%q: want NAME=DIR, e.g. moosefs=/mnt/mfs", v)
	case !regexp.MustCompile(`^[a-z][a-z0-9_]{0,31}$`).MatchString(name):
		return bench.MountTarget{}, fmt.Errorf("%q: NAME must be a lower-case word (letters, digits, _; at most 32)", name)
	case name == bench.TargetGovFS || name == bench.TargetLocal || name == bench.TargetLoopback:
		return bench.MountTarget{}, fmt.Errorf("%q: NAME is taken by a built-in target; choose another", name)
	}
	st, err := os.Stat(dir)
	if err != nil {
		return bench.MountTarget{}, fmt.Errorf("%s: %w", dir, err)
	}
	if !st.IsDir() {
		return bench.MountTarget{}, fmt.Errorf("%s: not a directory", dir)
	}
	return bench.MountTarget{Name: name, Dir: dir}, nil
}

func benchLs(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := flag.NewFlagSet("govfs bench ls", flag.ContinueOnError)
	f.SetOutput(stderr)
	var sec benchSec
	sec.register(f)
	meta := f.String("meta", "", "metadata node addresses of a running cluster with at least 3 nodes (default: a fresh local cluster of --meta-nodes for each K)")
	ministries := f.String("ministries", "1,2,3,4,5", "numbers of ministries K to run, in turn; each is compared with the first")
	clients := f.Int("clients", bench.DefaultLsClients, "clients listing concurrently, each with its own connection")
	requests := f.Int("requests", bench.DefaultLsRequests, "listings per K and order, over all clients")
	files := f.Int("files", bench.DefaultLsFiles, "files in each listed directory")
	orders := f.String("orders", "batch,stride", "request orders: batch (all of a client's listings of one directory, then the next), stride (round robin)")
	metaNodes := f.Int("meta-nodes", 5, "metadata nodes of the local cluster")
	nodeCPU := f.Float64("node-cpu", 0, "cap each metadata node of the local cluster at this fraction of one core (0: no cap)")
	timeout := f.Duration("timeout", 30*time.Second, "give up on a single listing after this long")
	jsonOnly := f.Bool("json-only", false, "print only the JSON result lines")
	if err := f.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	ks, err := parseInts(*ministries, "--ministries")
	if err != nil {
		return fmt.Errorf("govfs bench ls: %w", err)
	}
	var ords []string
	for _, o := range strings.Split(*orders, ",") {
		if o = strings.TrimSpace(o); o != bench.OrderBatch && o != bench.OrderStride {
			return fmt.Errorf("govfs bench ls: --orders: %q is not an order: give batch, stride or both", o)
		}
		ords = append(ords, strings.TrimSpace(o))
	}
	switch {
	case f.NArg() > 0:
		return fmt.Errorf("govfs bench ls: unexpected arguments %q", f.Args())
	case len(ks) == 0:
		return errors.New("govfs bench ls: --ministries is empty: give K, or a list such as 1,5")
	case slices.ContainsFunc(ks, func(k int64) bool { return k < 1 || k > 64 }):
		return fmt.Errorf("govfs bench ls: --ministries %s: each K must be 1 to 64", *ministries)
	case *clients <= 0 || *files <= 0 || *requests < *clients:
		return fmt.Errorf("govfs bench ls: --clients and --files must be positive and --requests at least --clients")
	case *metaNodes < 3 || *metaNodes > 64:
		return fmt.Errorf("govfs bench ls: --meta-nodes %d: give 3 to 64 (a new ministry has 3 replicas)", *metaNodes)
	case *nodeCPU < 0 || *timeout <= 0:
		return fmt.Errorf("govfs bench ls: --node-cpu must not be negative and --timeout must be positive")
	}
	human := stdout
	if *jsonOnly {
		human = io.Discard
	}
	var addrs []string
	for _, a := range strings.Split(*meta, ",") {
		if a = strings.TrimSpace(a); a != "" {
			addrs = append(addrs, a)
		}
	}
	var all [][]*bench.LsReport
	for _, k := range ks {
		t, stop, err := sec.cluster(ctx, addrs, stderr, testcluster.ProcConfig{Nodes: *metaNodes, NodeCPU: *nodeCPU})
		if err != nil {
			return err
		}
		reps, err := bench.RunLs(ctx, bench.LsConfig{MetaAddrs: t.addrs, TLSDir: t.tlsDir, Ministries: int(k), Clients: *clients, Requests: *requests,
			Files: *files, Orders: ords, OpTimeout: *timeout, Cleanup: len(addrs) > 0}, human)
		stop()
		if err != nil {
			return err
		}
		for _, r := range reps {
			r.Testbed = testbedOf(len(addrs) > 0, *metaNodes, *nodeCPU)
		}
		all = append(all, reps)
	}
	// Tails against the first K of the same run (the target: p99
	// at 5 ministries at most 1.5 × p99 at 1).
	for _, reps := range all[1:] {
		for i, r := range reps {
			if b := all[0][i]; b.P99Ms > 0 {
				fmt.Fprintf(human, "ls %-6s p99 %d ministries / %d: %.2f  (p50 %.2f, p99.9 %.2f)\n", r.Order, r.Ministries, b.Ministries,
					r.P99Ms/b.P99Ms, r.P50Ms/b.P50Ms, r.P999Ms/b.P999Ms)
			}
		}
	}
	for _, reps := range all {
		for _, r := range reps {
			if err := printJSON(stdout, r); err != nil {
				return fmt.Errorf("bench ls: %w", err)
			}
		}
	}
	return nil
}
