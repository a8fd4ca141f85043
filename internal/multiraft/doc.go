// Package multiraft hosts many etcd raft groups (RawNodes) on one node and
// drives them all from a single Ready loop:
//
//  1. tick / step inbound messages / take proposals (under each group's lock)
//  2. collect Ready from every group that has one
//  3. persist HardState, entries and snapshots of all groups in ONE Pebble
//     batch with ONE fsync (group commit)
//  4. send messages, coalesced per destination node across groups
//  5. apply committed entries on a worker pool keyed by group (a group is
//     always applied by the same worker, in log order), answering waiters
//  6. Advance
//
// Apply never starts before the entries are durable (step 3 precedes 5),
// and the applied index is written in the same batch as the state changes,
// so a crash at any point leaves state and applied index consistent.
//
// Proposals that arrive while a Ready is being processed wait in raft's
// log and leave together in the next Ready: batching falls out of the loop.
// The mean number of entries per MsgApp is exported as a metric.
//
// A group's raft log lives in raft.MemoryStorage (entries since the last
// compaction) backed by the engine; on restart the memory storage is
// rebuilt from the engine (see storage.go for the key layout). Snapshots
// are not materialised: a snapshot is a Pebble point-in-time view of the
// group's state range taken right after applying its index, streamed key by
// key by the Transport when a follower needs it.
//
// Proposals are accepted only on the leader (the caller redirects clients
// elsewhere), and complete through waiters keyed by the client request id
// once applied.
package multiraft
