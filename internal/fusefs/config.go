package fusefs

import (
	"errors"
	"fmt"
	"github.com/prometheus/client_golang/prometheus"
	"log/slog"
	"time"

	"github.com/govfs/govfs/client"
)

// Config configures a mount. Start from DefaultConfig and set Client.
type Config struct {
	// Client talks to the cluster; the mount does not close it.
	Client *client.Client
	// EntryTimeout and AttrTimeout are how long the kernel may trust a
	// name lookup and an inode's attributes without asking again.
	EntryTimeout, AttrTimeout time.Duration
	// NegativeTimeout is how long the kernel may remember that a name
	// does not exist (0: not at all, so another client's creates show at
	// once).
	NegativeTimeout time.Duration
	// AsyncDirs lets the mount take directory leases and answer
	// creates, unlinks and renames in a directory it changes often
	// itself, sending them to the ministry in batches (asyncdir.go,
	// docs/fuse.md "Asynchronous creates").
	AsyncDirs bool
	// DirCache lets the kernel keep a directory's listing while the
	// mount holds a read lease on the directory (dircache.go,
	// docs/fuse.md "Listings kept by the kernel").
	DirCache bool
	// WalkAhead asks for the read leases of the next files of a
	// directory in the background while a process opens them in the
	// order it listed them (walkahead.go).
	WalkAhead bool
	// ListAhead reads the first page of each subdirectory a listing
	// hands the kernel in the background, under this mount's directory
	// lease on it, so a process walking the tree finds it kept
	// (listahead.go).
	ListAhead bool
	// NewFileLeases asks for the read lease of each regular file the
	// mount created under a directory lease once its create was
	// applied, so its next open asks the ministry nothing
	// (newlease.go). Off by default: each grant is a lease request's
	// work at the minister, and bulk creation (cp -a, tar -x, git
	// clone) ran 20-27 % slower with it (docs/fuse.md).
	NewFileLeases bool
	// CreateLeases asks, with each batch of queued creates, for the new
	// regular files' read leases, granted in the batch's answer at no
	// request of their own (newlease.go takeNewLease; on by default).
	// NewFileLeases then asks only for the files that got none.
	CreateLeases bool
	// WriteBehind lets a close of a small file (its bytes inline in the
	// ministry) return before the write is committed: the write is
	// queued under a buffered write lease, which every other client's
	// open or change of the file recalls first (client.File.WriteBehind,
	// docs/leases.md "Write-behind"). fsync, O_SYNC and O_DSYNC still
	// wait for the commit. On by default.
	WriteBehind bool
	// MaxDirLeases bounds the directory leases the mount holds
	// (maxDirLeases when 0); beyond it the least recently used are given
	// back (dirleases.go).
	MaxDirLeases int
	// WriteBuffer is how many bytes of writes an open file buffers
	// before pushing them to the chunk servers.
	WriteBuffer int
	// MaxWrite is the largest read or write request the kernel sends.
	MaxWrite int
	// AllowOther lets users other than the one mounting use the mount
	// (allow_other; for a non-root user /etc/fuse.conf must allow it).
	AllowOther bool
	// DefaultPermissions makes the kernel check permission bits and
	// ownership (default_permissions). Without it nobody checks them.
	DefaultPermissions bool
	// DirectMount mounts with mount(2) instead of fusermount3; needs root
	// (CAP_SYS_ADMIN).
	DirectMount bool
	// Metrics, when set, receives the mount's per-operation figures
	// (govfs_mount_*; govfs mount --metrics serves them).
	Metrics prometheus.Registerer
	// NonEmpty allows mounting on a directory that has entries (they are
	// hidden while mounted); Mount refuses one otherwise.
	NonEmpty bool
	// FsName is the source shown by mount(8) and df(1).
	FsName string
	// Logger receives errors that have no errno and mount events.
	Logger *slog.Logger
	// Debug logs every FUSE request (go-fuse's debug output) to Logger.
	Debug bool
	// CacheDir, if set, is the mount's cache on local disk
	// (internal/diskcache): blocks read, validated by inode version, and
	// journals of buffered writes, which the next mount on the directory
	// commits or reports after a crash. CacheSize bounds the blocks
	// (diskcache.DefaultLimit when 0).
	CacheDir  string
	CacheSize int64
	// ReadAhead is the kernel's read-ahead for the mount, in bytes (0:
	// leave the kernel's default, 128 KiB). Setting it needs root.
	ReadAhead int
}

// Defaults used by DefaultConfig.
const (
	DefaultTimeout     = time.Second
	DefaultWriteBuffer = 8 << 20
	DefaultMaxWrite    = 1 << 20
	// DefaultReadAhead: with the kernel's 128 KiB a sequential reader
	// waits a chunk-server round trip every 128 KiB (≈120 MB/s here);
	// 8 MiB keeps enough requests in flight (≈650 MB/s, docs/benchmarks.md).
	DefaultReadAhead = 8 << 20
)

// DefaultConfig returns a Config with every field but Client set.
func DefaultConfig() Config {
	return Config{
		EntryTimeout: DefaultTimeout,
		AttrTimeout:  DefaultTimeout,
		AsyncDirs:    true,
		DirCache:     true,
		CreateLeases: true,
		WriteBehind:  true,
		WalkAhead:    true,
		ListAhead:    true,
		WriteBuffer:  DefaultWriteBuffer,
		MaxWrite:     DefaultMaxWrite,
		FsName:       "govfs",
		ReadAhead:    DefaultReadAhead,
		Logger:       slog.New(slog.DiscardHandler),
	}
}

// Validate reports the first bad field and what to do about it.
func (c Config) Validate() error {
	switch {
	case c.Client == nil:
		return errors.New("fusefs: Config.Client is nil; connect a client.Client first")
	case c.EntryTimeout < 0 || c.AttrTimeout < 0 || c.NegativeTimeout < 0:
		return fmt.Errorf("fusefs: timeouts must not be negative (entry %v, attr %v, negative %v)", c.EntryTimeout, c.AttrTimeout, c.NegativeTimeout)
	case c.WriteBuffer < 4096:
		return fmt.Errorf("fusefs: Config.WriteBuffer = %d is below 4096 bytes", c.WriteBuffer)
	case c.MaxWrite < 4096 || c.MaxWrite > 1<<20:
		return fmt.Errorf("fusefs: Config.MaxWrite = %d must be 4 KiB to 1 MiB", c.MaxWrite)
	case c.MaxDirLeases < 0 || c.MaxDirLeases > maxDirLeasesCap:
		return fmt.Errorf("fusefs: Config.MaxDirLeases = %d must be 0 (the default, %d) to %d: the minister grants a client at most 65,536 leases, files' included", c.MaxDirLeases, maxDirLeases, maxDirLeasesCap)
	case c.ReadAhead < 0:
		return fmt.Errorf("fusefs: Config.ReadAhead = %d is negative", c.ReadAhead)
	case c.CacheSize < 0:
		return fmt.Errorf("fusefs: Config.CacheSize = %d is negative", c.CacheSize)
	case c.Logger == nil:
		return errors.New("fusefs: Config.Logger is nil; use slog.New(slog.DiscardHandler) to drop logs")
	}
	return nil
}
