package namespace

import (
	"encoding/binary"
	"fmt"
	"syscall"

	"github.com/govfs/govfs/internal/engine"
	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/wire"
)

// Asynchronous metadata operations (docs/fuse.md, "Asynchronous
// creates"): a mount holding a directory lease answers creates itself,
// with inode numbers it reserved beforehand, and sends the operations
// later in batches.

// MaxReserve bounds one ReserveInodesOp.
const MaxReserve = 4096

// MaxBatch bounds the commands of one BatchOp.
const MaxBatch = 1024

// A batch command keeps the time its client stamped it with when that is
// at most maxClientAhead after, or maxClientBehind before, the minister's
// time for the batch (a deferred operation waits in its client's queue
// and through retries); otherwise it takes the minister's.
const (
	maxClientAhead  = int64(1e9)
	maxClientBehind = int64(30e9)
)

func reserveKey(client uint64) []byte { return u64Key(kindReserve, client) }

// reservation is a client's "v" record: the ranges it may number new
// inodes from, oldest first (one, or two after a ReserveInodesOp with
// ahead), each as the next number it may use and the range's end. A
// create uses a number of the first range that has it, at or after that
// range's next, and drops the ranges before: a client numbers in order
// and its creates are applied in that order.
type reservation []resvRange

type resvRange struct{ next, end uint64 }

func loadReservation(r engine.Reader, client uint64) (reservation, bool, error) {
	v, err := r.Get(reserveKey(client))
	if err != nil {
		return nil, false, fmt.Errorf("namespace: get reservation of client %d: %w", client, err)
	}
	if v == nil {
		return nil, false, nil
	}
	if len(v) != 16 && len(v) != 32 {
		return nil, false, fmt.Errorf("namespace: corrupt reservation of client %d (%d bytes)", client, len(v))
	}
	var out reservation
	for ; len(v) > 0; v = v[16:] {
		out = append(out, resvRange{binary.BigEndian.Uint64(v), binary.BigEndian.Uint64(v[8:])})
	}
	return out, true, nil
}

func (v reservation) encode() []byte {
	var b []byte
	for _, r := range v {
		b = binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(b, r.next), r.end)
	}
	return b
}

// takeRange hands out up to n consecutive unused numbers of the first
// range that has any.
func (g *inoRanges) takeRange(n uint64) (start, end uint64, ok bool) {
	for len(g.ranges) > 0 {
		r := g.ranges[0]
		if g.next < r[0] {
			g.next = r[0]
		}
		if g.next <= uint64(ids.RootIno) {
			g.next = uint64(ids.RootIno) + 1
		}
		if g.next < r[1] {
			start = g.next
			end = min(r[1], start+n)
			g.next = end
			return start, end, true
		}
		g.ranges = g.ranges[1:]
	}
	return 0, 0, false
}

func reserveInodes(t *tx, client uint64, op *wire.ReserveInodesOp) (*wire.Result, error) {
	if client == 0 {
		return nil, errnof(syscall.EINVAL, "reserve inodes: the command has no client id")
	}
	if op.Count == 0 || op.Count > MaxReserve {
		return nil, errnof(syscall.EINVAL, "reserve inodes: count %d (want 1 to %d)", op.Count, MaxReserve)
	}
	g, err := loadRanges(t.r)
	if err != nil {
		return nil, err
	}
	start, end, ok := g.takeRange(op.Count)
	if !ok {
		return nil, errnof(syscall.ENOSPC, "no inode numbers left; the ministry must be granted more by the president")
	}
	t.set(inodeRangesKey, g.encode())
	v := reservation{{start, end}}
	if op.GetAhead() {
		// Every create queued before this command was applied, so only
		// the range the client numbers from now (keep_end's) can still
		// be in use.
		cur, _, err := loadReservation(t.r, client)
		if err != nil {
			return nil, err
		}
		for _, r := range cur {
			if r.end == op.GetKeepEnd() && r.next < r.end {
				v = reservation{r, {start, end}}
				break
			}
		}
	}
	t.set(reserveKey(client), v.encode())
	return &wire.Result{Start: start, End: end}, nil
}

// useReserved checks that ino is the client's to use and moves the
// client's cursor past it.
func useReserved(t *tx, client uint64, ino uint64) error {
	if client == 0 {
		return errnof(syscall.EINVAL, "create with inode %d: the command has no client id", ino)
	}
	v, found, err := loadReservation(t.r, client)
	if err != nil {
		return err
	}
	at := -1
	for i, r := range v {
		if ino >= r.next && ino < r.end {
			at = i
			break
		}
	}
	if !found || at < 0 {
		return errnof(syscall.EINVAL, "create with inode %d: not in the client's reserved ranges %v", ino, v)
	}
	if v, err := t.r.Get(inodeKey(ids.Ino(ino))); err != nil {
		return fmt.Errorf("namespace: get inode %d: %w", ino, err)
	} else if v != nil || t.inodes[ids.Ino(ino)] != nil {
		return errnof(syscall.EINVAL, "create with inode %d: already used", ino)
	}
	rest := append(reservation{}, v[at:]...)
	rest[0].next = ino + 1
	if rest[0].next == rest[0].end {
		rest = rest[1:]
	}
	if len(rest) == 0 {
		t.del(reserveKey(client))
	} else {
		t.set(reserveKey(client), rest.encode())
	}
	return nil
}

func (r resvRange) String() string { return fmt.Sprintf("[%d, %d)", r.next, r.end) }

// applyBatch applies each command of b in order through Apply, so each
// is deduplicated by its own request id.
func applyBatch(rw engine.ReadWriter, now int64, b *wire.BatchOp) (*wire.Result, error) {
	out := &wire.Result{Results: make([]*wire.Result, 0, len(b.Cmds))}
	cc := &clientCache{}
	for i, sub := range b.Cmds {
		subCache := cc
		if _, imp := sub.GetOp().(*wire.Command_ImportSubtree); imp {
			// It writes client records itself (importResult), its own
			// client's included: applied past the cache (a batch
			// refuses move steps today; found in review).
			if err := cc.flush(rw); err != nil {
				return nil, err
			}
			subCache = nil
		}
		if _, nested := sub.GetOp().(*wire.Command_Batch); nested || sub.GetVersion() != CommandVersion {
			out.Results = append(out.Results, &wire.Result{Errno: uint32(syscall.EINVAL),
				Message: fmt.Sprintf("namespace: batch command %d: nested batch or version %d", i, sub.GetVersion())})
			continue
		}
		// The client's time, when close to the minister's: the
		// holder of a directory lease answered the operation with
		// attributes stamped with it (client.MakeNodeDeferred).
		if d := sub.NowNs - now; sub.NowNs == 0 || d > maxClientAhead || d < -maxClientBehind {
			sub.NowNs = now
		}
		res, err := apply(rw, sub, subCache)
		if err != nil {
			return nil, err
		}
		out.Results = append(out.Results, res)
	}
	if err := cc.flush(rw); err != nil {
		return nil, err
	}
	return out, nil
}

func dirLeaseKey(dir ids.Ino) []byte { return u64Key(kindDirLease, uint64(dir)) }

// markDirLease records that dir was given a directory lease.
func markDirLease(t *tx, op *wire.MarkDirLeaseOp) (*wire.Result, error) {
	if _, err := t.dir(ids.Ino(op.Dir)); err != nil {
		return nil, err
	}
	t.set(dirLeaseKey(ids.Ino(op.Dir)), nil)
	return &wire.Result{}, nil
}

// DirLeaseMarked says whether dir was ever given a directory lease
// (MarkDirLeaseOp) and still exists.
func DirLeaseMarked(r engine.Reader, dir ids.Ino) (bool, error) {
	v, err := r.Get(dirLeaseKey(dir))
	if err != nil {
		return false, fmt.Errorf("namespace: get directory lease mark of %v: %w", dir, err)
	}
	return v != nil, nil
}
