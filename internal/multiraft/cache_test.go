package multiraft

import (
	"testing"

	"github.com/govfs/govfs/internal/engine"
)

func TestApplyViewCacheStaysEqualToStore(t *testing.T) {
	e, err := engine.Open(t.TempDir(), engine.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	c := newStateCache(4)
	prefix := engine.StatePrefix(1)
	round := func(fn func(v *applyView)) {
		b := e.NewBatch()
		defer b.Close()
		v := newApplyView(b, prefix, c)
		fn(v)
		if err := b.Commit(false); err != nil {
			t.Fatal(err)
		}
		v.committed()
	}
	check := func(k, want string) {
		t.Helper()
		stored, _ := e.Get(append(append([]byte(nil), prefix...), k...))
		round(func(v *applyView) {
			got, _ := v.Get([]byte(k))
			if string(got) != want || string(stored) != want || (want == "" && (got != nil || stored != nil)) {
				t.Fatalf("%s: view %q, store %q, want %q", k, got, stored, want)
			}
		})
	}
	round(func(v *applyView) {
		_ = v.Set([]byte("a"), []byte("1"))
		if got, _ := v.Get([]byte("a")); string(got) != "1" {
			t.Fatalf("read own write: %q", got)
		}
		_ = v.Set([]byte("b"), []byte("2"))
	})
	check("a", "1")
	round(func(v *applyView) { _ = v.Delete([]byte("a")) })
	check("a", "")
	round(func(v *applyView) {
		_ = v.Set([]byte("c"), []byte("3"))
		_ = v.DeleteRange([]byte("b"), []byte("d")) // drops b and c
		if got, _ := v.Get([]byte("c")); got != nil {
			t.Fatalf("read after range delete: %q", got)
		}
	})
	check("b", "")
	check("c", "")
	// More keys than the cache holds: it starts over, values stay right.
	round(func(v *applyView) {
		for _, k := range []string{"k1", "k2", "k3", "k4", "k5", "k6"} {
			_ = v.Set([]byte(k), []byte("v"+k))
		}
	})
	for _, k := range []string{"k1", "k2", "k3", "k4", "k5", "k6"} {
		check(k, "v"+k)
	}
	if len(c.m) > 4 {
		t.Fatalf("cache holds %d entries, bound is 4", len(c.m))
	}
}
