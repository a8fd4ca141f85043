package metanode

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/govfs/govfs/internal/dataproto"
	"github.com/govfs/govfs/internal/wire"
)

func TestGCPlan(t *testing.T) {
	const grace = 5 * time.Minute
	now := time.Unix(1_000_000, 0)
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	h := func(group, n uint64) uint64 {
		x, err := dataproto.MakeHandle(group, n)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	// Group 1: members 1, 2, 3 (3 syncing), epoch 4. Group 2: members 4,
	// 5, 6, epoch 1. Group 9 no longer exists.
	groups := map[uint64]*wire.ReplicaGroup{
		1: {Id: 1, Members: []uint64{1, 2, 3}, Syncing: []uint64{3}, Epoch: 4},
		2: {Id: 2, Members: []uint64{4, 5, 6}, Epoch: 1},
	}
	ref := h(1, 1)    // referenced, group 1
	ref2 := h(2, 1)   // referenced, group 2
	unref := h(1, 2)  // released, group 1
	unref2 := h(1, 3) // released, group 1
	orphan := h(9, 1) // referenced, but its group is gone
	refs := map[uint64]bool{ref: true, ref2: true, orphan: true}
	type cp = gcCopy
	tests := []struct {
		name   string
		marks  map[gcCopy]gcMark
		held   map[uint64][]uint64
		silent []uint64
		groups map[uint64]*wire.ReplicaGroup // default: groups
		max    int                           // default: no limit
		want   map[gcCopy]gcMark
		del    []gcCopy
		sum    gcSummary
	}{{
		name: "referenced copies on members (full or syncing) are kept and never marked",
		held: map[uint64][]uint64{1: {ref}, 2: {ref}, 3: {ref}, 4: {ref2}},
		want: map[gcCopy]gcMark{},
		sum:  gcSummary{held: 4},
	}, {
		name: "an unreferenced copy is marked when first seen, on every server",
		held: map[uint64][]uint64{1: {ref, unref}, 2: {unref}, 7: {unref2}},
		want: map[gcCopy]gcMark{{1, unref}: {now, 4}, {2, unref}: {now, 4}, {7, unref2}: {now, 4}},
		sum:  gcSummary{held: 4, unreferenced: 3},
	}, {
		name:  "an unreferenced copy is deleted once garbage for the grace period, not before",
		marks: map[gcCopy]gcMark{{1, unref}: {ago(grace), 4}, {2, unref}: {ago(grace - time.Second), 4}},
		held:  map[uint64][]uint64{1: {unref}, 2: {unref}},
		want:  map[gcCopy]gcMark{{1, unref}: {ago(grace), 4}, {2, unref}: {ago(grace - time.Second), 4}},
		del:   []gcCopy{{1, unref}},
		sum:   gcSummary{held: 2, unreferenced: 2, due: 1, deleting: 1},
	}, {
		name:  "an unreferenced copy stays due whatever its group's epoch does",
		marks: map[gcCopy]gcMark{{1, unref}: {ago(time.Hour), 2}},
		held:  map[uint64][]uint64{1: {unref}},
		want:  map[gcCopy]gcMark{{1, unref}: {ago(time.Hour), 2}},
		del:   []gcCopy{{1, unref}},
		sum:   gcSummary{held: 1, unreferenced: 1, due: 1, deleting: 1},
	}, {
		name:  "a copy seen referenced again is forgotten",
		marks: map[gcCopy]gcMark{{1, ref}: {ago(time.Hour), 4}},
		held:  map[uint64][]uint64{1: {ref}},
		want:  map[gcCopy]gcMark{},
		sum:   gcSummary{held: 1},
	}, {
		name: "a referenced copy on a server that is not a member is misplaced; a member's copy never is",
		held: map[uint64][]uint64{4: {ref}, 1: {ref}, 3: {ref}},
		want: map[gcCopy]gcMark{{4, ref}: {now, 4}},
		sum:  gcSummary{held: 3, misplaced: 1},
	}, {
		name:  "a misplaced copy is deleted after the grace period at an unchanged epoch",
		marks: map[gcCopy]gcMark{{4, ref}: {ago(grace), 4}, {1, ref2}: {ago(time.Hour), 1}},
		held:  map[uint64][]uint64{4: {ref}, 1: {ref2}},
		want:  map[gcCopy]gcMark{{4, ref}: {ago(grace), 4}, {1, ref2}: {ago(time.Hour), 1}},
		del:   []gcCopy{{1, ref2}, {4, ref}},
		sum:   gcSummary{held: 2, misplaced: 2, due: 2, deleting: 2},
	}, {
		name:  "a misplaced copy's grace restarts when its group's epoch moves",
		marks: map[gcCopy]gcMark{{4, ref}: {ago(time.Hour), 3}},
		held:  map[uint64][]uint64{4: {ref}},
		want:  map[gcCopy]gcMark{{4, ref}: {now, 4}},
		sum:   gcSummary{held: 1, misplaced: 1},
	}, {
		name:  "a server that became a member again keeps its copy",
		marks: map[gcCopy]gcMark{{4, ref}: {ago(time.Hour), 3}},
		held:  map[uint64][]uint64{4: {ref}},
		groups: map[uint64]*wire.ReplicaGroup{
			1: {Id: 1, Members: []uint64{1, 2, 4}, Syncing: []uint64{4}, Epoch: 5},
		},
		want: map[gcCopy]gcMark{},
		sum:  gcSummary{held: 1},
	}, {
		name:  "copies of a group that no longer exists are garbage on every server",
		marks: map[gcCopy]gcMark{{1, orphan}: {ago(grace), 0}},
		held:  map[uint64][]uint64{1: {orphan}, 2: {orphan}},
		want:  map[gcCopy]gcMark{{1, orphan}: {ago(grace), 0}, {2, orphan}: {now, 0}},
		del:   []gcCopy{{1, orphan}},
		sum:   gcSummary{held: 2, misplaced: 2, due: 1, deleting: 1},
	}, {
		name: "a silent server's marks are kept while still garbage, and nothing of it is deleted",
		marks: map[gcCopy]gcMark{
			{7, unref}: {ago(time.Hour), 4}, // still garbage: kept
			{7, ref}:   {ago(time.Hour), 3}, // misplaced, but the epoch moved: dropped
			{1, ref}:   {ago(time.Hour), 4}, // a member's referenced copy: dropped
			{8, unref}: {ago(time.Hour), 4}, // a server neither listed nor silent: dropped
		},
		held:   map[uint64][]uint64{2: {}},
		silent: []uint64{1, 7},
		want:   map[gcCopy]gcMark{{7, unref}: {ago(time.Hour), 4}},
		sum:    gcSummary{},
	}, {
		name:  "a copy its server no longer lists is forgotten",
		marks: map[gcCopy]gcMark{{1, unref}: {ago(time.Hour), 4}},
		held:  map[uint64][]uint64{1: {ref}},
		want:  map[gcCopy]gcMark{},
		sum:   gcSummary{held: 1},
	}, {
		name: "deletes are bounded per round, by server then handle; the rest wait, still marked",
		marks: map[gcCopy]gcMark{
			{2, unref}: {ago(time.Hour), 4}, {1, unref2}: {ago(time.Hour), 4}, {1, unref}: {ago(time.Hour), 4},
		},
		held: map[uint64][]uint64{1: {unref2, unref}, 2: {unref}},
		max:  2,
		want: map[gcCopy]gcMark{
			{2, unref}: {ago(time.Hour), 4}, {1, unref2}: {ago(time.Hour), 4}, {1, unref}: {ago(time.Hour), 4},
		},
		del: []gcCopy{{1, unref}, {1, unref2}},
		sum: gcSummary{held: 3, unreferenced: 3, due: 3, deleting: 2},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := &gcView{held: tc.held, silent: map[uint64]bool{}, refs: refs, groups: tc.groups}
			if v.groups == nil {
				v.groups = groups
			}
			for _, s := range tc.silent {
				v.silent[s] = true
			}
			max := tc.max
			if max == 0 {
				max = -1
			}
			in := maps.Clone(tc.marks)
			got, del, sum := gcPlan(tc.marks, v, now, grace, max)
			if !maps.Equal(tc.marks, in) {
				t.Errorf("gcPlan changed its input marks")
			}
			if !maps.Equal(got, tc.want) {
				t.Errorf("marks\n got  %v\n want %v", show(got, now), show(tc.want, now))
			}
			if !slices.Equal(del, tc.del) {
				t.Errorf("deletes %v, want %v", del, tc.del)
			}
			if sum != tc.sum {
				t.Errorf("summary %+v, want %+v", sum, tc.sum)
			}
		})
	}
}

// TestGCPlanOverRounds replays rounds of one copy's life: it is deleted
// only after being garbage in every round for the whole grace period.
func TestGCPlanOverRounds(t *testing.T) {
	const grace = 3 * time.Second
	start := time.Unix(1000, 0)
	h, _ := dataproto.MakeHandle(1, 1)
	groups := map[uint64]*wire.ReplicaGroup{1: {Id: 1, Members: []uint64{1}, Epoch: 1}}
	var marks map[gcCopy]gcMark
	// Round i at start+i s; the handle is referenced in round 2 only.
	var deletedAt []int
	for i := 0; i <= 8; i++ {
		v := &gcView{held: map[uint64][]uint64{1: {h}}, silent: map[uint64]bool{}, refs: map[uint64]bool{h: i == 2}, groups: groups}
		var del []gcCopy
		marks, del, _ = gcPlan(marks, v, start.Add(time.Duration(i)*time.Second), grace, -1)
		if len(del) > 0 {
			deletedAt = append(deletedAt, i)
		}
	}
	// Garbage from round 3 on (round 2 forgot it): due at 3+3 = 6.
	if !slices.Equal(deletedAt, []int{6, 7, 8}) {
		t.Fatalf("due in rounds %v, want [6 7 8] (a delete that succeeds drops it from the next list)", deletedAt)
	}
}

func show(m map[gcCopy]gcMark, now time.Time) string {
	var out []string
	for c, mk := range m {
		out = append(out, fmt.Sprintf("%d/%x:-%v@%d", c.server, c.handle, now.Sub(mk.since), mk.epoch))
	}
	sort.Strings(out)
	return fmt.Sprint(out)
}

// TestCollectorForgetsOnLosingLeadership: the marks are this leader's
// soft state; losing the president's leadership drops them (a later
// leadership, here or elsewhere, waits a full grace period again) and
// invalidates a round still running.
func TestCollectorForgetsOnLosingLeadership(t *testing.T) {
	n := &Node{cfg: Config{GCInterval: -1}} // disabled: tick starts no round
	c := newCollector(n, nil)
	now := time.Unix(1000, 0)
	c.tick(now, true)
	gen := c.mu.gen
	c.mu.marks = map[gcCopy]gcMark{{1, 2}: {since: now, epoch: 1}}
	if !c.current(gen) {
		t.Fatal("not current while leading")
	}
	c.tick(now, true)
	if len(c.marksSnapshot()) != 1 {
		t.Fatal("marks dropped while still leading")
	}
	c.tick(now, false)
	if c.marksSnapshot() != nil || c.current(gen) {
		t.Fatalf("after losing leadership: marks %v, round of generation %d still current", c.marksSnapshot(), gen)
	}
	c.tick(now, true)
	if c.current(gen) || !c.current(c.mu.gen) {
		t.Fatal("a new leadership must not revive the old generation")
	}
}
