package chunkstore

import (
	"bytes"
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
)

const testChunk = 1 << 20 // 16 blocks: small enough to fill, big enough for multi-block writes

func testConfig(dir string) Config {
	return Config{Dir: dir, ClusterID: "c1", ChunkSize: testChunk, NoSync: true}
}

func openT(t *testing.T, cfg Config) *Store {
	t.Helper()
	s, err := Open(cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// model is the expected content and version of each chunk.
type model struct {
	data map[Handle][]byte
	ver  map[Handle]uint64
}

func newModel() *model { return &model{data: map[Handle][]byte{}, ver: map[Handle]uint64{}} }

func (m *model) write(h Handle, off int64, p []byte, v uint64) {
	d := m.data[h]
	if end := off + int64(len(p)); end > int64(len(d)) {
		d = append(d, make([]byte, end-int64(len(d)))...)
	}
	copy(d[off:], p)
	m.data[h], m.ver[h] = d, v
}

func (m *model) pad(h Handle, v uint64) {
	m.data[h] = append(m.data[h], make([]byte, testChunk-len(m.data[h]))...)
	m.ver[h] = v
}

// check compares every chunk of the store with the model.
func (m *model) check(t *testing.T, s *Store) {
	t.Helper()
	list, err := s.List()
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if len(list) != len(m.data) {
		t.Fatalf("List has %d chunks, want %d: %v", len(list), len(m.data), list)
	}
	for _, ci := range list {
		want := m.data[ci.Handle]
		if ci.Version != m.ver[ci.Handle] || ci.Length != int64(len(want)) {
			t.Fatalf("chunk %v: got version %d length %d, want %d %d", ci.Handle, ci.Version, ci.Length, m.ver[ci.Handle], len(want))
		}
		got, err := s.Read(ci.Handle, 0, testChunk+1)
		if err != nil {
			t.Fatalf("Read %v: %v", ci.Handle, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("chunk %v: content differs from the model", ci.Handle)
		}
	}
}

func randBytes(r *rand.Rand, n int) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(r.Uint32())
	}
	return p
}

func TestConfigValidate(t *testing.T) {
	ok := Config{Dir: "/x", ClusterID: "c", ChunkSize: DefaultChunkSize}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	for name, mod := range map[string]func(*Config){
		"no dir":       func(c *Config) { c.Dir = "" },
		"no cluster":   func(c *Config) { c.ClusterID = "" },
		"zero chunk":   func(c *Config) { c.ChunkSize = 0 },
		"odd chunk":    func(c *Config) { c.ChunkSize = BlockSize + 1 },
		"negative":     func(c *Config) { c.ChunkSize = -BlockSize },
		"huge chunk":   func(c *Config) { c.ChunkSize = 2 * MaxChunkSize },
		"long cluster": func(c *Config) { c.ClusterID = strings.Repeat("x", 300) },
	} {
		c := ok
		mod(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: Validate accepted %+v", name, c)
		}
	}
	if d := DefaultConfig(); d.ChunkSize != 64<<20 {
		t.Errorf("default chunk size %d", d.ChunkSize)
	}
}

// TestRoundTripRandom runs random writes, appends and pads against an
// in-memory model, reading random ranges and reopening the store.
func TestRoundTripRandom(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, testConfig(dir))
	r := rand.New(rand.NewPCG(1, 2))
	m := newModel()
	for i := range 1500 {
		h := Handle(r.IntN(5) + 1)
		v := m.ver[h] + 1 + uint64(r.IntN(3))
		switch op := r.IntN(10); {
		case op < 4:
			n := 1 + r.IntN(3*BlockSize)
			if r.IntN(3) == 0 {
				n = 1 + r.IntN(100)
			}
			off := r.Int64N(testChunk - int64(n) + 1)
			if r.IntN(2) == 0 && len(m.data[h]) > 0 { // overwrite near existing bytes
				off = min(r.Int64N(int64(len(m.data[h]))), testChunk-int64(n))
			}
			p := randBytes(r, n)
			if err := s.Write(h, off, p, v); err != nil {
				t.Fatalf("op %d: Write(%v, %d, %d): %v", i, h, off, n, err)
			}
			m.write(h, off, p, v)
		case op < 6:
			p := randBytes(r, 1+r.IntN(BlockSize))
			off, err := s.Append(h, p, v)
			if errors.Is(err, ErrChunkFull) {
				if int64(len(m.data[h])+len(p)) <= testChunk {
					t.Fatalf("op %d: ErrChunkFull with room: %v", i, err)
				}
				continue
			}
			if err != nil || off != int64(len(m.data[h])) {
				t.Fatalf("op %d: Append = %d, %v; want offset %d", i, off, err, len(m.data[h]))
			}
			m.write(h, off, p, v)
		case op == 6 && r.IntN(3) == 0 && m.data[h] != nil:
			n := r.Int64N(int64(len(m.data[h])) + 1)
			if r.IntN(4) == 0 {
				n = r.Int64N(testChunk + 1)
			}
			if err := s.Truncate(h, n, v); err != nil {
				t.Fatalf("op %d: Truncate(%v, %d): %v", i, h, n, err)
			}
			m.truncate(h, n, v)
		case op == 6 && r.IntN(10) == 0:
			if err := s.Pad(h, v); err != nil {
				t.Fatalf("op %d: Pad: %v", i, err)
			}
			m.pad(h, v)
		case op < 9:
			d := m.data[h]
			if len(d) == 0 {
				continue
			}
			off := r.Int64N(int64(len(d)) + 10)
			n := r.IntN(3 * BlockSize)
			got, err := s.Read(h, off, n)
			if err != nil {
				t.Fatalf("op %d: Read(%v, %d, %d): %v", i, h, off, n, err)
			}
			want := d[min(off, int64(len(d))):min(off+int64(n), int64(len(d)))]
			if !bytes.Equal(got, want) {
				t.Fatalf("op %d: Read(%v, %d, %d) returned %d bytes differing from the model (%d)", i, h, off, n, len(got), len(want))
			}
		default:
			if err := s.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			s = openT(t, testConfig(dir))
		}
	}
	m.check(t, s)
	var bad []string
	if err := s.Scrub(context.Background(), func(h Handle, b int, err error) { bad = append(bad, err.Error()) }); err != nil || bad != nil {
		t.Fatalf("Scrub: %v %v", err, bad)
	}
}

func TestSparseAllocation(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.ChunkSize = DefaultChunkSize
	s := openT(t, cfg)
	if err := s.Write(7, 0, []byte("0123456789"), 1); err != nil {
		t.Fatal(err)
	}
	if err := s.Pad(7, 2); err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, suf := range []string{sufData, sufMeta} {
		var st syscall.Stat_t
		if err := syscall.Stat(s.path(7, suf), &st); err != nil {
			t.Fatal(err)
		}
		total += st.Blocks * 512
	}
	if total >= 1<<20 {
		t.Fatalf("a 10-byte chunk padded to 64 MiB uses %d bytes of disk", total)
	}
	if ci, _ := s.Stat(7); ci.Length != DefaultChunkSize || ci.Version != 2 {
		t.Fatalf("Stat after Pad = %+v", ci)
	}
	got, err := s.Read(7, 0, 12)
	if err != nil || string(got) != "0123456789\x00\x00" {
		t.Fatalf("Read = %q, %v", got, err)
	}
	got, err = s.Read(7, DefaultChunkSize-BlockSize-5, 2*BlockSize)
	if err != nil || len(got) != BlockSize+5 || !bytes.Equal(got, make([]byte, BlockSize+5)) {
		t.Fatalf("Read of padding = %d bytes, %v", len(got), err)
	}
}

// flipByte corrupts one byte of chunk h's data file on disk.
func flipByte(t *testing.T, s *Store, h Handle, off int64) {
	t.Helper()
	f, err := os.OpenFile(s.path(h, sufData), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x40
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

func TestCorruptBlockDetectedAndRepaired(t *testing.T) {
	s := openT(t, testConfig(t.TempDir()))
	r := rand.New(rand.NewPCG(3, 4))
	content := randBytes(r, 4*BlockSize+100)
	if err := s.Write(1, 0, content, 1); err != nil {
		t.Fatal(err)
	}
	if err := s.Write(2, 0, content, 1); err != nil {
		t.Fatal(err)
	}
	flipByte(t, s, 1, 2*BlockSize+77)

	_, err := s.Read(1, 2*BlockSize-10, 20)
	var ce *CorruptError
	if !errors.As(err, &ce) || ce.Handle != 1 || ce.Block != 2 || !errors.Is(err, syscall.EIO) {
		t.Fatalf("Read over the bad block = %v, want CorruptError block 2", err)
	}
	for _, b := range []int{0, 1, 3, 4} {
		got, err := s.Read(1, int64(b)*BlockSize, BlockSize)
		if err != nil || !bytes.Equal(got, content[b*BlockSize:min((b+1)*BlockSize, len(content))]) {
			t.Fatalf("Read of good block %d: %v", b, err)
		}
	}
	// A partial overwrite must not give the corrupt block a fresh CRC.
	if err := s.Write(1, 2*BlockSize+5, []byte("x"), 2); !errors.As(err, &ce) || ce.Block != 2 {
		t.Fatalf("partial write into a corrupt block = %v", err)
	}
	if ci, _ := s.Stat(1); ci.Version != 1 {
		t.Fatalf("version changed to %d by a refused write", ci.Version)
	}

	type report struct {
		h Handle
		b int
	}
	var got []report
	scrub := func() {
		got = nil
		if err := s.Scrub(context.Background(), func(h Handle, b int, err error) {
			if !errors.As(err, &ce) {
				t.Errorf("Scrub reported %v", err)
			}
			got = append(got, report{h, b})
		}); err != nil {
			t.Fatal(err)
		}
	}
	scrub()
	if len(got) != 1 || got[0] != (report{1, 2}) {
		t.Fatalf("Scrub reported %v, want chunk 1 block 2", got)
	}

	good := content[2*BlockSize : 3*BlockSize]
	bad := bytes.Clone(good)
	bad[0] ^= 1
	if err := s.RepairBlock(1, 2, bad); !errors.Is(err, ErrRepairMismatch) {
		t.Fatalf("RepairBlock with bad data = %v", err)
	}
	if err := s.RepairBlock(1, 2, good[:10]); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("RepairBlock with short data = %v", err)
	}
	if err := s.RepairBlock(1, 9, good); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("RepairBlock past the end = %v", err)
	}
	if err := s.RepairBlock(1, 2, good); err != nil {
		t.Fatalf("RepairBlock: %v", err)
	}
	scrub()
	if len(got) != 0 {
		t.Fatalf("Scrub after repair reported %v", got)
	}
	if all, err := s.Read(1, 0, testChunk); err != nil || !bytes.Equal(all, content) {
		t.Fatalf("Read after repair: %v", err)
	}
	// The last, partial block is repaired with its valid bytes only.
	flipByte(t, s, 1, 4*BlockSize+3)
	if err := s.RepairBlock(1, 4, content[4*BlockSize:]); err != nil {
		t.Fatal(err)
	}
	if all, err := s.Read(1, 0, testChunk); err != nil || !bytes.Equal(all, content) {
		t.Fatalf("Read after repairing the last block: %v", err)
	}
}

func TestDamagedMetadata(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, testConfig(dir))
	for h := Handle(1); h <= 2; h++ {
		if err := s.Write(h, 0, []byte("hello"), 1); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	mp := filepath.Join(dir, "chunks", Handle(1).String()+sufMeta)
	b, _ := os.ReadFile(mp)
	b[20] ^= 1
	os.WriteFile(mp, b, 0o644)

	s = openT(t, testConfig(dir))
	var ce *CorruptError
	if _, err := s.Stat(1); !errors.As(err, &ce) || ce.Block != -1 {
		t.Fatalf("Stat of damaged chunk = %v", err)
	}
	if _, err := s.Read(1, 0, 5); !errors.As(err, &ce) {
		t.Fatalf("Read of damaged chunk = %v", err)
	}
	if err := s.Write(1, 0, []byte("x"), 5); !errors.As(err, &ce) {
		t.Fatalf("Write to damaged chunk = %v", err)
	}
	if l, _ := s.List(); len(l) != 1 || l[0].Handle != 2 {
		t.Fatalf("List = %v, want only chunk 2", l)
	}
	var reports []int
	s.Scrub(context.Background(), func(h Handle, b int, err error) {
		if h != 1 {
			t.Errorf("Scrub reported chunk %v: %v", h, err)
		}
		reports = append(reports, b)
	})
	if len(reports) != 1 || reports[0] != -1 {
		t.Fatalf("Scrub reported blocks %v of the damaged chunk, want [-1]", reports)
	}
	if err := s.Delete(1); err != nil {
		t.Fatalf("Delete of damaged chunk: %v", err)
	}
	if err := s.Write(1, 0, []byte("again"), 1); err != nil {
		t.Fatalf("re-create after delete: %v", err)
	}
}

func TestBadInputChangesNothing(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, testConfig(dir))
	m := newModel()
	p := bytes.Repeat([]byte("ab"), BlockSize)
	if err := s.Write(1, 100, p, 5); err != nil {
		t.Fatal(err)
	}
	m.write(1, 100, p, 5)

	cases := []struct {
		name string
		op   func() error
		want error
	}{
		{"negative offset", func() error { return s.Write(1, -1, []byte("x"), 6) }, syscall.EINVAL},
		{"zero length", func() error { return s.Write(1, 0, nil, 6) }, syscall.EINVAL},
		{"past chunk end", func() error { return s.Write(1, testChunk-1, []byte("xy"), 6) }, syscall.EFBIG},
		{"offset past chunk", func() error { return s.Write(1, testChunk+1, []byte("x"), 6) }, syscall.EFBIG},
		{"overflowing offset", func() error { return s.Write(1, math.MaxInt64-1, []byte("xyz"), 6) }, syscall.EFBIG},
		{"stale version", func() error { return s.Write(1, 0, []byte("x"), 5) }, ErrStaleVersion},
		{"older version", func() error { return s.Write(1, 0, []byte("x"), 2) }, ErrStaleVersion},
		{"stale append", func() error { _, err := s.Append(1, []byte("x"), 4); return err }, ErrStaleVersion},
		{"empty append", func() error { _, err := s.Append(1, nil, 6); return err }, syscall.EINVAL},
		{"stale pad", func() error { return s.Pad(1, 5) }, ErrStaleVersion},
		{"stale set version", func() error { return s.SetVersion(1, 1) }, ErrStaleVersion},
		{"negative read", func() error { _, err := s.Read(1, -5, 3); return err }, syscall.EINVAL},
		{"negative count", func() error { _, err := s.Read(1, 0, -3); return err }, syscall.EINVAL},
		{"unknown read", func() error { _, err := s.Read(9, 0, 3); return err }, ErrNotFound},
		{"unknown stat", func() error { _, err := s.Stat(9); return err }, ErrNotFound},
		{"unknown delete", func() error { return s.Delete(9) }, ErrNotFound},
		{"unknown set version", func() error { return s.SetVersion(9, 3) }, ErrNotFound},
		{"unknown repair", func() error { return s.RepairBlock(9, 0, []byte("x")) }, ErrNotFound},
		{"negative repair block", func() error { return s.RepairBlock(1, -1, []byte("x")) }, syscall.EINVAL},
	}
	for _, c := range cases {
		err := c.op()
		if !errors.Is(err, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, err, c.want)
		} else if !strings.HasPrefix(err.Error(), "chunkstore: ") {
			t.Errorf("%s: error %q lacks the package prefix", c.name, err)
		}
	}
	if err := s.Write(1, 0, []byte("x"), 5); err == nil || !strings.Contains(err.Error(), "5") {
		t.Errorf("stale version error %v should name both versions", err)
	}
	m.check(t, s)
	s.Close()
	s = openT(t, testConfig(dir))
	m.check(t, s)

	// Reads past the end are short, not errors.
	for _, c := range []struct {
		off  int64
		n, w int
	}{{100, 10, 10}, {int64(100 + len(p) - 3), 10, 3}, {int64(100 + len(p)), 10, 0}, {testChunk * 4, 10, 0}, {0, 0, 0}} {
		got, err := s.Read(1, c.off, c.n)
		if err != nil || len(got) != c.w {
			t.Errorf("Read(%d, %d) = %d bytes, %v; want %d", c.off, c.n, len(got), err, c.w)
		}
	}
}

func TestAppend(t *testing.T) {
	s := openT(t, testConfig(t.TempDir()))
	m := newModel()
	rec := bytes.Repeat([]byte("r"), 100_000)
	var offs []int64
	v := uint64(0)
	for {
		v++
		off, err := s.Append(3, rec, v)
		if errors.Is(err, ErrChunkFull) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		offs = append(offs, off)
		m.write(3, off, rec, v)
	}
	for i, off := range offs {
		if off != int64(i*len(rec)) {
			t.Fatalf("append %d at %d, want %d", i, off, i*len(rec))
		}
	}
	m.check(t, s) // the refused append changed nothing, not even the version
	if err := s.Pad(3, v); err != nil {
		t.Fatal(err)
	}
	m.pad(3, v)
	m.check(t, s)
	if _, err := s.Append(3, []byte("x"), v+1); !errors.Is(err, ErrChunkFull) {
		t.Fatalf("Append to a padded chunk = %v", err)
	}
	// Exactly filling a chunk is allowed.
	if _, err := s.Append(4, make([]byte, testChunk), 1); err != nil {
		t.Fatalf("Append of a whole chunk: %v", err)
	}
}

func TestOpenRefusals(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, testConfig(dir))
	if _, err := Open(testConfig(dir)); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("second Open of a locked store = %v", err)
	}
	id := s.ID()
	s.Close()

	other := testConfig(dir)
	other.ClusterID = "c2"
	if _, err := Open(other); !errors.Is(err, ErrForeignStore) || !strings.Contains(err.Error(), `"c1"`) {
		t.Fatalf("Open by another cluster = %v", err)
	}
	size := testConfig(dir)
	size.ChunkSize = 2 * testChunk
	if _, err := Open(size); err == nil || !strings.Contains(err.Error(), "chunk size") {
		t.Fatalf("Open with another chunk size = %v", err)
	}
	s = openT(t, testConfig(dir))
	if s.ID() != id || id == "" {
		t.Fatalf("store id changed from %q to %q", id, s.ID())
	}

	full := t.TempDir()
	os.WriteFile(filepath.Join(full, "precious"), []byte("x"), 0o644)
	if _, err := Open(testConfig(full)); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("Open of a non-empty directory = %v", err)
	}
	if _, err := os.Stat(filepath.Join(full, "store.json")); !os.IsNotExist(err) {
		t.Fatalf("refused Open wrote store.json")
	}
}

func TestDelete(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, testConfig(dir))
	if err := s.Write(1, 0, []byte("abc"), 3); err != nil {
		t.Fatal(err)
	}
	if err := s.Write(1, 1, []byte("z"), 4); err != nil { // leaves nothing behind but .meta and .data
		t.Fatal(err)
	}
	if err := s.Delete(1); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Stat(1); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Stat after Delete = %v", err)
	}
	if ents, _ := os.ReadDir(filepath.Join(dir, "chunks")); len(ents) != 0 {
		t.Fatalf("files left after Delete: %v", ents)
	}
	s.Close()
	s = openT(t, testConfig(dir))
	if _, err := s.Stat(1); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Stat after Delete and reopen = %v", err)
	}
	if err := s.Write(1, 0, []byte("new"), 1); err != nil {
		t.Fatalf("re-create at version 1: %v", err)
	}
	if got, _ := s.Read(1, 0, 10); string(got) != "new" {
		t.Fatalf("re-created chunk reads %q", got)
	}
}

// TestConcurrent runs writers and readers on several chunks at once (run
// with -race); each goroutine owns one chunk's versions.
func TestConcurrent(t *testing.T) {
	s := openT(t, testConfig(t.TempDir()))
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := Handle(g%4 + 1)
			r := rand.New(rand.NewPCG(uint64(g), 9))
			for i := range 50 {
				if g < 4 {
					p := bytes.Repeat([]byte{byte(i)}, 1+r.IntN(2*BlockSize))
					if err := s.Write(h, r.Int64N(testChunk-int64(len(p))), p, uint64(i+1)); err != nil {
						errs[g] = err
						return
					}
					continue
				}
				if _, err := s.Read(h, r.Int64N(testChunk), BlockSize); err != nil && !errors.Is(err, ErrNotFound) {
					errs[g] = err
					return
				}
				s.List()
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	var bad []error
	s.Scrub(context.Background(), func(h Handle, b int, err error) { bad = append(bad, err) })
	if bad != nil {
		t.Fatalf("Scrub after concurrent writes: %v", bad)
	}
}

// TestDurablePath runs a round trip with fsync on, so the syncing code
// (not only the NoSync shortcuts) is exercised.
func TestDurablePath(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(dir)
	cfg.NoSync = false
	s := openT(t, cfg)
	m := newModel()
	p := bytes.Repeat([]byte("d"), BlockSize+10)
	s.Write(1, 0, p, 1)
	m.write(1, 0, p, 1)
	s.Write(1, 5, []byte("overwrite"), 2)
	m.write(1, 5, []byte("overwrite"), 2)
	s.Pad(2, 1)
	m.pad(2, 1)
	s.SetVersion(2, 7)
	m.ver[2] = 7
	m.check(t, s)
	s.Close()
	m.check(t, openT(t, cfg))
}

func TestUsage(t *testing.T) {
	s := openT(t, testConfig(t.TempDir()))
	used, capacity, err := s.Usage()
	if err != nil || capacity <= 0 || used < 0 || used > capacity {
		t.Fatalf("Usage = %d, %d, %v", used, capacity, err)
	}
}

func TestClosed(t *testing.T) {
	s := openT(t, testConfig(t.TempDir()))
	s.Close()
	if err := s.Write(1, 0, []byte("x"), 1); !errors.Is(err, ErrClosed) {
		t.Fatalf("Write after Close = %v", err)
	}
	if err := s.Scrub(context.Background(), func(Handle, int, error) {}); err != nil {
		t.Fatalf("Scrub of an empty closed store = %v", err)
	}
}

func TestReadVersion(t *testing.T) {
	s := openT(t, testConfig(t.TempDir()))
	if err := s.Write(1, 0, []byte("hello"), 4); err != nil {
		t.Fatal(err)
	}
	b, info, err := s.ReadVersion(1, 1, 10)
	if err != nil || string(b) != "ello" || info != (ChunkInfo{Handle: 1, Version: 4, Length: 5}) {
		t.Fatalf("ReadVersion = %q, %+v, %v", b, info, err)
	}
	if _, _, err := s.ReadVersion(2, 0, 1); !errors.Is(err, ErrNotFound) {
		t.Fatalf("ReadVersion of a missing chunk = %v", err)
	}
}
