package fusefs

// Walk-ahead: a process that opens the files of a directory in the order
// it listed them (cp -r, tar -c, rsync, grep -r, find | xargs cat, a
// training job's data loader) pays a read-lease round trip to the
// minister at every open, and the read of a small file another. When an
// open follows the listing's order, the mount asks for the read leases of
// the next files in the background, a few at a time (the window doubles
// while the opens keep the order, as the kernel's read-ahead does): each
// grant brings the file's attributes, chunk table and inline bytes
// (LeaseOptions.Open), so the process's own open and the read of an
// inline file then ask nothing. The leases are ordinary read leases:
// another client's change revokes them first, as for any open.

import (
	"context"
	"errors"
	"io"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/govfs/govfs/client"
	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/wire"
)

const (
	// walkFirst and walkMax bound the window: files asked for ahead of
	// the one opened.
	walkFirst = 4
	walkMax   = 64
	// walkFresh is how long after a listing its order is followed.
	walkFresh = time.Minute
	// walkNames bounds the names a directory remembers (the start of a
	// bigger listing).
	walkNames = 1 << 14
	// walkInFlight is how many background lease requests a mount makes
	// at a time, walkQueueLen how many wait.
	walkInFlight = 8
	walkQueueLen = 256
)

// walkState is a directory's last listing order and how far ahead of
// the opens following it leases were asked for.
type walkState struct {
	mu      sync.Mutex
	at      time.Time
	entries []walkEntry
	index   map[string]int
	// last is the index of the last open that followed the order, ahead
	// the last index asked for, window the current window.
	last, ahead, window int
}

type walkEntry struct {
	name string
	ino  ids.Ino
}

// noteListedPage records a page of a listing read from the ministry
// (first: the listing's first page, which starts a new order).
func (n *node) noteListedPage(ents []*wire.DirEntry, first bool) {
	if !n.fsys.cfg.WalkAhead {
		return
	}
	w := &n.walk
	w.mu.Lock()
	defer w.mu.Unlock()
	if first || w.index == nil {
		w.entries, w.index = w.entries[:0], map[string]int{}
		w.last, w.ahead, w.window = -1, -1, 0
	}
	w.at = time.Now()
	for _, e := range ents {
		if len(w.entries) >= walkNames {
			return
		}
		if e.GetType() != wire.FileType_REGULAR {
			continue
		}
		name := string(e.GetName())
		w.index[name] = len(w.entries)
		w.entries = append(w.entries, walkEntry{name: name, ino: ids.Ino(e.GetIno())})
	}
}

// walkAhead runs after n, a regular file, was opened for reading: if its
// directory was listed lately and the opens follow that order, the next
// files' leases are asked for in the background.
func (n *node) walkAhead(ctx context.Context) {
	if !n.fsys.cfg.WalkAhead {
		return
	}
	name, parent := n.Parent()
	if parent == nil {
		return
	}
	pn, ok := parent.Operations().(*node)
	if !ok {
		return
	}
	todo := pn.walkNext(name, n.ino)
	for _, e := range todo {
		ch := parent.GetChild(e.name)
		if ch == nil {
			continue // not known to the kernel: its open looks it up
		}
		cn, ok := ch.Operations().(*node)
		if !ok || cn.ino != e.ino || cn.StableAttr().Mode&syscall.S_IFMT != syscall.S_IFREG {
			continue
		}
		n.fsys.walkQueue(walkJob{n: cn, ctx: context.WithoutCancel(ctx)})
	}
}

// walkJob is a lease (and maybe the bytes) to fetch ahead for n, in the
// name of the process whose open asked (ctx).
type walkJob struct {
	n   *node
	ctx context.Context
}

// walkQueue hands j to the mount's walkInFlight workers (started at the
// first job); a job that finds the queue full is dropped: the open asks
// for its lease itself then.
func (f *FS) walkQueue(j walkJob) {
	f.walkStart.Do(func() {
		f.walkJobs = make(chan walkJob, walkQueueLen)
		for range walkInFlight {
			go func() {
				for j := range f.walkJobs {
					j.n.prefetchLease(j.ctx)
				}
			}()
		}
	})
	select {
	case f.walkJobs <- j:
	default:
	}
}

// walkNext says which entries to ask leases for after the open of name.
func (n *node) walkNext(name string, ino ids.Ino) []walkEntry {
	w := &n.walk
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.index != nil && time.Since(w.at) > walkFresh {
		// Nobody followed it lately: its names go.
		w.entries, w.index = nil, nil
	}
	i, ok := w.index[name]
	if !ok || w.entries[i].ino != ino {
		return nil
	}
	w.at = time.Now() // a walk longer than walkFresh goes on
	switch {
	case w.window == 0:
		w.window = walkFirst // the first open since the listing
	case i == w.last+1 || (i > w.last && i <= w.ahead):
		w.window = min(2*w.window, walkMax) // in order: widen
	default:
		// Out of order: start again small from here.
		w.window, w.ahead = walkFirst, i
	}
	w.last = i
	from, to := max(w.ahead+1, i+1), min(i+w.window, len(w.entries)-1)
	if from > to {
		return nil
	}
	w.ahead = to
	return append([]walkEntry(nil), w.entries[from:to+1]...)
}

// prefetchLease asks for the file's read lease (with what an open reads)
// unless it holds one or is open.
func (n *node) prefetchLease(ctx context.Context) {
	n.mu.Lock()
	skip := n.validLeaseLocked() != nil || len(n.mu.handles) > 0 || n.mu.busy > 0
	n.mu.Unlock()
	if skip {
		return
	}
	n.fsys.walkAsked.Inc()
	if l := n.readLease(ctx); l != nil {
		n.prefetchData(ctx, l)
	}
}

// walkDataMax: a file taken ahead is also read ahead, into the kernel's
// page cache, when it is at most this long (the kernel's own read-ahead
// would fetch that much at the first read).
const walkDataMax = 128 << 10

// prefetchData reads a small file's bytes under its read lease l and
// stores them in the kernel's page cache, where the process's open
// (FOPEN_KEEP_CACHE: the pages are good under l) and reads find them.
// The store happens under n.store, which every path that drops the
// kernel's pages after losing a lease takes first (afterStores), and
// which this mount's opens and truncates of the file take after marking
// themselves busy (fenceStores): a store that checked the lease and the
// file's quiet before lands before such a drop, open or truncate, never
// after it.
func (n *node) prefetchData(ctx context.Context, l *client.Lease) {
	a, held := n.cachedLeaseAttr()
	if a == nil || held != l || a.GetSize() == 0 || a.GetSize() > walkDataMax {
		return
	}
	n.mu.Lock()
	changes := n.mu.localChanges
	n.mu.Unlock()
	f, err := n.fsys.c.FileOfLease(l, a, os.O_RDONLY)
	if err != nil {
		return
	}
	defer f.Close()
	if cred := n.fsys.userCred(ctx); cred != nil {
		f.ActAs(cred) // read in the opener's name, as its open would
	}
	buf := make([]byte, a.GetSize())
	k, err := f.ReadAt(ctx, buf, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return
	}
	n.store.Lock()
	defer n.store.Unlock()
	n.mu.Lock()
	quiet := n.mu.busy == 0 && n.mu.localChanges == changes
	n.mu.Unlock()
	if cur, held := n.cachedLeaseAttr(); !quiet || held != l || cur == nil || cur.GetVersion() != a.GetVersion() {
		return // revoked, changed, or opened or truncated here meanwhile
	}
	if n.WriteCache(0, buf[:k]) != 0 {
		return
	}
	n.mu.Lock()
	if n.mu.lease == l {
		n.mu.cacheLease = l
		n.fsys.walkStored.Add(float64(k))
	}
	n.mu.Unlock()
}

// fenceStores marks an open or truncate of the file by this mount under
// way and waits for a walk-ahead store that began before: no store lays
// older bytes over what the opener then writes (prefetchData). The
// returned func ends it.
func (n *node) fenceStores() (done func()) {
	n.mu.Lock()
	n.mu.busy++
	n.mu.Unlock()
	n.afterStores()
	return func() {
		n.mu.Lock()
		n.mu.busy--
		n.mu.Unlock()
	}
}
