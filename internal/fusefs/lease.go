package fusefs

import (
	"container/list"
	"context"
	"sync"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/govfs/govfs/client"
	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/wire"
)

// Read leases (DESIGN §5) let the mount keep what the kernel caches.
//
// A regular file's open asks the minister for a whole-file read lease
// without waiting (a try: a writer holding a write lease is not
// disturbed). While the mount holds it:
//
//   - getattr is answered from the attributes read under the lease (when
//     no descriptor of this mount has written since), and the kernel may
//     keep attributes until the lease's trust ends;
//   - an open keeps the kernel's page cache (FOPEN_KEEP_CACHE) when the
//     lease has been held without a break since the cache was last known
//     good, and an open without O_TRUNC needs no request at all.
//
// The lease stays after the last close, so a file read again is served
// from the page cache; at most maxLeases files keep one (the oldest is
// released first). When the minister revokes it (another client is about
// to change the file: its change waits until this mount gave the lease
// back) or it is lost or expires, the mount drops the kernel's page cache
// and attributes of the inode and goes back to close-to-open. Names
// (entries) are not covered: they are cached for EntryTimeout as before.

// maxLeases bounds the read leases one mount keeps. A workload that
// writes or reads a few thousand small files and then reads them again
// (bench mount's 4 × 1,000 files, a build reading back its objects)
// finds them all still leased; 1,024 was too few for that, and the
// oldest-first eviction then missed every one. Each lease held costs
// the keepalive a few bytes (it names every lease it renews) and the
// minister a table entry. 16,384 since session 19: 16 processes of 1,000
// files each, and files this mount creates get leases too (newlease.go).
const maxLeases = 16384

// maxLeaseBytes bounds the small files' bytes the mount keeps with its
// read leases (the grant's read, client.Lease.HeldBytes, and what its own
// writes left, node.mu.settledRead): with files inline up to 16 KiB,
// 8,192 leases could otherwise hold 256 MiB. bench mount's 4 × 1,000
// files of 4 KiB stay well inside it.
const maxLeaseBytes = 64 << 20

// leaseSet tracks the nodes holding a read lease, oldest first, with the
// bytes each keeps in memory.
type leaseSet struct {
	mu    sync.Mutex
	order list.List // of *leaseHeld, oldest at the front
	at    map[*node]*list.Element
	bytes int64 // the sum of the held sizes
	// max is how many it keeps (maxLeases when 0), maxBytes how many
	// bytes (maxLeaseBytes when 0).
	max      int
	maxBytes int64
}

type leaseHeld struct {
	n    *node
	size int64
}

// add puts n at the end (the newest) holding size bytes, and returns the
// oldest nodes to give their leases back so that the set stays within
// its bounds.
func (s *leaseSet) add(n *node, size int64) (evict []*node) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.putLocked(n, size)
	return s.trimLocked(n)
}

// putLocked puts n at the end (the newest) holding size bytes.
func (s *leaseSet) putLocked(n *node, size int64) {
	if s.at == nil {
		s.at = map[*node]*list.Element{}
	}
	if e := s.at[n]; e != nil {
		s.order.MoveToBack(e)
		h := e.Value.(*leaseHeld)
		s.bytes += size - h.size
		h.size = size
		return
	}
	s.at[n] = s.order.PushBack(&leaseHeld{n: n, size: size})
	s.bytes += size
}

// resize sets what n holds when it is in the set (its own writes left a
// small file's bytes), and returns the nodes to evict, as add does.
func (s *leaseSet) resize(n *node, size int64) (evict []*node) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.at[n]
	if e == nil {
		return nil
	}
	h := e.Value.(*leaseHeld)
	s.bytes += size - h.size
	h.size = size
	return s.trimLocked(n)
}

// trimLocked evicts from the oldest end until the set is within its
// bounds, passing over keep (the node being added or resized).
func (s *leaseSet) trimLocked(keep *node) (evict []*node) {
	limit, limitBytes := s.max, s.maxBytes
	if limit == 0 {
		limit = maxLeases
	}
	if limitBytes == 0 {
		limitBytes = maxLeaseBytes
	}
	for e := s.order.Front(); e != nil && (s.order.Len() > limit || s.bytes > limitBytes); {
		next := e.Next()
		if h := e.Value.(*leaseHeld); h.n != keep {
			s.order.Remove(e)
			delete(s.at, h.n)
			s.bytes -= h.size
			evict = append(evict, h.n)
		}
		e = next
	}
	return evict
}

// replace puts n in old's place (old's lease moved to n), or at the end
// when old is not there (evicted meanwhile: n's lease is then dropped
// in turn when its time comes).
func (s *leaseSet) replace(old, n *node) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.at == nil {
		s.at = map[*node]*list.Element{}
	}
	if e := s.at[old]; e != nil {
		e.Value.(*leaseHeld).n = n
		delete(s.at, old)
		s.at[n] = e
		return
	}
	s.at[n] = s.order.PushBack(&leaseHeld{n: n})
}

// readd puts n back at the end (the newest) without evicting others: an
// eviction that could not be made (dirleases.go). The set may stay above
// its bound until the next add.
func (s *leaseSet) readd(n *node) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.putLocked(n, 0)
}

// trim returns the oldest nodes beyond the set's bounds, taken out.
func (s *leaseSet) trim() (evict []*node) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.trimLocked(nil)
}

func (s *leaseSet) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.order.Len()
}

func (s *leaseSet) remove(n *node) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.at[n]; e != nil {
		s.order.Remove(e)
		delete(s.at, n)
		s.bytes -= e.Value.(*leaseHeld).size
	}
}

// evictLeases gives back the read leases of nodes the set let go of,
// outside the caller's way: a walk over more files than the mount keeps
// leases for (grep -r) evicts one at every open. Each is detached now,
// so a lease the evicted node takes meanwhile is not the one dropped.
func (fsys *FS) evictLeases(ctx context.Context, evict []*node) {
	for _, ev := range evict {
		if old := ev.detachLease(); old != nil {
			go ev.finishDrop(context.WithoutCancel(ctx), old)
		}
	}
}

// heldBytesLocked is what n keeps in memory with its lease.
func (n *node) heldBytesLocked() int64 {
	size := int64(len(n.mu.settledRead.GetInlineData()))
	if l := n.mu.lease; l != nil {
		size += int64(l.HeldBytes())
	}
	return size
}

// validLease returns the node's read lease if it is held and trusted.
func (n *node) validLeaseLocked() *client.Lease {
	if l := n.mu.lease; l != nil && l.Valid() {
		return l
	}
	return nil
}

// readLease returns a valid read lease on the file, asking for one (a
// try) when there is none. nil: none, close-to-open then.
func (n *node) readLease(ctx context.Context) *client.Lease {
	return n.readLeaseFor(ctx, false)
}

// readLeaseFor is readLease; attrOnly asks the grant for the attributes
// alone (newlease.go: a new file has no chunk table or bytes to read
// ahead, and looking for them was most of the grant's cost).
func (n *node) readLeaseFor(ctx context.Context, attrOnly bool) *client.Lease {
	n.adoptOnce()
	// Asked outside n.mu: the client's queue has its own lock.
	queued := n.fsys.c.QueuedFileChanges(n.ino)
	n.mu.Lock()
	if l := n.validLeaseLocked(); l != nil {
		n.mu.Unlock()
		return l
	}
	old := n.mu.lease
	n.mu.lease, n.mu.cacheLease, n.mu.leaseAttr, n.mu.settledRead, n.mu.origin = nil, nil, false, nil, nil
	// The grant's read can stand for the file only if this mount has
	// nothing of its own in flight: no open descriptor (a write of one
	// may land while the request is out), nothing queued behind the
	// file's create (the minister has not seen it), and no change made
	// here meanwhile (checked again when the answer comes).
	adopt := len(n.mu.handles) == 0 && !queued
	changes := n.mu.localChanges
	n.mu.Unlock()
	if old != nil {
		n.fsys.leases.remove(n)
		// No longer valid: expired, or being revoked, whose callback
		// may not have dropped the kernel's pages yet. They go before
		// the lease does (a store under it finished first).
		n.afterStores()
		_ = n.NotifyContent(0, 0)
		_ = old.Release(ctx)
	}
	opts := client.LeaseOptions{OnRevoke: n.leaseRevoked, Open: adopt, OpenAttrOnly: attrOnly}
	if name, p := n.Parent(); p != nil {
		// The name it was found under: while the lease holds, a lookup
		// of it is answered here (leasedLookup).
		opts.EntryParent, opts.EntryName = ids.Ino(p.StableAttr().Ino), name
	}
	l, err := n.fsys.c.AcquireLease(ctx, n.ino, client.LeaseRead, 0, 0, opts)
	if err != nil {
		return nil // EAGAIN (a writer), or the minister is busy: no cache
	}
	queued = n.fsys.c.QueuedFileChanges(n.ino)
	n.mu.Lock()
	if n.mu.lease != nil { // a concurrent open got one first
		n.mu.Unlock()
		_ = l.Release(ctx)
		return n.readLeaseFor(ctx, attrOnly)
	}
	n.mu.lease, n.mu.origin = l, nil
	// The attributes came with the grant (read after it): current while
	// the lease is held, so the open that asked needs no getattr. Not
	// taken over writes of this mount still buffered, nor over a newer
	// version this mount already knows of (its own change).
	var changed bool
	if a := l.Attr(); a != nil && adopt && len(n.mu.handles) == 0 && n.mu.localChanges == changes && !queued &&
		(n.mu.attr == nil || a.GetVersion() >= n.mu.attr.GetVersion()) {
		old := n.mu.attr
		changed = old != nil && (old.GetSize() != a.GetSize() || old.GetMtimeNs() != a.GetMtimeNs())
		n.mu.attr, n.mu.leaseAttr = a, true
	}
	n.mu.Unlock()
	if changed {
		// Attributes only: the kernel asks again (as Open does after
		// its getattr).
		n.NotifyContent(-1, 0)
	}
	n.fsys.evictLeases(ctx, n.fsys.leases.add(n, int64(l.HeldBytes())))
	return l
}

// currentLease returns the node's valid read lease, nil if none.
func (n *node) currentLease() *client.Lease {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.validLeaseLocked()
}

// dropLease gives the node's lease back (eviction). The kernel was told
// to trust the attributes until the lease's end: they are invalidated
// first, since other clients' changes no longer wait for this mount.
func (n *node) dropLease(ctx context.Context) {
	if l := n.detachLease(); l != nil {
		n.finishDrop(ctx, l)
	}
}

// detachLease forgets the node's read lease and returns it (nil if none).
func (n *node) detachLease() *client.Lease {
	n.unkeep()
	n.mu.Lock()
	defer n.mu.Unlock()
	l := n.mu.lease
	n.mu.lease, n.mu.cacheLease, n.mu.leaseAttr, n.mu.settledRead, n.mu.origin = nil, nil, false, nil, nil
	n.mu.openVersion = 0
	return l
}

// finishDrop drops what the kernel caches of the file under l, then
// gives l back.
func (n *node) finishDrop(ctx context.Context, l *client.Lease) {
	n.afterStores()
	_ = n.NotifyContent(0, 0) // attributes and data; ENOENT if forgotten
	_ = l.Release(ctx)
}

// leaseRevoked runs when the minister wants the lease back (or it was
// lost): forget it and drop what the kernel caches of the file, before
// the keeper releases it.
func (n *node) leaseRevoked(l *client.Lease, lost bool) {
	if h := n.heirOf(l); h != nil {
		// A node made after the kernel forgot n took l over
		// (keptfiles.go).
		h.leaseRevoked(l, lost)
		return
	}
	n.unkeep()
	n.mu.Lock()
	if n.mu.lease == l {
		n.mu.lease, n.mu.cacheLease, n.mu.leaseAttr, n.mu.settledRead, n.mu.origin = nil, nil, false, nil, nil
		n.mu.openVersion = 0 // the next open drops the page cache
		n.mu.cacheVersion = 0
	}
	// The change that revoked the lease may not be applied on every
	// clerk yet: the next getattr asks linearizably, and no listing's
	// kept page shows the file (keptpage.go).
	n.mu.linearize = true
	n.fsys.changes.Add(1)
	n.mu.Unlock()
	n.fsys.leases.remove(n)
	if _, p := n.Parent(); p != nil {
		if pn, ok := p.Operations().(*node); ok {
			// An unlink or rename of one of its names, perhaps.
			pn.linearizeLookups()
		}
	} else {
		// A node the kernel forgot, holding its lease past the forget
		// (keptfiles.go): go-fuse dropped its parent, and the next
		// lookup of the file would make a new node from a clerk that
		// may not have applied the change yet (TestLeaseKeptPastForget
		// under CI load: the size of a truncate served after the write
		// that followed it). Rare: every lookup asks the minister for a
		// while.
		n.fsys.lookupsLinearUntil.Store(time.Now().Add(linearLookups).UnixNano())
	}
	n.afterStores()
	// Data and attributes; ENOENT when the kernel forgot the inode.
	_ = n.NotifyContent(0, 0)
}

// afterStores waits for a walk-ahead store into the kernel's page cache
// that checked the lease before it was dropped (prefetchData): the drop
// that follows then removes what it stored.
func (n *node) afterStores() {
	n.store.Lock()
	n.store.Unlock() //nolint:staticcheck // an empty section: a barrier
}

// noteWrite: a descriptor wrote, so the attributes held are no longer
// the file's (size, mtime) until read again.
func (n *node) noteWrite() {
	// A lease kept past a forget is taken over first, so what it held
	// is marked stale too (found in review).
	n.adoptOnce()
	n.mu.Lock()
	n.mu.leaseAttr = false
	n.mu.localChanges++
	n.mu.Unlock()
}

// fileAttrChanged: an extended attribute of the file changed here (its
// ctime and version moved): the attributes held are no longer current.
func (n *node) fileAttrChanged() {
	if n.isDir() {
		return
	}
	n.noteWrite()
}

// leaseAttrTimeout returns how long the kernel may keep attributes read
// now under lease l: until the lease's trust ends.
func (n *node) leaseAttrTimeout(l *client.Lease) time.Duration {
	if l == nil {
		return n.fsys.cfg.AttrTimeout
	}
	return max(n.fsys.cfg.AttrTimeout, time.Until(l.Until()))
}

// cachedLeaseAttr returns the attributes held under a valid lease, if
// they are current (no write since they were read).
func (n *node) cachedLeaseAttr() (*wire.Attr, *client.Lease) {
	n.adoptOnce()
	n.mu.Lock()
	defer n.mu.Unlock()
	l := n.validLeaseLocked()
	// Not while a descriptor of this mount holds writes not yet pushed
	// (a write clears leaseAttr anyway); a reader's open descriptor is
	// no reason to ask (the kernel's getattr after an open).
	if l == nil || !n.mu.leaseAttr || n.mu.attr == nil || n.dirtyEndLocked() > 0 {
		return nil, l
	}
	return n.mu.attr, l
}

// leaseSize returns the file's size when the mount knows it is current
// (and nothing of this mount's is queued behind the file's create):
// read under a valid lease (another client's change would have revoked
// it first) with no change through this mount since (a write, truncate
// or allocate clears leaseAttr). A read at or past it is then answered
// here: a reader's last read(2), which finds the end of the file, cost a
// linearizable getattr at the ministry (grep -r reads every file to its
// end: one round trip per file).
func (n *node) leaseSize() (int64, bool) {
	if n.fsys.c.QueuedFileChanges(n.ino) {
		return 0, false
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.validLeaseLocked() == nil || !n.mu.leaseAttr || n.mu.attr == nil || n.dirtyEndLocked() > 0 {
		return 0, false
	}
	return int64(n.mu.attr.GetSize()), true
}

// settleWrites runs at the release of the inode's last descriptor, h:
// when h was opened under a read lease with current attributes, as the
// inode's only descriptor on this mount until now, that lease is still
// held (nobody else changed the file meanwhile), and nothing of this
// mount changed the file but h's writes, the attributes
// the ministry answered the last of them with (client.File.Settled) are
// the file's, current under the lease: the next open and getattr need
// no request. Anything else (another descriptor's or a setattr's
// change, a getattr that read newer attributes, a failed or queued
// write, the lease lost once) leaves them to be read again.
func (n *node) settleWrites(h *handle) {
	if h.settleLease == nil || h.writes.Load() == 0 {
		return
	}
	// A write answered at the close (write-behind): settled once its
	// answer comes, if nothing else happened meanwhile.
	if !h.f.WhenBehindSettled(func() { n.settleWrites(h) }) {
		return
	}
	a, ok := h.f.Settled()
	if !ok || n.fsys.c.QueuedFileChanges(n.ino) {
		return
	}
	n.mu.Lock()
	if len(n.mu.handles) > 0 || n.mu.opens != h.opensAt || n.mu.lease != h.settleLease || n.validLeaseLocked() == nil ||
		n.mu.localChanges != h.settleBase+h.writes.Load() ||
		(n.mu.attr != nil && a.GetVersion() < n.mu.attr.GetVersion()) {
		n.mu.Unlock()
		return
	}
	n.mu.attr, n.mu.leaseAttr = a, true
	n.mu.settledRead = h.f.SettledRead()
	size := n.heldBytesLocked()
	n.mu.Unlock()
	n.fsys.settledWrites.Inc()
	// Outside n.mu: evicted nodes are detached at once (detachLease
	// takes their locks), as readLease's are. Should the lease have
	// gone meanwhile, n is not in the set and nothing is counted; should
	// another have been taken meanwhile, the count is off by this
	// file's bytes until that lease is given back.
	n.fsys.evictLeases(context.Background(), n.fsys.leases.resize(n, size))
}

// fileOfLease returns a File for an open under lease l with current
// attributes a: primed with what this mount's own writes left (settleWrites)
// or what the lease's grant read, whichever is of a's version.
func (n *node) fileOfLease(l *client.Lease, a *wire.Attr, flags int) (*client.File, error) {
	n.mu.Lock()
	kept := n.mu.settledRead
	n.mu.Unlock()
	if kept != nil && kept.GetAttr().GetVersion() == a.GetVersion() {
		return n.fsys.c.FileOfRead(kept, a, flags)
	}
	return n.fsys.c.FileOfLease(l, a, flags)
}

// leasedLookup answers a lookup of name in n from the child node the
// kernel still holds (its entry expired) when the child's read lease was
// granted with name in n naming it (client.Lease.NamedBy): another
// client's change of the name (unlink, rename away or over it) revokes
// that lease first, and this mount's own changes of it go through the
// kernel, which moves or drops the child here. The attributes answered
// are those held under the lease, which are exact (knownEntry says why
// they must be). A walk-ahead fetch of the child's lease under way is
// waited for: a process that opens the files of a listing after their
// entries expired (find | xargs cat) looks each one up just before its
// open, and the walk-ahead asked for that lease at the previous open.
func (n *node) leasedLookup(name string, out *fuse.EntryOut) *fs.Inode {
	in := n.GetChild(name)
	if in == nil {
		return nil
	}
	ch, ok := in.Operations().(*node)
	if !ok || ch.isDir() {
		return nil
	}
	ch.waitPrefetch()
	ch.mu.Lock()
	lin := ch.mu.linearize
	ch.mu.Unlock()
	la, l := ch.cachedLeaseAttr()
	if la == nil || lin || !l.NamedBy(n.ino, name) {
		return nil
	}
	ch.setAttr(la, &out.Attr)
	out.SetAttrTimeout(ch.leaseAttrTimeout(l))
	n.fsys.leasedLookups.Inc()
	return in
}
