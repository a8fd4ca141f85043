package client

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"sync"
	"syscall"

	"github.com/govfs/govfs/internal/chunktoken"
	"github.com/govfs/govfs/internal/dataproto"
	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/wire"
)

// requestSize is the largest data request the client sends. An
// application's 1 MiB writes to a stream (WriteFile) are sent 4 MiB at a
// time: each request costs a round trip and two syncs on every replica,
// and 4 MiB requests wrote 1 GiB 15-25% faster than 1 MiB ones here.
const requestSize = 4 << 20

// ErrNoReplicaGroups means the cluster has no replica group to store data
// in yet (no, or fewer than 3, live chunk servers).
var ErrNoReplicaGroups = errors.New("govfs: the cluster has no replica groups yet: start at least 3 chunk servers (govfs dev starts them)")

// refreshDataPlane reloads replica groups and chunk servers from the
// cluster (after a stale epoch or an unknown group).
func (c *Client) refreshDataPlane(ctx context.Context) error {
	r := c.retry
	r.budget = c.cfg.ConnectTimeout
	info, err := c.fetchClusterInfo(ctx, &r, false)
	if err != nil {
		return err
	}
	c.applyClusterInfo(info)
	return nil
}

// awaitReplicaGroups returns once the cluster has a replica group,
// refreshing the cluster map for up to ConnectTimeout: a fresh cluster
// forms its first group moments after its chunk servers report in.
func (c *Client) awaitReplicaGroups(ctx context.Context) error {
	r := c.retry
	r.budget = c.cfg.ConnectTimeout
	return r.do(ctx, func(ctx context.Context) (bool, error) {
		if groups, _, size := c.dataPlane(); len(groups) > 0 && size > 0 {
			return false, nil
		}
		if err := c.refreshDataPlane(ctx); err != nil {
			return false, err
		}
		if groups, _, size := c.dataPlane(); len(groups) > 0 && size > 0 {
			return false, nil
		}
		return true, ErrNoReplicaGroups
	})
}

func (c *Client) dataPlane() (map[uint64]*wire.ReplicaGroup, map[uint64]string, int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.rgroups, c.mu.chunkAddrs, c.mu.chunkSize
}

// newChunk allocates a chunk (index, handle, replica group) without
// recording it: a handle the president allocated (handles.go) and a group
// chosen round-robin.
func (c *Client) newChunk(ctx context.Context, ino ids.Ino, index uint64) (*wire.ChunkRef, error) {
	number, token, err := c.takeHandle(ctx, ino)
	if err != nil {
		return nil, fmt.Errorf("allocate a chunk handle: %w", err)
	}
	groups, _, _ := c.dataPlane()
	var ids_ []uint64
	for id := range groups {
		ids_ = append(ids_, id)
	}
	if len(ids_) == 0 {
		return nil, ErrNoReplicaGroups
	}
	// Spread files' chunks over the groups (map order is random).
	group := ids_[int(number%uint64(len(ids_)))]
	// The handle names its group (dataproto.MakeHandle), so chunk servers
	// know which of their chunks belong to which group.
	handle, err := dataproto.MakeHandle(group, number)
	if err != nil {
		return nil, fmt.Errorf("allocate a chunk handle: %w", err)
	}
	return &wire.ChunkRef{Index: index, Handle: handle, Group: group, Ino: uint64(ino), Token: token}, nil
}

// chunkFor returns the chunk record of (ino, index), creating it (a new
// chunk, recorded before any byte of it is written).
func (c *Client) chunkFor(ctx context.Context, ino ids.Ino, index uint64) (*wire.ChunkRef, error) {
	ref, err := c.newChunk(ctx, ino, index)
	if err != nil {
		return nil, err
	}
	set, err := c.mutate(ctx, ino, c.newCommand(func(cmd *wire.Command) {
		cmd.Op = &wire.Command_SetChunk{SetChunk: &wire.SetChunkOp{Ino: uint64(ino), Chunk: ref}}
	}))
	if err != nil {
		return nil, fmt.Errorf("record chunk %d: %w", index, err)
	}
	return set.GetChunk(), nil
}

func (c *Client) staleDataPlane(ctx context.Context, cause error) error {
	if err := c.refreshDataPlane(ctx); err != nil {
		return fmt.Errorf("%w (and refreshing the cluster map: %v)", cause, err)
	}
	return cause
}

// readChunk reads [off, off+n) of a chunk from one member, the one with
// the least expected completion time first (readOrder; parallel requests
// spread as their bytes in flight add up), moving on when a member fails,
// is stale or returns a corrupt block (which that member then repairs).
func (c *Client) readChunk(ctx context.Context, ref *wire.ChunkRef, off, n int64) ([]byte, error) {
	var out []byte
	renewed := 0
	err := c.retry.do(ctx, func(ctx context.Context) (bool, error) {
		groups, addrs, _ := c.dataPlane()
		g := groups[ref.GetGroup()]
		if g == nil {
			return true, c.staleDataPlane(ctx, fmt.Errorf("replica group %d unknown", ref.GetGroup()))
		}
		members := c.readOrder(g, n)
		var errs []error
		var refused *dataproto.Frame
		notFound := 0
		for _, m := range members {
			done := c.load.begin(m, n, c.cfg.Clock.Now)
			rf, err := c.data.Call(addrs[m], &dataproto.Frame{Type: dataproto.TypeRead, Handle: ref.GetHandle(),
				Group: g.GetId(), Epoch: g.GetEpoch(), Offset: off, Payload: binary.BigEndian.AppendUint32(nil, uint32(n)),
				Token: c.tokenOf(ref, chunktoken.Read)})
			done(err == nil && (rf.Status == dataproto.StatusOK || rf.Status == dataproto.StatusNotFound))
			switch {
			case err != nil:
				errs = append(errs, err)
			case rf.Status == dataproto.StatusOK:
				out = rf.Payload
				return false, nil
			case rf.Status == dataproto.StatusBadToken || rf.Status == dataproto.StatusDenied:
				// Another member may know the token's key already (one
				// whose heartbeats lag learns keys late): try them first.
				refused = rf
				errs = append(errs, fmt.Errorf("member %d: status %d: %s", m, rf.Status, rf.Payload))
			case rf.Status == dataproto.StatusNotFound:
				// Not on this member: a hole if no member has it (a
				// lagging member must not turn data into zeros).
				notFound++
				errs = append(errs, fmt.Errorf("member %d: chunk not found", m))
			default:
				errs = append(errs, fmt.Errorf("member %d: status %d: %s", m, rf.Status, rf.Payload))
				if rf.Status == dataproto.StatusStaleEpoch {
					_ = c.refreshDataPlane(ctx)
				}
			}
		}
		if notFound == len(members) {
			out = nil // recorded but never written: zeros
			return false, nil
		}
		if refused != nil {
			return c.tokenRefused(ctx, ref, refused, &renewed)
		}
		return true, fmt.Errorf("chunk %d: no member served it: %w", ref.GetHandle(), errors.Join(errs...))
	})
	return out, err
}

// mutateChunk sends a mutation of a chunk (write, append, truncate) to its
// group's primary, retrying within the budget while the group is being
// learnt or changes (stale epoch, not the primary: the cluster map is
// refreshed) or a member fails (the mutation was not acknowledged, and a
// retry orders it again; an append retry carries the same request id, so
// the primary answers it with the first offset). It returns the reply for
// StatusOK, StatusChunkFull and StatusNotFound, which the caller judges;
// ENOSPC and EINVAL are final.
func (c *Client) mutateChunk(ctx context.Context, ref *wire.ChunkRef, req dataproto.Frame) (*dataproto.Frame, error) {
	var reply *dataproto.Frame
	renewed := 0
	err := c.retry.do(ctx, func(ctx context.Context) (bool, error) {
		groups, addrs, _ := c.dataPlane()
		g := groups[ref.GetGroup()]
		if g == nil {
			return true, c.staleDataPlane(ctx, fmt.Errorf("replica group %d unknown", ref.GetGroup()))
		}
		f := req
		f.Handle, f.Group, f.Epoch = ref.GetHandle(), g.GetId(), g.GetEpoch()
		f.Token = c.tokenOf(ref, chunktoken.Write)
		rf, err := c.data.Call(addrs[g.GetPrimary()], &f)
		switch {
		case err != nil:
			// The primary may be dead and its group changed.
			return true, c.staleDataPlane(ctx, err)
		case rf.Status == dataproto.StatusOK || rf.Status == dataproto.StatusChunkFull || rf.Status == dataproto.StatusNotFound:
			reply = rf
			return false, nil
		case rf.Status == dataproto.StatusStaleEpoch || rf.Status == dataproto.StatusNotPrimary:
			return true, c.staleDataPlane(ctx, fmt.Errorf("chunk %d: %s", ref.GetHandle(), rf.Payload))
		case rf.Status == dataproto.StatusBadToken || rf.Status == dataproto.StatusDenied:
			return c.tokenRefused(ctx, ref, rf, &renewed)
		case rf.Status == dataproto.StatusNoSpace:
			return false, fmt.Errorf("chunk %d: %s: %w", ref.GetHandle(), rf.Payload, syscall.ENOSPC)
		case rf.Status == dataproto.StatusInvalid:
			return false, fmt.Errorf("chunk %d: %s: %w", ref.GetHandle(), rf.Payload, syscall.EINVAL)
		default:
			return true, fmt.Errorf("chunk %d: %v status %d: %s", ref.GetHandle(), req.Type, rf.Status, rf.Payload)
		}
	})
	return reply, err
}

// writeChunk writes data at off of the chunk through its group's primary,
// which replicates it to every member before acknowledging.
func (c *Client) writeChunk(ctx context.Context, ref *wire.ChunkRef, off int64, data []byte) error {
	rf, err := c.mutateChunk(ctx, ref, dataproto.Frame{Type: dataproto.TypeWrite, Offset: off, Payload: data})
	if err == nil && rf.Status != dataproto.StatusOK {
		err = fmt.Errorf("%w: chunk %d: write answered with status %d: %s", syscall.EIO, ref.GetHandle(), rf.Status, rf.Payload)
	}
	return err
}

// span is one data request: n bytes at off of chunk index, which are the
// bytes at pos of the file.
type span struct {
	index       uint64
	off, n, pos int64
}

// splitSpans cuts [pos, pos+n) of a file into requests of at most
// requestSize bytes that do not cross chunk boundaries.
func splitSpans(pos, n, chunkSize int64) []span {
	var out []span
	for end := pos + n; pos < end; {
		index := pos / chunkSize
		off := pos - index*chunkSize
		k := min(requestSize, end-pos, chunkSize-off)
		out = append(out, span{index: uint64(index), off: off, n: k, pos: pos})
		pos += k
	}
	return out
}

// readWindow is how many read requests are in flight at once per call;
// writeWindow how many chunks are written at once (one request at a time
// per chunk, see storeSpans).
const (
	readWindow  = 8
	writeWindow = 4
)

// fetchSpans reads spans, readWindow at a time in parallel and spread
// over the members of each chunk's group, and hands each one's bytes to
// deliver in order. The bytes are short (or nil) where the chunk ends or
// was never written: the rest of the span reads as zeros, which deliver
// fills in. A span of a chunk with no record in refs is a hole.
func (c *Client) fetchSpans(ctx context.Context, spans []span, refs map[uint64]*wire.ChunkRef, deliver func(sp span, data []byte) error) error {
	read := func(sp span) ([]byte, error) {
		ref := refs[sp.index]
		if ref == nil {
			return nil, nil
		}
		return c.readChunk(ctx, ref, sp.off, sp.n)
	}
	if len(spans) == 1 { // a small read: no goroutines
		data, err := read(spans[0])
		if err != nil {
			return err
		}
		return deliver(spans[0], data)
	}
	type result struct {
		data []byte
		err  error
	}
	results := make([]chan result, len(spans))
	for i := range results {
		results[i] = make(chan result, 1)
	}
	ctx, cancel := context.WithCancel(ctx)
	// The feeder runs at most readWindow requests ahead of delivery.
	window := make(chan struct{}, readWindow)
	todo := make(chan int)
	var wg sync.WaitGroup
	// Cancel first, then wait: after an early return the feeder may be
	// blocked on the window until it sees the cancel.
	defer func() {
		cancel()
		wg.Wait()
	}()
	for range min(readWindow, len(spans)) {
		wg.Go(func() {
			for i := range todo {
				data, err := read(spans[i])
				results[i] <- result{data, err}
			}
		})
	}
	wg.Go(func() {
		defer close(todo)
		for i := range spans {
			select {
			case window <- struct{}{}:
			case <-ctx.Done():
				return
			}
			select {
			case todo <- i:
			case <-ctx.Done():
				return
			}
		}
	})
	for i, sp := range spans {
		var res result
		select {
		case res = <-results[i]:
		case <-ctx.Done():
			return ctx.Err()
		}
		<-window
		if res.err == nil {
			res.err = deliver(sp, res.data)
		}
		if res.err != nil {
			return res.err
		}
	}
	return nil
}

// storeSpans writes spans through each chunk's primary: bytes(sp) are a
// span's bytes, refs must hold the record of every chunk written. The
// spans of one chunk go one at a time, in order: a chunk server stores a
// write at the end of a chunk cheaply but journals one inside it (an
// overwrite), which is what parallel writes into one chunk would mostly
// be. Different chunks go in parallel, writeWindow at a time. It returns
// how many bytes from the start of spans were written without a gap: on
// an error, later spans may have been written too, but only that prefix
// counts.
func (c *Client) storeSpans(ctx context.Context, spans []span, refs map[uint64]*wire.ChunkRef, bytes func(sp span) []byte) (int64, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make([]error, len(spans))
	// run writes spans[lo:hi], all of one chunk, stopping at the first
	// failure (the rest are marked cancelled).
	run := func(lo, hi int) {
		for i := lo; i < hi; i++ {
			if errs[i] = ctx.Err(); errs[i] == nil {
				errs[i] = c.writeChunk(ctx, refs[spans[i].index], spans[i].off, bytes(spans[i]))
			}
			if errs[i] != nil {
				cancel()
				for j := i + 1; j < hi; j++ {
					errs[j] = context.Canceled
				}
				return
			}
		}
	}
	window := make(chan struct{}, writeWindow)
	var wg sync.WaitGroup
	for lo := 0; lo < len(spans); {
		hi := lo + 1
		for hi < len(spans) && spans[hi].index == spans[lo].index {
			hi++
		}
		if lo == 0 && hi == len(spans) {
			run(lo, hi) // one chunk: no goroutine
			break
		}
		window <- struct{}{}
		first := lo
		wg.Go(func() {
			defer func() { <-window }()
			run(first, hi)
		})
		lo = hi
	}
	wg.Wait()
	var done int64
	for i, sp := range spans {
		if errs[i] != nil {
			return done, firstCause(errs[i:])
		}
		done += sp.n
	}
	return done, nil
}

// firstCause returns the first error of errs that is not a cancellation
// caused by another one failing (or the first error when all are).
func firstCause(errs []error) error {
	var first error
	for _, err := range errs {
		if err == nil {
			continue
		}
		if first == nil {
			first = err
		}
		if !errors.Is(err, context.Canceled) {
			return err
		}
	}
	return first
}

// WriteFile creates path (or truncates it) with the given mode and
// writes everything r yields to it, in 1 MiB requests (see storeSpans):
// each chunk gets a handle from the president and a replica group, is
// recorded in the ministry, and is written through the group's primary,
// which replicates it to every member before acknowledging. The size is
// set last, so a reader never sees a size whose data is not stored. It
// returns the bytes written.
func (c *Client) WriteFile(ctx context.Context, path string, r io.Reader, mode uint32) (int64, error) {
	// O_TRUNC always truncates: an earlier, interrupted WriteFile may have
	// recorded chunks without setting the size, and those must not be
	// reused.
	f, err := c.open(ctx, path, syscall.O_WRONLY|syscall.O_CREAT|syscall.O_TRUNC, mode)
	if err != nil {
		return 0, opErr("write", path, err)
	}
	defer f.Close()
	buf := make([]byte, writeWindow*requestSize)
	var total int64
	written := map[uint64]*wire.ChunkRef{}
	for {
		n, rerr := io.ReadFull(r, buf)
		if total == 0 && n > 0 && (rerr == io.EOF || rerr == io.ErrUnexpectedEOF) {
			// The whole file in one read: a small one lives inline in its
			// ministry (one command with its size), no chunk server.
			if ok, err := f.writeInline(ctx, buf[:n], 0); ok || err != nil {
				if err != nil {
					return 0, opErr("write", path, err)
				}
				return int64(n), nil
			}
		}
		if n > 0 {
			done, refs, err := f.store(ctx, buf[:n], total)
			maps.Copy(written, refs)
			total += done
			if err != nil {
				return total, opErr("write", path, err)
			}
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			break
		}
		if rerr != nil {
			return total, opErr("write", path, fmt.Errorf("read the input: %w", rerr))
		}
	}
	f.unsettle() // its stores are answered below, not through f
	// Only if every chunk written is still the file's (ESTALE if another
	// client truncated it meanwhile: the data would read as zeros).
	// ByHandle: written through the file this call opened for writing.
	if _, err := c.setattr(ctx, f.ino, &wire.SetattrOp{Valid: uint32(wire.SetattrField_SETATTR_SIZE), Size: uint64(total),
		ExpectChunks: expectOf(written), ByHandle: true}); err != nil {
		return total, opErr("write", path, err)
	}
	return total, nil
}

// ReadFile copies path's contents to w and returns the bytes copied.
// Requests run a few at a time in parallel, spread over the members of
// each chunk's replica group; a member that fails, is stale or returns a
// corrupt block is skipped for the next one. Parts of the file never
// written read as zeros.
func (c *Client) ReadFile(ctx context.Context, path string, w io.Writer) (int64, error) {
	f, err := c.open(ctx, path, syscall.O_RDONLY, 0)
	if err != nil {
		return 0, opErr("read", path, err)
	}
	defer f.Close()
	if f.dir {
		return 0, opErr("read", path, syscall.EISDIR)
	}
	// The chunk table first: without chunks the file is all zeros and
	// needs no data plane.
	refs, err := f.loadChunks(ctx)
	if err != nil {
		return 0, opErr("read", path, err)
	}
	if data, ok := f.inlineBytes(); ok {
		// Inline in the ministry: the bytes came with the chunk table;
		// past them, zeros up to the size (a grown file may be sparse and
		// large: written a piece at a time).
		size := f.cachedSize()
		if int64(len(data)) > size {
			data = data[:size]
		}
		var done int64
		n, err := w.Write(data)
		done += int64(n)
		zeros := make([]byte, min(size-int64(len(data)), requestSize))
		for err == nil && done < size {
			n, err = w.Write(zeros[:min(int64(len(zeros)), size-done)])
			done += int64(n)
		}
		if err != nil {
			err = fmt.Errorf("write the output: %w", err)
		}
		return done, opErr("read", path, err)
	}
	chunkSize, err := f.chunkSize(ctx, len(refs) > 0)
	if err != nil {
		return 0, opErr("read", path, err)
	}
	var done int64
	err = c.fetchSpans(ctx, splitSpans(0, f.cachedSize(), chunkSize), refs, func(sp span, data []byte) error {
		if int64(len(data)) < sp.n {
			data = append(data, make([]byte, sp.n-int64(len(data)))...) // a hole
		}
		if _, err := w.Write(data); err != nil {
			return fmt.Errorf("write the output: %w", err)
		}
		done += sp.n
		return nil
	})
	return done, opErr("read", path, err)
}
