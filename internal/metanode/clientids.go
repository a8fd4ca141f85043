package metanode

import (
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/govfs/govfs/internal/certs"
	"github.com/govfs/govfs/internal/rpc"
)

// clientIDs binds the client ids that name a client's leases, locks and
// deduplicated requests to the certificate that first used them on this
// node, so that another certificate which learnt an id cannot renew or
// release that client's leases or answer its retries with its own
// commands. Soft state: a new node (or a restarted one) binds again on
// first use, and an id unused for clientIDIdle is forgotten. Client ids
// are 64 random bits chosen by each client.
type clientIDs struct {
	mu sync.Mutex
	m  map[uint64]clientBinding
	// per counts the bindings of each certificate: one certificate may
	// not fill the table for everyone else.
	per map[string]int
	// swept is when idle bindings were last dropped.
	swept time.Time
}

type clientBinding struct {
	holder string
	used   time.Time
}

// clientIDIdle is how long an unused binding is kept (the dedup table
// forgets a client idle for an hour; this is longer).
const clientIDIdle = 2 * time.Hour

// maxClientIDs bounds the bindings (a client minting ids as fast as it
// can): past it, idle ones are swept, and new ids wait; one certificate
// holds at most maxClientIDsPerCert of them (a host certificate used by
// a CLI in a loop makes a new id per command).
const (
	maxClientIDs        = 1 << 20
	maxClientIDsPerCert = 1 << 16
)

// check binds id to c's certificate, or refuses a certificate other than
// the one it is bound to. Nodes (moves, the president's own work) and
// plaintext callers are not checked.
func (b *clientIDs) check(c rpc.Caller, id uint64, now time.Time) error {
	if !c.Secure || id == 0 || (c.Role != certs.RoleClient && c.Role != certs.RoleAdmin) {
		return nil
	}
	holder := c.Identity.String()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.m == nil {
		b.m, b.per = map[uint64]clientBinding{}, map[string]int{}
	}
	if cur, ok := b.m[id]; ok {
		if cur.holder != holder {
			return status.Errorf(codes.PermissionDenied, "client id %#x belongs to certificate %s, not %s (each client process picks its own)", id, cur.holder, holder)
		}
		if now.Sub(cur.used) > time.Minute {
			cur.used = now
			b.m[id] = cur
		}
		return nil
	}
	full := len(b.m) >= maxClientIDs || b.per[holder] >= maxClientIDsPerCert
	// A full table is swept at most once a minute: a flood of new ids
	// must not make every call walk it.
	if now.Sub(b.swept) > 10*time.Minute || (full && now.Sub(b.swept) > time.Minute) {
		for k, v := range b.m {
			if now.Sub(v.used) > clientIDIdle {
				delete(b.m, k)
				b.per[v.holder]--
			}
		}
		b.swept = now
	}
	if n := b.per[holder]; n >= maxClientIDsPerCert {
		return status.Errorf(codes.ResourceExhausted, "certificate %s has %d client ids in use on this node, the most one certificate may; retry later", holder, n)
	}
	if len(b.m) >= maxClientIDs {
		return status.Errorf(codes.ResourceExhausted, "node has %d client ids in use, the most it tracks; retry later", len(b.m))
	}
	b.m[id] = clientBinding{holder: holder, used: now}
	b.per[holder]++
	return nil
}
