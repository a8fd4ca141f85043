package fusefs

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

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
	return withFuseCaller(ctx, func(*wire.Cred) bool { return true })
}

// withFuseCaller marks ctx with the FUSE caller's identity, reading its
// supplementary groups only when needGroups says they can matter.
func withFuseCaller(ctx context.Context, needGroups func(*wire.Cred) bool) context.Context {
	c, ok := fuse.FromContext(ctx)
	if !ok {
		return ctx
	}
	cred := &wire.Cred{Uid: c.Uid, Gid: c.Gid}
	if c.Uid != 0 && needGroups(cred) {
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

// checkAccess is what the kernel's default_permissions would check before
// an open, an opendir or access(2), made here against the attributes the
// mount holds (fetched when it holds none): the mount then keeps users
// from opening each other's files without that option. (Path walks are
// not checked this way: the kernel serves cached entries without asking.)
// Root passes, except execution of a file nobody may execute.
func (n *node) checkAccess(ctx context.Context, want uint32, what string) syscall.Errno {
	return n.checkAccessWith(ctx, nil, want, what)
}

// checkAccessWith is checkAccess against fresh, attributes just read from
// the ministry, when they are newer than those the mount holds (a clerk
// may not have applied this mount's own last change yet).
func (n *node) checkAccessWith(ctx context.Context, fresh *wire.Attr, want uint32, what string) syscall.Errno {
	a := n.cachedAttr()
	if fresh != nil && (a == nil || fresh.GetVersion() > a.GetVersion()) {
		a = fresh
	}
	if a == nil {
		var err error
		if a, err = n.fsys.c.GetAttr(bg(ctx), n.ino); err != nil {
			return n.fsys.errno(what, err)
		}
	}
	// Every open asks: /proc is read only for a caller who is neither
	// the owner nor of the file's primary group, whose class the
	// supplementary groups decide.
	ctx = withFuseCaller(ctx, func(c *wire.Cred) bool { return c.GetUid() != a.GetUid() && c.GetGid() != a.GetGid() })
	cred, err := n.fsys.c.Caller(ctx)
	if err != nil {
		return syscall.EACCES
	}
	if err := posix.CheckAccess(a, cred, want, what); err != nil {
		return syscall.EACCES
	}
	return 0
}

// openWant is the permission an open with flags needs.
func openWant(flags uint32) uint32 {
	var want uint32
	switch flags & syscall.O_ACCMODE {
	case syscall.O_RDONLY:
		want = posix.MayRead
	case syscall.O_WRONLY:
		want = posix.MayWrite
	default:
		want = posix.MayRead | posix.MayWrite
	}
	if flags&syscall.O_TRUNC != 0 {
		want |= posix.MayWrite
	}
	return want
}

// Access answers access(2) (and faccessat) with the same rules.
func (n *node) Access(ctx context.Context, mask uint32) syscall.Errno {
	var want uint32
	if mask&4 != 0 { // R_OK
		want |= posix.MayRead
	}
	if mask&2 != 0 { // W_OK
		want |= posix.MayWrite
	}
	if mask&1 != 0 { // X_OK
		want |= posix.MayExec
	}
	if want == 0 {
		return 0 // F_OK: the file exists (the lookup found it)
	}
	return n.checkAccess(ctx, want, "access")
}

// userCred is the FUSE caller's credential when the mount's certificate
// is not trusted with every file (root squash, chosen uids), nil
// otherwise: such a mount makes its users' reads in their names, so the
// ministry checks lookups, listings and attributes, and hands out chunk
// tokens, as for that user rather than the mount (which would be nobody,
// or refused).
func (f *FS) userCred(ctx context.Context) *wire.Cred {
	if f.c.TrustedWithEveryFile() {
		return nil
	}
	c, ok := fuse.FromContext(ctx)
	if !ok {
		return nil
	}
	cred := &wire.Cred{Uid: c.Uid, Gid: c.Gid}
	if c.Uid != 0 {
		cred.Groups = groupsOf(c.Pid, c.Gid)
	}
	return cred
}

// forUser marks ctx with userCred's credential, if any.
func (f *FS) forUser(ctx context.Context) context.Context {
	if cred := f.userCred(ctx); cred != nil {
		return client.WithCaller(ctx, cred)
	}
	return ctx
}
