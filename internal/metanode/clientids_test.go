package metanode

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/govfs/govfs/internal/certs"
	"github.com/govfs/govfs/internal/rpc"
)

func TestClientIDsBoundToCertificates(t *testing.T) {
	var b clientIDs
	now := time.Unix(1_800_000_000, 0)
	alice := rpc.Caller{Secure: true, Identity: certs.Identity{Role: certs.RoleClient, Name: "alice"}}
	bob := rpc.Caller{Secure: true, Identity: certs.Identity{Role: certs.RoleClient, Name: "bob"}}
	node := rpc.Caller{Secure: true, Identity: certs.Identity{Role: certs.RoleNode, Name: "meta1"}}
	if err := b.check(alice, 42, now); err != nil {
		t.Fatal(err)
	}
	if err := b.check(alice, 42, now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := b.check(bob, 42, now.Add(time.Hour)); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("bob using alice's client id: %v", err)
	}
	// Nodes and plaintext callers are not checked; bob has ids of his own.
	if err := b.check(node, 42, now); err != nil {
		t.Fatal(err)
	}
	if err := b.check(rpc.Caller{}, 42, now); err != nil {
		t.Fatal(err)
	}
	if err := b.check(bob, 43, now); err != nil {
		t.Fatal(err)
	}
	// An id idle past clientIDIdle is forgotten at the next sweep.
	later := now.Add(time.Hour + clientIDIdle + time.Minute)
	if err := b.check(bob, 44, later); err != nil {
		t.Fatal(err)
	}
	if err := b.check(bob, 42, later); err != nil {
		t.Fatalf("a forgotten id taken by another certificate: %v", err)
	}
}
