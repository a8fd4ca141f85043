package metanode

import (
	"testing"
	"time"

	"github.com/govfs/govfs/internal/wire"
)

// TestEntriesHeldUntilApplied: a change that resolved a name holds it
// until it is applied; another change of that name waits (and is woken
// at the release), one of other names does not; a hold whose change was
// never answered ends at its deadline.
func TestEntriesHeldUntilApplied(t *testing.T) {
	ren := func(name, newName string) *wire.Command {
		return &wire.Command{Op: &wire.Command_Rename{Rename: &wire.RenameOp{Parent: 5, Name: []byte(name), NewParent: 6, NewName: []byte(newName)}}}
	}
	unlink := &wire.Command{Op: &wire.Command_Unlink{Unlink: &wire.UnlinkOp{Parent: 6, Name: []byte("x")}}}
	batch := &wire.Command{Op: &wire.Command_Batch{Batch: &wire.BatchOp{Cmds: []*wire.Command{ren("c", "y"), unlink}}}}
	if got := changedEntries(batch); len(got) != 3 || got[2] != (entryKey{6, "x"}) {
		t.Fatalf("names of a batch's rename and unlink: %v", got)
	}
	now := time.Unix(1000, 0)
	gl := &groupLeases{changed: make(chan struct{})}
	a := changedEntries(ren("a", "x"))
	tokA, busy := gl.holdEntriesLocked(now, a, now.Add(11*time.Second), reqKey{7, 1})
	if tokA == 0 || !busy.IsZero() {
		t.Fatalf("first rename onto x: token %d, busy until %v", tokA, busy)
	}
	// A second rename onto x, and an unlink of x: both wait.
	b := changedEntries(ren("b", "x"))
	if tok, busy := gl.holdEntriesLocked(now, b, now.Add(11*time.Second), reqKey{8, 1}); tok != 0 || !busy.Equal(now.Add(11*time.Second)) {
		t.Fatalf("second rename onto x while the first is unapplied: token %d, busy until %v", tok, busy)
	}
	if tok, _ := gl.holdEntriesLocked(now, changedEntries(unlink), now.Add(time.Second), reqKey{9, 1}); tok != 0 {
		t.Fatal("unlink of x while a rename onto it is unapplied was not held back")
	}
	// Other names go on.
	other := changedEntries(ren("p", "q"))
	tokO, _ := gl.holdEntriesLocked(now, other, now.Add(time.Second), reqKey{9, 2})
	if tokO == 0 {
		t.Fatal("a rename of other names was held back")
	}
	gl.releaseEntriesLocked(other, tokO)
	woken := gl.changed
	gl.releaseEntriesLocked(a, tokA) // applied
	select {
	case <-woken:
	default:
		t.Fatal("the release of names another change waited for woke nobody")
	}
	tokB, _ := gl.holdEntriesLocked(now, b, now.Add(time.Second), reqKey{8, 1})
	if tokB == 0 {
		t.Fatal("second rename still held back after the first was applied")
	}
	// B's proposal goes unanswered (it may still commit): its names stay
	// held until the deadline, then free.
	if tok, _ := gl.holdEntriesLocked(now.Add(500*time.Millisecond), a, now.Add(2*time.Second), reqKey{7, 2}); tok != 0 {
		t.Fatal("a rename onto x went ahead of an unanswered one holding x")
	}
	// Its retry (the same request) takes its hold over at once.
	tokB2, _ := gl.holdEntriesLocked(now.Add(500*time.Millisecond), b, now.Add(2*time.Second), reqKey{8, 1})
	if tokB2 == 0 {
		t.Fatal("the retry of the unanswered rename waited for its own hold")
	}
	gl.releaseEntriesLocked(b, tokB2)
	tokB, _ = gl.holdEntriesLocked(now, b, now.Add(time.Second), reqKey{8, 3})
	if tok, _ := gl.holdEntriesLocked(now.Add(time.Second), a, now.Add(2*time.Second), reqKey{7, 3}); tok == 0 {
		t.Fatal("x still held past the unanswered change's deadline")
	}
	// A release by a stale token frees nothing.
	gl.releaseEntriesLocked(b, tokB)
	if tok, _ := gl.holdEntriesLocked(now.Add(time.Second), a, now.Add(2*time.Second), reqKey{7, 4}); tok != 0 {
		t.Fatal("a stale token's release freed names another change holds")
	}
}
