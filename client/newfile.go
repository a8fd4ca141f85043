package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"syscall"
	"time"

	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/wire"
)

// Data of a new file whose create is still queued (docs/fuse.md, "Changes
// of a new file queue behind its create"). Nobody but this client can
// have seen such a file, so its chunk records need not be made before its
// bytes are written, one commit each, after the queue was sent: the bytes
// go to chunks from the handle pool (handles.go), and once every replica
// has them, the records (SetChunkOp) and the size (a growing setattr)
// queue behind the create, usually in its batch. A record is applied only
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

// writeQueued writes p at off this way if the file's create is queued.
// ok false: it did nothing, write the usual way.
func (f *File) writeQueued(ctx context.Context, p []byte, off int64) (ok bool, err error) {
	// The create stays queued while the bytes go out (a hold bounded by
	// maxCreateHold), so their records can join it.
	if !f.c.holdCreate(f.ino) {
		return false, nil
	}
	sendBy := f.c.cfg.Clock.Now().Add(newFileRecordWindow)
	defer f.c.releaseCreate(f.ino)
	if data, inline := f.inlineBytes(); inline && len(data) > 0 {
		// Bytes queued inline move to a chunk first: the usual way.
		return false, nil
	}
	if err := f.c.awaitReplicaGroups(ctx); err != nil {
		return false, err
	}
	cs, err := f.chunkSize(ctx, true)
	if err != nil {
		return false, err
	}
	spans := splitSpans(off, int64(len(p)), cs)
	refs := map[uint64]*wire.ChunkRef{}
	for _, sp := range spans {
		if refs[sp.index] != nil {
			continue
		}
		ref, err := f.c.newFileChunk(ctx, f.ino, sp.index)
		if err != nil || ref == nil {
			return false, err // nil: the create was answered meanwhile
		}
		refs[sp.index] = ref
	}
	n, err := f.c.storeSpans(ctx, spans, refs, func(sp span) []byte { return p[sp.pos-off : sp.pos-off+sp.n] })
	if err != nil {
		if errors.Is(err, syscall.EACCES) {
			// A pooled token the chunk servers refused (its key not
			// learnt yet, say): nothing is recorded, so the usual way
			// writes the bytes again with records it renews tokens for.
			return false, nil
		}
		// Nothing recorded: the bytes written are garbage, and the
		// size does not cover them (n is 0).
		return false, err
	}
	if hook := f.c.deferred.afterNewFileStoreForTest; hook != nil {
		hook()
	}
	// Every chunk written into is recorded (again, for a chunk another
	// File of this file wrote first: SetChunk keeps the record there is),
	// then the size grows over the bytes and mtime moves.
	indexes := slices.Sorted(func(yield func(uint64) bool) {
		for i := range refs {
			if !yield(i) {
				return
			}
		}
	})
	caller := f.c.callerFor(ctx)
	var cmds []*wire.Command
	for _, i := range indexes {
		ref := refs[i]
		cmds = append(cmds, f.c.newCommand(func(cmd *wire.Command) {
			cmd.Op = &wire.Command_SetChunk{SetChunk: &wire.SetChunkOp{Ino: uint64(f.ino), Chunk: ref}}
			cmd.Caller = caller
		}))
	}
	grow := f.c.setattrCmd(f.ino, &wire.SetattrOp{Size: uint64(off + n), ExpectChunks: expectOf(refs),
		Valid: uint32(wire.SetattrField_SETATTR_SIZE | wire.SetattrField_SETATTR_SIZE_GROW | wire.SetattrField_SETATTR_MTIME_NOW), ByHandle: true})
	grow.Caller = caller
	cmds = append(cmds, grow)
	if !f.c.deferFileCmds(f.ino, cmds, "write "+f.path, f.queuedDone, sendBy) {
		// The create was answered while the bytes were on their way:
		// record them now, the usual way.
		if ok, err := f.recordWritten(ctx, cmds); !ok || err != nil {
			return ok, err
		}
	}
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
	return true, nil
}

// recordWritten sends cmds (the records of chunks just written, then the
// size) that could not queue behind the file's create. ok false: a chunk
// index already had another chunk, so the bytes must be written again
// into the file as it is (the caller's usual way).
func (f *File) recordWritten(ctx context.Context, cmds []*wire.Command) (bool, error) {
	for i, cmd := range cmds {
		res, err := f.c.mutate(ctx, f.ino, cmd)
		if err != nil {
			for _, rest := range cmds[i+1:] {
				f.c.finish(rest.GetReq().GetSeq())
			}
			if sc := cmd.GetSetChunk(); sc != nil {
				return false, fmt.Errorf("record chunk %d: %w", sc.GetChunk().GetIndex(), err)
			}
			if errors.Is(err, syscall.ESTALE) {
				f.forgetChunks()
			}
			return false, err
		}
		if sc := cmd.GetSetChunk(); sc != nil && res.GetChunk().GetHandle() != sc.GetChunk().GetHandle() {
			for _, rest := range cmds[i+1:] {
				f.c.finish(rest.GetReq().GetSeq())
			}
			f.forgetChunks()
			return false, nil
		}
		if a := cmd.GetSetattr(); a != nil {
			f.noteSize(int64(res.GetAttr().GetSize()), true)
		}
	}
	return true, nil
}

// newFileChunk returns the chunk of index for a file whose create is
// queued: the one a File of it took already, else a new one from the
// pool. nil: the create is not queued (any more).
func (c *Client) newFileChunk(ctx context.Context, ino ids.Ino, index uint64) (*wire.ChunkRef, error) {
	q := &c.deferred
	look := func() (ref *wire.ChunkRef, queued bool) {
		if _, ok := q.creating[ino]; !ok {
			return nil, false
		}
		return q.newChunks[ino][index], true
	}
	q.mu.Lock()
	ref, queued := look()
	q.mu.Unlock()
	if ref != nil || !queued {
		return ref, nil
	}
	ref, err := c.newChunk(ctx, ino, index)
	if err != nil {
		return nil, err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if had, queued := look(); had != nil || !queued {
		return had, nil // the new handle is never written
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
