package chunkstore

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
)

// TestFileCacheDeleteRecreate: a cached data file is never served after
// its chunk is deleted and re-created, with or without a reopen.
func TestFileCacheDeleteRecreate(t *testing.T) {
	s := openT(t, testConfig(t.TempDir()))
	if err := s.Write(1, 0, []byte("old bytes"), 5); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Read(1, 0, 9); err != nil || string(got) != "old bytes" {
		t.Fatalf("Read = %q, %v", got, err)
	}
	if s.files.len() != 1 {
		t.Fatalf("%d files cached after a read, want 1", s.files.len())
	}
	if err := s.Delete(1); err != nil {
		t.Fatal(err)
	}
	if s.files.len() != 0 {
		t.Fatalf("%d files cached after Delete, want 0", s.files.len())
	}
	if err := s.Write(1, 4, []byte("new"), 1); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Read(1, 0, 9); err != nil || !bytes.Equal(got, []byte("\x00\x00\x00\x00new")) {
		t.Fatalf("Read of the re-created chunk = %q, %v", got, err)
	}
	// A padded chunk without a data file reads as zeros, then gets one.
	if err := s.Pad(2, 1); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Read(2, 5, 3); err != nil || !bytes.Equal(got, make([]byte, 3)) {
		t.Fatalf("Read of a padded chunk = %q, %v", got, err)
	}
	if err := s.Write(2, 5, []byte("abc"), 2); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Read(2, 5, 3); err != nil || string(got) != "abc" {
		t.Fatalf("Read after writing the padded chunk = %q, %v", got, err)
	}
}

// TestFileCacheBound keeps at most OpenFiles files open.
func TestFileCacheBound(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.OpenFiles = 3
	s := openT(t, cfg)
	m := newModel()
	for h := Handle(1); h <= 10; h++ {
		p := pattern(byte(h), 1000+int(h))
		if err := s.Write(h, 0, p, 1); err != nil {
			t.Fatal(err)
		}
		m.write(h, 0, p, 1)
		if n := s.files.len(); n > 3 {
			t.Fatalf("%d files open, bound is 3", n)
		}
	}
	m.check(t, s)
	if n := s.files.len(); n > 3 {
		t.Fatalf("%d files open after reads, bound is 3", n)
	}
}

// TestFileCacheConcurrent deletes, re-creates, writes and reads chunks
// from many goroutines through a cache of two files (run with -race):
// every read must return what its chunk holds, never bytes of a deleted
// incarnation or of another chunk.
func TestFileCacheConcurrent(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.OpenFiles = 2
	s := openT(t, cfg)
	var wg sync.WaitGroup
	errs := make([]error, 6)
	for g := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 7))
			if g >= 4 { // readers of everyone's chunks
				for range 400 {
					h := Handle(r.IntN(4) + 1)
					got, err := s.Read(h, 0, 2*BlockSize)
					if errors.Is(err, ErrNotFound) {
						continue
					}
					if err != nil {
						errs[g] = err
						return
					}
					// Every incarnation is one repeated byte whose value
					// names the handle in its low 2 bits.
					for i := range got {
						if got[i] != got[0] || int(got[0]&3) != int(h-1) {
							errs[g] = fmt.Errorf("chunk %v reads mixed bytes %d/%d at %d", h, got[0], got[i], i)
							return
						}
					}
				}
				return
			}
			h := Handle(g + 1)
			v := uint64(0)
			for i := range 100 {
				v++
				b := byte(i*4 + g)
				p := bytes.Repeat([]byte{b}, BlockSize+r.IntN(BlockSize))
				if err := s.Write(h, 0, p, v); err != nil {
					errs[g] = err
					return
				}
				if got, err := s.Read(h, 0, len(p)); err != nil || !bytes.Equal(got, p) {
					errs[g] = fmt.Errorf("chunk %v round %d: read back %v", h, i, err)
					return
				}
				// Cut to one byte so the next write covers the whole length.
				if err := s.Truncate(h, 1, v+1); err != nil {
					errs[g] = err
					return
				}
				v++
				if r.IntN(3) == 0 {
					if err := s.Delete(h); err != nil {
						errs[g] = err
						return
					}
					v = 0
				}
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}
