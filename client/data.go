package client

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"syscall"

	"github.com/govfs/govfs/internal/dataproto"
	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/wire"
)

// requestSize is the size of one data request (issue 3: 1 MiB requests).
const requestSize = 1 << 20

// ErrNoReplicaGroups means the cluster has no replica group to store data
// in yet (no, or fewer than 3, live chunk servers).
var ErrNoReplicaGroups = errors.New("govfs: the cluster has no replica groups yet: start at least 3 chunk servers (govfs dev starts them)")

// refreshDataPlane reloads replica groups and chunk servers from the
// cluster (after a stale epoch or an unknown group).
func (c *Client) refreshDataPlane(ctx context.Context) error {
	r := c.retry
	r.budget = c.cfg.ConnectTimeout
	info, err := c.fetchClusterInfo(ctx, &r)
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

// WriteFile creates path (or truncates it) with the given mode and
// writes everything r yields to it, chunk by chunk: each chunk gets a
// handle from the president and a replica group, is recorded in the
// ministry, and is written through the group's primary, which replicates
// it to every member before acknowledging. The size is set last, so a
// reader never sees a size whose data is not stored. It returns the bytes
// written.
func (c *Client) WriteFile(ctx context.Context, path string, r io.Reader, mode uint32) (int64, error) {
	attr, err := c.Create(ctx, path, mode, false)
	if err != nil {
		return 0, err
	}
	if attr.GetType() != wire.FileType_REGULAR {
		return 0, opErr("write", path, syscall.EISDIR)
	}
	ino := ids.Ino(attr.GetIno())
	// Always truncate: an earlier, interrupted WriteFile may have recorded
	// chunks without setting the size, and those must not be reused.
	if _, err := c.Setattr(ctx, ino, &wire.SetattrOp{Valid: uint32(wire.SetattrField_SETATTR_SIZE), Size: 0}); err != nil {
		return 0, opErr("write", path, err)
	}
	if err := c.awaitReplicaGroups(ctx); err != nil {
		return 0, opErr("write", path, err)
	}
	_, _, chunkSize := c.dataPlane()
	buf := make([]byte, requestSize)
	var total int64
	for index := uint64(0); ; index++ {
		var ref *wire.ChunkRef
		for inChunk := int64(0); inChunk < chunkSize; {
			n, rerr := io.ReadFull(r, buf[:min(int64(len(buf)), chunkSize-inChunk)])
			if n > 0 {
				if ref == nil {
					if ref, err = c.chunkFor(ctx, ino, index); err != nil {
						return total, opErr("write", path, err)
					}
				}
				if err := c.writeChunk(ctx, ref, inChunk, buf[:n]); err != nil {
					return total, opErr("write", path, err)
				}
				inChunk += int64(n)
				total += int64(n)
			}
			if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
				return total, c.finishWrite(ctx, path, ino, total)
			}
			if rerr != nil {
				return total, opErr("write", path, fmt.Errorf("read the input: %w", rerr))
			}
		}
	}
}

func (c *Client) finishWrite(ctx context.Context, path string, ino ids.Ino, size int64) error {
	_, err := c.Setattr(ctx, ino, &wire.SetattrOp{Valid: uint32(wire.SetattrField_SETATTR_SIZE), Size: uint64(size)})
	if err != nil {
		return opErr("write", path, err)
	}
	return nil
}

// chunkFor returns the chunk record of (ino, index), creating it: a new
// handle from the president and a replica group chosen round-robin.
func (c *Client) chunkFor(ctx context.Context, ino ids.Ino, index uint64) (*wire.ChunkRef, error) {
	res, err := c.mutateIn(ctx, ids.PresidentGroup, ino, c.newCommand(func(cmd *wire.Command) {
		cmd.Op = &wire.Command_AllocChunkHandles{AllocChunkHandles: &wire.AllocChunkHandlesOp{Count: 1}}
	}))
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
	group := ids_[int(res.GetStart()%uint64(len(ids_)))]
	// The handle names its group (dataproto.MakeHandle), so chunk servers
	// know which of their chunks belong to which group.
	handle, err := dataproto.MakeHandle(group, res.GetStart())
	if err != nil {
		return nil, fmt.Errorf("allocate a chunk handle: %w", err)
	}
	set, err := c.mutate(ctx, ino, c.newCommand(func(cmd *wire.Command) {
		cmd.Op = &wire.Command_SetChunk{SetChunk: &wire.SetChunkOp{Ino: uint64(ino),
			Chunk: &wire.ChunkRef{Index: index, Handle: handle, Group: group}}}
	}))
	if err != nil {
		return nil, fmt.Errorf("record chunk %d: %w", index, err)
	}
	return set.GetChunk(), nil
}

// writeChunk writes data at off of the chunk through its group's primary.
func (c *Client) writeChunk(ctx context.Context, ref *wire.ChunkRef, off int64, data []byte) error {
	return c.retry.do(ctx, func(ctx context.Context) (bool, error) {
		groups, addrs, _ := c.dataPlane()
		g := groups[ref.GetGroup()]
		if g == nil {
			return true, c.staleDataPlane(ctx, fmt.Errorf("replica group %d unknown", ref.GetGroup()))
		}
		rf, err := c.data.Call(addrs[g.GetPrimary()], &dataproto.Frame{Type: dataproto.TypeWrite, Handle: ref.GetHandle(),
			Group: g.GetId(), Epoch: g.GetEpoch(), Offset: off, Payload: data})
		switch {
		case err != nil:
			return true, err
		case rf.Status == dataproto.StatusOK:
			return false, nil
		case rf.Status == dataproto.StatusStaleEpoch || rf.Status == dataproto.StatusNotPrimary:
			return true, c.staleDataPlane(ctx, fmt.Errorf("chunk %d: %s", ref.GetHandle(), rf.Payload))
		case rf.Status == dataproto.StatusNoSpace:
			return false, fmt.Errorf("chunk %d: %s: %w", ref.GetHandle(), rf.Payload, syscall.ENOSPC)
		case rf.Status == dataproto.StatusInvalid:
			return false, fmt.Errorf("chunk %d: %s: %w", ref.GetHandle(), rf.Payload, syscall.EINVAL)
		default:
			// A member failed: the write was not acknowledged; retrying
			// orders it again under a new version.
			return true, fmt.Errorf("chunk %d: status %d: %s", ref.GetHandle(), rf.Status, rf.Payload)
		}
	})
}

func (c *Client) staleDataPlane(ctx context.Context, cause error) error {
	if err := c.refreshDataPlane(ctx); err != nil {
		return fmt.Errorf("%w (and refreshing the cluster map: %v)", cause, err)
	}
	return cause
}

// ReadFile copies path's contents to w and returns the bytes copied.
// Requests run a few at a time in parallel, spread over the members of
// each chunk's replica group; a member that fails, is stale or returns a
// corrupt block is skipped for the next one. Parts of the file never written read as
// zeros.
func (c *Client) ReadFile(ctx context.Context, path string, w io.Writer) (int64, error) {
	attr, err := c.Stat(ctx, path)
	if err != nil {
		return 0, err
	}
	if attr.GetType() == wire.FileType_DIRECTORY {
		return 0, opErr("read", path, syscall.EISDIR)
	}
	resp, _, err := c.read(ctx, ids.Ino(attr.GetIno()), &wire.ReadRequest{
		Op: &wire.ReadRequest_GetChunks{GetChunks: &wire.GetChunksReq{Ino: attr.GetIno()}}}, nil)
	if err != nil {
		return 0, opErr("read", path, err)
	}
	chunks := map[uint64]*wire.ChunkRef{}
	for _, ch := range resp.GetChunks() {
		chunks[ch.GetIndex()] = ch
	}
	_, _, chunkSize := c.dataPlane()
	if chunkSize <= 0 {
		if err := c.refreshDataPlane(ctx); err != nil {
			return 0, opErr("read", path, err)
		}
		_, _, chunkSize = c.dataPlane()
	}
	size := int64(attr.GetSize())
	if chunkSize <= 0 {
		if len(chunks) > 0 {
			return 0, opErr("read", path, fmt.Errorf("%w: the cluster reports no chunk size", syscall.EIO))
		}
		chunkSize = requestSize // no data stored: the file is all zeros
	}
	// Requests of up to 1 MiB, fetched readWindow at a time in parallel
	// (spread over the members) and written out in order.
	type req struct {
		off, n int64
		ref    *wire.ChunkRef
		seq    int
	}
	var reqs []req
	for off := int64(0); off < size; {
		index := uint64(off / max(chunkSize, 1))
		inChunk := off - int64(index)*chunkSize
		n := min(int64(requestSize), size-off, chunkSize-inChunk)
		reqs = append(reqs, req{off: inChunk, n: n, ref: chunks[index], seq: len(reqs)})
		off += n
	}
	type result struct {
		data []byte
		err  error
	}
	results := make([]chan result, len(reqs))
	for i := range results {
		results[i] = make(chan result, 1)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The feeder runs at most readWindow requests ahead of the writer.
	window := make(chan struct{}, readWindow)
	todo := make(chan req)
	var wg sync.WaitGroup
	for range min(readWindow, len(reqs)) {
		wg.Go(func() {
			for r := range todo {
				var data []byte
				var err error
				if r.ref != nil {
					data, err = c.readChunk(ctx, r.ref, r.off, r.n, r.seq)
				}
				results[r.seq] <- result{data, err}
			}
		})
	}
	wg.Go(func() {
		defer close(todo)
		for _, r := range reqs {
			select {
			case window <- struct{}{}:
			case <-ctx.Done():
				return
			}
			select {
			case todo <- r:
			case <-ctx.Done():
				return
			}
		}
	})
	defer wg.Wait()
	var done int64
	for i, r := range reqs {
		var res result
		select {
		case res = <-results[i]:
		case <-ctx.Done():
			return done, opErr("read", path, ctx.Err())
		}
		<-window
		if res.err != nil {
			cancel()
			return done, opErr("read", path, res.err)
		}
		data := res.data
		if int64(len(data)) < r.n {
			data = append(data, make([]byte, r.n-int64(len(data)))...) // a hole
		}
		if _, err := w.Write(data); err != nil {
			cancel()
			return done, opErr("read", path, fmt.Errorf("write the output: %w", err))
		}
		done += r.n
	}
	return done, nil
}

// readWindow is how many read requests are in flight at once.
const readWindow = 4

// readChunk reads [off, off+n) of a chunk from one member, starting at
// member seq % len (spreading parallel requests) and moving on when a
// member fails, is stale or returns a corrupt block.
func (c *Client) readChunk(ctx context.Context, ref *wire.ChunkRef, off, n int64, seq int) ([]byte, error) {
	var out []byte
	err := c.retry.do(ctx, func(ctx context.Context) (bool, error) {
		groups, addrs, _ := c.dataPlane()
		g := groups[ref.GetGroup()]
		if g == nil {
			return true, c.staleDataPlane(ctx, fmt.Errorf("replica group %d unknown", ref.GetGroup()))
		}
		ms := g.GetMembers()
		members := make([]uint64, 0, len(ms))
		for i := range ms {
			members = append(members, ms[(seq+i)%len(ms)])
		}
		var errs []error
		notFound := 0
		for _, m := range members {
			rf, err := c.data.Call(addrs[m], &dataproto.Frame{Type: dataproto.TypeRead, Handle: ref.GetHandle(),
				Group: g.GetId(), Epoch: g.GetEpoch(), Offset: off, Payload: binary.BigEndian.AppendUint32(nil, uint32(n))})
			switch {
			case err != nil:
				errs = append(errs, err)
			case rf.Status == dataproto.StatusOK:
				out = rf.Payload
				return false, nil
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
		return true, fmt.Errorf("chunk %d: no member served it: %w", ref.GetHandle(), errors.Join(errs...))
	})
	return out, err
}
