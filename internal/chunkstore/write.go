package chunkstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"syscall"
)

// Write stores data at off in chunk h and sets its version to newVersion,
// creating the chunk if needed. The write is atomic: after an error or a
// crash the chunk has either its old content and version or the new ones,
// never a mix; an error means the old ones. It returns only once the
// write is durable.
//
// off+len(data) must lie within the chunk size (else EFBIG), off must not
// be negative and data not empty (else EINVAL), and newVersion must exceed
// the chunk's version (else ErrStaleVersion). A gap between the old length
// and off reads as zeros.
func (s *Store) Write(h Handle, off int64, data []byte, newVersion uint64) error {
	switch {
	case off < 0:
		return fmt.Errorf("chunkstore: write chunk %v: negative offset %d: %w", h, off, syscall.EINVAL)
	case len(data) == 0:
		return fmt.Errorf("chunkstore: write chunk %v at %d: zero-length write: %w", h, off, syscall.EINVAL)
	case off > s.cfg.ChunkSize || int64(len(data)) > s.cfg.ChunkSize-off:
		return fmt.Errorf("chunkstore: write chunk %v: [%d, +%d) ends beyond the chunk size %d: %w", h, off, len(data), s.cfg.ChunkSize, syscall.EFBIG)
	}
	c, release, err := s.acquire(h, true, false)
	if err != nil {
		return fmt.Errorf("chunkstore: write: %w", err)
	}
	defer release()
	if err := s.checkMutable(h, c, newVersion); err != nil {
		return fmt.Errorf("chunkstore: write: %w", err)
	}
	newLen := max(c.meta.length, off+int64(len(data)))
	if err := s.mutateLocked(h, c, off, data, newLen, newVersion); err != nil {
		return fmt.Errorf("chunkstore: write chunk %v [%d, +%d) version %d: %w", h, off, len(data), newVersion, err)
	}
	return nil
}

// Append writes data at the chunk's current length, creating the chunk if
// needed, and returns that offset. A record that does not fit returns
// ErrChunkFull and changes nothing; the caller then Pads the chunk.
func (s *Store) Append(h Handle, data []byte, newVersion uint64) (int64, error) {
	if len(data) == 0 {
		return 0, fmt.Errorf("chunkstore: append to chunk %v: zero-length record: %w", h, syscall.EINVAL)
	}
	c, release, err := s.acquire(h, true, false)
	if err != nil {
		return 0, fmt.Errorf("chunkstore: append: %w", err)
	}
	defer release()
	if err := s.checkMutable(h, c, newVersion); err != nil {
		return 0, fmt.Errorf("chunkstore: append: %w", err)
	}
	off := c.meta.length
	if int64(len(data)) > s.cfg.ChunkSize-off {
		return 0, fmt.Errorf("chunkstore: append %d bytes to chunk %v at %d of %d: %w", len(data), h, off, s.cfg.ChunkSize, ErrChunkFull)
	}
	if err := s.mutateLocked(h, c, off, data, off+int64(len(data)), newVersion); err != nil {
		return 0, fmt.Errorf("chunkstore: append to chunk %v at %d version %d: %w", h, off, newVersion, err)
	}
	return off, nil
}

// Pad extends chunk h (created if needed) to the full chunk size with
// zeros, as record append does when a record does not fit. It writes only
// metadata: the padding is a hole in the data file.
func (s *Store) Pad(h Handle, newVersion uint64) error {
	c, release, err := s.acquire(h, true, false)
	if err != nil {
		return fmt.Errorf("chunkstore: pad: %w", err)
	}
	defer release()
	if err := s.checkMutable(h, c, newVersion); err != nil {
		return fmt.Errorf("chunkstore: pad: %w", err)
	}
	if err := s.mutateLocked(h, c, c.meta.length, nil, s.cfg.ChunkSize, newVersion); err != nil {
		return fmt.Errorf("chunkstore: pad chunk %v version %d: %w", h, newVersion, err)
	}
	return nil
}

// SetVersion raises the version of an existing chunk without changing its
// bytes (a primary bumps it when it gets a lease, so a replica that missed
// mutations is recognisably stale).
func (s *Store) SetVersion(h Handle, newVersion uint64) error {
	c, release, err := s.acquire(h, false, false)
	if err != nil {
		return fmt.Errorf("chunkstore: set version: %w", err)
	}
	defer release()
	if err := usable(h, c); err != nil {
		return fmt.Errorf("chunkstore: set version: %w", err)
	}
	if err := s.checkMutable(h, c, newVersion); err != nil {
		return fmt.Errorf("chunkstore: set version: %w", err)
	}
	if err := s.mutateLocked(h, c, c.meta.length, nil, c.meta.length, newVersion); err != nil {
		return fmt.Errorf("chunkstore: set chunk %v version %d: %w", h, newVersion, err)
	}
	return nil
}

func (s *Store) checkMutable(h Handle, c *chunk, newVersion uint64) error {
	if c.bad != nil {
		return c.bad
	}
	if newVersion <= c.meta.version {
		return fmt.Errorf("chunk %v: %w: version %d is not above the chunk's version %d", h, ErrStaleVersion, newVersion, c.meta.version)
	}
	return nil
}

// mutateLocked writes data at off, sets the length to newLen and the
// version to v, all or nothing. If a step fails, recovery decides: the
// mutation is reported done only if recovery finds it committed.
func (s *Store) mutateLocked(h Handle, c *chunk, off int64, data []byte, newLen int64, v uint64) error {
	if err := s.upgradeLocked(h, c); err != nil {
		return err
	}
	var f *os.File
	if len(data) > 0 {
		of, created, err := s.dataFile(h, true)
		if err != nil {
			return err
		}
		defer s.files.put(of)
		f = of.f
		c.newName = c.newName || created
	}
	nm, err := s.nextMeta(h, c.meta, f, off, data, newLen, v)
	if err != nil {
		return err
	}
	// Bytes below the old length may be overwritten only through the
	// journal; anything above it is invisible until the metadata commits.
	if c.exists && len(data) > 0 && off < c.meta.length {
		err = s.commitJournaled(h, c, f, off, data, nm)
	} else {
		err = s.commitFresh(h, c, f, off, data, nm)
	}
	if err == nil {
		c.exists, c.meta = true, nm
		return nil
	}
	return s.afterFailure(h, c, nm, err)
}

// afterFailure runs recovery after a step of the mutation to nm failed
// with err, and reports the mutation done (nil) only if recovery found it
// committed and completed it.
func (s *Store) afterFailure(h Handle, c *chunk, nm meta, err error) error {
	v := nm.version
	if rerr := s.recoverLocked(h, c, true); rerr != nil {
		return fmt.Errorf("%w; outcome unknown until recovery succeeds: %v", err, rerr)
	}
	if c.bad == nil && c.exists && c.meta.version == nm.version {
		s.log.Warn("mutation step failed after commit; recovery completed it", "chunk", h.String(), "version", v, "err", err)
		return nil
	}
	return err
}

// upgradeLocked rewrites the format-1 metadata file of an existing chunk
// as a format-2 file holding the same metadata, before the chunk's first
// mutation under this binary (which relies on the two slots, and on
// journals being written in place). The content does not change, so a
// failure or crash at any step leaves the chunk as it was.
func (s *Store) upgradeLocked(h Handle, c *chunk) error {
	if !c.exists || c.format != formatV1 {
		return nil
	}
	if err := s.createMeta(h, c, c.meta); err != nil {
		err = fmt.Errorf("upgrade metadata to format %d: %w", formatVersion, err)
		if rerr := s.recoverLocked(h, c, true); rerr != nil {
			return fmt.Errorf("%w; recovery: %v", err, rerr)
		}
		return err
	}
	return nil
}

// commitFresh writes data into a never-committed area of the data file
// (above the old length, where readers see zeros whatever it holds),
// makes it durable and then commits the metadata. Appends and first
// writes of an existing chunk thus cost two fdatasyncs and no directory
// operation.
func (s *Store) commitFresh(h Handle, c *chunk, f *os.File, off int64, data []byte, nm meta) error {
	if len(data) > 0 {
		if err := s.reserve(h, f, off, len(data)); err != nil {
			return err
		}
		if err := s.writeAt(f, h, StepDataWrite, data, off, int64(len(data)/2)); err != nil {
			return fmt.Errorf("write data: %w", err)
		}
		if err := s.step(h, StepDataSync); err != nil {
			return fmt.Errorf("sync data: %w", err)
		}
		if err := s.syncData(f); err != nil {
			return fmt.Errorf("sync data: %w", err)
		}
		if c.exists {
			// A new data file (the chunk had only holes) must have a
			// durable name before metadata counts on its bytes. A new
			// chunk's metadata commit syncs the directory anyway.
			if err := s.syncNamesLocked(c); err != nil {
				return fmt.Errorf("sync data: %w", err)
			}
		}
	}
	return s.commitMeta(h, c, nm)
}

// commitMeta makes nm the committed metadata of chunk h: a new chunk (or
// one whose metadata file is still format 1) gets a new metadata file by
// rename; an existing one gets nm written over its older slot.
func (s *Store) commitMeta(h Handle, c *chunk, nm meta) error {
	if !c.exists || c.format != formatVersion {
		return s.createMeta(h, c, nm)
	}
	return s.writeSlot(h, c, nm)
}

// createMeta writes a format-2 metadata file holding nm in slot 0 to a
// temp file and renames it into place: the rename is the commit.
func (s *Store) createMeta(h Handle, c *chunk, nm meta) error {
	if err := s.writeFile(s.path(h, sufMetaTmp), h, StepMetaWrite, StepMetaSync, encodeMetaFile(h, nm, s.cfg.ChunkSize)); err != nil {
		return fmt.Errorf("write metadata: %w", err)
	}
	if err := s.installMeta(h); err != nil {
		return err
	}
	c.format, c.slot, c.newName = formatVersion, 0, false
	return nil
}

// writeSlot writes nm over the slot that does not hold the committed
// metadata and fdatasyncs it: once the record is whole in the file, it is
// the newer valid slot and so the committed metadata (the commit point).
// A torn record fails its checksum and the other slot stays in force.
func (s *Store) writeSlot(h Handle, c *chunk, nm meta) error {
	f, err := os.OpenFile(s.path(h, sufMeta), os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("open metadata: %w", err)
	}
	defer f.Close()
	slot := 1 - c.slot
	rec := encodeMeta(h, nm)
	if err := s.writeAt(f, h, StepSlotWrite, rec, int64(slot*slotSize(s.cfg.ChunkSize)), int64(len(rec)/2)); err != nil {
		return fmt.Errorf("write metadata: %w", err)
	}
	if err := s.step(h, StepSlotSync); err != nil {
		return fmt.Errorf("sync metadata: %w", err)
	}
	if err := s.syncData(f); err != nil {
		return fmt.Errorf("sync metadata: %w", err)
	}
	c.slot = slot
	return nil
}

// rewriteSlot writes the committed metadata again over the slot that
// holds it (the same bytes) and fdatasyncs it.
func (s *Store) rewriteSlot(h Handle, c *chunk) error {
	f, err := os.OpenFile(s.path(h, sufMeta), os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("open metadata: %w", err)
	}
	defer f.Close()
	if _, err := f.WriteAt(encodeMeta(h, c.meta), int64(c.slot*slotSize(s.cfg.ChunkSize))); err != nil {
		return fmt.Errorf("rewrite metadata: %w", err)
	}
	if err := s.syncData(f); err != nil {
		return fmt.Errorf("sync metadata: %w", err)
	}
	return nil
}

// journalKeep is the largest journal file kept allocated after an
// overwrite: smaller ones are rewritten in place by the next overwrite
// (no allocation, so its fdatasync is a cache flush), larger ones are cut
// so that a whole-chunk overwrite does not pin a chunk's worth of disk.
const journalKeep = 2 << 20

// commitJournaled overwrites committed bytes: the data and the new
// metadata go to the chunk's journal, written in place over the previous
// (applied) record; once the record is whole it is committed, and only
// after it is durable is the data file changed in place. Recovery replays
// a committed journal the metadata has not caught up with. Three
// fdatasyncs (journal, data, metadata slot), no directory operation
// except when the journal or data file is new.
func (s *Store) commitJournaled(h Handle, c *chunk, f *os.File, off int64, data []byte, nm meta) error {
	// Reserving first makes a full disk fail here, before the commit,
	// rather than while applying, after it.
	if err := s.reserve(h, f, off, len(data)); err != nil {
		return err
	}
	jf, err := os.OpenFile(s.path(h, sufJournal), os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		jf, err = os.OpenFile(s.path(h, sufJournal), os.O_RDWR|os.O_CREATE, 0o644)
		c.newName = true
	}
	if err != nil {
		return fmt.Errorf("open journal: %w", err)
	}
	defer jf.Close()
	mb := encodeMeta(h, nm)
	hdr := journalHeader(h, c.meta.version, off, len(data), len(mb))
	sum := crc32.Update(crc32.Update(crc32.Checksum(hdr, castagnoli), castagnoli, mb), castagnoli, data)
	tail := binary.LittleEndian.AppendUint32(nil, sum)
	if err := s.writeParts(jf, h, StepJournalWrite, hdr, mb, data, tail); err != nil {
		return fmt.Errorf("write journal: %w", err)
	}
	if err := s.step(h, StepJournalSync); err != nil {
		return fmt.Errorf("sync journal: %w", err)
	}
	if err := s.syncData(jf); err != nil {
		return fmt.Errorf("sync journal: %w", err)
	}
	// A new journal (or data) file's name must be durable before the
	// data file is patched on the journal's word.
	if err := s.syncNamesLocked(c); err != nil {
		return fmt.Errorf("sync journal: %w", err)
	}
	if err := s.writeAt(f, h, StepApplyWrite, data, off, int64(len(data)/2)); err != nil {
		return fmt.Errorf("apply journal: %w", err)
	}
	if err := s.step(h, StepApplySync); err != nil {
		return fmt.Errorf("sync data: %w", err)
	}
	if err := s.syncData(f); err != nil {
		return fmt.Errorf("sync data: %w", err)
	}
	if err := s.commitMeta(h, c, nm); err != nil {
		return err
	}
	if len(data) > journalKeep {
		// Harmless if lost: an applied record is ignored.
		if err := jf.Truncate(0); err != nil {
			s.log.Warn("cannot cut applied journal", "chunk", h.String(), "err", err)
		}
	}
	return nil
}

// syncNamesLocked syncs the chunks directory if a file of chunk c was
// created since it was last synced.
func (s *Store) syncNamesLocked(c *chunk) error {
	if !c.newName {
		return nil
	}
	if err := s.syncDir(s.dir); err != nil {
		return err
	}
	c.newName = false
	return nil
}

// installMeta renames the metadata temp file into place and makes the
// rename durable.
func (s *Store) installMeta(h Handle) error {
	if err := s.step(h, StepMetaRename); err != nil {
		return fmt.Errorf("install metadata: %w", err)
	}
	if err := os.Rename(s.path(h, sufMetaTmp), s.path(h, sufMeta)); err != nil {
		return fmt.Errorf("install metadata: %w", err)
	}
	if err := s.step(h, StepDirSync); err != nil {
		return fmt.Errorf("install metadata: %w", err)
	}
	if err := s.syncDir(s.dir); err != nil {
		return fmt.Errorf("install metadata: %w", err)
	}
	return nil
}

// reserve allocates disk space for [off, off+n) of the data file so that
// a full disk fails the mutation here, before anything is committed.
func (s *Store) reserve(h Handle, f *os.File, off int64, n int) error {
	if err := s.step(h, StepReserve); err != nil {
		return fmt.Errorf("reserve %d bytes: %w", n, err)
	}
	if err := fallocate(f, off, int64(n)); err != nil {
		return fmt.Errorf("reserve %d bytes: %w", n, err)
	}
	return nil
}

// nextMeta computes the metadata after writing data at off and extending
// the length to newLen: the CRC of every block whose bytes change. A
// block only extended (its old bytes kept as a prefix) continues its old
// CRC, so appends read nothing back; a block partly overwritten is read,
// verified against its old CRC (a corrupt block is never given a fresh,
// matching CRC) and merged.
func (s *Store) nextMeta(h Handle, old meta, f *os.File, off int64, data []byte, newLen int64, v uint64) (meta, error) {
	nm := meta{version: v, length: newLen, crcs: make([]uint32, numBlocks(newLen))}
	copy(nm.crcs, old.crcs)
	end := off + int64(len(data))
	lo, hi := off, end
	if newLen > old.length {
		lo, hi = min(off, old.length), newLen
	}
	var img []byte
	for b := lo / BlockSize; b*BlockSize < hi; b++ {
		bs := b * BlockSize
		be := min(bs+BlockSize, newLen)
		oldEnd := max(bs, min(old.length, bs+BlockSize)) // old bytes are [bs, oldEnd)
		ws, we := max(off, bs), min(end, be)             // written bytes are [ws, we)
		if ws >= we {
			ws, we = be, be
		}
		var part []byte
		if ws < we {
			part = data[ws-off : we-off]
		}
		var crc uint32
		switch {
		case ws == bs && we == be:
			crc = crc32.Checksum(part, castagnoli)
		case oldEnd == bs && ws == be && be-bs == BlockSize:
			crc = s.zeroCRC
		case oldEnd <= ws:
			if oldEnd > bs {
				crc = old.crcs[b]
			}
			crc = crc32.Update(crc, castagnoli, s.zero[:ws-oldEnd])
			crc = crc32.Update(crc, castagnoli, part)
			crc = crc32.Update(crc, castagnoli, s.zero[:be-we])
		default:
			if img == nil {
				img = make([]byte, BlockSize)
			}
			blk := img[:be-bs]
			clear(blk)
			if err := readFull(f, blk[:oldEnd-bs], bs); err != nil {
				return meta{}, fmt.Errorf("read block %d: %w", b, err)
			}
			if got := crc32.Checksum(blk[:oldEnd-bs], castagnoli); got != old.crcs[b] {
				return meta{}, &CorruptError{Handle: h, Block: int(b),
					Detail: fmt.Sprintf("checksum mismatch (stored %08x, computed %08x); repair the block before overwriting part of it", old.crcs[b], got)}
			}
			copy(blk[ws-bs:], part)
			crc = crc32.Checksum(blk, castagnoli)
		}
		nm.crcs[b] = crc
	}
	return nm, nil
}
