// Package clustermap is the president group's state machine (pure and
// deterministic): the cluster id, the metadata nodes, the ministry table,
// subtree moves, the inode-number allocator and the data plane (chunk
// servers, replica groups). Ministries: see ministries.go.
//
// Keys (relative to the group's state prefix):
//
//	"cid"            cluster id (string)
//	"members"        wire.InitClusterOp with the member list
//	"nextino"        u64, the next inode number not yet granted
//	"r" client seq   wire.Result of an applied request (dedup)
//	"W" client       u64 seq below which the client's answers were dropped
//	chunk servers, replica groups and chunk handles: see chunks.go
package clustermap

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"syscall"

	"github.com/govfs/govfs/internal/engine"
	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/wire"
	"google.golang.org/protobuf/proto"
)

// MaxAlloc bounds one inode grant.
const MaxAlloc = 1 << 24

var (
	keyClusterID = []byte("cid")
	keyMembers   = []byte("members")
	keyNextIno   = []byte("nextino")
)

// Map is the president's state machine.
type Map struct{}

func dedupKey(req *wire.RequestID) []byte {
	k := binary.BigEndian.AppendUint64([]byte("r"), req.GetClientId())
	return binary.BigEndian.AppendUint64(k, req.GetSeq())
}

// Remembered returns the stored answer to request req, or nil when the
// map has none (never applied, or forgotten).
func Remembered(r engine.Reader, req *wire.RequestID) (*wire.Result, error) {
	if req.GetClientId() == 0 {
		return nil, nil
	}
	b, err := r.Get(dedupKey(req))
	if err != nil || b == nil {
		return nil, err
	}
	res := &wire.Result{}
	if err := proto.Unmarshal(b, res); err != nil {
		return nil, fmt.Errorf("clustermap: decode remembered result: %w", err)
	}
	return res, nil
}

// Apply implements multiraft.StateMachine.
func (Map) Apply(rw engine.ReadWriter, index uint64, cmd *wire.Command) (*wire.Result, error) {
	if cmd.GetVersion() != 1 {
		return nil, fmt.Errorf("clustermap: command format version %d is not known to this binary; upgrade it", cmd.GetVersion())
	}
	req := cmd.GetReq()
	if res, err := Remembered(rw, req); err != nil || res != nil {
		return res, err
	}
	if req.GetClientId() != 0 {
		wm, err := watermark(rw, req.GetClientId())
		if err != nil {
			return nil, err
		}
		if req.GetSeq() < wm {
			// A delayed copy of a request whose answer was already dropped:
			// applying it again would break exactly-once.
			return &wire.Result{Errno: uint32(syscall.EINVAL), Message: fmt.Sprintf(
				"request %d/%d is older than the client's acknowledged requests (%d)", req.GetClientId(), req.GetSeq(), wm)}, nil
		}
	}
	res, err := apply(rw, cmd)
	if err != nil {
		return nil, err
	}
	if req.GetClientId() != 0 {
		b, err := proto.Marshal(res)
		if err != nil {
			return nil, err
		}
		if err := rw.Set(dedupKey(req), b); err != nil {
			return nil, err
		}
		if err := prune(rw, req); err != nil {
			return nil, err
		}
	}
	return res, nil
}

func watermarkKey(client uint64) []byte { return binary.BigEndian.AppendUint64([]byte("W"), client) }

func watermark(r engine.Reader, client uint64) (uint64, error) {
	b, err := r.Get(watermarkKey(client))
	if err != nil || len(b) != 8 {
		return 0, err
	}
	return binary.BigEndian.Uint64(b), nil
}

// prune drops a client's remembered answers below max(first_incomplete,
// seq-1024) and moves its watermark there. NB: point deletes of the few
// answers stored in [old watermark, new watermark), found by a scan that
// starts at the old watermark so it never walks earlier tombstones: a
// range tombstone per command (as this code first did) slows every read,
// and group 0 sees a command per chunk written.
func prune(rw engine.ReadWriter, req *wire.RequestID) error {
	below := max(req.GetFirstIncomplete(), req.GetSeq()-min(req.GetSeq(), 1024))
	below = min(below, req.GetSeq()) // never drop the answer just stored
	wm, err := watermark(rw, req.GetClientId())
	if err != nil || below <= wm {
		return err
	}
	lo := binary.BigEndian.AppendUint64([]byte("r"), req.GetClientId())
	var keys [][]byte
	err = rw.Scan(binary.BigEndian.AppendUint64(bytes.Clone(lo), wm), binary.BigEndian.AppendUint64(bytes.Clone(lo), below), func(k, _ []byte) bool {
		keys = append(keys, bytes.Clone(k))
		return true
	})
	if err != nil {
		return err
	}
	for _, k := range keys {
		if err := rw.Delete(k); err != nil {
			return err
		}
	}
	return rw.Set(watermarkKey(req.GetClientId()), binary.BigEndian.AppendUint64(nil, below))
}

func apply(rw engine.ReadWriter, cmd *wire.Command) (*wire.Result, error) {
	switch op := cmd.GetOp().(type) {
	case *wire.Command_InitCluster:
		cur, err := rw.Get(keyClusterID)
		if err != nil {
			return nil, err
		}
		if cur != nil {
			return &wire.Result{Message: string(cur)}, nil
		}
		if op.InitCluster.GetClusterId() == "" {
			return &wire.Result{Errno: uint32(syscall.EINVAL), Message: "empty cluster id"}, nil
		}
		b, err := proto.Marshal(op.InitCluster)
		if err != nil {
			return nil, err
		}
		_ = rw.Set(keyClusterID, []byte(op.InitCluster.GetClusterId()))
		_ = rw.Set(keyMembers, b)
		_ = rw.Set(keyNextIno, binary.BigEndian.AppendUint64(nil, uint64(ids.RootIno)+1))
		if err := writeOutLegacy(rw); err != nil {
			return nil, err
		}
		return &wire.Result{Message: op.InitCluster.GetClusterId()}, nil
	case *wire.Command_AllocInodes:
		n := op.AllocInodes.GetCount()
		if n == 0 || n > MaxAlloc {
			return &wire.Result{Errno: uint32(syscall.EINVAL), Message: fmt.Sprintf("inode grant of %d: must be 1..%d", n, MaxAlloc)}, nil
		}
		next, err := NextIno(rw)
		if err != nil {
			return nil, err
		}
		if next == 0 {
			return &wire.Result{Errno: uint32(syscall.EAGAIN), Message: "cluster not initialised yet"}, nil
		}
		if next+n < next {
			return &wire.Result{Errno: uint32(syscall.ENOSPC), Message: "inode number space exhausted"}, nil
		}
		if g := op.AllocInodes.GetMinistry(); g > uint64(ids.RootMinistry) {
			m, err := GetMinistry(rw, g)
			if err != nil {
				return nil, err
			}
			if m == nil {
				return errResult(syscall.ENOENT, "inode grant for ministry %d, which does not exist", g), nil
			}
		}
		if err := rw.Set(keyNextIno, binary.BigEndian.AppendUint64(nil, next+n)); err != nil {
			return nil, err
		}
		if err := recordRange(rw, next, next+n, op.AllocInodes.GetMinistry()); err != nil {
			return nil, err
		}
		return &wire.Result{Start: next, End: next + n}, nil
	case *wire.Command_RegisterChunkServer:
		return registerChunkServer(rw, op.RegisterChunkServer)
	case *wire.Command_CreateReplicaGroup:
		return createReplicaGroup(rw, op.CreateReplicaGroup)
	case *wire.Command_AllocChunkHandles:
		return allocChunkHandles(rw, op.AllocChunkHandles)
	case *wire.Command_AddTokenKey:
		return addTokenKey(rw, op.AddTokenKey)
	case *wire.Command_BindNodeCert:
		return bindNodeCert(rw, op.BindNodeCert)
	case *wire.Command_ReplaceMember:
		return replaceMember(rw, op.ReplaceMember)
	case *wire.Command_MemberSynced:
		return memberSynced(rw, op.MemberSynced)
	case *wire.Command_CreateMinistry:
		id, res, err := createMinistry(rw, op.CreateMinistry.GetMembers())
		if err != nil || res != nil {
			return res, err
		}
		return &wire.Result{Start: id}, nil
	case *wire.Command_BeginMove:
		return beginMove(rw, cmd.GetNowNs(), op.BeginMove)
	case *wire.Command_MoveState:
		return moveState(rw, cmd.GetNowNs(), op.MoveState)
	case *wire.Command_JoinNode:
		return joinNode(rw, op.JoinNode)
	case *wire.Command_SetMembers:
		return setMembers(rw, op.SetMembers)
	case *wire.Command_DissolveMinistry:
		return dissolveMinistry(rw, op.DissolveMinistry)
	default:
		return &wire.Result{Errno: uint32(syscall.EINVAL), Message: fmt.Sprintf("operation %T is not a president operation", op)}, nil
	}
}

// ClusterID returns the cluster id, "" before initialisation.
func ClusterID(r engine.Reader) (string, error) {
	b, err := r.Get(keyClusterID)
	return string(b), err
}

// NextIno returns the next inode number to grant (0 before initialisation).
func NextIno(r engine.Reader) (uint64, error) {
	b, err := r.Get(keyNextIno)
	if err != nil || b == nil {
		return 0, err
	}
	return binary.BigEndian.Uint64(b), nil
}
