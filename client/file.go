package client

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/govfs/govfs/internal/dataproto"
	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/wire"
)

// MaxFileSize is the largest size a file can have: 2^50 bytes (1 PiB).
// WriteAt, Append and Truncate past it fail with EFBIG; ReadAt past it
// reads end of file. It keeps every offset, chunk index and size far from
// int64 overflow whatever the chunk size.
const MaxFileSize int64 = 1 << 50

// File is an open regular file, returned by Open. Its methods are safe
// for concurrent use. Nothing is buffered in the client: a WriteAt or an
// Append has reached every member of the chunk's replica group and the
// ministry when it returns, so Close has nothing to flush.
//
// Consistency is close-to-open, as NFS: Open reads the attributes, and a
// File keeps the size and chunk table it has seen. ReadAt fetches the
// attributes again (linearizably) only when a read reaches past the size
// it knows, and the chunk table again when a chunk it needs is not in its
// copy, so a File follows a file that others grow, but may read data
// another client overwrote or cut off after it learnt the size. Stat
// always asks, linearizably.
type File struct {
	c    *Client
	path string
	ino  ids.Ino
	// Set by Open, read-only afterwards.
	readable, writable, appendOnly, dir bool
	// actAs, when set (ActAs), is the user this File's reads and writes
	// are made for when their context names none: its chunk tables and
	// the chunk access tokens in them are asked for as that user.
	actAs atomic.Pointer[wire.Cred]

	mu struct {
		sync.Mutex
		closed bool
		size   int64
		// chunks is the chunk table as last read or changed through this
		// File; nil until needed.
		chunks map[uint64]*wire.ChunkRef
		// appendIndex is the chunk the next Append starts at (the last
		// one an Append of this File used); hasAppend says it is set.
		appendIndex uint64
		hasAppend   bool
		// touched: a write inside the known size stored data without a
		// ministry command; Sync (and Close) then set mtime and grow the
		// size to touchedEnd (another client may have shrunk the file
		// meanwhile: the write must not vanish).
		touched     bool
		touchedEnd  int64
		touchedRefs map[uint64]*wire.ChunkRef
		// inline: the file's bytes live in its ministry (inlineData, as
		// of the last chunk-table read or this File's own inline write);
		// set by loadChunks.
		inline     bool
		inlineData []byte
		// primed: chunks (and inline) were read with the attributes at
		// open and not used by a read yet; the first read trusts them
		// (close-to-open) instead of reading an inline file's bytes again.
		primed bool
		// queuedErr: an inline write queued behind the file's create
		// failed (writeInlineQueued); Sync reports it once.
		queuedErr error
		// settled is the file's attributes as the ministry answered this
		// File's latest change (the highest version); unsettled: a
		// change of this File was not answered that way (it failed, or
		// it went into the client's queue), so settled may not be the
		// file's state after all of them (Settled).
		settled   *wire.Attr
		unsettled bool
		// inlineWrites counts writeInline calls under way.
		inlineWrites int
		// behindLease, when set (WriteBehind), returns the read lease
		// small inline writes may be queued under (writebehind.go);
		// noBehind: its upgrade was refused (or the file is not a small
		// inline one), this File writes through.
		behindLease func() *Lease
		noBehind    bool
		// behindQueued counts this File's writes queued behind and not
		// retired yet (Settled waits for their answers); onSettled runs
		// when it falls to 0 (WhenBehindSettled).
		behindQueued int
		onSettled    func()
	}
}

// noteChanged records the attributes the ministry answered a change of
// this File with.
func (f *File) noteChanged(a *wire.Attr) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if a == nil {
		f.mu.unsettled = true
		return
	}
	if f.mu.settled == nil || a.GetVersion() > f.mu.settled.GetVersion() {
		f.mu.settled = a
	}
}

// unsettle notes a change of this File whose outcome the ministry did not
// answer with attributes: Settled says false from now on.
func (f *File) unsettle() { f.noteChanged(nil) }

// Settled returns the file's attributes after every change this File
// made, as the ministry answered the last of them: ok false when it made
// none, when one failed or was queued rather than answered, or while an
// overwrite's mtime is still owed (Sync). They are the file's current
// attributes only if nobody else changed it since, which the caller
// knows (a read lease held throughout: the mount's open after its own
// writes then needs no request).
func (f *File) Settled() (a *wire.Attr, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mu.unsettled || f.mu.touched || f.mu.queuedErr != nil || f.mu.settled == nil || f.mu.behindQueued > 0 {
		return nil, false
	}
	return f.mu.settled, true
}

// SettledRead returns what an open's read would answer for a small
// inline file after this File's changes (Settled: its attributes, no
// chunks, its inline bytes), for FileOfRead; nil when Settled is not ok
// or the file's bytes are not inline.
func (f *File) SettledRead() *wire.ReadResponse {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mu.unsettled || f.mu.touched || f.mu.queuedErr != nil || f.mu.settled == nil || f.mu.behindQueued > 0 ||
		!f.mu.inline || f.mu.chunks == nil || len(f.mu.chunks) > 0 {
		return nil
	}
	return &wire.ReadResponse{Attr: f.mu.settled, Inline: true, InlineData: slices.Clone(f.mu.inlineData)}
}

// Open opens the regular file at path as open(2) would, without following
// a symlink in the last component (ELOOP, as with O_NOFOLLOW). flags are
// syscall.O_RDONLY, O_WRONLY or O_RDWR, with:
//
//   - O_CREAT: create the file with permission bits mode if it does not
//     exist; with O_EXCL, fail with EEXIST if it does.
//   - O_TRUNC: with write access, cut the file to 0 bytes.
//   - O_APPEND: WriteAt is refused with EINVAL (as os.File does); use
//     Append, which picks the offset.
//
// Other flags are ignored (every acknowledged write is durable on all
// replicas, so O_SYNC and O_DSYNC hold anyway). A directory can be opened
// for reading only (ReadAt then fails with EISDIR); with write access or
// O_TRUNC it gives EISDIR. Other non-regular files give EINVAL.
//
// A read-only File refuses WriteAt and Append with EBADF and Truncate
// with EINVAL (as ftruncate(2)); a write-only File refuses ReadAt with
// EBADF.
func (c *Client) Open(ctx context.Context, path string, flags int, mode uint32) (*File, error) {
	f, err := c.open(ctx, path, flags, mode)
	return f, opErr("open", path, err)
}

func (c *Client) open(ctx context.Context, path string, flags int, mode uint32) (*File, error) {
	f := &File{c: c, path: path}
	switch flags & syscall.O_ACCMODE {
	case syscall.O_RDONLY:
		f.readable = true
	case syscall.O_WRONLY:
		f.writable = true
	case syscall.O_RDWR:
		f.readable, f.writable = true, true
	default:
		return nil, fmt.Errorf("%w: access mode %#x", syscall.EINVAL, flags&syscall.O_ACCMODE)
	}
	f.appendOnly = flags&syscall.O_APPEND != 0
	comps, err := splitPath(path)
	if err != nil {
		return nil, err
	}
	var attr *wire.Attr
	if flags&syscall.O_CREAT != 0 {
		parent, name, err := c.parentOf(ctx, path, syscall.EISDIR)
		if err != nil {
			return nil, err
		}
		attr, err = c.create(ctx, parent, name, &wire.CreateOp{Type: wire.FileType_REGULAR, Mode: mode, Exclusive: flags&syscall.O_EXCL != 0})
		// EEXIST without O_EXCL: what is there is not a regular file; say
		// what it is below.
		if errors.Is(err, syscall.EEXIST) && flags&syscall.O_EXCL == 0 {
			attr, err = c.lookup(ctx, parent, name, nil)
		}
		if err != nil {
			return nil, err
		}
	} else if attr, err = c.resolve(ctx, comps, nil); err != nil {
		return nil, err
	}
	switch attr.GetType() {
	case wire.FileType_REGULAR:
	case wire.FileType_DIRECTORY:
		if f.writable || flags&syscall.O_TRUNC != 0 {
			return nil, syscall.EISDIR
		}
		f.dir = true
	case wire.FileType_SYMLINK:
		return nil, fmt.Errorf("%w: a symbolic link (links are not followed)", syscall.ELOOP)
	default:
		return nil, fmt.Errorf("%w: not a regular file", syscall.EINVAL)
	}
	f.ino = ids.Ino(attr.GetIno())
	f.mu.size = int64(attr.GetSize())
	if f.writable && flags&syscall.O_TRUNC != 0 {
		if _, err := c.setattr(ctx, f.ino, &wire.SetattrOp{Valid: uint32(wire.SetattrField_SETATTR_SIZE), Size: 0}); err != nil {
			return nil, err
		}
		f.mu.size = 0
		f.mu.chunks = map[uint64]*wire.ChunkRef{}
	}
	return f, nil
}

// Path returns the path the File was opened with.
func (f *File) Path() string { return f.path }

// ActAs makes cred the user of this File's I/O whose context names none
// (WithCaller): the mount of a certificate that is not trusted with
// every file (root squash, or chosen uids) opens files in its own name
// and then reads and writes them for the user who opened them, whose
// permissions the chunk access tokens then follow (docs/security.md).
func (f *File) ActAs(cred *wire.Cred) { f.actAs.Store(cred) }

func (f *File) asUser(ctx context.Context) context.Context {
	if cred := f.actAs.Load(); cred != nil {
		if c, ok := ctx.Value(callerKey{}).(*wire.Cred); !ok || c == nil {
			return WithCaller(ctx, cred)
		}
	}
	return ctx
}

// Ino returns the File's inode number.
func (f *File) Ino() ids.Ino { return f.ino }

// Close releases the File after Sync; later calls fail with EBADF. Data
// is never buffered: every acknowledged write is already durable on all
// replicas, and Sync only records the modification time.
func (f *File) Close() error {
	if err := f.usable(true); err != nil {
		return opErr("close", f.path, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), f.c.cfg.OpTimeout)
	defer cancel()
	err := f.Sync(ctx)
	f.mu.Lock()
	f.mu.closed = true
	f.mu.Unlock()
	return err
}

// Sync records the writes that landed inside the file's known size
// (those skip the ministry, so an overwrite costs one data round trip,
// not two): mtime, and a size that covers them should another client
// have shrunk the file meanwhile (as POSIX: a write past the end of a
// file truncated under it grows it again). Writes that grow the file do
// both at once. As with NFS and JuiceFS, other clients see such
// overwrites' mtime after Sync or Close (close-to-open).
func (f *File) Sync(ctx context.Context) error {
	ctx = f.asUser(ctx)
	if err := f.usable(true); err != nil {
		return opErr("sync", f.path, err)
	}
	f.mu.Lock()
	touched, end, refs := f.mu.touched, f.mu.touchedEnd, f.mu.touchedRefs
	f.mu.touched, f.mu.touchedEnd, f.mu.touchedRefs = false, 0, nil
	queuedErr := f.mu.queuedErr
	f.mu.queuedErr = nil
	f.mu.Unlock()
	if err := f.c.takeBehindFailure(f.ino); err != nil && queuedErr == nil {
		// Of a write this Client answered at an earlier close.
		queuedErr = err
	}
	if queuedErr != nil {
		f.unsettle()
		return opErr("sync", f.path, fmt.Errorf("%w: a queued write of the file (behind its create, or answered at a close) failed: %w", syscall.EIO, queuedErr))
	}
	if !touched {
		return nil
	}
	a, err := f.c.setattr(ctx, f.ino, growOp(end, refs))
	if errors.Is(err, syscall.ESTALE) {
		// The writes since the last Sync went into chunks another client
		// released (a truncate): they are lost, and the caller must hear it.
		f.forgetChunks()
		f.unsettle()
		return opErr("sync", f.path, fmt.Errorf("%w: writes since the last sync were lost: another client truncated the file under them", err))
	}
	if err != nil {
		f.mu.Lock()
		f.mu.touched, f.mu.touchedEnd = true, max(f.mu.touchedEnd, end)
		if f.mu.touchedRefs == nil {
			f.mu.touchedRefs = map[uint64]*wire.ChunkRef{}
		}
		maps.Copy(f.mu.touchedRefs, refs)
		f.mu.unsettled = true
		f.mu.Unlock()
		return opErr("sync", f.path, err)
	}
	f.noteChanged(a)
	f.noteSize(int64(a.GetSize()), true)
	return nil
}

// usable fails with EBADF when the File is closed or lacks the access
// wanted (ok false).
func (f *File) usable(ok bool) error {
	f.mu.Lock()
	closed := f.mu.closed
	f.mu.Unlock()
	if closed {
		return fmt.Errorf("%w: file is closed", syscall.EBADF)
	}
	if !ok {
		return fmt.Errorf("%w: not open for that", syscall.EBADF)
	}
	return nil
}

// Stat returns the file's attributes as the ministry has them now.
func (f *File) Stat(ctx context.Context) (*wire.Attr, error) {
	if err := f.usable(true); err != nil {
		return nil, opErr("stat", f.path, err)
	}
	a, err := f.freshAttr(ctx)
	if err != nil {
		return nil, opErr("stat", f.path, err)
	}
	f.noteSize(int64(a.GetSize()), true)
	return a, nil
}

// freshAttr reads the attributes linearizably: what the ministry has now,
// including other clients' changes. Later session reads of this Client
// see at least as much, so the chunk table read after a size is learnt
// covers that size.
func (f *File) freshAttr(ctx context.Context) (*wire.Attr, error) {
	return f.c.getAttr(ctx, f.ino, []ReadOption{Linearizable()})
}

func (f *File) cachedSize() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mu.size
}

// noteSize records a size learnt from the ministry: exact replaces the
// cached one (an answer about the whole file), otherwise it only grows.
func (f *File) noteSize(size int64, exact bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if exact || size > f.mu.size {
		f.mu.size = size
	}
}

// chunkSize returns the cluster's chunk size, refreshing the cluster map
// when it is not known yet. Without one (no data plane), needed says
// whether that is an error; otherwise any size will do, as nothing is
// stored.
func (f *File) chunkSize(ctx context.Context, needed bool) (int64, error) {
	if _, _, size := f.c.dataPlane(); size > 0 {
		return size, nil
	}
	if err := f.c.refreshDataPlane(ctx); err != nil {
		return 0, err
	}
	if _, _, size := f.c.dataPlane(); size > 0 {
		return size, nil
	}
	if needed {
		return 0, fmt.Errorf("%w: the cluster reports no chunk size", syscall.EIO)
	}
	return requestSize, nil
}

// loadChunks reads the chunk table from the ministry.
func (f *File) loadChunks(ctx context.Context) (map[uint64]*wire.ChunkRef, error) {
	resp, _, err := f.c.read(ctx, f.ino, &wire.ReadRequest{
		Op: &wire.ReadRequest_GetChunks{GetChunks: &wire.GetChunksReq{Ino: uint64(f.ino)}}}, nil)
	if err != nil {
		return nil, err
	}
	m := make(map[uint64]*wire.ChunkRef, len(resp.GetChunks()))
	for _, ch := range resp.GetChunks() {
		m[ch.GetIndex()] = ch
	}
	f.mu.Lock()
	f.mu.chunks = m
	f.mu.inline, f.mu.inlineData = resp.GetInline(), resp.GetInlineData()
	f.mu.Unlock()
	return m, nil
}

// refsFor returns the records of the chunks spans touch, reading the
// chunk table from the ministry if this File has none yet or one of them
// is missing from it (another client may have written there since).
// Chunks with no record are holes.
func (f *File) refsFor(ctx context.Context, spans []span) (map[uint64]*wire.ChunkRef, error) {
	pick := func(m map[uint64]*wire.ChunkRef) (map[uint64]*wire.ChunkRef, bool) {
		out := map[uint64]*wire.ChunkRef{}
		complete := m != nil
		for _, sp := range spans {
			if r := m[sp.index]; r != nil {
				out[sp.index] = r
			} else {
				complete = false
			}
		}
		return out, complete
	}
	f.mu.Lock()
	out, complete := pick(f.mu.chunks)
	f.mu.Unlock()
	if complete {
		return out, nil
	}
	m, err := f.loadChunks(ctx)
	if err != nil {
		return nil, err
	}
	out, _ = pick(m)
	return out, nil
}

// ref returns the record of chunk index, creating it if needed.
func (f *File) ref(ctx context.Context, index uint64) (*wire.ChunkRef, error) {
	f.mu.Lock()
	r := f.mu.chunks[index]
	f.mu.Unlock()
	if r != nil {
		return r, nil
	}
	// chunkFor returns the recorded chunk if another writer made it.
	r, err := f.c.chunkFor(ctx, f.ino, index)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	if f.mu.chunks == nil {
		f.mu.chunks = map[uint64]*wire.ChunkRef{}
	}
	f.mu.chunks[index] = r
	f.mu.Unlock()
	return r, nil
}

// ReadAt reads len(p) bytes at off, as os.File.ReadAt: fewer only at the
// end of the file, and then with io.EOF. Parts never written read as
// zeros. A large p is fetched a few requests at a time in parallel, from
// the members of each chunk's replica group in turn.
func (f *File) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	ctx = f.asUser(ctx)
	n, err := f.readAt(ctx, p, off)
	if err != nil && err != io.EOF {
		err = opErr("read", f.path, err)
	}
	return n, err
}

func (f *File) readAt(ctx context.Context, p []byte, off int64) (int, error) {
	if err := f.usable(f.readable); err != nil {
		return 0, err
	}
	switch {
	case f.dir:
		return 0, syscall.EISDIR
	case off < 0:
		return 0, fmt.Errorf("%w: negative offset %d", syscall.EINVAL, off)
	case len(p) == 0:
		return 0, nil
	case off >= MaxFileSize:
		return 0, io.EOF
	}
	want := min(int64(len(p)), MaxFileSize-off)
	size := f.cachedSize()
	if off+want > size {
		// Reading past the size this File knows: the file may have grown.
		a, err := f.freshAttr(ctx)
		if err != nil {
			return 0, err
		}
		size = int64(a.GetSize())
		f.noteSize(size, true)
	}
	if off >= size {
		return 0, io.EOF
	}
	n := min(want, size-off)
	// A small file inline in the ministry: its bytes come with the chunk
	// table, fresh on every read (they are at most a few KiB).
	f.mu.Lock()
	fresh := f.mu.chunks == nil || (f.mu.inline && !f.mu.primed)
	f.mu.primed = false
	f.mu.Unlock()
	if fresh {
		if _, err := f.loadChunks(ctx); err != nil {
			return 0, err
		}
	}
	if data, ok := f.inlineBytes(); ok {
		return readInline(p, off, n, data)
	}
	cs, err := f.chunkSize(ctx, false)
	if err != nil {
		return 0, err
	}
	spans := splitSpans(off, n, cs)
	refs, err := f.refsFor(ctx, spans)
	if err != nil {
		return 0, err
	}
	if data, ok := f.inlineBytes(); ok {
		// refsFor read the table again and the file had become inline.
		return readInline(p, off, n, data)
	}
	var done int64
	err = f.c.fetchSpans(ctx, spans, refs, func(sp span, data []byte) error {
		at := p[sp.pos-off : sp.pos-off+sp.n]
		clear(at[copy(at, data):]) // a hole or the end of the chunk
		done += sp.n
		return nil
	})
	if err != nil {
		return int(done), err
	}
	if n < int64(len(p)) {
		return int(n), io.EOF
	}
	return int(n), nil
}

// checkWrite validates a write of n bytes at off.
func (f *File) checkWrite(off, n int64) error {
	if err := f.usable(f.writable); err != nil {
		return err
	}
	switch {
	case off < 0:
		return fmt.Errorf("%w: negative offset %d", syscall.EINVAL, off)
	case off > MaxFileSize || n > MaxFileSize-off:
		return fmt.Errorf("%w: %d bytes at %d would pass the maximum file size %d", syscall.EFBIG, n, off, MaxFileSize)
	}
	return nil
}

// WriteAt writes p at off, as os.File.WriteAt: it returns len(p) or an
// error. Chunks are created as needed, requests of up to 1 MiB go through
// each chunk's primary (in order within a chunk, a few chunks at a time
// in parallel), and when all are acknowledged, if off+len(p) passes the
// size this File knows, one ministry command grows the size
// (SETATTR_SIZE_GROW, so concurrent writers never shrink the file) and
// sets mtime; a write inside the known size leaves mtime to Sync/Close. A zero-length write returns 0 and changes
// nothing. On an error the bytes counted in n are stored and the size
// covers them.
func (f *File) WriteAt(ctx context.Context, p []byte, off int64) (int, error) {
	ctx = f.asUser(ctx)
	n, err := f.writeAt(ctx, p, off)
	if err != nil {
		f.unsettle() // some of it may have landed
	}
	return n, opErr("write", f.path, err)
}

func (f *File) writeAt(ctx context.Context, p []byte, off int64) (int, error) {
	if err := f.checkWrite(off, int64(len(p))); err != nil {
		return 0, err
	}
	if f.appendOnly {
		return 0, fmt.Errorf("%w: WriteAt on a file opened with O_APPEND (use Append)", syscall.EINVAL)
	}
	if len(p) == 0 {
		return 0, nil
	}
	if ok, err := f.writeInline(ctx, p, off); ok || err != nil {
		if err != nil {
			return 0, err
		}
		return len(p), nil
	}
	if ok, err := f.writeQueued(ctx, p, off); ok || err != nil {
		if err != nil {
			return 0, err
		}
		return len(p), nil
	}
	if err := f.knowInline(ctx); err != nil {
		return 0, err
	}
	if err := f.leaveInline(ctx); err != nil {
		return 0, err
	}
	done, refs, err := f.store(ctx, p, off)
	switch {
	case done > 0 && off+done <= f.cachedSize():
		// Inside the known size: no ministry command; Sync sets mtime
		// (and grows the size, should another client have shrunk it).
		f.mu.Lock()
		f.mu.touched = true
		f.mu.touchedEnd = max(f.mu.touchedEnd, off+done)
		if f.mu.touchedRefs == nil {
			f.mu.touchedRefs = map[uint64]*wire.ChunkRef{}
		}
		maps.Copy(f.mu.touchedRefs, refs)
		f.mu.Unlock()
	case done > 0:
		gerr := f.grow(ctx, off+done, refs)
		if errors.Is(gerr, syscall.ESTALE) && err == nil {
			// Another client released the chunks written into (a
			// truncate), or made the file inline: the bytes are not the
			// file's, and p is still here, so write them again into the
			// file as it is now.
			if _, err = f.loadChunks(ctx); err == nil {
				err = f.leaveInline(ctx)
			}
			if err == nil {
				done, refs, err = f.store(ctx, p, off)
			}
			if gerr = nil; done > 0 {
				gerr = f.grow(ctx, off+done, refs)
			}
		}
		if err == nil {
			err = gerr
		}
	}
	return int(done), err
}

// store writes p at off (creating chunk records as needed) without
// changing the size, and returns how many bytes from off are stored.
func (f *File) store(ctx context.Context, p []byte, off int64) (int64, map[uint64]*wire.ChunkRef, error) {
	if err := f.c.awaitReplicaGroups(ctx); err != nil {
		return 0, nil, err
	}
	cs, err := f.chunkSize(ctx, true)
	if err != nil {
		return 0, nil, err
	}
	spans := splitSpans(off, int64(len(p)), cs)
	refs := map[uint64]*wire.ChunkRef{}
	for _, sp := range spans {
		if refs[sp.index] != nil {
			continue
		}
		if refs[sp.index], err = f.ref(ctx, sp.index); err != nil {
			return 0, nil, fmt.Errorf("chunk %d: %w", sp.index, err)
		}
	}
	n, err := f.c.storeSpans(ctx, spans, refs, func(sp span) []byte { return p[sp.pos-off : sp.pos-off+sp.n] })
	return n, refs, err
}

// growOp makes the size at least size and sets mtime to now, provided
// the chunk records written into (refs) are still the file's (else
// ESTALE): what a write past the known end, or a Sync, tells the
// ministry.
func growOp(size int64, refs map[uint64]*wire.ChunkRef) *wire.SetattrOp {
	return &wire.SetattrOp{Size: uint64(size), ExpectChunks: expectOf(refs), ByHandle: true,
		Valid: uint32(wire.SetattrField_SETATTR_SIZE | wire.SetattrField_SETATTR_SIZE_GROW | wire.SetattrField_SETATTR_MTIME_NOW)}
}

// expectOf lists chunk records for SetattrOp.expect_chunks.
func expectOf(refs map[uint64]*wire.ChunkRef) []*wire.ChunkRef {
	out := make([]*wire.ChunkRef, 0, len(refs))
	for _, r := range refs {
		out = append(out, &wire.ChunkRef{Index: r.GetIndex(), Handle: r.GetHandle(), Group: r.GetGroup()})
	}
	return out
}

// forgetChunks drops the cached chunk table (another client released
// records): the next access reads it again.
func (f *File) forgetChunks() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mu.chunks = nil
	f.mu.hasAppend = false
}

// grow makes the size at least size and sets mtime, in one command,
// provided the chunk records written into (refs) are still the file's;
// else ESTALE and nothing changes (another client truncated the file).
func (f *File) grow(ctx context.Context, size int64, refs map[uint64]*wire.ChunkRef) error {
	a, err := f.c.setattr(ctx, f.ino, growOp(size, refs))
	if err != nil {
		if errors.Is(err, syscall.ESTALE) {
			f.forgetChunks()
		}
		return err
	}
	f.noteChanged(a)
	f.noteSize(int64(a.GetSize()), true)
	return nil
}

// MaxRecord returns the largest record Append takes: a quarter of the
// cluster's chunk size (so padding wastes at most a quarter of a chunk),
// and no more than one data frame carries.
func (c *Client) MaxRecord(ctx context.Context) (int64, error) {
	if err := c.awaitReplicaGroups(ctx); err != nil {
		return 0, err
	}
	_, _, cs := c.dataPlane()
	return min(cs/4, dataproto.DefaultMaxPayload), nil
}

// Append adds record to the end of the file as one piece (a record
// append, as in GFS) and returns the file offset it landed at. Appends
// from many clients at once get distinct offsets and never overlap; the
// chunk's primary picks the offset, after every byte the chunk holds.
// When the record does not fit in the chunk, the primary pads the chunk
// to its full size and the record goes to the next chunk, so the file
// has zeros between records there. A retry after a lost answer carries
// the same request id, and the primary answers it with the first offset
// instead of storing the record twice. The size then grows to cover the
// record (SETATTR_SIZE_GROW).
//
// Records are 1 byte to MaxRecord bytes (EINVAL otherwise). Appends
// start at the file's last recorded chunk (or the chunk holding the end
// of the file, if later): space a growing Truncate added at the end of
// that chunk may receive records.
func (f *File) Append(ctx context.Context, record []byte) (int64, error) {
	ctx = f.asUser(ctx)
	off, err := f.append(ctx, record)
	if err != nil {
		f.unsettle()
	}
	return off, opErr("append", f.path, err)
}

func (f *File) append(ctx context.Context, record []byte) (int64, error) {
	if err := f.usable(f.writable); err != nil {
		return 0, err
	}
	if len(record) == 0 {
		return 0, fmt.Errorf("%w: empty record", syscall.EINVAL)
	}
	maxRec, err := f.c.MaxRecord(ctx)
	if err != nil {
		return 0, err
	}
	if int64(len(record)) > maxRec {
		return 0, fmt.Errorf("%w: record of %d bytes (at most %d)", syscall.EINVAL, len(record), maxRec)
	}
	cs, err := f.chunkSize(ctx, true)
	if err != nil {
		return 0, err
	}
	// Records go to chunks: an inline file moves there first.
	if _, err := f.loadChunks(ctx); err != nil {
		return 0, err
	}
	if err := f.leaveInline(ctx); err != nil {
		return 0, err
	}
	index, err := f.appendStart(ctx, cs)
	if err != nil {
		return 0, err
	}
	id := newAppendID()
	for ; ; index++ {
		if err := f.checkWrite(int64(index)*cs, int64(len(record))); err != nil {
			return 0, err
		}
		ref, err := f.ref(ctx, index)
		if err != nil {
			return 0, fmt.Errorf("chunk %d: %w", index, err)
		}
		rf, err := f.c.mutateChunk(ctx, ref, dataproto.Frame{Type: dataproto.TypeAppend, Version: id, Payload: record})
		if err != nil {
			return 0, err
		}
		switch rf.Status {
		case dataproto.StatusChunkFull:
			continue
		case dataproto.StatusOK:
		default:
			return 0, fmt.Errorf("%w: chunk %d: append answered with status %d: %s", syscall.EIO, ref.GetHandle(), rf.Status, rf.Payload)
		}
		if rf.Offset < 0 || rf.Offset+int64(len(record)) > cs {
			return 0, fmt.Errorf("%w: chunk %d: append landed at %d, outside the chunk", syscall.EIO, ref.GetHandle(), rf.Offset)
		}
		f.mu.Lock()
		f.mu.appendIndex, f.mu.hasAppend = max(f.mu.appendIndex, index), true
		f.mu.Unlock()
		pos := int64(index)*cs + rf.Offset
		return pos, f.grow(ctx, pos+int64(len(record)), map[uint64]*wire.ChunkRef{index: ref})
	}
}

// appendStart returns the chunk an Append starts at: the one this File
// appended to last, or else the file's last recorded chunk or the chunk
// holding its end, whichever is later.
func (f *File) appendStart(ctx context.Context, cs int64) (uint64, error) {
	f.mu.Lock()
	index, ok := f.mu.appendIndex, f.mu.hasAppend
	f.mu.Unlock()
	if ok {
		return index, nil
	}
	a, err := f.freshAttr(ctx)
	if err != nil {
		return 0, err
	}
	f.noteSize(int64(a.GetSize()), true)
	refs, err := f.loadChunks(ctx)
	if err != nil {
		return 0, err
	}
	index = a.GetSize() / uint64(cs)
	for i := range refs {
		index = max(index, i)
	}
	return index, nil
}

// newAppendID returns a random non-zero append request id: the primary
// keeps recent ids per chunk, so ids of different clients must not
// collide.
func newAppendID() uint64 {
	var b [8]byte
	for {
		_, _ = rand.Read(b[:]) // never fails (crypto/rand)
		if id := binary.LittleEndian.Uint64(b[:]); id != 0 {
			return id
		}
	}
}

// Truncate sets the file's size, as ftruncate(2). Shrinking first cuts
// the chunk holding the new end on its replicas (so the cut bytes read as
// zeros if the file grows again), then sets the size with the chunk size,
// so the ministry releases the records of chunks wholly beyond the end.
// Growing only sets the size: the new bytes are a hole.
//
// NB: Truncate assumes no Append or WriteAt runs at the same time past
// the new end; one that does may leave bytes the shrink missed.
func (f *File) Truncate(ctx context.Context, size int64) error {
	ctx = f.asUser(ctx)
	err := f.truncate(ctx, size)
	if err != nil {
		f.unsettle() // the chunk cut may have landed
	}
	return opErr("truncate", f.path, err)
}

func (f *File) truncate(ctx context.Context, size int64) error {
	if err := f.usable(true); err != nil {
		return err
	}
	switch {
	case !f.writable:
		return fmt.Errorf("%w: not open for writing", syscall.EINVAL)
	case size < 0:
		return fmt.Errorf("%w: negative size %d", syscall.EINVAL, size)
	case size > MaxFileSize:
		return fmt.Errorf("%w: size %d is past the maximum file size %d", syscall.EFBIG, size, MaxFileSize)
	}
	a, err := f.freshAttr(ctx)
	if err != nil {
		return err
	}
	// ByHandle: the descriptor is open for writing (ftruncate).
	op := &wire.SetattrOp{Valid: uint32(wire.SetattrField_SETATTR_SIZE), Size: uint64(size), ByHandle: f.writable}
	var cs int64
	if size < int64(a.GetSize()) && size > 0 {
		refs, err := f.loadChunks(ctx)
		if err != nil {
			return err
		}
		if cs, err = f.chunkSize(ctx, len(refs) > 0); err != nil {
			return err
		}
		if ref := refs[uint64(size/cs)]; ref != nil && size%cs != 0 {
			rf, err := f.c.mutateChunk(ctx, ref, dataproto.Frame{Type: dataproto.TypeTruncate, Offset: size % cs})
			if err != nil {
				return fmt.Errorf("cut chunk %d: %w", ref.GetIndex(), err)
			}
			// NotFound: the chunk was recorded but never written.
			if rf.Status != dataproto.StatusOK && rf.Status != dataproto.StatusNotFound {
				return fmt.Errorf("%w: cut chunk %d: status %d: %s", syscall.EIO, ref.GetIndex(), rf.Status, rf.Payload)
			}
		}
		op.ChunkSize = cs
	}
	a, err = f.c.setattr(ctx, f.ino, op)
	if err != nil {
		return err
	}
	f.noteChanged(a)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mu.size = int64(a.GetSize())
	// The ministry cut the inline bytes (or dropped them at 0).
	if size == 0 {
		f.mu.inline, f.mu.inlineData = false, nil
	} else if f.mu.inline && int64(len(f.mu.inlineData)) > size {
		f.mu.inlineData = f.mu.inlineData[:size]
	}
	if cs > 0 || size == 0 {
		// Forget the released records; appends start again from the end.
		for i := range f.mu.chunks {
			if int64(i)*cs >= size {
				delete(f.mu.chunks, i)
			}
		}
		f.mu.hasAppend = false
	}
	f.cutTouchedLocked(size, cs)
	return nil
}

// cutTouchedLocked makes what Sync owes the ministry follow a size change
// ordered after this File's writes (its own Truncate, or one elsewhere in
// the process that the caller ordered after them: Reset): the size Sync
// grows to is cut to size, and the records of chunks the cut released
// (from chunk index size/cs up; all of them at size 0) are no longer
// expected. Without it, Sync would grow the file back over the cut
// (issue 10) or fail with ESTALE on a released chunk. cs 0 with size > 0
// means nothing was released.
func (f *File) cutTouchedLocked(size, cs int64) {
	if !f.mu.touched {
		return
	}
	f.mu.touchedEnd = min(f.mu.touchedEnd, size)
	for i := range f.mu.touchedRefs {
		if size == 0 || (cs > 0 && int64(i)*cs >= size) {
			delete(f.mu.touchedRefs, i)
		}
	}
}
