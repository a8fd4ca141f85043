package fusefs

import (
	"context"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/govfs/govfs/client"
)

// statfsBlock is the block size statfs reports.
const statfsBlock = 4096

// statfsFiles is the inode count statfs reports as the total: GovFS has
// no inode table to fill (inode numbers are 64-bit), so this only keeps
// df -i readable.
const statfsFiles = 1 << 40

// statfsTTL is how long a statfs answer is reused (df, and some
// programs, call statfs often).
const statfsTTL = 2 * time.Second

type statfsCache struct {
	mu   sync.Mutex
	at   time.Time
	out  fuse.StatfsOut
	have bool
}

// Statfs reports the cluster's capacity as the president's leader knows
// it from chunk server heartbeats: live servers' capacity and use,
// divided by the replica count (so the figures are what files can still
// hold). Files: allocated inode numbers out of statfsFiles.
func (n *node) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	sc := &n.fsys.statfs
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if sc.have && time.Since(sc.at) < statfsTTL {
		*out = sc.out
		return 0
	}
	st, err := clusterSpace(bg(ctx), n.fsys.c)
	if err != nil {
		return n.fsys.errno("statfs", err)
	}
	*out = fuse.StatfsOut{Bsize: statfsBlock, Frsize: statfsBlock, NameLen: client.MaxNameLen}
	r := uint64(max(st.replicas, 1))
	out.Blocks = uint64(st.capacity) / r / statfsBlock
	free := uint64(max(st.capacity-st.used, 0)) / r / statfsBlock
	out.Bfree, out.Bavail = free, free
	out.Files = statfsFiles
	out.Ffree = statfsFiles - min(st.inodes, statfsFiles)
	sc.out, sc.at, sc.have = *out, time.Now(), true
	return 0
}

type space struct {
	capacity, used int64
	replicas       int
	inodes         uint64
}

// clusterSpace asks the metadata nodes for their status until one knows
// the chunk servers' liveness (the president's leader).
func clusterSpace(ctx context.Context, c *client.Client) (space, error) {
	var s space
	var lastErr error
	for _, m := range c.Members() {
		st, err := c.Status(ctx, m.GetAddr())
		if err != nil {
			lastErr = err
			continue
		}
		if next := st.GetNextFreeIno(); next > 0 {
			s.inodes = max(s.inodes, next-1)
		}
		for _, g := range st.GetReplicaGroups() {
			s.replicas = max(s.replicas, len(g.GetMembers()))
		}
		known := false
		var capacity, used int64
		for _, cs := range st.GetChunkServers() {
			if !cs.GetKnown() {
				continue
			}
			known = true
			if cs.GetAlive() {
				capacity += cs.GetServer().GetCapacity()
				used += cs.GetUsed()
			}
		}
		if known {
			s.capacity, s.used = capacity, used
			return s, nil
		}
	}
	if s.inodes > 0 || lastErr == nil {
		// No node knows liveness (no leader right now, or no chunk
		// servers): report what is known.
		return s, nil
	}
	return s, lastErr
}
