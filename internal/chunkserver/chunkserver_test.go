package chunkserver

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/govfs/govfs/internal/dataproto"
	"github.com/govfs/govfs/internal/rpc"
	"github.com/govfs/govfs/internal/testcluster"
	"github.com/govfs/govfs/internal/wire"
)

func startServer(t *testing.T, meta []string, dir string) *Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := Start(ctx, Config{Listen: "127.0.0.1:0", DataDir: dir, MetaAddrs: meta, Rack: "r1", NoSync: true,
		ChunkSize: 1 << 20, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

type dataConn struct {
	t *testing.T
	c net.Conn
	r *dataproto.Reader
	n uint64
}

func dial(t *testing.T, addr string) *dataConn {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &dataConn{t: t, c: c, r: dataproto.NewReader(bufio.NewReader(c), 0)}
}

func (d *dataConn) call(f *dataproto.Frame) *dataproto.Frame {
	d.t.Helper()
	d.n++
	f.RequestID = d.n
	if err := dataproto.WriteFrame(d.c, f); err != nil {
		d.t.Fatal(err)
	}
	r, err := d.r.Next()
	if err != nil {
		d.t.Fatal(err)
	}
	if r.RequestID != f.RequestID {
		d.t.Fatalf("reply to request %d, want %d", r.RequestID, f.RequestID)
	}
	return r
}

func readReq(h uint64, off int64, n uint32) *dataproto.Frame {
	return &dataproto.Frame{Type: dataproto.TypeRead, Handle: h, Offset: off, Payload: binary.BigEndian.AppendUint32(nil, n)}
}

func TestRegisterHeartbeatAndServeChunks(t *testing.T) {
	c := testcluster.NewInProc(t, 3)
	dir := t.TempDir()
	s := startServer(t, c.Addrs(), dir)
	id := s.ID()
	if id == 0 {
		t.Fatal("no server id assigned")
	}
	// The president knows it and, within a heartbeat, that it is alive.
	cc, _ := rpc.Dial(c.Addrs()[0])
	defer cc.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		alive := false
		for _, a := range c.Addrs() {
			cc, _ := rpc.Dial(a)
			st, err := wire.NewMetaClient(cc).Status(context.Background(), &wire.StatusRequest{})
			cc.Close()
			if err != nil {
				continue
			}
			for _, cs := range st.GetChunkServers() {
				if cs.GetServer().GetId() == id && cs.GetKnown() && cs.GetAlive() && cs.GetServer().GetRack() == "r1" {
					alive = true
				}
			}
		}
		if alive {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("chunk server never reported alive by the president")
		}
		time.Sleep(50 * time.Millisecond)
	}

	d := dial(t, s.Addr())
	data := bytes.Repeat([]byte("govfs-"), 30000) // 180 KB, 3 blocks
	if r := d.call(&dataproto.Frame{Type: dataproto.TypeWrite, Handle: 7, Version: 1, Payload: data}); r.Status != dataproto.StatusOK {
		t.Fatalf("write: %v %s", r.Status, r.Payload)
	}
	r := d.call(readReq(7, 0, uint32(len(data)+100)))
	if r.Status != dataproto.StatusOK || !bytes.Equal(r.Payload, data) || r.Version != 1 {
		t.Fatalf("read back: status %v, %d bytes, version %d", r.Status, len(r.Payload), r.Version)
	}
	// A stale version changes nothing.
	if r := d.call(&dataproto.Frame{Type: dataproto.TypeWrite, Handle: 7, Version: 1, Payload: []byte("x")}); r.Status != dataproto.StatusStaleVersion {
		t.Fatalf("stale write: %v", r.Status)
	}
	// Appends land at distinct, consecutive offsets.
	a1 := d.call(&dataproto.Frame{Type: dataproto.TypeAppend, Handle: 7, Version: 2, Payload: []byte("rec1")})
	a2 := d.call(&dataproto.Frame{Type: dataproto.TypeAppend, Handle: 7, Version: 3, Payload: []byte("rec2")})
	if a1.Status != dataproto.StatusOK || a1.Offset != int64(len(data)) || a2.Offset != a1.Offset+4 {
		t.Fatalf("appends at %d (%v) and %d", a1.Offset, a1.Status, a2.Offset)
	}
	// Bad input: unknown chunk, epochs (no replica groups yet), bad read.
	if r := d.call(readReq(99, 0, 10)); r.Status != dataproto.StatusNotFound {
		t.Errorf("read of an unknown chunk: %v", r.Status)
	}
	if r := d.call(&dataproto.Frame{Type: dataproto.TypeWrite, Handle: 7, Version: 9, Epoch: 3, Payload: []byte("x")}); r.Status != dataproto.StatusStaleEpoch {
		t.Errorf("write with an epoch: %v", r.Status)
	}
	if r := d.call(&dataproto.Frame{Type: dataproto.TypeRead, Handle: 7}); r.Status != dataproto.StatusInvalid {
		t.Errorf("read without a length: %v", r.Status)
	}
	// A flipped byte on disk is detected on read.
	files, _ := filepath.Glob(filepath.Join(dir, "*", "*"))
	flipped := false
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err == nil && len(b) >= len(data) && bytes.Equal(b[:100], data[:100]) {
			b[70000] ^= 0xff
			if err := os.WriteFile(f, b, 0o644); err != nil {
				t.Fatal(err)
			}
			flipped = true
		}
	}
	if !flipped {
		t.Fatalf("chunk data file not found among %v", files)
	}
	if r := d.call(readReq(7, 65536, 100)); r.Status != dataproto.StatusCorrupt {
		t.Errorf("read of a corrupted block: %v", r.Status)
	}
	if r := d.call(readReq(7, 0, 100)); r.Status != dataproto.StatusOK {
		t.Errorf("read of an intact block: %v", r.Status)
	}
	// Garbage on the data port ends that connection only.
	g, _ := net.Dial("tcp", s.Addr())
	g.Write(bytes.Repeat([]byte{0xde, 0xad}, 100))
	g.Close()
	if r := dial(t, s.Addr()).call(readReq(7, 0, 10)); r.Status != dataproto.StatusOK {
		t.Errorf("after garbage: %v", r.Status)
	}

	// Restarted on the same store, it keeps its id.
	s.Stop()
	s2 := startServer(t, c.Addrs(), dir)
	defer s2.Stop()
	if s2.ID() != id {
		t.Fatalf("restart got id %d, want %d", s2.ID(), id)
	}
}
