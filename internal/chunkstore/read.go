package chunkstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"syscall"
)

// Read returns up to n bytes of chunk h from off. Reading past the
// chunk's length is a short read, not an error. Every block the read
// touches is verified; the first bad one is returned as a *CorruptError
// so that the caller can read that range from another replica.
func (s *Store) Read(h Handle, off int64, n int) ([]byte, error) {
	b, _, err := s.ReadVersion(h, off, n)
	return b, err
}

// ReadVersion is Read that also returns the version and length of the
// chunk the bytes were read from: a Read followed by a Stat may report
// the version of a mutation that committed in between.
func (s *Store) ReadVersion(h Handle, off int64, n int) ([]byte, ChunkInfo, error) {
	if off < 0 || n < 0 {
		return nil, ChunkInfo{}, fmt.Errorf("chunkstore: read chunk %v: negative offset %d or count %d: %w", h, off, n, syscall.EINVAL)
	}
	c, release, err := s.acquire(h, false, true)
	if err != nil {
		return nil, ChunkInfo{}, fmt.Errorf("chunkstore: read: %w", err)
	}
	defer release()
	if err := usable(h, c); err != nil {
		return nil, ChunkInfo{}, fmt.Errorf("chunkstore: read: %w", err)
	}
	info := ChunkInfo{Handle: h, Version: c.meta.version, Length: c.meta.length}
	b, err := s.readLocked(h, c.meta, off, n)
	if err != nil {
		return nil, ChunkInfo{}, err
	}
	return b, info, nil
}

// readLocked reads and verifies [off, off+n) of chunk h, whose committed
// metadata is m, under the chunk's lock.
func (s *Store) readLocked(h Handle, m meta, off int64, n int) ([]byte, error) {
	if n == 0 || off >= m.length {
		return []byte{}, nil
	}
	end := off + min(int64(n), m.length-off)
	b0, b1 := int(off/BlockSize), int((end-1)/BlockSize)
	of, _, err := s.dataFile(h, false)
	if err != nil {
		return nil, fmt.Errorf("chunkstore: read chunk %v: %w", h, err)
	}
	defer s.files.put(of)
	var f *os.File
	if of != nil {
		f = of.f
	}
	base := int64(b0) * BlockSize
	var buf []byte
	if b1-b0 < smallReadBlocks {
		// Small reads verify whole blocks in a pooled buffer and copy out
		// only what was asked for, instead of allocating (and zeroing)
		// the blocks for each call.
		pb := s.blockPool.Get().(*[]byte)
		defer s.blockPool.Put(pb)
		buf = (*pb)[:min(int64(b1+1)*BlockSize, m.length)-base]
	}
	buf, bad, err := s.readBlocks(h, f, m, b0, b1, buf)
	if err != nil {
		return nil, fmt.Errorf("chunkstore: read chunk %v [%d, +%d): %w", h, off, n, err)
	}
	if len(bad) > 0 {
		return nil, bad[0]
	}
	if b1-b0 < smallReadBlocks {
		return bytes.Clone(buf[off-base : end-base]), nil
	}
	return buf[off-base : end-base], nil
}

// smallReadBlocks is the most blocks a read spans to use a pooled buffer.
const smallReadBlocks = 2

// openData opens the data file for reading, bypassing the cache (Scrub
// visits every chunk once and would evict the files in use); nil (not an
// error) if the chunk has none yet, as after a Pad of an empty chunk.
func (s *Store) openData(h Handle) (*os.File, error) {
	f, err := os.Open(s.path(h, sufData))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("open data: %w", err)
	}
	return f, nil
}

// readBlocks reads blocks b0..b1 (up to the length) and checks each
// against its CRC. A nil f reads as zeros;
// buf, if not nil, is where to read them.
func (s *Store) readBlocks(h Handle, f *os.File, m meta, b0, b1 int, buf []byte) ([]byte, []*CorruptError, error) {
	base := int64(b0) * BlockSize
	if buf == nil {
		buf = make([]byte, min(int64(b1+1)*BlockSize, m.length)-base)
	}
	if f != nil {
		if err := readFull(f, buf, base); err != nil {
			return nil, nil, err
		}
	} else {
		clear(buf)
	}
	var bad []*CorruptError
	for b := b0; b <= b1; b++ {
		blk := buf[int64(b)*BlockSize-base : min(int64(b+1)*BlockSize-base, int64(len(buf)))]
		if got := crc32.Checksum(blk, castagnoli); got != m.crcs[b] {
			bad = append(bad, &CorruptError{Handle: h, Block: b,
				Detail: fmt.Sprintf("checksum mismatch (stored %08x, computed %08x)", m.crcs[b], got)})
		}
	}
	return buf, bad, nil
}

// RepairBlock overwrites block b of chunk h with data read from another
// replica. data must be the block's bytes below the chunk length and
// match the stored CRC: if it does not, either the source is bad or this
// replica's checksum is, and one block cannot tell which, so nothing is
// written (ErrRepairMismatch) and the caller should replace the whole
// chunk. The version does not change: the bytes are the ones it names.
//
// The block is rewritten in place without the journal: it is bad already,
// and a torn repair leaves it bad (and detected), never another block.
func (s *Store) RepairBlock(h Handle, b int, data []byte) error {
	c, release, err := s.acquire(h, false, false)
	if err != nil {
		return fmt.Errorf("chunkstore: repair: %w", err)
	}
	defer release()
	if err := usable(h, c); err != nil {
		return fmt.Errorf("chunkstore: repair: %w", err)
	}
	m := c.meta
	if b < 0 || b >= len(m.crcs) {
		return fmt.Errorf("chunkstore: repair chunk %v: block %d outside [0, %d): %w", h, b, len(m.crcs), syscall.EINVAL)
	}
	bs := int64(b) * BlockSize
	if want := min(BlockSize, m.length-bs); int64(len(data)) != want {
		return fmt.Errorf("chunkstore: repair chunk %v block %d: got %d bytes, the block holds %d: %w", h, b, len(data), want, syscall.EINVAL)
	}
	if got := crc32.Checksum(data, castagnoli); got != m.crcs[b] {
		return fmt.Errorf("chunkstore: repair chunk %v block %d: %w (stored %08x, data %08x); replace the whole chunk",
			h, b, ErrRepairMismatch, m.crcs[b], got)
	}
	of, _, err := s.dataFile(h, true)
	if err != nil {
		return fmt.Errorf("chunkstore: repair chunk %v: %w", h, err)
	}
	defer s.files.put(of)
	f := of.f
	if _, err := f.WriteAt(data, bs); err != nil {
		return fmt.Errorf("chunkstore: repair chunk %v block %d: %w", h, b, err)
	}
	if err := s.syncData(f); err != nil {
		return fmt.Errorf("chunkstore: repair chunk %v block %d: sync: %w", h, b, err)
	}
	return nil
}

// scrubBatch is how many blocks Scrub verifies under one lock hold, so
// writers to a chunk being scrubbed wait for at most 1 MiB of reading.
const scrubBatch = 16

// Scrub verifies every block of every chunk and calls fn for each bad
// block (a *CorruptError) and for each chunk it cannot check (block -1:
// damaged metadata, or an I/O error). fn runs without locks held, so it
// may call RepairBlock or Delete. Scrub stops early only when ctx is done
// or the store closes. Chunks written during the scrub may or may not be
// visited.
func (s *Store) Scrub(ctx context.Context, fn func(h Handle, block int, err error)) error {
	for _, h := range s.handles() {
		for b := 0; ; b += scrubBatch {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("chunkstore: scrub: %w", err)
			}
			bad, more, err := s.scrubBatch(h, b)
			if errors.Is(err, ErrClosed) {
				return fmt.Errorf("chunkstore: scrub: %w", err)
			}
			for _, e := range bad {
				fn(h, e.Block, e)
			}
			if err != nil {
				fn(h, -1, err)
			}
			if !more {
				break
			}
		}
	}
	return nil
}

// scrubBatch verifies blocks [b, b+scrubBatch) of chunk h; more reports
// whether blocks remain after them.
func (s *Store) scrubBatch(h Handle, b int) (bad []*CorruptError, more bool, err error) {
	c, release, err := s.acquire(h, false, true)
	if err != nil {
		return nil, false, err
	}
	defer release()
	switch {
	case c.bad != nil:
		if b == 0 {
			return nil, false, c.bad
		}
		return nil, false, nil
	case !c.exists || b >= len(c.meta.crcs):
		return nil, false, nil
	}
	b1 := min(b+scrubBatch, len(c.meta.crcs)) - 1
	f, err := s.openData(h)
	if err != nil {
		return nil, false, fmt.Errorf("chunkstore: scrub chunk %v: %w", h, err)
	}
	if f != nil {
		defer f.Close()
	}
	_, bad, err = s.readBlocks(h, f, c.meta, b, b1, nil)
	if err != nil {
		return nil, false, fmt.Errorf("chunkstore: scrub chunk %v blocks %d-%d: %w", h, b, b1, err)
	}
	return bad, b1+1 < len(c.meta.crcs), nil
}
