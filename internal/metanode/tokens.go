package metanode

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/govfs/govfs/internal/certs"
	"github.com/govfs/govfs/internal/chunktoken"
	"github.com/govfs/govfs/internal/clustermap"
	"github.com/govfs/govfs/internal/engine"
	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/namespace"
	"github.com/govfs/govfs/internal/posix"
	"github.com/govfs/govfs/internal/rpc"
	"github.com/govfs/govfs/internal/wire"
	"google.golang.org/protobuf/proto"
)

// Chunk access tokens (docs/security.md): every chunk record a ministry
// answers with carries a token for the asker's certificate, allowing
// what the asking user may do with the file; chunk servers serve clients
// only with one. The president's leader makes a new signing key every
// token lifetime and the map keeps the newest few, so a token stays
// checkable for its whole life.

// maxHandleTokens is the largest chunk handle grant that gets a token for
// every handle (MutateResponse.chunk_tokens).
const maxHandleTokens = 1024

// DefaultChunkTokenLifetime is how long a chunk access token is valid
// (and how often the signing key changes). A client asks for a fresh
// token when a chunk server refuses an expired one, so the lifetime only
// bounds how long a token taken from a client stays useful.
const DefaultChunkTokenLifetime = time.Hour

// tokenSettle is how old a key must be before this node signs with it:
// chunk servers learn keys from their heartbeats (every 2 s).
func (n *Node) tokenSettle() time.Duration {
	return min(10*time.Second, n.tokenLifetime()/2)
}

func (n *Node) tokenLifetime() time.Duration {
	if n.cfg.ChunkTokenLifetime > 0 {
		return n.cfg.ChunkTokenLifetime
	}
	return DefaultChunkTokenLifetime
}

// keysOf converts the map's token keys.
func keysOf(ks []*wire.TokenKey) []chunktoken.Key {
	out := make([]chunktoken.Key, 0, len(ks))
	for _, k := range ks {
		out = append(out, chunktoken.Key{ID: k.GetId(), Secret: k.GetSecret(), Created: time.Unix(0, k.GetCreatedNs())})
	}
	return out
}

// tokenKeys reads the keys from this node's replica of group 0, else from
// the copy of the map it fetched last.
func (n *Node) tokenKeys() ([]*wire.TokenKey, error) {
	if n.host.HasGroup(ids.PresidentGroup) {
		var ks []*wire.TokenKey
		err := n.host.Read(ids.PresidentGroup, func(r engine.Reader, _ uint64) error {
			var err error
			ks, err = clustermap.TokenKeys(r)
			return err
		})
		return ks, err
	}
	n.maps.mu.Lock()
	defer n.maps.mu.Unlock()
	if v := n.maps.view; v != nil && v.info != nil {
		return v.info.GetTokenKeys(), nil
	}
	return nil, nil
}

// refreshTokenKeys gives the signer the current keys; on the president's
// leader it first makes a new key when the newest is a lifetime old.
func (n *Node) refreshTokenKeys(ctx context.Context, leadsPresident bool) error {
	ks, err := n.tokenKeys()
	if err != nil {
		return err
	}
	now := n.cfg.Clock.Now()
	if leadsPresident && n.ClusterID() != "" {
		var last *wire.TokenKey
		if len(ks) > 0 {
			last = ks[len(ks)-1]
		}
		if last == nil || now.Sub(time.Unix(0, last.GetCreatedNs())) >= n.tokenLifetime() {
			secret := make([]byte, clustermap.TokenKeySecretSize)
			if _, err := rand.Read(secret); err != nil {
				return err
			}
			k := &wire.TokenKey{Id: last.GetId() + 1, Secret: secret, CreatedNs: now.UnixNano()}
			res, _, err := n.host.Propose(ctx, ids.PresidentGroup, &wire.Command{Version: 1, NowNs: now.UnixNano(),
				Op: &wire.Command_AddTokenKey{AddTokenKey: &wire.AddTokenKeyOp{Key: k}}})
			if err != nil {
				return fmt.Errorf("rotate the chunk token key: %w", err)
			}
			if res.GetErrno() == 0 {
				n.log.Info("chunk token key rotated", "key", k.GetId())
			}
			if ks, err = n.tokenKeys(); err != nil {
				return err
			}
		}
	}
	keys := keysOf(ks)
	n.signer.SetKeys(keys)
	n.verifier.SetKeys(keys)
	return nil
}

// checkAllocProofs refuses a client's set_chunk or drop_inline (also in a
// batch) whose chunk does not carry the allocation token the president
// gave this certificate for it (AllocChunkHandles): a chunk number is
// allocated once, so a file can only be given a fresh chunk, never one
// another file holds. Nodes (moves) and plaintext clusters are not
// checked. A key this node has not learnt yet is UNAVAILABLE (retried).
func (n *Node) checkAllocProofs(c rpc.Caller, cmd *wire.Command) error {
	if !c.Secure || (c.Role != certs.RoleClient && c.Role != certs.RoleAdmin) {
		return nil
	}
	var ref *wire.ChunkRef
	switch op := cmd.GetOp().(type) {
	case *wire.Command_Batch:
		for _, sub := range op.Batch.GetCmds() {
			if err := n.checkAllocProofs(c, sub); err != nil {
				return err
			}
		}
		return nil
	case *wire.Command_SetChunk:
		ref = op.SetChunk.GetChunk()
	case *wire.Command_DropInline:
		ref = op.DropInline.GetChunk()
	}
	if ref == nil {
		return nil
	}
	err := n.verifier.Check(ref.GetToken(), ref.GetHandle(), chunktoken.Alloc|chunktoken.Write, c.Identity.String(), time.Time{})
	switch {
	case err == nil:
		return nil
	case errors.Is(err, chunktoken.ErrUnknownKey) || n.verifier.Len() == 0:
		return status.Errorf(codes.Unavailable, "chunk %d: %v: node %v has not learnt it yet; retry", ref.GetHandle(), err, n.cfg.ID)
	default:
		return status.Errorf(codes.PermissionDenied, "chunk %d: a file may only be given a chunk allocated to this certificate (%s) by the president: %v",
			ref.GetHandle(), c.Identity, err)
	}
}

// trustedForTokens says whether a caller gets read and write tokens for
// any chunk it asks about: nodes and admins, and a mount host's
// certificate (any uid, no root squash), which checks its users' opens
// itself as NFS trusts AUTH_SYS hosts. Other certificates get what the
// vouched user may do.
func trustedForTokens(c rpc.Caller) bool {
	switch c.Role {
	case certs.RoleNode, certs.RoleAdmin:
		return true
	case certs.RoleClient:
		return c.AnyUID && c.AnyGID && !c.Squash
	}
	return false
}

// tokenAccess is what a token for a file with attributes a allows the
// caller acting as cred (already vouched) to do.
func tokenAccess(c rpc.Caller, cred *wire.Cred, a *wire.Attr) chunktoken.Access {
	if trustedForTokens(c) {
		return chunktoken.Read | chunktoken.Write
	}
	if cred == nil || a == nil {
		return 0
	}
	var acc chunktoken.Access
	if posix.Permitted(a, cred, posix.MayRead) {
		acc |= chunktoken.Read
	}
	if posix.MayWriteData(a, cred, "") == nil {
		acc |= chunktoken.Write
	}
	return acc
}

// mintToken signs a token for handle's chunk for caller, or returns nil
// on a plaintext node (nothing is checked there), without keys, or for
// no access.
func (n *Node) mintToken(c rpc.Caller, handle uint64, acc chunktoken.Access) []byte {
	if !c.Secure || acc == 0 {
		return nil
	}
	now := n.cfg.Clock.Now()
	k, ok := n.signer.Key(now, n.tokenSettle())
	if !ok {
		return nil
	}
	return chunktoken.Mint(k, handle, acc, now.Add(n.tokenLifetime()), c.Identity.String())
}

// tokenizeRefs fills in the inode and a token of every chunk record of a
// get_chunks answer (records read from the store for this answer: not
// shared). r reads the attributes when the answer lacks them and the
// caller's access depends on them.
//
// A small file's bytes travel inline in the answer, where no chunk server
// checks a token: a caller who may neither read nor write the file gets
// EACCES instead. A node without keys yet answers errNoTokenKeys
// (UNAVAILABLE: retried) rather than records without tokens.
func (n *Node) tokenizeRefs(c rpc.Caller, cred *wire.Cred, r engine.Reader, ino ids.Ino, resp *wire.ReadResponse) error {
	if len(resp.GetChunks()) == 0 && len(resp.GetInlineData()) == 0 {
		return nil
	}
	var acc chunktoken.Access
	if c.Secure {
		a := resp.GetAttr()
		if a == nil && !trustedForTokens(c) && r != nil {
			a, _ = namespace.GetAttr(r, ino)
		}
		acc = tokenAccess(c, cred, a)
		if len(resp.GetInlineData()) > 0 && acc == 0 {
			return fmt.Errorf("%w: the bytes of inode %v: the caller may neither read nor write it", syscall.EACCES, ino)
		}
		if len(resp.GetChunks()) > 0 && acc != 0 {
			if _, ok := n.signer.Key(n.cfg.Clock.Now(), n.tokenSettle()); !ok {
				return errNoTokenKeys
			}
		}
	}
	for _, ref := range resp.Chunks {
		ref.Ino = uint64(ino)
		ref.Token = n.mintToken(c, ref.GetHandle(), acc)
	}
	return nil
}

// errNoTokenKeys: this node has not learnt the chunk token keys yet (it
// just started, or the cluster is new); the client retries.
var errNoTokenKeys = errors.New("this node has no chunk token keys yet (starting); retry")

// tokenizeResult returns the result of cmd with the chunk records in it
// (set_chunk's, also inside a batch) given tokens for what the caller may
// do with the file now: its attributes are read again rather than
// trusting the result, which a retried request gets from the dedup table
// (a replay long after a chmod must not yield a fresh write token). The
// result itself may be shared (the dedup table's), so a copy is changed.
func (n *Node) tokenizeResult(c rpc.Caller, g ids.GroupID, cmd *wire.Command, res *wire.Result) *wire.Result {
	if !hasChunk(res) {
		return res
	}
	out := proto.Clone(res).(*wire.Result)
	var walk func(cmd *wire.Command, res *wire.Result)
	walk = func(cmd *wire.Command, res *wire.Result) {
		if ch := res.GetChunk(); ch != nil {
			ino := cmd.GetSetChunk().GetIno()
			ch.Ino = ino
			var acc chunktoken.Access
			if c.Secure {
				var a *wire.Attr
				if !trustedForTokens(c) {
					_ = n.host.Read(g, func(r engine.Reader, _ uint64) error {
						a, _ = namespace.GetAttr(r, ids.Ino(ino))
						return nil
					})
				}
				acc = tokenAccess(c, cmd.GetCaller(), a)
			}
			ch.Token = n.mintToken(c, ch.GetHandle(), acc)
		}
		subs := cmd.GetBatch().GetCmds()
		for i, r := range res.GetResults() {
			if i < len(subs) {
				walk(subs[i], r)
			}
		}
	}
	walk(cmd, out)
	return out
}

func hasChunk(res *wire.Result) bool {
	if res.GetChunk() != nil {
		return true
	}
	for _, r := range res.GetResults() {
		if hasChunk(r) {
			return true
		}
	}
	return false
}
