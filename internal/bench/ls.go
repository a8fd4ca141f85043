package bench

// The ls benchmark (issue 11; the thesis' Fig 13/14): clients list small
// directories spread over K ministries as fast as they can, in two
// orders, and the latency distribution of single requests is reported.
// The tree is /benchls-<random>/s1 … sK, each directory holding Files
// empty files; s2 … sK are assigned to new ministries first (s1 stays
// with the root ministry), as the thesis put its ministries at /2 … /n.
// Each order runs with fresh Clients that know the directories' inode
// numbers but not their owners: the first request for a delegated
// directory is redirected (the share is reported), later ones go
// straight to its ministry. Listings are session-consistent reads served
// by any replica, one RPC each, never from a cache.

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/govfs/govfs/client"
	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/wire"
)

// Request orders of the ls benchmark.
const (
	// OrderBatch: a client sends all its requests for one directory,
	// then all for the next.
	OrderBatch = "batch"
	// OrderStride: a client's consecutive requests go to the next
	// directory each time (round robin).
	OrderStride = "stride"
)

// ls benchmark defaults (the thesis' set-up).
const (
	DefaultLsClients  = 30
	DefaultLsRequests = 60_000
	DefaultLsFiles    = 10
)

// LsConfig configures RunLs.
type LsConfig struct {
	MetaAddrs []string
	// TLSDir is the client certificate directory ("" for an --insecure cluster).
	TLSDir string
	// Ministries is K: the directories s1 … sK, s2 … sK in new ministries.
	Ministries int
	// Clients list concurrently, each with its own client.Client;
	// Requests is the total over all clients.
	Clients, Requests int
	// Files in each directory.
	Files     int
	Orders    []string
	OpTimeout time.Duration
	// Cleanup gives the ministries' subtrees back and removes the tree.
	Cleanup bool
}

// Testbed says on what cluster a run was measured: a local one started
// for it (its metadata nodes and their CPU cap, 0 = none), or a running
// one given with --meta (MetaNodes 0: not known). It goes into each JSON
// line so that figures from different set-ups are not compared by
// mistake.
type Testbed struct {
	MetaNodes int     `json:"meta_nodes,omitempty"`
	NodeCPU   float64 `json:"node_cpu,omitempty"`
	External  bool    `json:"external_cluster,omitempty"`
	// Insecure: the cluster ran plaintext (--insecure), not mutual TLS.
	Insecure bool `json:"insecure,omitempty"`
}

// LsReport is one (K, order) run of the ls benchmark.
type LsReport struct {
	Testbed
	Ministries  int     `json:"ministries"`
	Order       string  `json:"order"`
	Clients     int     `json:"clients"`
	Requests    int     `json:"requests"`
	FilesPerDir int     `json:"files_per_dir"`
	Seconds     float64 `json:"seconds"`
	OpsPerSec   float64 `json:"ops_per_s"`
	P50Ms       float64 `json:"p50_ms"`
	P90Ms       float64 `json:"p90_ms"`
	P99Ms       float64 `json:"p99_ms"`
	P999Ms      float64 `json:"p999_ms"`
	MaxMs       float64 `json:"max_ms"`
	// Redirected is the share of requests that met a REDIRECT.
	Redirected float64 `json:"redirected"`
	Failed     int     `json:"failed"`
}

// JSON is the report as one JSON line.
func (r *LsReport) JSON() ([]byte, error) {
	return json.Marshal(struct {
		Workload string `json:"workload"`
		*LsReport
	}{"ls", r})
}

func (r *LsReport) String() string {
	return fmt.Sprintf("ls %d ministries %-6s %6.0f req/s  p50 %.3f  p90 %.3f  p99 %.3f  p99.9 %.3f  max %.1f ms  redirected %.4f%%",
		r.Ministries, r.Order, r.OpsPerSec, r.P50Ms, r.P90Ms, r.P99Ms, r.P999Ms, r.MaxMs, 100*r.Redirected)
}

// RunLs builds the tree for cfg.Ministries and runs each order on it.
func RunLs(ctx context.Context, cfg LsConfig, out io.Writer) ([]*LsReport, error) {
	switch {
	case len(cfg.MetaAddrs) == 0:
		return nil, errors.New("bench ls: no metadata node addresses")
	case cfg.Ministries < 1 || cfg.Clients < 1 || cfg.Requests < cfg.Clients || cfg.Files < 1:
		return nil, fmt.Errorf("bench ls: ministries %d and clients %d must be positive, requests %d at least one per client, files %d positive",
			cfg.Ministries, cfg.Clients, cfg.Requests, cfg.Files)
	}
	for _, o := range cfg.Orders {
		if o != OrderBatch && o != OrderStride {
			return nil, fmt.Errorf("bench ls: order %q: give %s or %s", o, OrderBatch, OrderStride)
		}
	}
	setup := &metaRun{cfg: MetaConfig{MetaAddrs: cfg.MetaAddrs, TLSDir: cfg.TLSDir, Conns: 1, OpTimeout: cfg.OpTimeout}}
	defer setup.closeClients()
	if err := setup.connect(ctx); err != nil {
		return nil, err
	}
	dirs, err := setup.lsTree(ctx, cfg)
	if cfg.Cleanup && setup.top != 0 {
		defer func() {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
			defer cancel()
			if err := setup.lsCleanup(cctx, dirs); err != nil {
				fmt.Fprintf(out, "warning: could not remove /%s: %v\n", setup.topName, err)
			}
		}()
	}
	if err != nil {
		return nil, err
	}
	var reps []*LsReport
	for _, order := range cfg.Orders {
		rep, err := runLsOrder(ctx, cfg, dirs, order)
		if err != nil {
			return reps, err
		}
		fmt.Fprintln(out, rep)
		reps = append(reps, rep)
	}
	return reps, nil
}

// lsTree makes /benchls-<random>/s1 … sK with cfg.Files files each and
// assigns s2 … sK to new ministries (untimed). It returns the
// directories' inode numbers.
func (r *metaRun) lsTree(ctx context.Context, cfg LsConfig) ([]ids.Ino, error) {
	var b [6]byte
	if _, err := crand.Read(b[:]); err != nil {
		return nil, err
	}
	r.topName = "benchls-" + hex.EncodeToString(b[:])
	cl := r.clients[0]
	a, err := cl.MkdirAt(ctx, ids.RootIno, r.topName, 0o755)
	if err != nil {
		return nil, fmt.Errorf("bench ls: mkdir /%s: %w", r.topName, err)
	}
	r.top = ids.Ino(a.GetIno())
	var dirs []ids.Ino
	for i := 1; i <= cfg.Ministries; i++ {
		name := "s" + strconv.Itoa(i)
		a, err := cl.MkdirAt(ctx, r.top, name, 0o755)
		if err != nil {
			return dirs, fmt.Errorf("bench ls: mkdir /%s/%s: %w", r.topName, name, err)
		}
		dirs = append(dirs, ids.Ino(a.GetIno()))
		if i > 1 {
			path := "/" + r.topName + "/" + name
			mv, err := cl.Assign(ctx, path, client.AssignOptions{New: true})
			if err == nil && mv.GetState() != wire.MoveState_MOVE_DONE {
				err = fmt.Errorf("move %d ended %v: %s", mv.GetId(), mv.GetState(), mv.GetError())
			}
			if err != nil {
				return dirs, fmt.Errorf("bench ls: assign %s to a new ministry: %w", path, err)
			}
			r.ministries = append(r.ministries, mv.GetTarget())
		}
		for f := range cfg.Files {
			if _, err := cl.CreateAt(ctx, dirs[i-1], "f"+strconv.Itoa(f), 0o644, true); err != nil {
				return dirs, fmt.Errorf("bench ls: create in /%s/%s: %w", r.topName, name, err)
			}
		}
	}
	return dirs, nil
}

// lsCleanup empties the directories, gives the delegated ones back and
// removes the tree.
func (r *metaRun) lsCleanup(ctx context.Context, dirs []ids.Ino) error {
	cl := r.clients[0]
	for i, d := range dirs {
		if err := removeTree(ctx, cl, r.top, "s"+strconv.Itoa(i+1), d); err != nil && i == 0 {
			return err
		}
		if i > 0 && i <= len(r.ministries) {
			// Empty now: give it back (a delegated root cannot be
			// removed from its parent's ministry), then remove it.
			path := fmt.Sprintf("/%s/s%d", r.topName, i+1)
			if _, err := cl.Unassign(ctx, path); err != nil {
				return fmt.Errorf("give %s back: %w", path, err)
			}
			if err := ignoreENOENT(cl.RmdirAt(ctx, r.top, "s"+strconv.Itoa(i+1))); err != nil {
				return err
			}
		}
	}
	return removeTree(ctx, cl, ids.RootIno, r.topName, r.top)
}

// runLsOrder runs one order with fresh Clients and reports it.
func runLsOrder(ctx context.Context, cfg LsConfig, dirs []ids.Ino, order string) (*LsReport, error) {
	run := &metaRun{cfg: MetaConfig{MetaAddrs: cfg.MetaAddrs, TLSDir: cfg.TLSDir, Conns: cfg.Clients, OpTimeout: cfg.OpTimeout}}
	defer run.closeClients()
	if err := run.connect(ctx); err != nil {
		return nil, err
	}
	per := cfg.Requests / cfg.Clients
	recs := make([]recorder, cfg.Clients)
	start := time.Now()
	var wg sync.WaitGroup
	for k := range cfg.Clients {
		wg.Go(func() {
			cl, rec := run.clients[k], &recs[k]
			rec.ctx = ctx
			for i := range per {
				var d int
				if order == OrderBatch {
					// Clients start at different directories, as the
					// thesis' clients did not all begin with /1.
					d = (k + i*len(dirs)/per) % len(dirs)
				} else {
					d = (k + i) % len(dirs)
				}
				rec.do(func() error {
					ents, err := cl.ReaddirAll(ctx, dirs[d])
					if err == nil && len(ents) != cfg.Files {
						err = fmt.Errorf("listing of directory %d: %d entries, want %d", d+1, len(ents), cfg.Files)
					}
					return err
				})
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	rep := &LsReport{Ministries: cfg.Ministries, Order: order, Clients: cfg.Clients, Requests: per * cfg.Clients,
		FilesPerDir: cfg.Files, Seconds: elapsed.Seconds()}
	var lat []time.Duration
	var firstErr error
	for _, rec := range recs {
		lat = append(lat, rec.lat...)
		rep.Failed += rec.errs
		if firstErr == nil {
			firstErr = rec.firstErr
		}
	}
	slices.Sort(lat)
	rep.OpsPerSec = float64(len(lat)) / elapsed.Seconds()
	rep.P50Ms, rep.P90Ms = ms(Percentile(lat, 50)), ms(Percentile(lat, 90))
	rep.P99Ms, rep.P999Ms, rep.MaxMs = ms(Percentile(lat, 99)), ms(Percentile(lat, 99.9)), ms(Percentile(lat, 100))
	var calls, redirected uint64
	for _, cl := range run.clients {
		st := cl.RouteStats()
		calls, redirected = calls+st.Calls, redirected+st.Redirected
	}
	if calls > 0 {
		rep.Redirected = float64(redirected) / float64(calls)
	}
	if firstErr != nil {
		return rep, fmt.Errorf("bench ls: %d of %d requests failed, first: %w", rep.Failed, rep.Requests, firstErr)
	}
	return rep, nil
}
