package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"math/rand"
	"testing"
	"time"
)

// TestFileRoundTripAcrossChunks writes files through the client to 3
// chunk servers (1 MiB chunks, so a file spans several), reads them back
// byte for byte, and keeps reading while one chunk server is killed -9.
func TestFileRoundTripAcrossChunks(t *testing.T) {
	c := startDataCluster(t, 3, "--chunk-size", "1048576")
	ctx := context.Background()
	cl := newClient(t, c, c.Addrs(), 30*time.Second)
	// The president forms a replica group once all three report in.
	deadline := time.Now().Add(20 * time.Second)
	data := make([]byte, 5<<20+12345)
	rand.New(rand.NewSource(3)).Read(data)
	for {
		_, err := cl.WriteFile(ctx, "/data.bin", bytes.NewReader(data), 0o644)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("write: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	check := func(path string, want []byte) {
		t.Helper()
		var got bytes.Buffer
		n, err := cl.ReadFile(ctx, path, &got)
		if err != nil {
			t.Fatalf("read %s: %v", path, err)
		}
		if n != int64(len(want)) || sha256.Sum256(got.Bytes()) != sha256.Sum256(want) {
			t.Fatalf("read %s: %d bytes, sha256 differs from what was written (%d bytes)", path, n, len(want))
		}
	}
	check("/data.bin", data)
	if a, err := cl.Stat(ctx, "/data.bin"); err != nil || a.GetSize() != uint64(len(data)) {
		t.Fatalf("stat: %v %v", a, err)
	}
	// Overwriting with a shorter file truncates first: no old bytes remain.
	small := []byte("a much shorter file\n")
	if _, err := cl.WriteFile(ctx, "/data.bin", bytes.NewReader(small), 0o644); err != nil {
		t.Fatal(err)
	}
	check("/data.bin", small)
	if _, err := cl.WriteFile(ctx, "/big.bin", bytes.NewReader(data), 0o644); err != nil {
		t.Fatal(err)
	}
	// kill -9 one chunk server: every acknowledged byte is still readable
	// from the other replicas.
	c.Kill(c.Procs() - 1)
	check("/big.bin", data)
	check("/data.bin", small)
}
