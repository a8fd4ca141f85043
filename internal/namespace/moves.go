package namespace

// Subtree moves between ministries (docs/metadata.md, "Moves"). The
// president's log decides a move; the ministries carry it out with
// these commands, each idempotent so that a coordinator that crashed can
// repeat any step:
//
//	source: ExportSubtreeOp   freeze the subtree ("z" record)
//	        (ExportKeys)      the target's copy is read from the source
//	target: ImportSubtreeOp   install the copy, frozen
//	president: COMMITTED      the decision
//	target: ImportSubtreeOp   activate: the copy opens (unassign: the
//	        (activate)        parent's entry stops being a referral)
//	source: FinishExportOp    drop the copy, leave "f" forwarding
//	                          records, turn the entry into a referral
//
// Keys:
//
//	"z" <ino>   frozen: move id u64, target ministry u64
//	"f" <ino>   forwarding record: the ministry the inode moved to (u64)
//
// At this stage only an empty directory moves (its inode and xattrs);
// a populated subtree is refused with a clear error.

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"syscall"

	"github.com/govfs/govfs/internal/engine"
	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/wire"
)

const (
	kindFrozen  = 'z'
	kindForward = 'f'
)

func frozenKey(ino ids.Ino) []byte  { return u64Key(kindFrozen, uint64(ino)) }
func forwardKey(ino ids.Ino) []byte { return u64Key(kindForward, uint64(ino)) }

// Frozen returns the move that froze ino (0: not frozen).
func Frozen(r engine.Reader, ino ids.Ino) (move uint64, err error) {
	v, err := r.Get(frozenKey(ino))
	if err != nil || len(v) != 16 {
		return 0, err
	}
	return binary.BigEndian.Uint64(v), nil
}

// Forwarded returns the ministry ino moved to (0: it did not move away).
func Forwarded(r engine.Reader, ino ids.Ino) (ids.GroupID, error) {
	v, err := r.Get(forwardKey(ino))
	if err != nil || len(v) != 8 {
		return 0, err
	}
	return ids.GroupID(binary.BigEndian.Uint64(v)), nil
}

// TouchedInodes returns the inodes a client command reads or changes
// (directories whose entries change, the inode changed, the children
// named by unlink and rename): a command touching a frozen one waits.
func TouchedInodes(r engine.Reader, cmd *wire.Command) []ids.Ino {
	var out []ids.Ino
	child := func(parent uint64, name []byte) {
		if d, err := loadDirent(r, ids.Ino(parent), name); err == nil && d != nil {
			out = append(out, ids.Ino(d.GetIno()))
		}
	}
	switch op := cmd.GetOp().(type) {
	case *wire.Command_Create:
		out = append(out, ids.Ino(op.Create.GetParent()))
	case *wire.Command_Link:
		out = append(out, ids.Ino(op.Link.GetIno()), ids.Ino(op.Link.GetNewParent()))
	case *wire.Command_Unlink:
		out = append(out, ids.Ino(op.Unlink.GetParent()))
		child(op.Unlink.GetParent(), op.Unlink.GetName())
	case *wire.Command_Rename:
		out = append(out, ids.Ino(op.Rename.GetParent()), ids.Ino(op.Rename.GetNewParent()))
		child(op.Rename.GetParent(), op.Rename.GetName())
		child(op.Rename.GetNewParent(), op.Rename.GetNewName())
	case *wire.Command_Setattr:
		out = append(out, ids.Ino(op.Setattr.GetIno()))
	case *wire.Command_SetXattr:
		out = append(out, ids.Ino(op.SetXattr.GetIno()))
	case *wire.Command_RemoveXattr:
		out = append(out, ids.Ino(op.RemoveXattr.GetIno()))
	case *wire.Command_SetChunk:
		out = append(out, ids.Ino(op.SetChunk.GetIno()))
	case *wire.Command_WriteInline:
		out = append(out, ids.Ino(op.WriteInline.GetIno()))
	case *wire.Command_DropInline:
		out = append(out, ids.Ino(op.DropInline.GetIno()))
	case *wire.Command_MarkDirLease:
		out = append(out, ids.Ino(op.MarkDirLease.GetDir()))
	case *wire.Command_Batch:
		for _, c := range op.Batch.GetCmds() {
			out = append(out, TouchedInodes(r, c)...)
		}
	}
	return out
}

// AnyFrozen reports whether anything in the ministry is frozen. Nearly
// always nothing is: one seek says so, instead of reading the command's
// entries and a lookup per inode on every command of every replica.
func AnyFrozen(r engine.Reader) (bool, error) {
	found := false
	err := r.Scan([]byte{kindFrozen}, []byte{kindFrozen + 1}, func(_, _ []byte) bool {
		found = true
		return false
	})
	return found, err
}

// FrozenIn returns the first inode of inos that is frozen by a move, and
// that move (0, 0 when none is).
func FrozenIn(r engine.Reader, inos []ids.Ino) (ids.Ino, uint64, error) {
	if len(inos) == 0 {
		return 0, 0, nil
	}
	if frozen, err := AnyFrozen(r); err != nil || !frozen {
		return 0, 0, err
	}
	for _, ino := range inos {
		m, err := Frozen(r, ino)
		if err != nil {
			return 0, 0, err
		}
		if m != 0 {
			return ino, m, nil
		}
	}
	return 0, 0, nil
}

// movingResult refuses a command that touches a frozen subtree; it is not
// remembered for dedup, so the same request applies once the move ended.
func movingResult(r engine.Reader, cmd *wire.Command) (*wire.Result, error) {
	switch cmd.GetOp().(type) {
	case *wire.Command_ExportSubtree, *wire.Command_ImportSubtree, *wire.Command_FinishExport, *wire.Command_AbortExport:
		return nil, nil
	}
	if frozen, err := AnyFrozen(r); err != nil || !frozen {
		return nil, err
	}
	ino, move, err := FrozenIn(r, TouchedInodes(r, cmd))
	if err != nil || move == 0 {
		return nil, err
	}
	return &wire.Result{Errno: uint32(syscall.EAGAIN), Moving: true,
		Message: fmt.Sprintf("inode %v is being moved to another ministry (move %d); retry", ino, move)}, nil
}

// subtreePrefixes are the key prefixes that hold an inode's own state.
func subtreePrefixes(ino ids.Ino) [][]byte {
	return [][]byte{
		u64Key(kindInline, uint64(ino)),
		chunkPrefix(ino),
		inodeKey(ino),
		xattrPrefix(ino),
	}
}

func exportSubtree(t *tx, op *wire.ExportSubtreeOp) (*wire.Result, error) {
	ino := ids.Ino(op.GetIno())
	if op.GetMove() == 0 || ino == 0 {
		return nil, errnof(syscall.EINVAL, "export: move and inode are required")
	}
	if m, err := Frozen(t.r, ino); err != nil {
		return nil, err
	} else if m == op.GetMove() {
		return &wire.Result{}, nil // repeated
	} else if m != 0 {
		return nil, errnof(syscall.EBUSY, "inode %v is being moved by move %d", ino, m)
	}
	in, err := t.dir(ino)
	if err != nil {
		return nil, err
	}
	// The entry naming it, when it lives here (an assign); for an
	// unassign the entry is in the parent's ministry.
	if pin, err := loadInode(t.r, ids.Ino(op.GetParent())); err == nil && pin != nil {
		d, err := loadDirent(t.r, ids.Ino(op.GetParent()), op.GetName())
		if err != nil {
			return nil, err
		}
		if d == nil || d.GetIno() != op.GetIno() {
			return nil, errnof(syscall.ENOENT, "%v/%q no longer names inode %v (renamed or removed meanwhile)", op.GetParent(), op.GetName(), ino)
		}
		if d.GetMinistry() != 0 {
			return nil, errnof(syscall.EEXIST, "%v/%q already belongs to ministry %d", op.GetParent(), op.GetName(), d.GetMinistry())
		}
	}
	empty, err := isEmptyDir(t.r, ino)
	if err != nil {
		return nil, err
	}
	if !empty {
		return nil, errnof(syscall.ENOTEMPTY, "the directory is not empty: moving a populated subtree to another ministry is not built yet; assign the directory while it is empty (files created in it afterwards belong to the new ministry)")
	}
	_ = in
	v := binary.BigEndian.AppendUint64(nil, op.GetMove())
	t.set(frozenKey(ino), binary.BigEndian.AppendUint64(v, op.GetTarget()))
	return &wire.Result{}, nil
}

// ExportKeys returns up to limit keys of the subtree frozen by move at
// ino, after key `after`, and whether that was the last page.
func ExportKeys(r engine.Reader, move uint64, ino ids.Ino, after []byte, limit int) ([]*wire.KV, bool, error) {
	m, err := Frozen(r, ino)
	if err != nil {
		return nil, false, err
	}
	if m != move || move == 0 {
		return nil, false, errnof(syscall.EINVAL, "inode %v is not frozen by move %d", ino, move)
	}
	if limit <= 0 {
		limit = 1000
	}
	var out []*wire.KV
	for _, p := range subtreePrefixes(ino) {
		lo := p
		end := prefixEnd(p)
		if len(after) > 0 {
			if bytes.Compare(after, end) >= 0 {
				continue
			}
			if bytes.Compare(after, p) >= 0 {
				lo = append(bytes.Clone(after), 0)
			}
		}
		full := false
		err := r.Scan(lo, end, func(k, v []byte) bool {
			out = append(out, &wire.KV{Key: bytes.Clone(k), Value: bytes.Clone(v)})
			full = len(out) >= limit
			return !full
		})
		if err != nil {
			return nil, false, err
		}
		if full {
			return out, false, nil
		}
	}
	return out, true, nil
}

// importable says whether key k may be installed for a subtree rooted
// at ino: only the kinds subtreePrefixes exports, of that inode.
func importable(k []byte, ino ids.Ino) bool {
	for _, p := range subtreePrefixes(ino) {
		if bytes.HasPrefix(k, p) {
			return true
		}
	}
	return false
}

func importSubtree(t *tx, op *wire.ImportSubtreeOp) (*wire.Result, error) {
	ino := ids.Ino(op.GetIno())
	if op.GetMove() == 0 || ino == 0 {
		return nil, errnof(syscall.EINVAL, "import: move and inode are required")
	}
	m, err := Frozen(t.r, ino)
	if err != nil {
		return nil, err
	}
	_, held := loadInode(t.r, ino)
	held2 := held == nil
	if op.GetActivate() {
		return activateImport(t, op, m, held2)
	}
	switch {
	case m != 0 && m != op.GetMove():
		return nil, errnof(syscall.EBUSY, "import of inode %v: it is being moved by move %d", ino, m)
	case m == 0 && held2:
		// Held and live here: this import is late (its move was decided
		// and activated already) and must not overwrite what clients
		// changed since.
		return nil, errnof(syscall.EEXIST, "import of inode %v for move %d: it is already held here", ino, op.GetMove())
	}
	hasInode := false
	for _, kv := range op.GetKvs() {
		if !importable(kv.GetKey(), ino) {
			return nil, errnof(syscall.EINVAL, "import of inode %v: key %q does not belong to it", ino, kv.GetKey())
		}
		hasInode = hasInode || bytes.Equal(kv.GetKey(), inodeKey(ino))
	}
	if !hasInode {
		return nil, errnof(syscall.EINVAL, "import of inode %v: the copy has no inode record", ino)
	}
	// A copy left by an earlier import of this move is replaced whole
	// (nobody changed it: it stays frozen until the activate step).
	for _, p := range subtreePrefixes(ino) {
		if err := t.r.Scan(p, prefixEnd(p), func(k, _ []byte) bool {
			t.del(bytes.Clone(k))
			return true
		}); err != nil {
			return nil, err
		}
	}
	for _, kv := range op.GetKvs() {
		t.set(bytes.Clone(kv.GetKey()), bytes.Clone(kv.GetValue()))
	}
	t.del(forwardKey(ino)) // it may have lived here before
	v := binary.BigEndian.AppendUint64(nil, op.GetMove())
	t.set(frozenKey(ino), binary.BigEndian.AppendUint64(v, op.GetSource()))
	return &wire.Result{}, nil
}

// activateImport opens an imported copy after the decision: the freeze
// goes, and for an unassign the parent's entry (here) stops being a
// referral.
func activateImport(t *tx, op *wire.ImportSubtreeOp, frozenBy uint64, held bool) (*wire.Result, error) {
	ino := ids.Ino(op.GetIno())
	switch {
	case frozenBy == op.GetMove():
		t.del(frozenKey(ino))
	case frozenBy == 0 && held:
		return &wire.Result{}, nil // repeated
	default:
		return nil, errnof(syscall.EINVAL, "activate inode %v for move %d: no copy of it was imported by that move", ino, op.GetMove())
	}
	parent := ids.Ino(op.GetParent())
	if _, err := loadInode(t.r, parent); err == nil {
		// An unassign: the entry is here.
		d, err := loadDirent(t.r, parent, op.GetName())
		if err != nil {
			return nil, err
		}
		if d == nil || d.GetIno() != op.GetIno() {
			return nil, errnof(syscall.ENOENT, "activate: %v/%q does not name inode %v here", parent, op.GetName(), ino)
		}
		d.Ministry = 0
		if err := t.setDirent(parent, op.GetName(), d); err != nil {
			return nil, err
		}
		t.setParent(ino, parent)
	}
	return &wire.Result{}, nil
}

func finishExport(t *tx, op *wire.FinishExportOp) (*wire.Result, error) {
	ino := ids.Ino(op.GetIno())
	m, err := Frozen(t.r, ino)
	if err != nil {
		return nil, err
	}
	if m != op.GetMove() {
		if fw, err := Forwarded(t.r, ino); err == nil && fw == ids.GroupID(op.GetTarget()) && m == 0 {
			return &wire.Result{}, nil // repeated
		}
		return nil, errnof(syscall.EINVAL, "finish export: inode %v is not frozen by move %d", ino, op.GetMove())
	}
	for _, p := range subtreePrefixes(ino) {
		if err := t.r.Scan(p, prefixEnd(p), func(k, _ []byte) bool {
			t.del(bytes.Clone(k))
			return true
		}); err != nil {
			return nil, err
		}
	}
	t.deleted[ino] = true
	t.del(frozenKey(ino))
	t.del(parentKey(ino))
	t.del(dirLeaseKey(ino))
	t.set(forwardKey(ino), binary.BigEndian.AppendUint64(nil, op.GetTarget()))
	parent := ids.Ino(op.GetParent())
	if _, err := loadInode(t.r, parent); err == nil {
		// An assign: the entry here becomes a referral.
		d, err := loadDirent(t.r, parent, op.GetName())
		if err != nil {
			return nil, err
		}
		if d != nil && d.GetIno() == op.GetIno() {
			d.Ministry = op.GetTarget()
			if err := t.setDirent(parent, op.GetName(), d); err != nil {
				return nil, err
			}
		}
	}
	return &wire.Result{}, nil
}

func abortExport(t *tx, op *wire.AbortExportOp) (*wire.Result, error) {
	m, err := Frozen(t.r, ids.Ino(op.GetIno()))
	if err != nil {
		return nil, err
	}
	if m == op.GetMove() && m != 0 {
		t.del(frozenKey(ids.Ino(op.GetIno())))
	}
	return &wire.Result{}, nil
}
