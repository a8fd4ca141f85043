package metanode

// Admin RPCs of the president: Assign (move a subtree to another
// ministry) and Join (admit a metadata node).

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"syscall"
	"time"

	"github.com/govfs/govfs/internal/clustermap"
	"github.com/govfs/govfs/internal/engine"
	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/namespace"
	"github.com/govfs/govfs/internal/rpc"
	"github.com/govfs/govfs/internal/wire"
)

// defaultMinistryMembers is the replica count of a new ministry.
const defaultMinistryMembers = 3

// assignWait is how long Assign waits for the move to end before it
// answers with the move still under way.
const assignWait = 25 * time.Second

func (s *metaService) Assign(ctx context.Context, req *wire.AssignRequest) (*wire.AssignResponse, error) {
	n := s.n
	if st := s.checkCluster(req.GetClusterId()); st != nil {
		return &wire.AssignResponse{Status: st}, nil
	}
	if st := n.notPresidentLeader(); st != nil {
		return &wire.AssignResponse{Status: st}, nil
	}
	invalid := func(format string, args ...any) (*wire.AssignResponse, error) {
		return &wire.AssignResponse{Status: statusOf(wire.Code_INVALID, format, args...)}, nil
	}
	switch {
	case req.GetPath() == "":
		return invalid("assign: no path given")
	case req.GetIno() == uint64(ids.RootIno):
		return invalid("/ always belongs to the root ministry (1); assign a directory below it")
	case req.GetIno() == 0 || req.GetParent() == 0 || req.GetSource() == 0:
		return invalid("assign %s: the directory (ino, parent, source ministry) is not given", req.GetPath())
	case req.GetReq().GetClientId() == 0:
		return invalid("assign %s: no request id", req.GetPath())
	case req.GetNew() && req.GetTarget() != 0:
		return invalid("assign %s: give either --new or --ministry, not both", req.GetPath())
	case !req.GetNew() && req.GetTarget() == 0:
		return invalid("assign %s: give --new or --ministry ID", req.GetPath())
	case len(req.GetMembers()) > 0 && !req.GetNew():
		return invalid("assign %s: --nodes chooses the members of a new ministry; it goes with --new", req.GetPath())
	}
	if err := namespace.ValidateName(req.GetName()); err != nil {
		return invalid("assign %s: %v", req.GetPath(), err)
	}
	ctx, cancel := context.WithTimeout(ctx, assignWait)
	defer cancel()
	// A retry of an assign already begun (its answer was lost) gets that
	// move, not the checks' EEXIST: look the request up first.
	res, err := n.remembered(req.GetReq())
	if err != nil {
		return &wire.AssignResponse{Status: s.errStatus(ids.PresidentGroup, err)}, nil
	}
	if res == nil {
		var st *wire.Status
		if res, st = s.beginMove(ctx, req); st != nil {
			return &wire.AssignResponse{Status: st}, nil
		}
	}
	if e := res.GetErrno(); e != 0 {
		return &wire.AssignResponse{Status: &wire.Status{Code: wire.Code_ERRNO, Errno: e, Message: res.GetMessage()}}, nil
	}
	id := res.GetStart()
	n.moves.tick(n, true) // start it now rather than at the next tick
	for {
		var mv *wire.Move
		if v := n.mapView(); v != nil {
			for _, m := range v.moves {
				if m.GetId() == id {
					mv = m
				}
			}
		}
		if mv != nil && (mv.GetState() == wire.MoveState_MOVE_DONE || mv.GetState() == wire.MoveState_MOVE_ABORTED) {
			return &wire.AssignResponse{Status: &wire.Status{}, Move: mv}, nil
		}
		select {
		case <-ctx.Done():
			return &wire.AssignResponse{Status: &wire.Status{}, Move: mv}, nil
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// notPresidentLeader is the NOT_LEADER answer of a node that does not
// lead the president group (nil on its leader), with the leader's
// address or, from a node outside the group, a member's.
func (n *Node) notPresidentLeader() *wire.Status {
	lead, me := n.host.Leader(ids.PresidentGroup)
	if me {
		return nil
	}
	if !n.host.HasGroup(ids.PresidentGroup) {
		if addrs := n.presidentAddrs(); len(addrs) > 0 {
			return &wire.Status{Code: wire.Code_NOT_LEADER, LeaderAddr: addrs[0],
				Message: fmt.Sprintf("node %v does not host the president group; ask %s", n.cfg.ID, addrs[0])}
		}
	}
	return &wire.Status{Code: wire.Code_NOT_LEADER, LeaderId: uint64(lead), LeaderAddr: n.addrOf(lead),
		Message: fmt.Sprintf("node %v is not the president's leader", n.cfg.ID)}
}

// beginMove checks an assign and records its move in the president's
// log; a non-nil status is the refusal.
func (s *metaService) beginMove(ctx context.Context, req *wire.AssignRequest) (*wire.Result, *wire.Status) {
	n := s.n
	if v := n.mapView(); v != nil && !req.GetUnassign() {
		for _, m := range v.ministries {
			for _, st := range m.GetSubtrees() {
				if st.GetIno() == req.GetIno() {
					return nil, &wire.Status{Code: wire.Code_ERRNO, Errno: uint32(syscall.EEXIST),
						Message: fmt.Sprintf("%s is already the root of ministry %d's subtree", req.GetPath(), m.GetGroup())}
				}
			}
		}
	}
	// Refuse early what the source would refuse (no ministry is created
	// for nothing); the source checks again when it freezes the subtree.
	if err := n.checkMovable(ctx, req); err != nil {
		return nil, errnoStatus(err, syscall.EIO)
	}
	op := &wire.BeginMoveOp{Ino: req.GetIno(), Parent: req.GetParent(), Name: req.GetName(), Path: req.GetPath(),
		Source: req.GetSource(), Target: req.GetTarget(), Unassign: req.GetUnassign()}
	if req.GetNew() {
		members, err := n.chooseMembers(ctx, req.GetMembers())
		if err != nil {
			return nil, errnoStatus(err, syscall.EINVAL)
		}
		op.Members = members
	}
	res, _, err := n.host.Propose(ctx, ids.PresidentGroup, &wire.Command{Version: 1, Req: req.GetReq(), NowNs: n.cfg.Clock.Now().UnixNano(),
		Op: &wire.Command_BeginMove{BeginMove: op}})
	if err != nil {
		return nil, s.errStatus(ids.PresidentGroup, err)
	}
	if res.GetErrno() == 0 {
		n.log.Info("subtree move begun", "move", res.GetStart(), "path", req.GetPath(), "from", req.GetSource(), "to", res.GetEnd(), "members", op.Members)
	}
	return res, nil
}

// remembered returns the president's stored answer to req (nil: none).
func (n *Node) remembered(req *wire.RequestID) (*wire.Result, error) {
	var res *wire.Result
	err := n.host.Read(ids.PresidentGroup, func(r engine.Reader, _ uint64) error {
		var err error
		res, err = clustermap.Remembered(r, req)
		return err
	})
	return res, err
}

// chooseMembers picks the voters of a new ministry: the nodes asked for
// (each must answer), or the defaultMinistryMembers live nodes hosting
// the fewest group replicas (president included). The first is the one
// that should lead it.
func (n *Node) chooseMembers(ctx context.Context, asked []uint64) ([]uint64, error) {
	v := n.mapView()
	if v == nil {
		return nil, fmt.Errorf("the cluster map is not known yet")
	}
	alive := n.liveNodes(ctx, v)
	if len(asked) > 0 {
		for _, id := range asked {
			known := slices.ContainsFunc(v.members, func(m *wire.Member) bool { return m.GetId() == id })
			switch {
			case !known:
				return nil, fmt.Errorf("node %d is not a metadata node of this cluster (see govfs admin nodes)", id)
			case !alive[id]:
				return nil, fmt.Errorf("node %d is not alive (no heartbeat or no answer); choose live nodes (see govfs admin nodes)", id)
			}
		}
		return asked, nil
	}
	load := v.replicaLoad()
	var cands []uint64
	for _, m := range v.members {
		if alive[m.GetId()] {
			cands = append(cands, m.GetId())
		}
	}
	if len(cands) < defaultMinistryMembers {
		return nil, fmt.Errorf("a new ministry needs %d live metadata nodes and %d answer: add nodes (govfs meta --join) or name them with --nodes",
			defaultMinistryMembers, len(cands))
	}
	sort.SliceStable(cands, func(i, j int) bool {
		a, b := cands[i], cands[j]
		if load[a] != load[b] {
			return load[a] < load[b]
		}
		return a < b
	})
	chosen := cands[:defaultMinistryMembers]
	// The first member is the one that will lead: of the chosen, the one
	// leading the fewest ministries. By hosting load alone, ties go to
	// the lowest id, and on three nodes every new ministry would be led
	// by node 1 (its CPU doing every minister's work).
	leads := map[uint64]int{}
	for _, m := range v.ministries {
		lead, _ := n.host.Leader(ids.GroupID(m.GetGroup()))
		if lead == 0 && len(m.GetMembers()) > 0 {
			lead = ids.NodeID(m.GetMembers()[0])
		}
		leads[uint64(lead)]++
	}
	first := 0
	for i, id := range chosen {
		if leads[id] < leads[chosen[first]] {
			first = i
		}
	}
	chosen[0], chosen[first] = chosen[first], chosen[0]
	return chosen, nil
}

// liveNodes says which metadata nodes are alive: from their heartbeats
// once this president member has listened long enough to tell
// (nodeload.go), else by pinging each (this one is alive).
func (n *Node) liveNodes(ctx context.Context, v *mapView) map[uint64]bool {
	out := map[uint64]bool{uint64(n.cfg.ID): true}
	if now := n.cfg.Clock.Now(); n.host.HasGroup(ids.PresidentGroup) && now.Sub(n.started) >= metaDeadAfter {
		for _, nl := range n.nodes.loads(now, n.started, v.members) {
			out[nl.GetNodeId()] = out[nl.GetNodeId()] || nl.GetAlive()
		}
		return out
	}
	type answer struct {
		id uint64
		ok bool
	}
	ch := make(chan answer, len(v.members))
	for _, m := range v.members {
		go func(m *wire.Member) {
			cc, err := n.pool.Get(m.GetAddr())
			if err != nil {
				ch <- answer{m.GetId(), false}
				return
			}
			cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			defer cancel()
			_, err = wire.NewMetaClient(cc).Ping(cctx, &wire.PingRequest{})
			ch <- answer{m.GetId(), err == nil}
		}(m)
	}
	for range v.members {
		a := <-ch
		out[a.id] = out[a.id] || a.ok
	}
	return out
}

func (s *metaService) Join(ctx context.Context, req *wire.JoinRequest) (*wire.JoinResponse, error) {
	n := s.n
	if st := s.checkCluster(req.GetClusterId()); st != nil {
		return &wire.JoinResponse{Status: st}, nil
	}
	if req.GetAddr() == "" || req.GetReq().GetClientId() == 0 {
		return &wire.JoinResponse{Status: statusOf(wire.Code_INVALID, "join: the node's address and a request id are required")}, nil
	}
	if n.ClusterID() == "" {
		return &wire.JoinResponse{Status: statusOf(wire.Code_UNAVAILABLE, "node %v does not know its cluster yet (still forming); retry", n.cfg.ID)}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	res, err := n.proposeAnywhere(ctx, ids.PresidentGroup, &wire.Command{Version: 1, Req: req.GetReq(), NowNs: n.cfg.Clock.Now().UnixNano(),
		Op: &wire.Command_JoinNode{JoinNode: &wire.JoinNodeOp{Addr: req.GetAddr(), CertName: certNameOf(rpc.CallerOf(ctx))}}})
	if err != nil {
		return &wire.JoinResponse{Status: statusOf(wire.Code_UNAVAILABLE, "join: %v", err)}, nil
	}
	if e := res.GetErrno(); e != 0 {
		return &wire.JoinResponse{Status: &wire.Status{Code: wire.Code_ERRNO, Errno: e, Message: res.GetMessage()}}, nil
	}
	resp := &wire.JoinResponse{Status: &wire.Status{}, NodeId: res.GetStart(), ClusterId: n.ClusterID()}
	// The president group's members: the new node reads the map there.
	for _, id := range sortedIDs(n.ident.Peers) {
		resp.Members = append(resp.Members, &wire.Member{Id: uint64(id), Addr: n.ident.Peers[id]})
	}
	n.log.Info("metadata node joined", "node", res.GetStart(), "addr", req.GetAddr())
	return resp, nil
}

// checkMovable asks the source whether the subtree can move: it must be
// a directory the source holds (a file answers ENOTDIR). What can only
// be seen once it is frozen (hard links across the boundary) aborts the
// move later, with the reason in the move's error.
func (n *Node) checkMovable(ctx context.Context, req *wire.AssignRequest) error {
	// The source must hold the directory (the client named it from its
	// cache, which may be stale).
	st, err := n.statusAt(ctx, ids.GroupID(req.GetSource()), &wire.ReadRequest{
		Op: &wire.ReadRequest_Readdir{Readdir: &wire.ReaddirReq{Ino: req.GetIno(), Limit: 1}}})
	switch {
	case err != nil:
		return fmt.Errorf("ask ministry %d about %s: %w", req.GetSource(), req.GetPath(), err)
	case st.GetCode() == wire.Code_REDIRECT:
		return &codedErr{syscall.EINVAL, fmt.Sprintf("%s belongs to ministry %d, not %d (retry: the client's view was stale)", req.GetPath(), st.GetMinistry(), req.GetSource())}
	case st.GetCode() != wire.Code_OK:
		return fmt.Errorf("ask ministry %d about %s: %w", req.GetSource(), req.GetPath(), errnoOf(st))
	}
	if !req.GetUnassign() {
		return nil
	}
	// An unassign gives the subtree back to its parent's ministry: the
	// target must hold the parent directory.
	st, err = n.statusAt(ctx, ids.GroupID(req.GetTarget()), &wire.ReadRequest{
		Op: &wire.ReadRequest_GetAttr{GetAttr: &wire.GetAttrReq{Ino: req.GetParent()}}})
	switch {
	case err != nil:
		return fmt.Errorf("ask ministry %d about the parent of %s: %w", req.GetTarget(), req.GetPath(), err)
	case st.GetCode() == wire.Code_REDIRECT:
		return &codedErr{syscall.EINVAL, fmt.Sprintf("the parent of %s belongs to ministry %d, not %d: unassign gives a subtree back to its parent's ministry",
			req.GetPath(), st.GetMinistry(), req.GetTarget())}
	case st.GetCode() != wire.Code_OK:
		return &codedErr{syscall.EINVAL, fmt.Sprintf("ministry %d does not hold the parent of %s (%s)", req.GetTarget(), req.GetPath(), st.GetMessage())}
	}
	return nil
}

// errnoOf is an ERRNO status as an error (EIO for other codes).
func errnoOf(st *wire.Status) error {
	if e := syscall.Errno(st.GetErrno()); st.GetCode() == wire.Code_ERRNO && e != 0 {
		return &codedErr{e, st.GetMessage()}
	}
	return &codedErr{syscall.EIO, fmt.Sprintf("%v: %s", st.GetCode(), st.GetMessage())}
}

// statusAt sends a linearizable read to g's leader and returns the
// answer's status: OK, REDIRECT (another ministry holds the inode) or
// ERRNO.
func (n *Node) statusAt(ctx context.Context, g ids.GroupID, req *wire.ReadRequest) (*wire.Status, error) {
	req.ClusterId, req.Group, req.Consistency = n.ClusterID(), uint64(g), wire.ReadConsistency_LINEARIZABLE
	var got *wire.Status
	err := n.callLeader(ctx, g, func(ctx context.Context, cl wire.MetaClient) (*wire.Status, error) {
		resp, err := cl.Read(ctx, req)
		if err != nil {
			return nil, err
		}
		got = resp.GetStatus()
		if got.GetCode() == wire.Code_REDIRECT {
			return &wire.Status{}, nil // an answer: the search ends
		}
		return got, nil
	})
	return got, err
}

// errnoStatus is an ERRNO status for err: its own errno, or def.
func errnoStatus(err error, def syscall.Errno) *wire.Status {
	e := def
	errors.As(err, &e)
	return &wire.Status{Code: wire.Code_ERRNO, Errno: uint32(e), Message: err.Error()}
}

// codedErr is an errno with a message that does not repeat it.
type codedErr struct {
	errno syscall.Errno
	msg   string
}

func (e *codedErr) Error() string { return e.msg }
func (e *codedErr) Unwrap() error { return e.errno }
