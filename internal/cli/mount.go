package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/govfs/govfs/client"
	"github.com/govfs/govfs/internal/fusefs"
	"github.com/govfs/govfs/internal/rpc"
)

const mountUsage = `Usage: govfs mount [flags] MOUNTPOINT

Mounts the cluster on MOUNTPOINT with FUSE and serves it in the
foreground until Ctrl-C, SIGTERM or 'govfs umount MOUNTPOINT' (with
--background: from a detached process, once the mount is up). As root it
mounts with mount(2); otherwise it needs fusermount3 (apt-get install
fuse3). Consistency is close-to-open; see docs/fuse.md.

Flags:`

// mountInvocation is a parsed `govfs mount` command line.
type mountInvocation struct {
	global     fsGlobal
	dir        string
	logLevel   string
	background bool
	logFile    string
	metrics    string
	debugAddr  string
	cfg        fusefs.Config
}

func parseMount(args []string, stderr io.Writer) (*mountInvocation, error) {
	inv := &mountInvocation{cfg: fusefs.DefaultConfig()}
	f := flag.NewFlagSet("govfs mount", flag.ContinueOnError)
	f.SetOutput(stderr)
	f.Usage = func() {
		fmt.Fprintln(stderr, mountUsage)
		f.PrintDefaults()
	}
	inv.global.register(f)
	inv.global.registerWrites(f)
	c := &inv.cfg
	f.BoolVar(&c.AllowOther, "allow-other", false, "let other users use the mount (allow_other)")
	f.BoolVar(&c.DefaultPermissions, "default-permissions", false, "let the kernel check permission bits and owners (default_permissions)")
	f.DurationVar(&c.EntryTimeout, "entry-timeout", c.EntryTimeout, "how long the kernel trusts a name lookup")
	f.DurationVar(&c.AttrTimeout, "attr-timeout", c.AttrTimeout, "how long the kernel trusts attributes")
	f.DurationVar(&c.NegativeTimeout, "negative-timeout", c.NegativeTimeout, "how long the kernel remembers a missing name (0: not at all)")
	f.IntVar(&c.WriteBuffer, "write-buffer", c.WriteBuffer, "bytes of writes buffered per open file before they are sent")
	f.StringVar(&c.CacheDir, "cache-dir", "", "cache file blocks and journal buffered writes on local disk here (committed or reported by the next mount after a crash); one directory per mount")
	sizeVar(f, &c.CacheSize, "cache-size", 1<<30, "file blocks the --cache-dir keeps")
	f.BoolVar(&c.AsyncDirs, "async-dirs", c.AsyncDirs, "answer creates, unlinks and renames in a directory this mount changes often itself, under a directory lease, and send them in batches (fsync the directory to wait for them)")
	f.BoolVar(&c.WalkAhead, "walk-ahead", c.WalkAhead, "while a process opens a directory's files in the order it listed them, ask for the next files' read leases (with attributes and small files' bytes) in the background")
	f.BoolVar(&c.ListAhead, "list-ahead", c.ListAhead, "while a listing hands the kernel subdirectories, read their first pages in the background (under this mount's directory leases), so a process walking the tree (rm -rf, find) finds them ready")
	f.IntVar(&c.MaxDirLeases, "max-dir-leases", c.MaxDirLeases, "at most this many directory leases kept (0: 32768); beyond it the least recently used directories' are given back, and their next changes are synchronous until they are leased again")
	f.BoolVar(&c.CreateLeases, "create-leases", c.CreateLeases, "ask, with each batch of queued creates, for the new files' read leases, granted in the batch's answer: a file's next open, and its stat past the attribute timeout, ask nothing")
	f.BoolVar(&c.WriteBehind, "write-behind", c.WriteBehind, "let a close of a small file return before its write is committed, under a lease that any other client's open or change of the file recalls first (close-to-open kept; fsync, O_SYNC and O_DSYNC wait for the commit)")
	f.BoolVar(&c.NewFileLeases, "new-file-leases", c.NewFileLeases, "ask for the read lease of each file this mount creates once its create is applied, so the file's next open needs no request (off by default: bulk creation such as cp -a runs ~20 % slower)")
	f.BoolVar(&c.DirCache, "dir-cache", c.DirCache, "let the kernel keep a directory's listing while this mount holds a read lease on the directory (another client's change revokes it first)")
	f.IntVar(&c.ReadAhead, "read-ahead", c.ReadAhead, "the kernel's read-ahead for the mount in bytes (needs root; 0: the kernel's 128 KiB)")
	f.BoolVar(&c.DirectMount, "direct-mount", os.Geteuid() == 0, "mount with mount(2) rather than fusermount3 (needs root)")
	f.BoolVar(&c.NonEmpty, "nonempty", false, "allow a mount point that is not empty (its files are hidden while mounted)")
	f.BoolVar(&c.Debug, "debug", false, "log every FUSE request (with --log-level debug)")
	f.StringVar(&inv.logLevel, "log-level", "info", "debug, info, warn or error (to stderr)")
	f.BoolVar(&inv.background, "background", false, "detach once mounted: serve from a background process until 'govfs umount'")
	f.StringVar(&inv.metrics, "metrics", "", "serve this mount's Prometheus /metrics (operations by kind, latency, errors) on ADDR, e.g. 127.0.0.1:9480")
	f.StringVar(&inv.debugAddr, "debug-listen", "", "loopback HOST:PORT for /debug/pprof of the mount process (off when empty)")
	f.StringVar(&inv.logFile, "log-file", "", "with --background: where the background process logs (default: /var/log/govfs/mount-<name>.log as root, else ~/.local/state/govfs/mount-<name>.log)")
	if err := f.Parse(args); err != nil {
		return nil, err
	}
	if f.NArg() != 1 {
		f.Usage()
		return nil, errors.New("mount: want exactly one MOUNTPOINT")
	}
	inv.dir = f.Arg(0)
	if c.CacheSize <= 0 {
		return nil, fmt.Errorf("mount: --cache-size %d must be positive", c.CacheSize)
	}
	if c.CacheDir != "" {
		abs, err := filepath.Abs(c.CacheDir)
		if err != nil {
			return nil, fmt.Errorf("mount: --cache-dir: %w", err)
		}
		c.CacheDir = abs
	}
	if inv.logFile != "" && !inv.background {
		return nil, errors.New("mount: --log-file goes with --background (in the foreground the log goes to stderr)")
	}
	return inv, nil
}

// runMount implements `govfs mount`.
func runMount(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	inv, err := parseMount(args, stderr)
	if err != nil {
		return err
	}
	log, err := newLogger(stderr, inv.logLevel)
	if err != nil {
		return err
	}
	dir, err := filepath.Abs(inv.dir)
	if err != nil {
		return err
	}
	if err := fusefs.CheckMountPoint(dir, inv.cfg.NonEmpty); err != nil {
		return fmt.Errorf("mount: %w", err)
	}
	ccfg, err := inv.global.clientConfig(os.Getenv)
	if err != nil {
		return err
	}
	if inv.background {
		return mountInBackground(ctx, dir, inv.logFile, args, stdout)
	}
	ccfg.Logger = log.With("component", "client")
	cl, err := client.New(ctx, ccfg)
	if err != nil {
		return dialError("mount", err)
	}
	defer cl.Close()
	inv.cfg.Client = cl
	inv.cfg.Logger = log
	if inv.debugAddr != "" {
		addr, err := debugListen("mount", inv.debugAddr)
		if err != nil {
			return err
		}
		dbg, err := rpc.StartDebug(addr)
		if err != nil {
			return fmt.Errorf("mount: %w", err)
		}
		defer dbg.Stop()
		log.Info("pprof", "url", "http://"+addr+"/debug/pprof/")
	}
	if inv.metrics != "" {
		stop, err := serveMountMetrics(inv.metrics, &inv.cfg)
		if err != nil {
			return err
		}
		defer stop()
		log.Info("metrics", "url", "http://"+inv.metrics+"/metrics")
	}
	inv.cfg.FsName = "govfs:" + cl.ClusterID()
	m, err := fusefs.Mount(ctx, dir, inv.cfg)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "GovFS cluster %s mounted on %s (Ctrl-C or 'govfs umount %s' to unmount)\n", cl.ClusterID(), dir, dir)
	select {
	case <-m.Done():
		fmt.Fprintf(stdout, "%s was unmounted\n", dir)
		return nil
	case <-ctx.Done():
	}
	fmt.Fprintf(stdout, "unmounting %s...\n", dir)
	done := make(chan error, 1)
	go func() { done <- m.Unmount() }()
	select {
	case err := <-done:
		return err
	case <-time.After(time.Minute):
		return fmt.Errorf("mount: %s detached, but files stayed open for a minute; exiting (their I/O fails now)", dir)
	}
}

// runUmount implements `govfs umount`.
func runUmount(_ context.Context, args []string, _, stderr io.Writer) error {
	f := flag.NewFlagSet("govfs umount", flag.ContinueOnError)
	f.SetOutput(stderr)
	lazy := f.Bool("lazy", false, "detach a busy mount now; it goes away when its files are closed")
	f.Usage = func() {
		fmt.Fprintln(stderr, "Usage: govfs umount [--lazy] MOUNTPOINT\n\nUnmounts a govfs mount (umount2 as root, else fusermount3 -u); the\n'govfs mount' process then exits.\n\nFlags:")
		f.PrintDefaults()
	}
	if err := f.Parse(args); err != nil {
		return err
	}
	if f.NArg() != 1 {
		f.Usage()
		return errors.New("umount: want exactly one MOUNTPOINT")
	}
	dir, err := filepath.Abs(f.Arg(0))
	if err != nil {
		return err
	}
	return fusefs.Unmount(dir, *lazy)
}

// devMount mounts the dev cluster on dir with a `govfs mount` process of
// its own (bin), in its own session, as a user would, logging to logPath,
// and returns the function that unmounts it and stops that process. Why
// not in dev's own process, as it was until session 24: in the session
// of the cluster's processes the kernel's autogroup scheduling gave the
// mount and the whole cluster one CPU share against the load (cp -a of
// /usr/include 14-17 s, against 10-11 s from a mount in its own session;
// testcluster.procAttr).
func devMount(ctx context.Context, bin, dir string, addrs []string, tlsDir, logPath string, stdout, stderr io.Writer) (func(), error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return nil, fmt.Errorf("mount: %w", err)
	}
	if err := fusefs.CheckMountPoint(abs, false); err != nil {
		return nil, fmt.Errorf("mount: %w", err)
	}
	// The mount logs beside the cluster's nodes (outages and recoveries
	// included), not on the terminal.
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("mount: log: %w", err)
	}
	args := []string{"mount", "--meta", strings.Join(addrs, ",")}
	if tlsDir != "" {
		args = append(args, "--tls", tlsDir)
	} else {
		args = append(args, "--insecure")
	}
	cmd := exec.Command(bin, append(args, abs)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Gone with dev, should dev be killed (its mount point then needs
	// 'govfs umount --lazy', as any killed mount's). Its own session, as
	// the cluster's processes (testcluster.procAttr: autogroup CPU
	// shares); a Ctrl-C of dev reaches it through dev's unmount.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("mount: start %s: %w", bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for !fusefs.IsMounted(abs) {
		select {
		case err := <-exited:
			logf.Close()
			b, _ := os.ReadFile(logPath)
			return nil, fmt.Errorf("mount: the mount process exited (%v); its log %s ends:\n%s", err, logPath, tailString(b, 2000))
		case <-deadline.C:
			_ = cmd.Process.Kill()
			<-exited
			logf.Close()
			return nil, fmt.Errorf("mount: %s was not mounted within 30 s (log %s)", abs, logPath)
		case <-ctx.Done():
			_ = cmd.Process.Kill()
			<-exited
			logf.Close()
			return nil, ctx.Err()
		case <-tick.C:
		}
	}
	fmt.Fprintf(stdout, "  mounted on %s (FUSE, govfs mount pid %d; unmounted when dev stops; log %s)\n", abs, cmd.Process.Pid, logPath)
	return func() {
		defer logf.Close()
		// A shell sitting in the mount keeps it busy: say who, rather
		// than wait in silence.
		if h := fusefs.Holders(abs); len(h) > 0 {
			fmt.Fprintf(stderr, "dev: %s is in use by %s: detaching it now; dev stops once they close their files or leave it\n", abs, strings.Join(h, ", "))
		}
		// SIGTERM: the mount process unmounts (waiting up to a minute
		// for open files) and exits.
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(75 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			if fusefs.IsMounted(abs) {
				if err := fusefs.Unmount(abs, true); err != nil {
					fmt.Fprintf(stderr, "dev: %v\n", err)
				}
			}
		}
	}, nil
}

// tailString is the last n bytes of b.
func tailString(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// serveMountMetrics serves the mount's /metrics on addr; stop ends it.
func serveMountMetrics(addr string, cfg *fusefs.Config) (stop func(), err error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	cfg.Metrics = reg
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("mount: --metrics %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(lis) }()
	return func() { _ = srv.Close() }, nil
}
