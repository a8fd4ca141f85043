package chunkstore

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"syscall"
	"testing"
)

func (m *model) truncate(h Handle, n int64, v uint64) {
	d := m.data[h]
	if n <= int64(len(d)) {
		d = d[:n:n]
	} else {
		d = append(d, make([]byte, n-int64(len(d)))...)
	}
	m.data[h], m.ver[h] = d, v
}

// TestTruncate shrinks and grows chunks and checks, in process (where no
// recovery tidies up) and after reopening, that cut bytes never come
// back: writes and appends beyond the new length see zeros in the gap.
func TestTruncate(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, testConfig(dir))
	m := newModel()
	r := rand.New(rand.NewPCG(5, 6))
	do := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	full := randBytes(r, 5*BlockSize+333)
	do("write", s.Write(1, 0, full, 1))
	m.write(1, 0, full, 1)

	do("truncate inside a block", s.Truncate(1, 2*BlockSize+10, 2))
	m.truncate(1, 2*BlockSize+10, 2)
	m.check(t, s)
	if fi, err := os.Stat(s.path(1, sufData)); err != nil || fi.Size() > 2*BlockSize+10 {
		t.Fatalf("data file after truncate: %v, %v", fi.Size(), err)
	}
	// A write past the new length leaves a gap that must read as zeros,
	// not as the bytes that were cut.
	do("gap write", s.Write(1, 4*BlockSize, []byte("tail"), 3))
	m.write(1, 4*BlockSize, []byte("tail"), 3)
	m.check(t, s)

	do("truncate to zero", s.Truncate(1, 0, 4))
	m.truncate(1, 0, 4)
	off, err := s.Append(1, []byte("first"), 5)
	if err != nil || off != 0 {
		t.Fatalf("append after truncate to 0 = %d, %v", off, err)
	}
	m.write(1, 0, []byte("first"), 5)
	do("grow", s.Truncate(1, 3*BlockSize+1, 6))
	m.truncate(1, 3*BlockSize+1, 6)
	m.check(t, s)
	do("same length", s.Truncate(1, 3*BlockSize+1, 7))
	m.truncate(1, 3*BlockSize+1, 7)
	do("grow to the chunk size", s.Truncate(1, testChunk, 8))
	m.truncate(1, testChunk, 8)
	do("cut at a block boundary", s.Truncate(1, BlockSize, 9))
	m.truncate(1, BlockSize, 9)
	m.check(t, s)

	// A padded chunk has no data beyond what was written.
	do("pad", s.Pad(2, 1))
	m.pad(2, 1)
	do("truncate a padded chunk", s.Truncate(2, 100, 2))
	m.truncate(2, 100, 2)
	m.check(t, s)

	s.Close()
	s = openT(t, testConfig(dir))
	m.check(t, s)
}

func TestTruncateBadInput(t *testing.T) {
	s := openT(t, testConfig(t.TempDir()))
	if err := s.Write(1, 0, pattern(1, 3*BlockSize), 4); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		n    int64
		v    uint64
		h    Handle
		want error
	}{
		{"negative", -1, 5, 1, syscall.EINVAL},
		{"past the chunk size", testChunk + 1, 5, 1, syscall.EFBIG},
		{"stale version", 10, 4, 1, ErrStaleVersion},
		{"missing chunk", 10, 5, 2, ErrNotFound},
	} {
		if err := s.Truncate(c.h, c.n, c.v); !errors.Is(err, c.want) {
			t.Errorf("%s: Truncate = %v, want %v", c.name, err, c.want)
		}
	}
	if ci, _ := s.Stat(1); ci.Version != 4 || ci.Length != 3*BlockSize {
		t.Fatalf("refused truncates changed the chunk: %+v", ci)
	}

	// Cutting inside a corrupt block is refused; cutting it off whole is not.
	flipByte(t, s, 1, BlockSize+5)
	var ce *CorruptError
	if err := s.Truncate(1, BlockSize+100, 5); !errors.As(err, &ce) || ce.Block != 1 {
		t.Fatalf("truncate inside a corrupt block = %v", err)
	}
	if err := s.Truncate(1, BlockSize, 5); err != nil {
		t.Fatalf("truncate cutting the corrupt block off: %v", err)
	}
	if got, err := s.Read(1, 0, testChunk); err != nil || !bytes.Equal(got, pattern(1, 3*BlockSize)[:BlockSize]) {
		t.Fatalf("read after cutting the corrupt block: %v", err)
	}
}
