package fusefs_test

import (
	"bytes"
	le "encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/govfs/govfs/internal/fusefs"
	"github.com/govfs/govfs/internal/testcluster"
)

// mountProcess is a `govfs mount` process the test may SIGKILL.
type mountProcess struct {
	dir    string
	pid    int
	exited chan struct{}
	log    string
}

// startMount runs `govfs mount` on dir (an existing directory) and waits
// for the mount. At cleanup a live mount is unmounted (lazily) and the
// process stopped by PID.
func startMount(t *testing.T, c *testcluster.ProcCluster, dir string, extra ...string) *mountProcess {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), "mount.log")
	logf, err := os.Create(logPath)
	must(t, err)
	args := append([]string{"mount", "--meta", strings.Join(c.Addrs(), ","), "--tls", c.ClientTLSDir()}, extra...)
	cmd := exec.Command(binary, append(args, dir)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Killed with the test binary if it dies without its cleanup (a
	// timeout panic), like the cluster's processes.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	m := &mountProcess{dir: dir, pid: cmd.Process.Pid, exited: make(chan struct{}), log: logPath}
	go func() { _ = cmd.Wait(); logf.Close(); close(m.exited) }()
	t.Cleanup(func() {
		select {
		case <-m.exited:
		default:
			if mounted(dir) {
				if err := fusefs.Unmount(dir, false); err != nil {
					_ = fusefs.Unmount(dir, true)
				}
			}
			select {
			case <-m.exited:
			case <-time.After(10 * time.Second):
				_ = syscall.Kill(m.pid, syscall.SIGKILL)
				<-m.exited
			}
		}
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("mount log (pid %d):\n%s", m.pid, tail(b, 3000))
		}
	})
	// Until the process says it is mounted, not only the kernel: before
	// that, go-fuse's poll hack holds a file of the mount open in the
	// mount process itself, and a SIGKILL then leaves that process
	// flushing the file to itself, for ever (CI, session 24: the test
	// waited 18 minutes for the killed process, and the test binary's
	// own exit flushed a file of the mount; the connection had to be
	// aborted by hand).
	deadline := time.Now().Add(20 * time.Second)
	for !mounted(dir) || !strings.Contains(readLog(t, logPath), " mounted on ") {
		select {
		case <-m.exited:
			b, _ := os.ReadFile(logPath)
			t.Fatalf("govfs mount exited:\n%s", b)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("mount did not appear within 20 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return m
}

// kill SIGKILLs the mount process, waits for it to die and detaches the
// dead mount (its requests now fail with ENOTCONN).
func (m *mountProcess) kill(t *testing.T) {
	t.Helper()
	must(t, syscall.Kill(m.pid, syscall.SIGKILL))
	<-m.exited
	if _, err := os.Stat(filepath.Join(m.dir, "x")); !errors.Is(err, syscall.ENOTCONN) {
		t.Logf("stat on the dead mount: %v (want ENOTCONN)", err)
	}
	must(t, fusefs.Unmount(m.dir, true))
	if mounted(m.dir) {
		t.Fatal("dead mount still mounted after a lazy unmount")
	}
}

// Crash-test file layouts. Every 4 KiB block of the overwrite file and
// every append record carries its generation, its position and a CRC32C,
// so that any garbage (zeros, stale or foreign bytes) is detected.
const (
	crashBlock     = 4096
	crashOverwrite = 6<<20 + 3*crashBlock // spans two 4 MiB chunks
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// stampBlock fills b (crashBlock bytes) for generation gen, block idx.
func stampBlock(b []byte, gen, idx uint64) {
	le.LittleEndian.PutUint64(b[0:], gen)
	le.LittleEndian.PutUint64(b[8:], idx)
	r := rand.New(rand.NewSource(int64(gen*1_000_003 + idx)))
	r.Read(b[20:])
	le.LittleEndian.PutUint32(b[16:], crc32.Checksum(b[20:], castagnoli)^uint32(gen)^uint32(idx))
}

// blockGen returns the generation of a valid block at idx, or an error.
func blockGen(b []byte, idx uint64) (uint64, error) {
	gen, i := le.LittleEndian.Uint64(b[0:]), le.LittleEndian.Uint64(b[8:])
	if i != idx || le.LittleEndian.Uint32(b[16:]) != crc32.Checksum(b[20:], castagnoli)^uint32(gen)^uint32(idx) {
		return 0, fmt.Errorf("block %d is garbage (header gen %d idx %d, first bytes %x)", idx, gen, i, b[:24])
	}
	return gen, nil
}

// appendRecord is record seq of the append file: 16-byte header (seq,
// length, CRC32C of the body) then the body.
func appendRecord(seq uint64) []byte {
	r := rand.New(rand.NewSource(int64(seq)))
	body := make([]byte, 1+r.Intn(20<<10))
	r.Read(body)
	rec := make([]byte, 16+len(body))
	le.LittleEndian.PutUint64(rec[0:], seq)
	le.LittleEndian.PutUint32(rec[8:], uint32(len(body)))
	le.LittleEndian.PutUint32(rec[12:], crc32.Checksum(body, castagnoli))
	copy(rec[16:], body)
	return rec
}

// newFileContent is the content of new file n<seq>.
func newFileContent(seq uint64) []byte {
	r := rand.New(rand.NewSource(int64(seq) + 77))
	b := make([]byte, r.Intn(200<<10))
	r.Read(b)
	return b
}

// crashWriter records, for one writer, the last generation whose flush
// was acknowledged and whether the next one was under way at the kill.
type crashWriter struct {
	acked    atomic.Uint64 // last acknowledged generation
	synced   atomic.Uint64 // last generation acknowledged by fsync
	inflight atomic.Bool   // a generation after acked had started
	err      error         // the error that stopped it (expected after the kill)
}

// TestKillMountMidWrite SIGKILLs a `govfs mount` process while three
// writers push flushes through it (in-place overwrites of a 6 MiB file,
// appends, new files; acknowledged by close or fsync), detaches the dead
// mount, mounts again and checks that every acknowledged flush is there
// (a new file acknowledged by close alone may be lost with the mount's
// queue, as docs/fuse.md says close gives; one acknowledged by fsync, or
// before one, may not) and that everything else is either the old or the
// new content, never garbage.
func TestKillMountMidWrite(t *testing.T) {
	canMount(t)
	c := startCluster(t)
	dir := filepath.Join(t.TempDir(), "mnt")
	must(t, os.Mkdir(dir, 0o755))
	m := startMount(t, c, dir)
	p := func(rel string) string { return filepath.Join(dir, rel) }

	// Generation 0 of the overwrite file, before the clock starts.
	block := make([]byte, crashBlock)
	var initial bytes.Buffer
	for i := uint64(0); i < crashOverwrite/crashBlock; i++ {
		stampBlock(block, 0, i)
		initial.Write(block)
	}
	must(t, os.WriteFile(p("overwrite"), initial.Bytes(), 0o644))
	// Each round writes its own append file and new-file directory (a
	// torn record in flight stays at the end of the old one) and goes on
	// with the overwrite file from the generations it holds.
	base := uint64(0)
	for round := range 3 {
		appendName, newDir := fmt.Sprintf("append%d", round), fmt.Sprintf("new%d", round)
		must(t, os.WriteFile(p(appendName), nil, 0o644))
		must(t, os.Mkdir(p(newDir), 0o755))

		var w [3]crashWriter
		stop := make(chan struct{})
		var wg sync.WaitGroup
		// ack acknowledges generation gen by close (odd) or fsync then close
		// (even), as applications do.
		ack := func(f *os.File, gen uint64, cw *crashWriter) error {
			if gen%2 == 0 {
				if err := f.Sync(); err != nil {
					f.Close()
					return fmt.Errorf("fsync gen %d: %w", gen, err)
				}
				cw.acked.Store(gen)
				cw.synced.Store(gen)
				cw.inflight.Store(false)
				return f.Close()
			}
			if err := f.Close(); err != nil {
				return fmt.Errorf("close gen %d: %w", gen, err)
			}
			cw.acked.Store(gen)
			cw.inflight.Store(false)
			return nil
		}
		writer := func(cw *crashWriter, one func(gen uint64) error) {
			wg.Go(func() {
				for gen := base + 1; ; gen++ {
					select {
					case <-stop:
						return
					default:
					}
					cw.inflight.Store(true)
					if err := one(gen); err != nil {
						cw.err = err
						return
					}
				}
			})
		}
		writer(&w[0], func(gen uint64) error {
			f, err := os.OpenFile(p("overwrite"), os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			b := make([]byte, 256<<10)
			for off := 0; off < crashOverwrite; off += len(b) {
				n := min(len(b), crashOverwrite-off)
				for i := 0; i < n; i += crashBlock {
					stampBlock(b[i:i+crashBlock], gen, uint64((off+i)/crashBlock))
				}
				if _, err := f.WriteAt(b[:n], int64(off)); err != nil {
					f.Close()
					return fmt.Errorf("write gen %d at %d: %w", gen, off, err)
				}
			}
			return ack(f, gen, &w[0])
		})
		writer(&w[1], func(gen uint64) error {
			f, err := os.OpenFile(p(appendName), os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				return err
			}
			if _, err := f.Write(appendRecord(gen)); err != nil {
				f.Close()
				return fmt.Errorf("append gen %d: %w", gen, err)
			}
			return ack(f, gen, &w[1])
		})
		writer(&w[2], func(gen uint64) error {
			f, err := os.OpenFile(p(fmt.Sprintf("%s/n%d", newDir, gen)), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
			if err != nil {
				return err
			}
			if _, err := f.Write(newFileContent(gen)); err != nil {
				f.Close()
				return fmt.Errorf("write new file %d: %w", gen, err)
			}
			return ack(f, gen, &w[2])
		})

		// Kill once every writer has had a few flushes acknowledged, at a
		// random moment after that.
		deadline := time.Now().Add(15 * time.Second)
		for w[0].acked.Load() < base+3 || w[1].acked.Load() < base+3 || w[2].acked.Load() < base+3 {
			if time.Now().After(deadline) {
				close(stop)
				wg.Wait()
				t.Fatalf("round %d: writers stuck or too slow: acked %d %d %d; errors %v %v %v", round, w[0].acked.Load(), w[1].acked.Load(), w[2].acked.Load(), w[0].err, w[1].err, w[2].err)
			}
			time.Sleep(10 * time.Millisecond)
		}
		delay := time.Duration(rand.Int63n(int64(150 * time.Millisecond)))
		time.Sleep(delay)
		m.kill(t)
		close(stop)
		wg.Wait()
		for i := range w {
			t.Logf("writer %d: acked generation %d, next in flight %v, stopped by %v", i, w[i].acked.Load(), w[i].inflight.Load(), w[i].err)
		}
		t.Logf("round %d: killed %v after the third acknowledgement of each writer", round, delay)

		m = startMount(t, c, dir)

		// The overwrite file: full size, every block valid, of the
		// acknowledged generation or the one in flight.
		b, err := os.ReadFile(p("overwrite"))
		must(t, err)
		if len(b) != crashOverwrite {
			t.Fatalf("overwrite: %d bytes, want %d", len(b), crashOverwrite)
		}
		acked, hi := w[0].acked.Load(), w[0].acked.Load()
		if w[0].inflight.Load() {
			hi++
		}
		gens := map[uint64]int{}
		next := hi + 1
		for i := 0; i < len(b); i += crashBlock {
			g, err := blockGen(b[i:i+crashBlock], uint64(i/crashBlock))
			if err != nil {
				t.Fatalf("overwrite: %v", err)
			}
			if g < acked || g > hi {
				t.Fatalf("overwrite: block %d has generation %d, want %d..%d", i/crashBlock, g, acked, hi)
			}
			gens[g]++
		}
		t.Logf("overwrite: blocks per generation %v", gens)

		// The append file: every acknowledged record in order, then at most a
		// prefix of the one in flight.
		b, err = os.ReadFile(p(appendName))
		must(t, err)
		acked = w[1].acked.Load()
		off := 0
		for seq := base + 1; seq <= acked; seq++ {
			rec := appendRecord(seq)
			if off+len(rec) > len(b) || !bytes.Equal(b[off:off+len(rec)], rec) {
				t.Fatalf("append: acknowledged record %d (offset %d, %d bytes) missing or damaged; file is %d bytes", seq, off, len(rec), len(b))
			}
			off += len(rec)
		}
		if rest := b[off:]; len(rest) > 0 {
			next := appendRecord(acked + 1)
			if !w[1].inflight.Load() || len(rest) > len(next) || !bytes.Equal(rest, next[:len(rest)]) {
				t.Fatalf("append: %d bytes after the %d acknowledged records are not the record in flight (first bytes %x)", len(rest), acked, rest[:min(len(rest), 24)])
			}
			t.Logf("append: %d of %d bytes of the record in flight are there", len(rest), len(next))
		}

		// New files: every one up to the last fsynced whole (an fsync
		// sends the mount's whole queue); one acknowledged by close
		// alone, made under the directory's lease, may have been lost
		// with the mount's queue, or be empty (its create and its
		// records fell in two batches), as docs/fuse.md says close
		// gives; the one in flight absent, or a prefix of its content.
		acked = w[2].acked.Load()
		synced := w[2].synced.Load()
		for seq := base + 1; seq <= acked+1; seq++ {
			b, err := os.ReadFile(p(fmt.Sprintf("%s/n%d", newDir, seq)))
			want := newFileContent(seq)
			switch {
			case seq <= synced && (err != nil || !bytes.Equal(b, want)):
				t.Fatalf("new file n%d (acknowledged by an fsync): %d bytes, want %d; %v", seq, len(b), len(want), err)
			case seq <= acked && (errors.Is(err, syscall.ENOENT) || (err == nil && len(b) == 0)):
				t.Logf("new file n%d, acknowledged by close only, was lost with the mount's queue (%d bytes, %v)", seq, len(b), err)
			case seq <= acked && (err != nil || !bytes.Equal(b, want)):
				t.Fatalf("new file n%d (acknowledged by close): %d bytes, want %d or none; %v", seq, len(b), len(want), err)
			case seq > acked && errors.Is(err, syscall.ENOENT):
			case seq > acked && (err != nil || len(b) > len(want) || !bytes.Equal(b, want[:len(b)])):
				t.Fatalf("new file n%d (in flight): %d bytes, not a prefix of its %d; %v", seq, len(b), len(want), err)
			}
		}
		ents, err := os.ReadDir(p(newDir))
		must(t, err)
		if len(ents) > int(acked-base)+1 {
			t.Fatalf("new: %d files, at most %d expected", len(ents), acked+1)
		}
		base = next - 1
		// Round gaps: writers of the next round start above every
		// generation that may be on disk.
		base = max(base, w[1].acked.Load()+1, w[2].acked.Load()+1)
	}
}
