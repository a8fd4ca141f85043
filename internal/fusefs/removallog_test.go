package fusefs

import (
	"testing"

	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/wire"
)

// TestRemovalLog: a page counts as changed by a removal counted after it
// was asked for that changed its directory or an inode it shows, and by
// no other; past its bound the log starts over and every older page
// counts as changed.
func TestRemovalLog(t *testing.T) {
	var r removalLog
	ents := func(inos ...uint64) []*wire.DirEntry {
		var out []*wire.DirEntry
		for _, i := range inos {
			out = append(out, &wire.DirEntry{Ino: i})
		}
		return out
	}
	at := r.now()
	if r.changedSince(at, 1, ents(2, 3)) {
		t.Fatal("changed with no removal at all")
	}
	r.mark(10, 11) // start of an unlink of 11 in 10
	if r.changedSince(at, 1, ents(2, 3)) {
		t.Fatal("a removal of other inodes changed the page")
	}
	if !r.changedSince(at, 10, nil) {
		t.Fatal("a removal in the directory did not change its page")
	}
	if !r.changedSince(at, 1, ents(2, 11)) {
		t.Fatal("a removal of an inode the page shows did not change it")
	}
	at2 := r.now()
	if r.changedSince(at2, 10, ents(11)) {
		t.Fatal("a page asked for after the removal's start counts as changed before its end")
	}
	r.mark(10, 11) // its end
	if !r.changedSince(at2, 10, ents(11)) {
		t.Fatal("a page asked for while the removal was under way does not count as changed by its end")
	}
	at3 := r.now()
	for i := range maxRemovalInodes {
		r.mark(ids.Ino(1000 + i))
	}
	r.mark(5) // over the bound: starts over
	if !r.changedSince(at3, 1, ents(2)) {
		t.Fatal("a page older than the log's restart does not count as changed")
	}
	at4 := r.now()
	if r.changedSince(at4, 1, ents(2)) {
		t.Fatal("a page asked for after the restart counts as changed")
	}
}
