package namespace

import (
	"encoding/binary"
	"fmt"
	"slices"
	"syscall"

	"google.golang.org/protobuf/proto"

	"github.com/govfs/govfs/internal/engine"
	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/wire"
)

// tx collects the effects of one operation. Reads go to the store (inodes
// through a cache, so an operation sees its own inode changes); writes are
// buffered and reach the store only in flush, after every check passed.
//
// NB: dirent and xattr reads do not see buffered writes, so an operation
// must read them before it decides what to write. All operations here do.
type tx struct {
	r   engine.Reader
	now int64
	// caller is the command's caller (nil: permissions not checked).
	caller  *wire.Cred
	inodes  map[ids.Ino]*wire.Inode
	dirty   map[ids.Ino]bool
	deleted map[ids.Ino]bool
	writes  []write
}

type write struct {
	del bool
	key []byte
	val []byte
}

func newTx(r engine.Reader, now int64) *tx {
	return &tx{
		r:       r,
		now:     now,
		inodes:  map[ids.Ino]*wire.Inode{},
		dirty:   map[ids.Ino]bool{},
		deleted: map[ids.Ino]bool{},
	}
}

// inode returns the inode, or an ENOENT posixError when it does not exist.
func (t *tx) inode(ino ids.Ino) (*wire.Inode, error) {
	if t.deleted[ino] {
		return nil, errnof(syscall.ENOENT, "inode %v", ino)
	}
	if in, ok := t.inodes[ino]; ok {
		return in, nil
	}
	in, err := loadInode(t.r, ino)
	if err != nil {
		return nil, err
	}
	t.inodes[ino] = in
	return in, nil
}

// dir returns the inode of a directory (ENOENT, ENOTDIR otherwise).
func (t *tx) dir(ino ids.Ino) (*wire.Inode, error) {
	in, err := t.inode(ino)
	if err != nil {
		return nil, err
	}
	if in.GetAttr().GetType() != wire.FileType_DIRECTORY {
		return nil, errnof(syscall.ENOTDIR, "inode %v is not a directory", ino)
	}
	return in, nil
}

// create registers a new inode to be written.
func (t *tx) create(in *wire.Inode) {
	ino := ids.Ino(in.Attr.Ino)
	t.inodes[ino] = in
	t.dirty[ino] = true
}

// touch records a change of the inode: version grows once per operation,
// ctime becomes the command's time.
func (t *tx) touch(in *wire.Inode) {
	ino := ids.Ino(in.Attr.Ino)
	if !t.dirty[ino] {
		in.Attr.Version++
		t.dirty[ino] = true
	}
	in.Attr.CtimeNs = t.now
}

// touchDir records a change of a directory's entries (mtime and ctime).
func (t *tx) touchDir(in *wire.Inode) {
	t.touch(in)
	in.Attr.MtimeNs = t.now
}

// dropLink removes one link of a non-directory and deletes it at zero.
func (t *tx) dropLink(in *wire.Inode) error {
	if in.Attr.Nlink > 0 {
		in.Attr.Nlink--
	}
	t.touch(in)
	if in.Attr.Nlink == 0 {
		return t.remove(in)
	}
	return nil
}

// remove deletes an inode with its xattrs and parent pointer.
func (t *tx) remove(in *wire.Inode) error {
	ino := ids.Ino(in.Attr.Ino)
	in.Attr.Nlink = 0
	t.deleted[ino] = true
	t.del(inodeKey(ino))
	t.del(parentKey(ino))
	if in.Attr.Type == wire.FileType_DIRECTORY {
		t.del(dirLeaseKey(ino))
	}
	// NB: point deletes rather than DeleteRange: most files have no xattrs,
	// and a range tombstone per unlink would slow every later read.
	p := xattrPrefix(ino)
	var keys [][]byte
	err := t.r.Scan(p, prefixEnd(p), func(k, _ []byte) bool {
		keys = append(keys, slices.Clone(k))
		return true
	})
	if err != nil {
		return fmt.Errorf("namespace: remove inode %v: %w", ino, err)
	}
	for _, k := range keys {
		t.del(k)
	}
	if in.Attr.Type != wire.FileType_REGULAR {
		return nil // only regular files have inline bytes or chunk records
	}
	// Deleted blind: reading the bytes (up to 64 KiB, often from a block
	// written long before) only to learn whether there were any was 19 %
	// of the replicas' CPU under 16 processes unlinking 4 KiB files.
	t.del(inlineKey(ino))
	return dropChunks(t, ino, 0)
}

func (t *tx) set(key, val []byte) { t.writes = append(t.writes, write{key: key, val: val}) }
func (t *tx) del(key []byte)      { t.writes = append(t.writes, write{del: true, key: key}) }

func (t *tx) setDirent(parent ids.Ino, name []byte, d *wire.Dirent) error {
	v, err := marshal(d)
	if err != nil {
		return err
	}
	t.set(direntKey(parent, name), v)
	return nil
}

func (t *tx) setParent(dir, parent ids.Ino) {
	t.set(parentKey(dir), binary.BigEndian.AppendUint64(nil, uint64(parent)))
}

// flush writes the buffered effects: first the explicit writes in order,
// then every changed inode that still exists, in ino order.
func (t *tx) flush(rw engine.ReadWriter) error {
	for _, w := range t.writes {
		var err error
		if w.del {
			err = rw.Delete(w.key)
		} else {
			err = rw.Set(w.key, w.val)
		}
		if err != nil {
			return fmt.Errorf("namespace: write: %w", err)
		}
	}
	inos := make([]ids.Ino, 0, len(t.dirty))
	for ino := range t.dirty {
		if !t.deleted[ino] {
			inos = append(inos, ino)
		}
	}
	slices.Sort(inos)
	for _, ino := range inos {
		v, err := marshal(t.inodes[ino])
		if err != nil {
			return err
		}
		if err := rw.Set(inodeKey(ino), v); err != nil {
			return fmt.Errorf("namespace: write inode %v: %w", ino, err)
		}
	}
	return nil
}

func marshal(m proto.Message) ([]byte, error) {
	v, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("namespace: marshal %T: %w", m, err)
	}
	return v, nil
}

// loadInode reads an inode; ENOENT posixError when absent.
func loadInode(r engine.Reader, ino ids.Ino) (*wire.Inode, error) {
	v, err := r.Get(inodeKey(ino))
	if err != nil {
		return nil, fmt.Errorf("namespace: get inode %v: %w", ino, err)
	}
	if v == nil {
		return nil, errnof(syscall.ENOENT, "inode %v", ino)
	}
	in := &wire.Inode{}
	if err := proto.Unmarshal(v, in); err != nil {
		return nil, fmt.Errorf("namespace: corrupt inode %v: %w", ino, err)
	}
	if in.Attr == nil {
		return nil, fmt.Errorf("namespace: corrupt inode %v: no attr", ino)
	}
	return in, nil
}

// loadDirent reads a directory entry; (nil, nil) when absent.
func loadDirent(r engine.Reader, parent ids.Ino, name []byte) (*wire.Dirent, error) {
	v, err := r.Get(direntKey(parent, name))
	if err != nil {
		return nil, fmt.Errorf("namespace: get dirent %v/%q: %w", parent, name, err)
	}
	if v == nil {
		return nil, nil
	}
	d := &wire.Dirent{}
	if err := proto.Unmarshal(v, d); err != nil {
		return nil, fmt.Errorf("namespace: corrupt dirent %v/%q: %w", parent, name, err)
	}
	return d, nil
}

// isEmptyDir reports whether directory ino has no entries.
func isEmptyDir(r engine.Reader, ino ids.Ino) (bool, error) {
	empty := true
	p := direntPrefix(ino)
	err := r.Scan(p, prefixEnd(p), func(_, _ []byte) bool {
		empty = false
		return false
	})
	if err != nil {
		return false, fmt.Errorf("namespace: list directory %v: %w", ino, err)
	}
	return empty, nil
}
