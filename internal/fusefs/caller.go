package fusefs

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/govfs/govfs/client"
	"github.com/govfs/govfs/internal/posix"
	"github.com/govfs/govfs/internal/wire"
)

// asCaller marks ctx with the identity of the process behind a FUSE
// request (its uid and gid as the kernel sends them, its supplementary
// groups from /proc), so that the change it makes is checked by the
// ministry as that user's (namespace/perm.go), not as the mount's. A
// context without a FUSE caller is returned as it is (the mount's own
// work: Config.Cred).
func (f *FS) asCaller(ctx context.Context) context.Context {
	c, ok := fuse.FromContext(ctx)
	if !ok {
		return ctx
	}
	cred := &wire.Cred{Uid: c.Uid, Gid: c.Gid}
	if c.Uid != 0 {
		cred.Groups = groupsOf(c.Pid, c.Gid)
	}
	return client.WithCaller(ctx, cred)
}

// groupsOf reads a process's supplementary groups (not cached: a
// process may change them between two requests).
func groupsOf(pid uint32, primary uint32) []uint32 {
	fh, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil // gone already: its primary group only
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "Groups:")
		if !ok {
			continue
		}
		var gs []uint32
		for _, f := range strings.Fields(rest) {
			if g, err := strconv.ParseUint(f, 10, 32); err == nil && uint32(g) != primary {
				gs = append(gs, uint32(g))
			}
		}
		return gs
	}
	return nil
}

// mayDeferCreate says whether a create in n may be answered here and
// queued: the ministry would allow it by the attributes held (it checks
// again; this only keeps the mount from acknowledging what it refuses).
func (n *node) mayDeferCreate(ctx context.Context) bool {
	cred, err := n.fsys.c.Caller(ctx)
	if err != nil {
		return false // refused: let the ministry say so now
	}
	if posix.IsRoot(cred) {
		return true
	}
	dir := n.cachedAttr()
	return dir != nil && posix.MayCreate(dir, cred, "") == nil
}

// mayDeferRemove says the same of removing or replacing a name in n; a
// sticky directory (whose rule needs the victim's owner) is left to the
// ministry unless the caller owns it.
func (n *node) mayDeferRemove(ctx context.Context) bool {
	cred, err := n.fsys.c.Caller(ctx)
	if err != nil {
		return false
	}
	if posix.IsRoot(cred) {
		return true
	}
	dir := n.cachedAttr()
	if dir == nil || posix.MayCreate(dir, cred, "") != nil {
		return false
	}
	return dir.GetMode()&0o1000 == 0 || dir.GetUid() == cred.GetUid()
}
