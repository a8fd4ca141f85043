package engine

import (
	"bytes"
	"testing"
)

func TestPrefixedViewAndBatches(t *testing.T) {
	e, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	b := e.NewBatch()
	a := Prefixed{RW: b, Prefix: StatePrefix(1)}
	o := Prefixed{RW: b, Prefix: StatePrefix(2)}
	for _, k := range []string{"a1", "a2", "b1"} {
		if err := a.Set([]byte(k), []byte("v"+k)); err != nil {
			t.Fatal(err)
		}
	}
	_ = o.Set([]byte("a1"), []byte("other"))
	// The batch reads its own writes before commit.
	if v, _ := a.Get([]byte("a2")); string(v) != "va2" {
		t.Fatalf("batch read %q", v)
	}
	if v, _ := e.Get(append(StatePrefix(1), "a2"...)); v != nil {
		t.Fatal("uncommitted write visible")
	}
	if err := b.Commit(true); err != nil {
		t.Fatal(err)
	}
	b.Close()
	var keys []string
	r := Prefixed{RW: ReadOnly{e}, Prefix: StatePrefix(1)}
	if err := r.Scan([]byte("a"), nil, func(k, v []byte) bool {
		keys = append(keys, string(k))
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if len(keys) != 3 || keys[0] != "a1" || keys[2] != "b1" {
		t.Fatalf("scan of group 1 = %v (must not see group 2)", keys)
	}
	if v, err := r.Get([]byte("missing")); v != nil || err != nil {
		t.Fatalf("absent key = %q, %v", v, err)
	}
	if err := r.Set([]byte("x"), nil); err == nil {
		t.Fatal("write through a read-only view")
	}
	if !bytes.Equal(PrefixEnd([]byte{1, 0xff}), []byte{2}) || PrefixEnd([]byte{0xff}) != nil {
		t.Fatal("PrefixEnd")
	}
	if bytes.Compare(LogKey(1, 255), LogKey(1, 256)) >= 0 {
		t.Fatal("log keys do not sort numerically")
	}
}
