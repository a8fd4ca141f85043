package dataproto

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
)

// HeaderSize is the size of a frame header.
const HeaderSize = 72

// Magic opens every frame.
const Magic uint32 = 0x47564644 // "GVFD"

// Version is the frame format version this package speaks.
const Version uint8 = 1

// DefaultMaxPayload bounds a frame's payload unless the reader says
// otherwise (a data request carries at most a few MiB).
const DefaultMaxPayload = 16 << 20

// Type is the kind of a frame.
type Type uint8

// Frame types. Requests and their replies come in pairs.
const (
	TypeWrite Type = iota + 1
	TypeWriteReply
	TypeRead
	TypeReadReply
	TypeAppend
	TypeAppendReply
	// TypeReplicate carries a mutation the primary ordered (version and
	// offset fixed) to another member of the group.
	TypeReplicate
	TypeReplicateReply
	// TypeTruncate asks the primary to cut a chunk to Offset bytes.
	TypeTruncate
	TypeTruncateReply
	// TypeStat asks a member for its version (reply Version) and length
	// (reply Offset) of a chunk, whatever its state.
	TypeStat
	TypeStatReply
	// TypeInstall replaces a member's copy of a chunk with the payload at
	// Version (the primary reconciling a member, or filling a new one).
	TypeInstall
	TypeInstallReply
	// TypeList asks for the chunks a server holds: of replica group Group,
	// or all of them when Group is 0. The reply payload is a sequence of
	// ListEntrySize-byte entries (EncodeList).
	TypeList
	TypeListReply
	// TypeDelete removes a server's copy of a chunk (garbage collection).
	TypeDelete
	TypeDeleteReply
	typeEnd
)

// Mutation is the kind of a replicated mutation. A TypeReplicate request
// carries it in its Status field (requests have no status of their own).
type Mutation = Status

// Mutation kinds.
const (
	MutationWrite    Mutation = 0 // Payload at Offset
	MutationTruncate Mutation = 1 // cut to Offset bytes
	MutationPad      Mutation = 2 // extend to the chunk size with zeros
)

func (t Type) String() string {
	switch t {
	case TypeWrite:
		return "write"
	case TypeWriteReply:
		return "write-reply"
	case TypeRead:
		return "read"
	case TypeReadReply:
		return "read-reply"
	case TypeAppend:
		return "append"
	case TypeAppendReply:
		return "append-reply"
	case TypeReplicate:
		return "replicate"
	case TypeReplicateReply:
		return "replicate-reply"
	case TypeTruncate:
		return "truncate"
	case TypeTruncateReply:
		return "truncate-reply"
	case TypeStat:
		return "stat"
	case TypeStatReply:
		return "stat-reply"
	case TypeInstall:
		return "install"
	case TypeInstallReply:
		return "install-reply"
	case TypeList:
		return "list"
	case TypeListReply:
		return "list-reply"
	case TypeDelete:
		return "delete"
	case TypeDeleteReply:
		return "delete-reply"
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// Status is the outcome carried by a reply.
type Status uint32

// Reply statuses.
const (
	StatusOK Status = iota
	StatusStaleEpoch
	StatusStaleVersion
	StatusNotFound
	StatusChunkFull
	StatusCorrupt
	StatusNoSpace
	StatusInvalid
	StatusNotPrimary
	StatusInternal
	// StatusDenied: the caller's certificate may not make this request
	// (a client asking for a chunk server's internal operations), or its
	// chunk access token does not allow it.
	StatusDenied
	// StatusBadToken: the request's chunk access token is missing,
	// expired or signed with a key the server does not know; a fresh one
	// from the ministry may be accepted.
	StatusBadToken
)

// TokenSize is the length of a chunk access token (chunktoken.Size).
const TokenSize = 32

// flagToken in a header's flags says a TokenSize-byte chunk access token
// follows the header, before the payload.
const flagToken uint16 = 1

// Frame is one decoded frame.
//
// In a TypeAppend request Version carries the appender's request id
// (non-zero to ask for deduplication: a retried append with the same id
// gets the first offset back instead of a second copy).
type Frame struct {
	Type      Type
	RequestID uint64
	Handle    uint64
	Group     uint64
	Epoch     uint64
	Version   uint64
	Offset    int64
	Status    Status
	Payload   []byte
	// Token is the chunk access token of a client's request (nil or
	// TokenSize bytes), sent between the header and the payload.
	Token []byte

	// crc is the CRC32C of crcOf, the payload it was computed for.
	crc   uint32
	crcOf []byte
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Errors a reader returns; each is wrapped with details.
var (
	ErrBadMagic   = errors.New("dataproto: not a GovFS data frame (bad magic)")
	ErrBadVersion = errors.New("dataproto: unsupported frame version")
	ErrBadHeader  = errors.New("dataproto: corrupt frame header")
	ErrTooLarge   = errors.New("dataproto: frame payload too large")
	ErrBadPayload = errors.New("dataproto: corrupt frame payload")
)

// AppendFrame encodes f after dst and returns the extended slice.
func AppendFrame(dst []byte, f *Frame) ([]byte, error) {
	dst, err := appendHeader(dst, f)
	if err != nil {
		return dst, err
	}
	dst = append(dst, f.Token...)
	return append(dst, f.Payload...), nil
}

// appendHeader encodes f's header (which covers the payload's CRC).
func appendHeader(dst []byte, f *Frame) ([]byte, error) {
	if f.Type == 0 || f.Type >= typeEnd {
		return dst, fmt.Errorf("dataproto: encode: unknown frame type %d", uint8(f.Type))
	}
	if f.Offset < 0 {
		return dst, fmt.Errorf("dataproto: encode: negative offset %d", f.Offset)
	}
	if uint64(len(f.Payload)) > uint64(^uint32(0)) {
		return dst, fmt.Errorf("%w: %d bytes", ErrTooLarge, len(f.Payload))
	}
	var flags uint16
	switch len(f.Token) {
	case 0:
	case TokenSize:
		flags |= flagToken
	default:
		return dst, fmt.Errorf("dataproto: encode: a token is %d bytes, not %d", TokenSize, len(f.Token))
	}
	start := len(dst)
	dst = binary.BigEndian.AppendUint32(dst, Magic)
	dst = append(dst, Version, byte(f.Type))
	dst = binary.BigEndian.AppendUint16(dst, flags)
	dst = binary.BigEndian.AppendUint64(dst, f.RequestID)
	dst = binary.BigEndian.AppendUint64(dst, f.Handle)
	dst = binary.BigEndian.AppendUint64(dst, f.Group)
	dst = binary.BigEndian.AppendUint64(dst, f.Epoch)
	dst = binary.BigEndian.AppendUint64(dst, f.Version)
	dst = binary.BigEndian.AppendUint64(dst, uint64(f.Offset))
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(f.Payload)))
	dst = binary.BigEndian.AppendUint32(dst, uint32(f.Status))
	dst = binary.BigEndian.AppendUint32(dst, f.payloadCRC())
	dst = binary.BigEndian.AppendUint32(dst, crc32.Checksum(dst[start:], castagnoli))
	return dst, nil
}

// payloadCRC is the CRC32C of the payload, reused from when the frame was
// read (or last sent) if the payload is the same slice: a primary
// forwarding a write to two members computes it once, not twice.
func (f *Frame) payloadCRC() uint32 {
	if f.crcOf != nil && len(f.crcOf) == len(f.Payload) && (len(f.Payload) == 0 || &f.crcOf[0] == &f.Payload[0]) {
		return f.crc
	}
	c := crc32.Checksum(f.Payload, castagnoli)
	f.crc, f.crcOf = c, f.Payload
	return c
}

// SealPayload computes the payload's CRC now, so copies of f sent at the
// same time (one mutation to several members) reuse it. The payload must
// not change afterwards.
func (f *Frame) SealPayload() { f.payloadCRC() }

// WriteFrame encodes f to w: the header, then the payload as it is (not
// copied). Give it a buffered writer (bufio.Writer), which sends a large
// payload straight through.
func WriteFrame(w io.Writer, f *Frame) error {
	var hb [HeaderSize]byte
	hdr, err := appendHeader(hb[:0], f)
	if err != nil {
		return err
	}
	if _, err := w.Write(hdr); err != nil {
		return fmt.Errorf("dataproto: write %v frame: %w", f.Type, err)
	}
	if _, err := w.Write(f.Token); err != nil {
		return fmt.Errorf("dataproto: write %v frame: %w", f.Type, err)
	}
	if _, err := w.Write(f.Payload); err != nil {
		return fmt.Errorf("dataproto: write %v frame: %w", f.Type, err)
	}
	return nil
}

// ParseHeader validates a frame header and returns the frame without its
// payload (or token), the payload length and the payload CRC to check.
// f.Token is non-nil (zeros) when a token follows the header.
func ParseHeader(h []byte, maxPayload uint32) (f Frame, n uint32, crc uint32, err error) {
	if len(h) < HeaderSize {
		return f, 0, 0, fmt.Errorf("%w: %d header bytes", ErrBadHeader, len(h))
	}
	if m := binary.BigEndian.Uint32(h[0:]); m != Magic {
		return f, 0, 0, fmt.Errorf("%w: %#x", ErrBadMagic, m)
	}
	if h[4] != Version {
		return f, 0, 0, fmt.Errorf("%w: %d (this binary speaks %d)", ErrBadVersion, h[4], Version)
	}
	if want, got := binary.BigEndian.Uint32(h[68:]), crc32.Checksum(h[:68], castagnoli); want != got {
		return f, 0, 0, fmt.Errorf("%w: header CRC %#x, computed %#x", ErrBadHeader, want, got)
	}
	f.Type = Type(h[5])
	if f.Type == 0 || f.Type >= typeEnd {
		return f, 0, 0, fmt.Errorf("%w: unknown type %d", ErrBadHeader, h[5])
	}
	flags := binary.BigEndian.Uint16(h[6:])
	if flags&^flagToken != 0 {
		return f, 0, 0, fmt.Errorf("%w: reserved flags %#x set", ErrBadHeader, flags)
	}
	if flags&flagToken != 0 {
		f.Token = make([]byte, TokenSize)
	}
	f.RequestID = binary.BigEndian.Uint64(h[8:])
	f.Handle = binary.BigEndian.Uint64(h[16:])
	f.Group = binary.BigEndian.Uint64(h[24:])
	f.Epoch = binary.BigEndian.Uint64(h[32:])
	f.Version = binary.BigEndian.Uint64(h[40:])
	f.Offset = int64(binary.BigEndian.Uint64(h[48:]))
	if f.Offset < 0 {
		return f, 0, 0, fmt.Errorf("%w: negative offset %d", ErrBadHeader, f.Offset)
	}
	n = binary.BigEndian.Uint32(h[56:])
	if n > maxPayload {
		return f, 0, 0, fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, n, maxPayload)
	}
	f.Status = Status(binary.BigEndian.Uint32(h[60:]))
	return f, n, binary.BigEndian.Uint32(h[64:]), nil
}

// Reader decodes frames from a stream.
type Reader struct {
	r          io.Reader
	maxPayload uint32
	hdr        [HeaderSize]byte
}

// NewReader reads frames from r, refusing payloads over maxPayload bytes
// (DefaultMaxPayload when 0). Wrap r in a bufio.Reader for small frames.
func NewReader(r io.Reader, maxPayload uint32) *Reader {
	if maxPayload == 0 {
		maxPayload = DefaultMaxPayload
	}
	return &Reader{r: r, maxPayload: maxPayload}
}

// Next reads one frame. At a clean end of stream it returns io.EOF; a
// stream cut inside a frame gives io.ErrUnexpectedEOF. The payload is a
// new slice owned by the caller.
func (r *Reader) Next() (*Frame, error) {
	if _, err := io.ReadFull(r.r, r.hdr[:]); err != nil {
		return nil, err
	}
	f, n, crc, err := ParseHeader(r.hdr[:], r.maxPayload)
	if err != nil {
		return nil, err
	}
	if f.Token != nil {
		if _, err := io.ReadFull(r.r, f.Token); err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, fmt.Errorf("dataproto: read %v token: %w", f.Type, err)
		}
	}
	f.Payload = make([]byte, n)
	if _, err := io.ReadFull(r.r, f.Payload); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("dataproto: read %v payload: %w", f.Type, err)
	}
	if got := crc32.Checksum(f.Payload, castagnoli); got != crc {
		return nil, fmt.Errorf("%w: %v frame %d: CRC %#x, computed %#x", ErrBadPayload, f.Type, f.RequestID, crc, got)
	}
	f.crc, f.crcOf = crc, f.Payload
	return &f, nil
}
