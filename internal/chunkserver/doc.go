// Package chunkserver is the `govfs chunk` process: it stores chunk
// replicas in a chunkstore.Store, registers with the president group
// (re-registration by the store's id keeps the server id), heartbeats every
// 2 s, and serves chunk reads and writes over the framed data protocol
// (internal/dataproto) on its --listen address.
//
// State of this package (issue 3, in progress): a single server stores
// and serves chunks with per-request atomic writes, version checks and
// CRC-verified reads. NOT built yet: replica groups (primary ordering,
// chain replication to the other members, epoch checks — requests with a
// non-zero epoch are refused until then), record-append deduplication by
// request id, repair and re-replication. See docs/dataplane.md.
//
// Data requests (dataproto frames):
//
//	write   handle, version = the new chunk version, offset, payload = data
//	        → write-reply, status
//	read    handle, offset, payload = 4-byte big-endian length wanted
//	        → read-reply, payload = data (short at the chunk's end),
//	          version = the chunk's version
//	append  handle, version = the new chunk version, payload = record
//	        → append-reply, offset = where the record landed
package chunkserver
