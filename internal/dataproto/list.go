package dataproto

import (
	"encoding/binary"
	"fmt"
)

// ListEntrySize is the size of one entry of a TypeListReply payload.
const ListEntrySize = 24

// ListEntry is one chunk in a TypeListReply.
type ListEntry struct {
	Handle  uint64
	Version uint64
	Length  int64
}

// EncodeList returns the payload of a TypeListReply:
// (handle u64 | version u64 | length u64) per chunk, big-endian.
func EncodeList(es []ListEntry) []byte {
	b := make([]byte, 0, len(es)*ListEntrySize)
	for _, e := range es {
		b = binary.BigEndian.AppendUint64(b, e.Handle)
		b = binary.BigEndian.AppendUint64(b, e.Version)
		b = binary.BigEndian.AppendUint64(b, uint64(e.Length))
	}
	return b
}

// DecodeList parses a TypeListReply payload.
func DecodeList(b []byte) ([]ListEntry, error) {
	if len(b)%ListEntrySize != 0 {
		return nil, fmt.Errorf("dataproto: list reply of %d bytes is not a whole number of %d-byte entries", len(b), ListEntrySize)
	}
	es := make([]ListEntry, 0, len(b)/ListEntrySize)
	for ; len(b) > 0; b = b[ListEntrySize:] {
		e := ListEntry{Handle: binary.BigEndian.Uint64(b), Version: binary.BigEndian.Uint64(b[8:]), Length: int64(binary.BigEndian.Uint64(b[16:]))}
		if e.Length < 0 {
			return nil, fmt.Errorf("dataproto: list reply entry for chunk %d has negative length", e.Handle)
		}
		es = append(es, e)
	}
	return es, nil
}

// GroupBits is how many low bits of a chunk handle number the chunk
// within its replica group: handle = group<<GroupBits | n. A chunk's
// group is thus known from its handle alone, so a server can tell which
// of its chunks belong to a group (for copying and collection) without
// any other record.
const GroupBits = 40

// HandleGroup returns the replica group a chunk handle belongs to.
func HandleGroup(h uint64) uint64 { return h >> GroupBits }

// MakeHandle combines a replica group and a number from the president's
// handle allocator (which must be below 1<<GroupBits).
func MakeHandle(group, n uint64) (uint64, error) {
	if n == 0 || n >= 1<<GroupBits {
		return 0, fmt.Errorf("dataproto: chunk number %d outside [1, 2^%d)", n, GroupBits)
	}
	if group == 0 || group >= 1<<(64-GroupBits) {
		return 0, fmt.Errorf("dataproto: replica group %d outside [1, 2^%d)", group, 64-GroupBits)
	}
	return group<<GroupBits | n, nil
}
