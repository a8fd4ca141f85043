package multiraft

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/govfs/govfs/internal/engine"
)

func TestApplyViewCacheStaysEqualToStore(t *testing.T) {
	e, err := engine.Open(t.TempDir(), engine.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	c := newStateCache(4, 1<<20)
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
	n := 0
	for i := range c.shards {
		n += len(c.shards[i].m)
	}
	if n > 16*c.max {
		t.Fatalf("cache holds %d entries, bound is %d", n, 16*c.max)
	}
}

// A reader's fill that raced an apply must not install the older value.
func TestCacheFillLosesToConcurrentApply(t *testing.T) {
	c := newStateCache(64, 1<<20)
	gen := c.gen.Load() // reader samples gen, then reads "old" from Pebble
	// An apply commits "new" for the key and folds it in.
	c.gen.Add(1)
	c.set("k", []byte("new"))
	c.fill("k", []byte("old"), gen) // the reader's late fill
	if v, _ := c.get("k"); string(v) != "new" {
		t.Fatalf("cache holds %q after a raced fill, want new", v)
	}
	// Without a concurrent apply the fill is kept.
	gen = c.gen.Load()
	c.fill("j", []byte("v"), gen)
	if v, ok := c.get("j"); !ok || string(v) != "v" {
		t.Fatalf("fill without a race not kept: %q %v", v, ok)
	}
}

// TestStateCacheBoundedInBytes: values count against a byte budget; one
// too big for it is not cached, and replaces (forgets) an older cached
// value of its key rather than leaving it to be read.
func TestStateCacheBoundedInBytes(t *testing.T) {
	c := newStateCache(1<<20, 16<<10) // 1 KiB per shard
	c.set("k", []byte("small"))
	if v, ok := c.get("k"); !ok || string(v) != "small" {
		t.Fatalf("small value not cached: %q %v", v, ok)
	}
	c.set("k", make([]byte, 600)) // above a quarter of the shard
	if v, ok := c.get("k"); ok {
		t.Fatalf("a value too big for the cache was served from it (%d bytes)", len(v))
	}
	for i := range 10000 {
		c.set(string(rune('a'+i%26))+string(rune(i)), make([]byte, 100))
	}
	total := 0
	for i := range c.shards {
		s := &c.shards[i]
		n := 0
		for k, v := range s.m {
			n += len(k) + len(v)
		}
		if n != s.bytes || n > c.maxBytes {
			t.Fatalf("shard %d holds %d bytes, counted %d, bound %d", i, n, s.bytes, c.maxBytes)
		}
		total += n
	}
	if total == 0 {
		t.Fatal("nothing cached")
	}
}

// countingReader counts scans that reach the store.
type countingReader struct {
	engine.Reader
	scans *int
}

func (r countingReader) Scan(lower, upper []byte, fn func(k, v []byte) bool) error {
	*r.scans++
	return r.Reader.Scan(lower, upper, fn)
}

// TestEmptyRangeMemoMatchesStore applies random batches of sets, deletes,
// range deletes and scans, each scan through the apply view (seeing the
// batch's own writes) and through a reader between batches, and compares
// every answer with a scan of the store itself. It also checks that the
// memo is used: a range scanned empty is not scanned in the store again
// until something is written into it.
func TestEmptyRangeMemoMatchesStore(t *testing.T) {
	e, err := engine.Open(t.TempDir(), engine.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	c := newStateCache(1024, 1<<20)
	prefix := engine.StatePrefix(7)
	store := engine.Prefixed{RW: engine.ReadOnly{Reader: e}, Prefix: prefix}
	scans := 0
	reader := c.Reader(countingReader{Reader: store, scans: &scans})
	ranges := [][2]string{{"m", "n"}, {"a", "c"}, {"b", "d"}, {"x", "x\x00"}}
	keys := []string{"a", "a1", "b", "b9", "c", "m", "m\x00", "ma", "x", "x\x00", "z"}
	list := func(r engine.Reader, rg [2]string) []string {
		var out []string
		if err := r.Scan([]byte(rg[0]), []byte(rg[1]), func(k, _ []byte) bool {
			out = append(out, string(k))
			return true
		}); err != nil {
			t.Fatal(err)
		}
		return out
	}
	rng := rand.New(rand.NewPCG(1, 2))
	memoHits := 0
	for round := range 3000 {
		b := e.NewBatch()
		v := newApplyView(b, prefix, c)
		batchStore := engine.Prefixed{RW: b, Prefix: prefix}
		for range 1 + rng.IntN(6) {
			switch op := rng.IntN(10); {
			case op < 4:
				_ = v.Set([]byte(keys[rng.IntN(len(keys))]), []byte("v"))
			case op < 7:
				_ = v.Delete([]byte(keys[rng.IntN(len(keys))]))
			case op < 8 && rng.IntN(20) == 0:
				rg := ranges[rng.IntN(len(ranges))]
				_ = v.DeleteRange([]byte(rg[0]), []byte(rg[1]))
			default:
				rg := ranges[rng.IntN(len(ranges))]
				if got, want := list(v, rg), list(batchStore, rg); !slices.Equal(got, want) {
					t.Fatalf("round %d: apply view scan of %q = %q, the batch holds %q", round, rg, got, want)
				}
			}
		}
		if err := b.Commit(false); err != nil {
			t.Fatal(err)
		}
		v.committed()
		b.Close()
		for _, rg := range ranges {
			before := scans
			got := list(reader, rg)
			if want := list(store, rg); !slices.Equal(got, want) {
				t.Fatalf("round %d: reader scan of %q = %q, the store holds %q", round, rg, got, want)
			}
			if scans == before {
				memoHits++
				if len(got) != 0 {
					t.Fatalf("round %d: %q answered from the memo with keys %q", round, rg, got)
				}
			}
		}
	}
	if memoHits == 0 {
		t.Fatal("no scan was answered from the memo: the test proved nothing")
	}
	t.Logf("%d reader scans answered from the memo", memoHits)
}

// A reader's empty fill that raced an apply writing into the range must
// not be remembered.
func TestEmptyFillLosesToConcurrentApply(t *testing.T) {
	c := newStateCache(64, 1<<20)
	rg := scanRange{"m", "n"}
	gen := c.gen.Load() // the reader samples gen, then scans: empty
	c.gen.Add(1)        // an apply commits a key in the range
	c.fillEmpty(rg, gen)
	if c.knownEmpty(rg) {
		t.Fatal("a raced empty fill was remembered")
	}
	c.fillEmpty(rg, c.gen.Load())
	if !c.knownEmpty(rg) {
		t.Fatal("an empty fill without a race was not remembered")
	}
	c.clear()
	if c.knownEmpty(rg) {
		t.Fatal("clear kept the memo")
	}
}

// TestAbsentKeysCached: a key read and not found is remembered as absent
// (the next read asks Pebble nothing) until a write to it commits; a
// reader's fill of "absent" that raced an apply writing the key is not
// kept; a delete leaves it known absent.
func TestAbsentKeysCached(t *testing.T) {
	e, err := engine.Open(t.TempDir(), engine.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	c := newStateCache(64, 1<<20)
	prefix := engine.StatePrefix(1)
	store := engine.Prefixed{RW: engine.ReadOnly{Reader: e}, Prefix: prefix}
	r := c.Reader(store)
	behindBack := func(k, val string) {
		b := e.NewBatch()
		defer b.Close()
		if err := (engine.Prefixed{RW: b, Prefix: prefix}).Set([]byte(k), []byte(val)); err != nil {
			t.Fatal(err)
		}
		if err := b.Commit(false); err != nil {
			t.Fatal(err)
		}
	}
	if v, err := r.Get([]byte("new")); err != nil || v != nil {
		t.Fatalf("absent key: %q, %v", v, err)
	}
	if v, ok := c.get("new"); !ok || v != nil {
		t.Fatalf("absence not cached: %q, %v", v, ok)
	}
	// Written behind the cache's back (never done for real): the cached
	// absence answers, proving the read did not reach Pebble.
	behindBack("new", "x")
	if v, _ := r.Get([]byte("new")); v != nil {
		t.Fatalf("second read of an absent key went to the store: %q", v)
	}
	// A committed write replaces the absence.
	b := e.NewBatch()
	v := newApplyView(b, prefix, c)
	if got, _ := v.Get([]byte("new")); got != nil {
		t.Fatalf("apply's read of a key known absent: %q", got)
	}
	_ = v.Set([]byte("new"), []byte("y"))
	if err := b.Commit(false); err != nil {
		t.Fatal(err)
	}
	v.committed()
	b.Close()
	if got, _ := r.Get([]byte("new")); string(got) != "y" {
		t.Fatalf("after the write committed: %q, want y", got)
	}
	// A reader's late fill of absence loses to an apply that wrote it.
	gen := c.gen.Load()
	c.gen.Add(1)
	c.set("k", []byte("v"))
	c.fill("k", nil, gen)
	if got, ok := c.get("k"); !ok || string(got) != "v" {
		t.Fatalf("raced absent fill: %q %v, want v", got, ok)
	}
	// A delete leaves the key known absent.
	b = e.NewBatch()
	v = newApplyView(b, prefix, c)
	_ = v.Delete([]byte("new"))
	if err := b.Commit(false); err != nil {
		t.Fatal(err)
	}
	v.committed()
	b.Close()
	if got, ok := c.get("new"); !ok || got != nil {
		t.Fatalf("deleted key: %q %v, want known absent", got, ok)
	}
}
