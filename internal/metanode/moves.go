package metanode

// The president's leader carries out subtree moves recorded in the map
// (docs/metadata.md, "Moves"). Every step is idempotent and the map
// records where a move stands, so a new leader (or the same one after a
// failed step) simply runs the move again from its recorded state:
//
//	COPYING    export (freeze) at the source, read its keys, import them
//	           at the target, then record COMMITTED: the decision
//	COMMITTED  finish at the source (drop the copy, forwarding records,
//	           referral), then record DONE
//
// Before COMMITTED the source's copy is authoritative and a refusal
// (the directory is not empty, it was renamed meanwhile) aborts the move;
// after it the target's is, and the move only goes forward.

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"time"

	"github.com/govfs/govfs/internal/clustermap"
	"github.com/govfs/govfs/internal/ids"
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
				if err := n.unfreeze(ctx, mv); err != nil {
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
			err = n.moveFinish(ctx, mv)
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

func (n *Node) moveCopy(ctx context.Context, mv *wire.Move) error {
	res, err := n.ministryCall(ctx, mv.GetSource(), &wire.Command{Op: &wire.Command_ExportSubtree{ExportSubtree: &wire.ExportSubtreeOp{
		Move: mv.GetId(), Ino: mv.GetIno(), Parent: mv.GetParent(), Name: mv.GetName(), Target: mv.GetTarget()}}})
	if err != nil {
		return fmt.Errorf("freeze %s at ministry %d: %w", mv.GetPath(), mv.GetSource(), err)
	}
	if e := res.GetErrno(); e != 0 {
		// Refused: nothing was frozen; the subtree stays where it is.
		return n.setMoveState(ctx, mv, wire.MoveState_MOVE_ABORTED, fmt.Sprintf("ministry %d refused to give up %s: %s",
			mv.GetSource(), mv.GetPath(), errMessage(res)))
	}
	kvs, err := n.exportKeys(ctx, mv)
	if err != nil {
		return fmt.Errorf("read %s from ministry %d: %w", mv.GetPath(), mv.GetSource(), err)
	}
	res, err = n.ministryCall(ctx, mv.GetTarget(), &wire.Command{Op: &wire.Command_ImportSubtree{ImportSubtree: &wire.ImportSubtreeOp{
		Move: mv.GetId(), Ino: mv.GetIno(), Parent: mv.GetParent(), Name: mv.GetName(), Kvs: kvs, Source: mv.GetSource()}}})
	if err != nil {
		return fmt.Errorf("install %s at ministry %d: %w", mv.GetPath(), mv.GetTarget(), err)
	}
	if res.GetErrno() != 0 {
		// The target refused the copy. The abort is recorded first: the
		// map refuses it if the move was committed meanwhile (a runner
		// of a deposed leader), and only then is the source unfrozen,
		// so a committed move is never undone.
		why := fmt.Sprintf("ministry %d refused the copy of %s: %s", mv.GetTarget(), mv.GetPath(), errMessage(res))
		if err := n.setMoveState(ctx, mv, wire.MoveState_MOVE_ABORTED, why); err != nil {
			return err
		}
		return n.unfreeze(ctx, mv)
	}
	return n.setMoveState(ctx, mv, wire.MoveState_MOVE_COMMITTED, "")
}

// unfreeze lifts the source's freeze of an aborted move (a no-op when
// there is none); the runner of a new leader does it again for every
// aborted move it sees, in case the previous one stopped in between.
func (n *Node) unfreeze(ctx context.Context, mv *wire.Move) error {
	if _, err := n.ministryCall(ctx, mv.GetSource(), &wire.Command{Op: &wire.Command_AbortExport{AbortExport: &wire.AbortExportOp{
		Move: mv.GetId(), Ino: mv.GetIno()}}}); err != nil {
		return fmt.Errorf("unfreeze %s at ministry %d: %w", mv.GetPath(), mv.GetSource(), err)
	}
	return nil
}

// maxMoveKeys bounds the keys of one move at this stage (an empty
// directory: its inode and xattrs).
const maxMoveKeys = 100_000

// exportKeys reads the frozen subtree's keys from the source's leader,
// linearizably, in pages.
func (n *Node) exportKeys(ctx context.Context, mv *wire.Move) ([]*wire.KV, error) {
	var out []*wire.KV
	var after []byte
	for {
		cctx, cancel := context.WithTimeout(ctx, moveStepTimeout)
		resp, err := n.readLeader(cctx, ids.GroupID(mv.GetSource()), &wire.ReadRequest{
			Op: &wire.ReadRequest_ExportKeys{ExportKeys: &wire.ExportKeysReq{Move: mv.GetId(), Ino: mv.GetIno(), After: after, Limit: 1000}}})
		cancel()
		if err != nil {
			return nil, err
		}
		out = append(out, resp.GetKvs()...)
		if len(out) > maxMoveKeys {
			return nil, fmt.Errorf("%w: more than %d keys", syscall.EFBIG, maxMoveKeys)
		}
		if resp.GetEof() || len(resp.GetKvs()) == 0 {
			return out, nil
		}
		after = resp.GetKvs()[len(resp.GetKvs())-1].GetKey()
	}
}

func (n *Node) moveFinish(ctx context.Context, mv *wire.Move) error {
	res, err := n.ministryCall(ctx, mv.GetTarget(), &wire.Command{Op: &wire.Command_ImportSubtree{ImportSubtree: &wire.ImportSubtreeOp{
		Move: mv.GetId(), Ino: mv.GetIno(), Parent: mv.GetParent(), Name: mv.GetName(), Source: mv.GetSource(), Activate: true}}})
	if err != nil {
		return fmt.Errorf("open %s at ministry %d: %w", mv.GetPath(), mv.GetTarget(), err)
	}
	if res.GetErrno() != 0 {
		return fmt.Errorf("open %s at ministry %d: %s", mv.GetPath(), mv.GetTarget(), errMessage(res))
	}
	res, err = n.ministryCall(ctx, mv.GetSource(), &wire.Command{Op: &wire.Command_FinishExport{FinishExport: &wire.FinishExportOp{
		Move: mv.GetId(), Ino: mv.GetIno(), Parent: mv.GetParent(), Name: mv.GetName(), Target: mv.GetTarget()}}})
	if err != nil {
		return fmt.Errorf("finish %s at ministry %d: %w", mv.GetPath(), mv.GetSource(), err)
	}
	if res.GetErrno() != 0 {
		// Committed moves only go forward: try again later, loudly.
		return fmt.Errorf("finish %s at ministry %d: %s", mv.GetPath(), mv.GetSource(), errMessage(res))
	}
	return n.setMoveState(ctx, mv, wire.MoveState_MOVE_DONE, "")
}

func errMessage(res *wire.Result) string {
	if m := res.GetMessage(); m != "" {
		return m
	}
	return syscall.Errno(res.GetErrno()).Error()
}
