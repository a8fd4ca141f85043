package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/govfs/govfs/client"
	"github.com/govfs/govfs/internal/testcluster"
)

func runDev(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("govfs dev", flag.ContinueOnError)
	fs.SetOutput(stderr)
	withSynopsis(fs, stderr, devUsage)
	dir := fs.String("dir", "./govfs-dev", "directory for the nodes' data and logs")
	mountDir := fs.String("mount", "", "also mount the cluster with FUSE on this directory (see govfs mount)")
	metaNodes := fs.Int("meta-nodes", 3, "metadata nodes: the first 3 form the cluster, the others join it idle (for ministries: govfs admin assign)")
	nodeCPU := fs.Float64("node-cpu", 0, "cap each metadata node at this fraction of one core, each in its own cgroup (needs root; the scale-out testbed, so N small nodes can be profiled on one machine; 0: no cap)")
	insecure := fs.Bool("insecure", false, "run plaintext (no CA, no certificates; every caller trusted) instead of mutual TLS")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("dev: unexpected argument %q (dev takes only flags; see govfs dev --help)", fs.Arg(0))
	}
	if *nodeCPU < 0 {
		return fmt.Errorf("dev: --node-cpu %v must not be negative", *nodeCPU)
	}
	abs, err := filepath.Abs(*dir)
	if err != nil {
		return err
	}
	bin, err := os.Executable()
	if err != nil {
		return fmt.Errorf("dev: find the govfs binary: %w", err)
	}
	if *metaNodes < 1 || *metaNodes > 64 {
		return fmt.Errorf("dev: --meta-nodes %d: give 1 to 64", *metaNodes)
	}
	rctx, cancel := context.WithTimeout(ctx, 120*time.Second)
	c, err := testcluster.StartReady(rctx, testcluster.ProcConfig{Binary: bin, Dir: abs, Nodes: *metaNodes, HTTP: true, Chunks: 3, NodeCPU: *nodeCPU, Insecure: *insecure})
	cancel()
	if err != nil {
		return fmt.Errorf("dev: %w (node logs are in %s)", err, abs)
	}
	defer c.Stop()
	meta := strings.Join(c.Addrs(), ",")
	fmt.Fprintf(stdout, "GovFS dev cluster is up: %d metadata nodes and 3 chunk servers, data and logs in %s\n", *metaNodes, abs)
	fmt.Fprintf(stdout, "  dashboard: http://%s/ (every metadata node serves it)\n", c.HTTPAddrs()[0])
	if *nodeCPU > 0 {
		fmt.Fprintf(stdout, "  each metadata node is capped at %v of a core (its own cgroup)\n", *nodeCPU)
	}
	dbg := c.DebugAddrs()
	for i, a := range c.Addrs() {
		fmt.Fprintf(stdout, "  node %d: %s  (metrics http://%s/metrics, pprof http://%s/debug/pprof/, log %s)\n", i+1, a, c.HTTPAddrs()[i], dbg[i], c.LogPath(i))
	}
	chunkHTTP := c.ChunkHTTPAddrs()
	ids := devChunkIDs(ctx, c)
	for k, a := range c.ChunkAddrs() {
		metrics := ""
		if k < len(chunkHTTP) {
			metrics = fmt.Sprintf("metrics http://%s/metrics, pprof http://%s/debug/pprof/, ", chunkHTTP[k], dbg[len(c.Addrs())+k])
		}
		// The id the president gave it, as admin status and the
		// dashboard show it.
		name := fmt.Sprintf("chunk server (rack r%d)", k+1)
		if id, ok := ids[a]; ok {
			name = fmt.Sprintf("chunk server %d (rack r%d)", id, k+1)
		}
		fmt.Fprintf(stdout, "  %s: %s  (%slog %s)\n", name, a, metrics, c.LogPath(len(c.Addrs())+k))
	}
	tlsLine := "  export GOVFS_TLS=" + c.ClientTLSDir()
	if *insecure {
		tlsLine = "  # plaintext cluster (--insecure): give the CLI --insecure too"
		fmt.Fprintf(stdout, "  INSECURE: no TLS, every caller is trusted\n")
	} else {
		fmt.Fprintf(stdout, "  mutual TLS: cluster CA in %s, an admin certificate in %s\n", c.CADir(), c.ClientTLSDir())
	}
	self := devCommand(bin)
	fmt.Fprintf(stdout, "\nIn another shell:\n  export GOVFS_META=%s\n%s\n  %s fs ls /\n  %s admin status\n\nA process that dies is started again after %v (kill one to watch the cluster cope). Ctrl-C stops the cluster; run again on the same --dir to get it back.\n",
		meta, tlsLine, self, self, devRestartAfter)
	if *mountDir != "" {
		unmount, err := devMount(ctx, bin, *mountDir, c.Addrs(), c.ClientTLSDir(), filepath.Join(abs, "mount.log"), stdout, stderr)
		if err != nil {
			return fmt.Errorf("dev: %w", err)
		}
		defer unmount()
	}
	// A process that dies under us is reported, and started again after
	// devRestartAfter (long enough to watch the cluster notice: a chunk
	// server is declared dead after 10 s); the others keep serving (a
	// majority is enough) until Ctrl-C.
	type exited struct {
		i   int
		err error
	}
	died := make(chan exited, c.Procs())
	watch := func(i int) {
		done, status := c.Exited(i)
		go func() {
			select {
			case <-done:
				died <- exited{i, status()}
			case <-ctx.Done():
			}
		}()
	}
	for i := range c.Procs() {
		watch(i)
	}
	restart := make(chan int, c.Procs())
	for {
		select {
		case d := <-died:
			fmt.Fprintf(stderr, "dev: %s exited (%v); starting it again in %v (log %s)\n", devProcName(c, d.i), d.err, devRestartAfter, c.LogPath(d.i))
			time.AfterFunc(devRestartAfter, func() { restart <- d.i })
			continue
		case i := <-restart:
			if ctx.Err() != nil {
				break
			}
			if err := c.Restart(i); err != nil {
				fmt.Fprintf(stderr, "dev: start %s again: %v\n", devProcName(c, i), err)
			} else {
				fmt.Fprintf(stderr, "dev: %s started again (pid %d)\n", devProcName(c, i), c.Pid(i))
				watch(i)
			}
			continue
		case <-ctx.Done():
		}
		break
	}
	fmt.Fprintln(stdout, "stopping: unmounting, then stopping the chunk servers and metadata nodes...")
	return nil
}

// devRestartAfter is how long dev waits before it starts a dead process
// again.
const devRestartAfter = 20 * time.Second

// devProcName names process i of the dev cluster as its output does.
func devProcName(c *testcluster.ProcCluster, i int) string {
	if i < len(c.Addrs()) {
		return fmt.Sprintf("metadata node %d", i+1)
	}
	return fmt.Sprintf("the chunk server on %s", c.ChunkAddrs()[i-len(c.Addrs())])
}

// devChunkIDs maps chunk servers' addresses to the ids the president
// gave them (empty if the map cannot be read).
func devChunkIDs(ctx context.Context, c *testcluster.ProcCluster) map[string]uint64 {
	out := map[string]uint64{}
	cfg := client.DefaultConfig()
	cfg.MetaAddrs, cfg.TLSDir = c.Addrs(), c.ClientTLSDir() // "" for an --insecure cluster
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cl, err := client.New(cctx, cfg)
	if err != nil {
		return out
	}
	defer cl.Close()
	info, err := cl.ClusterMap(cctx)
	if err != nil {
		return out
	}
	for _, s := range info.GetChunkServers() {
		out[s.GetAddr()] = s.GetId()
	}
	return out
}

// devCommand is how the user should run this binary from the current
// directory: "govfs" when that is what the shell finds, else its path
// (bin/govfs after make build).
func devCommand(bin string) string {
	if p, err := exec.LookPath("govfs"); err == nil {
		if a, err := filepath.EvalSymlinks(p); err == nil {
			if b, err := filepath.EvalSymlinks(bin); err == nil && a == b {
				return "govfs"
			}
		}
	}
	if wd, err := os.Getwd(); err == nil {
		if rel, err := filepath.Rel(wd, bin); err == nil && !strings.HasPrefix(rel, "..") {
			return "./" + rel
		}
	}
	return bin
}
