package client

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/govfs/govfs/internal/dataproto"
	"github.com/govfs/govfs/internal/testcluster"
)

func TestSplitSpans(t *testing.T) {
	const cs = 3 * requestSize // requests of requestSize, some cut at chunk ends
	const rq = requestSize
	for _, tc := range []struct {
		pos, n int64
		want   []span
	}{
		{0, 0, nil},
		{5, 10, []span{{0, 5, 10, 5}}},
		{cs - 2, 4, []span{{0, cs - 2, 2, cs - 2}, {1, 0, 2, cs}}},
		{rq, 2*rq + 1, []span{{0, rq, rq, rq}, {0, 2 * rq, rq, 2 * rq}, {1, 0, 1, cs}}},
		{2*cs + 7, 1, []span{{2, 7, 1, 2*cs + 7}}},
	} {
		if got := splitSpans(tc.pos, tc.n, cs); !slices.Equal(got, tc.want) {
			t.Errorf("splitSpans(%d, %d) = %v, want %v", tc.pos, tc.n, got, tc.want)
		}
	}
}

// fileTestChunk is the chunk size of the cluster the File tests run on:
// small, so a few hundred KiB cross several chunk boundaries.
const fileTestChunk = 256 << 10

var fileCluster struct {
	once sync.Once
	dir  string
	c    *testcluster.ProcCluster
	err  error
}

// TestMain stops the process cluster the File tests share.
func TestMain(m *testing.M) {
	code := m.Run()
	if fileCluster.c != nil {
		fileCluster.c.Stop()
	}
	if fileCluster.dir != "" {
		os.RemoveAll(fileCluster.dir)
	}
	os.Exit(code)
}

// dataClient returns a Client of a real cluster (3 metadata processes, 3
// chunk servers with 256 KiB chunks), started once for the package.
func dataClient(t *testing.T) *Client {
	t.Helper()
	return dataClientWith(t, nil)
}

// dataClientWith is dataClient with its configuration changed by edit.
func dataClientWith(t *testing.T, edit func(*Config)) *Client {
	t.Helper()
	fc := &fileCluster
	fc.once.Do(func() {
		if fc.dir, fc.err = os.MkdirTemp("", "govfs-client-test-"); fc.err != nil {
			return
		}
		bin := filepath.Join(fc.dir, "govfs")
		if out, err := exec.Command("go", "build", "-o", bin, "github.com/govfs/govfs/cmd/govfs").CombinedOutput(); err != nil {
			fc.err = fmt.Errorf("build govfs: %v\n%s", err, out)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		fc.c, fc.err = testcluster.StartReady(ctx, testcluster.ProcConfig{Binary: bin, Dir: filepath.Join(fc.dir, "cluster"),
			Nodes: 3, Tick: 50 * time.Millisecond, Chunks: 3, ChunkArgs: []string{"--chunk-size", fmt.Sprint(fileTestChunk)}})
	})
	if fc.err != nil {
		t.Fatal(fc.err)
	}
	cfg := DefaultConfig()
	cfg.MetaAddrs = fc.c.Addrs()
	cfg.TLSDir = fc.c.ClientTLSDir()
	cfg.OpTimeout = 30 * time.Second
	if edit != nil {
		edit(&cfg)
	}
	c, err := New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if err := c.awaitReplicaGroups(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, _, cs := c.dataPlane(); cs != fileTestChunk {
		t.Fatalf("cluster chunk size %d, want %d", cs, fileTestChunk)
	}
	return c
}

// model is a File under test next to the bytes it should hold.
type model struct {
	t    *testing.T
	f    *File
	want []byte
}

// testDir makes a directory of its own for the test on the shared
// cluster (which outlives a test run with -count).
func testDir(t *testing.T, c *Client) string {
	t.Helper()
	dir := fmt.Sprintf("/%s.%d", t.Name(), time.Now().UnixNano())
	if _, err := c.Mkdir(t.Context(), dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// openModel opens name in a new test directory on a cluster client with
// flags (O_CREAT added).
func openModel(t *testing.T, name string, flags int) *model {
	t.Helper()
	c := dataClient(t)
	f, err := c.Open(t.Context(), testDir(t, c)+"/"+name, flags|syscall.O_CREAT, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return &model{t: t, f: f}
}

func (m *model) write(off int64, p []byte) {
	m.t.Helper()
	n, err := m.f.WriteAt(m.t.Context(), p, off)
	if err != nil || n != len(p) {
		m.t.Fatalf("WriteAt(%d bytes at %d) = %d, %v", len(p), off, n, err)
	}
	if end := off + int64(len(p)); end > int64(len(m.want)) {
		m.want = append(m.want, make([]byte, end-int64(len(m.want)))...)
	}
	copy(m.want[off:], p)
}

func (m *model) truncate(size int64) {
	m.t.Helper()
	if err := m.f.Truncate(m.t.Context(), size); err != nil {
		m.t.Fatalf("Truncate(%d): %v", size, err)
	}
	if size < int64(len(m.want)) {
		m.want = m.want[:size]
	} else {
		m.want = append(m.want, make([]byte, size-int64(len(m.want)))...)
	}
}

// check compares size, the whole file read with ReadAt (in pieces of
// piece bytes, some crossing chunk boundaries) and with ReadFile.
func (m *model) check(piece int) {
	m.t.Helper()
	ctx := m.t.Context()
	a, err := m.f.Stat(ctx)
	if err != nil || a.GetSize() != uint64(len(m.want)) {
		m.t.Fatalf("size %d (%v), want %d", a.GetSize(), err, len(m.want))
	}
	got := make([]byte, len(m.want))
	for off := 0; off < len(got); off += piece {
		end := min(off+piece, len(got))
		n, err := m.f.ReadAt(ctx, got[off:end], int64(off))
		if n != end-off || (err != nil && !(err == io.EOF && end == len(got))) {
			m.t.Fatalf("ReadAt(%d bytes at %d) = %d, %v", end-off, off, n, err)
		}
	}
	if i := firstDiff(got, m.want); i >= 0 {
		m.t.Fatalf("ReadAt: byte %d (chunk %d) is %#x, want %#x", i, i/fileTestChunk, got[i], m.want[i])
	}
	var buf bytes.Buffer
	if n, err := m.f.c.ReadFile(ctx, m.f.path, &buf); err != nil || n != int64(len(m.want)) {
		m.t.Fatalf("ReadFile = %d, %v", n, err)
	}
	if i := firstDiff(buf.Bytes(), m.want); i >= 0 {
		m.t.Fatalf("ReadFile: byte %d is %#x, want %#x", i, buf.Bytes()[i], m.want[i])
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}

func randBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32() | 1) // never 0, so zeros mean a hole
	}
	return b
}

func TestFileRangedIO(t *testing.T) {
	m := openModel(t, "ranged", syscall.O_RDWR|syscall.O_EXCL)
	f, ctx := m.f, t.Context()
	r := rand.New(rand.NewPCG(1, 2))
	const cs = fileTestChunk
	// Across 4 chunk boundaries, starting 100 bytes before the first:
	// chunk 0 is recorded but its first cs-100 bytes were never written.
	m.write(cs-100, randBytes(r, 3*cs+1234))
	m.check(100_000)
	// A write far past the end leaves chunks with no record: a hole.
	m.write(7*cs+10, randBytes(r, 5000))
	m.check(cs)
	// Overwrite in the middle, across a boundary; the size stays.
	m.write(2*cs-333, randBytes(r, 1000))
	m.check(77_777)

	// Short reads at the end of the file, with io.EOF.
	size := int64(len(m.want))
	p := make([]byte, 100)
	if n, err := f.ReadAt(ctx, p, size-40); n != 40 || err != io.EOF || !bytes.Equal(p[:40], m.want[size-40:]) {
		t.Fatalf("ReadAt at size-40 = %d, %v", n, err)
	}
	for _, off := range []int64{size, size + 1, MaxFileSize, MaxFileSize + 5} {
		if n, err := f.ReadAt(ctx, p, off); n != 0 || err != io.EOF {
			t.Fatalf("ReadAt at %d = %d, %v; want 0, EOF", off, n, err)
		}
	}
	// A hole in the middle of a read: zeros, even where p had bytes.
	hole := bytes.Repeat([]byte{0xff}, 2*cs)
	if n, err := f.ReadAt(ctx, hole, 5*cs); n != len(hole) || err != nil || !bytes.Equal(hole, make([]byte, 2*cs)) {
		t.Fatalf("ReadAt of the hole = %d, %v, non-zero bytes", n, err)
	}

	// Another client sees the bytes and follows the file as it grows.
	g, err := dataClient(t).Open(ctx, f.path, syscall.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	m.write(size, []byte("more"))
	q := make([]byte, 4)
	if n, err := g.ReadAt(ctx, q, size); n != 4 || err != nil || string(q) != "more" {
		t.Fatalf("other client's ReadAt past its size = %d %v %q", n, err, q)
	}
	if _, err := g.WriteAt(ctx, q, 0); !errors.Is(err, syscall.EBADF) {
		t.Fatalf("WriteAt on a read-only File = %v, want EBADF", err)
	}
}

func TestFileTruncate(t *testing.T) {
	m := openModel(t, "trunc", syscall.O_RDWR|syscall.O_TRUNC)
	f, c, ctx := m.f, m.f.c, t.Context()
	r := rand.New(rand.NewPCG(3, 4))
	const cs = fileTestChunk
	m.write(0, randBytes(r, 4*cs+500))
	// Shrink into the middle of chunk 1: chunks 2-4 are released, chunk 1
	// is cut, so growing again reads zeros there, not the old bytes.
	m.truncate(cs + 500)
	m.check(cs / 3)
	refs, err := f.loadChunks(ctx)
	if err != nil || len(refs) != 2 || refs[0] == nil || refs[1] == nil {
		t.Fatalf("chunk records after the shrink: %v %v", refs, err)
	}
	m.truncate(3*cs + 7)
	m.check(cs)
	// Writing into the released range makes new chunks.
	m.write(2*cs+5, randBytes(r, 300))
	m.check(cs)
	// An exact boundary keeps the chunk before it whole.
	m.truncate(cs)
	m.truncate(cs + 10)
	m.check(cs)
	if refs, err := f.loadChunks(ctx); err != nil || len(refs) != 1 {
		t.Fatalf("chunk records after truncating to one chunk: %v %v", refs, err)
	}
	// Through the path API too, and to zero.
	if err := c.Truncate(ctx, f.path, 5); err != nil {
		t.Fatal(err)
	}
	m.want = m.want[:5]
	m.check(3)
	m.truncate(0)
	m.check(1)
	m.write(10, []byte("x"))
	m.check(4)
}

func TestFileAppendConcurrent(t *testing.T) {
	c := dataClient(t)
	ctx := t.Context()
	dir := testDir(t, c)
	const writers, each = 4, 30
	type rec struct {
		off  int64
		data []byte
	}
	recs := make([][]rec, writers)
	errs := make([]error, writers)
	// Each writer has its own Client and File, as separate processes
	// would.
	clients := make([]*Client, writers)
	for w := range clients {
		clients[w] = dataClient(t)
	}
	var wg sync.WaitGroup
	for w, cl := range clients {
		wg.Go(func() {
			f, err := cl.Open(ctx, dir+"/log", syscall.O_WRONLY|syscall.O_CREAT|syscall.O_APPEND, 0o644)
			if err != nil {
				errs[w] = err
				return
			}
			defer f.Close()
			r := rand.New(rand.NewPCG(uint64(w), 9))
			for i := range each {
				data := randBytes(r, 8+r.IntN(12<<10))
				binary.BigEndian.PutUint32(data, uint32(w))
				binary.BigEndian.PutUint32(data[4:], uint32(i))
				off, err := f.Append(ctx, data)
				if err != nil {
					errs[w] = fmt.Errorf("writer %d record %d: %w", w, i, err)
					return
				}
				recs[w] = append(recs[w], rec{off, data})
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	var all []rec
	for _, rs := range recs {
		all = append(all, rs...)
	}
	slices.SortFunc(all, func(a, b rec) int { return int(a.off - b.off) })
	var end int64
	for i, r := range all {
		if i > 0 && r.off < all[i-1].off+int64(len(all[i-1].data)) {
			t.Fatalf("records at %d (%d bytes) and %d overlap", all[i-1].off, len(all[i-1].data), r.off)
		}
		if r.off/fileTestChunk != (r.off+int64(len(r.data))-1)/fileTestChunk {
			t.Fatalf("record at %d (%d bytes) crosses a chunk boundary", r.off, len(r.data))
		}
		end = max(end, r.off+int64(len(r.data)))
	}
	if end <= fileTestChunk {
		t.Fatalf("the records fit in one chunk (end %d): the test does not cross chunks", end)
	}
	f, err := c.Open(ctx, dir+"/log", syscall.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if a, err := f.Stat(ctx); err != nil || a.GetSize() != uint64(end) {
		t.Fatalf("size %d (%v), want the end of the last record %d", a.GetSize(), err, end)
	}
	var buf bytes.Buffer
	if _, err := c.ReadFile(ctx, dir+"/log", &buf); err != nil {
		t.Fatal(err)
	}
	for _, r := range all {
		if got := buf.Bytes()[r.off : r.off+int64(len(r.data))]; !bytes.Equal(got, r.data) {
			t.Fatalf("record of writer %d #%d at %d differs", binary.BigEndian.Uint32(r.data), binary.BigEndian.Uint32(r.data[4:]), r.off)
		}
	}
	// Between records (padding, or the end of a chunk a record did not
	// fit in) the file reads zeros.
	covered := make([]bool, end)
	for _, r := range all {
		for i := range len(r.data) {
			covered[r.off+int64(i)] = true
		}
	}
	for i, b := range buf.Bytes() {
		if !covered[i] && b != 0 {
			t.Fatalf("byte %d between records is %#x, want 0", i, b)
		}
	}
}

// TestAppendRetryDedup checks the chunk server's side of the contract
// Append relies on: an append retried with the same request id gets the
// first offset back and is stored once.
func TestAppendRetryDedup(t *testing.T) {
	c := dataClient(t)
	ctx := t.Context()
	dir := testDir(t, c)
	f, err := c.Open(ctx, dir+"/dedup", syscall.O_RDWR|syscall.O_CREAT|syscall.O_EXCL, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Append(ctx, []byte("first")); err != nil {
		t.Fatal(err)
	}
	ref, err := f.ref(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	id := newAppendID()
	var offs []int64
	for range 2 {
		rf, err := c.mutateChunk(ctx, ref, dataproto.Frame{Type: dataproto.TypeAppend, Version: id, Payload: []byte("again")})
		if err != nil || rf.Status != dataproto.StatusOK {
			t.Fatalf("append: %v %v", rf, err)
		}
		offs = append(offs, rf.Offset)
	}
	if offs[0] != 5 || offs[1] != 5 {
		t.Fatalf("offsets of an append and its retry: %v, want [5 5]", offs)
	}
	if off, err := f.Append(ctx, []byte("third")); err != nil || off != 10 {
		t.Fatalf("next append at %d (%v), want 10", off, err)
	}
}

func TestFileBadInput(t *testing.T) {
	c := dataClient(t)
	ctx := t.Context()
	dir := testDir(t, c)
	if _, err := c.Mkdir(ctx, dir+"/dir", 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Symlink(ctx, dir+"/dir", dir+"/link"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path  string
		flags int
		want  syscall.Errno
	}{
		{dir + "/dir", syscall.O_WRONLY, syscall.EISDIR},
		{dir + "/dir", syscall.O_RDWR | syscall.O_CREAT, syscall.EISDIR},
		{dir + "/dir", syscall.O_RDONLY | syscall.O_TRUNC, syscall.EISDIR},
		{"/", syscall.O_WRONLY | syscall.O_CREAT, syscall.EISDIR},
		{dir + "/link", syscall.O_RDONLY, syscall.ELOOP},
		{dir + "/missing", syscall.O_RDONLY, syscall.ENOENT},
		{dir + "/dir", syscall.O_RDWR | syscall.O_CREAT | syscall.O_EXCL, syscall.EEXIST},
		{dir + "/x", syscall.O_ACCMODE, syscall.EINVAL},
		{"rel", syscall.O_RDONLY, syscall.EINVAL},
	} {
		if _, err := c.Open(ctx, tc.path, tc.flags, 0o644); !errors.Is(err, tc.want) {
			t.Errorf("Open(%q, %#x) = %v, want %v", tc.path, tc.flags, err, tc.want)
		}
	}
	d, err := c.Open(ctx, dir+"/dir", syscall.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.ReadAt(ctx, make([]byte, 1), 0); !errors.Is(err, syscall.EISDIR) {
		t.Errorf("ReadAt of a directory = %v, want EISDIR", err)
	}
	if _, err := c.ReadFile(ctx, dir+"/dir", io.Discard); !errors.Is(err, syscall.EISDIR) {
		t.Errorf("ReadFile of a directory = %v, want EISDIR", err)
	}
	if _, err := c.WriteFile(ctx, dir+"/dir", bytes.NewReader(nil), 0o644); !errors.Is(err, syscall.EISDIR) {
		t.Errorf("WriteFile of a directory = %v, want EISDIR", err)
	}

	f, err := c.Open(ctx, dir+"/bad", syscall.O_RDWR|syscall.O_CREAT, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(ctx, []byte("0123456789"), 0); err != nil {
		t.Fatal(err)
	}
	before, err := f.Stat(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		err  error
		want syscall.Errno
	}{
		{"ReadAt -1", func() error { _, err := f.ReadAt(ctx, make([]byte, 1), -1); return err }(), syscall.EINVAL},
		{"WriteAt -1", func() error { _, err := f.WriteAt(ctx, []byte("x"), -1); return err }(), syscall.EINVAL},
		{"WriteAt past max", func() error { _, err := f.WriteAt(ctx, []byte("xy"), MaxFileSize-1); return err }(), syscall.EFBIG},
		{"WriteAt at max+1", func() error { _, err := f.WriteAt(ctx, []byte("x"), MaxFileSize+1); return err }(), syscall.EFBIG},
		{"Truncate -1", f.Truncate(ctx, -1), syscall.EINVAL},
		{"Truncate past max", f.Truncate(ctx, MaxFileSize+1), syscall.EFBIG},
		{"Append empty", func() error { _, err := f.Append(ctx, nil); return err }(), syscall.EINVAL},
		{"Append too large", func() error { _, err := f.Append(ctx, make([]byte, fileTestChunk/4+1)); return err }(), syscall.EINVAL},
	} {
		if !errors.Is(tc.err, tc.want) {
			t.Errorf("%s = %v, want %v", tc.name, tc.err, tc.want)
		}
	}
	// A zero-length write returns 0 and changes nothing, even far out.
	for _, off := range []int64{0, 5, 1 << 40} {
		if n, err := f.WriteAt(ctx, nil, off); n != 0 || err != nil {
			t.Fatalf("zero-length WriteAt at %d = %d, %v", off, n, err)
		}
	}
	after, err := f.Stat(ctx)
	if err != nil || after.GetSize() != 10 || after.GetVersion() != before.GetVersion() || after.GetMtimeNs() != before.GetMtimeNs() {
		t.Fatalf("after zero-length writes: %v (%v), before %v", after, err, before)
	}
	// A write at the very end of the range works.
	if n, err := f.WriteAt(ctx, []byte("z"), MaxFileSize-1); n != 1 || err != nil {
		t.Fatalf("WriteAt of the last byte = %d, %v", n, err)
	}
	if a, err := f.Stat(ctx); err != nil || a.GetSize() != uint64(MaxFileSize) {
		t.Fatalf("size after writing the last byte: %v %v", a, err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.ReadAt(ctx, make([]byte, 1), 0); !errors.Is(err, syscall.EBADF) {
		t.Errorf("ReadAt after Close = %v, want EBADF", err)
	}
	if err := f.Close(); !errors.Is(err, syscall.EBADF) {
		t.Errorf("second Close = %v, want EBADF", err)
	}

	// O_APPEND refuses WriteAt; read-only refuses Truncate (EINVAL, as
	// ftruncate) and Append; write-only refuses ReadAt.
	a, err := c.Open(ctx, dir+"/bad", syscall.O_WRONLY|syscall.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.WriteAt(ctx, []byte("x"), 0); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("WriteAt with O_APPEND = %v, want EINVAL", err)
	}
	if _, err := a.ReadAt(ctx, make([]byte, 1), 0); !errors.Is(err, syscall.EBADF) {
		t.Errorf("ReadAt on a write-only File = %v, want EBADF", err)
	}
	ro, err := c.Open(ctx, dir+"/bad", syscall.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := ro.Truncate(ctx, 1); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("Truncate on a read-only File = %v, want EINVAL", err)
	}
	if _, err := ro.Append(ctx, []byte("x")); !errors.Is(err, syscall.EBADF) {
		t.Errorf("Append on a read-only File = %v, want EBADF", err)
	}
	// O_TRUNC empties the file; O_CREAT without O_EXCL opens it as is.
	tr, err := c.Open(ctx, dir+"/bad", syscall.O_WRONLY|syscall.O_CREAT|syscall.O_TRUNC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if a, err := tr.Stat(ctx); err != nil || a.GetSize() != 0 || a.GetIno() != after.GetIno() {
		t.Fatalf("after O_TRUNC: %v %v", a, err)
	}
}

// An overwrite inside the known size skips the ministry; Sync records its
// mtime, and Close does too.
func TestOverwriteMtimeOnSync(t *testing.T) {
	m := openModel(t, "mtime", syscall.O_RDWR)
	ctx := t.Context()
	big := int64(DefaultInlineMax + 904) // in a chunk
	m.write(0, bytes.Repeat([]byte("a"), int(big)))
	before, err := m.f.Stat(ctx)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	m.write(100, []byte("overwrite"))
	mid, err := m.f.Stat(ctx)
	if err != nil || mid.GetMtimeNs() != before.GetMtimeNs() || int64(mid.GetSize()) != big {
		t.Fatalf("before Sync: mtime %d (was %d), size %d, %v", mid.GetMtimeNs(), before.GetMtimeNs(), mid.GetSize(), err)
	}
	if err := m.f.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	after, err := m.f.Stat(ctx)
	if err != nil || after.GetMtimeNs() <= before.GetMtimeNs() {
		t.Fatalf("after Sync: mtime %d, was %d (%v)", after.GetMtimeNs(), before.GetMtimeNs(), err)
	}
	m.check(4096)
	m.write(200, []byte("again"))
	if err := m.f.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := m.f.Close(); !errors.Is(err, syscall.EBADF) {
		t.Fatalf("second Close: %v, want EBADF", err)
	}
}

// A write inside the size a File knows, after another client truncated
// the file, went into a released chunk: Sync must say so (ESTALE), never
// drop it silently; written again, it lands and the size covers it (as
// POSIX: a write past the end of a file truncated under the writer grows
// it again). A write that grows the file notices at once and writes again.
func TestOverwriteAfterAnotherClientTruncated(t *testing.T) {
	ctx := t.Context()
	c := dataClient(t)
	path := testDir(t, c) + "/shrunk"
	a, err := c.Open(ctx, path, syscall.O_RDWR|syscall.O_CREAT, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if _, err := a.WriteAt(ctx, bytes.Repeat([]byte("a"), DefaultInlineMax+904), 0); err != nil {
		t.Fatal(err)
	}
	truncate := func() {
		t.Helper()
		b, err := dataClient(t).Open(ctx, path, syscall.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		if err := b.Truncate(ctx, 0); err != nil {
			t.Fatal(err)
		}
	}
	truncate()
	if _, err := a.WriteAt(ctx, []byte("lost"), 100); err != nil {
		t.Fatal(err)
	}
	if err := a.Sync(ctx); !errors.Is(err, syscall.ESTALE) {
		t.Fatalf("Sync after writing into a released chunk: %v, want ESTALE", err)
	}
	if _, err := a.WriteAt(ctx, []byte("still here"), 100); err != nil {
		t.Fatal(err)
	}
	if err := a.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	check := func(want []byte) {
		t.Helper()
		r, err := c.Open(ctx, path, syscall.O_RDONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		got := make([]byte, len(want)+10)
		n, err := r.ReadAt(ctx, got, 0)
		if n != len(want) || !errors.Is(err, io.EOF) || !bytes.Equal(got[:n], want) {
			t.Fatalf("file is %q (%v), want %q", got[:n], err, want)
		}
	}
	check(append(make([]byte, 100), "still here"...))
	// A growing write after another truncate: stored again, no error.
	truncate()
	if _, err := a.WriteAt(ctx, []byte("grown"), 200); err != nil {
		t.Fatalf("growing write after a truncate: %v", err)
	}
	check(append(make([]byte, 200), "grown"...))
}

// Small files live inline in the ministry: no chunk record until a write
// takes them past the limit, when their bytes move to chunk 0.
func TestInlineSmallFiles(t *testing.T) {
	ctx := t.Context()
	m := openModel(t, "inline", syscall.O_RDWR)
	inline := func() bool {
		t.Helper()
		refs, err := m.f.loadChunks(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, ok := m.f.inlineBytes()
		if ok && len(refs) > 0 {
			t.Fatalf("inline with %d chunk records", len(refs))
		}
		return ok
	}
	m.write(0, []byte("hello"))
	m.write(3000, []byte("x"))
	if !inline() {
		t.Fatal("a 3001-byte file is not inline")
	}
	m.check(1000)
	m.truncate(2000)
	m.check(512)
	if !inline() {
		t.Fatal("not inline after a shrink")
	}
	// Past the limit: the bytes move to chunk 0, the write lands after.
	m.write(4000, bytes.Repeat([]byte("y"), DefaultInlineMax+904))
	if inline() {
		t.Fatal("a file past the limit is still inline")
	}
	m.check(4096)
	// A record append to an inline file moves it first.
	m2 := openModel(t, "inline-append", syscall.O_RDWR)
	m2.write(0, []byte("head"))
	off, err := m2.f.Append(ctx, []byte("record"))
	if err != nil || off < 4 {
		t.Fatalf("append to an inline file: offset %d, %v", off, err)
	}
	got := make([]byte, off+6)
	if n, err := m2.f.ReadAt(ctx, got, 0); n != len(got) || (err != nil && err != io.EOF) || string(got[:4]) != "head" || string(got[off:]) != "record" {
		t.Fatalf("after append: %q (%d, %v)", got, n, err)
	}
	// WriteFile and ReadFile of a small file go inline both ways.
	c := dataClient(t)
	path := testDir(t, c) + "/small"
	if _, err := c.WriteFile(ctx, path, strings.NewReader("tiny file\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if n, err := c.ReadFile(ctx, path, &out); err != nil || n != 10 || out.String() != "tiny file\n" {
		t.Fatalf("ReadFile: %q %d %v", out.String(), n, err)
	}
	f, err := c.Open(ctx, path, syscall.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if refs, err := f.loadChunks(ctx); err != nil || len(refs) != 0 {
		t.Fatalf("a 10-byte file written with WriteFile has %d chunk records (%v)", len(refs), err)
	}
	if _, ok := f.inlineBytes(); !ok {
		t.Fatal("a 10-byte file written with WriteFile is not inline")
	}
}

// A File that never read the chunk table, writing past the inline limit
// of a file whose bytes are inline (an append through a fresh descriptor,
// as the mount does), must move them to chunk 0 first: found by the
// kill -9 mount test as an acknowledged record read back as zeros.
func TestFreshFileWritesPastAnInlineFile(t *testing.T) {
	ctx := t.Context()
	c := dataClient(t)
	path := testDir(t, c) + "/grows"
	a, err := c.Open(ctx, path, syscall.O_RDWR|syscall.O_CREAT, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.WriteAt(ctx, []byte("inline head"), 0); err != nil {
		t.Fatal(err)
	}
	a.Close()
	b, err := c.Open(ctx, path, syscall.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	tail := bytes.Repeat([]byte("T"), DefaultInlineMax+5904) // past the limit: to chunk 0
	if _, err := b.WriteAt(ctx, tail, 11); err != nil {
		t.Fatal(err)
	}
	b.Close()
	var out bytes.Buffer
	if _, err := c.ReadFile(ctx, path, &out); err != nil {
		t.Fatal(err)
	}
	if want := append([]byte("inline head"), tail...); !bytes.Equal(out.Bytes(), want) {
		t.Fatalf("file is %d bytes starting %q, want %d bytes starting %q", out.Len(), out.Bytes()[:min(out.Len(), 20)], len(want), want[:20])
	}
}
