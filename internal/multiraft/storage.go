package multiraft

import (
	"encoding/binary"
	"fmt"

	"github.com/govfs/govfs/internal/engine"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// Per-group keys (see engine/doc.go):
//
//	'h'  HardState (raftpb, proto)
//	'c'  SnapshotMetadata of the last snapshot/compaction point (proto)
//	'a'  applied index (u64) — written with the applied state
//	'k'  ConfState as of the applied index (proto) — written with applied state
//	'l'<idx>  entries
const (
	keyHardState = 'h'
	keySnapMeta  = 'c'
	keyApplied   = 'a'
	keyConfState = 'k'
)

func appliedKey(g uint64) []byte { return engine.GroupKey(g, keyApplied) }

func u64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

// loadedGroup is what storage recovery found for a group.
type loadedGroup struct {
	ms      *raft.MemoryStorage
	applied uint64
	cs      *pb.ConfState
	exists  bool
}

// loadGroup rebuilds the MemoryStorage of group g from the engine.
func loadGroup(r engine.Reader, g uint64) (*loadedGroup, error) {
	ms := raft.NewMemoryStorage()
	out := &loadedGroup{ms: ms, cs: &pb.ConfState{}}
	hsb, err := r.Get(engine.GroupKey(g, keyHardState))
	if err != nil {
		return nil, err
	}
	if hsb == nil {
		return out, nil
	}
	out.exists = true
	hs := &pb.HardState{}
	if err := proto.Unmarshal(hsb, hs); err != nil {
		return nil, fmt.Errorf("group %d: decode hard state: %w", g, err)
	}
	meta := &pb.SnapshotMetadata{ConfState: &pb.ConfState{}}
	if b, err := r.Get(engine.GroupKey(g, keySnapMeta)); err != nil {
		return nil, err
	} else if b != nil {
		if err := proto.Unmarshal(b, meta); err != nil {
			return nil, fmt.Errorf("group %d: decode snapshot metadata: %w", g, err)
		}
	}
	if b, err := r.Get(appliedKey(g)); err != nil {
		return nil, err
	} else if b != nil {
		out.applied = binary.BigEndian.Uint64(b)
	}
	if b, err := r.Get(engine.GroupKey(g, keyConfState)); err != nil {
		return nil, err
	} else if b != nil {
		if err := proto.Unmarshal(b, out.cs); err != nil {
			return nil, fmt.Errorf("group %d: decode conf state: %w", g, err)
		}
	}
	if meta.GetIndex() > 0 {
		if err := ms.ApplySnapshot(&pb.Snapshot{Metadata: meta}); err != nil {
			return nil, fmt.Errorf("group %d: restore snapshot metadata: %w", g, err)
		}
	}
	var ents []*pb.Entry
	var decodeErr error
	lo := engine.LogKey(g, meta.GetIndex()+1)
	hi := engine.LogKey(g, ^uint64(0))
	err = r.Scan(lo, hi, func(k, v []byte) bool {
		e := &pb.Entry{}
		if decodeErr = proto.Unmarshal(v, e); decodeErr != nil {
			return false
		}
		ents = append(ents, e)
		return true
	})
	if err != nil {
		return nil, err
	}
	if decodeErr != nil {
		return nil, fmt.Errorf("group %d: decode log entry: %w", g, decodeErr)
	}
	if err := ms.Append(ents); err != nil {
		return nil, fmt.Errorf("group %d: rebuild log: %w", g, err)
	}
	if err := ms.SetHardState(hs); err != nil {
		return nil, err
	}
	// The snapshot point moves to the applied index so that InitialState
	// reports the ConfState as of what has been applied.
	if out.applied < meta.GetIndex() {
		return nil, fmt.Errorf("group %d: applied index %d is behind snapshot %d: store corrupted", g, out.applied, meta.GetIndex())
	}
	if out.applied > meta.GetIndex() {
		if _, err := ms.CreateSnapshot(out.applied, out.cs, nil); err != nil {
			return nil, fmt.Errorf("group %d: snapshot at applied %d: %w", g, out.applied, err)
		}
	} else if meta.GetIndex() > 0 {
		meta.ConfState = out.cs
	}
	return out, nil
}

// persistReady writes what rd asks to be made durable into wb.
// lastPersisted is the highest log index written so far for the group; it
// is updated.
func persistReady(wb *engine.Batch, g uint64, rd *raft.Ready, snap *pendingSnapshot, superseded [][]byte, lastPersisted *uint64) error {
	if !raft.IsEmptySnap(rd.Snapshot) {
		// The state range itself was copied from snap's staging area
		// (copyStaged) before this batch commits.
		if err := finishInstallWrites(wb, g, rd.Snapshot.GetMetadata(), snap.stage); err != nil {
			return err
		}
		for _, p := range superseded {
			if err := wb.DeleteRange(p, engine.PrefixEnd(p)); err != nil {
				return err
			}
		}
		*lastPersisted = rd.Snapshot.GetMetadata().GetIndex()
	}
	if len(rd.Entries) > 0 {
		for _, e := range rd.Entries {
			b, err := proto.Marshal(e)
			if err != nil {
				return err
			}
			if err := wb.Set(engine.LogKey(g, e.GetIndex()), b); err != nil {
				return err
			}
		}
		// A new leader may have overwritten a suffix: drop anything after
		// the last entry written. NB: only then — a range tombstone per
		// Ready would pile up in the memtable and slow every read.
		last := rd.Entries[len(rd.Entries)-1].GetIndex()
		if rd.Entries[0].GetIndex() <= *lastPersisted && last < *lastPersisted {
			for i := last + 1; i <= *lastPersisted; i++ {
				if err := wb.Delete(engine.LogKey(g, i)); err != nil {
					return err
				}
			}
		}
		*lastPersisted = last
	}
	if !raft.IsEmptyHardState(rd.HardState) {
		b, err := proto.Marshal(rd.HardState)
		if err != nil {
			return err
		}
		if err := wb.Set(engine.GroupKey(g, keyHardState), b); err != nil {
			return err
		}
	}
	return nil
}
