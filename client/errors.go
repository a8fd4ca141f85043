package client

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"syscall"

	"github.com/govfs/govfs/internal/wire"
)

// ErrWrongCluster means a node answered for another cluster than the one
// this Client joined (or the Client's addresses point at two clusters).
var ErrWrongCluster = errors.New("govfs: node belongs to another cluster")

// Error is the error returned by the Client's file system calls. Err wraps
// a syscall.Errno for POSIX failures; see the package doc for the others.
type Error struct {
	// Op is the operation, e.g. "mkdir".
	Op string
	// Path is the path operated on, or a description such as "ino 5" or
	// "ino 5/name" for inode-level calls.
	Path string
	Err  error
}

func (e *Error) Error() string {
	return "govfs: " + e.Op + " " + strconv.Quote(e.Path) + ": " + e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

func opErr(op, path string, err error) error {
	if err == nil {
		return nil
	}
	return &Error{Op: op, Path: path, Err: err}
}

func inoPath(ino uint64) string { return "ino " + strconv.FormatUint(ino, 10) }

func inoNamePath(ino uint64, name string) string {
	return "ino " + strconv.FormatUint(ino, 10) + "/" + name
}

// Errno maps err to the one errno a POSIX caller (a FUSE layer, a CLI
// exit status) should see: a wrapped syscall.Errno as is, a cancelled
// context as EINTR, an expired one as ETIMEDOUT, nil as 0 and anything
// else as EIO.
func Errno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	var e syscall.Errno
	switch {
	case errors.As(err, &e):
		return e
	case errors.Is(err, context.Canceled):
		return syscall.EINTR
	case errors.Is(err, context.DeadlineExceeded):
		return syscall.ETIMEDOUT
	}
	return syscall.EIO
}

// errnoErr turns a server errno number into an error.
func errnoErr(n uint32) error {
	if n == 0 {
		return syscall.EIO
	}
	return syscall.Errno(n)
}

// finalStatusErr converts a status that ends the operation (ERRNO,
// INVALID, WRONG_CLUSTER, INTERNAL, unknown codes) into an error.
func finalStatusErr(st *wire.Status) error {
	switch st.GetCode() {
	case wire.Code_ERRNO:
		if m := st.GetMessage(); m != "" && st.GetErrno() != 0 {
			return &errnoMsg{errno: syscall.Errno(st.GetErrno()), msg: m}
		}
		return errnoErr(st.GetErrno())
	case wire.Code_INVALID:
		return fmt.Errorf("%w: server: %s", syscall.EINVAL, st.GetMessage())
	case wire.Code_WRONG_CLUSTER:
		return fmt.Errorf("%w: %s", ErrWrongCluster, st.GetMessage())
	case wire.Code_INTERNAL:
		return fmt.Errorf("%w: server internal error: %s", syscall.EIO, st.GetMessage())
	}
	return fmt.Errorf("%w: unexpected status %v: %s", syscall.EIO, st.GetCode(), st.GetMessage())
}
