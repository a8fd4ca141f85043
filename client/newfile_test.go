package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
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

// holdSender keeps c's queue from being sent (what is queued stays
// pending) until release, which the test's end calls too.
func holdSender(t *testing.T, c *Client) (release func()) {
	hold := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(hold) }) }
	t.Cleanup(release)
	setHoldForTest(c, hold)
	return release
}

// setHoldForTest makes c's sender wait for hold before each batch. Under
// the queue's lock: a sender from an earlier queue may still be on its
// way out (found by the race detector in CI).
func setHoldForTest(c *Client, hold chan struct{}) {
	c.deferred.mu.Lock()
	c.deferred.holdForTest = hold
	c.deferred.mu.Unlock()
}

// newQueuedFile queues the create of name in dir on c (done hears it)
// and opens the new file for writing.
func newQueuedFile(t *testing.T, c *Client, dir ids.Ino, name string, done DeferredDone) (*wire.Attr, *File) {
	t.Helper()
	a, err := c.MakeNodeDeferred(t.Context(), dir, name, NodeSpec{Type: wire.FileType_REGULAR, Mode: 0o644}, done)
	if err != nil {
		t.Fatal(err)
	}
	f, err := c.FileOf(a, syscall.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	return a, f
}

// heldNewFile sets up a writer c (its sender held until release) and
// another client, and queues on c the create of a new file name (done
// hears it), open for writing.
func heldNewFile(t *testing.T, name string, done DeferredDone) (c, other *Client, release func(), a *wire.Attr, f *File) {
	t.Helper()
	c, other = dataClient(t), dataClient(t)
	dir := newFileSetup(t, c)
	release = holdSender(t, c)
	a, f = newQueuedFile(t, c, dir, name, done)
	return c, other, release, a, f
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
	release := holdSender(t, c)
	var log deferredLog
	a, f1 := newQueuedFile(t, c, dir, "f", log.done("f"))
	ino := ids.Ino(a.GetIno())
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
	release()
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

// TestNewFileCreateWaitsForItsBytes: a file's create is not sent while
// the bytes written behind it are on their way, even for a flush and
// past maxCreateHold: applied alone, it would show the file to another
// client's lookup, and that client's open would read it empty (CI's
// TestMountAsyncDirs, a 64 KiB file closed on another mount). Once the
// bytes are out, the create and their records go together, and nothing
// is lost.
func TestNewFileCreateWaitsForItsBytes(t *testing.T) {
	ctx := t.Context()
	// The sender is held until the write has started, so that the
	// create is still pending then (the case to test).
	c, other, release, a, f := heldNewFile(t, "g", nil)
	ino := ids.Ino(a.GetIno())
	flushed := make(chan struct{})
	var sentEarly bool
	c.deferred.afterNewFileStoreForTest = func() {
		release()
		go func() {
			defer close(flushed)
			c.FlushDeferred(ctx)
		}()
		for deadline := time.Now().Add(3 * maxCreateHold); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			if !c.creating(ino) {
				sentEarly = true
				return
			}
		}
	}
	want := randBytes(rand.New(rand.NewPCG(7, 8)), fileTestChunk+10)
	if n, err := f.WriteAt(ctx, want, 0); err != nil || n != len(want) {
		t.Fatalf("write: %d, %v", n, err)
	}
	c.deferred.afterNewFileStoreForTest = nil
	if sentEarly {
		t.Fatal("the create was answered while the bytes behind it were still on their way")
	}
	select {
	case <-flushed:
	case <-time.After(10 * time.Second):
		t.Fatal("the flush did not end 10 s after the bytes were out")
	}
	if c.creating(ino) {
		t.Fatal("the create is still queued after a flush")
	}
	if got := readAllOf(t, other, ino); !bytes.Equal(got, want) {
		t.Fatalf("another client reads %d bytes, equal %v; want the %d written", len(got), bytes.Equal(got, want), len(want))
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestNewFileDataAfterCreateTaken: once the sender took a file's create,
// its bytes are no longer queued behind it (they would follow it in a
// later batch, and another client could open the file empty between):
// they go the usual way, after the create's answer. So do they once the
// create has been queued for longer than newBytesWindow.
func TestNewFileDataAfterCreateTaken(t *testing.T) {
	ctx := t.Context()
	c, other, release, a, f := heldNewFile(t, "h", nil)
	ino := ids.Ino(a.GetIno())
	// As the sender does when it takes the create (its batch is then
	// on its way).
	c.deferred.mu.Lock()
	c.deferred.takenTo = c.deferred.creating[ino]
	pending := c.deferred.createPendingLocked(ino)
	c.deferred.mu.Unlock()
	if pending {
		t.Fatal("a taken create counts as pending")
	}
	if w := f.WriteNewAsync(ctx, make([]byte, 100<<10), 0, nil); w != nil {
		t.Fatal("a new file's bytes were queued behind a create the sender had taken")
	}
	if f.writeInlineQueued([]byte("x"), 0, 4096) {
		t.Fatal("a new file's inline bytes were queued behind a create the sender had taken")
	}
	c.deferred.mu.Lock()
	c.deferred.takenTo = 0
	queuedAt := c.deferred.createdAt[ino]
	// Queued longer ago than newBytesWindow: a program still writing
	// must not keep the create back (its bytes go the usual way).
	c.deferred.createdAt[ino] = queuedAt.Add(-2 * newBytesWindow)
	c.deferred.mu.Unlock()
	if w := f.WriteNewAsync(ctx, make([]byte, 100<<10), 0, nil); w != nil {
		t.Fatal("a new file's bytes were queued behind a create queued longer than newBytesWindow ago")
	}
	c.deferred.mu.Lock()
	c.deferred.createdAt[ino] = queuedAt
	c.deferred.mu.Unlock()
	release()
	want := []byte("written the usual way")
	if n, err := f.WriteAt(ctx, want, 0); err != nil || n != len(want) {
		t.Fatalf("write: %d, %v", n, err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	c.FlushDeferred(ctx)
	if got := readAllOf(t, other, ino); !bytes.Equal(got, want) {
		t.Fatalf("another client reads %q, want %q", got, want)
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
	release := holdSender(t, c)
	_, f := newQueuedFile(t, c, dir, "late", nil)
	wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if _, err := f.WriteAt(wctx, randBytes(rand.New(rand.NewPCG(9, 9)), 2*DefaultInlineMax), 0); err != nil {
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
	release()
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

// TestWriteNewAsync: a new file's bytes written in the background keep
// their place in the queue: times set after the write started (cp -a's
// utimens) are the ones the file keeps, and another client reads every
// byte once the queue is sent.
func TestWriteNewAsync(t *testing.T) {
	c, other := dataClient(t), dataClient(t)
	ctx := t.Context()
	dir := newFileSetup(t, c)
	want := randBytes(rand.New(rand.NewPCG(3, 4)), 2*fileTestChunk+77)
	// The sender is held until the write and the times are queued, so
	// that the create is still pending then (the case to test).
	release := holdSender(t, c)
	a, f := newQueuedFile(t, c, dir, "bg", nil)
	ino := ids.Ino(a.GetIno())
	var failed error
	wait := f.WriteNewAsync(ctx, want, 0, func(_ *wire.Result, err error) { failed = err })
	if wait == nil {
		t.Fatal("a new file's write did not start in the background")
	}
	mtime := time.Date(2001, 2, 3, 4, 5, 6, 7, time.UTC).UnixNano()
	op := &wire.SetattrOp{Valid: uint32(wire.SetattrField_SETATTR_MTIME), MtimeNs: mtime}
	if _, ok := c.SetattrDeferred(ctx, ino, op, nil); !ok {
		t.Fatal("times set while the create is queued were not queued")
	}
	release()
	if err := wait(); err != nil {
		t.Fatalf("background write: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	c.FlushDeferred(ctx)
	if failed != nil {
		t.Fatalf("the write's records: %v", failed)
	}
	got, err := other.GetAttr(ctx, ino, Linearizable())
	if err != nil {
		t.Fatal(err)
	}
	if got.GetSize() != uint64(len(want)) || got.GetMtimeNs() != mtime {
		t.Fatalf("size %d, mtime %v; want %d and the time set after the write (%v)", got.GetSize(), time.Unix(0, got.GetMtimeNs()), len(want), time.Unix(0, mtime))
	}
	if data := readAllOf(t, other, ino); !bytes.Equal(data, want) {
		t.Fatalf("another client reads %d bytes, equal %v", len(data), bytes.Equal(data, want))
	}
	// Small writes (inline) and files whose create was sent are not
	// written in the background.
	if w := f.WriteNewAsync(ctx, want[:10], 0, nil); w != nil {
		t.Fatal("a closed file's write started")
	}
}

// TestFilledSlotIsNotSplitAcrossBatches: the ops a filled slot becomes
// share its ticket, so one batch takes them all: a flush returns only
// when every one of them is answered, even where a batch fills up
// (maxBatch) in the middle of them.
func TestFilledSlotIsNotSplitAcrossBatches(t *testing.T) {
	c := dataClient(t)
	ctx := t.Context()
	dir := newFileSetup(t, c)
	release := holdSender(t, c)
	var last *wire.Attr
	for i := range maxBatch - 2 {
		a, err := c.MakeNodeDeferred(ctx, dir, fmt.Sprintf("c%d", i), NodeSpec{Type: wire.FileType_REGULAR, Mode: 0o600}, nil)
		if err != nil {
			t.Fatal(err)
		}
		last = a
	}
	ino := ids.Ino(last.GetIno())
	slot := &deferredOp{group: c.owner(ino), route: ino, what: "test slot", changes: ino, slot: true}
	if !c.enqueueAllIf([]*deferredOp{slot}, nil) {
		t.Fatal("slot not queued")
	}
	var cmds []*wire.Command
	for _, mode := range []uint32{0o601, 0o602, 0o603, 0o604} {
		cmds = append(cmds, c.setattrCmd(ino, &wire.SetattrOp{Valid: uint32(wire.SetattrField_SETATTR_MODE), Mode: mode}))
	}
	c.fillSlot(slot, cmds, nil)
	release()
	c.FlushDeferred(ctx)
	if n := c.deferred.outstanding.Load(); n != 0 {
		t.Fatalf("flush returned with %d ops outstanding", n)
	}
	a, err := c.GetAttr(ctx, ino, Linearizable())
	if err != nil {
		t.Fatal(err)
	}
	if a.GetMode()&0o7777 != 0o604 {
		t.Fatalf("mode %o after the flush, want the slot's last (604)", a.GetMode()&0o7777)
	}
}

// TestQueuedBatchBytesBounded: new files' creates and inline bytes
// queued together leave in batches of at most maxBatchBytes: 320 files
// of 64 KiB (20 MiB, past the 16 MiB a gRPC message may carry, in 640
// commands, under the count bound) all land whole.
func TestQueuedBatchBytesBounded(t *testing.T) {
	c, other := dataClientWith(t, func(cfg *Config) { cfg.InlineMax = 64 << 10 }), dataClient(t)
	ctx := t.Context()
	dir := newFileSetup(t, c)
	release := holdSender(t, c)
	want := randBytes(rand.New(rand.NewPCG(5, 6)), 64<<10)
	var files []*File
	var inos []ids.Ino
	for i := range 320 {
		a, f := newQueuedFile(t, c, dir, fmt.Sprintf("f%d", i), nil)
		if _, err := f.WriteAt(ctx, want, 0); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		files, inos = append(files, f), append(inos, ids.Ino(a.GetIno()))
	}
	release()
	c.FlushDeferred(ctx)
	for i, f := range files {
		if err := f.Close(); err != nil {
			t.Fatalf("close %d: %v", i, err)
		}
	}
	for i, ino := range inos {
		if got := readAllOf(t, other, ino); !bytes.Equal(got, want) {
			t.Fatalf("file %d: %d bytes read back, want the 65,536 written", i, len(got))
		}
	}
}

// TestCreateNotSentAheadOfItsBytes: the sender takes no create whose
// file has a change queued past where it stops, whatever stops it (found
// in review: X's create left alone while Y's chunk write, queued between
// it and X's bytes, held the rest back).
func TestCreateNotSentAheadOfItsBytes(t *testing.T) {
	const x, y, w = ids.Ino(10), ids.Ino(11), ids.Ino(12)
	create := func(ino ids.Ino) *deferredOp { return &deferredOp{creates: ino} }
	change := func(ino ids.Ino) *deferredOp { return &deferredOp{changes: ino} }
	slot := func(ino ids.Ino, filled bool) *deferredOp {
		return &deferredOp{changes: ino, slot: true, filled: filled}
	}
	now := time.Now()
	for _, tc := range []struct {
		name  string
		queue []*deferredOp
		holds map[ids.Ino]*createHold
		want  int
	}{
		{"another file's write stops the queue", []*deferredOp{create(x), create(y), slot(y, false), change(x)}, nil, 0},
		{"its own write", []*deferredOp{create(w), change(w), create(x), slot(x, false)}, nil, 2},
		{"another file's held create", []*deferredOp{create(x), create(y), change(x)},
			map[ids.Ino]*createHold{y: {n: 1, until: now.Add(time.Minute)}}, 0},
		{"a filled write goes with its create", []*deferredOp{create(x), slot(x, true), create(y), slot(y, false)}, nil, 2},
		{"nothing stops it", []*deferredOp{create(x), create(y), slot(y, true), change(x)}, nil, 4},
	} {
		q := &deferredQueue{pending: tc.queue, holds: tc.holds}
		if n, _ := q.sendableLocked(now); n != tc.want {
			t.Errorf("%s: the sender may take %d, want %d", tc.name, n, tc.want)
		}
	}
	// A batch cut by size keeps each create with its changes when it
	// can, and cuts where it must when it cannot.
	ops := []*deferredOp{create(w), change(w), create(x), change(y), change(x)}
	if n := keepCreatesWithChanges(ops, 4); n != 2 {
		t.Errorf("cut at 4: %d, want 2 (x's create with its change)", n)
	}
	ops = []*deferredOp{create(w), create(x), change(w), change(x)}
	if n := keepCreatesWithChanges(ops, 3); n != 3 {
		t.Errorf("no whole cut below 4: %d, want the size cut, 3", n)
	}
}
