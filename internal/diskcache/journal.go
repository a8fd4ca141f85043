package diskcache

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/govfs/govfs/internal/ids"
)

// A journal holds one buffered extent of a mount's writes: the bytes the
// application wrote at [Off, Off+len) of a file, accepted by write(2) but
// not yet pushed to the cluster. It is removed once the push is done.
//
// Layout: a 32-byte header (magic, format, inode, offset of the extent,
// time of the last write in Unix ns), then the extent's bytes.
const (
	journalMagic  = 0x67766a6c // "gvjl"
	journalFormat = 1
	journalHdr    = 32
)

var journalSeq atomic.Uint64

// Journal is the on-disk copy of one buffered extent.
type Journal struct {
	f   *os.File
	off int64
}

// NewJournal starts the journal of an extent of ino beginning at file
// offset off.
func (c *Cache) NewJournal(ino ids.Ino, off int64) (*Journal, error) {
	name := fmt.Sprintf("%d-%d-%d", uint64(ino), time.Now().UnixNano(), journalSeq.Add(1))
	f, err := os.OpenFile(filepath.Join(c.dir, dirtyDir, name), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("client cache: journal: %w", err)
	}
	var h [journalHdr]byte
	binary.LittleEndian.PutUint32(h[0:], journalMagic)
	binary.LittleEndian.PutUint32(h[4:], journalFormat)
	binary.LittleEndian.PutUint64(h[8:], uint64(ino))
	binary.LittleEndian.PutUint64(h[16:], uint64(off))
	binary.LittleEndian.PutUint64(h[24:], uint64(time.Now().UnixNano()))
	if _, err := f.WriteAt(h[:], 0); err != nil {
		f.Close()
		_ = os.Remove(f.Name())
		return nil, fmt.Errorf("client cache: journal: %w", err)
	}
	return &Journal{f: f, off: off}, nil
}

// WriteAt records p written at file offset off (inside or continuing the
// extent) and the time.
func (j *Journal) WriteAt(p []byte, off int64) error {
	if off < j.off {
		return fmt.Errorf("client cache: journal write at %d, before the extent's start %d", off, j.off)
	}
	if _, err := j.f.WriteAt(p, journalHdr+off-j.off); err != nil {
		return fmt.Errorf("client cache: journal: %w", err)
	}
	var ts [8]byte
	binary.LittleEndian.PutUint64(ts[:], uint64(time.Now().UnixNano()))
	if _, err := j.f.WriteAt(ts[:], 24); err != nil {
		return fmt.Errorf("client cache: journal: %w", err)
	}
	return nil
}

// Close closes the journal and leaves it on disk, for the next mount
// on the directory to commit or report.
func (j *Journal) Close() { j.f.Close() }

// Remove deletes the journal: its extent was pushed (or its failure
// reported to the application).
func (j *Journal) Remove() {
	name := j.f.Name()
	j.f.Close()
	_ = os.Remove(name)
}

// Dirty is a journal a previous mount left: writes it accepted and never
// pushed.
type Dirty struct {
	Ino ids.Ino
	Off int64
	// LastWrite is when the application last wrote into the extent.
	LastWrite time.Time
	Data      []byte
	path      string
}

// Name identifies the journal in logs.
func (d *Dirty) Name() string { return filepath.Base(d.path) }

// Leftovers returns the journals in the directory. Call it before the
// mount serves requests: every journal is then a previous mount's.
// Unreadable journals are moved to lost/ and reported in errs.
func (c *Cache) Leftovers() (ds []*Dirty, errs []error) {
	dir := filepath.Join(c.dir, dirtyDir)
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, []error{fmt.Errorf("client cache: %w", err)}
	}
	for _, de := range des {
		p := filepath.Join(dir, de.Name())
		d, err := readJournal(p)
		if err != nil {
			lost, lerr := c.moveLost(p)
			errs = append(errs, fmt.Errorf("client cache: unreadable journal %s (moved to %s): %w", de.Name(), lost, errors.Join(err, lerr)))
			continue
		}
		ds = append(ds, d)
	}
	return ds, errs
}

func readJournal(path string) (*Dirty, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(b) < journalHdr || binary.LittleEndian.Uint32(b[0:]) != journalMagic {
		return nil, errors.New("not a journal")
	}
	if f := binary.LittleEndian.Uint32(b[4:]); f != journalFormat {
		return nil, fmt.Errorf("journal format %d, want %d", f, journalFormat)
	}
	off := binary.LittleEndian.Uint64(b[16:])
	if off > 1<<62 {
		return nil, fmt.Errorf("journal offset %d", off)
	}
	return &Dirty{Ino: ids.Ino(binary.LittleEndian.Uint64(b[8:])), Off: int64(off),
		LastWrite: time.Unix(0, int64(binary.LittleEndian.Uint64(b[24:]))), Data: b[journalHdr:], path: path}, nil
}

// Committed removes a leftover journal whose bytes are now in the
// cluster.
func (c *Cache) Committed(d *Dirty) error { return os.Remove(d.path) }

// Lost moves a leftover journal that cannot be committed to lost/, with
// a note saying why, and returns its new path.
func (c *Cache) Lost(d *Dirty, why string) (string, error) {
	p, err := c.moveLost(d.path)
	if err != nil {
		return "", err
	}
	note := fmt.Sprintf("inode %d, file offset %d, %d bytes (after a %d-byte header), last written %s\nnot committed: %s\n",
		uint64(d.Ino), d.Off, len(d.Data), journalHdr, d.LastWrite.UTC().Format(time.RFC3339Nano), why)
	return p, os.WriteFile(p+".txt", []byte(note), 0o600)
}

func (c *Cache) moveLost(path string) (string, error) {
	dst := filepath.Join(c.dir, lostDir, strings.TrimPrefix(filepath.Base(path), "."))
	return dst, os.Rename(path, dst)
}

// LostDir is where journals that could not be committed are kept.
func (c *Cache) LostDir() string { return filepath.Join(c.dir, lostDir) }
