package metanode

// The president's leader carries out subtree moves recorded in the map
// (docs/metadata.md, "Moves"). Every step is idempotent and the map
// records where a move stands, so a new leader (or the same one after a
// failed step) simply runs the move again from its recorded state:
//
//	COPYING    freeze the subtree at the source (its root, then what
//	           each frozen directory names, walking down), read its keys
//	           a page at a time and import each page at the target, then
//	           record COMMITTED: the decision
//	COMMITTED  open the copy at the target, finish at the source (drop
//	           the copy, forwarding records, referral), then record DONE
//
// Before COMMITTED the source's copy is authoritative and a refusal
// (renamed meanwhile, a hard link across the boundary, a ministry that
// refuses) aborts the move: recorded first, then the source is unfrozen
// and the target's partial copy deleted. After it the target's copy is
// authoritative and the move only goes forward. COPYING is bounded
// (moveCopyLimit): writes in the subtree pause while it lasts, so a move
// that cannot get there in time (leases or locks not given back, a
// ministry without a leader) is aborted rather than left hanging.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"time"

	"github.com/govfs/govfs/internal/clustermap"
	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/namespace"
	"github.com/govfs/govfs/internal/wire"
)

// moveRunner runs each active move in its own goroutine while this node
// leads the president group.
type moveRunner struct {
	mu      sync.Mutex
	running map[uint64]*moveRun
	// cleaned: aborted moves whose source was unfrozen under this
	// leadership.
	cleaned map[uint64]bool
}

type moveRun struct{ cancel context.CancelFunc }

// tick starts a runner for every active move not running yet, and stops
// them all when leadership was lost.
func (m *moveRunner) tick(n *Node, leading bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !leading {
		for id, r := range m.running {
			r.cancel()
			delete(m.running, id)
		}
		m.cleaned = nil
		return
	}
	select {
	case <-n.stop:
		return // no new goroutine once Stop began waiting
	default:
	}
	v := n.mapView()
	if v == nil {
		return
	}
	if m.running == nil {
		m.running = map[uint64]*moveRun{}
	}
	if m.cleaned == nil {
		m.cleaned = map[uint64]bool{}
	}
	for _, mv := range v.moves {
		aborted := mv.GetState() == wire.MoveState_MOVE_ABORTED && !m.cleaned[mv.GetId()]
		if !clustermap.Active(mv) && !aborted {
			continue
		}
		if _, ok := m.running[mv.GetId()]; ok {
			continue
		}
		ctx, cancel := context.WithCancel(context.Background())
		run := &moveRun{cancel: cancel}
		m.running[mv.GetId()] = run
		id := mv.GetId()
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			defer func() {
				m.mu.Lock()
				// Only this run's entry: a later run (after a
				// leadership flap) may have replaced it.
				if m.running[id] == run {
					delete(m.running, id)
				}
				m.mu.Unlock()
				cancel()
			}()
			if aborted {
				if err := n.cleanupAborted(ctx, mv); err != nil {
					n.log.Warn("subtree move: unfreeze after abort; will try again", "move", id, "err", err)
					return
				}
				m.mu.Lock()
				if m.cleaned != nil {
					m.cleaned[id] = true
				}
				m.mu.Unlock()
				return
			}
			go func() {
				select {
				case <-n.stop:
					cancel()
				case <-ctx.Done():
				}
			}()
			if err := n.runMove(ctx, id); err != nil {
				n.log.Warn("subtree move: will try again", "move", id, "err", err)
				// Not at once: the next tick starts it again.
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
			}
		}()
	}
}

// moveStepTimeout bounds one step; a step that times out is tried again
// by the next runner (every step is idempotent).
const moveStepTimeout = 30 * time.Second

// runMove drives move id until it is DONE or ABORTED.
func (n *Node) runMove(ctx context.Context, id uint64) error {
	for {
		v := n.mapView()
		if v == nil {
			return fmt.Errorf("move %d: the cluster map is not readable here", id)
		}
		var mv *wire.Move
		for _, m := range v.moves {
			if m.GetId() == id {
				mv = m
			}
		}
		if mv == nil {
			return fmt.Errorf("move %d is not in the map", id)
		}
		var err error
		switch mv.GetState() {
		case wire.MoveState_MOVE_COPYING:
			err = n.moveCopy(ctx, mv)
		case wire.MoveState_MOVE_COMMITTED:
			if err = n.movePause(ctx, mv, "committed"); err == nil {
				err = n.moveFinish(ctx, mv)
			}
		default:
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// setMoveState records a move's new state in the president's log.
func (n *Node) setMoveState(ctx context.Context, mv *wire.Move, st wire.MoveState, why string) error {
	res, err := n.proposeAnywhere(ctx, ids.PresidentGroup, &wire.Command{Version: 1, NowNs: n.cfg.Clock.Now().UnixNano(),
		Op: &wire.Command_MoveState{MoveState: &wire.MoveStateOp{Id: mv.GetId(), State: st, Error: why}}})
	if err != nil {
		return fmt.Errorf("record move %d as %v: %w", mv.GetId(), st, err)
	}
	if res.GetErrno() != 0 {
		return fmt.Errorf("record move %d as %v: %s", mv.GetId(), st, res.GetMessage())
	}
	if st == wire.MoveState_MOVE_ABORTED {
		n.log.Warn("subtree move aborted", "move", mv.GetId(), "path", mv.GetPath(), "why", why)
	} else {
		n.log.Info("subtree move", "move", mv.GetId(), "path", mv.GetPath(), "from", mv.GetSource(), "to", mv.GetTarget(), "state", st.String())
	}
	return nil
}

// ministryCall proposes cmd to ministry g and returns the result (a
// refusal is a result with an errno, not an error).
func (n *Node) ministryCall(ctx context.Context, g uint64, cmd *wire.Command) (*wire.Result, error) {
	ctx, cancel := context.WithTimeout(ctx, moveStepTimeout)
	defer cancel()
	cmd.Version, cmd.NowNs = 1, n.cfg.Clock.Now().UnixNano()
	// Always through the minister's Mutate handler, even when it is this
	// node: that is where leases on the subtree are recalled first.
	return n.mutateLeader(ctx, ids.GroupID(g), cmd)
}

// moveCopyLimit bounds how long a move may stay in COPYING (writes in
// the subtree pause meanwhile) before it is aborted.
const moveCopyLimit = 2 * time.Minute

// exportPageBytes bounds one page of a subtree's keys (an ExportKeys
// answer, an ImportSubtreeOp in the target's log).
const exportPageBytes = 512 << 10

// moveRefused is a step a ministry refused (not a transport failure):
// before COMMITTED it aborts the move.
type moveRefused struct{ msg string }

func (e *moveRefused) Error() string { return e.msg }

func (n *Node) moveCopy(ctx context.Context, mv *wire.Move) error {
	err := n.freezeAndCopy(ctx, mv)
	var refused *moveRefused
	switch {
	case errors.As(err, &refused):
		return n.abortMove(ctx, mv, refused.msg)
	case err != nil && n.cfg.Clock.Now().Sub(time.Unix(0, mv.GetBegunNs())) > moveCopyLimit:
		return n.abortMove(ctx, mv, fmt.Sprintf("%s could not be frozen and copied within %v (last: %v); writes in it go on; assign again",
			mv.GetPath(), moveCopyLimit, err))
	case err != nil:
		return err
	}
	if err := n.movePause(ctx, mv, "copied"); err != nil {
		return err
	}
	return n.setMoveState(ctx, mv, wire.MoveState_MOVE_COMMITTED, "")
}

// movePause waits at a named step when a test asked for it
// (Config.MovePauses).
func (n *Node) movePause(ctx context.Context, mv *wire.Move, step string) error {
	d := n.cfg.MovePauses[step]
	if d <= 0 {
		return nil
	}
	n.log.Warn("testing: move paused", "move", mv.GetId(), "step", step, "for", d)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// step proposes a move step to ministry g; a refusal is a moveRefused.
func (n *Node) step(ctx context.Context, g uint64, what string, cmd *wire.Command) (*wire.Result, error) {
	res, err := n.ministryCall(ctx, g, cmd)
	if err != nil {
		return nil, fmt.Errorf("%s at ministry %d: %w", what, g, err)
	}
	if res.GetErrno() != 0 {
		return nil, &moveRefused{fmt.Sprintf("ministry %d refused to %s: %s", g, what, errMessage(res))}
	}
	return res, nil
}

func (n *Node) freezeAndCopy(ctx context.Context, mv *wire.Move) error {
	if _, err := n.step(ctx, mv.GetSource(), "freeze "+mv.GetPath(), &wire.Command{Op: &wire.Command_ExportSubtree{ExportSubtree: &wire.ExportSubtreeOp{
		Move: mv.GetId(), Ino: mv.GetIno(), Parent: mv.GetParent(), Name: mv.GetName(), Target: mv.GetTarget()}}}); err != nil {
		return err
	}
	start := n.cfg.Clock.Now()
	links, err := n.freezeWalk(ctx, mv)
	if err != nil {
		return err
	}
	frozen := n.cfg.Clock.Now()
	pages, keys, err := n.copySubtree(ctx, mv, links)
	if err != nil {
		return err
	}
	n.log.Info("subtree move: frozen and copied", "move", mv.GetId(), "path", mv.GetPath(), "files", len(links),
		"freeze", frozen.Sub(start).Round(time.Millisecond), "keys", keys, "pages", pages, "copy", n.cfg.Clock.Now().Sub(frozen).Round(time.Millisecond))
	return nil
}

// freezeWalk freezes the subtree below its (frozen) root, directory by
// directory, and counts the entries naming each non-directory (to find
// hard links that cross the boundary). A frozen directory's entries
// cannot change, so what the walk lists is what moves.
func (n *Node) freezeWalk(ctx context.Context, mv *wire.Move) (map[uint64]uint32, error) {
	links := map[uint64]uint32{}
	queue := []uint64{mv.GetIno()}
	for len(queue) > 0 {
		dir := queue[0]
		queue = queue[1:]
		var cookie []byte
		for {
			cctx, cancel := context.WithTimeout(ctx, moveStepTimeout)
			resp, err := n.readLeader(cctx, ids.GroupID(mv.GetSource()), &wire.ReadRequest{
				Op: &wire.ReadRequest_Readdir{Readdir: &wire.ReaddirReq{Ino: dir, Cookie: cookie, Limit: freezePage}}})
			cancel()
			if err != nil {
				return nil, fmt.Errorf("list directory %v of %s at ministry %d: %w", dir, mv.GetPath(), mv.GetSource(), err)
			}
			var page []*wire.DirEntry
			for _, e := range resp.GetEntries() {
				if e.GetMinistry() != 0 {
					continue // a referral: only its entry moves
				}
				if e.GetType() == wire.FileType_DIRECTORY {
					queue = append(queue, e.GetIno())
				} else {
					links[e.GetIno()]++
				}
				page = append(page, &wire.DirEntry{Name: e.GetName(), Ino: e.GetIno(), Type: e.GetType()})
			}
			if len(page) > 0 {
				if _, err := n.step(ctx, mv.GetSource(), fmt.Sprintf("freeze directory %v of %s", dir, mv.GetPath()),
					&wire.Command{Op: &wire.Command_FreezeEntries{FreezeEntries: &wire.FreezeEntriesOp{
						Move: mv.GetId(), Dir: dir, Entries: page, Target: mv.GetTarget()}}}); err != nil {
					return nil, err
				}
			}
			if resp.GetEof() || len(resp.GetEntries()) == 0 {
				break
			}
			cookie = resp.GetNextCookie()
		}
	}
	return links, nil
}

// copySubtree reads the frozen subtree's keys from the source a page at
// a time and installs each page at the target (memory stays bounded by
// a page), refusing a file with links outside the subtree.
func (n *Node) copySubtree(ctx context.Context, mv *wire.Move, links map[uint64]uint32) (pages, keys int, err error) {
	var after []byte
	for {
		cctx, cancel := context.WithTimeout(ctx, moveStepTimeout)
		resp, err := n.readLeader(cctx, ids.GroupID(mv.GetSource()), &wire.ReadRequest{
			Op: &wire.ReadRequest_ExportKeys{ExportKeys: &wire.ExportKeysReq{Move: mv.GetId(), Ino: mv.GetIno(), After: after, Limit: 1000}}})
		cancel()
		if err != nil {
			return pages, keys, fmt.Errorf("read %s from ministry %d: %w", mv.GetPath(), mv.GetSource(), err)
		}
		for _, kv := range resp.GetKvs() {
			in, ok, err := namespace.MovedInode(kv)
			if err != nil {
				return pages, keys, err
			}
			if !ok || in.GetAttr().GetType() == wire.FileType_DIRECTORY {
				continue
			}
			if nl, inside := in.GetAttr().GetNlink(), links[in.GetAttr().GetIno()]; nl != inside {
				return pages, keys, &moveRefused{fmt.Sprintf("a file in %s (inode %v) has %d hard links, %d of them inside: a hard link across a ministry boundary cannot move; remove the outside links or assign a directory that holds all of them",
					mv.GetPath(), ids.Ino(in.GetAttr().GetIno()), nl, inside)}
			}
		}
		if len(resp.GetKvs()) > 0 {
			if _, err := n.step(ctx, mv.GetTarget(), "install a page of "+mv.GetPath(), &wire.Command{Op: &wire.Command_ImportSubtree{ImportSubtree: &wire.ImportSubtreeOp{
				Move: mv.GetId(), Ino: mv.GetIno(), Parent: mv.GetParent(), Name: mv.GetName(), Kvs: resp.GetKvs(), Source: mv.GetSource()}}}); err != nil {
				return pages, keys, err
			}
			pages++
			keys += len(resp.GetKvs())
		}
		if resp.GetEof() || len(resp.GetKvs()) == 0 {
			return pages, keys, nil
		}
		after = resp.GetNextCookie()
	}
}

// abortMove records the abort (refused by the map when the move was
// committed meanwhile, by a runner of a deposed leader, so a committed
// move is never undone), then cleans up.
func (n *Node) abortMove(ctx context.Context, mv *wire.Move, why string) error {
	if err := n.setMoveState(ctx, mv, wire.MoveState_MOVE_ABORTED, why); err != nil {
		return err
	}
	return n.cleanupAborted(ctx, mv)
}

// cleanupAborted lifts the source's freeze of an aborted move and
// deletes the target's partial copy (no-ops when there is none); the
// runner of a new leader does it again for every aborted move it sees,
// in case the previous one stopped in between.
func (n *Node) cleanupAborted(ctx context.Context, mv *wire.Move) error {
	abort := func(dropCopy bool) func(uint64) *wire.Command {
		return func(from uint64) *wire.Command {
			return &wire.Command{Op: &wire.Command_AbortExport{AbortExport: &wire.AbortExportOp{
				Move: mv.GetId(), Ino: mv.GetIno(), DropCopy: dropCopy, From: from}}}
		}
	}
	if err := n.pagedStep(ctx, mv.GetSource(), "unfreeze "+mv.GetPath(), 0, abort(false)); err != nil {
		return err
	}
	if mv.GetNewMinistry() {
		// The ministry was made for this move and never held anything:
		// dissolve it (its members drop their replicas with the partial
		// copy) instead of leaving an empty group running.
		if dissolved, err := n.dissolveMinistry(ctx, mv); err != nil || dissolved {
			return err
		}
	}
	return n.pagedStep(ctx, mv.GetTarget(), "drop the partial copy of "+mv.GetPath(), 0, abort(true))
}

// dissolveMinistry removes the target an aborted `assign --new` created
// from the map; false when the president refuses (a ministry meanwhile
// given something keeps running, and only the partial copy goes).
func (n *Node) dissolveMinistry(ctx context.Context, mv *wire.Move) (bool, error) {
	res, err := n.proposeAnywhere(ctx, ids.PresidentGroup, &wire.Command{Version: 1, NowNs: n.cfg.Clock.Now().UnixNano(),
		Op: &wire.Command_DissolveMinistry{DissolveMinistry: &wire.DissolveMinistryOp{Ministry: mv.GetTarget()}}})
	if err != nil {
		return false, fmt.Errorf("dissolve ministry %d after move %d aborted: %w", mv.GetTarget(), mv.GetId(), err)
	}
	if res.GetErrno() != 0 {
		n.log.Info("ministry kept after its move aborted", "ministry", mv.GetTarget(), "move", mv.GetId(), "why", res.GetMessage())
		return false, nil
	}
	n.log.Info("ministry dissolved: its move aborted before it held anything", "ministry", mv.GetTarget(), "move", mv.GetId())
	return true, nil
}

// pagedStep sends the paged move step cmd(from) until it answers that it
// is done, each page resuming where the previous one ended (a seek past
// the records already done, not a walk over their tombstones).
func (n *Node) pagedStep(ctx context.Context, g uint64, what string, from uint64, cmd func(from uint64) *wire.Command) error {
	return n.pagedStepPaced(ctx, g, what, from, cmd, 0)
}

// freezePage is how many entries one freeze command covers. Each is one
// apply at the source, which also serves the subtree's neighbours: with
// 1,024, `govfs bench move` saw 0.37 of the outside throughput during a
// move of 20,000 files, with 512 (and 256-key deletion steps) 0.62, the
// pause inside unchanged (more, smaller pages interleave with the
// clients' commands instead of holding them up).
const freezePage = 512

// cleanupPace is the pause after each page of a move's background
// deletion, as a multiple of the time the page took: 1 leaves the
// ministry at least half of its time for its clients.
const cleanupPace = 1.0

// pagedStepPaced is pagedStep waiting pace × a page's time after each.
func (n *Node) pagedStepPaced(ctx context.Context, g uint64, what string, from uint64, cmd func(from uint64) *wire.Command, pace float64) error {
	for {
		t0 := n.cfg.Clock.Now()
		res, err := n.step(ctx, g, what, cmd(from))
		if err != nil {
			return err
		}
		if !res.GetMore() {
			return nil
		}
		from = res.GetStart()
		if pace > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Duration(pace * float64(n.cfg.Clock.Now().Sub(t0)))):
			}
		}
	}
}

func (n *Node) moveFinish(ctx context.Context, mv *wire.Move) error {
	start := n.cfg.Clock.Now()
	// Committed moves only go forward: a refusal here is retried, loudly.
	// The first page at the source makes it send clients to the target
	// (and its entry a referral); the first page at the target opens the
	// copy. Clients wait no longer than that: the rest only deletes
	// records nobody sees any more.
	finish := func(from uint64) *wire.Command {
		return &wire.Command{Op: &wire.Command_FinishExport{FinishExport: &wire.FinishExportOp{
			Move: mv.GetId(), Ino: mv.GetIno(), Parent: mv.GetParent(), Name: mv.GetName(), Target: mv.GetTarget(), From: from}}}
	}
	res, err := n.step(ctx, mv.GetSource(), "finish "+mv.GetPath(), finish(0))
	if err != nil {
		return err
	}
	if err := n.movePause(ctx, mv, "opening"); err != nil {
		return err
	}
	if err := n.pagedStep(ctx, mv.GetTarget(), "open "+mv.GetPath(), 0, func(from uint64) *wire.Command {
		return &wire.Command{Op: &wire.Command_ImportSubtree{ImportSubtree: &wire.ImportSubtreeOp{
			Move: mv.GetId(), Ino: mv.GetIno(), Parent: mv.GetParent(), Name: mv.GetName(), Source: mv.GetSource(), Activate: true, From: from}}}
	}); err != nil {
		return err
	}
	open := n.cfg.Clock.Now()
	if res.GetMore() {
		// Nobody waits for the rest (records no client sees any more):
		// paced, so that the source's own clients keep most of its time.
		if err := n.pagedStepPaced(ctx, mv.GetSource(), "finish "+mv.GetPath(), res.GetStart(), finish, cleanupPace); err != nil {
			return err
		}
	}
	n.log.Info("subtree move: open at the target, finished at the source", "move", mv.GetId(), "path", mv.GetPath(),
		"open", open.Sub(start).Round(time.Millisecond), "finish", n.cfg.Clock.Now().Sub(open).Round(time.Millisecond))
	return n.setMoveState(ctx, mv, wire.MoveState_MOVE_DONE, "")
}

func errMessage(res *wire.Result) string {
	if m := res.GetMessage(); m != "" {
		return m
	}
	return syscall.Errno(res.GetErrno()).Error()
}
