// Package chunkserver is the `govfs chunk` process: it stores chunk
// replicas in a chunkstore.Store, registers with the president group
// (re-registration by the store's id keeps the server id), heartbeats every
// 2 s, and serves chunk reads and writes over the framed data protocol
// (internal/dataproto) on its --listen address.
//
// Replica groups: the president places groups of 3 servers and tells
// each server its groups (members, primary, epoch, member addresses) in
// heartbeat replies. Every data request names the group and the epoch it
// expects; a stale or unknown one gets StatusStaleEpoch. Writes and
// appends go to the group's primary, which fixes the new chunk version
// (and an append's offset), writes locally, forwards the mutation to the
// other members (TypeReplicate, in parallel) and acknowledges only when
// every member has it durably. Reads go to any member.
//
// NOT built yet (issue 3, in progress; see docs/dataplane.md): primary
// leases and primary/epoch changes when a member dies, repair of a member
// that missed a mutation, re-replication, record-append deduplication by
// request id, chain (instead of fan-out) forwarding, rate limits.
//
// Data requests (dataproto frames, all naming group and epoch):
//
//	write      handle, offset, payload = data → write-reply, version = the
//	           version the primary assigned
//	append     handle, payload = record → append-reply, offset = where it
//	           landed, version
//	read       handle, offset, payload = 4-byte big-endian length wanted →
//	           read-reply, payload = data (short at the chunk's end),
//	           version = the chunk's version
//	replicate  (primary → member) handle, version, offset, payload
package chunkserver
