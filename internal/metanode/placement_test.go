package metanode

import (
	"maps"
	"testing"

	"github.com/govfs/govfs/internal/wire"
)

// The president's replicas (on the root ministry's founders) count as
// load, so a new ministry goes to joiners before the founders.
func TestReplicaLoadCountsThePresident(t *testing.T) {
	v := &mapView{ministries: []*wire.Ministry{
		{Group: 1, Founders: []uint64{1, 2, 3}, Members: []uint64{1, 2, 4}},
		{Group: 2, Founders: []uint64{4, 5, 6}, Members: []uint64{4, 5, 6}},
	}}
	got := v.replicaLoad()
	want := map[uint64]int{1: 2, 2: 2, 3: 1, 4: 2, 5: 1, 6: 1}
	if !maps.Equal(got, want) {
		t.Fatalf("replica load %v, want %v", got, want)
	}
}
