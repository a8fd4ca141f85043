// Package metanode is the `govfs meta` process: it opens the node's Pebble
// store, checks the node's identity, hosts the president group (0) and the
// root ministry (1) on a multiraft.Host, serves the wire.Meta and wire.Raft
// gRPC services, and exposes /metrics and /healthz over HTTP.
//
// Identity: the store records the node id, the peer list it was formed
// with and, once group 0 has applied InitCluster, the cluster id. A start
// with another --id, a different --peers list, or against peers that
// belong to another cluster is refused with a message saying what to do.
//
// Leader duties (maintain.go) run on whichever node leads a group: the
// president leader fixes the cluster id; the root minister creates "/" and
// keeps a stock of inode numbers granted by the president.
package metanode
