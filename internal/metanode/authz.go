package metanode

import (
	"fmt"

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
		wire.Meta_ChunkHeartbeat_FullMethodName: chunkOnly,
		wire.Meta_Join_FullMethodName:           nodeOnly,
		wire.Meta_MetaHeartbeat_FullMethodName:  nodeOnly,
		wire.Raft_Send_FullMethodName:           nodeOnly,
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
	roles := opRoles(cmd)
	if c.Is(roles...) {
		return nil
	}
	return rpc.Denied(c, fmt.Sprintf("operation %T", cmd.GetOp()), roles...)
}
