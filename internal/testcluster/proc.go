// Package testcluster starts GovFS clusters for `govfs dev`, end-to-end
// tests and benchmarks: metadata nodes as real child processes of the
// govfs binary on 127.0.0.1, with ports chosen once and remembered in the
// cluster directory so a restart on the same directory finds its data.
package testcluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/rpc"
	"github.com/govfs/govfs/internal/wire"
)

// ProcConfig configures a process cluster.
type ProcConfig struct {
	// Binary is the govfs executable.
	Binary string
	// Dir holds one data directory and one log file per node and
	// cluster.json with the chosen ports.
	Dir   string
	Nodes int
	// Founders is how many of the Nodes form the cluster with --peers
	// (default: all of them, at most 3); the others join it one by one
	// with --join, so node i+1 still gets id i+1.
	Founders int
	// Tick is the raft tick passed to each node (election timeout = 10).
	Tick time.Duration
	// HTTP gives each node (metadata and chunk) a /metrics port too.
	HTTP bool
	// ExtraArgs are appended to every metadata node's command line.
	ExtraArgs []string
	// Chunks is the number of chunk servers (racks r1, r2, ...), started
	// after the metadata nodes; ChunkArgs are appended to their command
	// lines.
	Chunks    int
	ChunkArgs []string
	// NodeCPU, when positive, caps each metadata process at this
	// fraction of one core, each in its own cgroup (the scale-out
	// testbed; needs root and a cgroup cpu controller).
	NodeCPU float64
	// Insecure runs every process plaintext (--insecure); by default the
	// cluster makes its own CA and runs mutual TLS (tls.go).
	Insecure bool
}

// layout is persisted in Dir/cluster.json.
type layout struct {
	Addrs      []string `json:"addrs"`
	HTTP       []string `json:"http,omitempty"`
	ChunkAddrs []string `json:"chunk_addrs,omitempty"`
	ChunkHTTP  []string `json:"chunk_http,omitempty"`
	// Debug are the /debug/pprof addresses (with HTTP): metadata nodes,
	// then chunk servers.
	Debug []string `json:"debug,omitempty"`
}

// ProcCluster is a running process cluster.
type ProcCluster struct {
	cfg    ProcConfig
	layout layout

	mu    sync.Mutex
	procs []*exec.Cmd
	exits []*exit
	caps  *cpuCaps
	// sec is the admin identity's TLS for the cluster's own RPCs (nil
	// when insecure).
	sec *rpc.Security
}

// exit is closed when a process ends; err is its status.
type exit struct {
	done chan struct{}
	err  error
}

// Ports FreeAddr picks from: below Linux's ephemeral range (32768-60999),
// which every outgoing connection of every test running at the same time
// draws its source port from. A port picked there and released could be
// taken as a source port before the server binds it (seen in CI as
// "address already in use").
const freeLow, freeHigh = 20000, 32000

// FreeAddr returns a 127.0.0.1 address with a port that was free a moment
// ago, for a server a test is about to start.
func FreeAddr() (string, error) { return new(portPicker).pick() }

// portPicker hands out free ports that are also distinct from every port
// it handed out before. A cluster picks all its ports before any process
// binds one, so "free a moment ago" alone lets two of its servers draw the
// same port: with 36 ports from 12,000 that happens in a few percent of
// cluster starts (seen as a node that never comes up).
type portPicker struct {
	taken map[string]bool
}

// avoid marks addresses already in use by this cluster (a restarted
// cluster's layout) so no new server is given one of them.
func (p *portPicker) avoid(addrs ...string) {
	if p.taken == nil {
		p.taken = map[string]bool{}
	}
	for _, a := range addrs {
		p.taken[a] = true
	}
}

func (p *portPicker) pick() (string, error) {
	if p.taken == nil {
		p.taken = map[string]bool{}
	}
	start := rand.IntN(freeHigh - freeLow)
	for i := range freeHigh - freeLow {
		port := freeLow + (start+i)%(freeHigh-freeLow)
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		if p.taken[addr] {
			continue
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		l.Close()
		p.taken[addr] = true
		return addr, nil
	}
	return "", fmt.Errorf("no free port on 127.0.0.1 between %d and %d", freeLow, freeHigh)
}

// StartProcs starts (or restarts, on an existing Dir) the cluster.
func StartProcs(cfg ProcConfig) (*ProcCluster, error) {
	if cfg.Nodes <= 0 {
		cfg.Nodes = 3
	}
	if cfg.Founders <= 0 || cfg.Founders > cfg.Nodes {
		cfg.Founders = min(cfg.Nodes, 3)
	}
	if cfg.Tick <= 0 {
		cfg.Tick = 100 * time.Millisecond
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("create cluster directory: %w", err)
	}
	c := &ProcCluster{cfg: cfg}
	var ports portPicker
	freePort := ports.pick
	lp := filepath.Join(cfg.Dir, "cluster.json")
	if b, err := os.ReadFile(lp); err == nil {
		if err := json.Unmarshal(b, &c.layout); err != nil {
			return nil, fmt.Errorf("read %s: %w (remove the directory to start afresh)", lp, err)
		}
		ports.avoid(c.layout.Addrs...)
		ports.avoid(c.layout.HTTP...)
		ports.avoid(c.layout.ChunkAddrs...)
		ports.avoid(c.layout.ChunkHTTP...)
		ports.avoid(c.layout.Debug...)
		if len(c.layout.Addrs) != cfg.Nodes {
			return nil, fmt.Errorf("%s describes %d nodes, not %d", lp, len(c.layout.Addrs), cfg.Nodes)
		}
		for len(c.layout.ChunkAddrs) < cfg.Chunks {
			// A directory made before chunk servers existed: add them.
			a, err := freePort()
			if err != nil {
				return nil, err
			}
			c.layout.ChunkAddrs = append(c.layout.ChunkAddrs, a)
		}
		for cfg.HTTP && len(c.layout.ChunkHTTP) < cfg.Chunks {
			a, err := freePort()
			if err != nil {
				return nil, err
			}
			c.layout.ChunkHTTP = append(c.layout.ChunkHTTP, a)
		}
		if err := c.saveLayout(lp); err != nil {
			return nil, err
		}
	} else {
		for i := 0; i < cfg.Nodes; i++ {
			a, err := freePort()
			if err != nil {
				return nil, err
			}
			c.layout.Addrs = append(c.layout.Addrs, a)
			if cfg.HTTP {
				h, err := freePort()
				if err != nil {
					return nil, err
				}
				c.layout.HTTP = append(c.layout.HTTP, h)
			}
		}
		for i := 0; i < cfg.Chunks; i++ {
			a, err := freePort()
			if err != nil {
				return nil, err
			}
			c.layout.ChunkAddrs = append(c.layout.ChunkAddrs, a)
			if cfg.HTTP {
				h, err := freePort()
				if err != nil {
					return nil, err
				}
				c.layout.ChunkHTTP = append(c.layout.ChunkHTTP, h)
			}
		}
		if err := c.saveLayout(lp); err != nil {
			return nil, err
		}
	}
	if cfg.HTTP && len(c.layout.Debug) < cfg.Nodes+cfg.Chunks {
		for len(c.layout.Debug) < cfg.Nodes+cfg.Chunks {
			a, err := freePort()
			if err != nil {
				return nil, err
			}
			c.layout.Debug = append(c.layout.Debug, a)
		}
		if err := c.saveLayout(lp); err != nil {
			return nil, err
		}
	}
	if err := c.setupTLS(); err != nil {
		return nil, fmt.Errorf("cluster certificates: %w", err)
	}
	total := cfg.Nodes + cfg.Chunks
	c.procs = make([]*exec.Cmd, total)
	c.exits = make([]*exit, total)
	if cfg.NodeCPU > 0 {
		caps, err := newCPUCaps(cfg.NodeCPU)
		if err != nil {
			return nil, err
		}
		c.caps = caps
	}
	for i := 0; i < total; i++ {
		if i >= cfg.Founders && i < cfg.Nodes {
			continue // joiners last, in order
		}
		if err := c.Start(i); err != nil {
			c.Stop()
			return nil, err
		}
	}
	for i := cfg.Founders; i < cfg.Nodes; i++ {
		if err := c.Start(i); err != nil {
			c.Stop()
			return nil, err
		}
		if err := c.waitMember(i, 60*time.Second); err != nil {
			c.Stop()
			return nil, err
		}
	}
	return c, nil
}

// waitMember waits until the cluster map lists node i's address (it
// joined, and got id i+1 since joiners start one at a time).
func (c *ProcCluster) waitMember(i int, timeout time.Duration) error {
	pool := rpc.NewPool(c.sec)
	defer pool.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for {
		for _, a := range c.layout.Addrs[:c.cfg.Founders] {
			cc, err := pool.Get(a)
			if err != nil {
				continue
			}
			cctx, ccancel := context.WithTimeout(ctx, time.Second)
			info, err := wire.NewMetaClient(cc).ClusterInfo(cctx, &wire.ClusterInfoRequest{})
			ccancel()
			if err != nil {
				continue
			}
			for _, m := range info.GetMembers() {
				if m.GetAddr() == c.layout.Addrs[i] {
					if m.GetId() != uint64(i+1) {
						return fmt.Errorf("node %d joined with id %d (another node joined meanwhile?)", i+1, m.GetId())
					}
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("node %d did not join within %v (log %s)%s", i+1, timeout, c.LogPath(i), c.exitedProcs())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (c *ProcCluster) saveLayout(path string) error {
	b, _ := json.MarshalIndent(c.layout, "", "  ")
	return os.WriteFile(path, b, 0o644)
}

// Procs is the number of processes: metadata nodes (0..Nodes-1), then
// chunk servers.
func (c *ProcCluster) Procs() int { return len(c.procs) }

// ChunkAddrs are the chunk servers' data addresses.
func (c *ProcCluster) ChunkAddrs() []string {
	return append([]string(nil), c.layout.ChunkAddrs[:c.cfg.Chunks]...)
}

// Peers is the --peers value of the cluster.
func (c *ProcCluster) Peers() string {
	var parts []string
	for i, a := range c.layout.Addrs[:c.cfg.Founders] {
		parts = append(parts, fmt.Sprintf("%d=%s", i+1, a))
	}
	return strings.Join(parts, ",")
}

// Addrs are the gRPC addresses, node i+1 at index i.
func (c *ProcCluster) Addrs() []string { return append([]string(nil), c.layout.Addrs...) }

// ChunkHTTPAddrs are the chunk servers' /metrics addresses (with HTTP).
func (c *ProcCluster) ChunkHTTPAddrs() []string { return append([]string(nil), c.layout.ChunkHTTP...) }

// DebugAddrs are the /debug/pprof addresses (with HTTP): metadata nodes,
// then chunk servers.
func (c *ProcCluster) DebugAddrs() []string { return append([]string(nil), c.layout.Debug...) }

// HTTPAddrs are the /metrics addresses (when configured).
func (c *ProcCluster) HTTPAddrs() []string { return append([]string(nil), c.layout.HTTP...) }

// LogPath is process i's log file.
func (c *ProcCluster) LogPath(i int) string {
	if i >= c.cfg.Nodes {
		return filepath.Join(c.cfg.Dir, fmt.Sprintf("chunk%d.log", i-c.cfg.Nodes+1))
	}
	return filepath.Join(c.cfg.Dir, fmt.Sprintf("node%d.log", i+1))
}

// args is process i's command line.
func (c *ProcCluster) args(i int) []string {
	if i >= c.cfg.Nodes {
		k := i - c.cfg.Nodes
		args := []string{"chunk", "--listen", c.layout.ChunkAddrs[k], "--data", filepath.Join(c.cfg.Dir, fmt.Sprintf("chunk%d", k+1)),
			"--meta", strings.Join(c.layout.Addrs, ","), "--rack", fmt.Sprintf("r%d", k+1),
			// One machine: give each server its own host name for placement.
			"--host", fmt.Sprintf("dev-chunk%d", k+1)}
		if len(c.layout.ChunkHTTP) > k {
			args = append(args, "--http", c.layout.ChunkHTTP[k])
		}
		if len(c.layout.Debug) > i {
			args = append(args, "--debug-listen", c.layout.Debug[i])
		}
		args = append(args, c.tlsArgs(i)...)
		args = append(args, c.cfg.ChunkArgs...)
		return args
	}
	args := []string{"meta", "--id", fmt.Sprint(i + 1), "--listen", c.layout.Addrs[i], "--peers", c.Peers(),
		"--data", filepath.Join(c.cfg.Dir, fmt.Sprintf("node%d", i+1)), "--tick", c.cfg.Tick.String()}
	if i >= c.cfg.Founders {
		args = []string{"meta", "--join", strings.Join(c.layout.Addrs[:c.cfg.Founders], ","), "--listen", c.layout.Addrs[i],
			"--data", filepath.Join(c.cfg.Dir, fmt.Sprintf("node%d", i+1)), "--tick", c.cfg.Tick.String()}
	}
	if len(c.layout.HTTP) > i {
		args = append(args, "--http", c.layout.HTTP[i])
	}
	if len(c.layout.Debug) > i {
		args = append(args, "--debug-listen", c.layout.Debug[i])
	}
	args = append(args, c.tlsArgs(i)...)
	return append(args, c.cfg.ExtraArgs...)
}

// Start starts node i (index from 0) if it is not running.
func (c *ProcCluster) Start(i int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.procs[i] != nil {
		return nil
	}
	logf, err := os.OpenFile(c.LogPath(i), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(c.cfg.Binary, c.args(i)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Own process group: a Ctrl-C in the terminal reaches only the parent,
	// which then stops the children in order.
	cmd.SysProcAttr = procAttr()
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start node %d: %w", i+1, err)
	}
	if c.caps != nil && i < c.cfg.Nodes {
		if err := c.caps.cap(fmt.Sprintf("node%d", i+1), cmd.Process.Pid); err != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			logf.Close()
			return err
		}
	}
	ex := &exit{done: make(chan struct{})}
	go func() {
		ex.err = cmd.Wait()
		logf.Close()
		close(ex.done)
	}()
	c.procs[i], c.exits[i] = cmd, ex
	return nil
}

// Restart starts node i again after its process exited by itself (a
// crash, a kill from outside); it does nothing while it still runs.
func (c *ProcCluster) Restart(i int) error {
	c.mu.Lock()
	if ex := c.exits[i]; ex != nil {
		select {
		case <-ex.done:
			c.procs[i] = nil
		default:
		}
	}
	c.mu.Unlock()
	return c.Start(i)
}

// Pid returns node i's process id (0 when not running).
func (c *ProcCluster) Pid(i int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.procs[i] == nil {
		return 0
	}
	return c.procs[i].Process.Pid
}

// Exited returns a channel closed when node i's current process exits,
// and a function returning its exit status once it has.
func (c *ProcCluster) Exited(i int) (<-chan struct{}, func() error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ex := c.exits[i]
	if ex == nil {
		ch := make(chan struct{})
		close(ch)
		return ch, func() error { return nil }
	}
	return ex.done, func() error { return ex.err }
}

// Kill sends SIGKILL to node i and waits for it to die.
func (c *ProcCluster) Kill(i int) { c.signal(i, syscall.SIGKILL, 0) }

// Pause stops node i with SIGSTOP (it keeps its sockets open and
// answers nothing) until Resume; a paused node is resumed by Stop.
func (c *ProcCluster) Pause(i int) { c.sendKeep(i, syscall.SIGSTOP) }

// Resume continues node i after Pause (SIGCONT).
func (c *ProcCluster) Resume(i int) { c.sendKeep(i, syscall.SIGCONT) }

func (c *ProcCluster) sendKeep(i int, sig syscall.Signal) {
	c.mu.Lock()
	cmd := c.procs[i]
	c.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Signal(sig)
	}
}

// StopNode sends SIGTERM to node i and waits (SIGKILL after 15 s).
func (c *ProcCluster) StopNode(i int) { c.signal(i, syscall.SIGTERM, 15*time.Second) }

func (c *ProcCluster) signal(i int, sig syscall.Signal, grace time.Duration) {
	c.mu.Lock()
	cmd, ex := c.procs[i], c.exits[i]
	c.procs[i] = nil
	c.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(sig)
	if sig == syscall.SIGTERM {
		_ = cmd.Process.Signal(syscall.SIGCONT) // a paused node handles it
	}
	if grace > 0 {
		select {
		case <-ex.done:
			return
		case <-time.After(grace):
			_ = cmd.Process.Kill()
		}
	}
	<-ex.done
}

// Stop stops every process (SIGTERM, in parallel): chunk servers first,
// then the metadata nodes they report to.
func (c *ProcCluster) Stop() {
	stopRange := func(from, to int) {
		var wg sync.WaitGroup
		for i := from; i < to; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c.StopNode(i)
			}()
		}
		wg.Wait()
	}
	stopRange(c.cfg.Nodes, len(c.procs))
	stopRange(0, c.cfg.Nodes)
	if c.caps != nil {
		c.caps.remove()
	}
}

// WaitReady waits until every running node answers and the root
// directory can be read through some node with a linearizable read.
func (c *ProcCluster) WaitReady(ctx context.Context) error {
	pool := rpc.NewPool(c.sec)
	defer pool.Close()
	var last error = errors.New("not ready")
	for {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("cluster not ready: %v (logs in %s)%s", last, c.cfg.Dir, c.exitedProcs())
		}
		ok := false
		for _, a := range c.layout.Addrs {
			cc, err := pool.Get(a)
			if err != nil {
				last = err
				continue
			}
			rctx, cancel := context.WithTimeout(ctx, time.Second)
			resp, err := wire.NewMetaClient(cc).Read(rctx, &wire.ReadRequest{Group: 1, Consistency: wire.ReadConsistency_LINEARIZABLE,
				Op: &wire.ReadRequest_GetAttr{GetAttr: &wire.GetAttrReq{Ino: 1}}})
			cancel()
			if err != nil {
				last = err
				continue
			}
			if resp.GetStatus().GetCode() != wire.Code_OK {
				last = fmt.Errorf("%v: %s", resp.GetStatus().GetCode(), resp.GetStatus().GetMessage())
				continue
			}
			ok = true
			break
		}
		if ok && c.cfg.Chunks > 0 {
			if err := c.chunksAlive(ctx, pool); err != nil {
				last, ok = err, false
			}
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Leader returns the index of the running node that leads group g, as
// the nodes' Status says, waiting until one does or ctx ends.
func (c *ProcCluster) Leader(ctx context.Context, g ids.GroupID) (int, error) {
	pool := rpc.NewPool(c.sec)
	defer pool.Close()
	for {
		for i, a := range c.layout.Addrs {
			cc, err := pool.Get(a)
			if err != nil {
				continue
			}
			sctx, cancel := context.WithTimeout(ctx, time.Second)
			st, err := wire.NewMetaClient(cc).Status(sctx, &wire.StatusRequest{})
			cancel()
			if err != nil {
				continue
			}
			for _, gs := range st.GetGroups() {
				if gs.GetGroup() == uint64(g) && gs.GetRole() == "Leader" {
					return i, nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return -1, fmt.Errorf("no leader of group %v: %w", g, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// StartReady starts the cluster and waits until it serves. Ports are
// picked by binding :0 and releasing them, so on a busy machine another
// process can take one before the node binds it; when the directory was
// fresh and a node failed that way, StartReady starts over on new ports
// (up to 3 times). An existing directory keeps its ports.
func StartReady(ctx context.Context, cfg ProcConfig) (*ProcCluster, error) {
	_, statErr := os.Stat(filepath.Join(cfg.Dir, "cluster.json"))
	fresh := os.IsNotExist(statErr)
	for attempt := 1; ; attempt++ {
		c, err := StartProcs(cfg)
		if err != nil {
			return nil, err
		}
		err = c.waitReadyOrExit(ctx)
		if err == nil {
			return c, nil
		}
		c.Stop()
		if !fresh || attempt == 3 || !c.portTaken() {
			return nil, err
		}
		if rmErr := os.RemoveAll(cfg.Dir); rmErr != nil {
			return nil, fmt.Errorf("%w (and clearing %s to retry: %v)", err, cfg.Dir, rmErr)
		}
	}
}

// waitReadyOrExit is WaitReady for processes just started: none of them
// should exit, so the first one that does (a port taken by someone else
// between picking and binding it, most often) ends the wait at once and
// leaves StartReady the rest of ctx to start over, instead of spending
// all of it waiting for a cluster that cannot come up.
func (c *ProcCluster) waitReadyOrExit(ctx context.Context) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for i := range c.Procs() {
		done, _ := c.Exited(i)
		go func() {
			select {
			case <-done:
				cancel()
			case <-wctx.Done():
			}
		}()
	}
	err := c.WaitReady(wctx)
	if err != nil && ctx.Err() == nil {
		return fmt.Errorf("a process exited while the cluster started: %w", err)
	}
	return err
}

// exitedProcs describes processes that have exited, with the end of
// their logs (the directory is often gone by the time someone reads the
// error).
func (c *ProcCluster) exitedProcs() string {
	var b strings.Builder
	for i := range c.Procs() {
		done, status := c.Exited(i)
		select {
		case <-done:
		default:
			continue
		}
		fmt.Fprintf(&b, "\n%s exited (%v)", filepath.Base(c.LogPath(i)), status())
		if log, err := os.ReadFile(c.LogPath(i)); err == nil {
			if len(log) > 800 {
				log = log[len(log)-800:]
			}
			fmt.Fprintf(&b, "; its log ends:\n%s", log)
		}
	}
	return b.String()
}

// portTaken reports whether a process's log (metadata node or chunk
// server) says one of its ports was in use.
func (c *ProcCluster) portTaken() bool {
	for i := range c.Procs() {
		b, err := os.ReadFile(c.LogPath(i))
		if err == nil && strings.Contains(string(b), "address already in use") {
			return true
		}
	}
	return false
}

// chunksAlive checks that the president reports every chunk server alive.
func (c *ProcCluster) chunksAlive(ctx context.Context, pool *rpc.Pool) error {
	for _, a := range c.layout.Addrs {
		cc, err := pool.Get(a)
		if err != nil {
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		st, err := wire.NewMetaClient(cc).Status(sctx, &wire.StatusRequest{})
		cancel()
		if err != nil {
			continue
		}
		alive := 0
		known := false
		for _, cs := range st.GetChunkServers() {
			known = known || cs.GetKnown()
			if cs.GetAlive() {
				alive++
			}
		}
		if !known {
			continue // not the president's leader
		}
		if alive >= c.cfg.Chunks && (c.cfg.Chunks < 3 || len(st.GetReplicaGroups()) > 0) {
			return nil
		}
		return fmt.Errorf("%d of %d chunk servers alive, %d replica groups", alive, c.cfg.Chunks, len(st.GetReplicaGroups()))
	}
	return fmt.Errorf("no president leader reported chunk server liveness")
}
