package namespace

import (
	"encoding/binary"
	"fmt"
	"syscall"

	"github.com/govfs/govfs/internal/engine"
	"github.com/govfs/govfs/internal/ids"
)

// inoRanges is the decoded "m" "inodes" record: every range granted so far
// in grant order, and a cursor (ranges[cur], next number next).
type inoRanges struct {
	cur    uint64
	next   uint64
	ranges [][2]uint64
}

func loadRanges(r engine.Reader) (*inoRanges, error) {
	v, err := r.Get(inodeRangesKey)
	if err != nil {
		return nil, fmt.Errorf("namespace: get inode ranges: %w", err)
	}
	g := &inoRanges{}
	if v == nil {
		return g, nil
	}
	if len(v) < 16 || (len(v)-16)%16 != 0 {
		return nil, fmt.Errorf("namespace: corrupt inode ranges record (%d bytes)", len(v))
	}
	g.cur = binary.BigEndian.Uint64(v[0:])
	g.next = binary.BigEndian.Uint64(v[8:])
	for p := v[16:]; len(p) > 0; p = p[16:] {
		g.ranges = append(g.ranges, [2]uint64{binary.BigEndian.Uint64(p), binary.BigEndian.Uint64(p[8:])})
	}
	return g, nil
}

func (g *inoRanges) encode() []byte {
	out := make([]byte, 0, 16+16*len(g.ranges))
	out = binary.BigEndian.AppendUint64(out, g.cur)
	out = binary.BigEndian.AppendUint64(out, g.next)
	for _, r := range g.ranges {
		out = binary.BigEndian.AppendUint64(out, r[0])
		out = binary.BigEndian.AppendUint64(out, r[1])
	}
	return out
}

// add appends [start, end) unless it overlaps a range already granted (a
// duplicate delivery of the same grant); it reports whether it added.
func (g *inoRanges) add(start, end uint64) bool {
	for _, r := range g.ranges {
		if start < r[1] && r[0] < end {
			return false
		}
	}
	g.ranges = append(g.ranges, [2]uint64{start, end})
	return true
}

// take returns the next unused number and advances the cursor; ok is false
// when every range is used up.
func (g *inoRanges) take() (ino uint64, ok bool) {
	for g.cur < uint64(len(g.ranges)) {
		r := g.ranges[g.cur]
		if g.next < r[0] {
			g.next = r[0]
		}
		if g.next < r[1] {
			ino = g.next
			g.next++
			return ino, true
		}
		g.cur++
		g.next = 0
	}
	return 0, false
}

func (g *inoRanges) free() uint64 {
	var n uint64
	for i := g.cur; i < uint64(len(g.ranges)); i++ {
		r := g.ranges[i]
		start := r[0]
		if i == g.cur && g.next > start {
			start = g.next
		}
		if start < r[1] {
			n += r[1] - start
		}
	}
	return n
}

// allocIno takes the next unused inode number, skipping numbers whose inode
// exists (the root, created outside the ranges). It buffers the new cursor
// in t; ENOSPC when the granted ranges are exhausted.
func allocIno(t *tx) (ids.Ino, error) {
	g, err := loadRanges(t.r)
	if err != nil {
		return 0, err
	}
	for {
		n, ok := g.take()
		if !ok {
			return 0, errnof(syscall.ENOSPC, "no inode numbers left; the ministry must be granted more by the president")
		}
		v, err := t.r.Get(inodeKey(ids.Ino(n)))
		if err != nil {
			return 0, fmt.Errorf("namespace: get inode %d: %w", n, err)
		}
		if v == nil && t.inodes[ids.Ino(n)] == nil {
			t.set(inodeRangesKey, g.encode())
			return ids.Ino(n), nil
		}
	}
}

// FreeInodes reports how many granted inode numbers are still unused (the
// leader asks the president for more when it runs low). NB: a number taken
// outside allocation (a root created by InitMinistry inside a granted
// range) is counted until the cursor passes it, so the count may be high
// by one.
func FreeInodes(r engine.Reader) (uint64, error) {
	g, err := loadRanges(r)
	if err != nil {
		return 0, err
	}
	return g.free(), nil
}
