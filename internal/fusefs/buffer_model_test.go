package fusefs_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/govfs/govfs/client"
	"github.com/govfs/govfs/internal/fusefs"
	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/testcluster"
)

// TestWriteBufferModel checks the mount's write buffer (handle.go) and
// every size change against an in-memory file: random sequences of
// writes through two descriptors, reads, truncates (through a
// descriptor and by path), fallocate (grow, punch, zero range), fsync,
// flush and reopening, sent as FUSE requests to the mount's file system
// in-process (no kernel, so no page cache hides what the mount
// answers). A small write buffer makes background pushes frequent.
// After every step the size the mount reports must be the model's, and
// every read must return the model's bytes; at the end, a fresh client
// reads the file from the cluster. Runs with and without --cache-dir.
func TestWriteBufferModel(t *testing.T) {
	c := startCluster(t)
	cl, err := client.New(t.Context(), clientConfig(c))
	must(t, err)
	defer cl.Close()
	for _, cache := range []bool{false, true} {
		cfg := fusefs.DefaultConfig()
		cfg.Client = cl
		cfg.Logger = slog.New(slog.DiscardHandler)
		cfg.WriteBuffer = 64 << 10
		cfg.AsyncDirs = false
		if cache {
			cfg.CacheDir = t.TempDir()
		}
		raw, stop, err := fusefs.NewRawForTest(t.Context(), cfg)
		must(t, err)
		for seed := uint64(1); seed <= 6; seed++ {
			t.Run(fmt.Sprintf("cache=%v/seed%d", cache, seed), func(t *testing.T) {
				m := &bufModel{t: t, raw: raw, r: rand.New(rand.NewPCG(seed, 10))}
				m.run(fmt.Sprintf("model-%v-%d", cache, seed), 250)
				// What the cluster holds, read by another client.
				f, err := cl.Open(t.Context(), "/"+m.name, syscall.O_RDONLY, 0)
				must(t, err)
				got := make([]byte, len(m.data)+100)
				n, _ := f.ReadAt(t.Context(), got, 0)
				_ = f.Close()
				if !bytes.Equal(got[:n], m.data) {
					t.Fatalf("the cluster holds %#x bytes, want %#x; first difference at %#x\n%s", n, len(m.data), firstDiff(got[:n], m.data), m.history())
				}
			})
		}
		stop()
	}
}

func clientConfig(c *testcluster.ProcCluster) client.Config {
	cfg := client.DefaultConfig()
	cfg.MetaAddrs, cfg.TLSDir = c.Addrs(), c.ClientTLSDir()
	cfg.OpTimeout = 30 * time.Second
	return cfg
}

// bufModel is one file driven through the raw file system, next to the
// bytes it must hold.
type bufModel struct {
	t    *testing.T
	raw  fuse.RawFileSystem
	r    *rand.Rand
	name string
	node uint64
	fh   [2]uint64 // 0: closed
	data []byte
	ops  []string
}

const modelMaxSize = 6 << 20 // past the test cluster's 4 MiB chunks

func (m *bufModel) hdr() fuse.InHeader {
	return fuse.InHeader{NodeId: m.node}
}

func (m *bufModel) history() string {
	var b bytes.Buffer
	for i, op := range m.ops[max(0, len(m.ops)-40):] {
		fmt.Fprintf(&b, "  %d %s\n", max(0, len(m.ops)-40)+i, op)
	}
	return b.String()
}

func (m *bufModel) fail(format string, args ...any) {
	m.t.Helper()
	m.t.Fatalf("after %d operations: %s\nlast operations:\n%s", len(m.ops), fmt.Sprintf(format, args...), m.history())
}

func (m *bufModel) ok(what string, st fuse.Status) {
	m.t.Helper()
	if !st.Ok() {
		m.fail("%s: %v", what, st)
	}
}

func (m *bufModel) run(name string, steps int) {
	m.name = name
	var out fuse.CreateOut
	in := &fuse.CreateIn{InHeader: fuse.InHeader{NodeId: uint64(ids.RootIno)}, Flags: syscall.O_RDWR | syscall.O_CREAT | syscall.O_EXCL, Mode: 0o644}
	m.ok("create", m.raw.Create(nil, in, name, &out))
	m.node, m.fh[0] = out.NodeId, out.Fh
	m.open(1)
	for range steps {
		m.step()
		m.checkSize()
	}
	for i := range m.fh {
		m.close(i)
	}
	m.open(0)
	m.checkSize()
	m.read(0, 0, len(m.data)+10)
	m.close(0)
	m.raw.Forget(m.node, 1)
}

func (m *bufModel) open(i int) {
	var out fuse.OpenOut
	m.ok("open", m.raw.Open(nil, &fuse.OpenIn{InHeader: m.hdr(), Flags: syscall.O_RDWR}, &out))
	m.fh[i] = out.Fh
}

func (m *bufModel) close(i int) {
	if m.fh[i] == 0 {
		return
	}
	m.ok("flush", m.raw.Flush(nil, &fuse.FlushIn{InHeader: m.hdr(), Fh: m.fh[i]}))
	m.raw.Release(nil, &fuse.ReleaseIn{InHeader: m.hdr(), Fh: m.fh[i]})
	m.fh[i] = 0
}

// handle returns an open descriptor, opening one if both are closed.
func (m *bufModel) handle() int {
	i := m.r.IntN(2)
	if m.fh[i] == 0 {
		m.open(i)
	}
	return i
}

// offset picks an offset near the interesting places: inside the file,
// at its end, or past it.
func (m *bufModel) offset() int {
	switch m.r.IntN(4) {
	case 0:
		return m.r.IntN(modelMaxSize)
	case 1:
		return len(m.data)
	default:
		return m.r.IntN(len(m.data) + 1)
	}
}

func (m *bufModel) length() int {
	if m.r.IntN(3) == 0 {
		return 1 + m.r.IntN(256<<10) // spans buffers and background pushes
	}
	return 1 + m.r.IntN(8<<10)
}

// setSize resizes the model: growth is zeros.
func (m *bufModel) setSize(n int) {
	if n <= len(m.data) {
		m.data = m.data[:n]
		return
	}
	m.data = append(m.data, make([]byte, n-len(m.data))...)
}

func (m *bufModel) step() {
	switch k := m.r.IntN(100); {
	case k < 40:
		h, off := m.handle(), m.offset()
		n := min(m.length(), modelMaxSize-off)
		if n <= 0 {
			return
		}
		p := make([]byte, n)
		for i := range p {
			p[i] = byte(1 + m.r.IntN(255))
		}
		m.ops = append(m.ops, fmt.Sprintf("write fh%d %#x+%#x", h, off, n))
		w, st := m.raw.Write(nil, &fuse.WriteIn{InHeader: m.hdr(), Fh: m.fh[h], Offset: uint64(off), Size: uint32(n)}, p)
		m.ok("write", st)
		if int(w) != n {
			m.fail("write wrote %d of %d", w, n)
		}
		if off+n > len(m.data) {
			m.setSize(off + n)
		}
		copy(m.data[off:], p)
	case k < 60:
		h := m.handle()
		off := m.offset()
		m.ops = append(m.ops, fmt.Sprintf("read fh%d %#x", h, off))
		m.read(h, off, m.length())
	case k < 70:
		size := m.offset()
		var h = -1
		in := &fuse.SetAttrIn{SetAttrInCommon: fuse.SetAttrInCommon{InHeader: m.hdr(), Valid: fuse.FATTR_SIZE, Size: uint64(size)}}
		if m.r.IntN(3) > 0 {
			h = m.handle()
			in.Valid |= fuse.FATTR_FH
			in.Fh = m.fh[h]
		}
		m.ops = append(m.ops, fmt.Sprintf("truncate fh%d %#x", h, size))
		var out fuse.AttrOut
		m.ok("truncate", m.raw.SetAttr(nil, in, &out))
		m.setSize(size)
		if out.Size != uint64(size) {
			m.fail("truncate to %#x answered size %#x", size, out.Size)
		}
	case k < 78:
		h, off, n := m.handle(), m.offset(), m.length()
		if off+n > modelMaxSize {
			return
		}
		modes := []uint32{0, 0x01 | 0x02, 0x10, 0x10 | 0x01} // grow, punch, zero range (keep size or not)
		mode := modes[m.r.IntN(len(modes))]
		m.ops = append(m.ops, fmt.Sprintf("fallocate fh%d mode %#x %#x+%#x", h, mode, off, n))
		m.ok("fallocate", m.raw.Fallocate(nil, &fuse.FallocateIn{InHeader: m.hdr(), Fh: m.fh[h], Offset: uint64(off), Length: uint64(n), Mode: mode}))
		if mode&(0x02|0x10) != 0 {
			clear(m.data[min(off, len(m.data)):min(off+n, len(m.data))])
		}
		if mode&0x01 == 0 && off+n > len(m.data) {
			m.setSize(off + n)
		}
	case k < 85:
		h := m.handle()
		m.ops = append(m.ops, fmt.Sprintf("fsync fh%d", h))
		m.ok("fsync", m.raw.Fsync(nil, &fuse.FsyncIn{InHeader: m.hdr(), Fh: m.fh[h]}))
	case k < 92:
		h := m.handle()
		m.ops = append(m.ops, fmt.Sprintf("flush fh%d", h))
		m.ok("flush", m.raw.Flush(nil, &fuse.FlushIn{InHeader: m.hdr(), Fh: m.fh[h]}))
	default:
		h := m.r.IntN(2)
		m.ops = append(m.ops, fmt.Sprintf("close fh%d", h))
		m.close(h)
	}
}

func (m *bufModel) read(h, off, n int) {
	m.t.Helper()
	if m.fh[h] == 0 {
		m.open(h)
	}
	buf := make([]byte, n)
	res, st := m.raw.Read(nil, &fuse.ReadIn{InHeader: m.hdr(), Fh: m.fh[h], Offset: uint64(off), Size: uint32(n)}, buf)
	m.ok("read", st)
	got, st := res.Bytes(buf)
	m.ok("read result", st)
	var want []byte
	if off < len(m.data) {
		want = m.data[off:min(off+n, len(m.data))]
	}
	if !bytes.Equal(got, want) {
		m.fail("read fh%d %#x+%#x: got %#x bytes, want %#x; first difference at %#x", h, off, n, len(got), len(want), off+firstDiff(got, want))
	}
}

func (m *bufModel) checkSize() {
	m.t.Helper()
	var out fuse.AttrOut
	m.ok("getattr", m.raw.GetAttr(nil, &fuse.GetAttrIn{InHeader: m.hdr()}, &out))
	if out.Size != uint64(len(m.data)) {
		m.fail("getattr size %#x, want %#x", out.Size, len(m.data))
	}
}
