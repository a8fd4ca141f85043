// Package lease is the minister's byte-range lease table (DESIGN §5): pure
// state, time passed in as an argument, no goroutines and no I/O, so it is
// tested with a manual clock and replayable.
//
// A lease lets one client (ClientID, the client_id of its request ids)
// read or write the byte range [Off, End) of one inode for a TTL, renewed
// by the client. Rules:
//
//   - Conflict: a Write lease conflicts with every overlapping lease of
//     another client; Read leases share. Leases of one client never
//     conflict with each other (it orders its own I/O). Non-overlapping
//     write leases on one file coexist: the thesis' open region, many
//     writers filling one file.
//   - Expiry: a lease not renewed within TTL is gone; an unreachable
//     holder thus loses it at TTL and nothing else is needed.
//   - Revoke: a request that conflicts and is willing to wait (wait > 0)
//     marks the conflicting leases revoked. A revoked lease is no longer
//     extended by renewals, so it ends at the latest one TTL after the
//     revoke; the holder is told on its next keepalive and is expected to
//     flush and release at once.
//   - Fairness: a waiting request leaves an intent (until its wait ends)
//     that blocks later conflicting requests of other clients, so readers
//     arriving one after another cannot starve a writer.
//   - Mutations: DrainReaders revokes the other clients' read leases on an
//     inode before the minister applies a change to it, so a reader
//     caching under a read lease never serves data older than the last
//     acknowledged change (see internal/metanode/lease.go).
//   - Fencing: StartTerm empties the table and grants nothing, read or
//     write, for Fence (default one TTL): a predecessor's leases are not
//     known here and may still be live, and a read lease granted while an
//     old write lease lives would let the reader cache data the writer is
//     changing. During the fence, holders Reclaim their leases (kept under
//     their ids); once the caller knows every lease that may be live was
//     reclaimed, EndFence ends the fence early.
//
// The table trusts the caller to be the group's leader and to have
// confirmed it (raft ReadIndex) before handing a grant or renewal out.
package lease
