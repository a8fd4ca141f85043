package fusefs_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// sizeOp is one step of a size-change interleaving, done on a mount
// file and on a local file alike.
type sizeOp struct {
	name string
	do   func(f *os.File) error
}

func pwriteOp(off, n int64, b byte) sizeOp {
	return sizeOp{fmt.Sprintf("pwrite %#x+%#x", off, n), func(f *os.File) error {
		_, err := f.WriteAt(bytes.Repeat([]byte{b}, int(n)), off)
		return err
	}}
}

func truncOp(size int64) sizeOp {
	return sizeOp{fmt.Sprintf("ftruncate %#x", size), func(f *os.File) error { return f.Truncate(size) }}
}

// otruncOp opens the file again with O_TRUNC, through another
// descriptor (the one holding the buffered writes stays open).
func otruncOp() sizeOp {
	return sizeOp{"open O_TRUNC", func(f *os.File) error {
		g, err := os.OpenFile(f.Name(), os.O_WRONLY|os.O_TRUNC, 0)
		if err != nil {
			return err
		}
		return g.Close()
	}}
}

// appendOp writes n bytes through another descriptor opened with
// O_APPEND: they must land at the end left by the size changes before.
func appendOp(n int, b byte) sizeOp {
	return sizeOp{fmt.Sprintf("append %#x", n), func(f *os.File) error {
		g, err := os.OpenFile(f.Name(), os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			return err
		}
		if _, err := g.Write(bytes.Repeat([]byte{b}, n)); err != nil {
			g.Close()
			return err
		}
		return g.Close()
	}}
}

func fsyncOp() sizeOp { return sizeOp{"fsync", func(f *os.File) error { return f.Sync() }} }

func fallocOp(mode uint32, off, n int64) sizeOp {
	return sizeOp{fmt.Sprintf("fallocate %#x %#x+%#x", mode, off, n), func(f *os.File) error {
		return syscall.Fallocate(int(f.Fd()), mode, off, n)
	}}
}

// TestMountSizeChangeAfterBufferedWrite is issue 10's reproduction and
// its variants: a write still buffered by the mount (or pushed inside the
// known size, its size change owed to the ministry) must be cut by any
// size change that follows it. Each sequence runs on a mount file and on
// a local file; size and bytes must agree right after, after fsync, and
// after close and reopen.
func TestMountSizeChangeAfterBufferedWrite(t *testing.T) {
	canMount(t)
	c := startCluster(t)
	for k, extra := range [][]string{nil, {"--cache-dir", t.TempDir()}} {
		mnt := mountProc(t, c, extra...)
		local := t.TempDir()
		seqs := []struct {
			name string
			ops  []sizeOp
		}{
			{"issue10", []sizeOp{pwriteOp(0, 0x380fe, 'a'), fsyncOp(), pwriteOp(0x14360, 0xaf3a, 'b'), truncOp(0x19833)}},
			{"issue10-nosync", []sizeOp{pwriteOp(0, 0x380fe, 'a'), pwriteOp(0x14360, 0xaf3a, 'b'), truncOp(0x19833)}},
			{"cut-then-grow", []sizeOp{pwriteOp(0, 0x380fe, 'a'), fsyncOp(), pwriteOp(0x14360, 0xaf3a, 'b'), truncOp(0x19833), truncOp(0x30000)}},
			{"cut-to-zero", []sizeOp{pwriteOp(0, 0x380fe, 'a'), fsyncOp(), pwriteOp(0x100, 0x1000, 'b'), truncOp(0)}},
			{"punch", []sizeOp{pwriteOp(0, 0x380fe, 'a'), fsyncOp(), pwriteOp(0x14360, 0xaf3a, 'b'), fallocOp(0x03, 0x15000, 0x3000)}},
			{"zero-range", []sizeOp{pwriteOp(0, 0x380fe, 'a'), fsyncOp(), pwriteOp(0x14360, 0xaf3a, 'b'), fallocOp(0x10, 0x1f000, 0x30000)}},
			{"otrunc-other-fd", []sizeOp{pwriteOp(0, 0x380fe, 'a'), fsyncOp(), pwriteOp(0x14360, 0xaf3a, 'b'), otruncOp(), pwriteOp(0x10, 0x10, 'c')}},
			{"cut-then-append", []sizeOp{pwriteOp(0, 0x380fe, 'a'), fsyncOp(), pwriteOp(0x14360, 0xaf3a, 'b'), truncOp(0x19833), appendOp(0x1234, 'd')}},
			{"cut-then-write", []sizeOp{pwriteOp(0, 0x380fe, 'a'), fsyncOp(), pwriteOp(0x14360, 0xaf3a, 'b'), truncOp(0x19833), pwriteOp(0x1000, 0x10, 'c')}},
		}
		for i, s := range seqs {
			name := s.name
			if extra != nil {
				name += "-cachedir"
			}
			t.Run(name, func(t *testing.T) {
				mp, lp := filepath.Join(mnt, fmt.Sprintf("f%d-%d", k, i)), filepath.Join(local, fmt.Sprintf("f%d", i))
				mf, err := os.OpenFile(mp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
				must(t, err)
				defer mf.Close()
				lf, err := os.OpenFile(lp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
				must(t, err)
				defer lf.Close()
				for _, op := range s.ops {
					if err := op.do(lf); err != nil {
						t.Fatalf("local %s: %v", op.name, err)
					}
					if err := op.do(mf); err != nil {
						t.Fatalf("mount %s: %v", op.name, err)
					}
				}
				want, err := os.ReadFile(lp)
				must(t, err)
				check := func(when string) {
					t.Helper()
					st, err := mf.Stat()
					must(t, err)
					if st.Size() != int64(len(want)) {
						t.Errorf("%s: fstat size %#x, want %#x", when, st.Size(), len(want))
					}
					got := make([]byte, len(want)+4096)
					n, _ := mf.ReadAt(got, 0)
					if !bytes.Equal(got[:n], want) {
						t.Errorf("%s: read %#x bytes, want %#x; first difference at %#x", when, n, len(want), firstDiff(got[:n], want))
					}
				}
				check("right after")
				must(t, mf.Sync())
				check("after fsync")
				must(t, mf.Close())
				mf, err = os.OpenFile(mp, os.O_RDWR, 0)
				must(t, err)
				check("after close and reopen")
			})
		}
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
