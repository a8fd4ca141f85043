package metanode

// Routing between ministries on the server side: a request for an inode
// this ministry does not hold is answered REDIRECT when the inode is
// known to live elsewhere (a forwarding record left by a move, or the
// inode range the president granted to another ministry), and a rename
// or link between two ministries is answered EXDEV, never ENOENT.

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"time"

	"github.com/govfs/govfs/internal/clustermap"
	"github.com/govfs/govfs/internal/engine"
	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/namespace"
	"github.com/govfs/govfs/internal/wire"
)

func readRouteIno(req *wire.ReadRequest) ids.Ino {
	switch op := req.GetOp().(type) {
	case *wire.ReadRequest_Lookup:
		return ids.Ino(op.Lookup.GetParent())
	case *wire.ReadRequest_GetAttr:
		return ids.Ino(op.GetAttr.GetIno())
	case *wire.ReadRequest_Readdir:
		return ids.Ino(op.Readdir.GetIno())
	case *wire.ReadRequest_GetXattr:
		return ids.Ino(op.GetXattr.GetIno())
	case *wire.ReadRequest_ListXattr:
		return ids.Ino(op.ListXattr.GetIno())
	case *wire.ReadRequest_Readlink:
		return ids.Ino(op.Readlink.GetIno())
	case *wire.ReadRequest_GetChunks:
		return ids.Ino(op.GetChunks.GetIno())
	}
	return 0
}

// elsewhere returns the ministry other than g that holds ino, when g does
// not hold it and that is known here (0 otherwise).
func (n *Node) elsewhere(g ids.GroupID, ino ids.Ino) ids.GroupID {
	return n.elsewhereIf(g, ino, false)
}

// elsewhereIf is elsewhere; absent says the caller just read ino absent
// in g, so it is not looked up again (a point read of an absent key
// goes through every level: leaseRoute's for the directories a mount
// leases before creating them was 30 % of a minister's CPU in mkdir).
func (n *Node) elsewhereIf(g ids.GroupID, ino ids.Ino, absent bool) ids.GroupID {
	if ino == 0 {
		return 0
	}
	held := !absent
	var fw ids.GroupID
	_ = n.host.Read(g, func(r engine.Reader, _ uint64) error {
		if !absent {
			_, err := namespace.GetAttr(r, ino)
			if held = err == nil; held {
				return nil
			}
		}
		var err error
		fw, err = namespace.Forwarded(r, ino)
		return err
	})
	switch {
	case held:
		return 0
	case fw != 0:
		return fw
	case ino == ids.RootIno:
		if g != ids.RootMinistry {
			return ids.RootMinistry
		}
		return 0
	case !n.host.HasGroup(ids.PresidentGroup):
		// Created by another ministry, from the copy of the map's
		// inode ranges.
		n.maps.mu.Lock()
		defer n.maps.mu.Unlock()
		if v := n.maps.view; v != nil {
			for _, rg := range v.ranges {
				if uint64(ino) >= rg.GetStart() && uint64(ino) < rg.GetEnd() && rg.GetMinistry() != uint64(g) {
					return ids.GroupID(rg.GetMinistry())
				}
			}
		}
		return 0
	}
	// Created by another ministry, from the inode range it was granted.
	var to ids.GroupID
	_ = n.host.Read(ids.PresidentGroup, func(r engine.Reader, applied uint64) error {
		owner, err := n.rangeOwners.owner(r, applied, uint64(ino))
		if err == nil && owner != 0 && owner != uint64(g) {
			to = ids.GroupID(owner)
		}
		return err
	})
	return to
}

// rangeOwnerCache keeps the president's inode ranges as of one applied
// index of its group on this node, read again when that index moves.
// Why: every route check of an inode this ministry does not hold (each
// lease of a directory a mount is about to make) scanned them in the
// store, 7 % of a minister's CPU under mkdir by 16 processes; the
// president's log moves rarely (grants, moves, membership).
type rangeOwnerCache struct {
	mu     sync.Mutex
	at     uint64
	loaded bool
	ranges []*wire.InodeRange
}

// owner is clustermap.InodeRangeOwner from the kept ranges; r is the
// president's state at applied (a Host.Read view).
func (c *rangeOwnerCache) owner(r engine.Reader, applied, ino uint64) (uint64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.loaded || c.at != applied {
		rs, err := clustermap.InodeRanges(r)
		if err != nil {
			c.loaded = false
			return 0, err
		}
		c.at, c.ranges, c.loaded = applied, rs, true
	}
	return clustermap.OwnerIn(c.ranges, ino), nil
}

// redirectStatus is the REDIRECT answer for an inode held by ministry
// to: with to's epoch and, when this node hosts to, its minister's
// address (the client goes straight there: one extra hop).
func (n *Node) redirectStatus(ino ids.Ino, from, to ids.GroupID) *wire.Status {
	st := &wire.Status{Code: wire.Code_REDIRECT, Ministry: uint64(to), Epoch: n.ministryEpoch(to),
		Message: fmt.Sprintf("inode %v is held by ministry %d, not %d", ino, uint64(to), uint64(from))}
	if lead, _ := n.host.Leader(to); lead != 0 {
		st.LeaderId, st.LeaderAddr = uint64(lead), n.addrOf(lead)
	}
	return st
}

// routeMutation looks at a mutation that failed with ENOENT or ESTALE:
// it returns REDIRECT when its inode lives in another ministry, or the
// EXDEV errno when a rename or link spans two ministries (nil: the
// failure stands).
func (n *Node) routeMutation(g ids.GroupID, cmd *wire.Command, res *wire.Result) *wire.Status {
	switch syscall.Errno(res.GetErrno()) {
	case syscall.ENOENT, syscall.ESTALE:
	default:
		return nil
	}
	route, other := namespace.RouteInos(cmd)
	if to := n.elsewhere(g, route); to != 0 {
		return n.redirectStatus(route, g, to)
	}
	if other == 0 || n.holds(g, other) || !n.holds(g, route) {
		return nil
	}
	// The first inode is here and the second is not: it lives in another
	// ministry (known here or not: a node without the president's map
	// cannot tell one that moved from one never made).
	where := "another ministry"
	if to := n.elsewhere(g, other); to != 0 {
		where = fmt.Sprintf("ministry %d", uint64(to))
	} else if n.host.HasGroup(ids.PresidentGroup) {
		// This node can tell: the inode is nowhere (removed), so the
		// failure stands (ENOENT, not a cross-device error).
		return nil
	}
	msg := fmt.Sprintf("inode %v lives in ministry %d and inode %v in %s: renames and links across ministries are not supported yet (mv copies instead)",
		route, uint64(g), other, where)
	return &wire.Status{Code: wire.Code_ERRNO, Errno: uint32(syscall.EXDEV), Message: msg}
}

// holds reports whether ministry g holds ino.
func (n *Node) holds(g ids.GroupID, ino ids.Ino) bool {
	held := false
	_ = n.host.Read(g, func(r engine.Reader, _ uint64) error {
		_, err := namespace.GetAttr(r, ino)
		held = err == nil
		return nil
	})
	return held
}

// ministryEpoch returns ministry g's epoch as this node's map has it (0
// when the map does not list g yet): from the president replica when
// this node has one (remembered until group 0 applies something new),
// the fetched copy's list otherwise.
func (n *Node) ministryEpoch(g ids.GroupID) uint64 {
	if n.host.HasGroup(ids.PresidentGroup) {
		applied := n.host.Applied(ids.PresidentGroup)
		if e, ok := n.epochs.get(applied, g); ok {
			return e
		}
		var e uint64
		if err := n.host.Read(ids.PresidentGroup, func(r engine.Reader, _ uint64) error {
			m, err := clustermap.GetMinistry(r, uint64(g))
			e = m.GetEpoch()
			return err
		}); err == nil && e != 0 {
			n.epochs.put(applied, g, e)
			return e
		}
	}
	n.maps.mu.Lock()
	defer n.maps.mu.Unlock()
	if v := n.maps.view; v != nil {
		return v.ministry(g).GetEpoch()
	}
	return 0
}

// epochCache remembers ministries' epochs read from the president
// replica at one applied index of group 0, so that the check on every
// RPC is a map lookup rather than a key read and a decode while the map
// does not change. A value read after that index is newer, never older:
// epochs only grow.
type epochCache struct {
	mu      sync.Mutex
	applied uint64
	epochs  map[ids.GroupID]uint64
}

func (c *epochCache) get(applied uint64, g ids.GroupID) (uint64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.applied != applied {
		return 0, false
	}
	e, ok := c.epochs[g]
	return e, ok
}

func (c *epochCache) put(applied uint64, g ids.GroupID, e uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.applied != applied || c.epochs == nil {
		c.applied, c.epochs = applied, map[ids.GroupID]uint64{}
	}
	c.epochs[g] = e
}

// checkEpoch compares the epoch a request names for ministry g (0: the
// client names none) with this node's. nil: serve it. A client behind
// gets STALE_EPOCH with the current epoch (it refreshes its map and
// retries); a request ahead of this node's map makes the node catch up
// first (a read index on the president group, or a fresh copy of the
// map), and then it is served, or refused: STALE_EPOCH (this node may
// still be behind: the client asks again), or INVALID when this node
// knows the map is current and the epoch was never reached.
func (n *Node) checkEpoch(ctx context.Context, g ids.GroupID, e uint64) *wire.Status {
	if e == 0 {
		return nil
	}
	cur := n.ministryEpoch(g)
	if cur == e {
		return nil
	}
	if cur > e {
		return &wire.Status{Code: wire.Code_STALE_EPOCH, Epoch: cur,
			Message: fmt.Sprintf("ministry %d is at epoch %d, the request names epoch %d (its subtrees changed since): refresh the cluster map and retry", uint64(g), cur, e)}
	}
	current := false
	if n.host.HasGroup(ids.PresidentGroup) {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		idx, err := n.host.ReadIndex(cctx, ids.PresidentGroup)
		if err == nil {
			err = n.host.WaitApplied(cctx, ids.PresidentGroup, idx)
		}
		cancel()
		current = err == nil
	} else {
		n.maps.mu.Lock()
		if v := n.maps.view; v != nil && n.cfg.Clock.Now().Sub(v.taken) > 50*time.Millisecond {
			n.maps.refetch = true // at most every 50 ms
		}
		n.maps.mu.Unlock()
		_ = n.fetchMap(ctx)
	}
	if cur = n.ministryEpoch(g); cur == e {
		return nil
	}
	if current && cur < e {
		return statusOf(wire.Code_INVALID, "ministry %d is at epoch %d: the request's epoch %d was never reached", uint64(g), cur, e)
	}
	return &wire.Status{Code: wire.Code_STALE_EPOCH, Epoch: cur,
		Message: fmt.Sprintf("node %v knows ministry %d at epoch %d, the request names epoch %d: retry", n.cfg.ID, uint64(g), cur, e)}
}
