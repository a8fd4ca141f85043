package clustermap

import (
	"slices"
	"syscall"

	"github.com/govfs/govfs/internal/engine"
	"github.com/govfs/govfs/internal/wire"
	"google.golang.org/protobuf/proto"
)

// ReplicaGroup returns replica group id, or nil.
func ReplicaGroup(r engine.Reader, id uint64) (*wire.ReplicaGroup, error) {
	b, err := r.Get(rgKey(id))
	if err != nil || b == nil {
		return nil, err
	}
	g := &wire.ReplicaGroup{}
	if err := proto.Unmarshal(b, g); err != nil {
		return nil, err
	}
	return g, nil
}

func putGroup(rw engine.ReadWriter, g *wire.ReplicaGroup) error {
	b, err := proto.Marshal(g)
	if err != nil {
		return err
	}
	return rw.Set(rgKey(g.GetId()), b)
}

// replaceMember removes op.Old (0: none) from a group and adds op.New (0:
// none) as a syncing member, if the group is still at op.Epoch. A primary
// being removed is succeeded by the first remaining full member; a change
// that would leave no full member is refused.
func replaceMember(rw engine.ReadWriter, op *wire.ReplaceMemberOp) (*wire.Result, error) {
	g, err := ReplicaGroup(rw, op.GetGroup())
	if err != nil {
		return nil, err
	}
	switch {
	case g == nil:
		return errResult(syscall.ENOENT, "replica group %d does not exist", op.GetGroup()), nil
	case g.GetEpoch() != op.GetEpoch():
		return errResult(syscall.ESTALE, "replica group %d is at epoch %d, the change was planned at %d", g.GetId(), g.GetEpoch(), op.GetEpoch()), nil
	case op.GetOld() == 0 && op.GetNew() == 0:
		return errResult(syscall.EINVAL, "replace member of group %d: nothing to change", g.GetId()), nil
	case op.GetOld() != 0 && !slices.Contains(g.GetMembers(), op.GetOld()):
		return errResult(syscall.ENOENT, "chunk server %d is not a member of group %d", op.GetOld(), g.GetId()), nil
	case op.GetNew() != 0 && slices.Contains(g.GetMembers(), op.GetNew()):
		return errResult(syscall.EEXIST, "chunk server %d is already a member of group %d", op.GetNew(), g.GetId()), nil
	}
	g = proto.Clone(g).(*wire.ReplicaGroup)
	drop := func(l []uint64, id uint64) []uint64 {
		return slices.DeleteFunc(l, func(m uint64) bool { return m == id })
	}
	if old := op.GetOld(); old != 0 {
		g.Members, g.Syncing = drop(g.Members, old), drop(g.Syncing, old)
	}
	if nw := op.GetNew(); nw != 0 {
		srv, err := ChunkServer(rw, nw)
		if err != nil {
			return nil, err
		}
		if srv == nil {
			return errResult(syscall.ENOENT, "chunk server %d is not registered", nw), nil
		}
		for _, m := range g.GetMembers() {
			other, err := ChunkServer(rw, m)
			if err != nil {
				return nil, err
			}
			if other != nil && other.GetHost() == srv.GetHost() {
				return errResult(syscall.EINVAL, "chunk servers %d and %d are on the same host %s", m, nw, srv.GetHost()), nil
			}
		}
		if len(g.Members) >= MaxReplicas {
			return errResult(syscall.EINVAL, "replica group %d already has %d members", g.GetId(), MaxReplicas), nil
		}
		g.Members = append(g.Members, nw)
		g.Syncing = append(g.Syncing, nw)
	}
	if !slices.Contains(g.Members, g.Primary) || slices.Contains(g.Syncing, g.Primary) {
		g.Primary = 0
		for _, m := range g.Members {
			if !slices.Contains(g.Syncing, m) {
				g.Primary = m
				break
			}
		}
		if g.Primary == 0 {
			return errResult(syscall.EINVAL, "replica group %d would have no full member left", g.GetId()), nil
		}
	}
	g.PlacementNotes = op.GetPlacementNotes()
	g.Epoch++
	if err := putGroup(rw, g); err != nil {
		return nil, err
	}
	return &wire.Result{Start: g.Epoch}, nil
}

// memberSynced makes a syncing member full, if the group is still at
// op.Epoch (the epoch grows, so the primary checks every chunk again
// before mutating it).
func memberSynced(rw engine.ReadWriter, op *wire.MemberSyncedOp) (*wire.Result, error) {
	g, err := ReplicaGroup(rw, op.GetGroup())
	if err != nil {
		return nil, err
	}
	switch {
	case g == nil:
		return errResult(syscall.ENOENT, "replica group %d does not exist", op.GetGroup()), nil
	case g.GetEpoch() != op.GetEpoch():
		return errResult(syscall.ESTALE, "replica group %d is at epoch %d, the copy finished at %d", g.GetId(), g.GetEpoch(), op.GetEpoch()), nil
	case !slices.Contains(g.GetSyncing(), op.GetMember()):
		return errResult(syscall.EINVAL, "chunk server %d is not a syncing member of group %d", op.GetMember(), g.GetId()), nil
	}
	g = proto.Clone(g).(*wire.ReplicaGroup)
	g.Syncing = slices.DeleteFunc(g.Syncing, func(m uint64) bool { return m == op.GetMember() })
	g.Epoch++
	if err := putGroup(rw, g); err != nil {
		return nil, err
	}
	return &wire.Result{Start: g.Epoch}, nil
}
