package clustermap

import (
	"encoding/binary"
	"fmt"
	"syscall"

	"github.com/govfs/govfs/internal/engine"
	"github.com/govfs/govfs/internal/wire"
	"google.golang.org/protobuf/proto"
)

// Chunk-server keys (relative to the group's state prefix):
//
//	"cs" id        wire.ChunkServer
//	"cx" store_id  u64 id of the server registered with that store
//	"G" id         wire.ReplicaGroup (not "r…": dedup records own that)
//	"nextcs"       u64 next chunk-server id (from 1)
//	"nextrg"       u64 next replica-group id (from 1)
//	"nexthandle"   u64 next chunk handle (from 1)

var (
	keyNextCS     = []byte("nextcs")
	keyNextRG     = []byte("nextrg")
	keyNextHandle = []byte("nexthandle")
)

// MaxReplicas bounds a replica group's size.
const MaxReplicas = 7

func csKey(id uint64) []byte   { return binary.BigEndian.AppendUint64([]byte("cs"), id) }
func rgKey(id uint64) []byte   { return binary.BigEndian.AppendUint64([]byte("G"), id) }
func storeKey(s string) []byte { return append([]byte("cx"), s...) }
func errResult(e syscall.Errno, format string, args ...any) *wire.Result {
	return &wire.Result{Errno: uint32(e), Message: fmt.Sprintf(format, args...)}
}

// counter reads a u64 counter (first value 1) and stores v+n; it returns v.
func counter(rw engine.ReadWriter, key []byte, n uint64) (uint64, error) {
	v := uint64(1)
	if b, err := rw.Get(key); err != nil {
		return 0, err
	} else if len(b) == 8 {
		v = binary.BigEndian.Uint64(b)
	}
	if v+n < v {
		return 0, fmt.Errorf("clustermap: counter %s overflows", key)
	}
	return v, rw.Set(key, binary.BigEndian.AppendUint64(nil, v+n))
}

// ChunkServerOfStore returns the id of the chunk server registered with
// store id store (0: none).
func ChunkServerOfStore(r engine.Reader, store string) (uint64, error) {
	b, err := r.Get(storeKey(store))
	if err != nil || len(b) != 8 {
		return 0, err
	}
	return binary.BigEndian.Uint64(b), nil
}

func registerChunkServer(rw engine.ReadWriter, op *wire.RegisterChunkServerOp) (*wire.Result, error) {
	s := op.GetServer()
	switch {
	case s == nil:
		return errResult(syscall.EINVAL, "register chunk server: no server given"), nil
	case s.GetStoreId() == "":
		return errResult(syscall.EINVAL, "register chunk server: empty store id"), nil
	case s.GetAddr() == "" || s.GetHost() == "":
		return errResult(syscall.EINVAL, "register chunk server: address and host are required"), nil
	case s.GetCapacity() < 0:
		return errResult(syscall.EINVAL, "register chunk server: negative capacity %d", s.GetCapacity()), nil
	}
	if s.GetChunkSize() <= 0 {
		return errResult(syscall.EINVAL, "register chunk server: chunk size %d", s.GetChunkSize()), nil
	}
	if cs := ClusterChunkSize(rw); cs != 0 && cs != s.GetChunkSize() {
		return errResult(syscall.EINVAL, "register chunk server: its store has %d-byte chunks but the cluster uses %d; start it with --chunk-size %d on an empty --data directory",
			s.GetChunkSize(), cs, cs), nil
	}
	rec := proto.Clone(s).(*wire.ChunkServer)
	if b, err := rw.Get(storeKey(s.GetStoreId())); err != nil {
		return nil, err
	} else if len(b) == 8 {
		rec.Id = binary.BigEndian.Uint64(b) // the same store comes back
		old, err := ChunkServer(rw, rec.Id)
		if err != nil {
			return nil, err
		}
		// Another certificate may not take over a registered store (a
		// plaintext registration, with no name, changes nothing).
		if on := old.GetCertName(); on != "" && s.GetCertName() != "" && on != s.GetCertName() {
			return errResult(syscall.EPERM, "register chunk server: store %s is chunk server %d, registered by certificate chunk/%s, not chunk/%s",
				s.GetStoreId(), rec.Id, on, s.GetCertName()), nil
		}
		if rec.GetCertName() == "" {
			rec.CertName = old.GetCertName()
		}
	} else {
		id, err := counter(rw, keyNextCS, 1)
		if err != nil {
			return nil, err
		}
		rec.Id = id
		if err := rw.Set(storeKey(s.GetStoreId()), binary.BigEndian.AppendUint64(nil, id)); err != nil {
			return nil, err
		}
	}
	b, err := proto.Marshal(rec)
	if err != nil {
		return nil, err
	}
	if err := rw.Set(csKey(rec.Id), b); err != nil {
		return nil, err
	}
	return &wire.Result{Start: rec.Id}, nil
}

func createReplicaGroup(rw engine.ReadWriter, op *wire.CreateReplicaGroupOp) (*wire.Result, error) {
	m := op.GetMembers()
	if len(m) == 0 || len(m) > MaxReplicas {
		return errResult(syscall.EINVAL, "replica group of %d members: want 1..%d", len(m), MaxReplicas), nil
	}
	hosts := map[string]uint64{}
	for _, id := range m {
		s, err := ChunkServer(rw, id)
		if err != nil {
			return nil, err
		}
		if s == nil {
			return errResult(syscall.ENOENT, "replica group member %d is not a registered chunk server", id), nil
		}
		if other, dup := hosts[s.GetHost()]; dup {
			return errResult(syscall.EINVAL, "replica group members %d and %d are on the same host %s", other, id, s.GetHost()), nil
		}
		hosts[s.GetHost()] = id
	}
	id, err := counter(rw, keyNextRG, 1)
	if err != nil {
		return nil, err
	}
	g := &wire.ReplicaGroup{Id: id, Members: m, Primary: m[0], Epoch: 1, PlacementNotes: op.GetPlacementNotes()}
	b, err := proto.Marshal(g)
	if err != nil {
		return nil, err
	}
	if err := rw.Set(rgKey(id), b); err != nil {
		return nil, err
	}
	return &wire.Result{Start: id}, nil
}

func allocChunkHandles(rw engine.ReadWriter, op *wire.AllocChunkHandlesOp) (*wire.Result, error) {
	n := op.GetCount()
	if n == 0 || n > MaxAlloc {
		return errResult(syscall.EINVAL, "chunk handle grant of %d: must be 1..%d", n, MaxAlloc), nil
	}
	start, err := counter(rw, keyNextHandle, n)
	if err != nil {
		return errResult(syscall.ENOSPC, "chunk handle space exhausted"), nil
	}
	return &wire.Result{Start: start, End: start + n}, nil
}

// ChunkServer returns the registered server id, or nil.
func ChunkServer(r engine.Reader, id uint64) (*wire.ChunkServer, error) {
	b, err := r.Get(csKey(id))
	if err != nil || b == nil {
		return nil, err
	}
	s := &wire.ChunkServer{}
	if err := proto.Unmarshal(b, s); err != nil {
		return nil, fmt.Errorf("clustermap: decode chunk server %d: %w", id, err)
	}
	return s, nil
}

// ChunkServers lists every registered server in id order.
func ChunkServers(r engine.Reader) ([]*wire.ChunkServer, error) {
	return scanAll[wire.ChunkServer](r, "cs", "ct")
}

// ReplicaGroups lists every replica group in id order.
func ReplicaGroups(r engine.Reader) ([]*wire.ReplicaGroup, error) {
	return scanAll[wire.ReplicaGroup](r, "G", "H")
}

// ClusterChunkSize is the chunk size of the registered servers (0 before
// the first registers).
func ClusterChunkSize(r engine.Reader) int64 {
	var size int64
	_ = r.Scan([]byte("cs"), []byte("ct"), func(_, v []byte) bool {
		s := &wire.ChunkServer{}
		if proto.Unmarshal(v, s) == nil {
			size = s.GetChunkSize()
		}
		return false
	})
	return size
}
