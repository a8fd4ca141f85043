package metanode

// Garbage collection of chunk copies (issue 3, item 8; docs/dataplane.md,
// "Garbage collection").
//
// Unlink and truncate release a file's chunk records in its ministry; the
// bytes stay on the chunk servers until the collector, which runs on the
// president's leader, finds copies that nothing references and deletes
// them after a grace period. A round:
//
//  1. lists every live chunk server's chunks (dataproto TypeList, Group 0);
//  2. only after every reply, reads the replica groups (group 0) and
//     every ministry's chunk records, each with a linearizable read;
//  3. marks as garbage each listed copy whose handle no ministry
//     references, or that sits on a server which is not a member (full or
//     syncing) of the handle's replica group (a replaced member's
//     leftovers);
//  4. deletes (TypeDelete) the copies that have been garbage in every
//     round for at least the grace period, a bounded number per round at
//     a bounded rate.
//
// INVARIANT (why step 2 comes after step 1): a client records a chunk in
// its ministry (SetChunk, committed) before it writes the first byte of
// it. So a copy a server held at list time was recorded before the list,
// and a linearizable read started after the list sees that record unless
// it has been released since. Handles are never reused, so a released
// handle is never referenced again: such a copy stays garbage forever and
// the grace period only protects readers that still cache the old chunk
// list. The membership reason can change back (a server re-added to a
// group), so a mark for it is restarted whenever the group's epoch moves.
//
// The marks (when each copy was first seen garbage) are soft state of this
// leader: a new leader starts empty and waits a full grace period itself.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/govfs/govfs/internal/clustermap"
	"github.com/govfs/govfs/internal/dataproto"
	"github.com/govfs/govfs/internal/engine"
	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/namespace"
	"github.com/govfs/govfs/internal/wire"
	"github.com/prometheus/client_golang/prometheus"
)

// Collector defaults (Config.GC*).
const (
	DefaultGCInterval   = time.Minute
	DefaultGCGrace      = 5 * time.Minute
	DefaultGCMaxDeletes = 10000
	DefaultGCDeleteRate = 500
)

const (
	// gcListParallel bounds the chunk servers listed at once.
	gcListParallel = 8
	// gcScanPage is how many chunk records one read of a ministry visits,
	// so that no single read holds up the group's applies for long.
	gcScanPage = 10000
	// gcCallTimeout bounds one list or delete call (and so how long a
	// stopping node may wait for a round in flight).
	gcCallTimeout = 10 * time.Second
	// gcReadTimeout bounds a linearizable read of one group.
	gcReadTimeout = 10 * time.Second
)

// gcCopy is one chunk server's copy of a chunk.
type gcCopy struct {
	server, handle uint64
}

// gcMark says since when a copy has been garbage, and the epoch of the
// handle's replica group then (0 when the group did not exist).
type gcMark struct {
	since time.Time
	epoch uint64
}

// gcView is what one round observed: the copies held by each server that
// answered its list (listed first), then (read after every list reply)
// the referenced handles and the replica groups. Servers that did not
// answer are in silent: their marks are kept while still garbage, but
// nothing of theirs is deleted in this round.
type gcView struct {
	held   map[uint64][]uint64 // server → handles it holds
	silent map[uint64]bool
	refs   map[uint64]bool
	groups map[uint64]*wire.ReplicaGroup
}

// gcSummary counts one round's decision.
type gcSummary struct {
	held         int // copies listed
	unreferenced int // garbage: no ministry references the handle
	misplaced    int // garbage: referenced, but the server is no member of its group
	due          int // garbage for at least the grace period
	deleting     int // due copies chosen for deletion (at most maxDeletes)
}

// gcGarbage says whether a copy is garbage, and the epoch of its group.
func gcGarbage(v *gcView, c gcCopy) (garbage, referenced bool, epoch uint64) {
	g := v.groups[dataproto.HandleGroup(c.handle)]
	epoch = g.GetEpoch()
	referenced = v.refs[c.handle]
	if !referenced {
		return true, false, epoch
	}
	member := slices.Contains(g.GetMembers(), c.server) || slices.Contains(g.GetSyncing(), c.server)
	return !member, true, epoch
}

// gcPlan is the collector's decision, a pure function of the previous
// marks and what a round observed: it returns the new marks and the
// copies to delete now (at most maxDeletes, ordered by server and
// handle). A copy not garbage now, or no longer held by a server that
// answered, loses its mark; a new garbage copy is marked at now; a copy
// garbage only because its server is no member of its group gets a new
// mark when the group's epoch has moved. A marked copy is due when it has
// been garbage for at least grace.
func gcPlan(marks map[gcCopy]gcMark, v *gcView, now time.Time, grace time.Duration, maxDeletes int) (map[gcCopy]gcMark, []gcCopy, gcSummary) {
	next := map[gcCopy]gcMark{}
	var sum gcSummary
	var due []gcCopy
	for c, m := range marks {
		if !v.silent[c.server] {
			continue
		}
		garbage, referenced, epoch := gcGarbage(v, c)
		if garbage && (!referenced || epoch == m.epoch) {
			next[c] = m
		}
	}
	for server, handles := range v.held {
		for _, h := range handles {
			c := gcCopy{server: server, handle: h}
			sum.held++
			garbage, referenced, epoch := gcGarbage(v, c)
			if !garbage {
				continue
			}
			if referenced {
				sum.misplaced++
			} else {
				sum.unreferenced++
			}
			m, ok := marks[c]
			if !ok || (referenced && m.epoch != epoch) {
				m = gcMark{since: now, epoch: epoch}
			}
			next[c] = m
			if now.Sub(m.since) >= grace {
				due = append(due, c)
			}
		}
	}
	sort.Slice(due, func(i, j int) bool {
		if due[i].server != due[j].server {
			return due[i].server < due[j].server
		}
		return due[i].handle < due[j].handle
	})
	sum.due = len(due)
	if maxDeletes >= 0 && len(due) > maxDeletes {
		due = due[:maxDeletes]
	}
	sum.deleting = len(due)
	return next, due, sum
}

// gcMetrics are the collector's counters on /metrics.
type gcMetrics struct {
	rounds, skipped, deleted, deleteErrors, listErrors prometheus.Counter
	held, garbage                                      prometheus.Gauge
}

func newGCMetrics(reg prometheus.Registerer) gcMetrics {
	m := gcMetrics{
		rounds:       prometheus.NewCounter(prometheus.CounterOpts{Name: "govfs_gc_rounds_total", Help: "Chunk garbage collection rounds completed (president leader)."}),
		skipped:      prometheus.NewCounter(prometheus.CounterOpts{Name: "govfs_gc_rounds_skipped_total", Help: "Chunk garbage collection rounds abandoned before deciding (reads failed, ministry not hosted here, leadership lost)."}),
		deleted:      prometheus.NewCounter(prometheus.CounterOpts{Name: "govfs_gc_chunks_deleted_total", Help: "Garbage chunk copies deleted from chunk servers."}),
		deleteErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "govfs_gc_delete_errors_total", Help: "Deletes of garbage chunk copies that failed (retried in a later round)."}),
		listErrors:   prometheus.NewCounter(prometheus.CounterOpts{Name: "govfs_gc_list_errors_total", Help: "Chunk servers that did not answer a collection round's list."}),
		held:         prometheus.NewGauge(prometheus.GaugeOpts{Name: "govfs_gc_copies_held", Help: "Chunk copies listed by the chunk servers in the last collection round."}),
		garbage:      prometheus.NewGauge(prometheus.GaugeOpts{Name: "govfs_gc_copies_garbage", Help: "Chunk copies seen as garbage in the last collection round (waiting for the grace period or due)."}),
	}
	if reg != nil {
		reg.MustRegister(m.rounds, m.skipped, m.deleted, m.deleteErrors, m.listErrors, m.held, m.garbage)
	}
	return m
}

// collector runs collection rounds on the president's leader.
type collector struct {
	n   *Node
	met gcMetrics

	mu struct {
		sync.Mutex
		// leading is whether this node led the president at the last
		// tick; gen grows each time it stops, so a round started under an
		// earlier leadership neither keeps its marks nor deletes.
		leading bool
		gen     uint64
		running bool
		next    time.Time
		marks   map[gcCopy]gcMark
	}
}

func newCollector(n *Node, reg prometheus.Registerer) *collector {
	return &collector{n: n, met: newGCMetrics(reg)}
}

// tick is called by the maintenance loop: it forgets everything when this
// node does not lead the president group, and starts a round when one is
// due and none is running. The round runs on its own goroutine (it waits
// on chunk servers and quorum reads), owned by the node's WaitGroup.
func (c *collector) tick(now time.Time, leading bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !leading {
		if c.mu.leading {
			c.mu.leading, c.mu.marks = false, nil
			c.mu.gen++
		}
		return
	}
	interval := c.n.cfg.GCInterval
	if !c.mu.leading {
		c.mu.leading, c.mu.next = true, now.Add(interval)
	}
	if interval < 0 || c.mu.running || now.Before(c.mu.next) {
		return
	}
	c.mu.running = true
	gen := c.mu.gen
	c.n.wg.Add(1)
	go func() {
		defer c.n.wg.Done()
		c.run(gen)
		c.mu.Lock()
		c.mu.running = false
		c.mu.next = c.n.cfg.Clock.Now().Add(interval)
		c.mu.Unlock()
	}()
}

// current reports whether leadership generation gen still holds.
func (c *collector) current(gen uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.leading && c.mu.gen == gen
}

// run is one round with a context cancelled when the node stops.
func (c *collector) run(gen uint64) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case <-c.n.stop:
			cancel()
		case <-done:
		}
	}()
	defer func() {
		close(done)
		wg.Wait()
		cancel()
	}()
	if err := c.round(ctx, gen); err != nil {
		c.met.skipped.Inc()
		c.n.log.Warn("chunk garbage collection: round skipped", "err", err)
	}
}

// round runs one collection round; an error means it was abandoned
// before deleting anything.
func (c *collector) round(ctx context.Context, gen uint64) error {
	start := c.n.cfg.Clock.Now()
	pool := &dataproto.Pool{Timeout: gcCallTimeout, MaxIdle: 1, TLS: c.n.cfg.Security.ClientTLS()}
	defer pool.Close()
	var servers []*wire.ChunkServer
	var groups []*wire.ReplicaGroup
	if err := c.n.host.Read(ids.PresidentGroup, func(r engine.Reader, _ uint64) error {
		var err error
		if servers, err = clustermap.ChunkServers(r); err != nil {
			return err
		}
		groups, err = clustermap.ReplicaGroups(r)
		return err
	}); err != nil {
		return fmt.Errorf("read chunk servers: %w", err)
	}

	// (1) List every live server.
	v := &gcView{held: map[uint64][]uint64{}, silent: map[uint64]bool{}, refs: map[uint64]bool{}, groups: map[uint64]*wire.ReplicaGroup{}}
	addrs := map[uint64]string{}
	var live []*wire.ChunkServer
	for _, s := range servers {
		addrs[s.GetId()] = s.GetAddr()
		if up, _ := c.n.chunks.state(s.GetId(), start); up {
			live = append(live, s)
		} else {
			v.silent[s.GetId()] = true
		}
	}
	listErrs := c.listAll(ctx, pool, live, groups, v)
	if err := ctx.Err(); err != nil {
		return err
	}
	// (2) Only now read the groups and the references, linearizably:
	// every ministry's (over RPC from those not hosted here), listed
	// after the servers so that none created meanwhile is missed; a
	// round that cannot read one of them deletes nothing.
	ministries, err := c.ministries()
	if err != nil {
		return err
	}
	// A subtree move carries chunk records from one ministry to another;
	// reads that overlap it could see them in neither. Such a round
	// decides nothing (the next one reads again).
	before, err := c.moveMark()
	if err != nil {
		return err
	}
	if err := c.readState(ctx, v, ministries); err != nil {
		return err
	}
	if after, err := c.moveMark(); err != nil {
		return err
	} else if after != before {
		return errMoveUnderWay
	}
	// (3) Decide.
	now := c.n.cfg.Clock.Now()
	c.mu.Lock()
	if !c.mu.leading || c.mu.gen != gen {
		c.mu.Unlock()
		return fmt.Errorf("no longer the president's leader")
	}
	marks, due, sum := gcPlan(c.mu.marks, v, now, c.n.cfg.GCGrace, c.n.cfg.GCMaxDeletes)
	c.mu.marks = marks
	c.mu.Unlock()
	c.met.held.Set(float64(sum.held))
	c.met.garbage.Set(float64(sum.unreferenced + sum.misplaced))
	// (4) Delete what is due, paced.
	deleted, failed := c.deleteAll(ctx, gen, pool, addrs, v, due)
	c.met.rounds.Inc()
	c.n.log.Info("chunk garbage collection round",
		"servers", len(v.held), "unreachable", listErrs, "held", sum.held,
		"unreferenced", sum.unreferenced, "misplaced", sum.misplaced, "due", sum.due,
		"deleted", deleted, "delete_errors", failed, "took", c.n.cfg.Clock.Now().Sub(start).Round(time.Millisecond))
	return nil
}

// readState fills v's groups and references, reading group 0 and each
// ministry linearizably. Only handles listed in this round or marked
// before are looked up, so refs stays as small as what servers hold.
func (c *collector) readState(ctx context.Context, v *gcView, ministries []ids.GroupID) error {
	if err := c.linearizable(ctx, ids.PresidentGroup); err != nil {
		return err
	}
	if err := c.n.host.Read(ids.PresidentGroup, func(r engine.Reader, _ uint64) error {
		gs, err := clustermap.ReplicaGroups(r)
		for _, g := range gs {
			v.groups[g.GetId()] = g
		}
		return err
	}); err != nil {
		return fmt.Errorf("read replica groups: %w", err)
	}
	wanted := map[uint64]bool{}
	for _, hs := range v.held {
		for _, h := range hs {
			wanted[h] = true
		}
	}
	for cp := range c.marksSnapshot() {
		wanted[cp.handle] = true
	}
	for _, g := range ministries {
		if err := c.readRefs(ctx, g, wanted, v.refs); err != nil {
			return err
		}
	}
	return nil
}

// errMoveUnderWay ends a round whose reads overlapped a subtree move.
var errMoveUnderWay = errors.New("a subtree move was under way while references were read; the next round reads them again")

// moveMark sums up the map's moves as this node's president replica has
// them; a move under way makes it errMoveUnderWay. The mark read after
// the reference reads (which begin with a linearizable read of the map)
// differs from the one read before whenever a move began, went on or
// ended in between.
func (c *collector) moveMark() (string, error) {
	var b strings.Builder
	err := c.n.host.Read(ids.PresidentGroup, func(r engine.Reader, _ uint64) error {
		moves, err := clustermap.Moves(r)
		if err != nil {
			return err
		}
		for _, m := range moves {
			if clustermap.Active(m) {
				return errMoveUnderWay
			}
			fmt.Fprintf(&b, "%d:%d ", m.GetId(), m.GetState())
		}
		return nil
	})
	return b.String(), err
}

// ministries lists the ministry groups whose chunk records are read:
// every ministry of the map (read from this node's president replica,
// linearizably before this is called... see readState). A subtree move
// keeps its chunk records in at least one ministry throughout (the
// source deletes its copy after the target opened its own); moveMark
// keeps a round from reading them in the wrong order.
func (c *collector) ministries() ([]ids.GroupID, error) {
	v := c.n.mapView()
	if v == nil || len(v.ministries) == 0 {
		return nil, fmt.Errorf("the cluster map's ministries are not readable on node %v", c.n.cfg.ID)
	}
	var out []ids.GroupID
	for _, m := range v.ministries {
		out = append(out, ids.GroupID(m.GetGroup()))
	}
	return out, nil
}

// marksSnapshot returns the current marks. NB: the map is never changed
// in place (gcPlan builds a new one, tick drops it), so it may be read
// without the lock.
func (c *collector) marksSnapshot() map[gcCopy]gcMark {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.marks
}

// listAll lists the live servers, gcListParallel at a time; a server
// that fails is silent for this round. It returns how many failed.
func (c *collector) listAll(ctx context.Context, pool *dataproto.Pool, live []*wire.ChunkServer, groups []*wire.ReplicaGroup, v *gcView) int {
	type result struct {
		id      uint64
		handles []uint64
		err     error
	}
	results := make([]result, len(live))
	sem := make(chan struct{}, gcListParallel)
	var wg sync.WaitGroup
	for i, s := range live {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				results[i] = result{id: s.GetId(), err: ctx.Err()}
				return
			}
			defer func() { <-sem }()
			hs, err := listServer(pool, s.GetAddr(), groups)
			results[i] = result{id: s.GetId(), handles: hs, err: err}
		}()
	}
	wg.Wait()
	failed := 0
	for _, r := range results {
		if r.err != nil {
			failed++
			c.met.listErrors.Inc()
			v.silent[r.id] = true
			c.n.log.Warn("chunk garbage collection: list failed; this server is skipped this round", "server", r.id, "err", r.err)
			continue
		}
		v.held[r.id] = r.handles
	}
	return failed
}

// listServer lists every chunk a server holds. A server with too many
// chunks for one reply is listed one replica group at a time instead,
// which misses copies of groups that no longer exist.
func listServer(pool *dataproto.Pool, addr string, groups []*wire.ReplicaGroup) ([]uint64, error) {
	hs, err := listGroup(pool, addr, 0)
	var tooMany *gcTooMany
	if err == nil || !errors.As(err, &tooMany) {
		return hs, err
	}
	hs = nil
	for _, g := range groups {
		more, err := listGroup(pool, addr, g.GetId())
		if err != nil {
			return nil, err
		}
		hs = append(hs, more...)
	}
	return hs, nil
}

// gcTooMany marks a list refused because the reply would be too large.
type gcTooMany struct{ msg string }

func (e *gcTooMany) Error() string { return e.msg }

func listGroup(pool *dataproto.Pool, addr string, group uint64) ([]uint64, error) {
	r, err := pool.Call(addr, &dataproto.Frame{Type: dataproto.TypeList, Group: group})
	if err != nil {
		return nil, err
	}
	switch {
	case r.Status == dataproto.StatusInvalid && group == 0:
		return nil, &gcTooMany{msg: fmt.Sprintf("list %s: %s", addr, r.Payload)}
	case r.Status != dataproto.StatusOK:
		return nil, fmt.Errorf("list %s (group %d): status %d: %s", addr, group, r.Status, r.Payload)
	}
	es, err := dataproto.DecodeList(r.Payload)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", addr, err)
	}
	hs := make([]uint64, 0, len(es))
	for _, e := range es {
		hs = append(hs, e.Handle)
	}
	return hs, nil
}

// linearizable waits until the local replica of g has applied everything
// committed when it was called (raft ReadIndex, confirmed by a quorum).
func (c *collector) linearizable(ctx context.Context, g ids.GroupID) error {
	ctx, cancel := context.WithTimeout(ctx, gcReadTimeout)
	defer cancel()
	idx, err := c.n.host.ReadIndex(ctx, g)
	if err != nil {
		return fmt.Errorf("read index of %v: %w", g, err)
	}
	if err := c.n.host.WaitApplied(ctx, g, idx); err != nil {
		return fmt.Errorf("wait for %v to apply %d: %w", g, idx, err)
	}
	return nil
}

// readRefs adds to refs the handles of wanted that ministry g
// references, reading its chunk table linearizably in pages.
func (c *collector) readRefs(ctx context.Context, g ids.GroupID, wanted, refs map[uint64]bool) error {
	if !c.n.host.HasGroup(g) {
		return c.readRemoteRefs(ctx, g, wanted, refs)
	}
	if err := c.linearizable(ctx, g); err != nil {
		return err
	}
	pos := namespace.ChunkPos{}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		var done bool
		err := c.n.host.Read(g, func(r engine.Reader, _ uint64) error {
			var err error
			pos, done, err = namespace.ChunkRefsFrom(r, pos, gcScanPage, func(_ ids.Ino, ref *wire.ChunkRef) error {
				if wanted[ref.GetHandle()] {
					refs[ref.GetHandle()] = true
				}
				return nil
			})
			return err
		})
		if err != nil {
			return fmt.Errorf("read chunk records of ministry %v: %w", g, err)
		}
		if done {
			return nil
		}
	}
}

// deleteAll deletes the due copies at Config.GCDeleteRate per second,
// stopping when leadership is lost. A failed delete is tried again next
// round; a deleted copy loses its mark next round, when its server no
// longer lists it.
func (c *collector) deleteAll(ctx context.Context, gen uint64, pool *dataproto.Pool, addrs map[uint64]string, v *gcView, due []gcCopy) (deleted, failed int) {
	var gap time.Duration
	if rate := c.n.cfg.GCDeleteRate; rate > 0 {
		gap = time.Second / time.Duration(rate)
	}
	for i, cp := range due {
		if i > 0 && gap > 0 {
			select {
			case <-ctx.Done():
				return deleted, failed
			case <-c.n.cfg.Clock.After(gap):
			}
		}
		if ctx.Err() != nil || !c.current(gen) {
			return deleted, failed
		}
		// The frame names the group and the epoch the decision was made
		// at, for a server that wants to refuse deleting a copy of a group
		// it has become a member of since.
		g := dataproto.HandleGroup(cp.handle)
		r, err := pool.Call(addrs[cp.server], &dataproto.Frame{Type: dataproto.TypeDelete, Handle: cp.handle, Group: g, Epoch: v.groups[g].GetEpoch()})
		if err == nil && r.Status != dataproto.StatusOK {
			err = fmt.Errorf("status %d: %s", r.Status, r.Payload)
		}
		if err != nil {
			failed++
			c.met.deleteErrors.Inc()
			c.n.log.Warn("chunk garbage collection: delete failed", "server", cp.server, "chunk", cp.handle, "err", err)
			continue
		}
		deleted++
		c.met.deleted.Inc()
		c.n.log.Debug("chunk garbage collection: deleted", "server", cp.server, "chunk", cp.handle)
	}
	return deleted, failed
}

// setGCDefaults fills the collector's zero settings with the defaults.
func (c *Config) setGCDefaults() {
	if c.GCInterval == 0 {
		c.GCInterval = DefaultGCInterval
	}
	if c.GCGrace == 0 {
		c.GCGrace = DefaultGCGrace
	}
	if c.GCMaxDeletes == 0 {
		c.GCMaxDeletes = DefaultGCMaxDeletes
	}
	if c.GCDeleteRate == 0 {
		c.GCDeleteRate = DefaultGCDeleteRate
	}
}

// readRemoteRefs is readRefs for a ministry with no replica here: its
// leader pages through its chunk table, each page read linearizably.
func (c *collector) readRemoteRefs(ctx context.Context, g ids.GroupID, wanted, refs map[uint64]bool) error {
	var ino, index uint64
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		rctx, cancel := context.WithTimeout(ctx, gcReadTimeout)
		resp, err := c.n.readLeader(rctx, g, &wire.ReadRequest{
			Op: &wire.ReadRequest_ChunkTable{ChunkTable: &wire.ChunkTableReq{Ino: ino, Index: index, Limit: gcScanPage}}})
		cancel()
		if err != nil {
			return fmt.Errorf("read chunk records of ministry %v: %w", g, err)
		}
		for _, ref := range resp.GetChunks() {
			if wanted[ref.GetHandle()] {
				refs[ref.GetHandle()] = true
			}
		}
		if resp.GetEof() {
			return nil
		}
		next := resp.GetNextCookie()
		if len(next) != 16 {
			return fmt.Errorf("read chunk records of ministry %v: bad resume position", g)
		}
		ino, index = binary.BigEndian.Uint64(next), binary.BigEndian.Uint64(next[8:])
	}
}
