package fusefs

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	"github.com/govfs/govfs/client"
	"github.com/govfs/govfs/internal/diskcache"
	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/posix"
	"github.com/govfs/govfs/internal/wire"
)

// hiddenPrefix starts the names that unlinked-but-open files get (see
// Unlink); readdir does not list them.
const hiddenPrefix = ".govfs-hidden-"

// FS is one mount's file system: the root node and what every node
// shares.
type FS struct {
	cfg Config
	c   *client.Client
	log *slog.Logger

	statfs statfsCache
	// changes counts this mount's requests that may change something,
	// as they start and end (changeFS; keptpage.go).
	changes atomic.Uint64
	// removals records the inodes this mount's unlinks and rmdirs
	// change, which do not count in changes (keptpage.go).
	removals removalLog
	// aheadPages bounds the first pages read ahead kept (listahead.go).
	aheadPages aheadPages
	// lookupsLinearUntil (Unix ns): every lookup is linearizable until
	// then, after a revoke reached a file's node the kernel had forgotten
	// (leaseRevoked): that node has no parent to mark.
	lookupsLinearUntil atomic.Int64
	// leases are the nodes holding a read lease (lease.go).
	leases leaseSet
	// listLeases are the directories holding a read lease for their
	// listings (dircache.go).
	listLeases leaseSet
	// dirLeases are the directories in use holding a directory lease,
	// least recently used first (dirleases.go).
	dirLeases leaseSet
	// kept are the directory leases kept past their nodes' forget
	// (keptdirs.go), keptFiles the files' read leases (keptfiles.go).
	kept      keptDirs
	keptFiles keptFiles
	// cache is the local disk cache (--cache-dir), nil without one.
	cache *diskcache.Cache
	// walkJobs feeds the walk-ahead's workers, started once
	// (walkahead.go).
	walkJobs  chan walkJob
	walkStart sync.Once
	// listOrder is the order directories were listed in (walkahead.go).
	listOrder listOrder
	// walkAsked counts the leases the walk-ahead asked for; leasedOpens
	// the opens that found a valid lease with the file's attributes and
	// asked the ministry nothing; settledWrites the releases after which
	// the attributes the writes were answered with stood for the file
	// (settleWrites).
	walkAsked, leasedOpens, settledWrites prometheus.Counter
	// newFileLeases counts the leases asked for files this mount
	// created (newlease.go), newLeaseSlots bounds those in flight.
	newFileLeases prometheus.Counter
	newLeaseSlots chan struct{}
	// keptPages counts first pages of listings served again
	// (keptpage.go).
	keptPages prometheus.Counter
	// pagesListedAhead counts first pages read ahead of a walker
	// (listahead.go).
	pagesListedAhead prometheus.Counter
	// leasedLookups counts lookups answered under the child's read lease
	// (leasedLookup); adoptedLeases the read leases a new node took over
	// from a forgotten one (keptfiles.go).
	leasedLookups, adoptedLeases prometheus.Counter
	// walkStored counts the bytes the walk-ahead stored in the kernel's
	// page cache, walkLookups the lookups it answered.
	walkStored, walkLookups prometheus.Counter
	// dirLeasesEvicted counts the directory leases given back beyond
	// the bound (dirleases.go).
	dirLeasesEvicted prometheus.Counter
	// dirEvictRetry: a retry of the evictions is scheduled
	// (retryDirEvictions).
	dirEvictRetry atomic.Bool
}

// New returns the file system of a mount; Mount serves it.
func New(cfg Config) (*FS, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Client.SetNewFileLeases(cfg.CreateLeases)
	f := &FS{cfg: cfg, c: cfg.Client, log: cfg.Logger, listLeases: leaseSet{max: maxListLeases},
		dirLeases: leaseSet{max: cmp.Or(cfg.MaxDirLeases, maxDirLeases), maxBytes: 1 << 62},
		dirLeasesEvicted: prometheus.NewCounter(prometheus.CounterOpts{Name: "govfs_mount_dir_leases_evicted_total",
			Help: "Directory leases the mount gave back, least recently used first, to stay within --max-dir-leases."}),
		walkAsked: prometheus.NewCounter(prometheus.CounterOpts{Name: "govfs_mount_walk_ahead_leases_total",
			Help: "Read leases the mount asked for ahead of a process opening a directory's files in listing order."}),
		leasedOpens: prometheus.NewCounter(prometheus.CounterOpts{Name: "govfs_mount_leased_opens_total",
			Help: "Opens answered from a valid read lease, without a request to the ministry."}),
		leasedLookups: prometheus.NewCounter(prometheus.CounterOpts{Name: "govfs_mount_leased_lookups_total",
			Help: "Lookups answered under the read lease of the file they name, which was granted with that name naming it, without a request to the ministry."}),
		adoptedLeases: prometheus.NewCounter(prometheus.CounterOpts{Name: "govfs_mount_adopted_leases_total",
			Help: "Read leases kept past the kernel's forget of a file and taken over by its next node."}),
		keptPages: prometheus.NewCounter(prometheus.CounterOpts{Name: "govfs_mount_listing_pages_kept_total",
			Help: "Listings whose first page was served again to the next opendir within the attribute timeout, under the mount's directory lease, without a request to the ministry."}),
		pagesListedAhead: prometheus.NewCounter(prometheus.CounterOpts{Name: "govfs_mount_listing_pages_ahead_total",
			Help: "First pages of subdirectories' listings read in the background while a listing handed them to the kernel, kept for the opendir of a process walking the tree."}),
		newFileLeases: prometheus.NewCounter(prometheus.CounterOpts{Name: "govfs_mount_new_file_leases_total",
			Help: "Read leases the mount took on regular files it created: granted with the batch of queued creates that made them (--create-leases), or asked for once their creates were applied (--new-file-leases)."}),
		newLeaseSlots: make(chan struct{}, newLeaseInFlight),
		settledWrites: prometheus.NewCounter(prometheus.CounterOpts{Name: "govfs_mount_settled_writes_total",
			Help: "Closes of a written file after which its attributes were known under the mount's read lease (the next open asks nothing)."}),
		walkStored: prometheus.NewCounter(prometheus.CounterOpts{Name: "govfs_mount_walk_ahead_stored_bytes_total",
			Help: "Bytes of small files read ahead under their leases into the kernel's page cache."}),
		walkLookups: prometheus.NewCounter(prometheus.CounterOpts{Name: "govfs_mount_walk_lookups_total",
			Help: "Lookups answered from a listing read under the directory's listing lease during a walk, without a request to the ministry."}),
	}
	if cfg.Metrics != nil {
		if err := cfg.Metrics.Register(f.walkAsked); err != nil {
			return nil, fmt.Errorf("fusefs: register metrics: %w", err)
		}
		if err := cfg.Metrics.Register(f.leasedOpens); err != nil {
			return nil, fmt.Errorf("fusefs: register metrics: %w", err)
		}
		requests := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "govfs_mount_metadata_requests_total",
			Help: "Requests the mount made to the metadata service (a call retried counts once; lease renewals are not counted)."},
			func() float64 { return float64(f.c.RouteStats().Calls) })
		dirLeases := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "govfs_mount_dir_leases",
			Help: "Directories in use the mount counts as holding a directory lease (bounded by --max-dir-leases)."},
			func() float64 { return float64(f.dirLeases.len()) })
		behind := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "govfs_mount_writes_behind_total",
			Help: "Small files' writes answered at their close and queued under a buffered write lease (--write-behind), committed later in batches."},
			func() float64 { return float64(f.c.WritesBehind()) })
		for _, c := range []prometheus.Collector{f.walkStored, f.walkLookups, f.settledWrites, f.newFileLeases, f.leasedLookups, f.adoptedLeases, f.keptPages, f.pagesListedAhead, requests, dirLeases, f.dirLeasesEvicted, behind} {
			if err := cfg.Metrics.Register(c); err != nil {
				return nil, fmt.Errorf("fusefs: register metrics: %w", err)
			}
		}
	}
	return f, nil
}

// node is one GovFS inode as go-fuse knows it.
type node struct {
	fs.Inode
	fsys *FS
	ino  ids.Ino
	// locks are the file locks processes hold through this mount
	// (locks.go).
	locks nodeLocks
	// dir is a directory's asynchronous state (asyncdir.go).
	dir dirState
	// list is a directory's kernel listing cache state (dircache.go).
	list listState
	// walk is a directory's listing order for the walk-ahead
	// (walkahead.go).
	walk walkState
	// store orders a walk-ahead store into the kernel's page cache
	// before a revoke's or an eviction's drop (prefetchData).
	store sync.Mutex

	mu struct {
		sync.Mutex
		// attr is the last attributes read or returned (for a parent's
		// setgid bit and gid, and open's change check); attrAt is when
		// (setAttr).
		attr   *wire.Attr
		attrAt time.Time
		// openVersion is the inode version at the last open: the page
		// cache is kept only when an open finds it unchanged.
		openVersion uint64
		// handles are this inode's open files on this mount; opens
		// counts the descriptors ever opened (settleWrites).
		handles map[*handle]struct{}
		opens   uint64
		// hidden is the name the file was renamed to when it was
		// unlinked while open ("" if not); the last release removes it.
		hidden       string
		hiddenParent ids.Ino
		// lease is the read lease held on the file (lease.go), nil if
		// none; cacheLease is the lease under which the kernel's page
		// cache was last known good; leaseAttr says attr was read under
		// lease and nothing on this mount wrote since.
		lease, cacheLease *client.Lease
		leaseAttr         bool
		// settledRead is what an open would read of a small inline file
		// after this mount's writes (client.File.SettledRead), kept with
		// the lease while attr is its attributes: the next open's File
		// reads those bytes rather than asking for them. nil: none.
		settledRead *wire.ReadResponse
		// heir is the node made after the kernel forgot this one that
		// took its read lease over (keptfiles.go), nil if none; origin
		// is the node a lease taken over was granted to (its revokes
		// arrive there); adoptChecked: adoptOnce ran.
		heir, origin *node
		adoptChecked bool
		// localChanges counts this mount's changes to the file (writes,
		// size and attribute changes, allocations): attributes read
		// while it moved may miss one, so they are not taken as current
		// under the lease.
		localChanges uint64
		// cacheVersion is the inode version the disk cache's blocks may
		// be used for (that of the last open); 0 once this mount changed
		// the file or lost its read lease, until the next open.
		cacheVersion uint64
		// changes counts this mount's changes of the file's bytes.
		changes uint64
		// linearize: another client changed the file (a revoke said so,
		// or a lock was taken): the next getattr reads linearizably, as
		// a clerk may not have applied the change yet.
		linearize bool
		// busy counts this mount's opens and truncates of the file under
		// way: a walk-ahead store of its bytes stays off meanwhile
		// (fenceStores).
		busy int
		// prefetching is closed when the walk-ahead's queued or running
		// fetch of the file ends (nil: none; waitPrefetch).
		prefetching chan struct{}
		// leaseAtRelease: the file's create (made here) was applied
		// while it was open; its lease is asked for, in leaseCtx's
		// name, at its last release (newlease.go).
		leaseAtRelease bool
		leaseCtx       context.Context
		// lookupsLinearUntil: a directory whose entries another client
		// is changing (a revoke said so); its lookups until then are
		// linearizable (linearizeLookups).
		lookupsLinearUntil time.Time
	}
}

var (
	_ fs.InodeEmbedder      = (*node)(nil)
	_ fs.NodeAccesser       = (*node)(nil)
	_ fs.NodeLookuper       = (*node)(nil)
	_ fs.NodeGetattrer      = (*node)(nil)
	_ fs.NodeSetattrer      = (*node)(nil)
	_ fs.NodeMkdirer        = (*node)(nil)
	_ fs.NodeCreater        = (*node)(nil)
	_ fs.NodeOpener         = (*node)(nil)
	_ fs.NodeUnlinker       = (*node)(nil)
	_ fs.NodeRmdirer        = (*node)(nil)
	_ fs.NodeRenamer        = (*node)(nil)
	_ fs.NodeLinker         = (*node)(nil)
	_ fs.NodeSymlinker      = (*node)(nil)
	_ fs.NodeReadlinker     = (*node)(nil)
	_ fs.NodeMknoder        = (*node)(nil)
	_ fs.NodeStatfser       = (*node)(nil)
	_ fs.NodeGetxattrer     = (*node)(nil)
	_ fs.NodeSetxattrer     = (*node)(nil)
	_ fs.NodeListxattrer    = (*node)(nil)
	_ fs.NodeRemovexattrer  = (*node)(nil)
	_ fs.NodeOpendirHandler = (*node)(nil)
)

// Root returns the root node of the mount, ready for fs.NewNodeFS.
func (f *FS) Root() fs.InodeEmbedder { return &node{fsys: f, ino: ids.RootIno} }

// bg detaches ctx from the kernel's interrupts (see the package doc); the
// client bounds every call by its OpTimeout.
func bg(ctx context.Context) context.Context { return context.WithoutCancel(ctx) }

// errno converts a client error to the errno the kernel gets, logging
// those that carry none.
func (f *FS) errno(op string, err error) syscall.Errno {
	if err == nil {
		return 0
	}
	e := client.Errno(err)
	switch e {
	case syscall.EIO:
		f.log.Warn("fuse operation failed", slog.String("op", op), slog.Any("err", err))
	case syscall.EINVAL, syscall.ESTALE, syscall.EFBIG:
		// Not the caller's everyday errors: say why.
		f.log.Info("fuse operation refused", slog.String("op", op), slog.Any("err", err), slog.String("why", client.ErrorDetail(err)))
	case syscall.EACCES:
		// An everyday answer to an open or a lookup, but the kernel
		// checked the open of a file that is read or written: a chunk
		// server refused the mount's token, which the log must explain.
		switch op {
		case "read", "write", "flush", "fsync", "sync", "fallocate":
			f.log.Warn("fuse operation refused", slog.String("op", op), slog.Any("err", err))
		}
	}
	return e
}

// caller returns the credentials of the process behind a request.
func caller(ctx context.Context) (uid, gid uint32) {
	if c, ok := fuse.FromContext(ctx); ok {
		return c.Uid, c.Gid
	}
	return 0, 0
}

// typeBits maps a GovFS file type to S_IF* bits.
func typeBits(t wire.FileType) uint32 {
	switch t {
	case wire.FileType_DIRECTORY:
		return syscall.S_IFDIR
	case wire.FileType_SYMLINK:
		return syscall.S_IFLNK
	case wire.FileType_FIFO:
		return syscall.S_IFIFO
	case wire.FileType_SOCKET:
		return syscall.S_IFSOCK
	case wire.FileType_CHAR_DEVICE:
		return syscall.S_IFCHR
	case wire.FileType_BLOCK_DEVICE:
		return syscall.S_IFBLK
	}
	return syscall.S_IFREG
}

func splitNs(ns int64) (uint64, uint32) {
	if ns < 0 {
		return 0, 0
	}
	return uint64(ns / 1e9), uint32(ns % 1e9)
}

// fillAttr converts GovFS attributes for the kernel.
func fillAttr(a *wire.Attr, out *fuse.Attr) {
	out.Ino = a.GetIno()
	out.Size = a.GetSize()
	out.Blocks = (a.GetSize() + 511) / 512
	out.Blksize = 1 << 20
	out.Mode = typeBits(a.GetType()) | a.GetMode()&0o7777
	out.Nlink = a.GetNlink()
	out.Rdev = uint32(a.GetRdev())
	out.Uid, out.Gid = a.GetUid(), a.GetGid()
	out.Atime, out.Atimensec = splitNs(a.GetAtimeNs())
	out.Mtime, out.Mtimensec = splitNs(a.GetMtimeNs())
	out.Ctime, out.Ctimensec = splitNs(a.GetCtimeNs())
}

// setAttr remembers a and fills out, covering the end of writes still
// buffered on this mount.
func (n *node) setAttr(a *wire.Attr, out *fuse.Attr) {
	n.mu.Lock()
	if n.mu.attr != nil && a.GetVersion() < n.mu.attr.GetVersion() {
		a = n.mu.attr // a slower, older answer: keep the newer one
	} else if n.mu.attr == nil || a.GetVersion() != n.mu.attr.GetVersion() {
		// Not the attributes read under the lease: getattr must not
		// serve them from the lease cache.
		n.mu.leaseAttr = false
		n.mu.localChanges++
	}
	n.mu.attr, n.mu.attrAt = a, time.Now()
	end := n.dirtyEndLocked()
	unlinked := n.mu.hidden != ""
	n.mu.Unlock()
	fillAttr(a, out)
	if unlinked && out.Nlink > 0 {
		// Unlinked while open: only the hidden name keeps it, which
		// POSIX's fstat must not count (st_nlink 0).
		out.Nlink--
	}
	if end > out.Size {
		out.Size = end
		out.Blocks = (end + 511) / 512
	}
}

// parentNode returns the directory node n was found in (nil: none
// known), whose queued changes hold n's create.
func (n *node) parentNode() *node {
	if _, p := n.Parent(); p != nil {
		pn, _ := p.Operations().(*node)
		return pn
	}
	return nil
}

// childAttrChanging notes that this mount is about to change name's
// link in n (unlink, rename from or onto it): the inode's nlink, ctime
// and version move, so the attributes its node holds under its read
// lease are no longer current (the minister revokes only other clients'
// leases), and a release settling its writes meanwhile must not take
// older ones (settleWrites).
func (n *node) childAttrChanging(name string) {
	if in := n.GetChild(name); in != nil {
		if ch, ok := in.Operations().(*node); ok {
			ch.forgetAttr()
		}
	}
}

// recentDirAttr says whether n is a directory whose attributes the
// mount learnt within the attribute timeout (a lookup or listing just
// brought them): as current as what the kernel itself trusts.
func (n *node) recentDirAttr() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.mu.attr != nil && n.mu.attr.GetType() == wire.FileType_DIRECTORY && time.Since(n.mu.attrAt) < n.fsys.cfg.AttrTimeout
}

func (n *node) cachedAttr() *wire.Attr {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.mu.attr
}

// child returns the Inode for attributes a (an existing one for a known
// inode: hard links share it) and fills out.
func (n *node) child(ctx context.Context, a *wire.Attr, out *fuse.EntryOut) *fs.Inode {
	ch := &node{fsys: n.fsys, ino: ids.Ino(a.GetIno())}
	in := n.NewInode(ctx, ch, fs.StableAttr{Mode: typeBits(a.GetType()), Ino: a.GetIno()})
	if cn, ok := in.Operations().(*node); ok {
		cn.setAttr(a, &out.Attr)
	} else {
		fillAttr(a, &out.Attr)
	}
	return in
}

// openChild returns the known child name if it has open files on this
// mount, else nil.
func (n *node) openChild(name string) *node {
	in := n.GetChild(name)
	if in == nil {
		return nil
	}
	if ch, ok := in.Operations().(*node); ok && ch.open() {
		return ch
	}
	return nil
}

func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ctx = n.fsys.forUser(ctx)
	n.noteChildMiss()
	if n.fsys.cfg.AsyncDirs {
		n.dir.mu.Lock()
		if n.asyncLocked() {
			e, ok := n.dir.names[name]
			if !ok {
				// The listing is complete under the directory lease.
				n.dir.mu.Unlock()
				if len(name) > client.MaxNameLen {
					return nil, syscall.ENAMETOOLONG
				}
				return nil, syscall.ENOENT
			}
			in, ask := n.knownEntry(name, e, out)
			if in != nil {
				n.leasedEntryLocked(name, out)
				n.dir.mu.Unlock()
				return in, 0
			}
			n.dir.mu.Unlock()
			if ask {
				if in := n.knownEntryAttr(ctx, name, e, out); in != nil {
					return in, 0
				}
			}
		} else {
			n.dir.mu.Unlock()
		}
	}
	if in := n.leasedLookup(name, out); in != nil {
		return in, 0
	}
	if in := n.walkLookup(ctx, name, out); in != nil {
		return in, 0
	}
	var opts []client.ReadOption
	n.mu.Lock()
	if now := time.Now(); now.Before(n.mu.lookupsLinearUntil) || now.UnixNano() < n.fsys.lookupsLinearUntil.Load() {
		opts = append(opts, client.Linearizable())
	}
	n.mu.Unlock()
	if in := n.GetChild(name); in != nil && len(opts) == 0 {
		if ch, ok := in.Operations().(*node); ok {
			ch.mu.Lock()
			if ch.mu.linearize {
				// The attributes come with the entry: not stale ones.
				opts = append(opts, client.Linearizable())
			}
			ch.mu.Unlock()
		}
	}
	a, err := n.fsys.readPastQueue(!n.fsys.c.DirQueued(n.ino), func(more ...client.ReadOption) (*wire.Attr, error) {
		return n.fsys.c.Lookup(bg(ctx), n.ino, name, append(opts, more...)...)
	})
	if err != nil {
		return nil, n.fsys.errno("lookup", err)
	}
	in := n.child(ctx, a, out)
	if n.fsys.cfg.AsyncDirs {
		n.dir.mu.Lock()
		if n.asyncLocked() && n.dir.names[name].ino == ids.Ino(a.GetIno()) {
			n.leasedEntryLocked(name, out)
		}
		n.dir.mu.Unlock()
	}
	return in, 0
}

// knownEntry answers a lookup of name, which the directory lease's
// listing says is e, from the child node the kernel still holds (its
// dentry expired), when the attributes that must come with the answer
// are exact: the kernel applies a lookup's attributes whatever their
// timeout, and a stale size would move its O_APPEND offset back (found by
// TestKillMountMidWrite: an append overwrote acknowledged records). So
// only under the child's read lease. ask: a regular file, whose
// attributes knownEntryAttr reads. n.dir.mu held.
func (n *node) knownEntry(name string, e dirEnt, out *fuse.EntryOut) (in *fs.Inode, ask bool) {
	in = n.GetChild(name)
	if in == nil {
		return nil, false
	}
	ch, ok := in.Operations().(*node)
	if !ok || ch.ino != e.ino {
		return nil, false
	}
	ch.mu.Lock()
	a, lin := ch.mu.attr, ch.mu.linearize
	ch.mu.Unlock()
	if a == nil || lin {
		return nil, false
	}
	if la, l := ch.cachedLeaseAttr(); la != nil {
		ch.setAttr(la, &out.Attr)
		out.SetAttrTimeout(ch.leaseAttrTimeout(l))
		return in, false
	}
	if a.GetType() == wire.FileType_DIRECTORY {
		// Under its own lease its attributes are exact, queued
		// changes included (leasedDirAttr).
		if da := ch.leasedDirAttr(); da != nil {
			ch.setAttr(da, &out.Attr)
			return in, false
		}
	}
	// Otherwise a directory is asked for too: the names queued in it
	// move its mtime when they commit, which the attributes held here
	// from an earlier answer do not show (rsync -a sets a directory's
	// times when it makes it, fills it, then compares them: it listed
	// ".d..t......" for directories answered from here;
	// TestDirMtimeAfterQueuedChanges).
	// A file with other names: a queued unlink or rename of one of them
	// changes its link count, which a read past the queue would not see
	// (tar and rsync -H look at st_nlink).
	return nil, a.GetType() == wire.FileType_REGULAR && a.GetNlink() <= 1
}

// knownEntryAttr answers a lookup of regular file name, which the
// directory lease's listing says is e, with the file's attributes read
// without waiting for the queued changes: none of them changes the size
// or data of a file that has no changes of its own queued (checked), and
// the entry itself is known.
// Waiting for the queue made every lookup after the entry timeout a
// batch round trip (bench mount, unlink of 8,000 files in one directory:
// 1.9K/s). nil: ask the ministry the usual way.
func (n *node) knownEntryAttr(ctx context.Context, name string, e dirEnt, out *fuse.EntryOut) *fs.Inode {
	if n.fsys.c.InoQueued(e.ino) {
		// A new file whose bytes or attributes are still queued behind
		// its create (client.SetattrDeferred): a read past the queue
		// would give the kernel a stale size.
		return nil
	}
	a, err := n.fsys.c.GetAttr(bg(ctx), e.ino, client.PastDeferred())
	if err != nil || a.GetType() != wire.FileType_REGULAR || n.fsys.queuedFor(a) {
		return nil // e.g. a create still queued: ENOENT there
	}
	n.dir.mu.Lock()
	defer n.dir.mu.Unlock()
	if !n.asyncLocked() || n.dir.names[name].ino != e.ino {
		return nil
	}
	in := n.child(ctx, a, out)
	n.leasedEntryLocked(name, out)
	return in
}

func (n *node) Getattr(ctx context.Context, _ fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	if a, l := n.cachedLeaseAttr(); a != nil {
		// Held under a read lease: nobody else changed it (lease.go).
		n.setAttr(a, &out.Attr)
		out.SetTimeout(n.leaseAttrTimeout(l))
		return 0
	}
	if a := n.queuedAttr(); a != nil {
		n.setAttr(a, &out.Attr)
		return 0
	}
	if a := n.leasedDirAttr(); a != nil {
		n.setAttr(a, &out.Attr)
		return 0
	}
	n.noteParentMiss()
	n.mu.Lock()
	lin := n.mu.linearize
	n.mu.linearize = false
	n.mu.Unlock()
	var opts []client.ReadOption
	if lin {
		opts = append(opts, client.Linearizable())
	}
	cur := n.cachedAttr()
	past := cur != nil && !n.fsys.queuedFor(cur)
	a, err := n.fsys.readPastQueue(past, func(more ...client.ReadOption) (*wire.Attr, error) {
		return n.fsys.c.GetAttr(bg(ctx), n.ino, append(opts, more...)...)
	})
	if err != nil {
		if lin {
			n.mu.Lock()
			n.mu.linearize = true
			n.mu.Unlock()
		}
		return n.fsys.errno("getattr", err)
	}
	n.setAttr(a, &out.Attr)
	return 0
}

// newCred returns the owner of a new inode under n: the caller, with
// n's group when n has the setgid bit (and then a new directory inherits
// the bit, which it reports in mode).
func (n *node) newCred(ctx context.Context, mode uint32, dir bool) (*wire.Cred, uint32) {
	uid, gid := caller(ctx)
	if p := n.cachedAttr(); p != nil && p.GetMode()&syscall.S_ISGID != 0 {
		gid = p.GetGid()
		if dir {
			mode |= syscall.S_ISGID
		}
	}
	return &wire.Cred{Uid: uid, Gid: gid}, mode
}

// make creates name in n: under n's directory lease answered here and
// queued (asyncdir.go), otherwise by the ministry.
func (n *node) make(ctx context.Context, name string, spec client.NodeSpec, out *fuse.EntryOut) (*fs.Inode, *wire.Attr, syscall.Errno) {
	ctx = n.fsys.asCaller(bg(ctx))
	spec.Cred, spec.Mode = n.newCred(ctx, spec.Mode&0o7777, spec.Type == wire.FileType_DIRECTORY)
	n.dir.mu.Lock()
	unlock := sync.OnceFunc(n.dir.mu.Unlock)
	defer unlock()
	if n.leaseForChangeLocked(ctx) && n.mayDeferCreate(ctx) {
		if _, exists := n.dir.names[name]; exists {
			return nil, nil, syscall.EEXIST
		}
		var a *wire.Attr
		var l *client.Lease
		var err error
		// The holder of a new directory's lease: set once its node is
		// made (a revoke before that finds the lease no longer Valid
		// when the node takes it, and so does not trust it).
		var holder atomic.Pointer[leaseHolder]
		// The new file's node, once made (a create applied before
		// that gets no lease), and its count of local changes then.
		var made atomic.Pointer[node]
		var madeChanges atomic.Uint64
		if spec.Type == wire.FileType_DIRECTORY {
			// With its lease (newDirLease).
			a, l, err = n.fsys.c.MakeDirDeferred(ctx, n.ino, name, spec, n.deferredDone(name, nil, ""), func(l *client.Lease, lost bool) {
				if h := holder.Load(); h != nil {
					h.revoked(l, lost)
				}
			})
		} else {
			done := n.deferredDone(name, nil, "")
			if spec.Type == wire.FileType_REGULAR {
				// Once applied, its read lease (newlease.go).
				inner := done
				done = func(res *wire.Result, err error) {
					inner(res, err)
					ch := made.Load()
					if err != nil || ch == nil {
						return
					}
					if l := n.fsys.c.TakeNewFileLease(ch.ino); l != nil {
						ch.takeNewLease(context.WithoutCancel(ctx), l, madeChanges.Load()) // granted with the create
					} else {
						n.fsys.leaseNewFile(context.WithoutCancel(ctx), ch)
					}
				}
			}
			a, err = n.fsys.c.MakeNodeDeferred(ctx, n.ino, name, spec, done)
		}
		if err != nil {
			return nil, nil, n.fsys.errno("create", err)
		}
		n.dir.names[name] = dirEnt{ino: ids.Ino(a.GetIno()), typ: a.GetType()}
		n.queuedChangeLocked(a.GetCtimeNs())
		in := n.child(ctx, a, out)
		if ch, ok := in.Operations().(*node); ok {
			ch.mu.Lock()
			madeChanges.Store(ch.mu.localChanges)
			ch.mu.Unlock()
			made.Store(ch)
		}
		n.leasedEntryLocked(name, out)
		if l != nil {
			ch, ok := in.Operations().(*node)
			if !ok {
				go func() { _ = l.Release(context.Background()) }() // not under n's lock
				return in, a, 0
			}
			h := newLeaseHolder(ch)
			holder.Store(h)
			// Outside n's lock (a revoke of n's lease waits for it);
			// the kernel's lock on n keeps the new directory
			// unreachable until this returns.
			unlock()
			ch.newDirLease(a, l, h)
		}
		return in, a, 0
	}
	a, err := n.fsys.c.MakeNode(ctx, n.ino, name, spec)
	if err != nil {
		return nil, nil, n.fsys.errno("create", err)
	}
	n.setNameLocked(name, &dirEnt{ino: ids.Ino(a.GetIno()), typ: a.GetType()})
	return n.child(ctx, a, out), a, 0
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	in, _, e := n.make(ctx, name, client.NodeSpec{Type: wire.FileType_DIRECTORY, Mode: mode}, out)
	return in, e
}

func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	in, _, e := n.make(ctx, name, client.NodeSpec{Type: wire.FileType_SYMLINK, Mode: 0o777, Target: target}, out)
	return in, e
}

// Mknod makes regular files, fifos, sockets and device nodes. A device
// node is only a name with a number: the mount is nodev (FUSE's
// default), so opening one through it fails; the kernel checks
// CAP_MKNOD before the request arrives.
func (n *node) Mknod(ctx context.Context, name string, mode, rdev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	var t wire.FileType
	switch mode & syscall.S_IFMT {
	case syscall.S_IFIFO:
		t = wire.FileType_FIFO
	case syscall.S_IFREG, 0:
		t = wire.FileType_REGULAR
	case syscall.S_IFSOCK:
		t = wire.FileType_SOCKET
	case syscall.S_IFCHR:
		t = wire.FileType_CHAR_DEVICE
	case syscall.S_IFBLK:
		t = wire.FileType_BLOCK_DEVICE
	default:
		return nil, syscall.EINVAL
	}
	spec := client.NodeSpec{Type: t, Mode: mode, Exclusive: true}
	if t == wire.FileType_CHAR_DEVICE || t == wire.FileType_BLOCK_DEVICE {
		spec.Rdev = uint64(rdev)
	}
	in, _, e := n.make(ctx, name, spec, out)
	return in, e
}

func (n *node) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	t, err := n.fsys.c.ReadlinkIno(bg(ctx), n.ino)
	if err != nil {
		return nil, n.fsys.errno("readlink", err)
	}
	return []byte(t), 0
}

func (n *node) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	t, ok := target.(*node)
	if !ok {
		return nil, syscall.EXDEV
	}
	n.dir.mu.Lock()
	defer n.dir.mu.Unlock()
	t.forgetAttr()
	a, err := n.fsys.c.LinkAt(n.fsys.asCaller(bg(ctx)), t.ino, n.ino, name)
	// Its nlink and ctime moved (the minister revokes only other
	// clients' leases): not current under this mount's lease any more.
	t.forgetAttr()
	if err != nil {
		return nil, n.fsys.errno("link", err)
	}
	n.setNameLocked(name, &dirEnt{ino: ids.Ino(a.GetIno()), typ: a.GetType()})
	return n.child(ctx, a, out), 0
}

func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	defer n.removing(name)()
	ctx = n.fsys.asCaller(bg(ctx))
	var removed *node
	if e := n.rmdirLocked(ctx, name, &removed); e != 0 {
		return e
	}
	if removed != nil {
		// Outside n.dir.mu: dir.mu locks are taken parent after child
		// nowhere, but in inode order by rename.
		removed.dropDirLease(ctx)
		removed.dropListLease(true)
	}
	return 0
}

func (n *node) rmdirLocked(ctx context.Context, name string, removed **node) syscall.Errno {
	n.dir.mu.Lock()
	defer n.dir.mu.Unlock()
	if n.leaseForChangeLocked(ctx) {
		e, ok := n.dir.names[name]
		if !ok {
			return syscall.ENOENT
		} else if e.typ != wire.FileType_DIRECTORY {
			return syscall.ENOTDIR
		}
		if ch := n.rmdirQueued(ctx, name, e); ch != nil {
			delete(n.dir.names, name)
			*removed = ch
			return 0
		}
	}
	if err := n.fsys.c.RmdirAt(ctx, n.ino, name); err != nil {
		return n.fsys.errno("rmdir", err)
	}
	n.setNameLocked(name, nil)
	if in := n.GetChild(name); in != nil {
		if ch, ok := in.Operations().(*node); ok {
			*removed = ch
		}
	}
	return 0
}

// rmdirQueued queues the removal of the directory name (entry e of n's
// listing) when this mount holds the directory leases of n and of that
// directory, and the directory's listing is empty: nobody else can add
// an entry to it meanwhile (that would recall its lease, and the recall
// sends the queue first), so the ministry finds it empty once what this
// mount queued before is applied (rm -rf: its unlinks). The directory's
// lease goes back once the queue is sent. It returns the directory's
// node, nil when the removal must go to the ministry now. n.dir.mu held.
func (n *node) rmdirQueued(ctx context.Context, name string, e dirEnt) *node {
	if e.referral || !n.mayDeferRemove(ctx) {
		return nil
	}
	in := n.GetChild(name)
	if in == nil {
		return nil
	}
	ch, ok := in.Operations().(*node)
	// Parent then child here, where rename takes dir.mu in inode order:
	// only if free (the kernel's locks keep a rename out anyway).
	if !ok || ch.ino != e.ino || !ch.dir.mu.TryLock() {
		return nil
	}
	defer ch.dir.mu.Unlock()
	if !ch.asyncLocked() || len(ch.dir.names) != 0 {
		return nil
	}
	now, err := n.fsys.c.DeferredRmdir(ctx, n.ino, name, e.ino, n.deferredDone(name, nil, ""))
	if err != nil {
		return nil
	}
	// The caller deletes name from the listing.
	n.queuedChangeLocked(now)
	n.fsys.log.Debug("rmdir queued under the directory leases", slog.Uint64("dir", uint64(n.ino)), slog.String("name", name))
	l, handedOut := ch.dir.lease, ch.dir.handedOut
	ch.dir.lease, ch.dir.names, ch.dir.handedOut = nil, nil, nil
	n.fsys.forgetDirLease(ch)
	go ch.giveBackAfterQueue(l, handedOut) // the rmdir first, then the lease
	return ch
}

// Unlink removes name; a regular file that is open on this mount with one
// link left is renamed to a hidden name instead, removed at its last
// release (see the package doc).
func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	defer n.removing(name)()
	ctx = n.fsys.asCaller(bg(ctx))
	n.walkForget(name)
	// Before and after: a lease granted in between (the walk-ahead)
	// would hold the attributes from before the change.
	n.childAttrChanging(name)
	defer n.childAttrChanging(name)
	n.dir.mu.Lock()
	defer n.dir.mu.Unlock()
	ch := n.openChild(name)
	if n.leaseForChangeLocked(ctx) {
		e, ok := n.dir.names[name]
		switch {
		case !ok:
			return syscall.ENOENT
		case e.typ == wire.FileType_DIRECTORY:
			return syscall.EISDIR
		case ch == nil && !e.referral && n.mayDeferRemove(ctx):
			now, err := n.fsys.c.DeferredUnlink(ctx, n.ino, name, e.ino, n.deferredDone(name, nil, ""))
			if err != nil {
				return n.fsys.errno("unlink", err)
			}
			delete(n.dir.names, name)
			n.queuedChangeLocked(now)
			return 0
		}
	}
	e := n.unlinkSync(ctx, name, ch)
	if e == 0 {
		n.setNameLocked(name, nil)
		if n.dir.names != nil && ch != nil {
			// It may have become a hidden name: list again.
			n.dir.names = nil
		}
	}
	return e
}

// unlinkSync removes name through the ministry; ch is the child when
// it is open on this mount.
func (n *node) unlinkSync(ctx context.Context, name string, ch *node) syscall.Errno {
	if ch != nil {
		a, err := n.fsys.c.GetAttr(ctx, ch.ino)
		if err == nil && a.GetType() == wire.FileType_REGULAR && a.GetNlink() == 1 {
			hidden := hiddenPrefix + strconv.FormatUint(uint64(ch.ino), 10)
			err = n.fsys.c.RenameAt(ctx, n.ino, name, n.ino, hidden, client.RenameNoReplace)
			if err == nil {
				// The last descriptor may have been released while the
				// rename was on its way: then nobody would remove the
				// hidden name, so remove it now.
				ch.mu.Lock()
				released := len(ch.mu.handles) == 0
				if !released {
					ch.mu.hidden, ch.mu.hiddenParent = hidden, n.ino
				}
				ch.mu.Unlock()
				if released {
					return n.fsys.errno("unlink", n.fsys.c.UnlinkAt(ctx, n.ino, hidden))
				}
				return 0
			}
			n.fsys.log.Warn("hide an unlinked open file", slog.Uint64("ino", uint64(ch.ino)), slog.Any("err", err))
		}
	}
	return n.fsys.errno("unlink", n.fsys.c.UnlinkAt(ctx, n.ino, name))
}

func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	np, ok := newParent.(*node)
	if !ok {
		return syscall.EXDEV
	}
	ctx = n.fsys.asCaller(bg(ctx))
	n.walkForget(name)
	np.walkForget(newName)
	n.childAttrChanging(name)
	np.childAttrChanging(newName)
	defer n.childAttrChanging(name)
	defer np.childAttrChanging(newName)
	defer lockDirs(n, np)()
	// A dentry the kernel keeps past the entry timeout (leasedEntryLocked)
	// moves with the rename: its new name must be invalidated at the
	// revoke too (and, for an exchange, the old one).
	defer noteMovedEntry(n, name, np, newName)
	if done, e := n.renameDeferred(ctx, name, np, newName, flags); done {
		return e
	}
	if err := n.fsys.c.RenameAt(ctx, n.ino, name, np.ino, newName, flags); err != nil {
		return n.fsys.errno("rename", err)
	}
	noteRenamed(n, name, np, newName, 0)
	// What moved is known only from a listing: without one, the other
	// directory's listing is no longer trusted.
	src, srcKnown := n.dir.names[name]
	dst, dstKnown := np.dir.names[newName]
	switch {
	case flags&client.RenameExchange != 0 && srcKnown && dstKnown:
		n.setNameLocked(name, &dst)
		np.setNameLocked(newName, &src)
	case flags&client.RenameExchange == 0 && srcKnown:
		n.setNameLocked(name, nil)
		np.setNameLocked(newName, &src)
	default:
		n.dir.names, np.dir.names = nil, nil
		n.dir.entriesChangedLocked()
		np.dir.entriesChangedLocked()
	}
	return 0
}

// renameDeferred answers a rename from the listings of n and np when
// both directories are leased and the rename needs nothing the listings
// do not say (done false: do it synchronously). Both dir.mu held.
func (n *node) renameDeferred(ctx context.Context, name string, np *node, newName string, flags uint32) (bool, syscall.Errno) {
	if !n.leaseForChangeLocked(ctx) || (np != n && !np.asyncLocked()) {
		return false, 0
	}
	if !n.mayDeferRemove(ctx) || !np.mayDeferRemove(ctx) {
		return false, 0 // the ministry judges (and says why)
	}
	src, ok := n.dir.names[name]
	if !ok {
		return true, syscall.ENOENT
	}
	dst, exists := np.dir.names[newName]
	exchange := flags&client.RenameExchange != 0
	switch {
	case src.referral || (exists && dst.referral):
		return false, 0 // EXDEV, from the ministry
	case np == n && name == newName, exists && dst.ino == src.ino:
		return false, 0 // the same file: POSIX does nothing
	case np != n && (src.typ == wire.FileType_DIRECTORY || (exchange && exists && dst.typ == wire.FileType_DIRECTORY)):
		return false, 0 // ".." changes and the loop check: the ministry's
	case np.openChild(newName) != nil:
		return false, 0
	case flags&client.RenameNoReplace != 0 && exists:
		return true, syscall.EEXIST
	case exchange && !exists:
		return true, syscall.ENOENT
	case !exchange && exists && src.typ == wire.FileType_DIRECTORY && dst.typ != wire.FileType_DIRECTORY:
		return true, syscall.ENOTDIR
	case !exchange && exists && src.typ != wire.FileType_DIRECTORY && dst.typ == wire.FileType_DIRECTORY:
		return true, syscall.EISDIR
	case !exchange && exists && dst.typ == wire.FileType_DIRECTORY:
		return false, 0 // is it empty? the ministry knows
	}
	np.dir.entriesChangedLocked()
	// Their ctimes (and the replaced one's link count) change.
	moved := []ids.Ino{src.ino}
	if exists {
		moved = append(moved, dst.ino)
	}
	done := n.deferredDone(name, np, newName)
	if !exchange {
		done = n.movedUnderLease(name, done)
	}
	now, err := n.fsys.c.DeferredRename(ctx, n.ino, name, np.ino, newName, flags, moved, done)
	if err != nil {
		if errors.Is(err, syscall.EXDEV) {
			return false, 0
		}
		return true, n.fsys.errno("rename", err)
	}
	n.queuedChangeLocked(now)
	if np != n {
		np.queuedChangeLocked(now)
	}
	noteRenamed(n, name, np, newName, now)
	delete(n.dir.names, name)
	if exchange {
		n.dir.names[name] = dst
	}
	np.dir.names[newName] = src
	return true, 0
}

// movedUnderLease wraps a queued rename's done function: once the rename
// of name (a file this mount holds a read lease on) is applied, its
// result's attributes (the moved inode's, with the new ctime) are the
// file's under that lease again, unless anything else of this mount
// changed the file meanwhile. Without it the rename made them unknown,
// and every lookup of the new name after the kernel's entry timeout
// asked the ministry (bench mount's unlink of renamed files, 16
// processes in one directory: 0.41 × MooseFS).
func (n *node) movedUnderLease(name string, done client.DeferredDone) client.DeferredDone {
	in := n.GetChild(name)
	if in == nil {
		return done
	}
	ch, ok := in.Operations().(*node)
	if !ok || in.StableAttr().Mode&syscall.S_IFMT != syscall.S_IFREG {
		return done
	}
	ch.mu.Lock()
	l, base := ch.validLeaseLocked(), ch.mu.localChanges
	ch.mu.Unlock()
	if l == nil {
		return done
	}
	return func(res *wire.Result, err error) {
		done(res, err)
		a := res.GetAttr()
		if err != nil || a.GetIno() != uint64(ch.ino) || a.GetNlink() != 1 {
			return
		}
		ch.mu.Lock()
		defer ch.mu.Unlock()
		// Rename counts a change of the file before and after it
		// queues (childAttrChanging): one more than base once it
		// returned, and nothing else since.
		if ch.mu.lease != l || !l.Valid() || ch.mu.localChanges != base+1 || len(ch.mu.handles) > 0 ||
			(ch.mu.attr != nil && a.GetVersion() < ch.mu.attr.GetVersion()) {
			return
		}
		ch.mu.attr, ch.mu.leaseAttr = a, true
	}
}

// linearLookups is how long a directory's lookups stay linearizable
// after a revoke said another client is changing its entries or one of
// its files (linearizeLookups).
const linearLookups = 3 * time.Second

// linearizeLookups: another client is about to change n's entries (its
// directory or listing lease was revoked) or one of its files. The change
// is applied once the revoked lease is given back, and acknowledged to
// that client at once; a clerk may apply it a little later. A lookup
// served by a clerk in between would find a name that client already
// removed, and the kernel would keep it for the entry timeout: after the
// revoke forgot the child, nothing here says to ask the minister (found
// by TestNewFileLeases: another mount's unlink, then stat here succeeded).
// For a while, then, the minister answers them.
func (n *node) linearizeLookups() {
	n.mu.Lock()
	n.mu.lookupsLinearUntil = time.Now().Add(linearLookups)
	n.mu.Unlock()
}

// ---- attributes ----

// queuedFor says whether a change queued in this mount's client may
// change attributes a (client.InoQueued), or may have: another name of a
// file with several links may have a removal queued.
func (f *FS) queuedFor(a *wire.Attr) bool {
	return f.c.InoQueued(ids.Ino(a.GetIno())) || (a.GetType() != wire.FileType_DIRECTORY && a.GetNlink() > 1)
}

// readPastQueue reads attributes with read, past the client's queue when
// past says nothing queued changes where they are found (the directory
// of a lookup, the inode of a getattr) and then when nothing queued
// changes them either; otherwise, or when that read finds a change
// queued, after the queue (every read waits for the changes queued
// before it by default). rm -rf: every read waited for the batch of
// unlinks queued just before it (0.5-0.8 ms).
func (f *FS) readPastQueue(past bool, read func(...client.ReadOption) (*wire.Attr, error)) (*wire.Attr, error) {
	if past {
		a, err := read(client.PastDeferred())
		if err != nil || !f.queuedFor(a) {
			// An error too: nothing queued makes or removes it.
			return a, err
		}
	}
	return read()
}

// queuedAttr returns the attributes of a regular file open here whose
// create is still queued in the client (not answered by the ministry),
// made from those this mount holds: its own create, setattrs and writes
// made them, and no other client can change a file before its create is
// applied (and after, only within the attribute timeout the kernel
// trusts anyway). A getattr would otherwise wait for the queue, and with
// it for the file's bytes to reach every replica: tar's fchown makes the
// kernel ask for one for every file it extracts (to clear suid bits).
// nil: ask the ministry.
func (n *node) queuedAttr() *wire.Attr {
	if !n.fsys.c.CreateQueued(n.ino) {
		return nil
	}
	n.mu.Lock()
	cur := n.mu.attr
	hs := n.handlesLocked()
	n.mu.Unlock()
	if cur == nil || cur.GetType() != wire.FileType_REGULAR || len(hs) == 0 {
		return nil
	}
	a := proto.Clone(cur).(*wire.Attr)
	growByHandles(a, hs)
	return a
}

// growByHandles: inline writes queued behind the create grew the file.
func growByHandles(a *wire.Attr, hs []*handle) {
	for _, h := range hs {
		a.Size = max(a.Size, uint64(h.f.Size()))
	}
}

// setattrQueued queues op behind the file's create while that is still
// queued under the directory lease (client.SetattrDeferred: cp -a and
// tar set owner, mode and times of every file they make, each a commit
// otherwise) and returns the attributes it gives, made here from those
// held. A failure is reported as the directory's queued changes' are
// (its fsync, the file's fsync). nil: not queued, ask the ministry.
func (n *node) setattrQueued(ctx context.Context, op *wire.SetattrOp) *wire.Attr {
	n.mu.Lock()
	cur := n.mu.attr
	hs := n.handlesLocked()
	n.mu.Unlock()
	if cur == nil || cur.GetType() != wire.FileType_REGULAR {
		return nil
	}
	// Queued only what the ministry will allow unchanged (it checks
	// again): a refusal or a mode it adjusts goes there now.
	probe := proto.Clone(op).(*wire.SetattrOp)
	cred, err := n.fsys.c.Caller(ctx)
	if err != nil {
		return nil
	}
	// A chown always asks to clear setuid (and setgid), which matters
	// only when the file has them (tar chowns every file it extracts).
	if clear, err := posix.CheckSetattr(cur, cred, probe); err != nil || clear&(cur.GetMode()|op.GetMode()) != 0 || probe.GetMode() != op.GetMode() {
		return nil
	}
	pn := n.parentNode()
	if pn == nil {
		return nil
	}
	done := func(_ *wire.Result, err error) {
		if err != nil {
			pn.dir.noteFailure(err)
		}
	}
	now, ok := n.fsys.c.SetattrDeferred(ctx, n.ino, op, done)
	if !ok {
		return nil
	}
	// What namespace's setattr makes of it; the version stays, so the
	// ministry's own answer, when one comes, replaces this one.
	a := &wire.Attr{Ino: cur.GetIno(), Type: cur.GetType(), Mode: cur.GetMode(), Uid: cur.GetUid(), Gid: cur.GetGid(),
		Nlink: cur.GetNlink(), Size: cur.GetSize(), AtimeNs: cur.GetAtimeNs(), MtimeNs: cur.GetMtimeNs(),
		CtimeNs: now, CrtimeNs: cur.GetCrtimeNs(), Version: cur.GetVersion(), Rdev: cur.GetRdev()}
	applySetattr(a, op, now)
	growByHandles(a, hs)
	return a
}

// applySetattr makes of a what namespace's setattr makes of it for op
// (not its size), with now the command's time; ctime is the caller's.
func applySetattr(a *wire.Attr, op *wire.SetattrOp, now int64) {
	has := func(f wire.SetattrField) bool { return op.GetValid()&uint32(f) != 0 }
	if has(wire.SetattrField_SETATTR_MODE) {
		a.Mode = op.GetMode() & 0o7777
	}
	if has(wire.SetattrField_SETATTR_UID) {
		a.Uid = op.GetUid()
	}
	if has(wire.SetattrField_SETATTR_GID) {
		a.Gid = op.GetGid()
	}
	switch {
	case has(wire.SetattrField_SETATTR_ATIME_NOW):
		a.AtimeNs = now
	case has(wire.SetattrField_SETATTR_ATIME):
		a.AtimeNs = op.GetAtimeNs()
	}
	switch {
	case has(wire.SetattrField_SETATTR_MTIME_NOW):
		a.MtimeNs = now
	case has(wire.SetattrField_SETATTR_MTIME):
		a.MtimeNs = op.GetMtimeNs()
	}
}

func (n *node) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	ctx = n.fsys.asCaller(bg(ctx))
	// Counted even when queued: its answer keeps the version it was
	// queued with (setattrQueued), so a descriptor's release must not
	// take the attributes its writes were answered with (settleWrites).
	n.mu.Lock()
	n.mu.localChanges++
	n.mu.Unlock()
	var a *wire.Attr
	if size, ok := in.GetSize(); ok {
		defer n.fenceStores()()
		h, _ := fh.(*handle)
		var e syscall.Errno
		if a, e = n.truncate(ctx, h, int64(size)); e != 0 {
			return e
		}
	}
	op := &wire.SetattrOp{}
	if m, ok := in.GetMode(); ok {
		op.Valid |= uint32(wire.SetattrField_SETATTR_MODE)
		op.Mode = m
	}
	if uid, ok := in.GetUID(); ok {
		op.Valid |= uint32(wire.SetattrField_SETATTR_UID)
		op.Uid = uid
	}
	if gid, ok := in.GetGID(); ok {
		op.Valid |= uint32(wire.SetattrField_SETATTR_GID)
		op.Gid = gid
	}
	switch {
	case in.Valid&fuse.FATTR_ATIME_NOW != 0:
		op.Valid |= uint32(wire.SetattrField_SETATTR_ATIME_NOW)
	case in.Valid&fuse.FATTR_ATIME != 0:
		op.Valid |= uint32(wire.SetattrField_SETATTR_ATIME)
		op.AtimeNs = time.Unix(int64(in.Atime), int64(in.Atimensec)).UnixNano()
	}
	switch {
	case in.Valid&fuse.FATTR_MTIME_NOW != 0:
		op.Valid |= uint32(wire.SetattrField_SETATTR_MTIME_NOW)
	case in.Valid&fuse.FATTR_MTIME != 0:
		op.Valid |= uint32(wire.SetattrField_SETATTR_MTIME)
		op.MtimeNs = time.Unix(int64(in.Mtime), int64(in.Mtimensec)).UnixNano()
	}
	if op.Valid&uint32(wire.SetattrField_SETATTR_MTIME|wire.SetattrField_SETATTR_ATIME) != 0 {
		// Explicit times (utimens, as cp -a and tar do after writing)
		// must land after the writes they follow: push the buffered
		// ones and record their mtime first, or the push at close would
		// set mtime to "now" over them. A new file's, whose records
		// queue behind its create, go in the background.
		if e := n.syncForTimes(ctx); e != 0 {
			return e
		}
	}
	if op.Valid != 0 && a == nil {
		a = n.setattrQueued(ctx, op)
	}
	if op.Valid != 0 && a == nil {
		a = n.setattrDirQueued(ctx, op)
	}
	if op.Valid != 0 && a == nil {
		gen := n.dirGen()
		var err error
		if a, err = n.fsys.c.Setattr(ctx, n.ino, op); err != nil {
			return n.fsys.errno("setattr", err)
		}
		n.noteDirAttr(a, gen)
	}
	if a == nil {
		var err error
		if a, err = n.fsys.c.GetAttr(ctx, n.ino); err != nil {
			return n.fsys.errno("getattr", err)
		}
	}
	n.setAttr(a, &out.Attr)
	return 0
}

// truncate sets the size after pushing every buffered write of the inode
// (so none lands after the cut), through the caller's handle h if any.
func (n *node) truncate(ctx context.Context, h *handle, size int64) (*wire.Attr, syscall.Errno) {
	if e := n.flushAll(ctx); e != 0 {
		return nil, e
	}
	var f *client.File
	if h != nil {
		f = h.f
	} else {
		// truncate(2) by path: the file opened here for it is the
		// mount's, so the caller's write permission is checked here.
		cred, err := n.fsys.c.Caller(ctx)
		if err != nil {
			return nil, n.fsys.errno("truncate", err)
		}
		if a := n.cachedAttr(); a != nil {
			if err := posix.CheckAccess(a, cred, posix.MayWrite, "truncate"); err != nil {
				return nil, n.fsys.errno("truncate", err)
			}
		}
		if f, _, err = n.fsys.c.OpenIno(ctx, n.ino, syscall.O_RDWR); err != nil {
			return nil, n.fsys.errno("truncate", err)
		}
		defer f.Close()
	}
	if err := f.Truncate(ctx, size); err != nil {
		return nil, n.fsys.errno("truncate", err)
	}
	a, err := n.fsys.c.GetAttr(ctx, n.ino)
	if err != nil {
		return nil, n.fsys.errno("getattr", err)
	}
	// Every open File of the inode learns the new size (a File that
	// knew a larger one would not grow the file on its next write).
	n.resetFiles(a, h)
	n.changedHere()
	return a, 0
}

// ---- extended attributes ----

// xattrAllowed refuses the system.* namespace (POSIX ACLs beyond the
// mode bits are not supported; the kernel would not apply stored ones):
// see setACLAccess for the one kind of ACL that is.
func xattrAllowed(name string) bool { return !strings.HasPrefix(name, "system.") }

func (n *node) Getxattr(ctx context.Context, attr string, dest []byte) (uint32, syscall.Errno) {
	if !xattrAllowed(attr) {
		return 0, syscall.ENODATA
	}
	v, err := n.fsys.c.GetXattrIno(bg(n.fsys.forUser(ctx)), n.ino, attr)
	if err != nil {
		return 0, n.fsys.errno("getxattr", err)
	}
	if len(dest) < len(v) {
		return uint32(len(v)), syscall.ERANGE
	}
	return uint32(copy(dest, v)), 0
}

func (n *node) Setxattr(ctx context.Context, attr string, data []byte, flags uint32) syscall.Errno {
	if attr == aclAccessXattr {
		return n.setACLAccess(ctx, data)
	}
	if !xattrAllowed(attr) {
		return syscall.EOPNOTSUPP
	}
	defer n.dirAttrChanged()
	defer n.fileAttrChanged()
	return n.fsys.errno("setxattr", n.fsys.c.SetXattrIno(n.fsys.asCaller(bg(ctx)), n.ino, attr, data, flags))
}

func (n *node) Removexattr(ctx context.Context, attr string) syscall.Errno {
	if !xattrAllowed(attr) {
		return syscall.ENODATA
	}
	defer n.dirAttrChanged()
	defer n.fileAttrChanged()
	return n.fsys.errno("removexattr", n.fsys.c.RemoveXattrIno(n.fsys.asCaller(bg(ctx)), n.ino, attr))
}

func (n *node) Listxattr(ctx context.Context, dest []byte) (uint32, syscall.Errno) {
	names, err := n.fsys.c.ListXattrIno(bg(ctx), n.ino)
	if err != nil {
		return 0, n.fsys.errno("listxattr", err)
	}
	var b []byte
	for _, nm := range names {
		b = append(append(b, nm...), 0)
	}
	if len(dest) < len(b) {
		return uint32(len(b)), syscall.ERANGE
	}
	return uint32(copy(dest, b)), 0
}
