package namespace

import (
	"bytes"
	"fmt"
	"slices"
	"syscall"

	"github.com/govfs/govfs/internal/engine"
	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/posix"
	"github.com/govfs/govfs/internal/wire"
)

// Small files live inline (issue 4): their bytes are kept in the ministry
// under "b" <ino>, so reading or writing them touches no chunk server. A
// file is inline while that key exists; it then has no chunk records
// that count. A writer moving it to chunks copies the inline bytes into a
// fresh, unrecorded chunk, then DropInlineOp records that chunk as chunk
// 0 and drops the inline bytes in one step, if they are still what it
// copied: a crash in between leaves the inline bytes in force (the copy
// is garbage), and a writer with a stale copy can never replace bytes
// another writer wrote since. The inline bytes may be shorter than the size:
// the rest reads as zeros.

const kindInline = 'b'

// MaxInline is the most bytes a file may keep inline (each write is one
// Raft entry carrying them).
const MaxInline = 64 << 10

func inlineKey(ino ids.Ino) []byte { return u64Key(kindInline, uint64(ino)) }

// InlineData returns the inline bytes of ino and whether it is inline.
func InlineData(r engine.Reader, ino ids.Ino) ([]byte, bool, error) {
	b, err := r.Get(inlineKey(ino))
	if err != nil {
		return nil, false, fmt.Errorf("namespace: inline data of %v: %w", ino, err)
	}
	if b == nil {
		return nil, false, nil
	}
	return slices.Clone(b), true, nil
}

func writeInline(t *tx, op *wire.WriteInlineOp) (*wire.Result, error) {
	ino := ids.Ino(op.GetIno())
	limit := op.GetMaxInline()
	switch {
	case limit == 0 || limit > MaxInline:
		return nil, errnof(syscall.EINVAL, "write inline %v: limit %d outside [1, %d]", ino, limit, MaxInline)
	case len(op.GetData()) == 0:
		return nil, errnof(syscall.EINVAL, "write inline %v: no data", ino)
	case op.GetOffset() > MaxInline:
		return nil, errnof(syscall.EFBIG, "write inline %v: offset %d is past the inline limit", ino, op.GetOffset())
	}
	end := op.GetOffset() + uint64(len(op.GetData()))
	in, err := t.inode(ino)
	if err != nil {
		return nil, err
	}
	a := in.Attr
	switch a.Type {
	case wire.FileType_REGULAR:
	case wire.FileType_DIRECTORY:
		return nil, errnof(syscall.EISDIR, "write inline %v", ino)
	default:
		return nil, errnof(syscall.EINVAL, "write inline %v: a %v", ino, a.Type)
	}
	if err := posix.MayWriteData(a, t.caller, fmt.Sprintf("write inode %v", ino)); err != nil {
		return nil, err
	}
	if end > limit || a.Size > limit {
		return nil, errnof(syscall.EFBIG, "write inline %v: [%d, %d) with size %d does not fit inline (%d bytes)", ino, op.GetOffset(), end, a.Size, limit)
	}
	cur, inline, err := InlineData(t.r, ino)
	if err != nil {
		return nil, err
	}
	if !inline {
		has, err := hasChunks(t.r, ino)
		if err != nil {
			return nil, err
		}
		if has {
			return nil, errnof(syscall.EFBIG, "write inline %v: the file's bytes are in chunks", ino)
		}
	}
	buf := cur
	if uint64(len(buf)) < end {
		buf = append(buf, make([]byte, end-uint64(len(buf)))...)
	}
	copy(buf[op.GetOffset():], op.GetData())
	t.set(inlineKey(ino), buf)
	t.touch(in)
	a.Mode &^= posix.KillPriv(a, t.caller) // a write by a non-root caller drops setuid
	a.Size = max(a.Size, end)
	a.MtimeNs = t.now
	return attrResult(in), nil
}

func dropInline(t *tx, op *wire.DropInlineOp) (*wire.Result, error) {
	ino := ids.Ino(op.GetIno())
	c := op.GetChunk()
	if c != nil && (c.GetIndex() != 0 || c.GetHandle() == 0 || c.GetGroup() == 0) {
		return nil, errnof(syscall.EINVAL, "drop inline %v: the chunk must be chunk 0 with a handle and a replica group", ino)
	}
	in, err := t.inode(ino)
	if err != nil {
		return nil, err
	}
	if err := posix.MayWriteData(in.Attr, t.caller, fmt.Sprintf("write inode %v", ino)); err != nil {
		return nil, err
	}
	cur, inline, err := InlineData(t.r, ino)
	if err != nil {
		return nil, err
	}
	if !inline {
		// Done already: by this caller (a retry) only if chunk 0 is its
		// chunk; else another writer moved the file, and this caller's
		// copy must not be used.
		if c != nil {
			if got, err := chunkAt(t.r, ino, 0); err != nil {
				return nil, err
			} else if got != nil && got.GetHandle() == c.GetHandle() {
				return attrResult(in), nil
			}
		} else if len(op.GetExpect()) == 0 {
			return attrResult(in), nil
		}
		return nil, errnof(syscall.ESTALE, "drop inline %v: the file left inline by another move", ino)
	}
	if !bytes.Equal(cur, op.GetExpect()) {
		return nil, errnof(syscall.ESTALE, "drop inline %v: the inline bytes changed since the caller copied them", ino)
	}
	if c == nil && len(cur) > 0 {
		return nil, errnof(syscall.EINVAL, "drop inline %v: %d inline bytes and no chunk holding them", ino, len(cur))
	}
	if c != nil {
		b, err := marshal(&wire.ChunkRef{Index: 0, Handle: c.GetHandle(), Group: c.GetGroup()})
		if err != nil {
			return nil, err
		}
		t.set(chunkKey(ino, 0), b)
	}
	t.del(inlineKey(ino))
	t.touch(in)
	return attrResult(in), nil
}

// resizeInline cuts the inline bytes of ino to size (dropping them at 0).
func resizeInline(t *tx, ino ids.Ino, size uint64) error {
	cur, inline, err := InlineData(t.r, ino)
	if err != nil || !inline {
		return err
	}
	switch {
	case size == 0:
		t.del(inlineKey(ino))
	case size < uint64(len(cur)):
		t.set(inlineKey(ino), cur[:size])
	}
	return nil
}
