package client

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/wire"
)

// Data of a new file whose create is still queued or on its way
// (docs/fuse.md, "Changes of a new file queue behind its create"). Nobody
// but this client can have seen such a file (or, once its create is
// applied and not yet answered, seen it empty), so its chunk records need
// not be made before its bytes are written, one commit each, after the
// queue was sent: the bytes go to chunks from the handle pool
// (handles.go), and once every replica has them, the records (SetChunkOp)
// and the size (a growing setattr, which names the chunks written, so it
// fails should another client have recorded others meanwhile) fill the
// place the write took in the queue behind the create when it started,
// usually in the create's batch. A record is applied only
// after its chunk's bytes are durable, so no client ever reads a recorded
// chunk that lacks bytes written before it; a chunk whose record never
// comes (the mount died first, as its create did) is garbage the
// collector removes after its grace period.

// newFileRecordWindow bounds how long the records of chunks written this
// way may wait in the queue (deferredOp.sendBy), and then how long their
// batch may keep trying: a chunk written before its record is garbage to
// the collector until the record is applied, and is deleted once it has
// been so for the grace period (--gc-grace, 5 minutes by default), so a
// record sent later could name a chunk that is gone. Past the window the
// records fail (EIO at the file's or directory's fsync) instead.
const newFileRecordWindow = time.Minute

// writeQueued writes p at off this way if the file's create is queued
// or on its way. ok false: it recorded nothing, write the usual way.
func (f *File) writeQueued(ctx context.Context, p []byte, off int64) (ok bool, err error) {
	w, ok, err := f.startNew(ctx, int64(len(p)), f.queuedDone)
	if !ok || err != nil {
		return false, err
	}
	if err := f.finishNew(ctx, w, p, off, false); err != nil {
		// Nothing is recorded: the usual way writes the bytes again,
		// and says what is wrong if that fails too.
		return false, nil
	}
	return true, nil
}

// maxNewWrites bounds the new files' writes a client runs in the
// background at once (WriteNewAsync); past it they run in the caller.
const maxNewWrites = 32

// maxNewWriteWait bounds how long WriteNewAsync waits for one of the
// writes under way to end; past it the write runs in the caller.
const maxNewWriteWait = 2 * time.Second

// maxNewWrite is the largest write done this way: one data request
// (larger ones go the usual way, whose time the queue need not wait for).
const maxNewWrite = requestSize

// newWriteTime bounds a new file's write done this way (its attempts
// included): the queue waits for the write's records, so every other
// request of the client does (a directory lease's recall too).
const newWriteTime = 10 * time.Second

// WriteNewAsync starts writing p at off in the background if the file's
// create is still queued or on its way (see writeQueued), and returns a function that
// waits for the write and returns its error; nil: it did not start
// (write with WriteAt). The bytes' records keep their place in the queue
// (before anything queued after this call, such as the file's utimens),
// so a program that writes a file and closes it or sets its times goes
// on at once. A write that fails (after retries, within newWriteTime)
// is answered in its place in the queue: done hears it, as the File's
// next Sync does, before a flush of the queue returns. p must not change
// until the write is done.
func (f *File) WriteNewAsync(ctx context.Context, p []byte, off int64, done DeferredDone) (wait func() error) {
	ctx = f.asUser(ctx)
	if f.checkWrite(off, int64(len(p))) != nil || f.appendOnly || len(p) == 0 || off+int64(len(p)) <= f.c.inlineMax() {
		return nil
	}
	// What startNew refuses anyway, before waiting for a slot: a close
	// of any other file must not wait for new files' writes (found in
	// review). startNew checks again (the create may be answered
	// meanwhile).
	if len(p) > maxNewWrite || !f.c.creating(f.ino) {
		return nil
	}
	if data, inline := f.inlineBytes(); inline && len(data) > 0 {
		return nil
	}
	select {
	case f.c.newWrites <- struct{}{}:
	default:
		// All maxNewWrites under way: wait for one to end (about a
		// write's time divided by them) rather than write in the
		// caller, which waits for a whole write: cp -a of /usr/include
		// spent 7 s of 12.7 in 125 such writes of 57 ms.
		select {
		case f.c.newWrites <- struct{}{}:
		case <-f.c.cfg.Clock.After(maxNewWriteWait):
			return nil
		case <-ctx.Done():
			return nil
		}
	}
	both := func(res *wire.Result, err error) {
		f.queuedDone(res, err)
		if done != nil {
			done(res, err)
		}
	}
	w, ok, err := f.startNew(ctx, int64(len(p)), both)
	if !ok || err != nil {
		<-f.c.newWrites
		return nil
	}
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		defer func() { <-f.c.newWrites }()
		err = f.finishNew(context.WithoutCancel(ctx), w, p, off, true)
	}()
	return func() error {
		<-finished
		return opErr("write", f.path, err)
	}
}

// newWrite is a write of a new file's bytes whose records have their
// place in the queue (a slot) behind the file's create.
type newWrite struct {
	slot *deferredOp
	cs   int64
}

// startNew queues the place of the write's records behind the file's
// create, whose answers go to done, and holds the create (holdCreate:
// the records join its batch). ok false: the create is taken by the
// sender already, or answered: write the usual way.
func (f *File) startNew(ctx context.Context, size int64, done DeferredDone) (*newWrite, bool, error) {
	if size > maxNewWrite || !f.c.creating(f.ino) {
		// Every other request waits for this write (newWriteTime); and
		// most writes are of files whose create is long answered.
		return nil, false, nil
	}
	if data, inline := f.inlineBytes(); inline && len(data) > 0 {
		// Bytes queued inline move to a chunk first: the usual way.
		return nil, false, nil
	}
	if err := f.c.awaitReplicaGroups(ctx); err != nil {
		return nil, false, err
	}
	cs, err := f.chunkSize(ctx, true)
	if err != nil {
		return nil, false, err
	}
	// Only while the create itself waits in the queue: its batch then
	// carries the records (sendableLocked keeps it back until they are
	// there). Records queued behind a create on its way would follow it
	// in a later batch, and meanwhile another client could find the
	// file and open it without these bytes (close-to-open broken): such
	// a write goes the usual way, after the create's answer.
	if _, held := f.c.holdCreate(f.ino); !held {
		return nil, false, nil
	}
	slot := &deferredOp{group: f.c.owner(f.ino), route: f.ino, what: "write " + f.path, done: done, changes: f.ino,
		sendBy: f.c.cfg.Clock.Now().Add(newFileRecordWindow), slot: true}
	// Checked again under the queue's lock: a flush lets the sender
	// take a held create.
	if !f.c.enqueueAllIf([]*deferredOp{slot}, func(q *deferredQueue) bool { return q.createPendingLocked(f.ino) }) {
		f.c.releaseCreate(f.ino)
		return nil, false, nil
	}
	f.unsettle() // answered in the queue
	return &newWrite{slot: slot, cs: cs}, true, nil
}

// finishNew writes the bytes into chunks of the file's own (from the
// pool, or those another File of it took) and fills the write's place
// with their records and the size. A failed attempt is tried again with
// new chunks (a chunk server that has not learnt the newest token key
// yet refuses the pooled tokens for a moment) until newWriteTime has
// passed; then the place is answered with the failure if answer (the
// background write: nobody else hears it), else left empty, and the
// file's size does not cover the bytes.
func (f *File) finishNew(ctx context.Context, w *newWrite, p []byte, off int64, answer bool) (err error) {
	var cmds []*wire.Command
	defer func() {
		var failed error
		if err != nil && answer {
			failed = err
		}
		f.c.fillSlot(w.slot, cmds, failed)
		f.c.releaseCreate(f.ino)
	}()
	// Nothing on this path may wait for the queue (a token renewal
	// would): the queue waits for this write's place to be filled.
	ctx, cancel := context.WithTimeout(withoutFlush(ctx), newWriteTime)
	defer cancel()
	spans := splitSpans(off, int64(len(p)), w.cs)
	refs := map[uint64]*wire.ChunkRef{}
	var n int64
	for attempt := 0; ; attempt++ {
		for _, sp := range spans {
			if refs[sp.index] != nil {
				continue
			}
			if refs[sp.index], err = f.c.newFileChunk(ctx, f.ino, sp.index, attempt > 0); err != nil {
				return err
			}
		}
		if n, err = f.c.storeSpans(ctx, spans, refs, func(sp span) []byte { return p[sp.pos-off : sp.pos-off+sp.n] }); err == nil {
			break
		}
		if !answer || ctx.Err() != nil {
			return err
		}
		f.c.log.Warn("a new file's write failed; trying again with new chunks", "file", f.path, "err", err)
		clear(refs)
		select {
		case <-ctx.Done():
			return err
		case <-f.c.cfg.Clock.After(time.Duration(attempt+1) * 100 * time.Millisecond):
		}
	}
	if hook := f.c.deferred.afterNewFileStoreForTest; hook != nil {
		hook()
	}
	// Every chunk written into is recorded (again, for a chunk another
	// File of this file wrote first: SetChunk keeps the record there is),
	// then the size grows over the bytes and mtime moves.
	indexes := slices.Sorted(maps.Keys(refs))
	caller := f.c.callerFor(ctx)
	for _, i := range indexes {
		ref := refs[i]
		cmds = append(cmds, f.c.newCommand(func(cmd *wire.Command) {
			cmd.Op = &wire.Command_SetChunk{SetChunk: &wire.SetChunkOp{Ino: uint64(f.ino), Chunk: ref}}
			cmd.Caller = caller
		}))
	}
	grow := f.c.setattrCmd(f.ino, growOp(off+n, refs))
	grow.Caller = caller
	cmds = append(cmds, grow)
	f.mu.Lock()
	if f.mu.chunks == nil {
		f.mu.chunks = map[uint64]*wire.ChunkRef{}
	}
	for i, ref := range refs {
		f.mu.chunks[i] = ref
	}
	f.mu.inline, f.mu.inlineData = false, nil
	f.mu.Unlock()
	f.noteSize(off+n, false)
	return nil
}

// newFileChunk returns the chunk of index for a new file with a write
// in the queue (its slot counts as a queued change, which keeps the
// table): the one a File of it took already, else (or with renew, in
// place of the one seen: a failed write's) a new one from the pool.
func (c *Client) newFileChunk(ctx context.Context, ino ids.Ino, index uint64, renew bool) (*wire.ChunkRef, error) {
	q := &c.deferred
	q.mu.Lock()
	seen := q.newChunks[ino][index]
	q.mu.Unlock()
	if seen != nil && !renew {
		return seen, nil
	}
	ref, err := c.newChunk(ctx, ino, index)
	if err != nil {
		return nil, err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if had := q.newChunks[ino][index]; had != nil && had != seen {
		return had, nil // another File's, newer: the new handle is never written
	}
	if q.newChunks == nil {
		q.newChunks = map[ids.Ino]map[uint64]*wire.ChunkRef{}
	}
	if q.newChunks[ino] == nil {
		q.newChunks[ino] = map[uint64]*wire.ChunkRef{}
	}
	q.newChunks[ino][index] = ref
	return ref, nil
}
