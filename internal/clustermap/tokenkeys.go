package clustermap

import (
	"encoding/binary"
	"syscall"

	"google.golang.org/protobuf/proto"

	"github.com/govfs/govfs/internal/engine"
	"github.com/govfs/govfs/internal/wire"
)

// KeepTokenKeys is how many chunk token keys the map keeps: a token
// signed with a key stays checkable for KeepTokenKeys-1 rotations after
// that key was replaced, which covers its lifetime when the rotation
// interval is at least the lifetime (metanode.Config).
const KeepTokenKeys = 4

// TokenKeySecretSize is the length of a token key's secret.
const TokenKeySecretSize = 32

func tokenKeyKey(id uint32) []byte { return binary.BigEndian.AppendUint32([]byte("tk"), id) }

// TokenKeys lists the chunk token keys, oldest first.
func TokenKeys(r engine.Reader) ([]*wire.TokenKey, error) {
	return scanAll[wire.TokenKey](r, "tk", "tl")
}

func addTokenKey(rw engine.ReadWriter, op *wire.AddTokenKeyOp) (*wire.Result, error) {
	k := op.GetKey()
	if k.GetId() == 0 || len(k.GetSecret()) != TokenKeySecretSize {
		return errResult(syscall.EINVAL, "token key %d: needs an id and a %d-byte secret", k.GetId(), TokenKeySecretSize), nil
	}
	keys, err := TokenKeys(rw)
	if err != nil {
		return nil, err
	}
	if n := len(keys); n > 0 && keys[n-1].GetId() >= k.GetId() {
		// Two leaders' rotations raced; the first one stands.
		return errResult(syscall.EEXIST, "token key %d: key %d is newer", k.GetId(), keys[n-1].GetId()), nil
	}
	b, err := proto.Marshal(&wire.TokenKey{Id: k.GetId(), Secret: k.GetSecret(), CreatedNs: k.GetCreatedNs()})
	if err != nil {
		return nil, err
	}
	if err := rw.Set(tokenKeyKey(k.GetId()), b); err != nil {
		return nil, err
	}
	for i := 0; i+KeepTokenKeys-1 < len(keys); i++ {
		if err := rw.Delete(tokenKeyKey(keys[i].GetId())); err != nil {
			return nil, err
		}
	}
	return &wire.Result{Start: uint64(k.GetId())}, nil
}
