package client

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"github.com/govfs/govfs/internal/dataproto"
	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/wire"
)

// newFileSetup makes a test directory on the data cluster, takes its
// directory lease on c and returns the directory's inode.
func newFileSetup(t *testing.T, c *Client) ids.Ino {
	t.Helper()
	ctx := t.Context()
	d, err := c.Mkdir(ctx, testDir(t, c)+"/d", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	dir := ids.Ino(d.GetIno())
	if _, err := c.AcquireLease(ctx, dir, LeaseWrite, 0, 0, LeaseOptions{Dir: true, Wait: 10 * time.Second,
		OnRevoke: func(*Lease, bool) { c.FlushDeferred(context.Background()) }}); err != nil {
		t.Fatal(err)
	}
	// The inode reservation first: it waits for the queue.
	if _, err := c.MakeNodeDeferred(ctx, dir, "warm", NodeSpec{Type: wire.FileType_REGULAR, Mode: 0o600}, nil); err != nil {
		t.Fatal(err)
	}
	c.FlushDeferred(ctx)
	return dir
}

// readAllOf reads ino through c (a client that did not write it).
func readAllOf(t *testing.T, c *Client, ino ids.Ino) []byte {
	t.Helper()
	f, a, err := c.OpenIno(t.Context(), ino, syscall.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := make([]byte, a.GetSize())
	if n, err := f.ReadAt(t.Context(), got, 0); (err != nil && !errors.Is(err, io.EOF)) || n != len(got) {
		t.Fatalf("read %d of %d bytes: %v", n, len(got), err)
	}
	return got
}

// TestNewFileBytesQueueBehindCreate: the bytes of a file whose create is
// queued go to chunks from the handle pool while the create waits, and
// their records and size queue behind it: until the queue leaves, other
// clients do not see the file at all; after, they read every byte (three
// chunks and a bit). Two Files of one new file writing the same chunk
// index share one chunk.
func TestNewFileBytesQueueBehindCreate(t *testing.T) {
	c, other := dataClient(t), dataClient(t)
	ctx := t.Context()
	dir := newFileSetup(t, c)
	hold := make(chan struct{})
	released := false
	defer func() {
		if !released {
			close(hold)
		}
	}()
	c.deferred.holdForTest = hold
	var log deferredLog
	a, err := c.MakeNodeDeferred(ctx, dir, "f", NodeSpec{Type: wire.FileType_REGULAR, Mode: 0o644}, log.done("f"))
	if err != nil {
		t.Fatal(err)
	}
	ino := ids.Ino(a.GetIno())
	f1, err := c.FileOf(a, syscall.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	f2, err := c.FileOf(a, syscall.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(5, 6))
	want := randBytes(r, 3*fileTestChunk+1000)
	// f1 writes all but the last 5,000 bytes; f2 those (into chunk 3,
	// which f1 made) and, over f1's, the first 100. None of it waits for
	// the held queue (a write that did would time out here).
	wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if n, err := f1.WriteAt(wctx, want[:len(want)-5000], 0); err != nil || n != len(want)-5000 {
		t.Fatalf("write of a new file: %d, %v", n, err)
	}
	if n, err := f2.WriteAt(wctx, want[len(want)-5000:], int64(len(want)-5000)); err != nil || n != 5000 {
		t.Fatalf("second File's write of a new file: %d, %v", n, err)
	}
	if n, err := f2.WriteAt(wctx, want[:100], 0); err != nil || n != 100 {
		t.Fatalf("second File's overwrite: %d, %v", n, err)
	}
	if !c.QueuedFileChanges(ino) {
		t.Fatal("the records of a new file's bytes are not queued behind its create")
	}
	if _, err := other.Lookup(ctx, dir, "f"); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("another client looks up the file before the queue left: %v, want ENOENT", err)
	}
	// This client reads its own bytes back (its read waits for the
	// queue, so release the sender first).
	close(hold)
	released = true
	got := make([]byte, len(want))
	if n, err := f1.ReadAt(ctx, got, 0); (err != nil && !errors.Is(err, io.EOF)) || n != len(want) || !bytes.Equal(got, want) {
		t.Fatalf("writer reads back %d bytes (%v), equal %v", n, err, bytes.Equal(got, want))
	}
	for _, f := range []*File{f1, f2} {
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	c.FlushDeferred(ctx)
	if n, errs := log.get(); n != 1 || len(errs) != 0 {
		t.Fatalf("the queued create: %d done, failures %v", n, errs)
	}
	if got := readAllOf(t, other, ino); !bytes.Equal(got, want) {
		t.Fatalf("another client reads %d bytes, equal %v; want the %d written", len(got), bytes.Equal(got, want), len(want))
	}
	refs, err := func() (map[uint64]*wire.ChunkRef, error) {
		f, _, err := other.OpenIno(ctx, ino, syscall.O_RDONLY)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		return f.loadChunks(ctx)
	}()
	if err != nil {
		t.Fatal(err)
	}
	if len(refs) != 4 {
		t.Fatalf("%d chunk records, want 4", len(refs))
	}
}

// TestNewFileBytesRecordedAfterTheCreate: when the create leaves while
// the bytes are on their way (a flush does not wait for them), the
// records are made after it, and nothing is lost.
func TestNewFileBytesRecordedAfterTheCreate(t *testing.T) {
	c, other := dataClient(t), dataClient(t)
	ctx := t.Context()
	dir := newFileSetup(t, c)
	a, err := c.MakeNodeDeferred(ctx, dir, "g", NodeSpec{Type: wire.FileType_REGULAR, Mode: 0o644}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ino := ids.Ino(a.GetIno())
	flushed := false
	c.deferred.afterNewFileStoreForTest = func() {
		c.FlushDeferred(ctx)
		flushed = !c.creating(ino)
	}
	f, err := c.FileOf(a, syscall.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	want := randBytes(rand.New(rand.NewPCG(7, 8)), fileTestChunk+10)
	if n, err := f.WriteAt(ctx, want, 0); err != nil || n != len(want) {
		t.Fatalf("write: %d, %v", n, err)
	}
	c.deferred.afterNewFileStoreForTest = nil
	if !flushed {
		t.Fatal("the create was still queued after a flush")
	}
	if c.QueuedFileChanges(ino) {
		t.Fatal("the records were queued behind a create that had left")
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if got := readAllOf(t, other, ino); !bytes.Equal(got, want) {
		t.Fatalf("another client reads %d bytes, equal %v; want the %d written", len(got), bytes.Equal(got, want), len(want))
	}
}

// TestHandlePool: one allocation fills the pool; handles come out in
// order, each with its own allocation token, and a pooled handle past
// its use-by time is not handed out.
func TestHandlePool(t *testing.T) {
	c := dataClient(t)
	ctx := t.Context()
	first, tok, err := c.takeHandle(ctx, ids.RootIno)
	if err != nil {
		t.Fatal(err)
	}
	c.handles.mu.Lock()
	pooled := len(c.handles.free)
	c.handles.mu.Unlock()
	if pooled != handlePoolSize-1 {
		t.Fatalf("%d handles pooled after one allocation, want %d", pooled, handlePoolSize-1)
	}
	second, tok2, err := c.takeHandle(ctx, ids.RootIno)
	if err != nil {
		t.Fatal(err)
	}
	if second != first+1 || len(tok) == 0 || len(tok2) == 0 || bytes.Equal(tok, tok2) {
		t.Fatalf("handles %d then %d (tokens %d and %d bytes, equal %v); want consecutive, each with its own token",
			first, second, len(tok), len(tok2), bytes.Equal(tok, tok2))
	}
	// A pooled handle's token allows writing its chunk.
	groups, _, _ := c.dataPlane()
	var g uint64
	for id := range groups {
		g = id
	}
	h, err := dataproto.MakeHandle(g, second)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.writeChunk(ctx, &wire.ChunkRef{Handle: h, Group: g, Token: tok2}, 0, []byte("pooled")); err != nil {
		t.Fatalf("write with a pooled handle's token: %v", err)
	}
	c.handles.mu.Lock()
	for i := range c.handles.free {
		c.handles.free[i].useBy = time.Now().Add(-time.Second)
	}
	c.handles.mu.Unlock()
	third, _, err := c.takeHandle(ctx, ids.RootIno)
	if err != nil {
		t.Fatal(err)
	}
	if third < first+handlePoolSize {
		t.Fatalf("handle %d handed out after the pool's use-by time (the allocation was %d..%d)", third, first, first+handlePoolSize-1)
	}
}

// TestNewFileRecordsPastTheirWindowAreNotSent: records of a new file's
// chunks that waited in the queue past newFileRecordWindow are not sent
// (the collector may have removed their chunks): the file's next sync
// says EIO, and the file stays without them.
func TestNewFileRecordsPastTheirWindowAreNotSent(t *testing.T) {
	c, other := dataClient(t), dataClient(t)
	ctx := t.Context()
	dir := newFileSetup(t, c)
	hold := make(chan struct{})
	released := false
	defer func() {
		if !released {
			close(hold)
		}
	}()
	c.deferred.holdForTest = hold
	a, err := c.MakeNodeDeferred(ctx, dir, "late", NodeSpec{Type: wire.FileType_REGULAR, Mode: 0o644}, nil)
	if err != nil {
		t.Fatal(err)
	}
	f, err := c.FileOf(a, syscall.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if _, err := f.WriteAt(wctx, randBytes(rand.New(rand.NewPCG(9, 9)), 10000), 0); err != nil {
		t.Fatal(err)
	}
	stale := 0
	c.deferred.mu.Lock()
	for _, op := range c.deferred.pending {
		if !op.sendBy.IsZero() {
			op.sendBy = time.Now().Add(-time.Second)
			stale++
		}
	}
	c.deferred.mu.Unlock()
	if stale != 2 {
		t.Fatalf("%d queued ops with a send-by time, want 2 (the chunk's record and the size)", stale)
	}
	close(hold)
	released = true
	c.FlushDeferred(ctx)
	if err := f.Sync(ctx); !errors.Is(err, syscall.EIO) {
		t.Fatalf("sync after the records were dropped: %v, want EIO", err)
	}
	got, err := other.Lookup(ctx, dir, "late")
	if err != nil {
		t.Fatalf("the create itself is sent: %v", err)
	}
	if got.GetSize() != 0 {
		t.Fatalf("size %d after the records were dropped, want 0", got.GetSize())
	}
}
