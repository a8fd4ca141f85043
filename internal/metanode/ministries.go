package metanode

// Many ministries on one node: the node's copy of the cluster map, the
// address book it feeds, hosting the ministries the map assigns to this
// node, and calls to a group's leader wherever it runs.

import (
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/govfs/govfs/internal/clustermap"
	"github.com/govfs/govfs/internal/engine"
	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/wire"
	"google.golang.org/protobuf/proto"
)

// mapView is the metadata side of the cluster map as this node knows it.
type mapView struct {
	members    []*wire.Member
	ministries []*wire.Ministry
	moves      []*wire.Move
	ranges     []*wire.InodeRange
	dissolved  []uint64
	// taken is when a copy fetched from another node was read (zero for
	// the node's own replica of group 0).
	taken time.Time
	// info is the answer the copy came from (its data plane is served
	// from it too).
	info *wire.ClusterInfoResponse
}

// replicaLoad counts the Raft group replicas each metadata node hosts:
// one per ministry it is a member of, and one for the president group,
// whose members are the formation peers (the root ministry's founders;
// the president's membership never changes). The president's replica
// costs CPU like a ministry's (heartbeats, node liveness, the map), so
// placing by ministries alone put new ministries beside it on the
// founders as readily as on idle joiners.
func (v *mapView) replicaLoad() map[uint64]int {
	load := map[uint64]int{}
	for _, m := range v.ministries {
		if m.GetGroup() == uint64(ids.RootMinistry) {
			for _, id := range clustermap.Founders(m) {
				load[id]++
			}
		}
		if m.GetGroup() == uint64(ids.PresidentGroup) {
			continue // counted from the founders above
		}
		for _, id := range m.GetMembers() {
			load[id]++
		}
	}
	return load
}

// ministryOrNil is ministry on a view that may be nil (not known yet).
func (v *mapView) ministryOrNil(g ids.GroupID) *wire.Ministry {
	if v == nil {
		return nil
	}
	return v.ministry(g)
}

func (v *mapView) ministry(g ids.GroupID) *wire.Ministry {
	for _, m := range v.ministries {
		if m.GetGroup() == uint64(g) {
			return m
		}
	}
	return nil
}

// mapCache holds the copy of the map a node without a replica of group 0
// fetched from a member.
type mapCache struct {
	mu   sync.Mutex
	view *mapView
	// local is the view last read from this node's own replica of group
	// 0, at group 0's applied index localAt: read again only when the
	// map changed (heartbeats and map fetches ask for it many times a
	// second, and each read scans every table).
	local   *mapView
	localAt uint64
	// refetch: a request named an epoch newer than view's; the next
	// fetchMap fetches even if view is recent.
	refetch bool
}

// readMapLocal reads the map from this node's replica of group 0.
func readMapLocal(r engine.Reader) (*mapView, error) {
	v := &mapView{}
	var err error
	if v.members, err = clustermap.Members(r); err != nil {
		return nil, err
	}
	if v.ministries, err = clustermap.Ministries(r); err != nil {
		return nil, err
	}
	if v.moves, err = clustermap.Moves(r); err != nil {
		return nil, err
	}
	if v.ranges, err = clustermap.InodeRanges(r); err != nil {
		return nil, err
	}
	if v.dissolved, err = clustermap.Dissolved(r); err != nil {
		return nil, err
	}
	return v, nil
}

// mapView returns the map: from the local replica of group 0 when this
// node has one, else the copy last fetched (nil before the first).
func (n *Node) mapView() *mapView {
	if n.host.HasGroup(ids.PresidentGroup) {
		if v, _ := n.localMap(); v != nil {
			return v
		}
	}
	n.maps.mu.Lock()
	defer n.maps.mu.Unlock()
	return n.maps.view
}

// localMap reads the map from this node's replica of group 0 (nil when
// unreadable or not formed yet) and the applied index it was read at.
// The view is shared: callers must not modify it.
func (n *Node) localMap() (*mapView, uint64) {
	idx := n.host.Applied(ids.PresidentGroup)
	n.maps.mu.Lock()
	if v := n.maps.local; v != nil && n.maps.localAt == idx {
		n.maps.mu.Unlock()
		return v, idx
	}
	n.maps.mu.Unlock()
	var v *mapView
	var at uint64
	if err := n.host.Read(ids.PresidentGroup, func(r engine.Reader, applied uint64) error {
		var err error
		at = applied
		v, err = readMapLocal(r)
		return err
	}); err != nil || v == nil || len(v.members) == 0 {
		return nil, 0
	}
	n.maps.mu.Lock()
	if at >= n.maps.localAt {
		n.maps.local, n.maps.localAt = v, at
	}
	n.maps.mu.Unlock()
	return v, at
}

// fetchMap refreshes the copy of the map from a node that hosts group 0.
func (n *Node) fetchMap(ctx context.Context) error {
	if n.host.HasGroup(ids.PresidentGroup) {
		return nil
	}
	n.maps.mu.Lock()
	fresh := n.maps.view != nil && !n.maps.refetch && n.cfg.Clock.Now().Sub(n.maps.view.taken) < 500*time.Millisecond
	n.maps.mu.Unlock()
	if fresh {
		return nil
	}
	addrs := n.presidentAddrs()
	if len(addrs) == 0 {
		return errors.New("no president member known")
	}
	var last error
	for _, i := range rand.Perm(len(addrs)) {
		cc, err := n.pool.Get(addrs[i])
		if err != nil {
			last = err
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		n.maps.mu.Lock()
		var known uint64
		if v := n.maps.view; v != nil {
			known = v.info.GetMapIndex()
		}
		n.maps.mu.Unlock()
		info, err := wire.NewMetaClient(cc).ClusterInfo(cctx, &wire.ClusterInfoRequest{KnownIndex: known})
		cancel()
		if err != nil {
			last = err
			continue
		}
		if info.GetNotModified() && info.GetStatus().GetCode() == wire.Code_OK {
			n.maps.mu.Lock()
			if v := n.maps.view; v != nil && v.info.GetMapIndex() == info.GetMapIndex() {
				// The same map: only its age is new.
				c := *v
				c.taken = n.cfg.Clock.Now()
				n.maps.view = &c
				n.maps.refetch = false
				n.maps.mu.Unlock()
				return nil
			}
			n.maps.mu.Unlock()
			last = fmt.Errorf("%s: answered not modified for a map this node does not hold", addrs[i])
			continue
		}
		if info.GetStatus().GetCode() != wire.Code_OK || info.GetMapAgeMs() != 0 || len(info.GetMembers()) == 0 {
			last = fmt.Errorf("%s: no map (%s)", addrs[i], info.GetStatus().GetMessage())
			continue
		}
		if info.GetMapIndex() < known {
			// A lagging replica: never go back to an older map (a
			// dissolved ministry would be hosted again).
			last = fmt.Errorf("%s: its map (index %d) is older than this node's (%d)", addrs[i], info.GetMapIndex(), known)
			continue
		}
		n.maps.mu.Lock()
		n.maps.view = &mapView{members: info.GetMembers(), ministries: info.GetMinistries(), moves: info.GetMoves(), ranges: info.GetInodeRanges(),
			dissolved: info.GetDissolved(), taken: n.cfg.Clock.Now(), info: info}
		n.maps.refetch = false
		n.maps.mu.Unlock()
		return nil
	}
	return fmt.Errorf("fetch the cluster map: %w", last)
}

// presidentAddrs are the addresses of group 0's members: the initial
// peers (a node that joined learned them when it joined).
func (n *Node) presidentAddrs() []string {
	var out []string
	for _, id := range sortedIDs(n.ident.Peers) {
		out = append(out, n.ident.Peers[id])
	}
	return out
}

// presidentHint names where the president's leader may be: lead's
// address when known, else a president member at random.
func (n *Node) presidentHint(lead ids.NodeID) string {
	if a := n.addrOf(lead); a != "" {
		return a
	}
	if addrs := n.presidentAddrs(); len(addrs) > 0 {
		return addrs[rand.IntN(len(addrs))]
	}
	return ""
}

// addrOf returns the address of metadata node id ("" when unknown).
func (n *Node) addrOf(id ids.NodeID) string {
	if id == 0 {
		return ""
	}
	return n.transport.Addr(id)
}

// syncMap brings the address book and the hosted ministries in line
// with the map.
func (n *Node) syncMap(ctx context.Context, v *mapView) error {
	if v == nil {
		return nil
	}
	addrs := map[ids.NodeID]string{}
	for id, a := range n.ident.Peers {
		addrs[id] = a
	}
	for _, m := range v.members {
		addrs[ids.NodeID(m.GetId())] = m.GetAddr()
	}
	if cur := n.transport; cur != nil {
		changed := false
		for id, a := range addrs {
			if cur.Addr(id) != a {
				changed = true
			}
		}
		if changed {
			cur.SetAddrs(addrs)
		}
		names := map[ids.NodeID]string{}
		for _, m := range v.members {
			if m.GetCertName() != "" {
				names[ids.NodeID(m.GetId())] = m.GetCertName()
			}
		}
		cur.SetCertNames(names)
	}
	if err := n.rememberAddrs(v); err != nil {
		return err
	}
	var errs []error
	for _, g := range v.dissolved {
		if n.host.HasGroup(ids.GroupID(g)) {
			if err := n.dropReplica(ctx, ids.GroupID(g), "ministry dissolved: replica dropped and its key range deleted"); err != nil {
				errs = append(errs, err)
			}
		}
	}
	for _, m := range v.ministries {
		g := ids.GroupID(m.GetGroup())
		if g == ids.PresidentGroup {
			continue
		}
		if !slices.Contains(m.GetMembers(), uint64(n.cfg.ID)) {
			// A replica the map no longer gives this node (members.go).
			if n.host.HasGroup(g) {
				if err := n.dropIfRemoved(ctx, g, m); err != nil {
					errs = append(errs, err)
				}
			}
			continue
		}
		if !n.host.HasGroup(g) {
			if err := n.hostMinistryFor(m); err != nil {
				return err
			}
		}
		// The first member was chosen to lead (the least loaded node):
		// it stands for election while the group has no leader, so that
		// ministers spread over nodes instead of going to whichever
		// replica's timer fires first.
		preferred := ids.NodeID(m.GetMembers()[0])
		lead, me := n.host.Leader(g)
		since := n.cfg.Clock.Now().Sub(n.lastCampaign[g])
		switch {
		case preferred == n.cfg.ID && lead == 0 && since > time.Second:
			n.lastCampaign[g] = n.cfg.Clock.Now()
			_ = n.host.Campaign(g)
		case me && preferred != n.cfg.ID && g != ids.RootMinistry && since > 10*time.Second && n.host.CaughtUp(g, preferred):
			// Another member won the first election: hand the ministry
			// to the chosen one (if it is behind or down, raft keeps
			// the leadership here). The root ministry keeps whoever
			// leads it: its members were not chosen by load.
			n.lastCampaign[g] = n.cfg.Clock.Now()
			_ = n.host.TransferLeader(g, preferred)
		}
	}
	return errors.Join(errs...)
}

// rememberAddrs records the map's node addresses in the identity when
// they changed (rarely: a join, an address change).
func (n *Node) rememberAddrs(v *mapView) error {
	if len(v.members) == 0 {
		return nil
	}
	n.hostMu.Lock()
	defer n.hostMu.Unlock()
	same := len(n.ident.Addrs) == len(v.members)
	for _, m := range v.members {
		same = same && n.ident.Addrs[ids.NodeID(m.GetId())] == m.GetAddr()
	}
	if same {
		return nil
	}
	addrs := map[ids.NodeID]string{}
	for _, m := range v.members {
		addrs[ids.NodeID(m.GetId())] = m.GetAddr()
	}
	n.ident.Addrs = addrs
	if err := saveIdentity(n.eng, n.ident); err != nil {
		return fmt.Errorf("record the metadata nodes' addresses: %w", err)
	}
	return nil
}

// hostMinistry starts this node's replica of ministry g, created with
// voters members, and remembers it for restarts.
func (n *Node) hostMinistry(g ids.GroupID, members []uint64) error {
	n.hostMu.Lock()
	defer n.hostMu.Unlock()
	if n.host.HasGroup(g) {
		return nil
	}
	// Remembered first: a replica that was started must be started again
	// after a crash, whatever the map says by then.
	if !slices.ContainsFunc(n.ident.Groups, func(h hostedGroup) bool { return h.Group == uint64(g) }) {
		n.ident.Groups = append(n.ident.Groups, hostedGroup{Group: uint64(g), Members: slices.Clone(members)})
		if err := saveIdentity(n.eng, n.ident); err != nil {
			return fmt.Errorf("record ministry %v in the node identity: %w", g, err)
		}
	}
	if err := n.host.AddGroup(g, ministrySM{}, nodeIDs(members)); err != nil {
		return fmt.Errorf("host ministry %v: %w", g, err)
	}
	n.log.Info("hosting ministry", "group", uint64(g), "members", members)
	return nil
}

// hostedMinistries lists the ministries this node has a replica of.
func (n *Node) hostedMinistries() []ids.GroupID {
	var out []ids.GroupID
	for _, g := range n.host.Groups() {
		if g != ids.PresidentGroup {
			out = append(out, g)
		}
	}
	return out
}

// groupAddrs returns candidate addresses for group g: its members from
// the map (the initial peers for groups 0 and 1 of an older map).
func (n *Node) groupAddrs(g ids.GroupID) []string {
	var out []string
	if g == ids.PresidentGroup {
		return n.presidentAddrs()
	}
	if v := n.mapView(); v != nil {
		if m := v.ministry(g); m != nil {
			for _, id := range m.GetMembers() {
				if a := n.addrOf(ids.NodeID(id)); a != "" {
					out = append(out, a)
				}
			}
		}
	}
	if len(out) == 0 && g == ids.RootMinistry {
		return n.presidentAddrs()
	}
	return out
}

// errRemote is a status other than OK or ERRNO from another node.
type errRemote struct{ st *wire.Status }

func (e *errRemote) Error() string { return fmt.Sprintf("%v: %s", e.st.GetCode(), e.st.GetMessage()) }

// callLeader runs fn against g's leader wherever it is, following
// NOT_LEADER hints and trying the members in turn, until ctx ends. fn
// returns the answer's status; OK and ERRNO end the search.
func (n *Node) callLeader(ctx context.Context, g ids.GroupID, fn func(ctx context.Context, cl wire.MetaClient) (*wire.Status, error)) error {
	var hint string
	var last error
	for attempt := 0; ; attempt++ {
		addr := hint
		hint = ""
		if addr == "" {
			if lead, _ := n.host.Leader(g); lead != 0 {
				addr = n.addrOf(lead)
			}
		}
		if addr == "" || attempt%2 == 1 {
			cands := n.groupAddrs(g)
			if len(cands) == 0 {
				last = fmt.Errorf("ministry %v has no known members", g)
			} else {
				addr = cands[attempt%len(cands)]
			}
		}
		if addr != "" {
			cc, err := n.pool.Get(addr)
			if err == nil {
				cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				var st *wire.Status
				st, err = fn(cctx, wire.NewMetaClient(cc))
				cancel()
				if err == nil {
					switch st.GetCode() {
					case wire.Code_OK, wire.Code_ERRNO:
						return nil
					case wire.Code_NOT_LEADER:
						hint = st.GetLeaderAddr()
					}
					err = &errRemote{st}
				}
			}
			last = fmt.Errorf("%s: %w", addr, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("reach the leader of %v: %w (last: %v)", g, ctx.Err(), last)
		case <-n.stop:
			return fmt.Errorf("reach the leader of %v: node stopping", g)
		case <-time.After(time.Duration(min(attempt+1, 10)) * 20 * time.Millisecond):
		}
	}
}

// proposeAnywhere proposes cmd to group g through its leader, local or
// remote, and returns the state machine's result.
func (n *Node) proposeAnywhere(ctx context.Context, g ids.GroupID, cmd *wire.Command) (*wire.Result, error) {
	if _, me := n.host.Leader(g); me {
		res, _, err := n.host.Propose(ctx, g, cmd)
		return res, err
	}
	return n.mutateLeader(ctx, g, cmd)
}

// mutateLeader sends cmd to the Mutate handler of g's leader, wherever
// it is (this node included), numbering it first when it has no request
// id, and returns the state machine's result (a refusal is a result with
// an errno, not an error).
func (n *Node) mutateLeader(ctx context.Context, g ids.GroupID, cmd *wire.Command) (*wire.Result, error) {
	if cmd.GetReq().GetClientId() == 0 {
		var done func()
		cmd.Req, done = n.internalReq()
		defer done()
	}
	var res *wire.Result
	err := n.callLeader(ctx, g, func(ctx context.Context, cl wire.MetaClient) (*wire.Status, error) {
		resp, err := cl.Mutate(ctx, &wire.MutateRequest{ClusterId: n.ClusterID(), Group: uint64(g), Cmd: cmd})
		if err != nil {
			return nil, err
		}
		res = resp.GetResult()
		return resp.GetStatus(), nil
	})
	return res, err
}

// readLeader sends req to g's leader, linearizably, and returns its
// answer; any status but OK is an error.
func (n *Node) readLeader(ctx context.Context, g ids.GroupID, req *wire.ReadRequest) (*wire.ReadResponse, error) {
	req.ClusterId, req.Group, req.Consistency = n.ClusterID(), uint64(g), wire.ReadConsistency_LINEARIZABLE
	var resp *wire.ReadResponse
	err := n.callLeader(ctx, g, func(ctx context.Context, cl wire.MetaClient) (*wire.Status, error) {
		var err error
		if resp, err = cl.Read(ctx, req); err != nil {
			return nil, err
		}
		return resp.GetStatus(), nil
	})
	if err != nil {
		return nil, err
	}
	if st := resp.GetStatus(); st.GetCode() != wire.Code_OK {
		return nil, fmt.Errorf("%v: %s", st.GetCode(), st.GetMessage())
	}
	return resp, nil
}

// internalReq numbers a command this node sends to another node's
// group; call done when its answer is in. first_incomplete is the lowest
// number still in flight, so a slow command is never refused as older
// than what was acknowledged.
func (n *Node) internalReq() (*wire.RequestID, func()) {
	n.reqMu.Lock()
	defer n.reqMu.Unlock()
	n.reqSeq++
	s := n.reqSeq
	if n.reqInflight == nil {
		n.reqInflight = map[uint64]bool{}
	}
	n.reqInflight[s] = true
	first := s
	for f := range n.reqInflight {
		first = min(first, f)
	}
	return &wire.RequestID{ClientId: n.reqClient, Seq: s, FirstIncomplete: first}, func() {
		n.reqMu.Lock()
		delete(n.reqInflight, s)
		n.reqMu.Unlock()
	}
}

// cloneCmd gives a command its own copy (a retried step resends it).
func cloneCmd(c *wire.Command) *wire.Command { return proto.Clone(c).(*wire.Command) }

func nodeIDs(l []uint64) []ids.NodeID {
	out := make([]ids.NodeID, len(l))
	for i, m := range l {
		out[i] = ids.NodeID(m)
	}
	return out
}

func newReqClient() uint64 {
	var b [8]byte
	_, _ = crand.Read(b[:])
	return binary.BigEndian.Uint64(b[:]) | 1
}

// join asks a running cluster to admit this node and records the id it
// was given.
func (n *Node) join(ctx context.Context) (*identity, error) {
	req := &wire.JoinRequest{Addr: n.cfg.Listen, Req: &wire.RequestID{ClientId: newReqClient(), Seq: 1, FirstIncomplete: 1}}
	var last error
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		for _, a := range n.cfg.Join {
			cc, err := n.pool.Get(a)
			if err != nil {
				last = err
				continue
			}
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			resp, err := wire.NewMetaClient(cc).Join(cctx, req)
			cancel()
			if err != nil {
				last = fmt.Errorf("%s: %w", a, err)
				continue
			}
			if st := resp.GetStatus(); st.GetCode() != wire.Code_OK {
				last = fmt.Errorf("%s: %v: %s", a, st.GetCode(), st.GetMessage())
				if st.GetCode() == wire.Code_ERRNO || st.GetCode() == wire.Code_INVALID {
					return nil, fmt.Errorf("join the cluster: %w", last)
				}
				continue
			}
			id := &identity{NodeID: ids.NodeID(resp.GetNodeId()), ClusterID: resp.GetClusterId(), Joined: true, Peers: map[ids.NodeID]string{}}
			for _, m := range resp.GetMembers() {
				id.Peers[ids.NodeID(m.GetId())] = m.GetAddr()
			}
			if err := saveIdentity(n.eng, id); err != nil {
				return nil, fmt.Errorf("record node identity: %w", err)
			}
			n.log.Info("joined the cluster", "node", resp.GetNodeId(), "cluster", resp.GetClusterId())
			return id, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	return nil, fmt.Errorf("join the cluster through %v: %w", n.cfg.Join, last)
}
