package chunkstore

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
)

const (
	// BlockSize is the checksum granularity: every 64 KiB block of a chunk
	// has its own CRC32C, so a read verifies at most two partial blocks
	// more than it returns and a bad block is repaired alone.
	BlockSize = 64 << 10

	// DefaultChunkSize is the chunk size of a new cluster (DESIGN §6).
	DefaultChunkSize = 64 << 20

	// MaxChunkSize bounds ChunkSize. A Write holds its whole payload in
	// memory and a journaled write copies it once more to the journal, so
	// chunks much larger than this would make single requests unwieldy.
	MaxChunkSize = 1 << 30
)

// Config configures a Store.
type Config struct {
	// Dir is the store's directory; it is created if missing and must be
	// empty or hold a store of the same cluster.
	Dir string
	// ClusterID names the cluster the store belongs to. A directory
	// written by another cluster is refused, so a mis-pointed --data flag
	// cannot serve or overwrite someone else's chunks.
	ClusterID string
	// ChunkSize is fixed when the cluster is created: a positive multiple
	// of BlockSize, at most MaxChunkSize. An existing store remembers it
	// and refuses a different value.
	ChunkSize int64
	// OpenFiles bounds the data files kept open for reads and writes
	// (least recently used are closed first); 0 means DefaultOpenFiles.
	OpenFiles int
	// NoSync skips fsync. Only for tests and benchmarks of the code path:
	// without it an acknowledged write may be lost on power failure.
	NoSync bool
	// Logger receives recovery and damage reports; nil discards them.
	Logger *slog.Logger
	// Knobs are failure hooks for tests; nil in production.
	Knobs *TestingKnobs
}

// DefaultConfig returns production defaults; Dir and ClusterID must still
// be set.
func DefaultConfig() Config {
	return Config{ChunkSize: DefaultChunkSize, Logger: slog.Default()}
}

// Validate names the first bad field and what to do about it.
func (c *Config) Validate() error {
	switch {
	case c.Dir == "":
		return errors.New("chunkstore: Dir is required (the chunk directory, e.g. --data)")
	case c.ClusterID == "":
		return errors.New("chunkstore: ClusterID is required (the id of the cluster this store serves)")
	case len(c.ClusterID) > 256:
		return fmt.Errorf("chunkstore: ClusterID is %d bytes; use at most 256", len(c.ClusterID))
	case c.ChunkSize <= 0 || c.ChunkSize%BlockSize != 0:
		return fmt.Errorf("chunkstore: ChunkSize %d must be a positive multiple of %d (64 KiB)", c.ChunkSize, BlockSize)
	case c.OpenFiles < 0:
		return fmt.Errorf("chunkstore: OpenFiles %d is negative; use 0 for the default (%d)", c.OpenFiles, DefaultOpenFiles)
	case c.ChunkSize > MaxChunkSize:
		return fmt.Errorf("chunkstore: ChunkSize %d exceeds the maximum %d (1 GiB)", c.ChunkSize, MaxChunkSize)
	}
	return nil
}

// Step names a point in a mutation at which TestingKnobs.BeforeStep runs.
type Step string

// The steps of a mutation, in the order they happen. An append or other
// fresh-area write goes Reserve, DataWrite, DataSync, SlotWrite, SlotSync.
// A write over existing bytes goes Reserve, JournalWrite, JournalSync,
// ApplyWrite, ApplySync, SlotWrite, SlotSync. Pad, SetVersion and a
// growing Truncate go SlotWrite, SlotSync; a shrinking Truncate goes
// SlotWrite, SlotSync, DataTruncate, DataSync. The mutation that creates
// a chunk commits with MetaWrite, MetaSync, MetaRename, DirSync instead of
// the slot steps, and the first mutation of a format-1 chunk runs those
// four first, rewriting its metadata file in format 2.
const (
	StepReserve       Step = "reserve"        // fallocate the target range of the data file
	StepDataWrite     Step = "data-write"     // pwrite into a never-committed area of the data file
	StepDataSync      Step = "data-sync"      // fdatasync (fsync after a cut) the data file
	StepJournalWrite  Step = "journal-write"  // write the journal record over the chunk's journal
	StepJournalSync   Step = "journal-sync"   // fdatasync the journal
	StepMetaWrite     Step = "meta-write"     // write a new metadata file as a temp file
	StepMetaSync      Step = "meta-sync"      // fsync the metadata temp file
	StepJournalCommit Step = "journal-commit" // format 1 only: no longer reached
	StepApplyWrite    Step = "apply-write"    // pwrite the journaled bytes into the data file
	StepApplySync     Step = "apply-sync"     // fdatasync the data file after applying
	StepMetaRename    Step = "meta-rename"    // rename the metadata temp file into place
	StepDirSync       Step = "dir-sync"       // fsync the chunk directory
	StepJournalRemove Step = "journal-remove" // format 1 only: no longer reached
	StepDataTruncate  Step = "data-truncate"  // cut the data file to a shrunk chunk's committed length
	StepSlotWrite     Step = "slot-write"     // write the new metadata over the older slot of the metadata file
	StepSlotSync      Step = "slot-sync"      // fdatasync the metadata file
)

// TestingKnobs are failure hooks; nil in production.
type TestingKnobs struct {
	// BeforeStep runs before each named step of a mutation. Returning an
	// error makes the step fail as an I/O error would (for the write
	// steps, after half of the bytes were written, as a disk filling up
	// mid-write does); panicking simulates the process being killed there.
	BeforeStep func(h Handle, s Step) error
	// AfterSync runs after every fsync or fdatasync of a chunk file or of
	// the chunks directory (also with NoSync), so that a test can model
	// what survives a power loss: synced contents and synced names only.
	AfterSync func(f *os.File)
}
