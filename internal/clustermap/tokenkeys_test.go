package clustermap

import (
	"bytes"
	"syscall"
	"testing"

	"github.com/govfs/govfs/internal/wire"
)

func TestTokenKeysRotate(t *testing.T) {
	b := newStore(t)
	var m Map
	add := func(id uint32, secret []byte) *wire.Result {
		t.Helper()
		r, err := m.Apply(b, 1, &wire.Command{Version: 1, Op: &wire.Command_AddTokenKey{AddTokenKey: &wire.AddTokenKeyOp{
			Key: &wire.TokenKey{Id: id, Secret: secret, CreatedNs: int64(id)}}}})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	secret := func(id uint32) []byte { return bytes.Repeat([]byte{byte(id)}, TokenKeySecretSize) }
	if r := add(1, []byte("short")); syscall.Errno(r.Errno) != syscall.EINVAL {
		t.Fatalf("a short secret: %v", r)
	}
	for id := uint32(1); id <= 6; id++ {
		if r := add(id, secret(id)); r.Errno != 0 {
			t.Fatalf("key %d: %v", id, r)
		}
	}
	if r := add(5, secret(5)); syscall.Errno(r.Errno) != syscall.EEXIST {
		t.Fatalf("an older id after a newer one: %v", r)
	}
	keys, err := TokenKeys(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != KeepTokenKeys || keys[0].GetId() != 3 || keys[KeepTokenKeys-1].GetId() != 6 ||
		!bytes.Equal(keys[0].GetSecret(), secret(3)) {
		t.Fatalf("kept %v, want keys 3..6", keys)
	}
}

func TestNodeCertBinding(t *testing.T) {
	b := newStore(t)
	var m Map
	apply := func(op any) *wire.Result {
		t.Helper()
		c := &wire.Command{Version: 1}
		switch o := op.(type) {
		case *wire.InitClusterOp:
			c.Op = &wire.Command_InitCluster{InitCluster: o}
		case *wire.BindNodeCertOp:
			c.Op = &wire.Command_BindNodeCert{BindNodeCert: o}
		case *wire.JoinNodeOp:
			c.Op = &wire.Command_JoinNode{JoinNode: o}
		}
		r, err := m.Apply(b, 1, c)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	apply(&wire.InitClusterOp{ClusterId: "c", Members: []*wire.Member{{Id: 1, Addr: "a1"}, {Id: 2, Addr: "a2"}}})
	for _, tc := range []struct {
		op   *wire.BindNodeCertOp
		want syscall.Errno
	}{
		{&wire.BindNodeCertOp{Node: 1, CertName: "meta1"}, 0},
		{&wire.BindNodeCertOp{Node: 1, CertName: "meta1"}, 0},              // again: no change
		{&wire.BindNodeCertOp{Node: 1, CertName: "other"}, syscall.EEXIST}, // first one stands
		{&wire.BindNodeCertOp{Node: 2, CertName: "meta1"}, syscall.EEXIST}, // one certificate, one node
		{&wire.BindNodeCertOp{Node: 9, CertName: "meta9"}, syscall.ENOENT},
		{&wire.BindNodeCertOp{Node: 2}, syscall.EINVAL},
	} {
		if r := apply(tc.op); syscall.Errno(r.GetErrno()) != tc.want {
			t.Errorf("%v: %v, want %v", tc.op, r, tc.want)
		}
	}
	if r := apply(&wire.JoinNodeOp{Addr: "a3", CertName: "meta1"}); syscall.Errno(r.GetErrno()) != syscall.EEXIST {
		t.Errorf("a join with node 1's certificate: %v", r)
	}
	if r := apply(&wire.JoinNodeOp{Addr: "a3", CertName: "meta3"}); r.GetErrno() != 0 {
		t.Errorf("join: %v", r)
	}
	ms, err := Members(b)
	if err != nil {
		t.Fatal(err)
	}
	got := map[uint64]string{}
	for _, mem := range ms {
		got[mem.GetId()] = mem.GetCertName()
	}
	if got[1] != "meta1" || got[2] != "" || got[3] != "meta3" {
		t.Fatalf("bindings %v", got)
	}
}
