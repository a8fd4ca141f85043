package namespace

import (
	"encoding/binary"
	"fmt"
	"syscall"

	"github.com/govfs/govfs/internal/engine"
	"github.com/govfs/govfs/internal/ids"
)

// inoRanges is the decoded "m" "inodes" record (see doc.go): the end of
// the highest grant, the next number to hand out, and the ranges not used
// up yet, in grant order.
type inoRanges struct {
	grantedEnd uint64
	next       uint64
	ranges     [][2]uint64
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
	g.grantedEnd = binary.BigEndian.Uint64(v[0:])
	g.next = binary.BigEndian.Uint64(v[8:])
	for p := v[16:]; len(p) > 0; p = p[16:] {
		g.ranges = append(g.ranges, [2]uint64{binary.BigEndian.Uint64(p), binary.BigEndian.Uint64(p[8:])})
	}
	return g, nil
}

func (g *inoRanges) encode() []byte {
	out := make([]byte, 0, 16+16*len(g.ranges))
	out = binary.BigEndian.AppendUint64(out, g.grantedEnd)
	out = binary.BigEndian.AppendUint64(out, g.next)
	for _, r := range g.ranges {
		out = binary.BigEndian.AppendUint64(out, r[0])
		out = binary.BigEndian.AppendUint64(out, r[1])
	}
	return out
}

// add appends [start, end) unless it starts below the highest grant so far
// (a duplicate delivery: grants only move forward); it reports whether it
// added.
func (g *inoRanges) add(start, end uint64) bool {
	if start < g.grantedEnd {
		return false
	}
	g.ranges = append(g.ranges, [2]uint64{start, end})
	g.grantedEnd = end
	return true
}

// take returns the next unused number, dropping ranges as they are used
// up; ok is false when every range is used up.
func (g *inoRanges) take() (ino uint64, ok bool) {
	for len(g.ranges) > 0 {
		r := g.ranges[0]
		if g.next < r[0] {
			g.next = r[0]
		}
		if g.next < r[1] {
			ino = g.next
			g.next++
			return ino, true
		}
		g.ranges = g.ranges[1:]
	}
	return 0, false
}

func (g *inoRanges) free() uint64 {
	var n uint64
	for i, r := range g.ranges {
		start := r[0]
		if i == 0 && g.next > start {
			start = g.next
		}
		if start < r[1] {
			n += r[1] - start
		}
	}
	return n
}

// allocIno takes the next unused inode number and buffers the new record
// in t; ENOSPC when the granted ranges are exhausted. NB: no existence
// check: the president never grants a number twice nor the root's, and a
// ministry's own ranges are only ever allocated here (inodes of a subtree
// moved in from elsewhere carry numbers of another ministry's ranges).
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
		if ids.Ino(n) <= ids.RootIno || t.inodes[ids.Ino(n)] != nil {
			continue
		}
		t.set(inodeRangesKey, g.encode())
		return ids.Ino(n), nil
	}
}

// FreeInodes reports how many granted inode numbers are still unused (the
// leader asks the president for more when it runs low). A grant that
// contains the root's number (tests only) counts it.
func FreeInodes(r engine.Reader) (uint64, error) {
	g, err := loadRanges(r)
	if err != nil {
		return 0, err
	}
	return g.free(), nil
}
