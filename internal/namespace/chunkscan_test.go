package namespace

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/wire"
)

func TestChunkRefs(t *testing.T) {
	v := newEnv(t)
	a := v.mkfile(root, "a")
	b := v.mkfile(root, "b")
	c := v.mkfile(root, "c")
	gone := v.mkfile(root, "gone")
	set := func(ino ids.Ino, index, handle uint64) {
		v.ok(&wire.Command_SetChunk{SetChunk: &wire.SetChunkOp{Ino: uint64(ino), Chunk: &wire.ChunkRef{Index: index, Handle: handle, Group: 1}}})
	}
	set(b, 1, 21)
	set(a, 0, 10)
	set(b, 0, 20)
	set(a, 1<<40, 11) // a sparse file's far chunk
	set(gone, 0, 99)
	set(c, 0, 30)
	// Other tables (inodes, entries, xattrs, dedup) are never visited, and
	// released records are gone.
	v.ok(&wire.Command_SetXattr{SetXattr: &wire.SetXattrOp{Ino: uint64(a), Name: []byte("user.x"), Value: []byte("v")}})
	v.ok(&wire.Command_Unlink{Unlink: &wire.UnlinkOp{Parent: uint64(root), Name: []byte("gone")}})
	want := []string{
		fmt.Sprintf("%d/0=10", a), fmt.Sprintf("%d/%d=11", a, uint64(1)<<40),
		fmt.Sprintf("%d/0=20", b), fmt.Sprintf("%d/1=21", b), fmt.Sprintf("%d/0=30", c),
	}
	visit := func(out *[]string) func(ino ids.Ino, r *wire.ChunkRef) error {
		return func(ino ids.Ino, r *wire.ChunkRef) error {
			*out = append(*out, fmt.Sprintf("%d/%d=%d", ino, r.GetIndex(), r.GetHandle()))
			return nil
		}
	}
	var all []string
	if err := ChunkRefs(v.rw, visit(&all)); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(all, want) {
		t.Fatalf("ChunkRefs visited %v, want %v", all, want)
	}

	// Paged, every page size visits the same records once, in order.
	for limit := 1; limit <= 6; limit++ {
		var got []string
		pos, pages := ChunkPos{}, 0
		for {
			next, done, err := ChunkRefsFrom(v.rw, pos, limit, visit(&got))
			if err != nil {
				t.Fatal(err)
			}
			pages++
			if done {
				break
			}
			if pages > 10 {
				t.Fatalf("limit %d: no end after %d pages", limit, pages)
			}
			pos = next
		}
		if !slices.Equal(got, want) {
			t.Errorf("limit %d: visited %v, want %v", limit, got, want)
		}
	}

	// A record added behind the resume position is not visited; one
	// released ahead of it is not visited either; the rest are.
	var got []string
	next, done, err := ChunkRefsFrom(v.rw, ChunkPos{}, 2, visit(&got))
	if err != nil || done || next != (ChunkPos{Ino: a, Index: 1<<40 + 1}) {
		t.Fatalf("first page: next %v done %v err %v", next, done, err)
	}
	set(a, 5, 15)
	v.ok(&wire.Command_Setattr{Setattr: &wire.SetattrOp{Ino: uint64(c), Valid: uint32(wire.SetattrField_SETATTR_SIZE), Size: 0}})
	if _, done, err := ChunkRefsFrom(v.rw, next, 0, visit(&got)); err != nil || !done {
		t.Fatalf("rest: done %v err %v", done, err)
	}
	if !slices.Equal(got, want[:4]) {
		t.Fatalf("visited %v, want %v", got, want[:4])
	}

	// An error from fn stops the scan and comes back.
	stop := errors.New("stop")
	n := 0
	err = ChunkRefs(v.rw, func(ids.Ino, *wire.ChunkRef) error {
		n++
		return stop
	})
	if !errors.Is(err, stop) || n != 1 {
		t.Fatalf("fn error: %v after %d calls", err, n)
	}

	// An empty table is done at once.
	if _, done, err := ChunkRefsFrom(newEnv(t).rw, ChunkPos{}, 1, visit(new([]string))); err != nil || !done {
		t.Fatalf("empty table: done %v err %v", done, err)
	}
}

func TestChunkPosAfter(t *testing.T) {
	if got := (ChunkPos{Ino: 3, Index: 7}).after(); got != (ChunkPos{Ino: 3, Index: 8}) {
		t.Errorf("after 3/7 = %v", got)
	}
	if got := (ChunkPos{Ino: 3, Index: ^uint64(0)}).after(); got != (ChunkPos{Ino: 4}) {
		t.Errorf("after 3/max = %v", got)
	}
}
