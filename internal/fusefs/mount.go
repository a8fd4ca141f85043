package fusefs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/govfs/govfs/internal/diskcache"
	"github.com/govfs/govfs/internal/ids"
)

// Mounted is a served mount.
type Mounted struct {
	dir  string
	srv  *fuse.Server
	log  *slog.Logger
	done chan struct{}
}

// Mount mounts the cluster of cfg.Client on dir and serves it until it
// is unmounted (Unmount, `govfs umount`, fusermount3 -u, umount(8)).
func Mount(ctx context.Context, dir string, cfg Config) (*Mounted, error) {
	if err := CheckMountPoint(dir, cfg.NonEmpty); err != nil {
		return nil, fmt.Errorf("mount: %w", err)
	}
	fsys, err := New(cfg)
	if err != nil {
		return nil, err
	}
	root, err := fsys.prepare(ctx)
	if err != nil {
		return nil, fmt.Errorf("mount %s: %w", dir, err)
	}
	closeCache := fsys.closeCache
	opts := fsys.options()
	var raw fuse.RawFileSystem = changeFS{RawFileSystem: newLockFS(fs.NewNodeFS(root, opts)), n: &fsys.changes}
	if cfg.Metrics != nil {
		raw = newMetricsFS(raw, cfg.Metrics)
	}
	srv, err := fuse.NewServer(raw, dir, &opts.MountOptions)
	if err != nil {
		closeCache()
		return nil, fmt.Errorf("mount %s: %w", dir, err)
	}
	m := &Mounted{dir: dir, srv: srv, log: cfg.Logger, done: make(chan struct{})}
	go func() {
		defer close(m.done)
		srv.Serve()
		closeCache()
	}()
	if err := srv.WaitMount(); err != nil {
		_ = srv.Unmount()
		<-m.done
		return nil, fmt.Errorf("mount %s: %w", dir, err)
	}
	if cfg.ReadAhead > 0 {
		if err := setReadAhead(dir, cfg.ReadAhead); err != nil {
			cfg.Logger.Info("kernel read-ahead left at its default (sequential reads are slower); as root: echo N > /sys/class/bdi/<dev>/read_ahead_kb",
				slog.Any("err", err))
		}
	}
	return m, nil
}

// prepare readies the file system to serve: the root's attributes (read
// now, so a mount of an unreachable cluster fails early with the
// cluster's error) and, with CacheDir, the disk cache, whose journals a
// previous mount left are committed or reported before anything is
// served. It returns the root node.
func (f *FS) prepare(ctx context.Context) (*node, error) {
	rootAttr, err := f.c.GetAttr(ctx, ids.RootIno)
	if err != nil {
		return nil, fmt.Errorf("read the root directory: %w", err)
	}
	if f.cfg.CacheDir != "" {
		c, err := diskcache.Open(f.cfg.CacheDir, f.c.ClusterID(), f.cfg.CacheSize, f.log)
		if err != nil {
			return nil, err
		}
		f.cache = c
		committed, lost := f.recoverJournals(ctx)
		if committed+lost > 0 {
			f.log.Warn("client cache: writes a previous mount left unpushed", slog.Int("committed", committed),
				slog.Int("not_committed", lost), slog.String("kept_in", c.LostDir()))
		}
	}
	root := &node{fsys: f, ino: ids.RootIno}
	root.mu.attr = rootAttr
	return root, nil
}

// closeCache closes the disk cache, if any, once serving has stopped.
func (f *FS) closeCache() {
	if f.cache != nil {
		_ = f.cache.Close()
	}
}

// options are the go-fuse options the mount serves with.
func (f *FS) options() *fs.Options {
	entry, attr, neg := f.cfg.EntryTimeout, f.cfg.AttrTimeout, f.cfg.NegativeTimeout
	opts := &fs.Options{
		EntryTimeout:    &entry,
		AttrTimeout:     &attr,
		NegativeTimeout: &neg,
		// Modes are reported as stored, even 0.
		NullPermissions: true,
		RootStableAttr:  &fs.StableAttr{Ino: uint64(ids.RootIno)},
		MountOptions: fuse.MountOptions{
			AllowOther:   f.cfg.AllowOther,
			MaxWrite:     f.cfg.MaxWrite,
			MaxReadAhead: f.cfg.MaxWrite,
			// Reads and writes wait on the network: let the kernel keep
			// more of them in flight than the default 12.
			MaxBackground: 64,
			FsName:        f.cfg.FsName,
			Name:          "govfs",
			DirectMount:   f.cfg.DirectMount,
			// security.capability is asked for on every write; GovFS
			// stores no capabilities, so go-fuse answers it.
			IgnoreSecurityLabels: true,
			// fcntl and flock locks come to the mount, which makes them
			// cluster-wide (locks.go).
			EnableLocks: true,
			Debug:       f.cfg.Debug,
			Logger:      slog.NewLogLogger(f.cfg.Logger.Handler(), slog.LevelDebug),
		},
	}
	if f.cfg.DefaultPermissions {
		opts.MountOptions.Options = append(opts.MountOptions.Options, "default_permissions")
	}
	return opts
}

// setReadAhead sets the kernel's read-ahead of the mount on dir (its
// backing device's bdi), which needs root. FUSE cannot raise it in INIT:
// the kernel takes the smaller of that and the bdi's.
func setReadAhead(dir string, bytes int) error {
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil {
		return err
	}
	p := fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", unix.Major(st.Dev), unix.Minor(st.Dev))
	return os.WriteFile(p, []byte(fmt.Sprintf("%d\n", (bytes+1023)/1024)), 0)
}

// Done is closed when the mount is gone and serving has stopped.
func (m *Mounted) Done() <-chan struct{} { return m.done }

// Unmount unmounts and waits for serving to stop. When files are still
// open (EBUSY) it detaches the mount (lazy unmount): the mount point is
// free at once, and serving stops when the last open file is closed.
func (m *Mounted) Unmount() error {
	err := m.srv.Unmount()
	if err != nil {
		m.log.Info("unmount failed; detaching lazily (serving until open files close)", slog.String("dir", m.dir), slog.Any("err", err))
		if lerr := Unmount(m.dir, true); lerr != nil {
			return fmt.Errorf("unmount %s: %w (lazy: %v)", m.dir, err, lerr)
		}
	}
	<-m.done
	return nil
}

// Unmount unmounts the GovFS mount on dir (as `govfs umount`): with
// umount2(2) as root, else with fusermount3 -u (or fusermount -u). lazy
// detaches a busy mount.
func Unmount(dir string, lazy bool) error {
	if os.Geteuid() == 0 {
		flags := 0
		if lazy {
			flags = syscall.MNT_DETACH
		}
		if err := syscall.Unmount(dir, flags); err != nil {
			return busyError(dir, fmt.Errorf("umount %s: %w", dir, err))
		}
		return nil
	}
	args := []string{"-u"}
	if lazy {
		args = append(args, "-z")
	}
	args = append(args, dir)
	var errs []error
	for _, bin := range []string{"fusermount3", "fusermount"} {
		path, err := exec.LookPath(bin)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out, err := exec.Command(path, args...).CombinedOutput()
		if err != nil {
			return busyError(dir, fmt.Errorf("umount %s: %s: %w: %s", dir, bin, err, strings.TrimSpace(string(out))))
		}
		return nil
	}
	return fmt.Errorf("umount %s: not root and no fusermount3 (apt-get install fuse3): %w", dir, errors.Join(errs...))
}
