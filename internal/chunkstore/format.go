package chunkstore

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"strconv"
	"strings"
)

// castagnoli is CRC32C, hardware-accelerated on amd64 and arm64.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Handle identifies a chunk; it never changes for the life of the chunk.
type Handle uint64

func (h Handle) String() string { return fmt.Sprintf("%016x", uint64(h)) }

// File name suffixes inside the chunks directory; see doc.go.
const (
	sufMeta       = ".meta"
	sufData       = ".data"
	sufJournal    = ".jnl"
	sufMetaTmp    = ".meta.tmp"
	sufJournalTmp = ".jnl.tmp"
)

// parseName splits "<16 hex digits><suffix>"; ok is false for names that
// are not chunk files.
func parseName(name string) (h Handle, suffix string, ok bool) {
	if len(name) < 17 {
		return 0, "", false
	}
	v, err := strconv.ParseUint(name[:16], 16, 64)
	if err != nil {
		return 0, "", false
	}
	suffix = name[16:]
	switch suffix {
	case sufMeta, sufData, sufJournal, sufMetaTmp, sufJournalTmp:
		return Handle(v), suffix, true
	}
	return 0, "", false
}

// meta is the committed state of one chunk.
type meta struct {
	version uint64
	length  int64
	// crcs[b] is the CRC32C of block b's bytes below length, so the last
	// block's checksum covers only its valid prefix.
	crcs []uint32
}

// numBlocks is the number of blocks that hold bytes of a chunk of length n.
func numBlocks(n int64) int { return int((n + BlockSize - 1) / BlockSize) }

const (
	metaMagic    = "GVCM"
	journalMagic = "GVCJ"
	// formatVersion is the format this binary writes; see doc.go.
	formatVersion = 2
	// formatV1 stores (one metadata record per file, replaced by rename;
	// journals renamed into place) are read and upgraded.
	formatV1        = 1
	metaHeaderLen   = 4 + 2 + 2 + 8 + 8 + 8 + 4
	journalHdrLen   = 4 + 2 + 2 + 8 + 8 + 8 + 8 + 4
	maxMetaFileSize = metaHeaderLen + 4*(MaxChunkSize/BlockSize) + 4
	// slotAlign aligns metadata slots, so the two never share a
	// file-system block (or a disk sector) and writing one cannot tear
	// the other.
	slotAlign = 4096
)

// slotSize is the size of one metadata slot of a chunk of chunkSize: the
// largest record, rounded up to slotAlign.
func slotSize(chunkSize int64) int {
	n := metaHeaderLen + 4*int(chunkSize/BlockSize) + 4
	return (n + slotAlign - 1) / slotAlign * slotAlign
}

// encodeMeta returns a metadata record:
// magic "GVCM" | format u16 | 0 u16 | handle u64 | version u64 |
// length u64 | nblocks u32 | nblocks × crc u32 | crc32c of all before.
func encodeMeta(h Handle, m meta) []byte { return encodeMetaFormat(h, m, formatVersion) }

func encodeMetaFormat(h Handle, m meta, format uint16) []byte {
	b := make([]byte, 0, metaHeaderLen+4*len(m.crcs)+4)
	b = append(b, metaMagic...)
	b = binary.LittleEndian.AppendUint16(b, format)
	b = binary.LittleEndian.AppendUint16(b, 0)
	b = binary.LittleEndian.AppendUint64(b, uint64(h))
	b = binary.LittleEndian.AppendUint64(b, m.version)
	b = binary.LittleEndian.AppendUint64(b, uint64(m.length))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(m.crcs)))
	for _, c := range m.crcs {
		b = binary.LittleEndian.AppendUint32(b, c)
	}
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// decodeMeta parses and checks a metadata record of chunk h that fills b
// exactly, in either format.
func decodeMeta(h Handle, b []byte, chunkSize int64) (meta, error) {
	m, _, n, err := decodeRecord(h, b, chunkSize)
	if err == nil && n != len(b) {
		err = fmt.Errorf("metadata is %d bytes, its record %d", len(b), n)
	}
	return m, err
}

// decodeRecord parses and checks the metadata record at the start of b
// (which may continue past it) and returns it, its format and its size.
func decodeRecord(h Handle, b []byte, chunkSize int64) (meta, uint16, int, error) {
	if len(b) < metaHeaderLen+4 {
		return meta{}, 0, 0, fmt.Errorf("metadata is %d bytes, shorter than its header", len(b))
	}
	n := metaHeaderLen + 4*int64(binary.LittleEndian.Uint32(b[32:])) + 4
	if n > int64(len(b)) {
		return meta{}, 0, 0, fmt.Errorf("metadata record of %d bytes does not fit in %d", n, len(b))
	}
	b = b[:n]
	m, f, err := decodeMetaBody(h, b, chunkSize)
	return m, f, int(n), err
}

func decodeMetaBody(h Handle, b []byte, chunkSize int64) (meta, uint16, error) {
	body, sum := b[:len(b)-4], binary.LittleEndian.Uint32(b[len(b)-4:])
	if got := crc32.Checksum(body, castagnoli); got != sum {
		return meta{}, 0, fmt.Errorf("metadata checksum mismatch (stored %08x, computed %08x)", sum, got)
	}
	if string(b[:4]) != metaMagic {
		return meta{}, 0, fmt.Errorf("metadata has bad magic %q", b[:4])
	}
	format := binary.LittleEndian.Uint16(b[4:])
	if format != formatVersion && format != formatV1 {
		return meta{}, 0, fmt.Errorf("metadata format %d is not supported (this binary reads %d and %d)", format, formatV1, formatVersion)
	}
	if got := Handle(binary.LittleEndian.Uint64(b[8:])); got != h {
		return meta{}, 0, fmt.Errorf("metadata names chunk %v", got)
	}
	m := meta{
		version: binary.LittleEndian.Uint64(b[16:]),
		length:  int64(binary.LittleEndian.Uint64(b[24:])),
	}
	n := binary.LittleEndian.Uint32(b[32:])
	if m.length < 0 || m.length > chunkSize {
		return meta{}, 0, fmt.Errorf("metadata length %d outside [0, %d]", m.length, chunkSize)
	}
	if int(n) != numBlocks(m.length) || len(body) != metaHeaderLen+4*int(n) {
		return meta{}, 0, fmt.Errorf("metadata has %d checksums for length %d in %d bytes", n, m.length, len(b))
	}
	m.crcs = make([]uint32, n)
	for i := range m.crcs {
		m.crcs[i] = binary.LittleEndian.Uint32(body[metaHeaderLen+4*i:])
	}
	return m, format, nil
}

// encodeMetaFile returns the image of a new metadata file: two slots of
// slotSize bytes, m in slot 0 and zeros (an invalid record) in slot 1.
// The zeros are written, not left as a hole, so that later slot writes
// overwrite allocated blocks and never need disk space.
func encodeMetaFile(h Handle, m meta, chunkSize int64) []byte {
	b := make([]byte, 2*slotSize(chunkSize))
	copy(b, encodeMeta(h, m))
	return b
}

// decodeMetaFile parses a metadata file: in format 2, two slots of which
// the valid one with the higher version is the committed metadata (the
// other holds the one before it, or a torn write); in format 1, a single
// record. It returns the metadata, the file's format and the slot.
func decodeMetaFile(h Handle, b []byte, chunkSize int64) (meta, uint16, int, error) {
	ss := slotSize(chunkSize)
	if len(b) != 2*ss {
		// NB: a format-1 file is one record, never as long as two slots.
		m, f, n, err := decodeRecord(h, b, chunkSize)
		switch {
		case err != nil:
			return meta{}, 0, 0, err
		case f != formatV1 || n != len(b):
			return meta{}, 0, 0, fmt.Errorf("metadata file is %d bytes: neither two slots of %d nor one format-1 record", len(b), ss)
		}
		return m, formatV1, 0, nil
	}
	var best meta
	slot := -1
	var errs [2]error
	for i := range 2 {
		m, f, _, err := decodeRecord(h, b[i*ss:(i+1)*ss], chunkSize)
		if err == nil && f != formatVersion {
			err = fmt.Errorf("format-%d record in a format-%d slot", f, formatVersion)
		}
		if err != nil {
			errs[i] = err
			continue
		}
		if slot < 0 || m.version > best.version {
			best, slot = m, i
		}
	}
	if slot < 0 {
		return meta{}, 0, 0, fmt.Errorf("no valid metadata slot (slot 0: %v; slot 1: %v)", errs[0], errs[1])
	}
	return best, formatVersion, slot, nil
}

// journal is a committed but possibly unapplied overwrite.
type journal struct {
	format uint16
	base   uint64 // version of the metadata the write was computed against
	off    int64
	meta   []byte // the metadata image to install (encodeMeta)
	data   []byte
}

// journalHeader returns the header of a journal file:
// magic "GVCJ" | format u16 | 0 u16 | handle u64 | base version u64 |
// offset u64 | data length u64 | meta length u32; then the metadata image,
// the data, and a crc32c of everything before.
func journalHeader(h Handle, base uint64, off int64, dataLen, metaLen int) []byte {
	return journalHeaderFormat(h, base, off, dataLen, metaLen, formatVersion)
}

func journalHeaderFormat(h Handle, base uint64, off int64, dataLen, metaLen int, format uint16) []byte {
	b := make([]byte, 0, journalHdrLen)
	b = append(b, journalMagic...)
	b = binary.LittleEndian.AppendUint16(b, format)
	b = binary.LittleEndian.AppendUint16(b, 0)
	b = binary.LittleEndian.AppendUint64(b, uint64(h))
	b = binary.LittleEndian.AppendUint64(b, base)
	b = binary.LittleEndian.AppendUint64(b, uint64(off))
	b = binary.LittleEndian.AppendUint64(b, uint64(dataLen))
	return binary.LittleEndian.AppendUint32(b, uint32(metaLen))
}

// decodeJournal parses and checks the journal record at the start of a
// journal file of chunk h. In format 2 the file is rewritten in place, so
// bytes of an earlier, longer record may follow the record.
func decodeJournal(h Handle, b []byte, chunkSize int64) (journal, meta, error) {
	if len(b) < journalHdrLen+4 {
		return journal{}, meta{}, fmt.Errorf("journal is %d bytes, shorter than its header", len(b))
	}
	// NB: the sizes are not checked yet (garbage in a torn record), so
	// bound each before adding them.
	if dl, ml := binary.LittleEndian.Uint64(b[32:]), uint64(binary.LittleEndian.Uint32(b[40:])); dl <= uint64(chunkSize) && ml <= maxMetaFileSize {
		if n := journalHdrLen + ml + dl + 4; n <= uint64(len(b)) {
			b = b[:n]
		}
	}
	body, sum := b[:len(b)-4], binary.LittleEndian.Uint32(b[len(b)-4:])
	if got := crc32.Checksum(body, castagnoli); got != sum {
		return journal{}, meta{}, fmt.Errorf("journal checksum mismatch (stored %08x, computed %08x)", sum, got)
	}
	format := binary.LittleEndian.Uint16(b[4:])
	if string(b[:4]) != journalMagic || (format != formatVersion && format != formatV1) {
		return journal{}, meta{}, fmt.Errorf("journal has bad magic or format %q", b[:6])
	}
	if got := Handle(binary.LittleEndian.Uint64(b[8:])); got != h {
		return journal{}, meta{}, fmt.Errorf("journal names chunk %v", got)
	}
	j := journal{
		format: format,
		base:   binary.LittleEndian.Uint64(b[16:]),
		off:    int64(binary.LittleEndian.Uint64(b[24:])),
	}
	dataLen := binary.LittleEndian.Uint64(b[32:])
	metaLen := uint64(binary.LittleEndian.Uint32(b[40:]))
	if dataLen > uint64(chunkSize) || metaLen > maxMetaFileSize || uint64(len(body)) != journalHdrLen+metaLen+dataLen {
		return journal{}, meta{}, fmt.Errorf("journal sizes (meta %d, data %d) do not match its length %d", metaLen, dataLen, len(b))
	}
	j.meta = body[journalHdrLen : journalHdrLen+metaLen]
	j.data = body[journalHdrLen+metaLen:]
	m, err := decodeMeta(h, j.meta, chunkSize)
	if err != nil {
		return journal{}, meta{}, fmt.Errorf("journal: %w", err)
	}
	if j.off < 0 || j.off+int64(len(j.data)) > m.length {
		return journal{}, meta{}, fmt.Errorf("journal range [%d, +%d) outside the new length %d", j.off, len(j.data), m.length)
	}
	return j, m, nil
}

// isTmp reports whether suffix names a temporary file.
func isTmp(suffix string) bool { return strings.HasSuffix(suffix, ".tmp") }
