// Package engine wraps the one Pebble store of a metadata node. Every Raft
// group hosted on the node keeps its log, hard state and state machine in
// this store under its own key prefix, so one fsync can commit the work of
// many groups (group commit).
//
// Key layout (all integers big-endian so that keys sort numerically):
//
//	"n" <name>                        node-level records (identity)
//	"g" <group u64> "h"               raft HardState
//	"g" <group u64> "c"               raft ConfState + snapshot metadata
//	"g" <group u64> "a"               applied index of the state machine
//	"g" <group u64> "l" <index u64>   raft log entry
//	"g" <group u64> "s" <key...>      state machine key space of the group
//
// The state machine range ("s") is what a snapshot streams; it is written
// only when entries are applied, in the same batch as the applied index,
// so state and applied index never disagree after a crash.
package engine
