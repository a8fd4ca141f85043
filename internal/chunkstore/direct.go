package chunkstore

import (
	"errors"
	"os"
	"syscall"
	"unsafe"
)

// Large new chunk data is written with O_DIRECT (docs/dataplane.md,
// "Direct writes").
//
// Why: a chunk server's CPU went mostly to copying chunk data into the
// page cache. Profiled under a sequential write through the mount (3
// replicas on one 2-core machine, CPU-bound at 196 MB/s), 62 % of each
// chunk server's CPU was pwrite; buffered writes of new 4 MiB regions
// cost ~1 s of CPU per GB here, O_DIRECT ones ~0.03 s. The bytes are
// made durable by the fdatasync that follows either way (O_DIRECT alone
// does not flush the device cache or the allocation), so the crash
// contract is unchanged. A direct write also drops the range from the
// page cache, so a later buffered read sees it.
//
// Only writes that O_DIRECT takes as they are use it: at least
// directMin bytes, offset, length and buffer address aligned to
// directAlign. Others, and every write on a file system that refuses
// O_DIRECT (tmpfs), are buffered as before.

const (
	directMin   = 128 << 10
	directAlign = 4096
)

// writeDirect writes p at off of chunk h's data file with O_DIRECT when
// it can; done false (and no error) means the caller writes it buffered.
func (s *Store) writeDirect(h Handle, p []byte, off int64) (done bool, err error) {
	if len(p) < directMin || off%directAlign != 0 || len(p)%directAlign != 0 ||
		uintptr(unsafe.Pointer(unsafe.SliceData(p)))%directAlign != 0 || s.noDirect.Load() {
		return false, nil
	}
	f, err := os.OpenFile(s.path(h, sufData), os.O_WRONLY|syscall.O_DIRECT, 0)
	if err != nil {
		// Buffered instead: that needs no new descriptor (EMFILE under
		// load must not fail a write that worked before).
		if errors.Is(err, syscall.EINVAL) {
			s.noDirect.Store(true)
			s.log.Info("chunk store: the file system refuses O_DIRECT; data is written through the page cache")
		}
		return false, nil
	}
	defer f.Close()
	if n, err := f.WriteAt(p, off); err != nil {
		if errors.Is(err, syscall.EINVAL) {
			// Alignment this file system wants beyond directAlign: the
			// caller writes the whole range buffered.
			if n == 0 {
				s.noDirect.Store(true)
			}
			s.log.Info("chunk store: O_DIRECT write refused; data is written through the page cache",
				"err", err, "off", off, "len", len(p), "written", n)
			return false, nil
		}
		return false, err
	}
	s.direct.Add(1)
	return true, nil
}
