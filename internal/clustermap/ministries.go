package clustermap

// The metadata side of the map: metadata nodes, ministries and their
// subtrees, subtree moves and which ministry each inode range went to.
//
// Keys (relative to the group's state prefix):
//
//	"N" <node id>    wire.Member: a metadata node and its address
//	"M" <group id>   wire.Ministry (subtrees, members, epoch)
//	"V" <move id>    wire.Move
//	"I" <end>        inode range [start, end) granted to a ministry:
//	                 start u64, ministry u64 (keyed by end so that the
//	                 first key above an ino finds its range)
//	"D" <group id>   a dissolved ministry (empty value): its members drop
//	                 their replicas; group ids are never reused
//	"nextmin"        u64, the next ministry group id
//	"nextmove"       u64, the next move id
//
// A cluster formed by an older binary has none of "N" and "M": Members
// and Ministries then derive them from the "members" record (every
// member hosts the root ministry, which owns "/"), and the first change
// writes them out.

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
	"sort"
	"syscall"

	"github.com/govfs/govfs/internal/engine"
	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/wire"
	"google.golang.org/protobuf/proto"
)

// MaxMinistryMembers bounds the voters of one ministry.
const MaxMinistryMembers = 7

// keepMoves is how many finished moves the map remembers (for `admin
// ministries` and to answer a retried assign).
const keepMoves = 64

var (
	keyNextMinistry = []byte("nextmin")
	keyNextMove     = []byte("nextmove")
)

func nodeKey(id uint64) []byte      { return binary.BigEndian.AppendUint64([]byte("N"), id) }
func ministryKey(id uint64) []byte  { return binary.BigEndian.AppendUint64([]byte("M"), id) }
func moveKey(id uint64) []byte      { return binary.BigEndian.AppendUint64([]byte("V"), id) }
func rangeKey(end uint64) []byte    { return binary.BigEndian.AppendUint64([]byte("I"), end) }
func dissolvedKey(id uint64) []byte { return binary.BigEndian.AppendUint64([]byte("D"), id) }

func getMsg[T proto.Message](r engine.Reader, key []byte, m T) (bool, error) {
	b, err := r.Get(key)
	if err != nil || b == nil {
		return false, err
	}
	if err := proto.Unmarshal(b, m); err != nil {
		return false, fmt.Errorf("clustermap: decode %q: %w", key, err)
	}
	return true, nil
}

func putMsg(rw engine.ReadWriter, key []byte, m proto.Message) error {
	b, err := proto.Marshal(m)
	if err != nil {
		return err
	}
	return rw.Set(key, b)
}

// initialMembers returns the members the cluster was formed with.
func initialMembers(r engine.Reader) ([]*wire.Member, error) {
	op := &wire.InitClusterOp{}
	ok, err := getMsg(r, keyMembers, op)
	if err != nil || !ok {
		return nil, err
	}
	return op.GetMembers(), nil
}

// scanAll decodes every value in [lo, hi), in key order.
func scanAll[T any, P interface {
	*T
	proto.Message
}](r engine.Reader, lo, hi string) ([]P, error) {
	var out []P
	var decodeErr error
	err := r.Scan([]byte(lo), []byte(hi), func(k, v []byte) bool {
		m := P(new(T))
		if decodeErr = proto.Unmarshal(v, m); decodeErr != nil {
			decodeErr = fmt.Errorf("clustermap: decode %q: %w", k, decodeErr)
			return false
		}
		out = append(out, m)
		return true
	})
	if err == nil {
		err = decodeErr
	}
	return out, err
}

// Members returns every metadata node, by id.
func Members(r engine.Reader) ([]*wire.Member, error) {
	out, err := scanAll[wire.Member](r, "N", "O")
	if err != nil || len(out) > 0 {
		return out, err
	}
	return initialMembers(r)
}

// Ministries returns every ministry, by id.
func Ministries(r engine.Reader) ([]*wire.Ministry, error) {
	out, err := scanAll[wire.Ministry](r, "M", "N")
	if err != nil || len(out) > 0 {
		return out, err
	}
	root, err := derivedRoot(r)
	if err != nil || root == nil {
		return nil, err
	}
	return []*wire.Ministry{root}, nil
}

// derivedRoot is the root ministry of a map that predates the ministry
// table (or nil before formation).
func derivedRoot(r engine.Reader) (*wire.Ministry, error) {
	ms, err := initialMembers(r)
	if err != nil || ms == nil {
		return nil, err
	}
	root := &wire.Ministry{Group: uint64(ids.RootMinistry), RootIno: uint64(ids.RootIno), RootPath: "/", Epoch: 1,
		Subtrees: []*wire.Subtree{{Ino: uint64(ids.RootIno), Path: "/"}}}
	for _, m := range ms {
		root.Members = append(root.Members, m.GetId())
	}
	return root, nil
}

// GetMinistry returns ministry g, or nil.
func GetMinistry(r engine.Reader, g uint64) (*wire.Ministry, error) {
	m := &wire.Ministry{}
	ok, err := getMsg(r, ministryKey(g), m)
	if err != nil {
		return nil, err
	}
	if ok {
		return m, nil
	}
	if g == uint64(ids.RootMinistry) {
		return derivedRoot(r)
	}
	return nil, nil
}

// Moves returns the moves the map remembers (under way and recent), by id.
func Moves(r engine.Reader) ([]*wire.Move, error) { return scanAll[wire.Move](r, "V", "W") }

// GetMove returns move id, or nil.
func GetMove(r engine.Reader, id uint64) (*wire.Move, error) {
	m := &wire.Move{}
	ok, err := getMsg(r, moveKey(id), m)
	if err != nil || !ok {
		return nil, err
	}
	return m, nil
}

// Active reports whether a move is still under way.
func Active(m *wire.Move) bool {
	return m.GetState() == wire.MoveState_MOVE_COPYING || m.GetState() == wire.MoveState_MOVE_COMMITTED
}

// InodeRangeOwner returns the ministry the range holding ino was granted
// to (0 when none was: the root inode, or a number not handed out yet).
// The owner of an inode that moved with its subtree is found from there
// (the ministry leaves a forwarding record).
func InodeRangeOwner(r engine.Reader, ino uint64) (uint64, error) {
	var owner uint64
	err := r.Scan(rangeKey(ino+1), []byte("J"), func(_, v []byte) bool {
		if len(v) == 16 && binary.BigEndian.Uint64(v) <= ino {
			owner = binary.BigEndian.Uint64(v[8:])
		}
		return false
	})
	return owner, err
}

// OwnerIn is InodeRangeOwner over ranges as InodeRanges returned them
// (ordered by their ends): a caller keeps the list while the map does
// not change instead of scanning the store for every inode.
func OwnerIn(ranges []*wire.InodeRange, ino uint64) uint64 {
	i := sort.Search(len(ranges), func(i int) bool { return ranges[i].GetEnd() > ino })
	if i < len(ranges) && ranges[i].GetStart() <= ino {
		return ranges[i].GetMinistry()
	}
	return 0
}

// InodeRanges returns every grant of inode numbers, by range (ordered by
// their ends).
func InodeRanges(r engine.Reader) ([]*wire.InodeRange, error) {
	var out []*wire.InodeRange
	err := r.Scan([]byte("I"), []byte("J"), func(k, v []byte) bool {
		if len(k) == 9 && len(v) == 16 {
			out = append(out, &wire.InodeRange{Start: binary.BigEndian.Uint64(v), End: binary.BigEndian.Uint64(k[1:]), Ministry: binary.BigEndian.Uint64(v[8:])})
		}
		return true
	})
	return out, err
}

// writeOutLegacy writes the derived members and root ministry of an older
// map, before the first change to either.
func writeOutLegacy(rw engine.ReadWriter) error {
	if b, err := rw.Get(ministryKey(uint64(ids.RootMinistry))); err != nil || b != nil {
		return err
	}
	root, err := derivedRoot(rw)
	if err != nil || root == nil {
		return err
	}
	if err := putMsg(rw, ministryKey(root.GetGroup()), root); err != nil {
		return err
	}
	ms, err := initialMembers(rw)
	if err != nil {
		return err
	}
	for _, m := range ms {
		if err := putMsg(rw, nodeKey(m.GetId()), m); err != nil {
			return err
		}
	}
	return nil
}

func recordRange(rw engine.ReadWriter, start, end, ministry uint64) error {
	v := binary.BigEndian.AppendUint64(nil, start)
	return rw.Set(rangeKey(end), binary.BigEndian.AppendUint64(v, ministry))
}

// checkMembers validates a member list for a new ministry.
func checkMembers(r engine.Reader, members []uint64) *wire.Result {
	if len(members) == 0 || len(members) > MaxMinistryMembers {
		return errResult(syscall.EINVAL, "a ministry needs 1 to %d members, not %d", MaxMinistryMembers, len(members))
	}
	known, err := Members(r)
	if err != nil {
		return errResult(syscall.EIO, "read members: %v", err)
	}
	seen := map[uint64]bool{}
	for _, id := range members {
		if seen[id] {
			return errResult(syscall.EINVAL, "node %d is listed twice", id)
		}
		seen[id] = true
		if !slices.ContainsFunc(known, func(m *wire.Member) bool { return m.GetId() == id }) {
			return errResult(syscall.ENOENT, "node %d is not a metadata node of this cluster (see govfs admin nodes)", id)
		}
	}
	return nil
}

// createMinistry adds a ministry with no subtree yet; it returns its id.
func createMinistry(rw engine.ReadWriter, members []uint64) (uint64, *wire.Result, error) {
	if res := checkMembers(rw, members); res != nil {
		return 0, res, nil
	}
	if err := writeOutLegacy(rw); err != nil {
		return 0, nil, err
	}
	// Ministry ids start above the root ministry.
	if b, err := rw.Get(keyNextMinistry); err != nil {
		return 0, nil, err
	} else if b == nil {
		if err := rw.Set(keyNextMinistry, binary.BigEndian.AppendUint64(nil, uint64(ids.RootMinistry)+1)); err != nil {
			return 0, nil, err
		}
	}
	id, err := counter(rw, keyNextMinistry, 1)
	if err != nil {
		return 0, nil, err
	}
	// In the order given: the first member is the one chosen to lead.
	m := &wire.Ministry{Group: id, Members: slices.Clone(members), Founders: slices.Clone(members), Epoch: 1}
	return id, nil, putMsg(rw, ministryKey(id), m)
}

// Founders returns the voters ministry m was created with.
func Founders(m *wire.Ministry) []uint64 {
	if len(m.GetFounders()) > 0 {
		return m.GetFounders()
	}
	return m.GetMembers()
}

// setMembers records the voters the president wants for a ministry.
func setMembers(rw engine.ReadWriter, op *wire.SetMembersOp) (*wire.Result, error) {
	if op.GetMinistry() == uint64(ids.PresidentGroup) {
		return errResult(syscall.EINVAL, "the president group's members are the --peers of formation; membership changes apply to ministries"), nil
	}
	if err := writeOutLegacy(rw); err != nil {
		return nil, err
	}
	m, err := GetMinistry(rw, op.GetMinistry())
	if err != nil {
		return nil, err
	}
	if m == nil {
		return errResult(syscall.ENOENT, "ministry %d does not exist (see govfs admin ministries)", op.GetMinistry()), nil
	}
	if !slices.Equal(m.GetMembers(), op.GetPrior()) {
		return errResult(syscall.EAGAIN, "ministry %d's members are %v, not %v: they changed meanwhile; decide again", op.GetMinistry(), m.GetMembers(), op.GetPrior()), nil
	}
	if res := checkMembers(rw, op.GetMembers()); res != nil {
		return res, nil
	}
	m = proto.Clone(m).(*wire.Ministry)
	m.Founders = Founders(m)
	m.Members = slices.Clone(op.GetMembers())
	return &wire.Result{}, putMsg(rw, ministryKey(m.GetGroup()), m)
}

func joinNode(rw engine.ReadWriter, op *wire.JoinNodeOp) (*wire.Result, error) {
	if op.GetAddr() == "" {
		return errResult(syscall.EINVAL, "join: no address given"), nil
	}
	if err := writeOutLegacy(rw); err != nil {
		return nil, err
	}
	ms, err := Members(rw)
	if err != nil {
		return nil, err
	}
	var top uint64
	for _, m := range ms {
		if c := op.GetCertName(); c != "" && m.GetCertName() == c {
			return errResult(syscall.EEXIST, "join: certificate %q already speaks for node %d; give each node its own certificate", c, m.GetId()), nil
		}
		if m.GetAddr() == op.GetAddr() {
			// A retried join is answered from the dedup table; this is
			// another node, or one whose data was lost: under the old id
			// it could vote twice in a term.
			return errResult(syscall.EEXIST, "node %d is already a member at %s: restart it on its own data directory; a node that lost its data must join from another address (replacing members is not built yet)",
				m.GetId(), op.GetAddr()), nil
		}
		top = max(top, m.GetId())
	}
	id := top + 1
	if err := putMsg(rw, nodeKey(id), &wire.Member{Id: id, Addr: op.GetAddr(), CertName: op.GetCertName()}); err != nil {
		return nil, err
	}
	return &wire.Result{Start: id}, nil
}

func bindNodeCert(rw engine.ReadWriter, op *wire.BindNodeCertOp) (*wire.Result, error) {
	if op.GetCertName() == "" {
		return errResult(syscall.EINVAL, "bind node certificate: no name given"), nil
	}
	if err := writeOutLegacy(rw); err != nil {
		return nil, err
	}
	ms, err := Members(rw)
	if err != nil {
		return nil, err
	}
	var me *wire.Member
	for _, m := range ms {
		switch {
		case m.GetId() == op.GetNode():
			me = m
		case m.GetCertName() == op.GetCertName():
			return errResult(syscall.EEXIST, "certificate %q already speaks for node %d", op.GetCertName(), m.GetId()), nil
		}
	}
	switch {
	case me == nil:
		return errResult(syscall.ENOENT, "node %d is not a member", op.GetNode()), nil
	case me.GetCertName() == op.GetCertName():
		return &wire.Result{}, nil
	case me.GetCertName() != "":
		return errResult(syscall.EEXIST, "node %d speaks with certificate %q, not %q", op.GetNode(), me.GetCertName(), op.GetCertName()), nil
	}
	me.CertName = op.GetCertName()
	if err := putMsg(rw, nodeKey(me.GetId()), me); err != nil {
		return nil, err
	}
	return &wire.Result{}, nil
}

// ministryOwning returns the ministry whose subtree list has ino as a
// root, or nil.
func ministryOwning(r engine.Reader, ino uint64) (*wire.Ministry, error) {
	ms, err := Ministries(r)
	if err != nil {
		return nil, err
	}
	for _, m := range ms {
		for _, st := range m.GetSubtrees() {
			if st.GetIno() == ino {
				return m, nil
			}
		}
	}
	return nil, nil
}

func beginMove(rw engine.ReadWriter, nowNs int64, op *wire.BeginMoveOp) (*wire.Result, error) {
	switch {
	case op.GetIno() == 0 || op.GetParent() == 0 || len(op.GetName()) == 0:
		return errResult(syscall.EINVAL, "move: the subtree (ino, parent, name) is not given"), nil
	case op.GetIno() == uint64(ids.RootIno):
		return errResult(syscall.EINVAL, "/ always belongs to the root ministry; assign a directory below it"), nil
	}
	src, err := GetMinistry(rw, op.GetSource())
	if err != nil {
		return nil, err
	}
	if src == nil {
		return errResult(syscall.ENOENT, "source ministry %d does not exist", op.GetSource()), nil
	}
	moves, err := Moves(rw)
	if err != nil {
		return nil, err
	}
	for _, m := range moves {
		if Active(m) && (m.GetIno() == op.GetIno() || m.GetSource() == op.GetSource() || m.GetTarget() == op.GetSource()) {
			return errResult(syscall.EBUSY, "%s (move %d of %s, ministry %d -> %d) is under way; wait for it to finish",
				"another move", m.GetId(), m.GetPath(), m.GetSource(), m.GetTarget()), nil
		}
	}
	owner, err := ministryOwning(rw, op.GetIno())
	if err != nil {
		return nil, err
	}
	if op.GetUnassign() {
		if owner == nil || owner.GetGroup() != op.GetSource() {
			return errResult(syscall.EINVAL, "%s is not the root of a delegated subtree (nothing to unassign)", op.GetPath()), nil
		}
	} else if owner != nil {
		return errResult(syscall.EEXIST, "%s is already the root of ministry %d's subtree", op.GetPath(), owner.GetGroup()), nil
	}
	if err := writeOutLegacy(rw); err != nil {
		return nil, err
	}
	target, created := op.GetTarget(), false
	switch {
	case target == 0 && op.GetUnassign():
		return errResult(syscall.EINVAL, "unassign needs the parent's ministry as the target"), nil
	case target == 0:
		id, res, err := createMinistry(rw, op.GetMembers())
		if err != nil || res != nil {
			return res, err
		}
		target = id
		created = true
	default:
		t, err := GetMinistry(rw, target)
		if err != nil {
			return nil, err
		}
		if t == nil {
			return errResult(syscall.ENOENT, "ministry %d does not exist (see govfs admin ministries)", target), nil
		}
	}
	if target == op.GetSource() {
		return errResult(syscall.EINVAL, "%s already belongs to ministry %d", op.GetPath(), target), nil
	}
	id, err := counter(rw, keyNextMove, 1)
	if err != nil {
		return nil, err
	}
	mv := &wire.Move{Id: id, Ino: op.GetIno(), Parent: op.GetParent(), Name: bytes.Clone(op.GetName()), Path: op.GetPath(),
		Source: op.GetSource(), Target: target, State: wire.MoveState_MOVE_COPYING, BegunNs: nowNs, Unassign: op.GetUnassign(), NewMinistry: created}
	if err := putMsg(rw, moveKey(id), mv); err != nil {
		return nil, err
	}
	if err := forgetOldMoves(rw, moves); err != nil {
		return nil, err
	}
	return &wire.Result{Start: id, End: target}, nil
}

// forgetOldMoves keeps the newest keepMoves finished moves.
func forgetOldMoves(rw engine.ReadWriter, moves []*wire.Move) error {
	var done []uint64
	for _, m := range moves {
		if !Active(m) {
			done = append(done, m.GetId())
		}
	}
	for len(done) > keepMoves {
		if err := rw.Delete(moveKey(done[0])); err != nil {
			return err
		}
		done = done[1:]
	}
	return nil
}

func moveState(rw engine.ReadWriter, nowNs int64, op *wire.MoveStateOp) (*wire.Result, error) {
	mv, err := GetMove(rw, op.GetId())
	if err != nil {
		return nil, err
	}
	if mv == nil {
		return errResult(syscall.ENOENT, "move %d is not known", op.GetId()), nil
	}
	cur, want := mv.GetState(), op.GetState()
	if cur == want {
		return &wire.Result{}, nil // a repeated step
	}
	ok := (cur == wire.MoveState_MOVE_COPYING && (want == wire.MoveState_MOVE_COMMITTED || want == wire.MoveState_MOVE_ABORTED)) ||
		(cur == wire.MoveState_MOVE_COMMITTED && want == wire.MoveState_MOVE_DONE)
	if !ok {
		return errResult(syscall.EINVAL, "move %d is %v; it cannot become %v", mv.GetId(), cur, want), nil
	}
	mv = proto.Clone(mv).(*wire.Move)
	mv.State = want
	switch want {
	case wire.MoveState_MOVE_COMMITTED:
		// The decision: ownership flips here, and both epochs grow.
		src, err := GetMinistry(rw, mv.GetSource())
		if err != nil {
			return nil, err
		}
		dst, err := GetMinistry(rw, mv.GetTarget())
		if err != nil {
			return nil, err
		}
		if src == nil || dst == nil {
			return errResult(syscall.ENOENT, "move %d: ministry %d or %d no longer exists", mv.GetId(), mv.GetSource(), mv.GetTarget()), nil
		}
		src = proto.Clone(src).(*wire.Ministry)
		dst = proto.Clone(dst).(*wire.Ministry)
		src.Subtrees = slices.DeleteFunc(src.Subtrees, func(s *wire.Subtree) bool { return s.GetIno() == mv.GetIno() })
		dst.Held = true
		if !mv.GetUnassign() {
			dst.Subtrees = append(dst.Subtrees, &wire.Subtree{Ino: mv.GetIno(), Path: mv.GetPath(), Parent: mv.GetParent(), Name: mv.GetName()})
		}
		for _, m := range []*wire.Ministry{src, dst} {
			m.Epoch++
			m.RootIno, m.RootPath = 0, ""
			if len(m.Subtrees) > 0 {
				m.RootIno, m.RootPath = m.Subtrees[0].GetIno(), m.Subtrees[0].GetPath()
			}
			if err := putMsg(rw, ministryKey(m.GetGroup()), m); err != nil {
				return nil, err
			}
		}
	case wire.MoveState_MOVE_DONE, wire.MoveState_MOVE_ABORTED:
		mv.EndedNs = nowNs
		mv.Error = op.GetError()
	}
	if err := putMsg(rw, moveKey(mv.GetId()), mv); err != nil {
		return nil, err
	}
	return &wire.Result{}, nil
}

// dissolveMinistry removes a ministry that never held a subtree from the
// map; a repeat is a no-op.
func dissolveMinistry(rw engine.ReadWriter, op *wire.DissolveMinistryOp) (*wire.Result, error) {
	g := op.GetMinistry()
	if v, err := rw.Get(dissolvedKey(g)); err != nil {
		return nil, err
	} else if v != nil {
		return &wire.Result{}, nil
	}
	m, err := GetMinistry(rw, g)
	if err != nil {
		return nil, err
	}
	switch {
	case m == nil:
		return errResult(syscall.ENOENT, "ministry %d does not exist (see govfs admin ministries)", g), nil
	case g == uint64(ids.RootMinistry) || g == uint64(ids.PresidentGroup):
		return errResult(syscall.EBUSY, "ministry %d is the root ministry and is never dissolved", g), nil
	case len(m.GetSubtrees()) > 0:
		return errResult(syscall.EBUSY, "ministry %d holds %s; unassign its subtrees first", g, m.GetSubtrees()[0].GetPath()), nil
	case m.GetHeld():
		return errResult(syscall.EBUSY, "ministry %d held a subtree once (its forwarding records and inode ranges are still used)", g), nil
	}
	moves, err := Moves(rw)
	if err != nil {
		return nil, err
	}
	for _, mv := range moves {
		if Active(mv) && (mv.GetSource() == g || mv.GetTarget() == g) {
			return errResult(syscall.EBUSY, "ministry %d is in move %d of %s; wait for it to end", g, mv.GetId(), mv.GetPath()), nil
		}
	}
	if err := rw.Delete(ministryKey(g)); err != nil {
		return nil, err
	}
	if err := rw.Set(dissolvedKey(g), []byte{1}); err != nil {
		return nil, err
	}
	return &wire.Result{}, nil
}

// Dissolved returns the ids of the ministries dissolved so far.
func Dissolved(r engine.Reader) ([]uint64, error) {
	var out []uint64
	err := r.Scan([]byte("D"), []byte("E"), func(k, _ []byte) bool {
		out = append(out, binary.BigEndian.Uint64(k[1:]))
		return true
	})
	return out, err
}
