package namespace

import (
	"encoding/binary"
	"fmt"
	"syscall"

	"github.com/govfs/govfs/internal/engine"
	"github.com/govfs/govfs/internal/wire"
)

// Lease sessions (LeaseSessionOp): which clients may hold leases of this
// ministry. The minister opens a client's session in the log before it
// grants the client's first lease and closes it once the client has held
// none for a while; a new minister reads them to know whose leases to
// wait for (docs/leases.md, "Minister changes"). The lease table itself
// stays out of the log: sessions change once per client, grants on every
// open.

// MaxSessionClients bounds the clients of one LeaseSessionOp.
const MaxSessionClients = 4096

func leaseSessionKey(client uint64) []byte { return u64Key(kindLeaseSession, client) }

// leaseSession opens or closes the listed clients' sessions.
func leaseSession(t *tx, op *wire.LeaseSessionOp) (*wire.Result, error) {
	if len(op.GetClients()) > MaxSessionClients {
		return nil, errnof(syscall.EINVAL, "lease session op of %d clients (at most %d)", len(op.GetClients()), MaxSessionClients)
	}
	for _, c := range op.GetClients() {
		if c == 0 {
			return nil, errnof(syscall.EINVAL, "lease session of client 0")
		}
	}
	for _, c := range op.GetClients() {
		if op.GetOpen() {
			t.set(leaseSessionKey(c), nil)
		} else {
			t.del(leaseSessionKey(c))
		}
	}
	return &wire.Result{}, nil
}

// LeaseSessionOpen says whether client has an open lease session.
func LeaseSessionOpen(r engine.Reader, client uint64) (bool, error) {
	v, err := r.Get(leaseSessionKey(client))
	if err != nil {
		return false, fmt.Errorf("namespace: get lease session of client %d: %w", client, err)
	}
	return v != nil, nil
}

// LeaseSessions returns the clients with an open lease session, in
// order (keys hold the id big-endian).
func LeaseSessions(r engine.Reader) ([]uint64, error) {
	var out []uint64
	lo := []byte{kindLeaseSession}
	err := r.Scan(lo, prefixEnd(lo), func(k, _ []byte) bool {
		if len(k) == 9 {
			out = append(out, binary.BigEndian.Uint64(k[1:]))
		}
		return true
	})
	if err != nil {
		return nil, fmt.Errorf("namespace: list lease sessions: %w", err)
	}
	return out, nil
}
