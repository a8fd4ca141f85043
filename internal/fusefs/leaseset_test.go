package fusefs

import (
	"slices"
	"testing"
)

// TestLeaseSetBounds: the set evicts oldest first when it holds more
// leases than its count allows or more bytes than its budget, never the
// node being added or resized, and its byte sum follows adds, resizes,
// replacements and removals.
func TestLeaseSetBounds(t *testing.T) {
	s := leaseSet{max: 4, maxBytes: 100}
	n := make([]*node, 6)
	for i := range n {
		n[i] = &node{}
	}
	for i := 0; i < 4; i++ {
		if ev := s.add(n[i], 10); len(ev) != 0 {
			t.Fatalf("add %d evicted %d nodes within bounds", i, len(ev))
		}
	}
	// The count: a fifth lease evicts the oldest.
	if ev := s.add(n[4], 10); !slices.Equal(ev, []*node{n[0]}) {
		t.Fatalf("fifth add evicted %v, want the oldest", ev)
	}
	if s.bytes != 40 {
		t.Fatalf("bytes = %d, want 40", s.bytes)
	}
	// Adding again moves to the newest end with the new size.
	if ev := s.add(n[1], 30); len(ev) != 0 || s.bytes != 60 {
		t.Fatalf("re-add: evicted %v, bytes %d (want none, 60)", ev, s.bytes)
	}
	// The bytes: a resize past the budget evicts the oldest until within
	// it, passing over the node resized (order n[2] 10, n[3] 10, n[4],
	// n[1] 30: 60-10+70 = 120 -> 110 -> 100).
	if ev := s.resize(n[4], 70); !slices.Equal(ev, []*node{n[2], n[3]}) || s.bytes != 100 {
		t.Fatalf("resize evicted %v, bytes %d; want n[2], n[3] and 100", ev, s.bytes)
	}
	// Never the node itself, even alone over the budget: n[1] goes.
	if ev := s.resize(n[4], 500); !slices.Equal(ev, []*node{n[1]}) || s.bytes != 500 {
		t.Fatalf("oversized resize evicted %v, bytes %d; want n[1] only and 500", ev, s.bytes)
	}
	// A node not in the set is not counted.
	if ev := s.resize(n[5], 50); len(ev) != 0 || s.bytes != 500 {
		t.Fatalf("resize of an absent node: evicted %v, bytes %d", ev, s.bytes)
	}
	// A replacement carries the size; a removal takes it off.
	s.replace(n[4], n[5])
	s.remove(n[4])
	if s.bytes != 500 || s.order.Len() != 1 {
		t.Fatalf("after replace: bytes %d, %d held; want 500, 1", s.bytes, s.order.Len())
	}
	s.remove(n[5])
	if s.bytes != 0 || s.order.Len() != 0 || len(s.at) != 0 {
		t.Fatalf("after removing all: bytes %d, %d held, %d indexed", s.bytes, s.order.Len(), len(s.at))
	}
}
