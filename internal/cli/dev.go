package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

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
	for k, a := range c.ChunkAddrs() {
		metrics := ""
		if k < len(chunkHTTP) {
			metrics = fmt.Sprintf("metrics http://%s/metrics, pprof http://%s/debug/pprof/, ", chunkHTTP[k], dbg[len(c.Addrs())+k])
		}
		fmt.Fprintf(stdout, "  chunk server %d (rack r%d): %s  (%slog %s)\n", k+1, k+1, a, metrics, c.LogPath(len(c.Addrs())+k))
	}
	tlsLine := "  export GOVFS_TLS=" + c.ClientTLSDir()
	if *insecure {
		tlsLine = "  # plaintext cluster (--insecure): give the CLI --insecure too"
		fmt.Fprintf(stdout, "  INSECURE: no TLS, every caller is trusted\n")
	} else {
		fmt.Fprintf(stdout, "  mutual TLS: cluster CA in %s, an admin certificate in %s\n", c.CADir(), c.ClientTLSDir())
	}
	fmt.Fprintf(stdout, "\nIn another shell:\n  export GOVFS_META=%s\n%s\n  govfs fs ls /\n  govfs admin status\n\nCtrl-C stops the cluster; run again on the same --dir to get it back.\n", meta, tlsLine)
	if *mountDir != "" {
		unmount, err := devMount(ctx, *mountDir, c.Addrs(), c.ClientTLSDir(), stdout, stderr)
		if err != nil {
			return fmt.Errorf("dev: %w", err)
		}
		defer unmount()
	}
	// Report a node that dies under us; the others keep serving (a
	// majority is enough) until Ctrl-C.
	type exited struct {
		i   int
		err error
	}
	died := make(chan exited, c.Procs())
	for i := range c.Procs() {
		done, status := c.Exited(i)
		go func() {
			select {
			case <-done:
				died <- exited{i, status()}
			case <-ctx.Done():
			}
		}()
	}
	for {
		select {
		case d := <-died:
			fmt.Fprintf(stderr, "dev: node %d exited unexpectedly (%v); see %s\n", d.i+1, d.err, c.LogPath(d.i))
			continue
		case <-ctx.Done():
		}
		break
	}
	fmt.Fprintln(stdout, "stopping...")
	return nil
}
