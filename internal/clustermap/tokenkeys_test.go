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
