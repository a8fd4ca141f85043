// Package ids defines the typed identifiers shared by GovFS packages so
// that a node id is never passed where an inode number is expected.
package ids

import (
	"fmt"
	"strconv"
)

// Ino is a global inode number. Inode numbers never change, even when a
// subtree moves to another ministry.
type Ino uint64

// RootIno is the inode number of "/".
const RootIno Ino = 1

func (i Ino) String() string { return strconv.FormatUint(uint64(i), 10) }

// GroupID names a Raft group. Group 0 is the president group; ministries
// have ids from 1 (the root ministry) up.
type GroupID uint64

const (
	// PresidentGroup holds the cluster map.
	PresidentGroup GroupID = 0
	// RootMinistry owns "/" at bootstrap.
	RootMinistry GroupID = 1
)

func (g GroupID) String() string { return "g" + strconv.FormatUint(uint64(g), 10) }

// NodeID names a metadata node. Zero is not a valid node id (etcd raft
// reserves it for "none").
type NodeID uint64

func (n NodeID) String() string { return "n" + strconv.FormatUint(uint64(n), 10) }

// ParseNodeID parses a decimal node id and rejects zero.
func ParseNodeID(s string) (NodeID, error) {
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("node id %q is not a positive integer", s)
	}
	if v == 0 {
		return 0, fmt.Errorf("node id 0 is reserved; use 1 or more")
	}
	return NodeID(v), nil
}
