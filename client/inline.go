package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"syscall"
	"time"

	"github.com/govfs/govfs/internal/wire"
)

// Small files live inline in their ministry (issue 4): a file whose bytes
// all lie within Config.InlineMax (16 KiB by default) is written with one
// ministry command (WriteInlineOp: bytes, size and mtime at once) and read
// with the chunk-table read, touching no chunk server. A write that would
// take it past the limit first moves its bytes to chunk 0 (leaveInline).

// DefaultInlineMax is Config.InlineMax when zero. 16 KiB, as Lustre's
// data-on-MDT does for small files: in a copy of /usr/include, 75 % of
// the files fit (46 % at 4 KiB), and each one inline is one batched
// ministry command instead of a new chunk on three chunk servers, each
// with its data, metadata and directory syncs. cp -a went 10.1-10.9 s
// -> 8.1-8.4 s, tar -x 9.7-10.0 -> 6.8-7.2 s (docs/benchmarks.md,
// session 17). Larger limits cost rm -rf (32 KiB: 1.9 -> 2.5 s) and
// grow every ministry's store; docs/decisions.md.
const DefaultInlineMax = 16 << 10

func (c *Client) inlineMax() int64 {
	switch m := c.cfg.InlineMax; {
	case m < 0:
		return 0 // disabled
	case m == 0:
		return DefaultInlineMax
	default:
		return m
	}
}

// inlineBytes returns the file's inline bytes if it is inline.
func (f *File) inlineBytes() ([]byte, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mu.inlineData, f.mu.inline
}

// readInline copies [off, off+n) of an inline file into p: its inline
// bytes, zeros beyond them up to the size.
func readInline(p []byte, off, n int64, data []byte) (int, error) {
	at := p[:n]
	clear(at)
	if off < int64(len(data)) {
		copy(at, data[off:])
	}
	if n < int64(len(p)) {
		return int(n), io.EOF
	}
	return int(n), nil
}

// writeInline writes p at off inline if the file is (or can become) an
// inline file: it has no chunks and the write and the size stay within
// the limit. ok says whether it did.
func (f *File) writeInline(ctx context.Context, p []byte, off int64) (bool, error) {
	limit := f.c.inlineMax()
	if limit == 0 || off+int64(len(p)) > limit || f.cachedSize() > limit {
		return false, nil
	}
	if f.writeInlineQueued(p, off, limit) || f.writeInlineBehind(ctx, p, off, limit) {
		return true, nil
	}
	f.mu.Lock()
	known := f.mu.chunks != nil
	f.mu.Unlock()
	if !known {
		if _, err := f.loadChunks(ctx); err != nil {
			return false, err
		}
	}
	f.mu.Lock()
	eligible := f.mu.inline || len(f.mu.chunks) == 0
	f.mu.Unlock()
	if !eligible {
		return false, nil
	}
	f.mu.Lock()
	f.mu.inlineWrites++
	if f.mu.inlineWrites > 1 {
		// Two at once: each lays its bytes over what it saw, so the
		// bytes this File keeps may not be the ministry's order of them
		// (SettledRead must not offer them).
		f.mu.unsettled = true
	}
	f.mu.Unlock()
	res, err := f.c.mutate(ctx, f.ino, f.c.newCommand(func(cmd *wire.Command) {
		cmd.Op = &wire.Command_WriteInline{WriteInline: &wire.WriteInlineOp{Ino: uint64(f.ino), Offset: uint64(off),
			Data: p, MaxInline: uint64(limit)}}
	}))
	defer func() {
		f.mu.Lock()
		f.mu.inlineWrites--
		f.mu.Unlock()
	}()
	if errors.Is(err, syscall.EFBIG) {
		// Another client grew it or moved it to chunks: read the table
		// again and go the chunk way.
		if _, err := f.loadChunks(ctx); err != nil {
			return false, err
		}
		return false, nil
	}
	if err != nil {
		return false, err
	}
	f.mu.Lock()
	buf := slices.Clone(f.mu.inlineData)
	if end := off + int64(len(p)); int64(len(buf)) < end {
		buf = append(buf, make([]byte, end-int64(len(buf)))...)
	}
	copy(buf[off:], p)
	f.mu.inline, f.mu.inlineData = true, buf
	f.mu.Unlock()
	f.noteChanged(res.GetAttr())
	f.noteSize(int64(res.GetAttr().GetSize()), true)
	return true, nil
}

// writeInlineQueued queues an inline write behind the file's create if
// that is still queued (Client.creating): then the file is this File's
// alone, new, with no chunks and no bytes but those this File wrote
// inline, and the write joins the create's batch instead of waiting for
// it. A failure is reported by the next Sync (fsync, close). false:
// nothing queued.
func (f *File) writeInlineQueued(p []byte, off, limit int64) bool {
	f.mu.Lock()
	fresh := len(f.mu.chunks) == 0 && (f.mu.inline || len(f.mu.inlineData) == 0)
	f.mu.Unlock()
	if !fresh || !f.c.creating(f.ino) {
		return false
	}
	data := slices.Clone(p) // the caller may reuse p once this returns
	cmd := f.c.newCommand(func(cmd *wire.Command) {
		cmd.Op = &wire.Command_WriteInline{WriteInline: &wire.WriteInlineOp{Ino: uint64(f.ino), Offset: uint64(off),
			Data: data, MaxInline: uint64(limit)}}
	})
	if !f.c.deferFileCmd(f.ino, cmd, "write "+f.path, true, f.queuedDone) {
		f.c.finish(cmd.GetReq().GetSeq())
		return false
	}
	f.unsettle() // answered in the queue
	f.mu.Lock()
	if f.mu.chunks == nil {
		f.mu.chunks = map[uint64]*wire.ChunkRef{}
	}
	buf := slices.Clone(f.mu.inlineData)
	if end := off + int64(len(p)); int64(len(buf)) < end {
		buf = append(buf, make([]byte, end-int64(len(buf)))...)
	}
	copy(buf[off:], p)
	f.mu.inline, f.mu.inlineData = true, buf
	f.mu.size = max(f.mu.size, int64(len(buf)))
	f.mu.Unlock()
	return true
}

// queuedDone keeps the first failure of a change of this File queued
// behind the file's create, for the next Sync (fsync, close).
func (f *File) queuedDone(_ *wire.Result, err error) {
	if err != nil {
		f.mu.Lock()
		if f.mu.queuedErr == nil {
			f.mu.queuedErr = err
		}
		f.mu.Unlock()
	}
}

// knowInline reads the chunk table (and with it whether the file is
// inline) if this File has not yet: a write must not go to chunks of a
// file whose bytes are inline.
func (f *File) knowInline(ctx context.Context) error {
	f.mu.Lock()
	known := f.mu.chunks != nil
	f.mu.Unlock()
	if known {
		return nil
	}
	_, err := f.loadChunks(ctx)
	return err
}

// leaveInline moves an inline file's bytes to chunk 0 before a write that
// does not fit inline. It reads the inline bytes fresh, copies them into
// a new chunk that is not recorded yet, and has the ministry record that
// chunk as chunk 0 and drop the inline bytes in one step, if they are
// still the bytes copied (DropInlineOp). A copy that lost a race (the
// bytes changed, or another writer moved the file first) is never
// recorded, so it cannot replace anything written since; the collector
// removes it. The chunk is written before it is recorded, unlike others:
// the collector deletes an unreferenced copy only after a grace period,
// and this one is recorded (or abandoned) within moments.
func (f *File) leaveInline(ctx context.Context) error {
	for attempt := 0; ; attempt++ {
		// Only a File that saw the file inline looks again (a stale "in
		// chunks" is caught by the ministry: the size change that follows
		// the write names its chunks, and ESTALE sends the writer here).
		if _, inline := f.inlineBytes(); !inline {
			return nil
		}
		if _, err := f.loadChunks(ctx); err != nil {
			return err
		}
		data, inline := f.inlineBytes()
		if !inline {
			return nil
		}
		var ref *wire.ChunkRef
		if len(data) > 0 {
			cs, err := f.chunkSize(ctx, true)
			if err != nil {
				return err
			}
			if ref, err = f.c.newChunk(ctx, f.ino, 0); err != nil {
				return fmt.Errorf("move the inline bytes to a chunk: %w", err)
			}
			spans := splitSpans(0, int64(len(data)), cs)
			if _, err := f.c.storeSpans(ctx, spans, map[uint64]*wire.ChunkRef{0: ref}, func(sp span) []byte { return data[sp.pos : sp.pos+sp.n] }); err != nil {
				return fmt.Errorf("move the inline bytes to a chunk: %w", err)
			}
		}
		_, err := f.c.mutate(ctx, f.ino, f.c.newCommand(func(cmd *wire.Command) {
			cmd.Op = &wire.Command_DropInline{DropInline: &wire.DropInlineOp{Ino: uint64(f.ino), Expect: data, Chunk: ref}}
		}))
		switch {
		case err == nil:
			f.mu.Lock()
			f.mu.inline, f.mu.inlineData = false, nil
			if ref != nil && f.mu.chunks != nil {
				f.mu.chunks[0] = ref
			}
			f.mu.Unlock()
			return nil
		case errors.Is(err, syscall.ESTALE) && attempt < 50:
			// Another writer changed the inline bytes or moved the file:
			// look again (after a pause that grows, under contention).
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Duration(attempt+1) * time.Millisecond):
			}
		default:
			return fmt.Errorf("move the file out of its ministry: %w", err)
		}
	}
}
