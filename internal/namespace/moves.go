package namespace

// Subtree moves between ministries (docs/metadata.md, "Moves"). The
// president's log decides a move; the ministries carry it out with
// these commands, each idempotent so that a coordinator that crashed can
// repeat any step:
//
//	source: ExportSubtreeOp   freeze the subtree's root ("z" record)
//	source: FreezeEntriesOp   freeze what the frozen directories name,
//	                          a page at a time, down to the leaves
//	        (ExportKeys)      the target's copy is read from the source,
//	target: ImportSubtreeOp   and installed there, frozen, a page at a time
//	president: COMMITTED      the decision
//	target: ImportSubtreeOp   activate: the copy opens (unassign: the
//	        (activate)        parent's entry stops being a referral)
//	source: FinishExportOp    drop the copy, leave "f" forwarding
//	                          records, turn the entry into a referral
//
// Abort (before COMMITTED only): AbortExportOp unfreezes the source and,
// with drop_copy, deletes the target's partial copy.
//
// Keys:
//
//	"z" <ino>   frozen: move id u64, other ministry u64 (the target at
//	            the source, the source at the target)
//	"f" <ino>   forwarding record: the ministry the inode moved to (u64)
//	"Y" <move>  source, after the decision: the target (u64). From the
//	            first finish page on, what still carries this move's "z"
//	            record is the target's: clients are redirected there,
//	            reads too, while later pages delete the stale copy.
//	"O" <move>  target, after the decision: the copy is open. Its "z"
//	            records no longer freeze anything; later pages delete
//	            them. So the pause ends after one page on each side,
//	            however big the subtree.
//	"Z" <move>  empty: the move has "z" records here. Set with the first,
//	            deleted with the last, so that "is anything frozen" is a
//	            seek over a handful of keys (a seek into "z" would walk
//	            over the tombstones a big move leaves until compaction:
//	            that made every command of the source slower after a
//	            move of 38,000 files, found with pprof).
//	"A" <move>  the move was aborted here (AbortExportOp): a late freeze
//	            or copy page of a deposed coordinator is refused, instead
//	            of freezing again what the abort unfroze (writes would
//	            wait for ever) or leaving an invisible partial copy. One
//	            small key per aborted move, kept.
//
// Every inode of a moving subtree gets its own "z" record (files have
// no parent pointer, so "is it below a frozen directory" cannot be
// answered by walking up). A frozen directory's entries cannot change,
// so once the walk is over the set of frozen inodes is exactly the
// subtree; what changed before an inode was frozen is simply part of
// the copy. Referrals inside the subtree move as entries only: the
// ministry they point to keeps its subtree.
//
// The steps that touch every inode (activate, finish, abort) are paged
// (at most stepKeys keys each) and answer Result.more until done, so no
// command of a big move becomes a huge batch.

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
	"syscall"

	"google.golang.org/protobuf/proto"

	"github.com/govfs/govfs/internal/engine"
	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/wire"
)

const (
	kindFrozen     = 'z'
	kindForward    = 'f'
	kindMoveMarker = 'Z'
	kindDecided    = 'Y'
	kindOpened     = 'O'
	kindAborted    = 'A'
)

func abortedKey(move uint64) []byte { return u64Key(kindAborted, move) }

// refuseAborted refuses a step of a move this ministry aborted.
func refuseAborted(t *tx, move uint64, what string) error {
	v, err := t.r.Get(abortedKey(move))
	if err != nil {
		return err
	}
	if v != nil {
		return errnof(syscall.EINVAL, "%s for move %d: the move was aborted (a late step of a deposed coordinator)", what, move)
	}
	return nil
}

func decidedKey(move uint64) []byte { return u64Key(kindDecided, move) }

// The "Z" marker's value says which side of the move this ministry is.
const (
	markerSource = 's'
	markerTarget = 't'
)

func openedKey(move uint64) []byte { return u64Key(kindOpened, move) }

func frozenKey(ino ids.Ino) []byte  { return u64Key(kindFrozen, uint64(ino)) }
func markerKey(move uint64) []byte  { return u64Key(kindMoveMarker, move) }
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
	err := r.Scan([]byte{kindMoveMarker}, []byte{kindMoveMarker + 1}, func(_, _ []byte) bool {
		found = true
		return false
	})
	return found, err
}

// Moving is what a client asking about an inode in a move should hear:
// nothing (Move 0: the inode is live here or not here at all), wait
// (Move set, To 0: frozen until the move is decided and opened), or go
// to ministry To (the move was decided; this is the source).
type Moving struct {
	Move uint64
	To   ids.GroupID
	// Copy: this ministry is the move's target and its copy is not open
	// yet; it must not be read either (it may be partial).
	Copy bool
}

// MovingOf says whether ino is in a move, as clients should see it.
func MovingOf(r engine.Reader, ino ids.Ino) (Moving, error) {
	m, err := Frozen(r, ino)
	if err != nil || m == 0 {
		return Moving{}, err
	}
	if v, err := r.Get(openedKey(m)); err != nil || v != nil {
		return Moving{}, err // the target opened its copy
	}
	v, err := r.Get(decidedKey(m))
	if err != nil {
		return Moving{}, err
	}
	if len(v) == 8 {
		return Moving{Move: m, To: ids.GroupID(binary.BigEndian.Uint64(v))}, nil
	}
	mk, err := r.Get(markerKey(m))
	return Moving{Move: m, Copy: len(mk) == 1 && mk[0] == markerTarget}, err
}

// CommandMoving returns the first inode a client command touches that
// is in a move (MovingOf), and what to tell the client (0 and a zero
// Moving when none is). When nothing here is frozen (nearly always) it
// costs one seek: the touched inodes (an entry lookup for unlink and
// rename) are only read when a move is under way.
func CommandMoving(r engine.Reader, cmd *wire.Command) (ids.Ino, Moving, error) {
	if frozen, err := AnyFrozen(r); err != nil || !frozen {
		return 0, Moving{}, err
	}
	for _, ino := range TouchedInodes(r, cmd) {
		mv, err := MovingOf(r, ino)
		if err != nil {
			return 0, Moving{}, err
		}
		if mv.Move != 0 {
			return ino, mv, nil
		}
	}
	return 0, Moving{}, nil
}

// ReadMoving says how a read of ino must be answered while it is in a
// move: Move 0 (serve it), To set (the move was decided and this is the
// source: ask To) or Copy (this is the target and its copy is not open:
// wait). A frozen inode at the source is read as usual. One seek when no
// move is under way.
func ReadMoving(r engine.Reader, ino ids.Ino) (Moving, error) {
	if ino == 0 {
		return Moving{}, nil
	}
	if frozen, err := AnyFrozen(r); err != nil || !frozen {
		return Moving{}, err
	}
	mv, err := MovingOf(r, ino)
	if err != nil || (mv.To == 0 && !mv.Copy) {
		return Moving{}, err
	}
	return mv, nil
}

// movingResult refuses a command that touches a frozen subtree; it is not
// remembered for dedup, so the same request applies once the move ended.
func movingResult(r engine.Reader, cmd *wire.Command) (*wire.Result, error) {
	switch cmd.GetOp().(type) {
	case *wire.Command_ExportSubtree, *wire.Command_ImportSubtree, *wire.Command_FinishExport, *wire.Command_AbortExport, *wire.Command_FreezeEntries:
		return nil, nil
	}
	ino, mv, err := CommandMoving(r, cmd)
	if err != nil || mv.Move == 0 {
		return nil, err
	}
	return &wire.Result{Errno: uint32(syscall.EAGAIN), Moving: true,
		Message: fmt.Sprintf("inode %v is being moved to another ministry (move %d); retry", ino, mv.Move)}, nil
}

// stepKeys bounds the keys one paged move step deletes or writes: each
// step is one apply in a log the ministry's clients share, so it stays
// short (4,096 held them up: see freezePage in metanode/moves.go).
const stepKeys = 256

// frozenValue is the "z" record of a move.
func frozenValue(move, other uint64) []byte {
	return binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, move), other)
}

// scanFrozen calls fn for each inode frozen by move, in inode order from
// `from` on, until fn returns false.
func scanFrozen(r engine.Reader, move uint64, from ids.Ino, fn func(ino ids.Ino) bool) error {
	var ferr error
	err := r.Scan(frozenKey(from), []byte{kindFrozen + 1}, func(k, v []byte) bool {
		if len(k) != 9 || len(v) != 16 {
			ferr = fmt.Errorf("namespace: corrupt frozen record %x", k)
			return false
		}
		if binary.BigEndian.Uint64(v) != move {
			return true
		}
		return fn(ids.Ino(binary.BigEndian.Uint64(k[1:])))
	})
	if ferr != nil {
		return ferr
	}
	return err
}

func exportSubtree(t *tx, op *wire.ExportSubtreeOp) (*wire.Result, error) {
	ino := ids.Ino(op.GetIno())
	if op.GetMove() == 0 || ino == 0 {
		return nil, errnof(syscall.EINVAL, "export: move and inode are required")
	}
	if err := refuseAborted(t, op.GetMove(), "export"); err != nil {
		return nil, err
	}
	if m, err := Frozen(t.r, ino); err != nil {
		return nil, err
	} else if m == op.GetMove() {
		return &wire.Result{}, nil // repeated
	} else if m != 0 {
		return nil, errnof(syscall.EBUSY, "inode %v is being moved by move %d", ino, m)
	}
	if _, err := t.dir(ino); err != nil {
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
	t.set(markerKey(op.GetMove()), []byte{markerSource})
	t.set(frozenKey(ino), frozenValue(op.GetMove(), op.GetTarget()))
	return &wire.Result{}, nil
}

// freezeEntries freezes the inodes a page of a frozen directory's
// entries name.
func freezeEntries(t *tx, op *wire.FreezeEntriesOp) (*wire.Result, error) {
	dir := ids.Ino(op.GetDir())
	if op.GetMove() == 0 || dir == 0 {
		return nil, errnof(syscall.EINVAL, "freeze entries: move and directory are required")
	}
	if err := refuseAborted(t, op.GetMove(), "freeze entries"); err != nil {
		return nil, err
	}
	if m, err := Frozen(t.r, dir); err != nil {
		return nil, err
	} else if m != op.GetMove() {
		return nil, errnof(syscall.EINVAL, "freeze entries of directory %v: it is not frozen by move %d", dir, op.GetMove())
	}
	if len(op.GetEntries()) > MaxFreezeEntries {
		return nil, errnof(syscall.EINVAL, "freeze entries: %d entries (at most %d per command)", len(op.GetEntries()), MaxFreezeEntries)
	}
	seen := map[ids.Ino]bool{}
	for _, e := range op.GetEntries() {
		ino := ids.Ino(e.GetIno())
		d, err := loadDirent(t.r, dir, e.GetName())
		if err != nil {
			return nil, err
		}
		if d == nil || d.GetIno() != e.GetIno() {
			return nil, errnof(syscall.ENOENT, "freeze entries: %v/%q does not name inode %v", dir, e.GetName(), ino)
		}
		if d.GetMinistry() != 0 || seen[ino] {
			continue // a referral stays where it is; a hard link twice
		}
		if _, err := loadInode(t.r, ino); err != nil {
			return nil, errnof(syscall.EIO, "freeze entries: %v/%q names inode %v, which is not held here", dir, e.GetName(), ino)
		}
		m, err := Frozen(t.r, ino)
		if err != nil {
			return nil, err
		}
		switch {
		case m == op.GetMove():
		case m != 0:
			return nil, errnof(syscall.EBUSY, "%v/%q (inode %v) is being moved by move %d", dir, e.GetName(), ino, m)
		default:
			t.set(frozenKey(ino), frozenValue(op.GetMove(), op.GetTarget()))
		}
		seen[ino] = true
	}
	return &wire.Result{}, nil
}

// MaxFreezeEntries bounds the entries of one FreezeEntriesOp.
const MaxFreezeEntries = 1024

// exportCursor is where an ExportKeys page ends: an inode and the last
// key of it sent, or (ino = dedupPhase) the last dedup record sent.
const dedupPhase = ids.Ino(^uint64(0))

// ExportKeys returns a page of the keys of the subtree frozen by move at
// root: each frozen inode's own keys (inodeKeys), then the dedup
// table's answers (a client that retries a request after it was
// redirected gets its first answer, not a second application). A page
// holds at most limit keys and about maxBytes bytes; next is the cursor
// to pass as `after` for the following page.
func ExportKeys(r engine.Reader, move uint64, root ids.Ino, after []byte, limit, maxBytes int) (kvs []*wire.KV, next []byte, eof bool, err error) {
	m, err := Frozen(r, root)
	if err != nil {
		return nil, nil, false, err
	}
	if m != move || move == 0 {
		return nil, nil, false, errnof(syscall.EINVAL, "inode %v is not frozen by move %d", root, move)
	}
	if limit <= 0 {
		limit = 1000
	}
	if maxBytes <= 0 {
		maxBytes = 1 << 20
	}
	var from ids.Ino
	var afterKey []byte
	if len(after) > 0 {
		if len(after) < 8 {
			return nil, nil, false, errnof(syscall.EINVAL, "export cursor of %d bytes", len(after))
		}
		from, afterKey = ids.Ino(binary.BigEndian.Uint64(after)), after[8:]
	}
	size := 0
	full := false
	var lastIno ids.Ino
	var lastKey []byte
	emit := func(ino ids.Ino, k, v []byte) bool {
		kvs = append(kvs, &wire.KV{Key: bytes.Clone(k), Value: bytes.Clone(v)})
		size += len(k) + len(v)
		lastIno, lastKey = ino, kvs[len(kvs)-1].Key
		full = len(kvs) >= limit || size >= maxBytes
		return !full
	}
	// scanFrom reads ks in their order (not key order: the inode record
	// comes first), resuming after key `resume` in the spec that holds
	// it.
	scanFrom := func(ino ids.Ino, ks []keySpec, resume []byte) error {
		at := 0
		if len(resume) > 0 {
			at = slices.IndexFunc(ks, func(k keySpec) bool { return bytes.HasPrefix(resume, k.key) })
			if at < 0 {
				return errnof(syscall.EINVAL, "export cursor %x is not a key of inode %v", resume, ino)
			}
			if ks[at].exact {
				at++ // that key was sent; the next spec is read whole
				resume = nil
			}
		}
		for i := at; i < len(ks); i++ {
			k := ks[i]
			if k.exact {
				v, err := r.Get(k.key)
				if err != nil {
					return err
				}
				if v != nil && !emit(ino, k.key, v) {
					return nil
				}
				continue
			}
			lo := k.key
			if i == at && len(resume) > 0 {
				lo = append(bytes.Clone(resume), 0)
			}
			if err := r.Scan(lo, prefixEnd(k.key), func(key, v []byte) bool { return emit(ino, key, v) }); err != nil {
				return err
			}
			if full {
				return nil
			}
		}
		return nil
	}
	if from != dedupPhase {
		var inos []ids.Ino
		// Frozen inodes are visited a bounded number at a time: each
		// has at least its inode record, so limit of them fill a page.
		if err := scanFrozen(r, move, from, func(ino ids.Ino) bool {
			inos = append(inos, ino)
			return len(inos) < limit+1
		}); err != nil {
			return nil, nil, false, err
		}
		for _, ino := range inos {
			resume := []byte(nil)
			if ino == from {
				resume = afterKey
			}
			if err := scanFrom(ino, inodeKeys(r, ino, ino == root), resume); err != nil {
				return nil, nil, false, err
			}
			if full {
				return kvs, cursor(lastIno, lastKey), false, nil
			}
		}
		if len(inos) == limit+1 {
			// Not all frozen inodes were visited: resume at the next.
			return kvs, cursor(inos[limit], nil), false, nil
		}
		afterKey = nil
	}
	if err := scanFrom(dedupPhase, []keySpec{{[]byte{kindResult}, false}}, afterKey); err != nil {
		return nil, nil, false, err
	}
	if full {
		return kvs, cursor(dedupPhase, lastKey), false, nil
	}
	return kvs, nil, true, nil
}

func cursor(ino ids.Ino, key []byte) []byte {
	return append(binary.BigEndian.AppendUint64(nil, uint64(ino)), key...)
}

// keyIno returns the inode a moved key belongs to, and whether k is one
// of the kinds a move carries.
func keyIno(k []byte) (ids.Ino, bool) {
	if len(k) < 9 {
		return 0, false
	}
	switch k[0] {
	case kindInode, kindParent:
		if len(k) != 9 {
			return 0, false
		}
	case kindXattr, kindChunk, kindInline, kindDirent:
	default:
		return 0, false
	}
	return ids.Ino(binary.BigEndian.Uint64(k[1:9])), true
}

func importSubtree(t *tx, op *wire.ImportSubtreeOp) (*wire.Result, error) {
	root := ids.Ino(op.GetIno())
	if op.GetMove() == 0 || root == 0 {
		return nil, errnof(syscall.EINVAL, "import: move and inode are required")
	}
	if err := refuseAborted(t, op.GetMove(), "import"); err != nil {
		return nil, err
	}
	if op.GetActivate() {
		return activateImport(t, op)
	}
	if v, err := t.r.Get(openedKey(op.GetMove())); err != nil {
		return nil, err
	} else if v != nil {
		// A late page of a deposed coordinator: the copy is open and
		// clients may have changed it since.
		return nil, errnof(syscall.EEXIST, "import for move %d: the copy is open already", op.GetMove())
	}
	// copied: inodes whose record this page installs (t.r does not see
	// the page's own writes).
	copied := map[ids.Ino]bool{}
	for _, kv := range op.GetKvs() {
		k := kv.GetKey()
		if len(k) > 0 && k[0] == kindResult {
			if err := importResult(t, k, kv.GetValue()); err != nil {
				return nil, err
			}
			continue
		}
		ino, ok := keyIno(k)
		if !ok {
			return nil, errnof(syscall.EINVAL, "import for move %d: key %q is not part of a subtree", op.GetMove(), k)
		}
		if ino == root && k[0] == kindParent {
			return nil, errnof(syscall.EINVAL, "import for move %d: the subtree's root comes without a parent pointer", op.GetMove())
		}
		m, err := Frozen(t.r, ino)
		if err != nil {
			return nil, err
		}
		if k[0] == kindInode && !copied[ino] {
			_, lerr := loadInode(t.r, ino)
			held := lerr == nil
			switch {
			case m != 0 && m != op.GetMove():
				return nil, errnof(syscall.EBUSY, "import of inode %v: it is being moved by move %d", ino, m)
			case m == 0 && held:
				// Held and live here: this import is late (its move
				// was decided and activated already) and must not
				// overwrite what clients changed since.
				return nil, errnof(syscall.EEXIST, "import of inode %v for move %d: it is already held here", ino, op.GetMove())
			case m == op.GetMove():
				// Copied before by this move (a coordinator that
				// started over): replaced whole; nobody changed it,
				// it stays frozen until the activate step.
				if _, err := deleteInodeKeysN(t, ino, -1); err != nil {
					return nil, err
				}
			}
			if len(copied) == 0 {
				t.set(markerKey(op.GetMove()), []byte{markerTarget})
			}
			t.set(frozenKey(ino), frozenValue(op.GetMove(), op.GetSource()))
			copied[ino] = true
		} else if !copied[ino] && m != op.GetMove() {
			return nil, errnof(syscall.EINVAL, "import for move %d: key %q comes before its inode's record", op.GetMove(), k)
		}
		t.set(bytes.Clone(k), bytes.Clone(kv.GetValue()))
	}
	return &wire.Result{}, nil
}

// importResult installs a dedup answer from the source unless this
// ministry has one for that request, or already dropped the client's
// answers that old. A client new here gets a record, so that its
// answers expire like any other's.
func importResult(t *tx, k, v []byte) error {
	if len(k) != 17 {
		return errnof(syscall.EINVAL, "import: dedup key %x", k)
	}
	client, seq := binary.BigEndian.Uint64(k[1:9]), binary.BigEndian.Uint64(k[9:])
	rec, found, err := loadClient(t.r, client)
	if err != nil {
		return err
	}
	if found && seq < rec.watermark {
		return nil
	}
	if old, err := t.r.Get(k); err != nil {
		return err
	} else if old != nil {
		return nil
	}
	// The record stops tracking which answers it holds (it deletes
	// blindly from now on): one command imports many answers of a client
	// and the tx does not read its own writes, so a held list built here
	// would keep only the last.
	if !found {
		use := timeKey(t.now - t.now%idleQuantumNs)
		t.set(idleKey(use, client), nil)
		t.set(clientKey(client), clientRecord{lastUse: use}.encode())
	} else if rec.tracked {
		rec.tracked, rec.held = false, nil
		t.set(clientKey(client), rec.encode())
	}
	t.set(bytes.Clone(k), bytes.Clone(v))
	return nil
}

// inodeKeys is where inode ino's own keys are: exact keys (read with a
// Get) and prefixes (scanned), in export order, the inode record first.
// Its type says which kinds it can have: a file has no entries, a
// directory no chunks; each scan is an iterator, and a move visits every
// inode (found with pprof: seven iterators per inode were a fifth of the
// source's CPU during a move). Unknown (already gone): every kind.
type keySpec struct {
	key   []byte
	exact bool
}

func inodeKeys(r engine.Reader, ino ids.Ino, root bool) []keySpec {
	typ := wire.FileType(-1)
	if in, err := loadInode(r, ino); err == nil {
		typ = in.GetAttr().GetType()
	}
	ks := []keySpec{{inodeKey(ino), true}, {xattrPrefix(ino), false}}
	if typ == wire.FileType_REGULAR || typ < 0 {
		ks = append(ks, keySpec{chunkPrefix(ino), false}, keySpec{inlineKey(ino), true})
	}
	if typ == wire.FileType_DIRECTORY || typ < 0 {
		ks = append(ks, keySpec{direntPrefix(ino), false})
		if !root {
			ks = append(ks, keySpec{parentKey(ino), true})
		}
	}
	return ks
}

// deleteInodeKeysN deletes up to budget of inode ino's keys (all when
// budget < 0), the inode record last, and returns how many; fewer than
// budget means it got them all.
func deleteInodeKeysN(t *tx, ino ids.Ino, budget int) (int, error) {
	ks := inodeKeys(t.r, ino, false)
	ks = append(ks[1:], keySpec{dirLeaseKey(ino), true}, ks[0])
	n := 0
	for _, k := range ks {
		if budget >= 0 && n >= budget {
			return n, nil
		}
		if k.exact {
			if v, err := t.r.Get(k.key); err != nil {
				return n, err
			} else if v != nil {
				t.del(k.key)
				n++
			}
			continue
		}
		err := t.r.Scan(k.key, prefixEnd(k.key), func(key, _ []byte) bool {
			if budget >= 0 && n >= budget {
				return false
			}
			t.del(bytes.Clone(key))
			n++
			return true
		})
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// pagedOverFrozen calls fn for the inodes frozen by move, in order from
// inode `from` (the previous page's cursor), until it has used up
// stepKeys keys; it reports whether some are left and where to resume.
// fn returns the keys it wrote and whether it finished its inode. When
// nothing is left the move's marker goes.
func pagedOverFrozen(t *tx, move uint64, from ids.Ino, fn func(ino ids.Ino, budget int) (used int, finished bool, err error)) (res *wire.Result, err error) {
	budget := stepKeys
	var inos []ids.Ino
	if err := scanFrozen(t.r, move, from, func(ino ids.Ino) bool {
		inos = append(inos, ino)
		return len(inos) < stepKeys
	}); err != nil {
		return nil, err
	}
	for i, ino := range inos {
		used, finished, err := fn(ino, budget)
		if err != nil {
			return nil, err
		}
		budget -= used
		switch {
		case !finished:
			return &wire.Result{More: true, Start: uint64(ino)}, nil
		case budget <= 0 && (i < len(inos)-1 || len(inos) == stepKeys):
			return &wire.Result{More: true, Start: uint64(ino) + 1}, nil
		}
	}
	if len(inos) == stepKeys {
		return &wire.Result{More: true, Start: uint64(inos[len(inos)-1]) + 1}, nil
	}
	if from > 0 {
		// Done from the cursor on; one look from the start makes sure
		// (a cursor is only a hint: the marker must never go while a
		// record is left).
		left := false
		if err := scanFrozen(t.r, move, 0, func(ids.Ino) bool {
			left = true
			return false
		}); err != nil {
			return nil, err
		}
		if left {
			return &wire.Result{More: true}, nil
		}
	}
	t.del(markerKey(move))
	return &wire.Result{}, nil
}

// activateImport opens an imported copy after the decision: the first
// call sets the "O" marker (from then on the copy is live) and, for an
// unassign, makes the parent's entry (here) stop being a referral; it
// and the following pages delete the "z" records (and any forwarding
// record left from an earlier stay here).
func activateImport(t *tx, op *wire.ImportSubtreeOp) (*wire.Result, error) {
	root := ids.Ino(op.GetIno())
	m, err := Frozen(t.r, root)
	if err != nil {
		return nil, err
	}
	opened, err := t.r.Get(openedKey(op.GetMove()))
	if err != nil {
		return nil, err
	}
	_, lerr := loadInode(t.r, root)
	switch {
	case m == op.GetMove() && opened == nil:
		parent := ids.Ino(op.GetParent())
		if _, err := loadInode(t.r, parent); err == nil {
			// An unassign: the entry is here.
			d, err := loadDirent(t.r, parent, op.GetName())
			if err != nil {
				return nil, err
			}
			if d == nil || d.GetIno() != op.GetIno() {
				return nil, errnof(syscall.ENOENT, "activate: %v/%q does not name inode %v here", parent, op.GetName(), root)
			}
			d.Ministry = 0
			if err := t.setDirent(parent, op.GetName(), d); err != nil {
				return nil, err
			}
			t.setParent(root, parent)
		}
		t.set(openedKey(op.GetMove()), nil)
	case m == op.GetMove() || (m == 0 && lerr == nil):
		// Opened before; pages may be left.
	case m == 0:
		// The root is gone (removed by a client after the copy opened):
		// opened before, or nothing here is this move's. Pages may be
		// left either way.
		left := false
		if err := scanFrozen(t.r, op.GetMove(), 0, func(ids.Ino) bool { left = true; return false }); err != nil {
			return nil, err
		}
		if !left && opened == nil {
			if mk, err := t.r.Get(markerKey(op.GetMove())); err != nil || mk == nil {
				return &wire.Result{}, err
			}
		}
	default:
		return nil, errnof(syscall.EINVAL, "activate inode %v for move %d: no copy of it was imported by that move", root, op.GetMove())
	}
	res, err := pagedOverFrozen(t, op.GetMove(), ids.Ino(op.GetFrom()), func(ino ids.Ino, _ int) (int, bool, error) {
		t.del(frozenKey(ino))
		t.del(forwardKey(ino))
		return 2, true, nil
	})
	if err == nil && !res.GetMore() {
		t.del(openedKey(op.GetMove()))
	}
	return res, err
}

func finishExport(t *tx, op *wire.FinishExportOp) (*wire.Result, error) {
	root := ids.Ino(op.GetIno())
	m, err := Frozen(t.r, root)
	if err != nil {
		return nil, err
	}
	if m != op.GetMove() {
		fw, err := Forwarded(t.r, root)
		if err != nil {
			return nil, err
		}
		if fw != ids.GroupID(op.GetTarget()) || m != 0 {
			return nil, errnof(syscall.EINVAL, "finish export: inode %v is not frozen by move %d", root, op.GetMove())
		}
		// The root is done; pages of the rest may be left.
	}
	if v, err := t.r.Get(decidedKey(op.GetMove())); err != nil {
		return nil, err
	} else if v == nil && m == op.GetMove() {
		// From now on clients asking about what is left of the copy
		// here are sent to the target.
		t.set(decidedKey(op.GetMove()), binary.BigEndian.AppendUint64(nil, op.GetTarget()))
	}
	parent := ids.Ino(op.GetParent())
	if _, err := loadInode(t.r, parent); err == nil {
		// An assign: the entry here becomes a referral.
		d, err := loadDirent(t.r, parent, op.GetName())
		if err != nil {
			return nil, err
		}
		if d != nil && d.GetIno() == op.GetIno() && d.GetMinistry() != op.GetTarget() {
			d.Ministry = op.GetTarget()
			if err := t.setDirent(parent, op.GetName(), d); err != nil {
				return nil, err
			}
		}
	}
	res, err := pagedOverFrozen(t, op.GetMove(), ids.Ino(op.GetFrom()), func(ino ids.Ino, budget int) (int, bool, error) {
		n, err := deleteInodeKeysN(t, ino, budget)
		if err != nil || n >= budget {
			return n, false, err
		}
		t.deleted[ino] = true
		t.del(frozenKey(ino))
		t.set(forwardKey(ino), binary.BigEndian.AppendUint64(nil, op.GetTarget()))
		return n + 2, true, nil
	})
	if err == nil && !res.GetMore() {
		t.del(decidedKey(op.GetMove()))
	}
	return res, err
}

// abortExport unfreezes the source of an aborted move or (drop_copy)
// deletes the target's partial copy, a page at a time.
func abortExport(t *tx, op *wire.AbortExportOp) (*wire.Result, error) {
	if op.GetMove() == 0 {
		return nil, errnof(syscall.EINVAL, "abort: move is required")
	}
	t.set(abortedKey(op.GetMove()), []byte{1})
	return pagedOverFrozen(t, op.GetMove(), ids.Ino(op.GetFrom()), func(ino ids.Ino, budget int) (int, bool, error) {
		n := 0
		if op.GetDropCopy() {
			var err error
			n, err = deleteInodeKeysN(t, ino, budget)
			if err != nil || n >= budget {
				return n, false, err
			}
			t.deleted[ino] = true
		}
		t.del(frozenKey(ino))
		return n + 1, true, nil
	})
}

// MovedInode decodes kv when it is an inode record of a move's copy
// (ok false for the other keys).
func MovedInode(kv *wire.KV) (*wire.Inode, bool, error) {
	k := kv.GetKey()
	if len(k) != 9 || k[0] != kindInode {
		return nil, false, nil
	}
	in := &wire.Inode{}
	if err := proto.Unmarshal(kv.GetValue(), in); err != nil || in.GetAttr() == nil {
		return nil, false, fmt.Errorf("namespace: corrupt inode record %x in a move's copy: %v", k, err)
	}
	return in, true, nil
}
