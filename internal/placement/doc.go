// Package placement holds pure planners over a snapshot of the cluster
// map. This file set starts with replica-group placement for the data
// plane (DESIGN §6, issue 3): which chunk servers hold a new replica group.
//
// Rules, in order (HDFS's, and Mayflower's):
//
//  1. Never two replicas on one host.
//  2. The first replica near the writer when a writer location is given
//     (same host, else same rack, else same pod), otherwise the live server
//     with the most free space.
//  3. The second replica in another pod than the first, when one exists.
//  4. The third replica in the second's pod, on another rack than the
//     second.
//  5. Any further replica anywhere on a host not used yet.
//
// When a rule cannot be met (one pod, one rack, fewer hosts than replicas)
// the planner falls back to the next best choice and says which rule it
// relaxed, so `govfs admin status` can tell the operator. Ties are broken
// by free space, then by server id, so the plan is deterministic.
//
// No I/O, no clock, no randomness: the planner can be replayed and tested
// over simulated clusters.
package placement
