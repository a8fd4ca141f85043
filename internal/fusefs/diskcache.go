package fusefs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"syscall"
	"time"

	"github.com/govfs/govfs/client"
	"github.com/govfs/govfs/internal/diskcache"
	"github.com/govfs/govfs/internal/wire"
)

// The mount's side of the disk cache (--cache-dir, internal/diskcache).
//
// Reads: while the inode's version is the one of its last open on this
// mount (cacheVersion), reads are served in 1 MiB blocks from the cache,
// and missing blocks are read from the cluster and cached. A change by
// this mount (a push of buffered writes, truncate, fallocate) or the loss
// of the read lease stops that until the next open, which reads the
// version again (close-to-open, as without the cache); a changed version
// never matches the old blocks.
//
// Writes: every write(2) that is buffered is also written to the extent's
// journal, removed once the extent is pushed. After a crash of the mount,
// the next mount on the same directory commits each journal left behind,
// or reports it (recoverJournals).

// setCacheVersion notes the version an open just read.
func (n *node) setCacheVersion(v uint64) {
	if n.fsys.cache == nil {
		return
	}
	n.mu.Lock()
	n.mu.cacheVersion = v
	n.mu.Unlock()
}

// changedHere notes that this mount changed the file's bytes: the other
// open Files of the inode read them again (not the bytes read at their
// open), and cached blocks are no longer used until the next open.
func (n *node) changedHere() {
	// A listing's kept page may show the file as it was (keptpage.go).
	n.fsys.changes.Add(1)
	n.mu.Lock()
	hs := n.handlesLocked()
	n.mu.cacheVersion = 0
	n.mu.changes++
	n.mu.Unlock()
	for _, h := range hs {
		h.f.Unprime()
	}
	if n.fsys.cache != nil {
		n.fsys.cache.Forget(n.ino)
	}
}

// readCached serves a read from version ver's blocks, reading and caching
// the missing ones.
func (h *handle) readCached(ctx context.Context, c *diskcache.Cache, ver uint64, dest []byte, off int64) (int, error) {
	n := 0
	for n < len(dest) {
		pos := off + int64(n)
		blk := pos / diskcache.BlockSize
		b, ok := c.Get(h.n.ino, ver, blk)
		if !ok {
			h.n.mu.Lock()
			changes := h.n.mu.changes
			h.n.mu.Unlock()
			buf := make([]byte, diskcache.BlockSize)
			got, err := h.f.ReadAt(ctx, buf, blk*diskcache.BlockSize)
			if err != nil && !errors.Is(err, io.EOF) {
				return n, err
			}
			b = buf[:got]
			// Not if this mount changed the file while the block was
			// read: the bytes may predate the change, which leaves the
			// version as it is until the change is synced.
			h.n.mu.Lock()
			unchanged := h.n.mu.changes == changes && h.n.mu.cacheVersion == ver
			h.n.mu.Unlock()
			if unchanged {
				c.Put(h.n.ino, ver, blk, b)
			}
		}
		inBlk := pos - blk*diskcache.BlockSize
		if inBlk >= int64(len(b)) {
			break // end of file
		}
		n += copy(dest[n:], b[inBlk:])
		if len(b) < diskcache.BlockSize {
			break
		}
	}
	return n, nil
}

// recoverJournals commits or reports the writes a previous mount on the
// cache directory accepted and never pushed. A journal is committed when
// its file still exists and nobody changed it after the journal's last
// write (its mtime is not later); otherwise it is kept in the cache's
// lost/ directory with a note, and logged at error level: the bytes are
// the application's, so they are never dropped silently.
func (f *FS) recoverJournals(ctx context.Context) (committed, lost int) {
	ds, errs := f.cache.Leftovers()
	for _, err := range errs {
		f.log.Error("client cache: a journal could not be read", slog.Any("err", err))
		lost++
	}
	// Each file's attributes are read once, before any journal is
	// committed: committing one sets the mtime, which must not make the
	// file's other journals look overwritten by another client.
	type attrOf struct {
		a   *wire.Attr
		err error
	}
	attrs := map[uint64]attrOf{}
	for _, d := range ds {
		if _, ok := attrs[uint64(d.Ino)]; !ok {
			a, err := f.c.GetAttr(ctx, d.Ino, client.Linearizable())
			attrs[uint64(d.Ino)] = attrOf{a, err}
		}
	}
	for _, d := range ds {
		if len(d.Data) == 0 {
			_ = f.cache.Committed(d)
			continue
		}
		at := attrs[uint64(d.Ino)]
		why, err := f.commitJournal(ctx, d, at.a, at.err)
		if err == nil && why == "" {
			if err := f.cache.Committed(d); err != nil {
				f.log.Warn("client cache: remove a committed journal", slog.String("journal", d.Name()), slog.Any("err", err))
			}
			f.log.Info("client cache: committed writes left by a previous mount", slog.Uint64("ino", uint64(d.Ino)),
				slog.Int64("off", d.Off), slog.Int("bytes", len(d.Data)))
			committed++
			continue
		}
		if err != nil {
			why = fmt.Sprintf("commit failed: %v", err)
		}
		p, lerr := f.cache.Lost(d, why)
		f.log.Error("client cache: writes left by a previous mount were NOT committed; they are kept on local disk",
			slog.Uint64("ino", uint64(d.Ino)), slog.Int64("off", d.Off), slog.Int("bytes", len(d.Data)),
			slog.String("why", why), slog.String("kept_in", p), slog.Any("keep_err", lerr))
		lost++
	}
	return committed, lost
}

// commitJournal writes a leftover journal's bytes, unless the file is
// gone or changed since (then it says why).
func (f *FS) commitJournal(ctx context.Context, d *diskcache.Dirty, a *wire.Attr, err error) (why string, _ error) {
	switch {
	case errors.Is(err, syscall.ENOENT):
		return "the file no longer exists", nil
	case err != nil:
		return "", err
	case a.GetType() != wire.FileType_REGULAR:
		return fmt.Sprintf("inode %d is now a %v", d.Ino, a.GetType()), nil
	case time.Unix(0, a.GetMtimeNs()).After(d.LastWrite):
		return fmt.Sprintf("the file was modified at %s, after this mount's last write into it at %s (another client's change is not overwritten)",
			time.Unix(0, a.GetMtimeNs()).UTC().Format(time.RFC3339Nano), d.LastWrite.UTC().Format(time.RFC3339Nano)), nil
	}
	file, _, err := f.c.OpenIno(ctx, d.Ino, syscall.O_RDWR)
	if err != nil {
		return "", err
	}
	defer file.Close()
	if _, err := file.WriteAt(ctx, d.Data, d.Off); err != nil {
		return "", err
	}
	return "", file.Sync(ctx)
}
