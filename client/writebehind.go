package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/wire"
)

// Write-behind (docs/leases.md, "Write-behind"): a small file's write
// that a File would send inline at once (writeInline), when the File
// allows it (WriteBehind), is queued behind the Client's other deferred
// changes and answered at once, under a *buffered* write lease on the
// file: the Client's whole-file read lease on it, upgraded in place
// (LEASE_UPGRADE: one request, no leadership confirmation, since the
// lease is trusted no longer than it was). Nobody else can read the file
// past the queued write or change it while the lease is buffered:
// another client's lease request recalls it (even a try waits for it),
// and another client's change of the file drains it, as a read lease is
// drained; the holder sends its queue before it gives a lease back. The
// ministry applies the write only while the lease is held
// (MutateRequest.buffered_leases: kept from expiring while the write is
// proposed), so a write that waited past its lease, its client cut off
// for longer than a TTL, is refused (ESTALE) rather than applied over a
// later change of another client. Once the write is answered the lease
// is made a read lease again (LEASE_DOWNGRADE), in the background.
//
// What a close then gives: the bytes are seen by every later open on any
// mount (close-to-open), and by this Client's every later read; they are
// durable once fsync (or a sync of the file system, or of its directory
// through the mount) returns, as on a local file system. A process that
// crashes loses nothing (the mount holds the queue); a mount that dies
// with closed files' bytes queued loses them, as a local file system
// loses what it had not written back. Reads by other clients without a
// lease (a stat answered by a clerk, a listing's attributes) may show the
// previous contents until the queue is sent, within milliseconds.

// noteBehindFailure keeps the first failure of a write queued behind on
// ino until a Sync of the file takes it.
func (c *Client) noteBehindFailure(ino ids.Ino, err error) {
	c.changing.mu.Lock()
	defer c.changing.mu.Unlock()
	if c.changing.failed == nil {
		c.changing.failed = map[ids.Ino]error{}
	}
	if _, ok := c.changing.failed[ino]; !ok {
		c.changing.failed[ino] = err
	}
}

// takeBehindFailure returns and forgets the failure kept for ino.
func (c *Client) takeBehindFailure(ino ids.Ino) error {
	c.changing.mu.Lock()
	defer c.changing.mu.Unlock()
	err := c.changing.failed[ino]
	delete(c.changing.failed, ino)
	return err
}

// WritesBehind counts the writes queued behind so far (WriteBehind).
func (c *Client) WritesBehind() uint64 { return c.behindWrites.Load() }

// WriteBehind lets this File's small inline writes be queued and answered
// at once (see above) under the read lease leaseOf returns when called
// (the mount's lease on the file; nil or not valid: the write goes
// through). The mount sets it on files opened without O_SYNC or O_DSYNC
// when --write-behind is on; Sync does not wait for queued writes (it
// reports their failures), the Client's FlushDeferred does.
func (f *File) WriteBehind(leaseOf func() *Lease) {
	f.mu.Lock()
	f.mu.behindLease = leaseOf
	f.mu.Unlock()
}

// writeInlineBehind queues p at off as an inline write under a buffered
// lease (see above). ok false: nothing was queued (no lease to upgrade,
// another client in the way, or the file is not a small inline one),
// write the usual way.
func (f *File) writeInlineBehind(ctx context.Context, p []byte, off, limit int64) bool {
	f.mu.Lock()
	leaseOf := f.mu.behindLease
	skip := leaseOf == nil || f.mu.noBehind || f.mu.inlineWrites > 0
	f.mu.Unlock()
	// A change of the file still queued (a write behind its create, an
	// earlier write behind): this one goes through, after them.
	if skip || f.c.QueuedFileChanges(f.ino) {
		return false
	}
	l := leaseOf()
	if l == nil || l.ino != f.ino || l.mode != LeaseRead || l.lock || l.dir || l.off != 0 || l.len != 0 || !l.Valid() {
		return false
	}
	// A change of the file this Client has on its way (another
	// descriptor's push) may be applied after the read below: then that
	// read would not say what the queued write lands on.
	if !f.c.changing.beginRead(f.ino) {
		return false
	}
	opened, err := l.holdBehind(ctx)
	if hook := f.c.behindHeldForTest; hook != nil && err == nil {
		hook()
	}
	if err != nil {
		f.c.changing.endRead(f.ino, nil)
		// Another client reads or writes the file too (or the lease is
		// gone): this File writes through from now on.
		f.mu.Lock()
		f.mu.noBehind = true
		f.mu.Unlock()
		return false
	}
	// What the file is, read when the lease became buffered: nobody
	// else can change it now, so the bytes queued here land on exactly
	// this (if this Client did not change it meanwhile: endRead).
	a := opened.GetAttr()
	if a == nil || a.GetType() != wire.FileType_REGULAR || opened.GetChunksOmitted() || len(opened.GetChunks()) > 0 ||
		int64(a.GetSize()) > limit || (!opened.GetInline() && a.GetSize() > 0) {
		f.c.changing.endRead(f.ino, nil)
		l.doneBehind(false)
		f.mu.Lock()
		f.mu.noBehind = true
		f.mu.Unlock()
		return false
	}
	data := slices.Clone(p) // the caller may reuse p once this returns
	cmd := f.c.newCommand(func(cmd *wire.Command) {
		cmd.Op = &wire.Command_WriteInline{WriteInline: &wire.WriteInlineOp{Ino: uint64(f.ino), Offset: uint64(off),
			Data: data, MaxInline: uint64(limit)}}
	})
	cmd.Caller = f.c.callerFor(ctx)
	queued := f.c.changing.endRead(f.ino, func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.mu.inlineWrites > 0 {
			// Another write of this File started meanwhile (it writes
			// through): this one must not be ordered apart from it.
			return false
		}
		f.mu.chunks = map[uint64]*wire.ChunkRef{}
		buf := slices.Clone(opened.GetInlineData())
		if end := off + int64(len(p)); int64(len(buf)) < end {
			buf = append(buf, make([]byte, end-int64(len(buf)))...)
		}
		copy(buf[off:], p)
		f.mu.inline, f.mu.inlineData = true, buf
		f.mu.size = max(int64(a.GetSize()), int64(len(buf)))
		// Answered in the queue: Settled waits for the answer's
		// attributes.
		f.mu.behindQueued++
		f.c.behindWrites.Add(1)
		f.c.enqueue(&deferredOp{group: l.group, route: f.ino, cmd: cmd, what: "write " + f.path, changes: f.ino, buffered: l,
			done: func(res *wire.Result, err error) {
				if err == nil {
					f.noteChanged(res.GetAttr())
				} else {
					f.queuedDone(res, err)
					// The File may be closed by now: the file's
					// next Sync on this Client reports it.
					f.c.noteBehindFailure(f.ino, err)
				}
				// Answered: the batch was applied, and the ministry
				// made the lease a read lease again.
				l.doneBehind(res != nil)
			},
			retired: f.behindRetired})
		return true
	})
	if !queued {
		f.c.finish(cmd.GetReq().GetSeq())
		l.doneBehind(false)
	}
	return queued
}

// behindRetired counts a write queued behind as answered and retired
// from the queue; after the last one, the function WhenBehindSettled
// kept runs (in its own goroutine: it may give leases back, which sends
// the queue).
func (f *File) behindRetired() {
	f.mu.Lock()
	f.mu.behindQueued--
	var cb func()
	if f.mu.behindQueued == 0 {
		cb, f.mu.onSettled = f.mu.onSettled, nil
	}
	f.mu.Unlock()
	if cb != nil {
		go cb()
	}
}

// WhenBehindSettled says whether no write of this File queued behind
// (WriteBehind) is waiting for its answer; if one is, it returns false
// and runs then once they all are answered (Settled then says what they
// left), replacing an earlier then.
func (f *File) WhenBehindSettled(then func()) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mu.behindQueued == 0 {
		return true
	}
	f.mu.onSettled = then
	return false
}

// inoChanges tracks, per inode, the synchronous changes a Client has on
// their way (routed by the inode: its bytes, size, chunks, attributes),
// for writes queued behind: such a write must know what it lands on,
// and a change on its way could be applied after the read that told it.
type inoChanges struct {
	mu sync.Mutex
	m  map[ids.Ino]*inoCount
	// failed: the first failure of a write queued behind, per inode,
	// until a Sync of the file reports it (noteBehindFailure).
	failed map[ids.Ino]error
}

// inoCount: onWay changes on their way; watching reads of what the file
// is (beginRead), disturbed by a change that started since.
type inoCount struct {
	onWay, watching int
	disturbed       bool
}

func (ic *inoChanges) entryLocked(ino ids.Ino) *inoCount {
	if ic.m == nil {
		ic.m = map[ids.Ino]*inoCount{}
	}
	n := ic.m[ino]
	if n == nil {
		n = &inoCount{}
		ic.m[ino] = n
	}
	return n
}

func (ic *inoChanges) dropIdleLocked(ino ids.Ino, n *inoCount) {
	if n.onWay == 0 && n.watching == 0 && ic.m[ino] == n {
		delete(ic.m, ino)
	}
}

// start counts a change of ino on its way; call the result when it is
// answered.
func (ic *inoChanges) start(ino ids.Ino) (done func()) {
	ic.mu.Lock()
	n := ic.entryLocked(ino)
	n.onWay++
	if n.watching > 0 {
		n.disturbed = true
	}
	ic.mu.Unlock()
	return func() {
		ic.mu.Lock()
		defer ic.mu.Unlock()
		n.onWay--
		ic.dropIdleLocked(ino, n)
	}
}

// beginRead starts a read of what ino is, for a write queued behind: false
// if a change of it is on its way (nothing started then). endRead ends
// it, running then (which queues the write) if no change of ino started
// meanwhile, and says whether then ran and did.
func (ic *inoChanges) beginRead(ino ids.Ino) bool {
	ic.mu.Lock()
	defer ic.mu.Unlock()
	n := ic.entryLocked(ino)
	if n.onWay > 0 {
		ic.dropIdleLocked(ino, n)
		return false
	}
	if n.watching == 0 {
		n.disturbed = false
	}
	n.watching++
	return true
}

func (ic *inoChanges) endRead(ino ids.Ino, then func() bool) (done bool) {
	ic.mu.Lock()
	defer ic.mu.Unlock()
	n := ic.m[ino]
	if n == nil {
		return false
	}
	n.watching--
	// then runs under mu: a change starting after it finds the write
	// queued (and sends it first), one that started before disturbed it.
	if then != nil && !n.disturbed && n.onWay == 0 {
		done = then()
	}
	ic.dropIdleLocked(ino, n)
	return done
}

// holdBehind makes l buffered (LEASE_UPGRADE) for one more write queued
// under it, and returns the file's open read made then. A lease that is
// already buffered (its downgrade failed) is not used: nothing says what
// the file is.
func (l *Lease) holdBehind(ctx context.Context) (*wire.ReadResponse, error) {
	l.behind.Lock()
	defer l.behind.Unlock()
	if l.upgraded.Load() {
		return nil, fmt.Errorf("%w: lease %d is buffered already", syscall.EAGAIN, l.id)
	}
	k := l.c.keeper()
	k.mu.Lock()
	epoch := k.mu.reclaims[l.group]
	k.mu.Unlock()
	resp, err := l.c.leaseCall(ctx, l.group, &wire.LeaseRequest{Op: wire.LeaseOp_LEASE_UPGRADE, Ino: uint64(l.ino), Ids: []uint64{l.id},
		Open: true, OpenMaxChunks: openChunks}, 0)
	if err != nil {
		return nil, err
	}
	// Buffered from now on in what a reclaim describes (grant), unless
	// one described the lease since the request left: the minister
	// that answered may be gone, and the new one may hold the lease as
	// a read lease, granting others past the write (found in review).
	k.mu.Lock()
	same := k.mu.reclaims[l.group] == epoch
	l.upgraded.Store(true)
	k.mu.Unlock()
	if !same {
		l.downgradeLocked()
		return nil, fmt.Errorf("%w: the minister of %v changed during the upgrade", syscall.EAGAIN, l.group)
	}
	l.behindN++
	if !l.Valid() {
		// Revoked or lost while it was asked for: the revoke may have
		// sent the queue before this write is queued.
		l.behindN--
		l.downgradeLocked()
		return nil, fmt.Errorf("%w: lease %d ended", syscall.EAGAIN, l.id)
	}
	return resp.GetOpened(), nil
}

// doneBehind ends one holdBehind. applied: its write was answered, and
// with it the ministry made the lease a read lease again
// (MutateRequest.buffered_leases); otherwise the last one asks for that
// (LEASE_DOWNGRADE), in the background.
func (l *Lease) doneBehind(applied bool) {
	l.behind.Lock()
	l.behindN--
	if applied {
		l.upgraded.Store(false)
	}
	last := l.behindN == 0 && l.upgraded.Load()
	l.behind.Unlock()
	if !last {
		return
	}
	l.c.inBackground(func(context.Context) {
		l.behind.Lock()
		defer l.behind.Unlock()
		if l.behindN == 0 {
			l.downgradeLocked()
		}
	})
}

// downgradeLocked makes l a read lease again (l.behind held).
func (l *Lease) downgradeLocked() {
	if !l.upgraded.Load() {
		return
	}
	ctx, cancel := l.c.keeper().stopContext(l.c.cfg.CallTimeout)
	defer cancel()
	if _, err := l.c.leaseCall(ctx, l.group, &wire.LeaseRequest{Op: wire.LeaseOp_LEASE_DOWNGRADE, Ino: uint64(l.ino), Ids: []uint64{l.id}}, 0); err != nil {
		// Gone (released, lost) or unreachable: it stays buffered
		// until it ends; holdBehind does not use it again.
		l.c.log.Debug("downgrade of a buffered lease failed", slog.Uint64("lease", l.id), slog.Any("err", err))
		return
	}
	l.upgraded.Store(false)
}

// behindPending says whether writes queued under l are not answered yet:
// they are sent before l is given back.
func (l *Lease) behindPending() bool {
	l.behind.Lock()
	defer l.behind.Unlock()
	return l.behindN > 0
}

// sendBehind sends the Client's queue if writes queued under l are not
// answered yet: before l is given back (revoked, released), so that
// whoever asked for it reads them. A lost lease needs nothing: its
// writes are refused by the ministry.
func (c *Client) sendBehind(l *Lease) {
	if !l.behindPending() {
		return
	}
	ctx, cancel := c.keeper().stopContext(c.cfg.OpTimeout)
	defer cancel()
	// Until every write held under it is answered: one may be between
	// its upgrade and the queue (found in review), which a flush of
	// what is queued now would miss.
	for l.behindPending() && ctx.Err() == nil {
		c.flushDeferred(ctx)
		if l.behindPending() {
			select {
			case <-ctx.Done():
			case <-c.cfg.Clock.After(time.Millisecond):
			}
		}
	}
}

// bufferedLeasesOf lists the buffered leases run's writes were answered
// under (MutateRequest.buffered_leases).
func bufferedLeasesOf(run []*deferredOp) []uint64 {
	var out []uint64
	for _, op := range run {
		if l := op.buffered; l != nil && !slices.Contains(out, l.id) {
			out = append(out, l.id)
		}
	}
	return out
}

// lostLeasesError: a batch was refused, unapplied, because the ministry
// no longer held some of its buffered leases (ids).
type lostLeasesError struct {
	ids []uint64
	err error
}

func (e *lostLeasesError) Error() string { return e.err.Error() }
func (e *lostLeasesError) Unwrap() error { return e.err }

// sendBatch sends run as one batch (sendBatchOnce). Writes under buffered
// leases the ministry no longer holds fail with ESTALE, unapplied, and
// the rest of the batch is sent again without them. New directories whose
// leases the minister refused lose them, and the batch goes again
// without asking (newdirlease.go).
func (c *Client) sendBatch(ctx context.Context, run []*deferredOp) ([]*wire.Result, []ids.Ino, error) {
	defer func() {
		for _, op := range run {
			c.finish(op.cmd.GetReq().GetSeq())
		}
	}()
	out := make([]*wire.Result, len(run))
	idx := make([]int, len(run))
	for i := range idx {
		idx[i] = i
	}
	for {
		sub := make([]*deferredOp, len(idx))
		for j, i := range idx {
			sub[j] = run[i]
		}
		res, leased, err := c.sendBatchOnce(ctx, sub)
		if refused := (*refusedNewDirsError)(nil); errors.As(err, &refused) {
			if !c.giveUpNewDirLeases(sub, refused.inos) {
				return nil, nil, err // none of ours: answered as the ministry said
			}
			c.deferred.holdForTestWait()
			continue
		}
		var lost *lostLeasesError
		if !errors.As(err, &lost) {
			if err != nil {
				return nil, nil, err
			}
			for j, i := range idx {
				out[i] = res[j]
			}
			return out, leased, nil
		}
		var rest []int
		for _, i := range idx {
			if b := run[i].buffered; b != nil && slices.Contains(lost.ids, b.id) {
				out[i] = &wire.Result{Errno: uint32(syscall.ESTALE), Message: fmt.Sprintf("%s: its buffered write lease was lost (this client was cut off from the minister for longer than the lease lives, or a new minister did not get the lease back): the write, answered at its close, was not applied", run[i].what)}
				c.log.Warn("write answered at close not applied: its buffered lease was lost", slog.String("op", run[i].what))
			} else {
				rest = append(rest, i)
			}
		}
		if len(rest) == len(idx) {
			// None of ours: answered as the ministry said.
			return nil, nil, err
		}
		if idx = rest; len(idx) == 0 {
			return out, nil, nil
		}
	}
}
