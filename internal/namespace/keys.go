package namespace

import (
	"encoding/binary"
	"fmt"
	"syscall"

	"github.com/govfs/govfs/internal/engine"
	"github.com/govfs/govfs/internal/ids"
)

// Key kinds; see doc.go for the layout.
const (
	kindInode        = 'i'
	kindDirent       = 'd'
	kindParent       = 'p'
	kindXattr        = 'x'
	kindResult       = 'r'
	kindClient       = 'k'
	kindIdle         = 't'
	kindReserve      = 'v'
	kindDirLease     = 'l'
	kindLeaseSession = 's'
)

// inodeRangesKey holds the granted inode ranges and the allocation cursor.
var inodeRangesKey = []byte("minodes")

func u64Key(kind byte, v uint64) []byte {
	return binary.BigEndian.AppendUint64(append(make([]byte, 0, 32), kind), v)
}

func inodeKey(ino ids.Ino) []byte   { return u64Key(kindInode, uint64(ino)) }
func parentKey(ino ids.Ino) []byte  { return u64Key(kindParent, uint64(ino)) }
func direntPrefix(p ids.Ino) []byte { return u64Key(kindDirent, uint64(p)) }
func xattrPrefix(ino ids.Ino) []byte {
	return u64Key(kindXattr, uint64(ino))
}

func direntKey(parent ids.Ino, name []byte) []byte {
	return append(direntPrefix(parent), name...)
}

func xattrKey(ino ids.Ino, name []byte) []byte {
	return append(xattrPrefix(ino), name...)
}

func resultPrefix(client uint64) []byte { return u64Key(kindResult, client) }
func resultKey(client, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(resultPrefix(client), seq)
}

func clientKey(client uint64) []byte { return u64Key(kindClient, client) }
func idleKey(t uint64, client uint64) []byte {
	return binary.BigEndian.AppendUint64(u64Key(kindIdle, t), client)
}

// timeKey maps an int64 time to a uint64 that sorts in the same order.
func timeKey(ns int64) uint64 { return uint64(ns) ^ (1 << 63) }

func prefixEnd(p []byte) []byte { return engine.PrefixEnd(p) }

// posixError is a POSIX failure of an operation. It is a distinct type,
// not a bare syscall.Errno, so that a storage error that happens to wrap an
// errno (EIO from the disk) is never mistaken for a command outcome: that
// would record a different result on the replica whose disk failed.
type posixError struct {
	errno syscall.Errno
	msg   string
}

func (e *posixError) Error() string { return "namespace: " + e.msg + ": " + e.errno.Error() }
func (e *posixError) Unwrap() error { return e.errno }

func errnof(errno syscall.Errno, format string, args ...any) error {
	return &posixError{errno: errno, msg: fmt.Sprintf(format, args...)}
}

// Limits.
const (
	maxNameLen      = 255
	maxSymlinkLen   = 4096
	maxXattrNameLen = 255
	maxXattrValue   = 64 << 10
)

// ValidateName checks a single path component: not empty, not "." or "..",
// no '/' or NUL, at most 255 bytes. The error wraps syscall.EINVAL or
// syscall.ENAMETOOLONG.
func ValidateName(name []byte) error {
	switch {
	case len(name) == 0:
		return errnof(syscall.EINVAL, "empty name")
	case len(name) > maxNameLen:
		return errnof(syscall.ENAMETOOLONG, "name of %d bytes (max %d)", len(name), maxNameLen)
	case string(name) == "." || string(name) == "..":
		return errnof(syscall.EINVAL, "name %q", name)
	}
	for _, c := range name {
		if c == '/' || c == 0 {
			return errnof(syscall.EINVAL, "name %q contains '/' or NUL", name)
		}
	}
	return nil
}

// validateXattrName mirrors Linux: empty → EINVAL, longer than 255 →
// ERANGE. NUL cannot be part of a C-string name.
func validateXattrName(name []byte) error {
	switch {
	case len(name) == 0:
		return errnof(syscall.EINVAL, "empty xattr name")
	case len(name) > maxXattrNameLen:
		return errnof(syscall.ERANGE, "xattr name of %d bytes (max %d)", len(name), maxXattrNameLen)
	}
	for _, c := range name {
		if c == 0 {
			return errnof(syscall.EINVAL, "xattr name %q contains NUL", name)
		}
	}
	return nil
}
