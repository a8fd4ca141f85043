package client

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/wire"
)

// AssignOptions say where Assign moves a subtree.
type AssignOptions struct {
	// New creates a ministry for the subtree, on Nodes (metadata node
	// ids; empty: the president picks three live nodes hosting the
	// fewest ministries).
	New   bool
	Nodes []uint64
	// Ministry gives the subtree to an existing ministry instead.
	Ministry uint64
}

// Assign gives the subtree at path (a directory) to another ministry
// and waits for the move to end. It returns the move as the cluster map
// records it: DONE, ABORTED (Move.Error says why; nothing changed), or
// still COPYING/COMMITTED when it took longer than the server waits (it
// goes on; see ClusterMap).
func (c *Client) Assign(ctx context.Context, path string, o AssignOptions) (*wire.Move, error) {
	mv, err := c.assign(ctx, path, o, false)
	return mv, opErr("assign", path, err)
}

// Unassign gives the subtree at path back to the ministry of its parent.
func (c *Client) Unassign(ctx context.Context, path string) (*wire.Move, error) {
	mv, err := c.assign(ctx, path, AssignOptions{}, true)
	return mv, opErr("unassign", path, err)
}

func (c *Client) assign(ctx context.Context, path string, o AssignOptions, unassign bool) (*wire.Move, error) {
	comps, err := splitPath(path)
	if err != nil {
		return nil, err
	}
	if len(comps) == 0 {
		return nil, fmt.Errorf("%w: / always belongs to the root ministry; assign a directory below it", syscall.EINVAL)
	}
	dir, name := comps[:len(comps)-1], comps[len(comps)-1]
	// Where things are now, read linearizably: the assign is decided on
	// the current tree.
	lin := []ReadOption{Linearizable()}
	pattr, err := c.resolve(ctx, dir, lin)
	if err != nil {
		return nil, err
	}
	parent := ids.Ino(pattr.GetIno())
	attr, err := c.lookup(ctx, parent, name, lin)
	if err != nil {
		return nil, err
	}
	if attr.GetType() != wire.FileType_DIRECTORY {
		return nil, fmt.Errorf("%w: only a directory (with everything below it) can belong to a ministry", syscall.ENOTDIR)
	}
	ino := ids.Ino(attr.GetIno())
	req := &wire.AssignRequest{ClusterId: c.clusterID, Path: "/" + strings.Join(comps, "/"), Ino: uint64(ino), Parent: uint64(parent),
		Name: []byte(name), Source: uint64(c.owner(ino)), Target: o.Ministry, New: o.New, Members: o.Nodes, Unassign: unassign}
	if unassign {
		if c.owner(ino) == c.owner(parent) {
			return nil, fmt.Errorf("%w: it belongs to ministry %d like its parent: nothing to give back", syscall.EINVAL, uint64(c.owner(ino)))
		}
		req.Target, req.New = uint64(c.owner(parent)), false
	}
	cmd := c.newCommand(func(*wire.Command) {})
	defer c.finish(cmd.GetReq().GetSeq())
	req.Req = cmd.GetReq()
	var out *wire.Move
	// The president waits up to 25 s for the move to end.
	rt := &target{group: ids.PresidentGroup, leader: true, timeout: 30 * time.Second}
	err = c.call(ctx, rt, func(ctx context.Context, cl wire.MetaClient, _ uint64) (*wire.Status, uint64, error) {
		resp, err := cl.Assign(ctx, req)
		out = resp.GetMove()
		return resp.GetStatus(), 0, err
	})
	if err != nil {
		return nil, err
	}
	// The owner of the subtree root changed (or will): ask afresh.
	c.forgetOwner(ino)
	return out, nil
}

// MoveReplica has the president move the replica node from holds of
// ministry to node to (0: the live node hosting the fewest replicas).
// It returns once the map records the new members; the ministry's
// minister then adds the new node, catches it up and removes the old
// one (watch with ClusterMap and Status, or govfs admin ministries).
func (c *Client) MoveReplica(ctx context.Context, ministry, from, to uint64) (*wire.MoveReplicasResponse, error) {
	resp, err := c.moveReplicas(ctx, &wire.MoveReplicasRequest{Ministry: ministry, From: from, To: to})
	return resp, opErr("move replica", fmt.Sprintf("ministry %d", ministry), err)
}

// Drain moves every ministry replica node holds to other live nodes
// (each to to, or when to is 0 to the node hosting the fewest): all
// of them, or, when one cannot be placed, none. The president group's
// voters cannot move; the answer's Stays lists it when node is one.
func (c *Client) Drain(ctx context.Context, node, to uint64) (*wire.MoveReplicasResponse, error) {
	resp, err := c.moveReplicas(ctx, &wire.MoveReplicasRequest{Drain: true, From: node, To: to})
	return resp, opErr("drain", fmt.Sprintf("node %d", node), err)
}

func (c *Client) moveReplicas(ctx context.Context, req *wire.MoveReplicasRequest) (*wire.MoveReplicasResponse, error) {
	req.ClusterId = c.clusterID
	var out *wire.MoveReplicasResponse
	rt := &target{group: ids.PresidentGroup, leader: true, timeout: 15 * time.Second}
	err := c.call(ctx, rt, func(ctx context.Context, cl wire.MetaClient, _ uint64) (*wire.Status, uint64, error) {
		resp, err := cl.MoveReplicas(ctx, req)
		out = resp
		return resp.GetStatus(), 0, err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// forgetOwner drops what this Client believed about ino's ministry.
func (c *Client) forgetOwner(ino ids.Ino) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.mu.owners, ino)
}

// ClusterMap returns the cluster map as a metadata node has it: members,
// ministries (with the leaders that node knows), recent moves. Reads go
// to the president's members first, whose copy is current.
func (c *Client) ClusterMap(ctx context.Context) (*wire.ClusterInfoResponse, error) {
	info, err := c.fetchClusterInfo(ctx, &c.retry, false)
	if err != nil {
		return nil, opErr("cluster map", "", err)
	}
	c.applyClusterInfo(info)
	return info, nil
}

// refreshMap fetches the map again when the Client meets a ministry it
// has no addresses for (at most once a second).
func (c *Client) refreshMap(ctx context.Context, g ids.GroupID) {
	c.mu.Lock()
	_, known := c.mu.groupAddrs[g]
	recent := time.Since(c.mu.mapFetched) < time.Second
	if known || recent || g == ids.PresidentGroup {
		c.mu.Unlock()
		return
	}
	c.mu.mapFetched = time.Now()
	c.mu.Unlock()
	r := c.retry
	r.budget = c.cfg.CallTimeout
	if info, err := c.fetchClusterInfo(ctx, &r, false); err == nil {
		c.applyClusterInfo(info)
	}
}

// refreshStaleMap fetches the map again after a node said a ministry's
// epoch grew (its subtrees or members may have changed): at most every
// 100 ms, so that a burst of STALE_EPOCH answers costs one fetch.
func (c *Client) refreshStaleMap(ctx context.Context) {
	c.mu.Lock()
	recent := time.Since(c.mu.mapFetched) < 100*time.Millisecond
	if !recent {
		c.mu.mapFetched = time.Now()
	}
	c.mu.Unlock()
	if recent {
		return
	}
	r := c.retry
	r.budget = c.cfg.CallTimeout
	if info, err := c.fetchClusterInfo(ctx, &r, false); err == nil {
		c.applyClusterInfo(info)
	}
}

// WaitMove waits until move id is DONE or ABORTED (a populated subtree
// may take longer than Assign waits) and returns it.
func (c *Client) WaitMove(ctx context.Context, id uint64) (*wire.Move, error) {
	for {
		info, err := c.ClusterMap(ctx)
		if err != nil {
			return nil, err
		}
		for _, m := range info.GetMoves() {
			if m.GetId() == id && (m.GetState() == wire.MoveState_MOVE_DONE || m.GetState() == wire.MoveState_MOVE_ABORTED) {
				return m, nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("wait for move %d: %w", id, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}
