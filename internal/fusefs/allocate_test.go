package fusefs_test

import (
	"bytes"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestMountFallocate checks the fallocate modes the mount honours
// (docs/fuse.md): mode 0 grows the file over a hole, KEEP_SIZE changes
// nothing, PUNCH_HOLE and ZERO_RANGE zero bytes inside the file, and the
// modes it cannot honour are EOPNOTSUPP.
func TestMountFallocate(t *testing.T) {
	canMount(t)
	c := startCluster(t)
	mnt := mountProc(t, c)
	p := filepath.Join(mnt, "f")
	data := bytes.Repeat([]byte("x"), 3*4096)
	must(t, os.WriteFile(p, data, 0o644))
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	must(t, err)
	defer f.Close()
	const (
		keepSize  = 0x01
		punchHole = 0x02
		collapse  = 0x08
		zeroRange = 0x10
	)
	fd := int(f.Fd())
	// Punch the middle 4 KiB: zeros there, the size unchanged.
	must(t, syscall.Fallocate(fd, punchHole|keepSize, 4096, 4096))
	want := append(bytes.Repeat([]byte("x"), 4096), make([]byte, 4096)...)
	want = append(want, bytes.Repeat([]byte("x"), 4096)...)
	if got, err := os.ReadFile(p); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("after PUNCH_HOLE: %d bytes (%v), want x.. 0.. x.. of %d", len(got), err, len(want))
	}
	// KEEP_SIZE alone past the end: nothing changes.
	must(t, syscall.Fallocate(fd, keepSize, 0, 1<<20))
	if st, _ := os.Stat(p); st.Size() != int64(len(want)) {
		t.Fatalf("after KEEP_SIZE: size %d, want %d", st.Size(), len(want))
	}
	// ZERO_RANGE over the last byte and past the end grows the file.
	must(t, syscall.Fallocate(fd, zeroRange, int64(len(want))-1, 100))
	want = append(want[:len(want)-1], make([]byte, 100)...)
	if got, err := os.ReadFile(p); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("after ZERO_RANGE: %d bytes (%v), want %d", len(got), err, len(want))
	}
	// Mode 0 grows over a hole.
	must(t, syscall.Fallocate(fd, 0, 0, 1<<20))
	if st, _ := os.Stat(p); st.Size() != 1<<20 {
		t.Fatalf("after fallocate 0..1 MiB: size %d", st.Size())
	}
	got, err := os.ReadFile(p)
	must(t, err)
	if !bytes.Equal(got[:len(want)], want) || !bytes.Equal(got[len(want):], make([]byte, len(got)-len(want))) {
		t.Fatal("mode 0 changed bytes it should have left, or the hole is not zeros")
	}
	wantErrno(t, "COLLAPSE_RANGE", syscall.Fallocate(fd, collapse, 0, 4096), syscall.EOPNOTSUPP)
}
