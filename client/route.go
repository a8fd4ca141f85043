package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/wire"
)

// maxRedirects bounds REDIRECT hops within one operation.
const maxRedirects = 8

// ReadOption changes how one read call is served.
type ReadOption func(*readOpts)

type readOpts struct {
	consistency wire.ReadConsistency
	// leader: the read goes to the group's leader (a lookup's recall).
	leader     bool
	noDeferred bool
}

// PastDeferred lets a read go before the deferred changes queued so far
// are applied (async.go): for a caller that knows none of them touches
// what it reads.
func PastDeferred() ReadOption {
	return func(o *readOpts) { o.noDeferred = true }
}

// Linearizable makes a read linearizable (the serving replica confirms
// with its leader) instead of the Client's default.
func Linearizable() ReadOption {
	return func(o *readOpts) { o.consistency = wire.ReadConsistency_LINEARIZABLE }
}

// viaLeader sends a read to the group's leader.
func viaLeader() ReadOption {
	return func(o *readOpts) { o.leader = true }
}

// Session makes a read session consistent instead of the Client's default.
func Session() ReadOption {
	return func(o *readOpts) { o.consistency = wire.ReadConsistency_SESSION }
}

func (c *Client) readOptions(opts []ReadOption) readOpts {
	o := readOpts{consistency: c.cfg.Consistency}
	for _, f := range opts {
		f(&o)
	}
	return o
}

// ---- request ids ----

// newCommand stamps a command with the next RequestID and the proposer
// time and registers it as in flight; call finish(seq) when done.
func (c *Client) newCommand(build func(*wire.Command)) *wire.Command {
	c.mu.Lock()
	seq := c.mu.nextSeq
	c.mu.nextSeq++
	c.mu.inflight[seq] = struct{}{}
	if len(c.mu.inflight) == 1 {
		c.mu.lowest = seq
	}
	first := c.mu.lowest
	c.mu.Unlock()
	cmd := &wire.Command{
		Version: 1,
		Req:     &wire.RequestID{ClientId: c.clientID, Seq: seq, FirstIncomplete: first},
		NowNs:   c.cfg.Clock.Now().UnixNano(),
		// Config.Cred; mutateIn puts WithCaller's in its place.
		Caller: c.callerFor(context.Background()),
	}
	build(cmd)
	return cmd
}

func (c *Client) finish(seq uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.mu.inflight[seq]; !ok {
		return
	}
	delete(c.mu.inflight, seq)
	if len(c.mu.inflight) == 0 || seq != c.mu.lowest {
		return
	}
	// The next one still in flight (seqs only grow, so lowest passes
	// each seq once).
	for c.mu.lowest++; c.mu.lowest < c.mu.nextSeq; c.mu.lowest++ {
		if _, ok := c.mu.inflight[c.mu.lowest]; ok {
			return
		}
	}
}

// ---- routing state ----

// owner returns the group believed to own ino.
func (c *Client) owner(ino ids.Ino) ids.GroupID {
	c.mu.Lock()
	defer c.mu.Unlock()
	if g, ok := c.mu.owners[ino]; ok {
		return g
	}
	return ids.RootMinistry
}

// apart reports whether a and b are known to belong to different
// ministries (an inode not in the cache belongs to the root ministry
// only as a guess, so it proves nothing; the ministry answers EXDEV
// then).
func (c *Client) apart(a, b ids.Ino) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	ga, oka := c.mu.owners[a]
	gb, okb := c.mu.owners[b]
	switch {
	case oka && okb:
		return ga != gb
	case oka != okb:
		// One is known to be outside the root ministry; the other is
		// the root (always the root ministry's).
		other := b
		if okb {
			other = a
		}
		return other == ids.RootIno
	}
	return false
}

// setOwner records that group g owns ino. Only inodes outside the root
// ministry are stored, since that is the default.
func (c *Client) setOwner(ino ids.Ino, g ids.GroupID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if g == ids.RootMinistry {
		delete(c.mu.owners, ino)
		return
	}
	if len(c.mu.owners) >= maxOwners {
		drop := maxOwners / 8
		for ino := range c.mu.owners {
			if drop == 0 {
				break
			}
			delete(c.mu.owners, ino)
			drop--
		}
	}
	c.mu.owners[ino] = g
}

// learnChild records the owner of a child found in group parentGroup;
// ministry is the answer's ministry field (0 = same as the parent).
func (c *Client) learnChild(child ids.Ino, parentGroup ids.GroupID, ministry uint64) {
	if child == 0 {
		return
	}
	if ministry != 0 {
		c.setOwner(child, ids.GroupID(ministry))
		return
	}
	c.setOwner(child, parentGroup)
}

func (c *Client) candidatesLocked(g ids.GroupID) []string {
	if a := c.mu.groupAddrs[g]; len(a) > 0 {
		return a
	}
	return c.mu.addrs
}

// leaderAddr returns where to send a mutation for g: the known leader, or
// the next candidate in the leader search.
func (c *Client) leaderAddr(g ids.GroupID) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if a, ok := c.mu.leader[g]; ok {
		return a
	}
	cands := c.candidatesLocked(g)
	// Past nodes that just went silent (a paused old leader), unless
	// every candidate did.
	for range cands {
		if a := cands[c.mu.cursor[g]%len(cands)]; !c.silentLocked(a) {
			return a
		}
		c.mu.cursor[g]++
	}
	return cands[c.mu.cursor[g]%len(cands)]
}

// setLeader records addr, which just answered, as g's leader.
func (c *Client) setLeader(g ids.GroupID, addr string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mu.leader[g] = addr
	delete(c.mu.silent, addr)
}

// hintLeader records a NOT_LEADER answer's hint: addr leads g, unless
// addr just went silent (a follower that has not yet heard of the new
// leader still names the paused old one): then the search goes on.
func (c *Client) hintLeader(g ids.GroupID, addr string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.silentLocked(addr) {
		return
	}
	c.mu.leader[g] = addr
}

// noteSilent avoids addr for a while: a call to it was abandoned
// because it did not answer a ping (guard.go).
func (c *Client) noteSilent(addr string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.silent == nil {
		c.mu.silent = map[string]time.Time{}
	}
	c.mu.silent[addr] = time.Now().Add(guardSilence)
}

func (c *Client) isSilent(addr string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.silentLocked(addr)
}

func (c *Client) silentLocked(addr string) bool {
	until, ok := c.mu.silent[addr]
	if ok && !time.Now().Before(until) {
		delete(c.mu.silent, addr)
		return false
	}
	return ok
}

// leaderFailed forgets addr as g's leader and moves the search past it.
func (c *Client) leaderFailed(g ids.GroupID, addr string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.leader[g] == addr {
		delete(c.mu.leader, g)
	}
	cands := c.candidatesLocked(g)
	if i := slices.Index(cands, addr); i >= 0 {
		c.mu.cursor[g] = i + 1
	} else {
		c.mu.cursor[g]++
	}
}

// readAddr returns where to send a read for g: the preferred member when
// it serves g, else a random candidate, which becomes preferred.
func (c *Client) readAddr(g ids.GroupID) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	cands := c.candidatesLocked(g)
	if slices.Contains(cands, c.mu.readPref) && !c.silentLocked(c.mu.readPref) {
		return c.mu.readPref
	}
	c.mu.readPref = cands[c.mu.rand.Int64N(int64(len(cands)))]
	for i := 0; i < len(cands) && c.silentLocked(c.mu.readPref); i++ {
		c.mu.readPref = cands[(slices.Index(cands, c.mu.readPref)+1)%len(cands)]
	}
	return c.mu.readPref
}

// readFailed moves the read preference past addr.
func (c *Client) readFailed(g ids.GroupID, addr string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.readPref != addr {
		return
	}
	cands := c.candidatesLocked(g)
	i := slices.Index(cands, addr)
	c.mu.readPref = cands[(i+1)%len(cands)]
}

func (c *Client) noteApplied(g ids.GroupID, index uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if index > c.mu.applied[g] {
		c.mu.applied[g] = index
	}
}

func (c *Client) appliedIndex(g ids.GroupID) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.applied[g]
}

// rpcFailed classifies a gRPC error: worth retrying elsewhere or not.
func (c *Client) rpcFailed(ctx context.Context, addr string, err error) (bool, error) {
	if ctx.Err() != nil {
		return true, fmt.Errorf("%s: %w", addr, err) // the retrier reports ctx
	}
	st := status.Convert(err)
	switch st.Code() {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled,
		codes.Aborted, codes.ResourceExhausted:
		return true, fmt.Errorf("%s: %v: %s", addr, st.Code(), st.Message())
	case codes.PermissionDenied:
		// The certificate does not allow the call or the caller it names
		// (docs/security.md): final, and the message says why.
		return false, fmt.Errorf("%w: %s", syscall.EACCES, st.Message())
	}
	return false, fmt.Errorf("%w: rpc to %s: %v: %s", syscall.EIO, addr, st.Code(), st.Message())
}

// ---- calls ----

// mutate sends cmd to the leader of the group owning route, retrying the
// same command until it is answered. A non-zero Result.errno becomes the
// error.
func (c *Client) mutate(ctx context.Context, route ids.Ino, cmd *wire.Command) (*wire.Result, error) {
	return c.mutateIn(ctx, c.owner(route), route, cmd)
}

// mutateIn is mutate with the group given (the president group for
// cluster-map commands).
func (c *Client) mutateIn(ctx context.Context, group ids.GroupID, route ids.Ino, cmd *wire.Command) (*wire.Result, error) {
	// Deferred changes first: this one may depend on them (async.go).
	res, _, _, err := c.mutateResp(ctx, group, route, cmd, cmd.GetBatch() == nil, mutateExtra{})
	return res, err
}

// mutateExtra is what a Mutate asks besides its command: leaseNew names
// the new files whose leases it asks for (MutateRequest.lease_new_files),
// leaseDirs the new directories (lease_new_dirs), buffered the buffered
// write leases its writes were answered under (buffered_leases).
type mutateExtra struct {
	leaseNew, leaseDirs, buffered []uint64
	// redirected runs before the first attempt sent to another group
	// than the one asked (a move), which is then sent without leaseDirs:
	// the pending leases watch the first group's minister only
	// (Lease.askedIn), so they end first (review).
	redirected func()
}

// mutateResp is mutateIn returning the whole answer too, and the group
// that gave it; flush says whether the deferred changes go first (false
// only for commands that depend on no namespace state, such as a pool of
// chunk handles).
func (c *Client) mutateResp(ctx context.Context, group ids.GroupID, route ids.Ino, cmd *wire.Command, flush bool, extra mutateExtra) (*wire.Result, *wire.MutateResponse, ids.GroupID, error) {
	defer c.finish(cmd.GetReq().GetSeq())
	if cred, ok := ctx.Value(callerKey{}).(*wire.Cred); ok && cred != nil && cmd.GetBatch() == nil {
		cmd.Caller = c.callerFor(ctx)
	}
	if cmd.GetBatch() == nil && group != ids.PresidentGroup {
		// Before the flush: a write queued behind after it is sent
		// first, one queued before it saw this change coming
		// (writebehind.go).
		defer c.changing.start(route)()
	}
	if flush {
		c.flushDeferred(ctx)
	}
	var res *wire.Result
	var full *wire.MutateResponse
	rt := &target{group: group, ino: route, leader: true, follow: true, timeout: c.cfg.CallTimeout}
	err := c.call(ctx, rt, func(ctx context.Context, cl wire.MetaClient, epoch uint64) (*wire.Status, uint64, error) {
		dirs := extra.leaseDirs
		if rt.group != group && len(dirs) > 0 {
			if extra.redirected != nil {
				extra.redirected()
				extra.redirected = nil
			}
			dirs = nil
		}
		resp, err := cl.Mutate(ctx, &wire.MutateRequest{ClusterId: c.clusterID, Group: uint64(rt.group), Cmd: cmd, Epoch: epoch, LeaseNewFiles: extra.leaseNew, LeaseNewDirs: dirs, NewDirsOrNothing: len(dirs) > 0, BufferedLeases: extra.buffered})
		res, full = resp.GetResult(), resp
		return resp.GetStatus(), resp.GetAppliedIndex(), err
	})
	if err != nil {
		if len(full.GetLostLeases()) > 0 || len(full.GetRefusedNewDirs()) > 0 {
			// Which buffered leases or new directories' leases refused
			// it (sendBatch).
			return nil, full, rt.group, err
		}
		return nil, nil, rt.group, err
	}
	if e := res.GetErrno(); e != 0 {
		if m := res.GetMessage(); m != "" {
			// The ministry says why: keep it (errors.Is still finds the
			// errno).
			return nil, full, rt.group, &errnoMsg{errno: syscall.Errno(e), msg: m}
		}
		return nil, full, rt.group, syscall.Errno(e)
	}
	return res, full, rt.group, nil
}

// read sends req to a member of the group owning route. It returns the
// answer and the group that served it.
func (c *Client) read(ctx context.Context, route ids.Ino, req *wire.ReadRequest, opts []ReadOption) (*wire.ReadResponse, ids.GroupID, error) {
	o := c.readOptions(opts)
	// Deferred changes first: nothing this Client reads may miss them.
	if !o.noDeferred {
		c.flushDeferred(ctx)
	}
	if req.Caller == nil {
		// The ministry checks lookups and listings against this user,
		// and the chunk access tokens of a chunk table allow what it may
		// do with the file.
		req.Caller = c.callerFor(ctx)
	}
	var out *wire.ReadResponse
	rt := &target{group: c.owner(route), ino: route, leader: o.leader, follow: true, timeout: c.cfg.CallTimeout}
	err := c.call(ctx, rt, func(ctx context.Context, cl wire.MetaClient, epoch uint64) (*wire.Status, uint64, error) {
		req.ClusterId = c.clusterID
		req.Group = uint64(rt.group)
		req.MinIndex = c.appliedIndex(rt.group)
		req.Consistency = o.consistency
		req.Epoch = epoch
		resp, err := cl.Read(ctx, req)
		out = resp
		return resp.GetStatus(), resp.GetAppliedIndex(), err
	})
	return out, rt.group, err
}

// errnoMsg is a failed operation's errno with the server's explanation.
// Its text is the errno's alone, so messages built on it read as the
// README shows (e.g. "file exists"); ErrorDetail has the explanation, for
// logs.
type errnoMsg struct {
	errno syscall.Errno
	msg   string
}

func (e *errnoMsg) Error() string  { return e.errno.Error() }
func (e *errnoMsg) Unwrap() error  { return e.errno }
func (e *errnoMsg) Detail() string { return e.msg }

// ErrorDetail returns the server's explanation of a failed operation (why
// the ministry answered EINVAL, ESTALE, ...), or "" when there is none.
func ErrorDetail(err error) string {
	var e *errnoMsg
	if errors.As(err, &e) {
		return e.msg
	}
	return ""
}
