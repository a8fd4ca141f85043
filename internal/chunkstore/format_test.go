package chunkstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// toFormat1 rewrites chunk h's metadata file as format 1 stored it (one
// record, no slots) and drops its journal, as recovery left format-1
// chunks; the in-memory state follows, as if the store had been opened.
func toFormat1(s *Store, h Handle) error {
	s.mu.RLock()
	c := s.mu.chunks[h]
	s.mu.RUnlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := os.WriteFile(s.path(h, sufMeta), encodeMetaFormat(h, c.meta, formatV1), 0o644); err != nil {
		return err
	}
	c.format, c.slot = formatV1, 0
	return removeIfExists(s.path(h, sufJournal))
}

// metaV1 returns chunk metadata for p written at 0 with version v.
func metaV1(p []byte, v uint64) meta {
	m := meta{version: v, length: int64(len(p)), crcs: make([]uint32, numBlocks(int64(len(p))))}
	for b := range m.crcs {
		m.crcs[b] = crc32.Checksum(p[b*BlockSize:min((b+1)*BlockSize, len(p))], castagnoli)
	}
	return m
}

// TestFormat1Upgrade opens a store written in format 1 (by hand, byte for
// byte as that format specified): it is marked format 2, its chunks read
// as before, a committed format-1 journal is replayed, an unreadable one
// still marks its chunk damaged, and each chunk's next mutation rewrites
// its metadata file in format 2.
func TestFormat1Upgrade(t *testing.T) {
	dir := t.TempDir()
	chunks := filepath.Join(dir, "chunks")
	os.MkdirAll(chunks, 0o755)
	os.WriteFile(filepath.Join(dir, "store.json"),
		[]byte(`{"format":1,"cluster_id":"c1","chunk_size":1048576,"store_id":"0123456789abcdef0123456789abcdef"}`), 0o644)
	name := func(h Handle, suf string) string { return filepath.Join(chunks, h.String()+suf) }
	m := newModel()

	// Chunk 1: plain.
	p1 := pattern(1, 2*BlockSize+100)
	os.WriteFile(name(1, sufData), p1, 0o644)
	os.WriteFile(name(1, sufMeta), encodeMetaFormat(1, metaV1(p1, 3), formatV1), 0o644)
	m.write(1, 0, p1, 3)

	// Chunk 2: a committed format-1 overwrite, not applied yet.
	p2 := pattern(2, BlockSize+10)
	os.WriteFile(name(2, sufData), p2, 0o644)
	os.WriteFile(name(2, sufMeta), encodeMetaFormat(2, metaV1(p2, 1), formatV1), 0o644)
	m.write(2, 0, p2, 1)
	m.write(2, 100, []byte("over"), 2)
	mb := encodeMetaFormat(2, metaV1(m.data[2], 2), formatV1)
	jb := journalHeaderFormat(2, 1, 100, 4, len(mb), formatV1)
	jb = append(append(jb, mb...), "over"...)
	jb = binary.LittleEndian.AppendUint32(jb, crc32.Checksum(jb, castagnoli))
	os.WriteFile(name(2, sufJournal), jb, 0o644)

	// Chunk 3: a format-1 journal that does not check out (format 1
	// renamed journals into place after fsync: this is rot, not a tear).
	p3 := pattern(3, 50)
	os.WriteFile(name(3, sufData), p3, 0o644)
	os.WriteFile(name(3, sufMeta), encodeMetaFormat(3, metaV1(p3, 1), formatV1), 0o644)
	os.WriteFile(name(3, sufJournal), jb[:len(jb)-1], 0o644)

	s := openT(t, testConfig(dir))
	sj, _ := os.ReadFile(filepath.Join(dir, "store.json"))
	if !strings.Contains(string(sj), `"format": 2`) || !strings.Contains(string(sj), "0123456789abcdef0123456789abcdef") {
		t.Fatalf("store.json after opening a format-1 store: %s", sj)
	}
	var ce *CorruptError
	if _, err := s.Stat(3); !errors.As(err, &ce) {
		t.Fatalf("chunk with an unreadable format-1 journal: %v", err)
	}
	if err := s.Delete(3); err != nil {
		t.Fatal(err)
	}
	m.check(t, s)
	if _, err := os.Stat(name(2, sufJournal)); !os.IsNotExist(err) {
		t.Errorf("replayed format-1 journal kept: %v", err)
	}
	if fi, _ := os.Stat(name(1, sufMeta)); fi.Size() == int64(2*slotSize(testChunk)) {
		t.Errorf("chunk 1's metadata rewritten before any mutation")
	}

	// Mutations rewrite format-1 metadata files in format 2.
	if _, err := s.Append(1, []byte("appended"), 4); err != nil {
		t.Fatal(err)
	}
	m.write(1, int64(len(p1)), []byte("appended"), 4)
	if err := s.Write(1, 5, []byte("overwritten"), 5); err != nil {
		t.Fatal(err)
	}
	m.write(1, 5, []byte("overwritten"), 5)
	for _, h := range []Handle{1, 2} {
		if fi, err := os.Stat(name(h, sufMeta)); err != nil || fi.Size() != int64(2*slotSize(testChunk)) {
			t.Errorf("chunk %v metadata file is not format 2 after a mutation: %v", h, err)
		}
	}
	m.check(t, s)
	s.Close()
	s = openT(t, testConfig(dir))
	m.check(t, s)
	s.Close()

	// A store of a newer format is refused, saying so.
	os.WriteFile(filepath.Join(dir, "store.json"),
		[]byte(`{"format":3,"cluster_id":"c1","chunk_size":1048576,"store_id":"x"}`), 0o644)
	if _, err := Open(testConfig(dir)); err == nil || !strings.Contains(err.Error(), "format 3") {
		t.Fatalf("Open of a format-3 store = %v", err)
	}
}

// TestMetaSlots checks the two-slot file: the valid slot with the higher
// version wins, a torn slot loses to the other, two torn slots are damage.
func TestMetaSlots(t *testing.T) {
	ss := slotSize(testChunk)
	m1 := meta{version: 7, length: 10, crcs: []uint32{1}}
	m2 := meta{version: 8, length: 20, crcs: []uint32{2}}
	f := encodeMetaFile(5, m1, testChunk)
	if len(f) != 2*ss || ss%slotAlign != 0 {
		t.Fatalf("metadata file is %d bytes, slot %d", len(f), ss)
	}
	if got, _, slot, err := decodeMetaFile(5, f, testChunk); err != nil || got.version != 7 || slot != 0 {
		t.Fatalf("new file: version %d slot %d, %v", got.version, slot, err)
	}
	copy(f[ss:], encodeMeta(5, m2))
	if got, _, slot, err := decodeMetaFile(5, f, testChunk); err != nil || got.version != 8 || slot != 1 {
		t.Fatalf("after a slot write: version %d slot %d, %v", got.version, slot, err)
	}
	torn := bytes.Clone(f)
	torn[ss+20] ^= 1
	if got, _, slot, err := decodeMetaFile(5, torn, testChunk); err != nil || got.version != 7 || slot != 0 {
		t.Fatalf("torn slot 1: version %d slot %d, %v", got.version, slot, err)
	}
	torn[10] ^= 1
	if _, _, _, err := decodeMetaFile(5, torn, testChunk); err == nil {
		t.Fatal("two torn slots decoded")
	}
	if _, _, _, err := decodeMetaFile(6, f, testChunk); err == nil {
		t.Fatal("another chunk's metadata decoded")
	}
	// Slots of the largest chunk fit their records and stay aligned.
	if n := slotSize(MaxChunkSize); n%slotAlign != 0 || n < metaHeaderLen+4*(MaxChunkSize/BlockSize)+4 {
		t.Fatalf("slot size %d for the largest chunk", n)
	}
}

// TestSyncCounts pins the fsyncs (and fdatasyncs) each kind of mutation
// issues, so that a change adding one is noticed.
func TestSyncCounts(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.NoSync = false
	s := openT(t, cfg)
	p := pattern(1, 2*BlockSize)
	for _, c := range []struct {
		name string
		op   func() error
		want int64
	}{
		{"create with data (data, metadata file, directory)", func() error { return s.Write(1, 0, p, 1) }, 3},
		{"append (data, slot)", func() error { _, err := s.Append(1, p, 2); return err }, 2},
		{"fresh write with a gap (data, slot)", func() error { return s.Write(1, 6*BlockSize, p, 3) }, 2},
		{"first overwrite (journal, directory for the new journal, data, slot)", func() error { return s.Write(1, 100, p, 4) }, 4},
		{"overwrite (journal, data, slot)", func() error { return s.Write(1, 200, p, 5) }, 3},
		{"pad (slot)", func() error { return s.Pad(1, 6) }, 1},
		{"set version (slot)", func() error { return s.SetVersion(1, 7) }, 1},
		{"truncate grow (slot)", func() error { return s.Truncate(1, testChunk, 8) }, 1},
		{"truncate shrink (slot, data)", func() error { return s.Truncate(1, BlockSize+3, 9) }, 2},
		{"read", func() error { _, err := s.Read(1, 0, 10); return err }, 0},
		{"create by pad (metadata file, directory)", func() error { return s.Pad(2, 1) }, 2},
	} {
		before := s.syncs.Load()
		if err := c.op(); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := s.syncs.Load() - before; got != c.want {
			t.Errorf("%s: %d syncs, want %d", c.name, got, c.want)
		}
	}
}

// reportSyncs reports the syncs per operation of s from now until the
// returned function runs (for one of several stores: that store's).
func reportSyncs(b *testing.B, s *Store) func() {
	before := s.syncs.Load()
	return func() {
		if b.N > 0 {
			b.ReportMetric(float64(s.syncs.Load()-before)/float64(b.N), "syncs/op")
		}
	}
}

// FuzzDecode feeds arbitrary bytes to the decoders of every on-disk
// record: torn or rotten files must give errors, never panics, and what
// they accept must check out.
func FuzzDecode(f *testing.F) {
	m := meta{version: 3, length: BlockSize + 5, crcs: []uint32{1, 2}}
	f.Add(encodeMeta(1, m))
	f.Add(encodeMetaFile(1, m, testChunk))
	f.Add(buildJournal(1, 2, 7, []byte("data"), m))
	f.Add(encodeMetaFormat(1, m, formatV1))
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, _, _, err := decodeMetaFile(1, b, testChunk); err == nil && (got.length > testChunk || len(got.crcs) != numBlocks(got.length)) {
			t.Fatalf("accepted metadata file of length %d with %d checksums", got.length, len(got.crcs))
		}
		if j, jm, err := decodeJournal(1, b, testChunk); err == nil {
			if j.off < 0 || j.off+int64(len(j.data)) > jm.length || jm.length > testChunk {
				t.Fatalf("accepted journal range [%d, +%d) of length %d", j.off, len(j.data), jm.length)
			}
		}
		if got, err := decodeMeta(1, b, testChunk); err == nil && (got.length > testChunk || len(got.crcs) != numBlocks(got.length)) {
			t.Fatalf("accepted metadata of length %d with %d checksums", got.length, len(got.crcs))
		}
	})
}

// TestCleanMarker: Close marks a clean shutdown and Open consumes the
// mark, so only a store that was not closed pays the sync at Open.
func TestCleanMarker(t *testing.T) {
	dir := t.TempDir()
	clean := filepath.Join(dir, cleanFile)
	s := openT(t, testConfig(dir))
	if _, err := os.Stat(clean); !os.IsNotExist(err) {
		t.Fatalf("CLEAN while open: %v", err)
	}
	s.Write(1, 0, []byte("x"), 1)
	s.Close()
	if _, err := os.Stat(clean); err != nil {
		t.Fatalf("no CLEAN after Close: %v", err)
	}
	s = openT(t, testConfig(dir))
	if _, err := os.Stat(clean); !os.IsNotExist(err) {
		t.Fatalf("CLEAN kept by Open: %v", err)
	}
	crashed(s)
	if _, err := os.Stat(clean); !os.IsNotExist(err) {
		t.Fatalf("CLEAN after a crash: %v", err)
	}
}

// TestJournalKept: the journal stays allocated for small overwrites (so
// the next one rewrites it in place) and is cut after large ones.
func TestJournalKept(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.ChunkSize = 4 << 20
	s := openT(t, cfg)
	m := newModel()
	do := func(off int64, p []byte, v uint64) {
		t.Helper()
		if err := s.Write(1, off, p, v); err != nil {
			t.Fatal(err)
		}
		m.write(1, off, p, v)
	}
	size := func() int64 {
		fi, err := os.Stat(s.path(1, sufJournal))
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	do(0, pattern(1, 4<<20), 1)
	do(100, pattern(2, 1000), 2)
	if n := size(); n < 1000 {
		t.Fatalf("journal after a small overwrite is %d bytes", n)
	}
	do(5, pattern(3, journalKeep+1), 3)
	if n := size(); n != 0 {
		t.Fatalf("journal after a %d-byte overwrite is %d bytes, want it cut", journalKeep+1, n)
	}
	do(7, pattern(4, 10), 4)
	s.Close()
	s = openT(t, cfg)
	got, err := s.Read(1, 0, 4<<20)
	if err != nil || !bytes.Equal(got, m.data[1]) {
		t.Fatalf("chunk after reopen differs: %v", err)
	}
}
