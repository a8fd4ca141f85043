package metanode

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"syscall"
	"time"

	"github.com/govfs/govfs/internal/certs"
	"github.com/govfs/govfs/internal/chunktoken"
	"github.com/govfs/govfs/internal/clustermap"
	"github.com/govfs/govfs/internal/engine"
	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/lease"
	"github.com/govfs/govfs/internal/multiraft"
	"github.com/govfs/govfs/internal/namespace"
	"github.com/govfs/govfs/internal/rpc"
	"github.com/govfs/govfs/internal/wire"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// maxSymlinkTarget is PATH_MAX.
const maxSymlinkTarget = 4096

// metaService implements wire.MetaServer.
type metaService struct {
	wire.UnimplementedMetaServer
	n *Node
}

func statusOf(code wire.Code, format string, args ...any) *wire.Status {
	return &wire.Status{Code: code, Message: fmt.Sprintf(format, args...)}
}

// errStatus maps an internal error to a wire status.
func (s *metaService) errStatus(g ids.GroupID, err error) *wire.Status {
	var nl *multiraft.NotLeaderError
	var errno syscall.Errno
	switch {
	case errors.As(err, &nl):
		return &wire.Status{Code: wire.Code_NOT_LEADER, Message: err.Error(), LeaderId: uint64(nl.Leader), LeaderAddr: s.n.addrOf(nl.Leader)}
	case errors.Is(err, multiraft.ErrUnknownGroup) && g == ids.PresidentGroup:
		// A node that joined later hosts no president replica: point at
		// one that does.
		return &wire.Status{Code: wire.Code_NOT_LEADER, LeaderAddr: s.n.presidentHint(0),
			Message: fmt.Sprintf("node %v does not host the president group", s.n.cfg.ID)}
	case errors.Is(err, multiraft.ErrUnknownGroup):
		return statusOf(wire.Code_UNKNOWN_GROUP, "group %v is not hosted on node %v", g, s.n.cfg.ID)
	case errors.Is(err, multiraft.ErrUnavailable), errors.Is(err, multiraft.ErrStopped),
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		lead, _ := s.n.host.Leader(g)
		return &wire.Status{Code: wire.Code_UNAVAILABLE, Message: err.Error(), LeaderId: uint64(lead), LeaderAddr: s.n.addrOf(lead)}
	case errors.As(err, &errno):
		return &wire.Status{Code: wire.Code_ERRNO, Errno: uint32(errno), Message: err.Error()}
	default:
		return statusOf(wire.Code_INTERNAL, "%v", err)
	}
}

func (s *metaService) checkCluster(cid string) *wire.Status {
	if mine := s.n.ClusterID(); cid != "" && mine != "" && cid != mine {
		return statusOf(wire.Code_WRONG_CLUSTER, "request for cluster %s reached node %v of cluster %s: check --meta / GOVFS_META", cid, s.n.cfg.ID, mine)
	}
	return nil
}

func withDefaultDeadline(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, 10*time.Second)
}

// validateCommand checks a client command at the edge so that bad input
// never reaches the log.
func validateCommand(g ids.GroupID, cmd *wire.Command) error {
	if cmd == nil {
		return errors.New("missing command")
	}
	if cmd.GetVersion() != 1 {
		return fmt.Errorf("command version %d is not supported (want 1)", cmd.GetVersion())
	}
	names := [][]byte{}
	switch op := cmd.GetOp().(type) {
	case *wire.Command_Create:
		names = append(names, op.Create.GetName())
		if op.Create.GetType() == wire.FileType_SYMLINK {
			if len(op.Create.GetTarget()) == 0 {
				return fmt.Errorf("%w: empty symlink target", syscall.ENOENT)
			}
			if len(op.Create.GetTarget()) > maxSymlinkTarget {
				return fmt.Errorf("%w: symlink target longer than %d bytes", syscall.ENAMETOOLONG, maxSymlinkTarget)
			}
		}
	case *wire.Command_Link:
		names = append(names, op.Link.GetNewName())
	case *wire.Command_Unlink:
		names = append(names, op.Unlink.GetName())
	case *wire.Command_Rename:
		names = append(names, op.Rename.GetName(), op.Rename.GetNewName())
	case *wire.Command_Setattr, *wire.Command_SetXattr, *wire.Command_RemoveXattr, *wire.Command_SetChunk,
		*wire.Command_WriteInline, *wire.Command_DropInline, *wire.Command_ReserveInodes:
	case *wire.Command_Batch:
		return validateBatch(g, cmd)
	case *wire.Command_ExportSubtree, *wire.Command_ImportSubtree, *wire.Command_FinishExport, *wire.Command_AbortExport,
		*wire.Command_FreezeEntries:
		// Steps of a subtree move, sent by the president's leader
		// (only node certificates may: authz.go).
		if g == ids.PresidentGroup {
			return fmt.Errorf("%T goes to a ministry", cmd.GetOp())
		}
		if cmd.GetReq().GetClientId() == 0 {
			return fmt.Errorf("%T needs a request id", cmd.GetOp())
		}
		return nil
	case *wire.Command_AllocInodes, *wire.Command_RegisterChunkServer, *wire.Command_AllocChunkHandles, *wire.Command_MemberSynced,
		*wire.Command_MoveState, *wire.Command_JoinNode, *wire.Command_SetMembers:
		if g != ids.PresidentGroup {
			return fmt.Errorf("%T goes to the president group (0)", cmd.GetOp())
		}
		return nil
	case nil:
		return errors.New("command has no operation")
	default:
		return fmt.Errorf("operation %T may not be sent by clients", op)
	}
	if g == ids.PresidentGroup {
		return errors.New("the president group (0) holds no namespace; send file operations to a ministry")
	}
	for _, nm := range names {
		if err := namespace.ValidateName(nm); err != nil {
			return err
		}
	}
	return nil
}

// validateBatch checks a batch and each of its commands: all of one
// client, each with its request id, none a batch or a president
// operation. One bad command refuses the whole batch.
func validateBatch(g ids.GroupID, cmd *wire.Command) error {
	if cmd.GetReq().GetClientId() != 0 {
		return errors.New("a batch carries no request id (its commands do)")
	}
	cmds := cmd.GetBatch().GetCmds()
	if len(cmds) == 0 || len(cmds) > namespace.MaxBatch {
		return fmt.Errorf("batch of %d commands (want 1 to %d)", len(cmds), namespace.MaxBatch)
	}
	client := cmds[0].GetReq().GetClientId()
	for i, sub := range cmds {
		switch op := sub.GetOp().(type) {
		case *wire.Command_Batch:
			return fmt.Errorf("batch command %d is a batch", i)
		case *wire.Command_ReserveInodes:
			// A reservation ahead goes through the client's queue, in
			// order with its creates (namespace reserveInodes); a
			// ministry short of numbers answers it ENOSPC, and the
			// client then reserves the plain way, which waits.
			if !op.ReserveInodes.GetAhead() {
				return fmt.Errorf("batch command %d: inode numbers are reserved outside batches, but for a reservation ahead", i)
			}
		case *wire.Command_Create:
			if op.Create.GetIno() == 0 {
				return fmt.Errorf("batch command %d: a batched create needs a reserved inode number (CreateOp.ino)", i)
			}
		case *wire.Command_AllocInodes, *wire.Command_RegisterChunkServer, *wire.Command_AllocChunkHandles, *wire.Command_MemberSynced,
			*wire.Command_MoveState, *wire.Command_JoinNode, *wire.Command_BeginMove, *wire.Command_CreateMinistry, *wire.Command_SetMembers:
			return fmt.Errorf("batch command %d: %T goes to the president group, never in a batch", i, sub.GetOp())
		case *wire.Command_ExportSubtree, *wire.Command_ImportSubtree, *wire.Command_FinishExport, *wire.Command_AbortExport,
			*wire.Command_FreezeEntries:
			return fmt.Errorf("batch command %d: %T is a move step, never in a batch", i, sub.GetOp())
		}
		if c := sub.GetReq().GetClientId(); c == 0 || c != client {
			return fmt.Errorf("batch command %d: client id %d (every command of a batch needs the same non-zero client id, %d)", i, c, client)
		}
		if err := validateCommand(g, sub); err != nil {
			return fmt.Errorf("batch command %d: %w", i, err)
		}
	}
	return nil
}

// needsFreeInodes says whether cmd takes inode numbers from the
// ministry's grant (a create without a reserved number, a reservation).
func needsFreeInodes(cmd *wire.Command) bool {
	switch op := cmd.GetOp().(type) {
	case *wire.Command_Create:
		return op.Create.GetIno() == 0
	case *wire.Command_ReserveInodes:
		return true
	}
	return false
}

func (s *metaService) Mutate(ctx context.Context, req *wire.MutateRequest) (*wire.MutateResponse, error) {
	if st := s.checkCluster(req.GetClusterId()); st != nil {
		return &wire.MutateResponse{Status: st}, nil
	}
	g := ids.GroupID(req.GetGroup())
	if !s.n.host.HasGroup(g) {
		return &wire.MutateResponse{Status: s.errStatus(g, multiraft.ErrUnknownGroup)}, nil
	}
	s.n.ops.add(g)
	cmd := req.GetCmd()
	caller := rpc.CallerOf(ctx)
	if err := authorizeOp(caller, cmd); err != nil {
		return nil, err
	}
	bindChunkCaller(caller, cmd)
	if err := authorizeCaller(caller, cmd); err != nil {
		return nil, err
	}
	if err := s.n.checkAllocProofs(caller, cmd); err != nil {
		return nil, err
	}
	clientID := cmd.GetReq().GetClientId()
	if subs := cmd.GetBatch().GetCmds(); len(subs) > 0 {
		clientID = subs[0].GetReq().GetClientId() // one for the whole batch (validateBatch)
	}
	if err := s.n.clientIDs.check(caller, clientID, s.n.cfg.Clock.Now()); err != nil {
		return nil, err
	}
	if op, ok := cmd.GetOp().(*wire.Command_MemberSynced); ok && caller.Secure {
		if err := s.checkSyncReporter(caller, op.MemberSynced); err != nil {
			return nil, err
		}
	}
	if op, ok := cmd.GetOp().(*wire.Command_RegisterChunkServer); ok && caller.Secure {
		if err := s.checkRegistrant(caller, op.RegisterChunkServer); err != nil {
			return nil, err
		}
	}
	if err := validateCommand(g, cmd); err != nil {
		var errno syscall.Errno
		if errors.As(err, &errno) {
			return &wire.MutateResponse{Status: &wire.Status{Code: wire.Code_ERRNO, Errno: uint32(errno), Message: err.Error()},
				Result: &wire.Result{Errno: uint32(errno), Message: err.Error()}}, nil
		}
		return &wire.MutateResponse{Status: statusOf(wire.Code_INVALID, "%v", err)}, nil
	}
	// Right after formation the root ministry has no inode numbers until
	// the president's first grant lands (milliseconds). Answer a create in
	// that window with a retryable UNAVAILABLE instead of proposing it and
	// recording a permanent ENOSPC for its request id.
	if needsFreeInodes(cmd) {
		var free uint64
		err := s.n.host.Read(g, func(r engine.Reader, _ uint64) error {
			var err error
			free, err = namespace.FreeInodes(r)
			return err
		})
		if err == nil && free == 0 {
			return &wire.MutateResponse{Status: statusOf(wire.Code_UNAVAILABLE, "ministry %v is waiting for inode numbers from the president; retry shortly", g)}, nil
		}
	}
	// A change inside a subtree being moved waits (the client retries);
	// one for an inode that lives elsewhere fails in the state machine
	// and is redirected below (routeMutation).
	if g != ids.PresidentGroup {
		if st := s.n.checkEpoch(ctx, g, req.GetEpoch()); st != nil {
			return &wire.MutateResponse{Status: st}, nil
		}
		if st := s.precheck(g, cmd); st != nil {
			return &wire.MutateResponse{Status: st}, nil
		}
	}
	ctx, cancel := withDefaultDeadline(ctx)
	defer cancel()
	// Writes a client answered under its buffered leases (write-behind)
	// apply only while it still holds them (MutateRequest.buffered_leases).
	unpin := func(bool) {}
	if bl := req.GetBufferedLeases(); len(bl) > 0 && g != ids.PresidentGroup {
		first := firstOf(cmd)
		var lost []uint64
		var err error
		unpin, lost, err = s.n.leases.pinBuffered(g, lease.ClientID(clientID), bl, first.GetReq().GetSeq())
		if err != nil {
			return &wire.MutateResponse{Status: s.errStatus(g, err)}, nil
		}
		if len(lost) > 0 && s.answered(g, first.GetReq()) {
			// A retry of a batch applied already (its answer was
			// lost): answered from what the ministry remembers.
			lost, unpin = nil, func(bool) {}
		}
		if len(lost) > 0 {
			msg := fmt.Sprintf("buffered write leases %v are not held (expired, or granted by a previous minister and not reclaimed): the writes queued under them were not applied", lost)
			return &wire.MutateResponse{Status: &wire.Status{Code: wire.Code_ERRNO, Errno: uint32(syscall.ESTALE), Message: msg},
				Result: &wire.Result{Errno: uint32(syscall.ESTALE), Message: msg}, LostLeases: lost}, nil
		}
	}
	// Unpinned on every way out; applied ones become read leases again.
	applied := false
	defer func() { unpin(applied) }()
	// Other clients' read leases on the inode are given back first (lease.go).
	drained, err := s.n.leases.drainReaders(ctx, g, cmd)
	if err != nil {
		return &wire.MutateResponse{Status: s.errStatus(g, err)}, nil
	}
	// New directories' leases exist before the directories do, or the
	// command is refused unapplied (newdirlease.go).
	var newDirs []lease.Lease
	if len(req.GetLeaseNewDirs()) > 0 && g != ids.PresidentGroup {
		var refused []uint64
		newDirs, refused = s.n.leases.preGrantNewDirs(g, lease.ClientID(clientID), cmd, req.GetLeaseNewDirs())
		if len(refused) > 0 && req.GetNewDirsOrNothing() && !s.answered(g, firstOf(cmd).GetReq()) {
			s.n.leases.giveBackNewDirs(g, lease.ClientID(clientID), newDirs)
			drained(false)
			msg := fmt.Sprintf("directory leases on new directories %v cannot be granted now (a new minister's fence, a move under way, or no lease session yet): nothing was applied; send the command again without asking for them", refused)
			return &wire.MutateResponse{Status: &wire.Status{Code: wire.Code_ERRNO, Errno: uint32(syscall.EAGAIN), Message: msg},
				Result: &wire.Result{Errno: uint32(syscall.EAGAIN), Message: msg}, RefusedNewDirs: refused}, nil
		}
	}
	// The proposer stamps the time so every replica applies the same one.
	cmd.NowNs = s.n.cfg.Clock.Now().UnixNano()
	res, idx, err := s.n.host.Propose(ctx, g, cmd)
	drained(err == nil)
	applied = err == nil
	// A batch is not atomic: one of its commands may meet a move's
	// freeze (movingIn) after its directories were made. Their grants
	// are then kept unanswered, as for a proposal that may still apply
	// (found in review: given back, they left the directories unleased
	// while the client retried).
	moving := err == nil && movingIn(res)
	dirLeases := s.n.leases.settleNewDirs(g, lease.ClientID(clientID), cmd, res, err == nil && !moving, mayStillApply(err) || moving, newDirs)
	if err != nil {
		return &wire.MutateResponse{Status: s.errStatus(g, err)}, nil
	}
	resp := &wire.MutateResponse{Status: &wire.Status{}, Result: res, AppliedIndex: idx, NewDirLeases: dirLeases}
	if len(dirLeases) > 0 {
		resp.LeaseTtlMs = uint64(s.n.leases.ttl.Milliseconds())
	}
	if len(req.GetLeaseNewFiles()) > 0 && g != ids.PresidentGroup && !movingIn(res) {
		var ttl uint64
		resp.NewFileLeases, ttl = s.n.leases.grantNewFiles(g, lease.ClientID(clientID), cmd, res, req.GetLeaseNewFiles())
		if ttl > 0 {
			resp.LeaseTtlMs = ttl
		}
	}
	if res.GetErrno() == 0 {
		resp.Result = s.n.tokenizeResult(caller, g, cmd, res)
		if _, ok := cmd.GetOp().(*wire.Command_AllocChunkHandles); ok {
			// The proof of allocation a ministry asks before it records
			// the chunk in a file (checkAllocProofs), which also lets
			// the allocator write it first (a file leaving inline).
			acc := chunktoken.Write | chunktoken.Alloc
			if trustedForTokens(caller) {
				acc |= chunktoken.Read
			}
			resp.ChunkToken = s.n.mintToken(caller, res.GetStart(), acc)
			if n := res.GetEnd() - res.GetStart(); n > 1 && n <= maxHandleTokens && resp.ChunkToken != nil {
				// A client's pool of handles: one token each (larger
				// grants get the first one only: signing is not free).
				resp.ChunkTokens = make([][]byte, n)
				for i := range n {
					resp.ChunkTokens[i] = s.n.mintToken(caller, res.GetStart()+i, acc)
				}
			}
		}
	}
	if movingIn(res) {
		resp.Status = statusOf(wire.Code_UNAVAILABLE, "%s", movingMessage(res))
		return resp, nil
	}
	if e := res.GetErrno(); e != 0 {
		resp.Status = &wire.Status{Code: wire.Code_ERRNO, Errno: e, Message: res.GetMessage()}
		if g != ids.PresidentGroup {
			if st := s.n.routeMutation(g, cmd, res); st != nil {
				resp.Status = st
				if st.GetCode() == wire.Code_ERRNO {
					resp.Result = &wire.Result{Errno: st.GetErrno(), Message: st.GetMessage()}
				}
			}
		}
	}
	return resp, nil
}

func (s *metaService) Read(ctx context.Context, req *wire.ReadRequest) (*wire.ReadResponse, error) {
	if st := s.checkCluster(req.GetClusterId()); st != nil {
		return &wire.ReadResponse{Status: st}, nil
	}
	g := ids.GroupID(req.GetGroup())
	if g == ids.PresidentGroup {
		return &wire.ReadResponse{Status: statusOf(wire.Code_INVALID, "the president group (0) holds no namespace")}, nil
	}
	s.n.ops.add(g)
	if err := s.n.host.CheckReadable(g); err != nil {
		return &wire.ReadResponse{Status: s.errStatus(g, err)}, nil
	}
	if st := s.n.checkEpoch(ctx, g, req.GetEpoch()); st != nil {
		return &wire.ReadResponse{Status: st}, nil
	}
	// The user asking: lookups, listings and user attributes are
	// checked against it (namespace.MayRead), and it decides a chunk
	// table's tokens. The certificate must allow it, as for changes.
	caller := rpc.CallerOf(ctx)
	if caller.Secure && caller.Role != certs.RoleNode {
		switch req.GetOp().(type) {
		case *wire.ReadRequest_ExportKeys, *wire.ReadRequest_ChunkTable:
			// Raw keys of a moving subtree, every chunk record: the
			// nodes' own reads (moves, garbage collection).
			return nil, status.Errorf(codes.PermissionDenied, "%T is for node certificates; the caller's certificate is %s", req.GetOp(), caller.Identity)
		}
		if req.GetCaller() == nil && !trustedForTokens(caller) {
			return nil, status.Errorf(codes.PermissionDenied, "certificate %s acts for chosen users only, and the read names none (the client library sends Config.Cred)", caller.Identity)
		}
	}
	var cred *wire.Cred
	if req.GetCaller() != nil && caller.Role != certs.RoleNode {
		cred = proto.Clone(req.GetCaller()).(*wire.Cred)
		if caller.Secure {
			if err := vouch(caller, cred, "caller"); err != nil {
				return nil, err
			}
		}
	}
	ctx, cancel := withDefaultDeadline(ctx)
	defer cancel()
	lk := req.GetLookup()
	if !lk.GetRecall() {
		return s.readOnce(ctx, g, req, cred, caller, req.GetConsistency()), nil
	}
	// A lookup the asker did not find (client.lookup): answered by the
	// leader, which holds the lease table, linearizably and after other
	// clients' queued creates in the directory (close-to-open across
	// mounts). A name this replica has, or may not look up, needs no
	// recall: the local read says which.
	if _, lead, isLeader := s.n.host.Term(g); !isLeader {
		return &wire.ReadResponse{Status: s.errStatus(g, &multiraft.NotLeaderError{Group: g, Leader: lead})}, nil
	}
	local := s.readOnce(ctx, g, req, cred, caller, wire.ReadConsistency_SESSION)
	if st := local.GetStatus(); st.GetCode() == wire.Code_ERRNO && syscall.Errno(st.GetErrno()) == syscall.ENOENT {
		if err := s.n.leases.recallDirWriters(ctx, g, lease.ClientID(lk.GetClientId()), ids.Ino(lk.GetParent())); err != nil {
			return &wire.ReadResponse{Status: s.errStatus(g, err)}, nil
		}
	}
	return s.readOnce(ctx, g, req, cred, caller, wire.ReadConsistency_LINEARIZABLE), nil
}

// readOnce serves read req of group g at the given consistency for the
// user cred (nil: the node itself) asking through caller.
func (s *metaService) readOnce(ctx context.Context, g ids.GroupID, req *wire.ReadRequest, cred *wire.Cred, caller rpc.Caller, consistency wire.ReadConsistency) *wire.ReadResponse {
	wait := req.GetMinIndex()
	if consistency == wire.ReadConsistency_LINEARIZABLE {
		idx, err := s.n.host.ReadIndex(ctx, g)
		if err != nil {
			return &wire.ReadResponse{Status: s.errStatus(g, err)}
		}
		wait = max(wait, idx)
	}
	if wait > 0 {
		// A clerk far behind the client's session answers UNAVAILABLE
		// quickly rather than holding the client: it can try a peer.
		wctx, wcancel := context.WithTimeout(ctx, 2*time.Second)
		err := s.n.host.WaitApplied(wctx, g, wait)
		wcancel()
		if err != nil {
			return &wire.ReadResponse{Status: statusOf(wire.Code_UNAVAILABLE, "replica on node %v has not applied index %d of %v yet", s.n.cfg.ID, wait, g)}
		}
	}
	var resp *wire.ReadResponse
	var applied uint64
	var moving namespace.Moving
	err := s.n.host.Read(g, func(r engine.Reader, idx uint64) error {
		// What is left here of a subtree whose move was decided is the
		// target's now, and a copy not open yet may be partial: neither
		// is served.
		mv, err := namespace.ReadMoving(r, readRouteIno(req))
		if err != nil || mv.Move != 0 {
			moving = mv
			return err
		}
		if err := namespace.MayRead(r, cred, req); err != nil {
			return err
		}
		resp, err = query(r, req)
		applied = idx
		if err == nil && req.GetGetChunks() != nil {
			err = s.n.tokenizeRefs(caller, cred, r, ids.Ino(req.GetGetChunks().GetIno()), resp)
		}
		return err
	})
	if err == nil && moving.To != 0 {
		return &wire.ReadResponse{Status: s.n.redirectStatus(readRouteIno(req), g, moving.To)}
	}
	if err == nil && moving.Move != 0 {
		return &wire.ReadResponse{Status: statusOf(wire.Code_UNAVAILABLE, "inode %v is being moved here (move %d) and is not open yet; retry", readRouteIno(req), moving.Move)}
	}
	if errors.Is(err, multiraft.ErrUnknownGroup) {
		return &wire.ReadResponse{Status: s.errStatus(g, err)}
	}
	if errors.Is(err, errNoTokenKeys) {
		return &wire.ReadResponse{Status: statusOf(wire.Code_UNAVAILABLE, "node %v: %v", s.n.cfg.ID, err)}
	}
	if err != nil {
		var errno syscall.Errno
		if errors.As(err, &errno) {
			if errno == syscall.ENOENT || errno == syscall.ESTALE {
				if ino := readRouteIno(req); ino != 0 {
					if to := s.n.elsewhere(g, ino); to != 0 {
						return &wire.ReadResponse{Status: s.n.redirectStatus(ino, g, to), AppliedIndex: applied}
					}
				}
			}
			return &wire.ReadResponse{Status: &wire.Status{Code: wire.Code_ERRNO, Errno: uint32(errno), Message: err.Error()}, AppliedIndex: applied}
		}
		if errors.Is(err, errBadRead) {
			return &wire.ReadResponse{Status: statusOf(wire.Code_INVALID, "%v", err)}
		}
		return &wire.ReadResponse{Status: statusOf(wire.Code_INTERNAL, "%v", err)}
	}
	resp.Status = &wire.Status{}
	resp.AppliedIndex = applied
	return resp
}

var errBadRead = errors.New("malformed read request")

func query(r interface {
	Get([]byte) ([]byte, error)
	Scan([]byte, []byte, func(k, v []byte) bool) error
}, req *wire.ReadRequest) (*wire.ReadResponse, error) {
	switch op := req.GetOp().(type) {
	case *wire.ReadRequest_Lookup:
		if err := namespace.ValidateName(op.Lookup.GetName()); err != nil {
			return nil, err
		}
		attr, de, err := namespace.Lookup(r, ids.Ino(op.Lookup.GetParent()), op.Lookup.GetName())
		if err != nil {
			return nil, err
		}
		if attr == nil && de.GetMinistry() != 0 {
			// A referral: the child's attributes are in its ministry;
			// the client asks there (ino and type only here).
			attr = &wire.Attr{Ino: de.GetIno(), Type: de.GetType()}
		}
		return &wire.ReadResponse{Attr: attr, Ministry: de.GetMinistry()}, nil
	case *wire.ReadRequest_GetAttr:
		attr, err := namespace.GetAttr(r, ids.Ino(op.GetAttr.GetIno()))
		if err != nil {
			return nil, err
		}
		return &wire.ReadResponse{Attr: attr}, nil
	case *wire.ReadRequest_Readdir:
		dir, ents, next, eof, err := namespace.ReaddirAttr(r, ids.Ino(op.Readdir.GetIno()), op.Readdir.GetCookie(), int(op.Readdir.GetLimit()))
		if err != nil {
			return nil, err
		}
		resp := &wire.ReadResponse{Entries: ents, NextCookie: next, Eof: eof}
		if len(op.Readdir.GetCookie()) == 0 {
			// The first page brings the directory's own attributes, so
			// an opendir that must check them asks once, not twice
			// (fusefs: OpendirHandle).
			resp.Attr = dir
		}
		return resp, nil
	case *wire.ReadRequest_GetXattr:
		v, err := namespace.GetXattr(r, ids.Ino(op.GetXattr.GetIno()), op.GetXattr.GetName())
		if err != nil {
			return nil, err
		}
		return &wire.ReadResponse{Value: v}, nil
	case *wire.ReadRequest_ListXattr:
		names, err := namespace.ListXattr(r, ids.Ino(op.ListXattr.GetIno()))
		if err != nil {
			return nil, err
		}
		return &wire.ReadResponse{Names: names}, nil
	case *wire.ReadRequest_GetChunks:
		ino := ids.Ino(op.GetChunks.GetIno())
		if op.GetChunks.GetOnlyIndex() {
			c, err := namespace.GetChunk(r, ino, op.GetChunks.GetIndex())
			if err != nil || c == nil {
				return &wire.ReadResponse{}, err
			}
			return &wire.ReadResponse{Chunks: []*wire.ChunkRef{c}}, nil
		}
		cs, more, err := namespace.GetChunksUpTo(r, ino, int(op.GetChunks.GetMaxChunks()))
		if err != nil {
			return nil, err
		}
		data, inline, err := namespace.InlineData(r, ino)
		if err != nil {
			return nil, err
		}
		resp := &wire.ReadResponse{Chunks: cs, Inline: inline, InlineData: data, ChunksOmitted: more}
		if op.GetChunks.GetWithAttr() {
			if resp.Attr, err = namespace.GetAttr(r, ino); err != nil {
				return nil, err
			}
		}
		return resp, nil
	case *wire.ReadRequest_Readlink:
		v, err := namespace.Readlink(r, ids.Ino(op.Readlink.GetIno()))
		if err != nil {
			return nil, err
		}
		return &wire.ReadResponse{Value: v}, nil
	case *wire.ReadRequest_ChunkTable:
		ct := op.ChunkTable
		limit := int(min(max(ct.GetLimit(), 1), 10000))
		var refs []*wire.ChunkRef
		next, done, err := namespace.ChunkRefsFrom(r, namespace.ChunkPos{Ino: ids.Ino(ct.GetIno()), Index: ct.GetIndex()}, limit,
			func(_ ids.Ino, c *wire.ChunkRef) error {
				refs = append(refs, c)
				return nil
			})
		if err != nil {
			return nil, err
		}
		cookie := binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, uint64(next.Ino)), next.Index)
		return &wire.ReadResponse{Chunks: refs, NextCookie: cookie, Eof: done}, nil
	case *wire.ReadRequest_ExportKeys:
		kvs, next, eof, err := namespace.ExportKeys(r, op.ExportKeys.GetMove(), ids.Ino(op.ExportKeys.GetIno()), op.ExportKeys.GetAfter(),
			int(min(op.ExportKeys.GetLimit(), 10000)), exportPageBytes)
		if err != nil {
			return nil, err
		}
		return &wire.ReadResponse{Kvs: kvs, NextCookie: next, Eof: eof}, nil
	default:
		return nil, fmt.Errorf("%w: no operation", errBadRead)
	}
}

func (s *metaService) members() []*wire.Member {
	if v := s.n.mapView(); v != nil && len(v.members) > 0 {
		return v.members
	}
	var out []*wire.Member
	for _, id := range sortedIDs(s.n.cfg.Peers) {
		out = append(out, &wire.Member{Id: uint64(id), Addr: s.n.cfg.Peers[id]})
	}
	return out
}

func (s *metaService) ClusterInfo(ctx context.Context, req *wire.ClusterInfoRequest) (*wire.ClusterInfoResponse, error) {
	resp := &wire.ClusterInfoResponse{Status: &wire.Status{}, ClusterId: s.n.ClusterID(), NodeId: uint64(s.n.cfg.ID)}
	var v *mapView
	if s.n.host.HasGroup(ids.PresidentGroup) {
		v, resp.MapIndex = s.n.localMap()
		if v != nil && req.GetKnownIndex() != 0 && req.GetKnownIndex() == resp.MapIndex {
			resp.NotModified = true
			return resp, nil
		}
	}
	if v == nil {
		v = s.n.mapView()
	}
	if v == nil {
		resp.Status = statusOf(wire.Code_UNAVAILABLE, "node %v does not know the cluster map yet (still starting)", s.n.cfg.ID)
		return resp, nil
	}
	// Copies: the view may be the shared cached one.
	resp.Members, resp.Ministries, resp.Moves = slices.Clone(v.members), slices.Clone(v.ministries), slices.Clone(v.moves)
	resp.InodeRanges, resp.Dissolved = slices.Clone(v.ranges), slices.Clone(v.dissolved)
	if !v.taken.IsZero() {
		resp.MapAgeMs = max(1, s.n.cfg.Clock.Now().Sub(v.taken).Milliseconds())
	}
	// Token keys go to metadata nodes (which mint tokens) only.
	if c := rpc.CallerOf(ctx); c.Secure && c.Role == certs.RoleNode {
		if ks, err := s.n.tokenKeys(); err == nil {
			resp.TokenKeys = ks
		}
	}
	// Liveness and load, on a president member (nodeload.go).
	var ops map[uint64]float64
	if s.n.host.HasGroup(ids.PresidentGroup) {
		resp.NodeLoads = s.n.nodes.loads(s.n.cfg.Clock.Now(), s.n.started, resp.Members)
		ops = groupOps(resp.NodeLoads)
	}
	// Leaders as this node knows them (the ministries it hosts).
	for i, m := range resp.Ministries {
		lead, _ := s.n.host.Leader(ids.GroupID(m.GetGroup()))
		if lead == 0 && ops == nil {
			continue
		}
		m = proto.Clone(m).(*wire.Ministry)
		if lead != 0 {
			m.Leader = uint64(lead)
		}
		m.OpsPerS = ops[m.GetGroup()]
		resp.Ministries[i] = m
	}
	if v.info != nil {
		resp.ReplicaGroups, resp.ChunkServers, resp.ChunkSize = v.info.GetReplicaGroups(), v.info.GetChunkServers(), v.info.GetChunkSize()
	}
	if s.n.host.HasGroup(ids.PresidentGroup) {
		_ = s.n.host.Read(ids.PresidentGroup, func(r engine.Reader, _ uint64) error {
			var err error
			if resp.ReplicaGroups, err = clustermap.ReplicaGroups(r); err != nil {
				return err
			}
			if resp.ChunkServers, err = clustermap.ChunkServers(r); err != nil {
				return err
			}
			resp.ChunkSize = clustermap.ClusterChunkSize(r)
			return nil
		})
	}
	return resp, nil
}

// Ping answers at once (client/guard.go).
func (s *metaService) Ping(context.Context, *wire.PingRequest) (*wire.PingResponse, error) {
	return &wire.PingResponse{}, nil
}

func (s *metaService) Status(ctx context.Context, _ *wire.StatusRequest) (*wire.StatusResponse, error) {
	resp := &wire.StatusResponse{
		Status:               &wire.Status{},
		ClusterId:            s.n.ClusterID(),
		NodeId:               uint64(s.n.cfg.ID),
		Addr:                 s.n.addrOf(s.n.cfg.ID),
		Members:              s.members(),
		MeanEntriesPerAppend: s.n.host.MeanEntriesPerAppend(),
	}
	if cs, groups, err := s.chunkStatus(); err == nil {
		resp.ChunkServers, resp.ReplicaGroups = cs, groups
	}
	for _, st := range s.n.host.Status() {
		kind := "ministry"
		if st.Group == ids.PresidentGroup {
			kind = "president"
		}
		gs := &wire.GroupStatus{Group: uint64(st.Group), Kind: kind, Leader: uint64(st.Leader), Term: st.Term,
			Commit: st.Commit, Applied: st.Applied, Role: st.Role, FirstIndex: st.FirstIndex}
		for _, v := range st.Voters {
			gs.Voters = append(gs.Voters, uint64(v))
		}
		for _, l := range st.Learners {
			gs.Learners = append(gs.Learners, uint64(l))
		}
		resp.Groups = append(resp.Groups, gs)
	}
	// Log lines name paths and certificates: for operators and nodes.
	if c := rpc.CallerOf(ctx); !c.Secure || c.Role == certs.RoleAdmin || c.Role == certs.RoleNode {
		for _, e := range s.n.events.recent() {
			resp.Events = append(resp.Events, &wire.NodeEvent{AtNs: e.At.UnixNano(), Level: e.Level, Msg: e.Msg, Attrs: e.Attrs})
		}
	}
	return resp, nil
}

// precheck answers a mutation that cannot be applied here right now:
// UNAVAILABLE when it touches a subtree being moved (the client retries
// until the move is over), REDIRECT when it touches one whose move was
// decided with this ministry as the source. nil: go ahead (the state
// machine checks again).
func (s *metaService) precheck(g ids.GroupID, cmd *wire.Command) *wire.Status {
	var st *wire.Status
	_ = s.n.host.Read(g, func(r engine.Reader, _ uint64) error {
		ino, mv, err := namespace.CommandMoving(r, cmd)
		switch {
		case err != nil || mv.Move == 0:
		case mv.To != 0:
			st = s.n.redirectStatus(ino, g, mv.To)
		default:
			st = statusOf(wire.Code_UNAVAILABLE, "inode %v is being moved to another ministry (move %d); retry", ino, mv.Move)
		}
		return err
	})
	return st
}

// movingIn reports whether res (or one result of a batch) was refused
// because of a subtree move.
func movingIn(res *wire.Result) bool {
	if res.GetMoving() {
		return true
	}
	for _, r := range res.GetResults() {
		if r.GetMoving() {
			return true
		}
	}
	return false
}

func movingMessage(res *wire.Result) string {
	if res.GetMoving() {
		return res.GetMessage()
	}
	for _, r := range res.GetResults() {
		if r.GetMoving() {
			return r.GetMessage()
		}
	}
	return ""
}

// firstOf returns a batch's first command, or cmd: the one whose request
// a retry of it is known by (answered).
func firstOf(cmd *wire.Command) *wire.Command {
	if subs := cmd.GetBatch().GetCmds(); len(subs) > 0 {
		return subs[0]
	}
	return cmd
}

// answered says whether request req was applied by group g and its
// answer is still kept: a retry proposed again gets that answer.
func (s *metaService) answered(g ids.GroupID, req *wire.RequestID) bool {
	var ok bool
	err := s.n.host.Read(g, func(r engine.Reader, _ uint64) error {
		var err error
		ok, err = namespace.Answered(r, req)
		return err
	})
	return err == nil && ok
}
