package namespace

import (
	"encoding/binary"
	"fmt"

	"github.com/govfs/govfs/internal/engine"
	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/wire"
	"google.golang.org/protobuf/proto"
)

// ChunkPos is a position in a ministry's file → chunk table: the record
// of chunk Index of inode Ino. Records are visited in (Ino, Index) order.
type ChunkPos struct {
	Ino   ids.Ino
	Index uint64
}

// after returns the first position past p.
func (p ChunkPos) after() ChunkPos {
	if p.Index == ^uint64(0) {
		return ChunkPos{Ino: p.Ino + 1}
	}
	return ChunkPos{Ino: p.Ino, Index: p.Index + 1}
}

// ChunkRefs calls fn for every chunk record of a ministry's state r (the
// "c" table), in (inode, index) order. An error from fn stops the scan
// and is returned.
func ChunkRefs(r engine.Reader, fn func(ino ids.Ino, c *wire.ChunkRef) error) error {
	_, _, err := ChunkRefsFrom(r, ChunkPos{}, 0, fn)
	return err
}

// ChunkRefsFrom is ChunkRefs in pages: it visits the records at or after
// from, at most limit of them (0 for no limit), and returns the position
// to resume from and whether the table is exhausted.
//
// NB: a scan resumed in a later view of the state (the garbage collector
// pages so that no single read holds up the group's applies) still visits
// exactly once every record present throughout, because records are never
// moved to another key; records added or released meanwhile may or may
// not be visited.
func ChunkRefsFrom(r engine.Reader, from ChunkPos, limit int, fn func(ino ids.Ino, c *wire.ChunkRef) error) (next ChunkPos, done bool, err error) {
	next, done = from, true
	var ferr error
	n := 0
	end := prefixEnd([]byte{kindChunk})
	err = r.Scan(chunkKey(from.Ino, from.Index), end, func(k, v []byte) bool {
		if limit > 0 && n == limit {
			done = false
			return false
		}
		if len(k) != 17 {
			ferr = fmt.Errorf("namespace: chunk table key %x is not 17 bytes", k)
			return false
		}
		pos := ChunkPos{Ino: ids.Ino(binary.BigEndian.Uint64(k[1:])), Index: binary.BigEndian.Uint64(k[9:])}
		c := &wire.ChunkRef{}
		if ferr = proto.Unmarshal(v, c); ferr != nil {
			ferr = fmt.Errorf("namespace: corrupt chunk record %v/%d: %w", pos.Ino, pos.Index, ferr)
			return false
		}
		if ferr = fn(pos.Ino, c); ferr != nil {
			return false
		}
		n++
		next = pos.after()
		// The last possible key: nothing can follow it.
		if pos.Ino == ^ids.Ino(0) && pos.Index == ^uint64(0) {
			return false
		}
		return true
	})
	if err == nil {
		err = ferr
	}
	if err != nil {
		return from, false, fmt.Errorf("namespace: scan chunk table: %w", err)
	}
	return next, done, nil
}
