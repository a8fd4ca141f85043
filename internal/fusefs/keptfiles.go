package fusefs

import (
	"sync"
	"syscall"

	"github.com/govfs/govfs/client"
)

// Read leases kept past the kernel's forget of a file.
//
// The kernel forgets a file's inode when memory is short or caches are
// dropped, and go-fuse's node goes with it. Its read lease stayed in the
// mount's lease set, held by a node nobody would find again: the next
// node made for the file asked for a new lease, and the old one was
// renewed for nothing until evicted (after `echo 3 > drop_caches`, every
// file grep -r opened cost a grant and an eviction's release, twice the
// lease requests of a first read). Now the forgotten node stays the
// lease's holder in keptFiles, keyed by inode, and the next node of the
// file that an operation reaches takes the lease over, with the
// attributes held under it when they are of the version that node was
// told (adoptOnce, adoptLease); a revoke that reaches the node the lease
// was granted to is passed on to its holder (leaseRevoked: heir). The
// kernel's pages of the file went with the
// inode, so the new node does not claim them (cacheLease stays nil) and
// the walk-ahead reads small files ahead again (prefetchLease).

// keptFiles maps an inode to the forgotten node holding its read lease.
type keptFiles struct {
	mu sync.Mutex
	m  map[uint64]*node
}

// keepLease keeps n's read lease for the next node of its file; n was
// just forgotten.
func (n *node) keepLease() {
	n.mu.Lock()
	held := n.mu.lease != nil
	n.mu.Unlock()
	if !held {
		return
	}
	k := &n.fsys.keptFiles
	k.mu.Lock()
	if k.m == nil {
		k.m = map[uint64]*node{}
	}
	k.m[uint64(n.ino)] = n
	k.mu.Unlock()
}

// unkeep forgets n as the kept holder of its file's lease (the lease was
// dropped or revoked).
func (n *node) unkeep() {
	k := &n.fsys.keptFiles
	k.mu.Lock()
	if k.m[uint64(n.ino)] == n {
		delete(k.m, uint64(n.ino))
	}
	k.mu.Unlock()
}

// adoptOnce runs adoptLease at the first use of n, a regular file's
// node: go-fuse makes a node for every lookup and keeps only the first
// it registers, so a lease is given only to a node an operation reached
// (a node dropped at registration would hold it for nothing).
func (n *node) adoptOnce() {
	n.mu.Lock()
	done := n.mu.adoptChecked
	n.mu.adoptChecked = true
	n.mu.Unlock()
	if !done && n.StableAttr().Mode&syscall.S_IFMT == syscall.S_IFREG {
		n.adoptLease()
	}
}

// adoptLease gives n the read lease a forgotten node of the same file
// kept, if that lease is still valid; the attributes (and a written
// small file's bytes) held under it only when they are of the version n
// was just told (its lookup's answer): one of another version may be
// older than a change this mount made since, or newer than a listing
// that answered n's lookup.
func (n *node) adoptLease() {
	k := &n.fsys.keptFiles
	k.mu.Lock()
	d := k.m[uint64(n.ino)]
	if d != nil {
		delete(k.m, uint64(n.ino))
	}
	k.mu.Unlock()
	if d == nil || d == n {
		return
	}
	d.mu.Lock()
	l := d.mu.lease
	if l == nil || !l.Valid() || d.mu.linearize {
		d.mu.Unlock()
		return // ended or ending: its revoke or eviction drops it
	}
	n.mu.Lock()
	if n.mu.lease != nil {
		// It asked for its own meanwhile: d's goes when evicted.
		n.mu.Unlock()
		d.mu.Unlock()
		return
	}
	attr, leaseAttr, read := d.mu.attr, d.mu.leaseAttr, d.mu.settledRead
	origin := d.mu.origin
	if origin == nil {
		origin = d
	}
	d.mu.lease, d.mu.cacheLease, d.mu.leaseAttr, d.mu.settledRead = nil, nil, false, nil
	// A revoke of l reaches the node it was granted to (origin); it is
	// passed on from there, in one step, to the node holding l now.
	d.mu.heir = n
	n.mu.lease, n.mu.origin = l, origin
	if leaseAttr && n.mu.attr != nil && attr.GetVersion() == n.mu.attr.GetVersion() {
		n.mu.attr, n.mu.leaseAttr, n.mu.settledRead = attr, true, read
	}
	n.mu.Unlock()
	d.mu.Unlock()
	if origin != d {
		origin.mu.Lock()
		origin.mu.heir = n
		origin.mu.Unlock()
	}
	n.fsys.leases.replace(d, n)
	n.fsys.adoptedLeases.Inc()
}

// heirOf returns the node that took l over from n (nil if none).
func (n *node) heirOf(l *client.Lease) *node {
	n.mu.Lock()
	defer n.mu.Unlock()
	if h := n.mu.heir; h != nil && n.mu.lease != l {
		return h
	}
	return nil
}
