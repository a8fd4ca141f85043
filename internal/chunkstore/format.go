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
	metaMagic       = "GVCM"
	journalMagic    = "GVCJ"
	formatVersion   = 1
	metaHeaderLen   = 4 + 2 + 2 + 8 + 8 + 8 + 4
	journalHdrLen   = 4 + 2 + 2 + 8 + 8 + 8 + 8 + 4
	maxMetaFileSize = metaHeaderLen + 4*(MaxChunkSize/BlockSize) + 4
)

// encodeMeta returns the metadata file image:
// magic "GVCM" | format u16 | 0 u16 | handle u64 | version u64 |
// length u64 | nblocks u32 | nblocks × crc u32 | crc32c of all before.
func encodeMeta(h Handle, m meta) []byte {
	b := make([]byte, 0, metaHeaderLen+4*len(m.crcs)+4)
	b = append(b, metaMagic...)
	b = binary.LittleEndian.AppendUint16(b, formatVersion)
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

// decodeMeta parses and checks a metadata image of chunk h.
func decodeMeta(h Handle, b []byte, chunkSize int64) (meta, error) {
	if len(b) < metaHeaderLen+4 {
		return meta{}, fmt.Errorf("metadata is %d bytes, shorter than its header", len(b))
	}
	body, sum := b[:len(b)-4], binary.LittleEndian.Uint32(b[len(b)-4:])
	if got := crc32.Checksum(body, castagnoli); got != sum {
		return meta{}, fmt.Errorf("metadata checksum mismatch (stored %08x, computed %08x)", sum, got)
	}
	if string(b[:4]) != metaMagic {
		return meta{}, fmt.Errorf("metadata has bad magic %q", b[:4])
	}
	if f := binary.LittleEndian.Uint16(b[4:]); f != formatVersion {
		return meta{}, fmt.Errorf("metadata format %d is not supported (this binary reads %d)", f, formatVersion)
	}
	if got := Handle(binary.LittleEndian.Uint64(b[8:])); got != h {
		return meta{}, fmt.Errorf("metadata names chunk %v", got)
	}
	m := meta{
		version: binary.LittleEndian.Uint64(b[16:]),
		length:  int64(binary.LittleEndian.Uint64(b[24:])),
	}
	n := binary.LittleEndian.Uint32(b[32:])
	if m.length < 0 || m.length > chunkSize {
		return meta{}, fmt.Errorf("metadata length %d outside [0, %d]", m.length, chunkSize)
	}
	if int(n) != numBlocks(m.length) || len(body) != metaHeaderLen+4*int(n) {
		return meta{}, fmt.Errorf("metadata has %d checksums for length %d in %d bytes", n, m.length, len(b))
	}
	m.crcs = make([]uint32, n)
	for i := range m.crcs {
		m.crcs[i] = binary.LittleEndian.Uint32(body[metaHeaderLen+4*i:])
	}
	return m, nil
}

// journal is a committed but possibly unapplied overwrite.
type journal struct {
	base uint64 // version of the metadata the write was computed against
	off  int64
	meta []byte // the metadata image to install (encodeMeta)
	data []byte
}

// journalHeader returns the header of a journal file:
// magic "GVCJ" | format u16 | 0 u16 | handle u64 | base version u64 |
// offset u64 | data length u64 | meta length u32; then the metadata image,
// the data, and a crc32c of everything before.
func journalHeader(h Handle, base uint64, off int64, dataLen, metaLen int) []byte {
	b := make([]byte, 0, journalHdrLen)
	b = append(b, journalMagic...)
	b = binary.LittleEndian.AppendUint16(b, formatVersion)
	b = binary.LittleEndian.AppendUint16(b, 0)
	b = binary.LittleEndian.AppendUint64(b, uint64(h))
	b = binary.LittleEndian.AppendUint64(b, base)
	b = binary.LittleEndian.AppendUint64(b, uint64(off))
	b = binary.LittleEndian.AppendUint64(b, uint64(dataLen))
	return binary.LittleEndian.AppendUint32(b, uint32(metaLen))
}

// decodeJournal parses and checks a journal file of chunk h.
func decodeJournal(h Handle, b []byte, chunkSize int64) (journal, meta, error) {
	if len(b) < journalHdrLen+4 {
		return journal{}, meta{}, fmt.Errorf("journal is %d bytes, shorter than its header", len(b))
	}
	body, sum := b[:len(b)-4], binary.LittleEndian.Uint32(b[len(b)-4:])
	if got := crc32.Checksum(body, castagnoli); got != sum {
		return journal{}, meta{}, fmt.Errorf("journal checksum mismatch (stored %08x, computed %08x)", sum, got)
	}
	if string(b[:4]) != journalMagic || binary.LittleEndian.Uint16(b[4:]) != formatVersion {
		return journal{}, meta{}, fmt.Errorf("journal has bad magic or format %q", b[:6])
	}
	if got := Handle(binary.LittleEndian.Uint64(b[8:])); got != h {
		return journal{}, meta{}, fmt.Errorf("journal names chunk %v", got)
	}
	j := journal{
		base: binary.LittleEndian.Uint64(b[16:]),
		off:  int64(binary.LittleEndian.Uint64(b[24:])),
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
