package chunkstore

import (
	"container/list"
	"errors"
	"fmt"
	"os"
	"sync"
)

// DefaultOpenFiles is how many data files a Store keeps open when
// Config.OpenFiles is zero.
const DefaultOpenFiles = 1024

// fileCache keeps recently used data files open, so a read costs one
// pread instead of open, pread and close. It is bounded (least recently
// used files are closed first) and safe for concurrent use.
//
// INVARIANT: a cached file is the chunk's current data file. Everything
// that removes or replaces a data file (Delete, recovery) holds the
// chunk's exclusive lock and calls invalidate, and every user holds the
// chunk's lock (shared or exclusive) from get to put, so no one can use
// a file of a deleted chunk, nor find it in the cache after a re-create.
type fileCache struct {
	max int
	mu  struct {
		sync.Mutex
		files map[Handle]*openFile
		lru   list.List // of *openFile, most recently used first
	}
}

// openFile is a cached data file. refs counts the users between get and
// put; a file dropped from the cache while in use is closed by its last
// put.
type openFile struct {
	f       *os.File
	h       Handle
	refs    int
	dropped bool
	elem    *list.Element
}

func newFileCache(max int) *fileCache {
	c := &fileCache{max: max}
	c.mu.files = map[Handle]*openFile{}
	return c
}

// get returns chunk h's data file (opened read-write), to be released
// with put, and whether this call created the file. Without create, a
// missing data file is nil, not an error. Creating requires the chunk's
// exclusive lock (no one else can be opening the file then).
func (c *fileCache) get(path string, h Handle, create bool) (*openFile, bool, error) {
	c.mu.Lock()
	if of := c.mu.files[h]; of != nil {
		of.refs++
		c.mu.lru.MoveToFront(of.elem)
		c.mu.Unlock()
		return of, false, nil
	}
	c.mu.Unlock()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	created := false
	if errors.Is(err, os.ErrNotExist) {
		if !create {
			return nil, false, nil
		}
		f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
		created = true
	}
	if err != nil {
		return nil, false, fmt.Errorf("open data: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if of := c.mu.files[h]; of != nil {
		// Another reader of the chunk opened it meanwhile.
		f.Close()
		of.refs++
		c.mu.lru.MoveToFront(of.elem)
		return of, false, nil
	}
	of := &openFile{f: f, h: h, refs: 1}
	of.elem = c.mu.lru.PushFront(of)
	c.mu.files[h] = of
	c.evictLocked()
	return of, created, nil
}

// put releases a file returned by get; nil is allowed.
func (c *fileCache) put(of *openFile) {
	if of == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	of.refs--
	if of.refs == 0 && of.dropped {
		of.f.Close()
	}
}

// evictLocked closes unused files, oldest first, while over the bound.
// Files in use stay: the cache may exceed its bound by the number of
// operations in flight.
func (c *fileCache) evictLocked() {
	for e := c.mu.lru.Back(); e != nil && len(c.mu.files) > c.max; {
		prev := e.Prev()
		if of := e.Value.(*openFile); of.refs == 0 {
			c.dropLocked(of)
		}
		e = prev
	}
}

func (c *fileCache) dropLocked(of *openFile) {
	c.mu.lru.Remove(of.elem)
	delete(c.mu.files, of.h)
	of.dropped = true
	if of.refs == 0 {
		of.f.Close()
	}
}

// invalidate forgets chunk h's file; the caller holds the chunk's
// exclusive lock and is about to remove, or has removed, the file.
func (c *fileCache) invalidate(h Handle) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if of := c.mu.files[h]; of != nil {
		c.dropLocked(of)
	}
}

// closeAll closes every cached file; no operation may be in flight.
func (c *fileCache) closeAll() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var err error
	for _, of := range c.mu.files {
		err = errors.Join(err, of.f.Close())
	}
	c.mu.files = map[Handle]*openFile{}
	c.mu.lru.Init()
	return err
}

// len is the number of cached files.
func (c *fileCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.mu.files)
}
