package chunkstore

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
)

// BenchmarkWrite1MiB appends 1 MiB records with fsync on, moving to a new
// 64 MiB chunk when one is full (the sequential-write path).
func BenchmarkWrite1MiB(b *testing.B) {
	cfg := Config{Dir: b.TempDir(), ClusterID: "bench", ChunkSize: DefaultChunkSize}
	s, err := Open(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	p := make([]byte, 1<<20)
	for i := range p {
		p[i] = byte(i * 31)
	}
	b.SetBytes(int64(len(p)))
	defer reportSyncs(b, s)()
	h, v := Handle(1), uint64(0)
	for b.Loop() {
		v++
		if _, err := s.Append(h, p, v); err == nil {
			continue
		}
		h, v = h+1, 1
		if _, err := s.Append(h, p, v); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAppend4KiB appends 4 KiB records with fsync on: the cost is
// almost all syncs.
func BenchmarkAppend4KiB(b *testing.B) {
	cfg := Config{Dir: b.TempDir(), ClusterID: "bench", ChunkSize: DefaultChunkSize}
	s, err := Open(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	p := make([]byte, 4096)
	b.SetBytes(int64(len(p)))
	defer reportSyncs(b, s)()
	h, v := Handle(1), uint64(0)
	for b.Loop() {
		v++
		if _, err := s.Append(h, p, v); err == nil {
			continue
		}
		h, v = h+1, 1
		if _, err := s.Append(h, p, v); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWrite1MiB3Replicas appends 1 MiB to three stores on the same
// disk at once, as the three members of a replica group on one machine
// do; MB/s counts each record once.
func BenchmarkWrite1MiB3Replicas(b *testing.B) {
	var stores [3]*Store
	for i := range stores {
		s, err := Open(Config{Dir: b.TempDir(), ClusterID: "bench", ChunkSize: DefaultChunkSize})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		stores[i] = s
	}
	p := make([]byte, 1<<20)
	for i := range p {
		p[i] = byte(i * 31)
	}
	b.SetBytes(int64(len(p)))
	defer reportSyncs(b, stores[0])()
	h, v := Handle(1), uint64(0)
	var errs [3]error
	for b.Loop() {
		v++
		if int64(v)*int64(len(p)) > DefaultChunkSize {
			h, v = h+1, 1
		}
		var wg sync.WaitGroup
		for i, s := range stores {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = s.Write(h, int64(v-1)*int64(len(p)), p, v)
			}()
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkOverwrite1MiB overwrites 1 MiB at random block-aligned offsets
// of a full chunk (the journaled path: every byte is written twice).
func BenchmarkOverwrite1MiB(b *testing.B) {
	cfg := Config{Dir: b.TempDir(), ClusterID: "bench", ChunkSize: DefaultChunkSize}
	s, err := Open(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if err := s.Write(1, 0, make([]byte, DefaultChunkSize), 1); err != nil {
		b.Fatal(err)
	}
	p := make([]byte, 1<<20)
	r := rand.New(rand.NewPCG(1, 1))
	b.SetBytes(int64(len(p)))
	defer reportSyncs(b, s)()
	v := uint64(1)
	for b.Loop() {
		v++
		off := r.Int64N(DefaultChunkSize/BlockSize-16) * BlockSize
		if err := s.Write(1, off, p, v); err != nil {
			b.Fatal(err)
		}
	}
}

// readStore returns a store holding chunks 1..n, each a full 64 MiB of
// random bytes (in the page cache once written).
func readStore(b *testing.B, n int) *Store {
	cfg := Config{Dir: b.TempDir(), ClusterID: "bench", ChunkSize: DefaultChunkSize, NoSync: true}
	s, err := Open(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	data := make([]byte, DefaultChunkSize)
	r := rand.New(rand.NewPCG(2, 2))
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	for h := range n {
		if err := s.Write(Handle(h+1), 0, data, 1); err != nil {
			b.Fatal(err)
		}
	}
	return s
}

// BenchmarkRead4KiB reads 4 KiB at random offsets of a cached 64 MiB
// chunk; each read verifies the CRC of the 64 KiB block it touches.
func BenchmarkRead4KiB(b *testing.B) {
	s := readStore(b, 1)
	r := rand.New(rand.NewPCG(3, 3))
	b.SetBytes(4096)
	for b.Loop() {
		off := r.Int64N(DefaultChunkSize/4096) * 4096
		if _, err := s.Read(1, off, 4096); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRead4KiBParallel is BenchmarkRead4KiB from GOMAXPROCS
// goroutines over 4 chunks, as a chunk server serving many clients.
func BenchmarkRead4KiBParallel(b *testing.B) {
	s := readStore(b, 4)
	b.SetBytes(4096)
	var seed atomic.Uint64
	b.RunParallel(func(pb *testing.PB) {
		r := rand.New(rand.NewPCG(seed.Add(1), 4))
		for pb.Next() {
			off := r.Int64N(DefaultChunkSize/4096) * 4096
			if _, err := s.Read(Handle(r.IntN(4)+1), off, 4096); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkRead1MiB reads 1 MiB at random block-aligned offsets (the
// client's request size).
func BenchmarkRead1MiB(b *testing.B) {
	s := readStore(b, 1)
	r := rand.New(rand.NewPCG(5, 5))
	b.SetBytes(1 << 20)
	for b.Loop() {
		off := r.Int64N(DefaultChunkSize/BlockSize-16) * BlockSize
		if _, err := s.Read(1, off, 1<<20); err != nil {
			b.Fatal(err)
		}
	}
}
