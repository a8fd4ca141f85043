package multiraft

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/govfs/govfs/internal/engine"
	"github.com/govfs/govfs/internal/ids"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// A snapshot received from a leader is written to disk as it streams in,
// never held whole in memory, so a group of any size can be sent to a new
// or lagging member with the receiver's memory bounded by one page:
//
//	'S' <index u64> <seq u64> <key...>  staged state of a received snapshot
//	'i'                                 install marker (snapshot metadata,
//	                                    hard state, staging prefix)
//
// Installing copies the staged keys over the state range in pages. The
// marker is written, with the state range's deletion, before the first
// page, and removed with the staging area in the batch that records the
// snapshot's metadata, so a crash anywhere in between is finished at the
// next start (finishInstall) from the staging area, which is still whole.
const (
	keyStage   = 'S'
	keyInstall = 'i'
	// stagePage bounds the bytes buffered in one write batch while a
	// snapshot is staged or installed.
	stagePage = 1 << 20
)

func stagePrefix(g, index, seq uint64) []byte {
	k := binary.BigEndian.AppendUint64(engine.GroupKey(g, keyStage), index)
	return binary.BigEndian.AppendUint64(k, seq)
}

// stageSnapshot writes the key-values kvs produces under a fresh staging
// prefix of group g, a page per batch, and returns the prefix. On error the
// partial staging is deleted.
func (h *Host) stageSnapshot(g ids.GroupID, index, seq uint64, kvs func(add func(k, v []byte) error) error) ([]byte, error) {
	e := h.cfg.Engine
	prefix := stagePrefix(uint64(g), index, seq)
	wb := e.NewWriteBatch()
	pages := 0
	add := func(k, v []byte) error {
		key := make([]byte, 0, len(prefix)+len(k))
		key = append(append(key, prefix...), k...)
		if err := wb.Set(key, v); err != nil {
			return err
		}
		if wb.Len() >= stagePage {
			if err := wb.Commit(false); err != nil {
				return err
			}
			wb.Close()
			wb = e.NewWriteBatch()
			pages++
		}
		return nil
	}
	err := kvs(add)
	if err == nil && !wb.Empty() {
		err = wb.Commit(false)
		pages++
	}
	wb.Close()
	h.metrics.snapshotPagesStaged.Add(float64(pages))
	if err != nil {
		h.dropStaged(prefix)
		return nil, err
	}
	return prefix, nil
}

// dropStaged deletes a staging area that will not be installed.
func (h *Host) dropStaged(prefix []byte) {
	wb := h.cfg.Engine.NewWriteBatch()
	defer wb.Close()
	if err := wb.DeleteRange(prefix, engine.PrefixEnd(prefix)); err == nil {
		if err := wb.Commit(false); err != nil {
			h.log.Warn("dropping a staged snapshot failed", "err", err)
		}
	}
}

// installMarker is what finishInstall needs to complete an install that a
// crash interrupted.
type installMarker struct {
	meta  *pb.SnapshotMetadata
	hs    *pb.HardState
	stage []byte
}

func (m *installMarker) encode() ([]byte, error) {
	mb, err := proto.Marshal(m.meta)
	if err != nil {
		return nil, err
	}
	hb, err := proto.Marshal(m.hs)
	if err != nil {
		return nil, err
	}
	out := binary.AppendUvarint(nil, uint64(len(mb)))
	out = append(out, mb...)
	out = binary.AppendUvarint(out, uint64(len(hb)))
	out = append(out, hb...)
	return append(out, m.stage...), nil
}

func decodeInstallMarker(b []byte) (*installMarker, error) {
	part := func() ([]byte, error) {
		n, k := binary.Uvarint(b)
		if k <= 0 || uint64(len(b)-k) < n {
			return nil, errors.New("truncated install marker")
		}
		p := b[k : k+int(n)]
		b = b[k+int(n):]
		return p, nil
	}
	m := &installMarker{meta: &pb.SnapshotMetadata{}, hs: &pb.HardState{}}
	mb, err := part()
	if err != nil {
		return nil, err
	}
	hb, err := part()
	if err != nil {
		return nil, err
	}
	if err := proto.Unmarshal(mb, m.meta); err != nil {
		return nil, err
	}
	if err := proto.Unmarshal(hb, m.hs); err != nil {
		return nil, err
	}
	m.stage = b
	return m, nil
}

// copyStaged replaces group g's state range with the staged keys at
// m.stage: the marker and the deletion first, then the keys a page per
// batch. The caller commits the metadata batch (persistReady) after it.
func (h *Host) copyStaged(g uint64, m *installMarker) error {
	e := h.cfg.Engine
	mb, err := m.encode()
	if err != nil {
		return err
	}
	wb := e.NewWriteBatch()
	sp := engine.StatePrefix(g)
	_ = wb.Set(engine.GroupKey(g, keyInstall), mb)
	_ = wb.DeleteRange(sp, engine.PrefixEnd(sp))
	if err := wb.Commit(false); err != nil {
		wb.Close()
		return fmt.Errorf("begin snapshot install: %w", err)
	}
	wb.Close()
	wb = e.NewWriteBatch()
	defer func() { wb.Close() }()
	page := 0
	var copyErr error
	err = e.Scan(m.stage, engine.PrefixEnd(m.stage), func(k, v []byte) bool {
		key := make([]byte, 0, len(sp)+len(k)-len(m.stage))
		key = append(append(key, sp...), k[len(m.stage):]...)
		if copyErr = wb.Set(key, v); copyErr != nil {
			return false
		}
		if wb.Len() >= stagePage {
			if kn := h.cfg.Knobs; kn != nil && kn.BeforeInstallPage != nil {
				if copyErr = kn.BeforeInstallPage(page); copyErr != nil {
					return false
				}
			}
			if copyErr = wb.Commit(false); copyErr != nil {
				return false
			}
			wb.Close()
			wb = e.NewWriteBatch()
			page++
		}
		return true
	})
	if err == nil {
		err = copyErr
	}
	if err == nil && !wb.Empty() {
		err = wb.Commit(false)
	}
	if err != nil {
		return fmt.Errorf("copy staged snapshot %d: %w", m.meta.GetIndex(), err)
	}
	return nil
}

// finishInstallWrites adds to wb what ends an install: the snapshot's
// metadata, configuration and applied index, an empty log, the hard
// state, and the removal of the marker and the staging area.
func finishInstallWrites(wb *engine.Batch, g uint64, md *pb.SnapshotMetadata, stage []byte) error {
	mb, err := proto.Marshal(md)
	if err != nil {
		return err
	}
	cb, err := proto.Marshal(md.GetConfState())
	if err != nil {
		return err
	}
	_ = wb.DeleteRange(engine.LogKey(g, 0), engine.LogKey(g, ^uint64(0)))
	_ = wb.Set(engine.GroupKey(g, keySnapMeta), mb)
	_ = wb.Set(engine.GroupKey(g, keyConfState), cb)
	_ = wb.Set(appliedKey(g), u64(md.GetIndex()))
	_ = wb.Delete(engine.GroupKey(g, keyInstall))
	return wb.DeleteRange(stage, engine.PrefixEnd(stage))
}

// finishInstall completes, at start, an install a crash interrupted, and
// deletes staging areas of snapshots that were never installed.
func (h *Host) finishInstall(g uint64) error {
	e := h.cfg.Engine
	b, err := e.Get(engine.GroupKey(g, keyInstall))
	if err != nil {
		return err
	}
	if b != nil {
		m, err := decodeInstallMarker(b)
		if err != nil {
			return fmt.Errorf("group %d: %w: the store is corrupted", g, err)
		}
		if err := h.copyStaged(g, m); err != nil {
			return err
		}
		hs := m.hs
		if raft.IsEmptyHardState(hs) {
			if cur, err := e.Get(engine.GroupKey(g, keyHardState)); err != nil {
				return err
			} else if cur != nil {
				if err := proto.Unmarshal(cur, hs); err != nil {
					return fmt.Errorf("group %d: decode hard state: %w", g, err)
				}
			}
		}
		hs.Commit = proto.Uint64(max(hs.GetCommit(), m.meta.GetIndex()))
		hb, err := proto.Marshal(hs)
		if err != nil {
			return err
		}
		wb := e.NewWriteBatch()
		defer wb.Close()
		if err := finishInstallWrites(wb, g, m.meta, m.stage); err != nil {
			return err
		}
		_ = wb.Set(engine.GroupKey(g, keyHardState), hb)
		if err := wb.Commit(true); err != nil {
			return err
		}
		h.log.Info("finished a snapshot install interrupted by a crash", "group", g, "index", m.meta.GetIndex())
	}
	sp := engine.GroupKey(g, keyStage)
	h.dropStaged(sp)
	return nil
}
