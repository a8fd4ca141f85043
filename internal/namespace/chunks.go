package namespace

import (
	"fmt"
	"slices"
	"syscall"

	"github.com/govfs/govfs/internal/engine"
	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/posix"
	"github.com/govfs/govfs/internal/wire"
	"google.golang.org/protobuf/proto"
)

// kindChunk keys the file → chunk table: "c" ino index → wire.ChunkRef.
const kindChunk = 'c'

func chunkPrefix(ino ids.Ino) []byte { return u64Key(kindChunk, uint64(ino)) }

func chunkKey(ino ids.Ino, index uint64) []byte {
	return append(chunkPrefix(ino), u64Key(0, index)[1:]...)
}

// setChunk records chunk op.Chunk.Index of a regular file unless one is
// recorded already, and returns the recorded one: two writers racing for
// the same chunk agree on one handle (the loser's handle is garbage for
// the collector).
func setChunk(t *tx, op *wire.SetChunkOp) (*wire.Result, error) {
	c := op.GetChunk()
	if c == nil || c.GetHandle() == 0 || c.GetGroup() == 0 {
		return nil, errnof(syscall.EINVAL, "set chunk: handle and replica group are required")
	}
	in, err := t.inode(ids.Ino(op.GetIno()))
	if err != nil {
		return nil, err
	}
	switch in.Attr.Type {
	case wire.FileType_REGULAR:
	case wire.FileType_DIRECTORY:
		return nil, errnof(syscall.EISDIR, "set chunk of inode %d", op.GetIno())
	default:
		return nil, errnof(syscall.EINVAL, "set chunk of inode %d: not a regular file", op.GetIno())
	}
	if err := posix.MayWriteData(in.Attr, t.caller, fmt.Sprintf("write inode %d", op.GetIno())); err != nil {
		return nil, err
	}
	// What a client sent besides the chunk's place (a token, an inode
	// from an answer) is not recorded.
	c = &wire.ChunkRef{Index: c.GetIndex(), Handle: c.GetHandle(), Group: c.GetGroup()}
	key := chunkKey(ids.Ino(op.GetIno()), c.GetIndex())
	if v, err := t.r.Get(key); err != nil {
		return nil, fmt.Errorf("namespace: get chunk: %w", err)
	} else if v != nil {
		cur := &wire.ChunkRef{}
		if err := proto.Unmarshal(v, cur); err != nil {
			return nil, fmt.Errorf("namespace: corrupt chunk record %v/%d: %w", op.GetIno(), c.GetIndex(), err)
		}
		return &wire.Result{Chunk: cur}, nil
	}
	b, err := marshal(c)
	if err != nil {
		return nil, err
	}
	t.set(key, b)
	t.touch(in)
	return &wire.Result{Chunk: c, Attr: in.Attr}, nil
}

// GetChunk returns the record of chunk index of ino (nil: none).
func GetChunk(r engine.Reader, ino ids.Ino, index uint64) (*wire.ChunkRef, error) {
	if _, err := loadInode(r, ino); err != nil {
		return nil, err
	}
	return chunkAt(r, ino, index)
}

// GetChunks lists the chunks recorded for a regular file, in index order.
func GetChunks(r engine.Reader, ino ids.Ino) ([]*wire.ChunkRef, error) {
	cs, _, err := GetChunksUpTo(r, ino, 0)
	return cs, err
}

// GetChunksUpTo is GetChunks that gives up past max records (max > 0):
// then it returns none and more = true.
func GetChunksUpTo(r engine.Reader, ino ids.Ino, max int) (cs []*wire.ChunkRef, more bool, err error) {
	if _, err := loadInode(r, ino); err != nil {
		return nil, false, err
	}
	var out []*wire.ChunkRef
	var decodeErr error
	p := chunkPrefix(ino)
	err = r.Scan(p, prefixEnd(p), func(_, v []byte) bool {
		if max > 0 && len(out) == max {
			more = true
			return false
		}
		c := &wire.ChunkRef{}
		if decodeErr = proto.Unmarshal(v, c); decodeErr != nil {
			return false
		}
		out = append(out, c)
		return true
	})
	if err == nil {
		err = decodeErr
	}
	if err != nil {
		return nil, false, fmt.Errorf("namespace: list chunks of %v: %w", ino, err)
	}
	if more {
		return nil, true, nil
	}
	return out, false, nil
}

// dropChunks deletes the chunk records of an inode being removed (the
// chunks themselves are collected later, DESIGN §6), and of chunks wholly
// past a new size when a file is truncated: those with index >=
// firstDropped (0 drops all).
func dropChunks(t *tx, ino ids.Ino, firstDropped uint64) error {
	p := chunkPrefix(ino)
	var keys [][]byte
	err := t.r.Scan(chunkKey(ino, firstDropped), prefixEnd(p), func(k, _ []byte) bool {
		keys = append(keys, slices.Clone(k))
		return true
	})
	if err != nil {
		return fmt.Errorf("namespace: drop chunks of %v: %w", ino, err)
	}
	for _, k := range keys {
		t.del(k)
	}
	return nil
}

// hasChunks reports whether any chunk is recorded for ino.
func hasChunks(r engine.Reader, ino ids.Ino) (bool, error) {
	found := false
	p := chunkPrefix(ino)
	err := r.Scan(p, prefixEnd(p), func(_, _ []byte) bool {
		found = true
		return false
	})
	return found, err
}

// newSize validates the size part of a setattr and returns the size the
// file will have (0 when op does not set the size). SETATTR_SIZE_GROW
// makes the size max(current, op.size), so writers extending a file
// concurrently never shrink it; it is only valid with SETATTR_SIZE.
//
// Shrinking a file with recorded chunks to a non-zero size needs
// op.chunk_size: the ministry does not know the cluster's chunk size, and
// without it cannot tell which records lie wholly beyond the new end. The
// caller has cut the chunk holding the new end on its chunk servers
// before (so a later grow reads zeros there); without chunk_size the
// shrink is refused with EOPNOTSUPP, as the cut bytes would come back.
func newSize(t *tx, in *wire.Inode, op *wire.SetattrOp, has func(wire.SetattrField) bool) (uint64, error) {
	ino := ids.Ino(op.Ino)
	if !has(wire.SetattrField_SETATTR_SIZE) {
		if has(wire.SetattrField_SETATTR_SIZE_GROW) {
			return 0, errnof(syscall.EINVAL, "setattr %v: SETATTR_SIZE_GROW without SETATTR_SIZE", ino)
		}
		return 0, nil
	}
	if op.ChunkSize < 0 {
		return 0, errnof(syscall.EINVAL, "truncate %v: chunk size %d", ino, op.ChunkSize)
	}
	size := op.Size
	if has(wire.SetattrField_SETATTR_SIZE_GROW) {
		size = max(size, in.Attr.Size)
	}
	if size != 0 && size < in.Attr.Size && op.ChunkSize == 0 {
		has, err := hasChunks(t.r, ino)
		if err != nil {
			return 0, err
		}
		if has {
			return 0, errnof(syscall.EOPNOTSUPP, "truncate %v to %d: shrinking a file with data to a non-zero size needs the chunk size", ino, size)
		}
	}
	return size, nil
}

// resize sets the size of a regular file (and its mtime) and releases the
// chunk records the new size leaves wholly out: all of them at size 0, and
// those with index*chunkSize >= size when shrinking with chunkSize > 0.
// The chunks themselves are collected later (DESIGN §6).
func resize(t *tx, in *wire.Inode, size uint64, chunkSize int64) error {
	a := in.Attr
	old := a.Size
	a.Size = size
	a.MtimeNs = t.now
	if err := resizeInline(t, ids.Ino(a.Ino), size); err != nil {
		return err
	}
	switch {
	case size == 0:
		return dropChunks(t, ids.Ino(a.Ino), 0)
	case size < old && chunkSize > 0:
		cs := uint64(chunkSize)
		return dropChunks(t, ids.Ino(a.Ino), size/cs+min(size%cs, 1))
	}
	return nil
}

// chunkAt returns the chunk record of (ino, index), or nil.
func chunkAt(r engine.Reader, ino ids.Ino, index uint64) (*wire.ChunkRef, error) {
	b, err := r.Get(chunkKey(ino, index))
	if err != nil {
		return nil, fmt.Errorf("namespace: get chunk: %w", err)
	}
	if b == nil {
		return nil, nil
	}
	c := &wire.ChunkRef{}
	if err := proto.Unmarshal(b, c); err != nil {
		return nil, fmt.Errorf("namespace: corrupt chunk record %v/%d: %w", ino, index, err)
	}
	return c, nil
}
