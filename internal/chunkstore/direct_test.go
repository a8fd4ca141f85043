package chunkstore

import (
	"bytes"
	"testing"
	"unsafe"
)

// alignedBytes returns n bytes starting at a directAlign boundary.
func alignedBytes(n int) []byte {
	raw := make([]byte, n+directAlign)
	skip := (directAlign - int(uintptr(unsafe.Pointer(&raw[0]))%directAlign)) % directAlign
	return raw[skip : skip+n]
}

// TestDirectWrites: large aligned new data goes through O_DIRECT (where
// the file system takes it), other writes through the page cache; both
// read back, also after a reopen, and an overwrite of direct-written
// bytes is seen at once.
func TestDirectWrites(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(dir)
	cfg.NoSync = false
	s := openT(t, cfg)
	m := newModel()
	big := alignedBytes(directMin * 2)
	for i := range big {
		big[i] = byte(i * 7)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(s.Write(1, 0, big, 1))
	m.write(1, 0, big, 1)
	direct := s.direct.Load()
	if direct == 0 && !s.noDirect.Load() {
		t.Fatal("an aligned 256 KiB write of new data did not go through O_DIRECT")
	}
	t.Logf("direct writes: %d (file system refuses O_DIRECT: %v)", direct, s.noDirect.Load())
	// Unaligned offset, short length, unaligned buffer: buffered.
	must(s.Write(1, int64(len(big))+1, big[:directMin], 2))
	m.write(1, int64(len(big))+1, big[:directMin], 2)
	must(s.Write(2, 0, []byte("small"), 1))
	m.write(2, 0, []byte("small"), 1)
	odd := alignedBytes(directMin + 1)[1:]
	copy(odd, bytes.Repeat([]byte("u"), len(odd)))
	must(s.Write(3, 0, odd, 1))
	m.write(3, 0, odd, 1)
	if got := s.direct.Load(); got != direct {
		t.Fatalf("%d more direct writes for unaligned ones", got-direct)
	}
	// An overwrite through the page cache right after: read back at once.
	must(s.Write(1, 4096, []byte("overwritten"), 3))
	m.write(1, 4096, []byte("overwritten"), 3)
	m.check(t, s)
	s.Close()
	m.check(t, openT(t, cfg))
}
