package metanode

import (
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/govfs/govfs/internal/certs"
	"github.com/govfs/govfs/internal/rpc"
	"github.com/govfs/govfs/internal/wire"
)

// Who may call what, by the role in the caller's certificate
// (docs/security.md). A method missing here is refused to everyone
// (rpc.Authorize), so a new RPC stays closed until it is listed.
var (
	anyRole    = []certs.Role{certs.RoleNode, certs.RoleChunk, certs.RoleClient, certs.RoleAdmin}
	nodeOnly   = []certs.Role{certs.RoleNode}
	chunkOnly  = []certs.Role{certs.RoleChunk}
	clientSide = []certs.Role{certs.RoleClient, certs.RoleAdmin, certs.RoleNode}
	adminSide  = []certs.Role{certs.RoleAdmin, certs.RoleNode}
)

func methodRoles() map[string][]certs.Role {
	return map[string][]certs.Role{
		// Mutate is open to all; each operation is checked (opRoles).
		wire.Meta_Mutate_FullMethodName:         anyRole,
		wire.Meta_Read_FullMethodName:           anyRole,
		wire.Meta_ClusterInfo_FullMethodName:    anyRole,
		wire.Meta_Status_FullMethodName:         anyRole,
		wire.Meta_Ping_FullMethodName:           anyRole,
		wire.Meta_Lease_FullMethodName:          clientSide,
		wire.Meta_Assign_FullMethodName:         adminSide,
		wire.Meta_MoveReplicas_FullMethodName:   adminSide,
		wire.Meta_ChunkHeartbeat_FullMethodName: chunkOnly,
		wire.Meta_Join_FullMethodName:           nodeOnly,
		wire.Meta_MetaHeartbeat_FullMethodName:  nodeOnly,
		wire.Raft_Send_FullMethodName:           nodeOnly,
		wire.Raft_Stream_FullMethodName:         nodeOnly,
		wire.Raft_SendSnapshot_FullMethodName:   nodeOnly,
	}
}

// opRoles is who may send an operation through Mutate. Namespace changes
// come from clients; the steps of a move and the president's bookkeeping
// from metadata nodes; a chunk server's registration and a replica's
// "synced" report from chunk servers (a forged MemberSynced would make an
// unsynced replica count as full).
func opRoles(cmd *wire.Command) []certs.Role {
	switch cmd.GetOp().(type) {
	case *wire.Command_Create, *wire.Command_Link, *wire.Command_Unlink, *wire.Command_Rename,
		*wire.Command_Setattr, *wire.Command_SetXattr, *wire.Command_RemoveXattr, *wire.Command_SetChunk,
		*wire.Command_WriteInline, *wire.Command_DropInline, *wire.Command_ReserveInodes,
		*wire.Command_Batch, *wire.Command_AllocChunkHandles:
		return clientSide
	case *wire.Command_RegisterChunkServer, *wire.Command_MemberSynced:
		return chunkOnly
	}
	// Everything else is a node's: move steps, inode grants, joins,
	// membership. validateCommand refuses what nobody may send.
	return nodeOnly
}

// authorizeOp checks that the caller may send cmd.
func authorizeOp(c rpc.Caller, cmd *wire.Command) error {
	// Each command of a batch for itself (validateCommand also refuses
	// anything but namespace changes in one).
	for _, sub := range cmd.GetBatch().GetCmds() {
		if err := authorizeOp(c, sub); err != nil {
			return err
		}
	}
	roles := opRoles(cmd)
	if c.Is(roles...) {
		return nil
	}
	return rpc.Denied(c, fmt.Sprintf("operation %T", cmd.GetOp()), roles...)
}

// bindChunkCaller ties chunk server registrations to the registering
// certificate: the name recorded is the connection's, whatever the
// message says (none on a plaintext connection).
func bindChunkCaller(c rpc.Caller, cmd *wire.Command) {
	if op, ok := cmd.GetOp().(*wire.Command_RegisterChunkServer); ok && op.RegisterChunkServer.GetServer() != nil {
		op.RegisterChunkServer.Server.CertName = ""
		if c.Secure {
			op.RegisterChunkServer.Server.CertName = c.Name
		}
	}
}

// chunkCallerIs checks that a secure caller is the chunk server id the
// map has, by the certificate name it registered with (a server
// registered over plaintext has none and is not checked).
func chunkCallerIs(c rpc.Caller, srv *wire.ChunkServer, what string) error {
	if !c.Secure || srv.GetCertName() == "" || srv.GetCertName() == c.Name {
		return nil
	}
	return status.Errorf(codes.PermissionDenied, "%s: chunk server %d was registered by certificate chunk/%s; the caller's certificate is %s",
		what, srv.GetId(), srv.GetCertName(), c.Identity)
}

// authorizeCaller checks the caller a client names in a namespace change
// against what its certificate allows (the uids it may act as, its
// groups), applying root squash, so the ministry's permission checks
// (namespace/perm.go) judge an identity the certificate vouches for.
// Supplementary groups the certificate does not list are dropped (fewer
// rights, never more); a uid or primary gid it does not allow is
// refused. A change without a caller is accepted only from nodes and
// from a host certificate that may act for every uid without squash (a
// mount whose kernel checks permissions, default_permissions).
func authorizeCaller(c rpc.Caller, cmd *wire.Command) error {
	if !c.Secure || c.Role == certs.RoleNode || c.Role == certs.RoleChunk {
		return nil
	}
	if b := cmd.GetBatch(); b != nil {
		for _, sub := range b.GetCmds() {
			if err := authorizeCaller(c, sub); err != nil {
				return err
			}
		}
		return nil
	}
	if !namespaceChange(cmd) {
		return nil
	}
	cred := cmd.GetCaller()
	if cred == nil {
		if c.AnyUID && c.AnyGID && !c.Squash {
			return nil
		}
		return status.Errorf(codes.PermissionDenied, "%T: certificate %s acts for chosen users only, and the request names none (the client library sends Config.Cred)", cmd.GetOp(), c.Identity)
	}
	if err := vouch(c, cred, "caller"); err != nil {
		return err
	}
	// The owner asked for a new inode is squashed like the caller; it
	// is not checked against the certificate: the ministry lets only root
	// give a new inode to another uid, and takes the group only from the
	// caller's vouched groups or a setgid directory (posix.NewOwner).
	if op, ok := cmd.GetOp().(*wire.Command_Create); ok && op.Create.GetCred() != nil && c.Squash {
		certs.Squash(op.Create.Cred)
	}
	return nil
}

// vouch squashes and checks one credential in place
// (certs.Identity.Vouch), as a PermissionDenied refusal.
func vouch(c rpc.Caller, cred *wire.Cred, what string) error {
	if err := c.Identity.Vouch(cred); err != nil {
		return status.Errorf(codes.PermissionDenied, "%s %v", what, err)
	}
	return nil
}

// namespaceChange says whether a command changes the namespace on a
// client's behalf (what namespace/perm.go checks).
func namespaceChange(cmd *wire.Command) bool {
	switch cmd.GetOp().(type) {
	case *wire.Command_Create, *wire.Command_Link, *wire.Command_Unlink, *wire.Command_Rename,
		*wire.Command_Setattr, *wire.Command_SetXattr, *wire.Command_RemoveXattr,
		*wire.Command_WriteInline, *wire.Command_DropInline, *wire.Command_SetChunk:
		return true
	}
	return false
}
