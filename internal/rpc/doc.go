// Package rpc is the gRPC plumbing between GovFS nodes: connection
// management with message-size limits and deadlines, and the raft transport
// (RaftTransport, the multiraft.Transport over the wire.Raft service) that
// coalesces every message for one peer into a single RaftBatch and streams
// snapshots key by key.
package rpc
