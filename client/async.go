package client

import (
	"context"
	"fmt"
	"google.golang.org/protobuf/proto"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/wire"
)

// Deferred metadata operations (docs/fuse.md, "Asynchronous creates").
//
// A caller holding a directory lease (LeaseOptions.Dir) knows that no
// other client changes the directory's entries, so it can answer a
// create, unlink or rename there itself and let the Client send it later:
// MakeNodeDeferred, DeferredUnlink and DeferredRename queue the command
// and return at once.
// The queue is sent in batches (BatchOp: many commands per RPC and per
// log entry), one batch in flight at a time, so a batch holds whatever
// queued while the previous one was on its way. Order is kept: every
// other metadata request of this Client (read or change) first waits
// until everything queued before it is applied, so nothing this Client
// does can see the namespace without its own deferred operations.
// A deferred operation that fails (the lease was lost and another client
// got there first, ENOSPC) is reported to its done function and logged;
// done functions run on the sender, before a flush waiting for the
// operation returns, so they must not block on the caller's locks.

// reserveCount is how many inode numbers one ReserveInodesOp asks for
// (namespace.MaxReserve, the most it grants). The next range is asked
// for ahead, at half (reserveAhead), and comes back once the queue
// reached it: with 16 processes making directories, the queue runs
// ~150 ms behind (each new directory's create waits for its lease's
// grant), longer than 512 of 1,024 numbers last (~85 ms at 6,000/s),
// so with 1,024 most switches fell back to the plain reservation,
// which waits for the whole queue.
const reserveCount = 4096

// DeferredDone hears how a deferred operation ended: err is its errno
// (or the reason the batch could not be sent), res the ministry's result.
type DeferredDone func(res *wire.Result, err error)

type deferredOp struct {
	group  ids.GroupID
	route  ids.Ino
	cmd    *wire.Command
	what   string
	done   DeferredDone
	ticket uint64
	// sendBy, when set, is when the op stops being worth sending: the
	// record of a chunk written before it (newfile.go), which the
	// collector may delete once it has been unreferenced for its grace
	// period.
	sendBy time.Time
	// slot: the place of a new file's write's records, filled by
	// fillSlot when the bytes are out (newfile.go); nothing at or after
	// an unfilled slot is sent. skip: filled with nothing (answered
	// without being sent).
	slot, filled, skip bool
	// failed: a skipped slot's write failed; the sender answers the
	// slot with it, in queue order.
	failed error
	// creates: the regular file this op creates (0: none), see creating;
	// changes: the file this op changes, queued behind its create.
	creates, changes ids.Ino
	// dirs: the directories whose entries or own attributes this op
	// changes (DirQueued), the inode it makes or removes and the inodes
	// a rename moves (InoQueued).
	dirs []ids.Ino
	// newDir: the lease of the directory this op creates
	// (MakeDirDeferred), pending until the batch that sends the create
	// brings its grant (MutateRequest.lease_new_dirs).
	newDir *Lease
	// buffered: the buffered write lease this op was answered under
	// (writebehind.go); retired, when set, runs once the op is answered
	// and no longer counted as queued.
	buffered *Lease
	retired  func()
}

type deferredQueue struct {
	// outstanding counts queued and in-flight operations: 0 lets every
	// other request go without touching the lock below.
	outstanding atomic.Int64
	mu          sync.Mutex
	// pending is the queue, in order; running says the sender goroutine
	// is draining it. Operations are numbered in queue order (lastTicket
	// is the newest); doneTo says every operation up to it was answered
	// (and its done function ran); waiters are flushes waiting for a
	// ticket.
	pending    []*deferredOp
	running    bool
	lastTicket uint64
	doneTo     uint64
	waiters    []flushWaiter
	// creating maps a regular file whose queued create is not answered
	// yet to that create's ticket (Client.creating), createdAt to when
	// it was queued (newBytesWindow).
	creating  map[ids.Ino]uint64
	createdAt map[ids.Ino]time.Time
	// changing counts the unanswered queued changes of each file
	// (deferFileCmd).
	changing map[ids.Ino]int
	// dirOps counts the unanswered queued changes of each directory's
	// entries or attributes (deferredOp.dirs).
	dirOps map[ids.Ino]int
	// newChunks holds the chunks given to new files' writes whose
	// records are queued (newfile.go), by inode and chunk index, so that
	// every File of such a file writes a chunk index into one chunk.
	newChunks map[ids.Ino]map[uint64]*wire.ChunkRef
	// takenTo is the ticket of the newest operation the sender took
	// (sent or being sent).
	takenTo uint64
	// holds are the files whose create the sender keeps back while
	// their bytes are being written (holdCreate), and until when.
	holds map[ids.Ino]*createHold
	// urgent counts the flushes waiting: holds yield to them.
	urgent int
	// wake tells a waiting sender that a hold ended or a flush began.
	wake chan struct{}
	// resvMu orders taking a reserved number and queueing its create
	// against a new reservation (which replaces the old one: every create
	// numbered from the old range must be applied first).
	resvMu sync.Mutex
	resv   map[ids.GroupID]*reservation
	// plainReserves counts the reservations that waited for the queue
	// (the first of a group, or one whose range ahead was not there).
	plainReserves atomic.Int64
	// holdForTest, set by a test (under mu: setHoldForTest) before
	// anything is queued, holds the sender until closed (a queue that
	// is slow to leave): what is queued stays pending. Each batch (and
	// each time one goes again for refused leases, holdForTestWait)
	// takes one receive, so a test may also let them go one by one.
	holdForTest chan struct{}
	// afterNewFileStoreForTest runs when a new file's bytes are written
	// and their records not queued yet (newfile.go).
	afterNewFileStoreForTest func()
}

// createHold keeps a file's queued create from being sent (holdCreate).
type createHold struct {
	n int
	// until is maxCreateHold after the first hold: later ones do not
	// extend it (a file kept open while it is written in small pieces
	// would keep its create back for ever).
	until time.Time
}

// maxCreateHold bounds how long a held create (holdCreate) keeps the
// queue back for changes of its file still to come.
const maxCreateHold = 100 * time.Millisecond

// newBytesWindow bounds how long after its create was queued a file's
// bytes may still be queued behind it (holdCreate): the create waits for
// every write so queued (sendableLocked), so a program writing a new file
// without pause would otherwise keep it back for as long as it writes,
// and the records of its first chunks past their newFileRecordWindow.
// Later writes go the usual way, after the create's answer; so the
// create waits at most this and a write's newWriteTime.
const newBytesWindow = 10 * time.Second

// holdCreate says whether ino's create is queued or on its way and not
// answered yet (queued), and if it has not been taken by the sender yet,
// keeps it from being sent while the file's bytes are written (held), so
// that their records can join its batch; releaseCreate ends a hold.
func (c *Client) holdCreate(ino ids.Ino) (queued, held bool) {
	q := &c.deferred
	if q.outstanding.Load() == 0 {
		return false, false
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	t, ok := q.creating[ino]
	if !ok {
		return false, false
	}
	if t <= q.takenTo || c.cfg.Clock.Now().Sub(q.createdAt[ino]) > newBytesWindow {
		return true, false
	}
	if q.holds == nil {
		q.holds = map[ids.Ino]*createHold{}
	}
	h := q.holds[ino]
	if h == nil {
		h = &createHold{until: c.cfg.Clock.Now().Add(maxCreateHold)}
		q.holds[ino] = h
	}
	h.n++
	return true, true
}

// HoldCreate keeps ino's queued create from being sent for up to
// maxCreateHold, or until release is called, if the sender has not
// taken it yet: changes of the file made meanwhile (tar sets times,
// owner and mode of each file it extracts before closing it) then queue
// behind the create (SetattrDeferred) instead of going to the ministry
// one by one after it. A request waiting for the queue sends it anyway.
// release is nil when nothing is held; calling it again does nothing.
func (c *Client) HoldCreate(ino ids.Ino) (release func()) {
	if _, held := c.holdCreate(ino); !held {
		return nil
	}
	var once sync.Once
	return func() { once.Do(func() { c.releaseCreate(ino) }) }
}

func (c *Client) releaseCreate(ino ids.Ino) {
	q := &c.deferred
	q.mu.Lock()
	if h := q.holds[ino]; h != nil {
		if h.n--; h.n <= 0 {
			delete(q.holds, ino)
		}
	}
	q.mu.Unlock()
	q.nudge()
}

// fillSlot puts cmds in slot's place in the queue (nothing: the slot is
// answered without being sent) and lets the sender go past it.
func (c *Client) fillSlot(slot *deferredOp, cmds []*wire.Command, failed error) {
	q := &c.deferred
	q.mu.Lock()
	i := slices.Index(q.pending, slot)
	if i < 0 {
		// Cannot happen: the sender never takes an unfilled slot.
		q.mu.Unlock()
		c.log.Error("a new file's write lost its place in the queue; its bytes are not recorded", slog.String("op", slot.what))
		return
	}
	slot.filled = true
	if len(cmds) == 0 {
		slot.skip, slot.failed = true, failed
	} else {
		slot.cmd = cmds[0]
		var more []*deferredOp
		for _, cmd := range cmds[1:] {
			op := *slot
			op.cmd = cmd
			more = append(more, &op)
		}
		q.pending = slices.Insert(q.pending, i+1, more...)
		q.outstanding.Add(int64(len(more)))
		q.changing[slot.changes] += len(more)
	}
	q.mu.Unlock()
	q.nudge()
}

// nudge wakes the sender if it waits.
func (q *deferredQueue) nudge() {
	q.mu.Lock()
	if q.wake == nil {
		q.wake = make(chan struct{}, 1)
	}
	w := q.wake
	q.mu.Unlock()
	select {
	case w <- struct{}{}:
	default:
	}
}

// sendableLocked says how many operations at the head of the queue the
// sender may take now, and, when none, how long to wait at most: the
// queue stops before a write's place not filled yet, before a create
// that is held, and before the create of any file with a change past
// the stop (wholeCut).
func (q *deferredQueue) sendableLocked(now time.Time) (int, time.Duration) {
	stop, wait := len(q.pending), time.Duration(0)
	for i, op := range q.pending {
		if op.slot && !op.filled {
			// Even for a flush: what goes there is not known yet (the
			// write fills it when its bytes are out, or gives up).
			stop, wait = i, time.Second
			break
		}
		if op.creates == 0 || q.urgent > 0 {
			continue
		}
		if h := q.holds[op.creates]; h != nil && now.Before(h.until) {
			stop, wait = i, h.until.Sub(now)
			break
		}
	}
	if stop == len(q.pending) {
		return stop, 0
	}
	// A file's create does not leave ahead of its changes queued past
	// the stop, even for a flush and past a hold's end: applied alone,
	// it shows the file to another client's lookup (no recall needed
	// then), and that client's open reads it without them (CI's
	// TestMountAsyncDirs read 0 bytes of a 64 KiB file closed on another
	// mount, when the chunk write took longer than maxCreateHold). The
	// stop ends within newWriteTime (a write's place) or maxCreateHold.
	if n := wholeCut(q.pending, stop); n > 0 {
		return n, 0
	}
	return 0, wait
}

// wholeCut returns the largest n ≤ cut such that no file created in
// ops[:n] has a change (deferredOp.changes) in ops[n:]: a batch cut there
// carries every create with all of its file's changes taken with it. 0
// when only an empty run would.
func wholeCut(ops []*deferredOp, cut int) int {
	if cut >= len(ops) {
		return cut
	}
	// last: the last change in the queue of each file created before
	// the cut (usually few: the sender runs this at every wake).
	var last map[ids.Ino]int
	for _, op := range ops[:cut] {
		if op.creates != 0 {
			if last == nil {
				last = map[ids.Ino]int{}
			}
			last[op.creates] = -1
		}
	}
	if last == nil {
		return cut
	}
	for i, op := range ops {
		if _, ok := last[op.changes]; ok {
			last[op.changes] = i
		}
	}
	// A cut before index n is whole when every create before it has its
	// last change before it too: reach is the furthest such change.
	best, reach := 0, -1
	for n := 1; n <= cut; n++ {
		if op := ops[n-1]; op.creates != 0 && last[op.creates] > reach {
			reach = last[op.creates]
		}
		if reach < n {
			best = n
		}
	}
	return best
}

// flushWaiter is a flush waiting until doneTo reaches ticket.
type flushWaiter struct {
	ticket uint64
	done   chan struct{}
}

// reservation is a range of inode numbers reserved in one ministry.
type reservation struct {
	next, end uint64
	// lastTake: the ministry forgets a client's reservation with its
	// request results after an hour without commands (namespace
	// dedup.go), so one unused for reserveIdle is not trusted.
	lastTake time.Time
	// ahead is the next range, reserved through the queue once this one
	// ran low (reserveAhead), taken over when this one is used up;
	// asking says that request is on its way. Set by the sender, which
	// must not wait for resvMu.
	ahead  atomic.Pointer[[2]uint64]
	asking atomic.Bool
}

// reserveIdle is how long a reservation is used without a take (well
// under the ministry's hour).
const reserveIdle = 30 * time.Minute

// MakeNodeDeferred is MakeNode answered at once: the new inode's number
// comes from a range reserved beforehand, its attributes are made here
// (as the ministry will make them) and the create is queued. The caller
// must hold a directory lease on parent and know that name is free there;
// the create is exclusive, so should another client have taken the name
// after all (a lost lease), done hears EEXIST.
func (c *Client) MakeNodeDeferred(ctx context.Context, parent ids.Ino, name string, spec NodeSpec, done DeferredDone) (*wire.Attr, error) {
	return c.makeNodeDeferred(ctx, parent, name, spec, done, nil)
}

// MakeDirDeferred is MakeNodeDeferred for a directory (spec.Type
// DIRECTORY) that comes with its write directory lease: the batch that
// sends the create asks for it (MutateRequest.lease_new_dirs), and the
// minister grants it before it proposes the batch, only if the directory
// does not exist yet, so nobody else can reach the directory before the
// lease exists; the create marks the directory as leased. The returned
// Lease is therefore Valid at once, the directory empty for its holder
// (Absent), and the caller may queue changes in it without waiting:
// mkdir costs no round trip (it cost a read index on the minister:
// 828 × 5 ms of a 16 s cp -a of /usr/include). Its grant costs no request
// of its own either (it was one, sent before the create, which waited
// for it: 0.07 ms of the minister's CPU per mkdir, twice the rest).
//
// Should the grant not come (a new minister's fence, a move, the batch
// failed), the lease is revoked as lost once the batch is answered:
// OnRevoke runs, Valid is false from then on, and what was queued under
// it goes in order after the create, as after any lost lease.
func (c *Client) MakeDirDeferred(ctx context.Context, parent ids.Ino, name string, spec NodeSpec, done DeferredDone, onRevoke func(*Lease, bool)) (*wire.Attr, *Lease, error) {
	if spec.Type != wire.FileType_DIRECTORY {
		return nil, nil, fmt.Errorf("%w: MakeDirDeferred of a %v", syscall.EINVAL, spec.Type)
	}
	spec.MarkDirLease = true
	l := &Lease{c: c, mode: LeaseWrite, onRevoke: onRevoke, dir: true, absent: true, done: make(chan struct{})}
	ttl := time.Duration(c.leases.lastTTL.Load())
	if ttl <= 0 {
		ttl = defaultTTL
	}
	// Counted as the grant will count it: from when it is asked for
	// (sooner than the batch leaves).
	l.mu.until = c.cfg.Clock.Now().Add(ttl * trustNum / trustDen)
	l.mu.pending = true
	a, err := c.makeNodeDeferred(ctx, parent, name, spec, done, l)
	if err != nil {
		return nil, nil, err
	}
	return a, l, nil
}

func (c *Client) makeNodeDeferred(ctx context.Context, parent ids.Ino, name string, spec NodeSpec, done DeferredDone, dirLease *Lease) (*wire.Attr, error) {
	p := inoNamePath(uint64(parent), name)
	spec.Exclusive = true
	op, err := c.createOp(ctx, parent, name, spec)
	if err != nil {
		return nil, err
	}
	group := c.owner(parent)
	q := &c.deferred
	q.resvMu.Lock()
	defer q.resvMu.Unlock()
	ino, err := c.reservedIno(ctx, group, parent)
	if err != nil {
		return nil, opErr("create", p, err)
	}
	op.Ino = uint64(ino)
	cmd := c.newCommand(func(cmd *wire.Command) { cmd.Op = &wire.Command_Create{Create: op} })
	cmd.Caller = c.callerFor(ctx) // sent later, under another context
	// What namespace.newInode makes of it, with the command's own time
	// (the ministry keeps a batch command's time when it is close to
	// its own).
	a := &wire.Attr{Ino: uint64(ino), Type: spec.Type, Mode: op.Mode, Uid: op.Cred.Uid, Gid: op.Cred.Gid,
		Nlink: 1, AtimeNs: cmd.NowNs, MtimeNs: cmd.NowNs, CtimeNs: cmd.NowNs, CrtimeNs: cmd.NowNs,
		Version: 1, Rdev: spec.Rdev}
	switch spec.Type {
	case wire.FileType_DIRECTORY:
		a.Nlink = 2
	case wire.FileType_SYMLINK:
		a.Size = uint64(len(spec.Target))
	}
	c.learnChild(ino, group, 0)
	dop := &deferredOp{group: group, route: parent, cmd: cmd, what: "create " + p, done: done, dirs: []ids.Ino{parent}}
	// Until it is applied the ministry does not know the new inode
	// either (DirQueued of a directory, InoQueued of any).
	dop.dirs = append(dop.dirs, ino)
	if spec.Type == wire.FileType_REGULAR {
		dop.creates = ino
	}
	if dirLease != nil {
		dirLease.ino = ino // before the op can be sent
		dop.newDir = dirLease
	}
	c.enqueue(dop)
	return a, nil
}

// creating says whether regular file ino was made by MakeNodeDeferred
// and its create is not answered yet. Until it is applied, no other
// client can have seen the file: it reaches it only through the
// directory, whose lease is recalled from this client first, and the
// recall sends this queue. So changes of the file itself may queue
// behind its create, in the same batch, instead of waiting for it and
// costing a commit each (cp -a: the data of a small file, then fchown,
// fchmod and utimens): SetattrDeferred, and a File's writes. Its bytes
// only while the create itself waits in the queue (deferFileCmd,
// startNew), so that they go in its batch.
func (c *Client) creating(ino ids.Ino) bool {
	creating, _ := c.fileQueue(ino)
	return creating
}

// fileQueue says whether ino's create is queued and unanswered, and
// whether changes of it queued behind the create are.
func (c *Client) fileQueue(ino ids.Ino) (creating, changing bool) {
	creating, changing, _ = c.queuedFor(ino)
	return creating, changing
}

// queuedFor says what of ino is queued and not answered yet: its create
// (a regular file's), changes queued behind it, and changes of its entries
// or own attributes (dirOps: deferredOp.dirs).
func (c *Client) queuedFor(ino ids.Ino) (creating, changing, dirOps bool) {
	q := &c.deferred
	if q.outstanding.Load() == 0 {
		return false, false, false
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	_, creating = q.creating[ino]
	return creating, q.changing[ino] > 0, q.dirOps[ino] > 0
}

// deferFileCmd queues cmd, a change of regular file ino, behind ino's
// queued create if that is not answered yet (creating); false: it was
// not queued, send it the usual way.
//
// data (a write's bytes) is queued only while the create itself is not
// taken by the sender yet, so that it goes in the create's batch: a
// create applied alone shows the file to others' lookups, and an open
// then would read it without these bytes (close-to-open). A change of
// attributes may follow the create in a later batch (others' stats may
// show the old ones for that moment, as docs/fuse.md says).
func (c *Client) deferFileCmd(ino ids.Ino, cmd *wire.Command, what string, data bool, done DeferredDone) bool {
	// Checked under the queue's lock, so that once the create is
	// answered and no change is queued, none can be queued any more
	// (QueuedFileChanges stays false).
	return c.enqueueIf(&deferredOp{group: c.owner(ino), route: ino, cmd: cmd, what: what, done: done, changes: ino},
		func(q *deferredQueue) bool {
			if data {
				return q.createPendingLocked(ino)
			}
			_, ok := q.creating[ino]
			return ok
		})
}

// createPendingLocked says whether ino's create is queued and not taken
// by the sender yet.
func (q *deferredQueue) createPendingLocked(ino ids.Ino) bool {
	t, ok := q.creating[ino]
	return ok && t > q.takenTo
}

// QueuedFileChanges says whether the create of regular file ino, or a
// change of it queued behind the create, is not answered yet: a read
// past the queue (PastDeferred) would not show them.
func (c *Client) QueuedFileChanges(ino ids.Ino) bool {
	creating, changing := c.fileQueue(ino)
	return creating || changing
}

// InoQueued says whether a change queued in this Client and not answered
// yet touches ino's own attributes: its create, a change queued behind
// it, a change of its entries or attributes (a directory), or its
// rename. Otherwise a read of ino's attributes past the queue
// (PastDeferred) shows what this Client changed, except a change of its
// link count by a removal of another of its names (a caller that cares
// checks nlink).
func (c *Client) InoQueued(ino ids.Ino) bool {
	creating, changing, dirOps := c.queuedFor(ino)
	return creating || changing || dirOps
}

// DirQueued says whether a change of directory dir's entries or own
// attributes, or dir's create, is queued in this Client (or on its way)
// and not answered yet.
func (c *Client) DirQueued(dir ids.Ino) bool {
	_, _, dirOps := c.queuedFor(dir)
	return dirOps
}

// CreateQueued says whether ino's create is queued in this Client and
// not answered by the ministry yet.
func (c *Client) CreateQueued(ino ids.Ino) bool { return c.creating(ino) }

// SetattrDeferred queues op, which must not change the size, behind the
// queued create of ino (see creating) and returns the time the ministry
// will stamp it with (ctime, and *_NOW fields). ok false: ino's create is
// not queued any more; nothing was queued, send op with Setattr.
func (c *Client) SetattrDeferred(ctx context.Context, ino ids.Ino, op *wire.SetattrOp, done DeferredDone) (nowNs int64, ok bool) {
	if op.GetValid()&uint32(wire.SetattrField_SETATTR_SIZE|wire.SetattrField_SETATTR_SIZE_GROW) != 0 || !c.creating(ino) {
		return 0, false
	}
	cmd := c.setattrCmd(ino, op)
	cmd.Caller = c.callerFor(ctx)
	if !c.deferFileCmd(ino, cmd, "setattr "+inoPath(uint64(ino)), false, done) {
		c.finish(cmd.GetReq().GetSeq())
		return 0, false
	}
	return cmd.NowNs, true
}

// DeferredDirSetattr queues op, a change of directory dir's own
// attributes (not its size), under the caller's write directory lease on
// dir: no other client changes the directory's attributes or entries
// while it holds it, so the caller can answer the change itself (cp -a,
// tar and rsync set every directory's owner, mode and times once they
// filled it, and each would otherwise wait for the queue and a commit).
// It returns the command's time (the ctime the ministry stores, as for
// SetattrDeferred).
func (c *Client) DeferredDirSetattr(ctx context.Context, dir ids.Ino, op *wire.SetattrOp, done DeferredDone) (nowNs int64, err error) {
	if op.GetValid()&uint32(wire.SetattrField_SETATTR_SIZE|wire.SetattrField_SETATTR_SIZE_GROW) != 0 {
		return 0, opErr("setattr", inoPath(uint64(dir)), fmt.Errorf("%w: a directory's size is not set", syscall.EINVAL))
	}
	cmd := c.setattrCmd(dir, op)
	cmd.Caller = c.callerFor(ctx)
	c.enqueue(&deferredOp{group: c.owner(dir), route: dir, cmd: cmd, what: "setattr " + inoPath(uint64(dir)), done: done, dirs: []ids.Ino{dir}})
	return cmd.NowNs, nil
}

// DeferredUnlink queues the removal of name (a non-directory, inode ino
// if the caller knows it: InoQueued says so until it is answered) from
// parent, under a directory lease on parent. It returns the command's
// time: parent's mtime and ctime once it is applied (the ministry keeps
// a queued command's time, as for MakeNodeDeferred's attributes).
func (c *Client) DeferredUnlink(ctx context.Context, parent ids.Ino, name string, ino ids.Ino, done DeferredDone) (nowNs int64, err error) {
	return c.deferredUnlink(ctx, parent, name, ino, false, done)
}

// DeferredRmdir queues the removal of the directory name (inode ino, as
// for DeferredUnlink) from parent,
// under directory leases on parent and on the directory, whose listing
// the caller knows to be empty (what it queued before empties it: the
// queue keeps their order). It returns the command's time, as
// DeferredUnlink.
func (c *Client) DeferredRmdir(ctx context.Context, parent ids.Ino, name string, ino ids.Ino, done DeferredDone) (nowNs int64, err error) {
	return c.deferredUnlink(ctx, parent, name, ino, true, done)
}

func (c *Client) deferredUnlink(ctx context.Context, parent ids.Ino, name string, ino ids.Ino, dir bool, done DeferredDone) (int64, error) {
	what := "remove"
	if dir {
		what = "rmdir"
	}
	p := inoNamePath(uint64(parent), name)
	if err := checkName(name); err != nil {
		return 0, opErr(what, p, err)
	}
	cmd := c.newCommand(func(cmd *wire.Command) {
		cmd.Op = &wire.Command_Unlink{Unlink: &wire.UnlinkOp{Parent: uint64(parent), Name: []byte(name), Dir: dir}}
	})
	cmd.Caller = c.callerFor(ctx)
	dirs := []ids.Ino{parent}
	if ino != 0 {
		dirs = append(dirs, ino)
	}
	c.enqueue(&deferredOp{group: c.owner(parent), route: parent, cmd: cmd, what: what + " " + p, done: done, dirs: dirs})
	return cmd.NowNs, nil
}

// DeferredRename queues a rename, under directory leases on both
// parents (which one ministry must own). moved are the inodes it moves
// (the source's, and the target's for an exchange), whose ctime (and a
// directory's "..") it changes: InoQueued says so until it is answered.
// It returns the command's time, as DeferredUnlink.
func (c *Client) DeferredRename(ctx context.Context, parent ids.Ino, name string, newParent ids.Ino, newName string, flags uint32, moved []ids.Ino, done DeferredDone) (nowNs int64, err error) {
	p := inoNamePath(uint64(parent), name)
	if err := checkRenameFlags(flags); err != nil {
		return 0, opErr("rename", p, err)
	}
	if err := checkName(name); err != nil {
		return 0, opErr("rename", p, err)
	}
	if err := checkName(newName); err != nil {
		return 0, opErr("rename", p, err)
	}
	g := c.owner(parent)
	if c.owner(newParent) != g {
		return 0, opErr("rename", p, fmt.Errorf("%w: the directories belong to different ministries", syscall.EXDEV))
	}
	cmd := c.newCommand(func(cmd *wire.Command) {
		cmd.Op = &wire.Command_Rename{Rename: &wire.RenameOp{Parent: uint64(parent), Name: []byte(name),
			NewParent: uint64(newParent), NewName: []byte(newName), Flags: flags}}
	})
	cmd.Caller = c.callerFor(ctx)
	c.enqueue(&deferredOp{group: g, route: parent, cmd: cmd, what: "rename " + p, done: done, dirs: append([]ids.Ino{parent, newParent}, moved...)})
	return cmd.NowNs, nil
}

// noFlushKey marks a context whose requests must not wait for the
// queue: a new file's background write, which the queue waits for.
type noFlushKey struct{}

func withoutFlush(ctx context.Context) context.Context {
	return context.WithValue(ctx, noFlushKey{}, true)
}

// FlushDeferred sends the deferred operations queued so far and returns
// once they are applied (or failed: their done functions say).
func (c *Client) FlushDeferred(ctx context.Context) {
	c.flushDeferred(ctx)
}

// reservedIno takes the next reserved inode number of group, reserving
// more when none is left. Called with resvMu held.
func (c *Client) reservedIno(ctx context.Context, group ids.GroupID, route ids.Ino) (ids.Ino, error) {
	q := &c.deferred
	if q.resv == nil {
		q.resv = map[ids.GroupID]*reservation{}
	}
	now := c.cfg.Clock.Now()
	r := q.resv[group]
	if r != nil && r.next >= r.end && now.Sub(r.lastTake) <= reserveIdle {
		if a := r.ahead.Swap(nil); a != nil {
			r.next, r.end = a[0], a[1]
		}
	}
	if r == nil || r.next >= r.end || now.Sub(r.lastTake) > reserveIdle {
		// The new reservation replaces the old one: every create numbered
		// from it must be applied first. mutateIn flushes the queue:
		// every create waits meanwhile (with 16 processes making
		// directories, a stall of ~100 ms every range; reserveAhead
		// keeps this path for the first range and idle ones).
		cmd := c.newCommand(func(cmd *wire.Command) {
			cmd.Op = &wire.Command_ReserveInodes{ReserveInodes: &wire.ReserveInodesOp{Count: reserveCount}}
		})
		q.plainReserves.Add(1)
		res, err := c.mutateIn(ctx, group, route, cmd)
		if err != nil {
			return 0, fmt.Errorf("reserve inode numbers: %w", err)
		}
		if res.GetStart() == 0 || res.GetStart() >= res.GetEnd() {
			return 0, fmt.Errorf("%w: reserve inode numbers: empty range [%d, %d)", syscall.EIO, res.GetStart(), res.GetEnd())
		}
		r = &reservation{next: res.GetStart(), end: res.GetEnd()}
		q.resv[group] = r
	}
	ino := ids.Ino(r.next)
	r.next++
	r.lastTake = now
	if r.end-r.next <= reserveCount/2 && r.ahead.Load() == nil && r.asking.CompareAndSwap(false, true) {
		c.reserveAhead(group, route, r)
	}
	return ino, nil
}

// reserveAhead asks group for r's successor through the queue
// (ReserveInodesOp.ahead): applied after every create queued before it,
// when only r's range can still be numbered from, so the ministry keeps
// r's and the new one, and nothing waits. Called with resvMu held.
func (c *Client) reserveAhead(group ids.GroupID, route ids.Ino, r *reservation) {
	cmd := c.newCommand(func(cmd *wire.Command) {
		cmd.Op = &wire.Command_ReserveInodes{ReserveInodes: &wire.ReserveInodesOp{Count: reserveCount, Ahead: true, KeepEnd: r.end}}
	})
	c.enqueue(&deferredOp{group: group, route: route, cmd: cmd, what: "reserve inode numbers ahead",
		done: func(res *wire.Result, err error) {
			if err == nil && res.GetStart() != 0 && res.GetStart() < res.GetEnd() {
				r.ahead.Store(&[2]uint64{res.GetStart(), res.GetEnd()})
			}
			r.asking.Store(false)
		}})
}

// enqueue queues op and makes sure the sender drains the queue.
func (c *Client) enqueue(op *deferredOp) {
	c.enqueueIf(op, nil)
}

// enqueueIf queues op if cond, called under the queue's lock, says so
// (nil: always), and says whether it did.
func (c *Client) enqueueIf(op *deferredOp, cond func(q *deferredQueue) bool) bool {
	return c.enqueueAllIf([]*deferredOp{op}, cond)
}

// enqueueAllIf queues ops, together and in order, if cond says so.
func (c *Client) enqueueAllIf(ops []*deferredOp, cond func(q *deferredQueue) bool) bool {
	q := &c.deferred
	now := c.cfg.Clock.Now()
	q.outstanding.Add(int64(len(ops)))
	q.mu.Lock()
	if cond != nil && !cond(q) {
		q.mu.Unlock()
		q.outstanding.Add(-int64(len(ops)))
		return false
	}
	for _, op := range ops {
		q.lastTicket++
		op.ticket = q.lastTicket
		q.pending = append(q.pending, op)
		if op.creates != 0 {
			if q.creating == nil {
				q.creating = map[ids.Ino]uint64{}
				q.createdAt = map[ids.Ino]time.Time{}
			}
			q.creating[op.creates] = op.ticket
			q.createdAt[op.creates] = now
		}
		for _, d := range op.dirs {
			if q.dirOps == nil {
				q.dirOps = map[ids.Ino]int{}
			}
			q.dirOps[d]++
		}
		if op.changes != 0 {
			if q.changing == nil {
				q.changing = map[ids.Ino]int{}
			}
			q.changing[op.changes]++
		}
	}
	start := !q.running
	q.running = true
	q.mu.Unlock()
	if start {
		go c.sendDeferred()
	}
	return true
}

// flushDeferred returns when everything queued before the call has been
// answered (and its done function ran), or ctx ends. Every other
// metadata request calls it first. It waits for those operations only,
// not for ones queued after it (a busy queue would hold it for ever).
func (c *Client) flushDeferred(ctx context.Context) {
	q := &c.deferred
	if q.outstanding.Load() == 0 || ctx.Value(noFlushKey{}) != nil {
		return
	}
	q.mu.Lock()
	if q.doneTo >= q.lastTicket {
		q.mu.Unlock()
		return
	}
	w := flushWaiter{ticket: q.lastTicket, done: make(chan struct{})}
	q.waiters = append(q.waiters, w)
	q.urgent++
	q.mu.Unlock()
	q.nudge()
	select {
	case <-w.done:
	case <-ctx.Done():
	}
	q.mu.Lock()
	q.urgent--
	q.mu.Unlock()
}

// holdForTestWait waits for holdForTest, if a test set it: before each
// batch, and before a batch refused for its new directories' leases goes
// again.
func (q *deferredQueue) holdForTestWait() {
	q.mu.Lock()
	hold := q.holdForTest
	q.mu.Unlock()
	if hold != nil {
		<-hold
	}
}

// sendDeferred is the sender: it sends what is queued, in batches of at
// most maxBatch commands of one ministry, in queue order, one batch at a
// time, until the queue is empty.
func (c *Client) sendDeferred() {
	q := &c.deferred
	ctx := context.Background()
	for {
		q.holdForTestWait()
		q.mu.Lock()
		if len(q.pending) == 0 {
			q.running = false
			q.mu.Unlock()
			return
		}
		n, wait := q.sendableLocked(c.cfg.Clock.Now())
		if n == 0 {
			if q.wake == nil {
				q.wake = make(chan struct{}, 1)
			}
			w := q.wake
			q.mu.Unlock()
			select {
			case <-w:
			case <-c.cfg.Clock.After(wait):
			}
			continue
		}
		ops := q.pending[:n:n]
		q.pending = q.pending[n:]
		q.takenTo = ops[n-1].ticket
		q.mu.Unlock()
		for len(ops) > 0 {
			// A run of one group's commands, in order.
			n, size := 1, proto.Size(ops[0].cmd)
			for n < len(ops) && n < maxBatch && ops[n].group == ops[0].group {
				if size += proto.Size(ops[n].cmd); size > maxBatchBytes {
					break
				}
				n++
			}
			// The ops of one filled slot share a ticket: one batch
			// takes them all (doneTo says every op up to it is done).
			for n < len(ops) && n > 1 && ops[n].ticket == ops[n-1].ticket {
				n--
			}
			n = keepCreatesWithChanges(ops, n)
			run := ops[:n]
			ops = ops[n:]
			send, stale := c.splitStale(run)
			var results []*wire.Result
			var leased []ids.Ino
			var err error
			if len(send) > 0 {
				results, leased, err = c.sendBatch(ctx, send)
			}
			// The done functions run before the operations count as
			// done, so a flush returning sees their failures recorded.
			// They must not wait for locks a flushing request may hold.
			for i, op := range send {
				var res *wire.Result
				oerr := err
				if err == nil {
					res = results[i]
					if e := res.GetErrno(); e != 0 {
						oerr = &errnoMsg{errno: syscall.Errno(e), msg: res.GetMessage()}
					}
				}
				if oerr != nil {
					c.log.Warn("deferred metadata operation failed", slog.String("op", op.what), slog.Any("err", oerr), slog.String("detail", ErrorDetail(oerr)))
				}
				if op.done != nil {
					op.done(res, oerr)
				}
			}
			c.failStale(stale)
			c.retireOps(run)
			for _, op := range run {
				if op.retired != nil {
					op.retired()
				}
			}
			c.dropNewFileLeases(leased) // the done functions took theirs
		}
	}
}

// keepCreatesWithChanges returns where a run of ops cut at n (by size)
// ends so that no file's create is sent in a batch before changes of the
// file taken with it (for sendableLocked's reason): the largest whole cut
// (wholeCut), or n when only an empty run would be (a create with more
// than a batch of operations between it and its changes).
func keepCreatesWithChanges(ops []*deferredOp, n int) int {
	if c := wholeCut(ops, n); c > 0 {
		return c
	}
	return n
}

// retireOps counts run, just answered (in queue order), as done: flushes
// waiting for them return.
func (c *Client) retireOps(run []*deferredOp) {
	q := &c.deferred
	q.outstanding.Add(-int64(len(run)))
	q.mu.Lock()
	q.doneTo = run[len(run)-1].ticket
	for _, op := range run {
		for _, d := range op.dirs {
			if q.dirOps[d]--; q.dirOps[d] <= 0 {
				delete(q.dirOps, d)
			}
		}
		if op.creates != 0 && q.creating[op.creates] == op.ticket {
			delete(q.creating, op.creates)
			delete(q.createdAt, op.creates)
			if q.changing[op.creates] == 0 {
				delete(q.newChunks, op.creates)
			}
		}
		if op.changes != 0 {
			if q.changing[op.changes]--; q.changing[op.changes] <= 0 {
				delete(q.changing, op.changes)
				if _, ok := q.creating[op.changes]; !ok {
					// No write of it is queued: its chunks are recorded.
					delete(q.newChunks, op.changes)
				}
			}
		}
	}
	kept := q.waiters[:0]
	for _, w := range q.waiters {
		if w.ticket <= q.doneTo {
			close(w.done)
		} else {
			kept = append(kept, w)
		}
	}
	q.waiters = kept
	q.mu.Unlock()
}

// splitStale parts run into the ops to send and those past their sendBy,
// which are not sent (failStale: their chunks may be gone).
func (c *Client) splitStale(run []*deferredOp) (send, stale []*deferredOp) {
	now := c.cfg.Clock.Now()
	for _, op := range run {
		if op.skip {
			if op.failed != nil {
				stale = append(stale, op) // answered with its failure
			}
			continue // an empty slot: nothing to send
		}
		if !op.sendBy.IsZero() && now.After(op.sendBy) {
			stale = append(stale, op)
		} else {
			send = append(send, op)
		}
	}
	return send, stale
}

// failStale answers ops that waited past their sendBy with EIO.
func (c *Client) failStale(stale []*deferredOp) {
	for _, op := range stale {
		err := op.failed
		if err == nil {
			err = fmt.Errorf("%w: %s: its record waited in the queue for more than %v (the ministry unreachable?), and the collector may since have removed the chunk written for it: the bytes are lost",
				syscall.EIO, op.what, newFileRecordWindow)
		}
		c.log.Warn("deferred metadata operation failed", slog.String("op", op.what), slog.Any("err", err))
		if op.done != nil {
			op.done(nil, err)
		}
		if op.cmd != nil {
			c.finish(op.cmd.GetReq().GetSeq())
		}
	}
}

// maxBatch is namespace.MaxBatch (the ministry refuses larger batches).
const maxBatch = 1024

// maxBatchBytes bounds a batch's commands in bytes, far below the 16 MiB
// a gRPC message may carry: 1,024 creates each followed by a small
// file's inline bytes (up to 64 KiB with --inline-max) would be 64 MiB.
const maxBatchBytes = 4 << 20

// sendBatchOnce is sendBatch's request: a lostLeasesError when buffered
// leases of run were not held (nothing was applied). The caller finishes
// the commands' seqs (an op sent again must not be finished before).
func (c *Client) sendBatchOnce(ctx context.Context, run []*deferredOp) ([]*wire.Result, []ids.Ino, error) {
	cmds := make([]*wire.Command, len(run))
	for i, op := range run {
		cmds[i] = op.cmd
	}
	for _, op := range run {
		if !op.sendBy.IsZero() {
			// Records of chunks written before them: give up while the
			// chunks are surely still there (see newFileRecordWindow).
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadline(ctx, op.sendBy.Add(newFileRecordWindow))
			defer cancel()
			break
		}
	}
	batch := &wire.Command{Version: 1, NowNs: c.cfg.Clock.Now().UnixNano(), Op: &wire.Command_Batch{Batch: &wire.BatchOp{Cmds: cmds}}}
	// The new files' leases come with the answer (newlease.go). The
	// keepalive loop runs from now on, and counts this request as one
	// that may bring a grant (a revoke of it arriving first waits).
	// So do the new directories' (newdirlease.go).
	leaseNew, leaseDirs := c.newFileLeasesFor(run), c.newDirLeasesFor(run)
	var epoch uint64
	asked := func() {}
	if len(leaseNew) > 0 || len(leaseDirs) > 0 {
		epoch, asked = c.leases.ensureLoop(c, run[0].group)
	}
	for _, op := range run {
		if l := op.newDir; l != nil && len(leaseDirs) > 0 {
			l.askedIn(run[0].group, epoch)
		}
	}
	defer func() { asked() }()
	sent := c.cfg.Clock.Now()
	res, full, g, err := c.mutateResp(ctx, run[0].group, run[0].route, batch, false, mutateExtra{leaseNew: leaseNew, leaseDirs: leaseDirs, buffered: bufferedLeasesOf(run),
		redirected: func() { c.giveUpNewDirLeases(run, nil) }})
	if lost := full.GetLostLeases(); len(lost) > 0 && err != nil {
		// Refused before anything was granted or applied: the new
		// directories' leases stay pending for the batch sent again.
		return nil, nil, &lostLeasesError{ids: lost, err: err}
	}
	if refused := full.GetRefusedNewDirs(); len(refused) > 0 && err != nil {
		// Likewise (newdirlease.go).
		return nil, nil, &refusedNewDirsError{inos: refused, err: err}
	}
	c.settleNewDirLeases(run, run[0].group, g, full, epoch, sent)
	var leased []ids.Ino
	if len(full.GetNewFileLeases()) > 0 {
		if g == run[0].group {
			leased = c.holdNewFileLeases(g, full, epoch, sent)
		} else {
			// Redirected: the epoch taken is another group's.
			var ids []uint64
			for _, gr := range full.GetNewFileLeases() {
				ids = append(ids, gr.GetId())
			}
			c.releaseInBackground(g, ids)
		}
	}
	if err != nil {
		c.dropNewFileLeases(leased)
		return nil, nil, err
	}
	if len(res.GetResults()) != len(run) {
		c.dropNewFileLeases(leased)
		return nil, nil, fmt.Errorf("%w: batch of %d commands answered with %d results", syscall.EIO, len(run), len(res.GetResults()))
	}
	out := res.GetResults()
	if g != run[0].group {
		// The batch followed a move to another ministry: a range it
		// reserved there is not run[0].group's to number from (found in
		// review). Failed here, the reservation's owner takes the plain
		// way when its range runs out.
		for i, op := range run {
			if op.cmd.GetReserveInodes() != nil {
				out[i] = &wire.Result{Errno: uint32(syscall.EXDEV),
					Message: fmt.Sprintf("inode numbers reserved ahead were answered by ministry %d, not %d", g, run[0].group)}
			}
		}
	}
	return out, leased, nil
}
