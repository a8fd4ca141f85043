package chunkstore

import (
	"fmt"
	"hash/crc32"
	"syscall"
)

// Truncate sets the length of chunk h to length and its version to
// newVersion, atomically and durably like Write. Growing extends the
// chunk with zeros (a hole in the data file, as Pad). Shrinking cuts the
// bytes at and beyond length for good: they are removed from the data
// file, so a later write beyond the new length reads zeros in the gap,
// also after a crash at any point.
//
// length must lie in [0, chunk size] (EINVAL below, EFBIG above),
// newVersion must exceed the chunk's version (ErrStaleVersion), and the
// chunk must exist (ErrNotFound). A cut inside a block re-checksums the
// block's remaining prefix after verifying the old bytes: if they are
// corrupt, the truncate is refused with a *CorruptError (repair first),
// so a bad block is never given a fresh, matching checksum.
func (s *Store) Truncate(h Handle, length int64, newVersion uint64) error {
	switch {
	case length < 0:
		return fmt.Errorf("chunkstore: truncate chunk %v: negative length %d: %w", h, length, syscall.EINVAL)
	case length > s.cfg.ChunkSize:
		return fmt.Errorf("chunkstore: truncate chunk %v: length %d exceeds the chunk size %d: %w", h, length, s.cfg.ChunkSize, syscall.EFBIG)
	}
	c, release, err := s.acquire(h, false, false)
	if err != nil {
		return fmt.Errorf("chunkstore: truncate: %w", err)
	}
	defer release()
	if err := usable(h, c); err != nil {
		return fmt.Errorf("chunkstore: truncate: %w", err)
	}
	if err := s.checkMutable(h, c, newVersion); err != nil {
		return fmt.Errorf("chunkstore: truncate: %w", err)
	}
	if length >= c.meta.length {
		err = s.mutateLocked(h, c, c.meta.length, nil, length, newVersion)
	} else {
		err = s.shrinkLocked(h, c, length, newVersion)
	}
	if err != nil {
		return fmt.Errorf("chunkstore: truncate chunk %v to %d version %d: %w", h, length, newVersion, err)
	}
	return nil
}

// shrinkLocked commits the shorter length first and then cuts the data
// file. A crash between the two leaves bytes beyond the committed length,
// which recovery cuts (it restores that invariant for every chunk), so
// the cut happens in every outcome where the new length committed.
func (s *Store) shrinkLocked(h Handle, c *chunk, length int64, v uint64) error {
	if err := s.upgradeLocked(h, c); err != nil {
		return err
	}
	nm, err := s.shrunkMeta(h, c.meta, length, v)
	if err != nil {
		return err
	}
	if err := s.commitMeta(h, c, nm); err != nil {
		return s.afterFailure(h, c, nm, err)
	}
	c.exists, c.meta = true, nm
	if err := s.cutData(h, length); err != nil {
		return s.afterFailure(h, c, nm, err)
	}
	return nil
}

// cutData truncates the data file to length and makes that durable.
func (s *Store) cutData(h Handle, length int64) error {
	of, _, err := s.dataFile(h, false)
	if err != nil || of == nil {
		return err
	}
	defer s.files.put(of)
	f := of.f
	if err := s.step(h, StepDataTruncate); err != nil {
		return fmt.Errorf("cut data: %w", err)
	}
	if err := f.Truncate(length); err != nil {
		return fmt.Errorf("cut data: %w", err)
	}
	if err := s.step(h, StepDataSync); err != nil {
		return fmt.Errorf("sync data: %w", err)
	}
	if err := s.sync(f); err != nil {
		return fmt.Errorf("sync data: %w", err)
	}
	return nil
}

// shrunkMeta computes the metadata of chunk old cut to length (< its
// length). Whole blocks keep their checksums; a block cut in the middle
// is read and verified, and gets the checksum of its remaining prefix.
func (s *Store) shrunkMeta(h Handle, old meta, length int64, v uint64) (meta, error) {
	nm := meta{version: v, length: length, crcs: make([]uint32, numBlocks(length))}
	copy(nm.crcs, old.crcs)
	if length%BlockSize == 0 {
		return nm, nil
	}
	b := int(length / BlockSize)
	bs := int64(b) * BlockSize
	of, _, err := s.dataFile(h, false)
	if err != nil {
		return meta{}, err
	}
	defer s.files.put(of)
	blk := make([]byte, min(BlockSize, old.length-bs))
	if of != nil {
		if err := readFull(of.f, blk, bs); err != nil {
			return meta{}, fmt.Errorf("read block %d: %w", b, err)
		}
	}
	if got := crc32.Checksum(blk, castagnoli); got != old.crcs[b] {
		return meta{}, &CorruptError{Handle: h, Block: b,
			Detail: fmt.Sprintf("checksum mismatch (stored %08x, computed %08x); repair the block before cutting it", old.crcs[b], got)}
	}
	nm.crcs[b] = crc32.Checksum(blk[:length-bs], castagnoli)
	return nm, nil
}
