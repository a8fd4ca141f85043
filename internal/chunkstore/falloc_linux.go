package chunkstore

import (
	"errors"
	"os"
	"syscall"
)

// fallocate allocates [off, off+n) of f (mode 0: the file grows if the
// range ends past EOF). File systems that cannot do it are not an error:
// the write then meets a full disk itself, which for a journaled write
// is after its commit point (recovery then retries the apply).
func fallocate(f *os.File, off, n int64) error {
	if n == 0 {
		return nil
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) {
		for {
			ferr = syscall.Fallocate(int(fd), 0, off, n)
			if !errors.Is(ferr, syscall.EINTR) {
				return
			}
		}
	}); err != nil {
		return err
	}
	if ferr == nil || errors.Is(ferr, syscall.EOPNOTSUPP) || errors.Is(ferr, syscall.ENOSYS) {
		return nil
	}
	return &os.PathError{Op: "fallocate", Path: f.Name(), Err: ferr}
}
