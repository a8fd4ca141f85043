package chunkstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// scenario is one mutation of chunk 1 on top of a prepared store.
type scenario struct {
	name  string
	setup func(s *Store) error
	op    func(s *Store) error
}

func pattern(seed byte, n int) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = seed + byte(i*7)
	}
	return p
}

func scenarios() []scenario {
	write := func(off int64, p []byte, v uint64) func(*Store) error {
		return func(s *Store) error { return s.Write(1, off, p, v) }
	}
	none := func(*Store) error { return nil }
	format1 := func(p []byte) func(*Store) error {
		return func(s *Store) error {
			if err := s.Write(1, 0, p, 1); err != nil {
				return err
			}
			return toFormat1(s, 1)
		}
	}
	truncate := func(n int64, v uint64) func(*Store) error {
		return func(s *Store) error { return s.Truncate(1, n, v) }
	}
	return []scenario{
		{"first write", none, write(1000, pattern(1, 3*BlockSize), 1)},
		{"append", write(0, pattern(2, BlockSize+BlockSize/2), 1),
			func(s *Store) error { _, err := s.Append(1, pattern(3, 2*BlockSize), 2); return err }},
		{"gap write", write(0, pattern(4, 100), 1), write(3*BlockSize+7, pattern(5, 1000), 2)},
		{"overwrite", write(0, pattern(6, 4*BlockSize+100), 1), write(BlockSize/2, pattern(7, 2*BlockSize+BlockSize/2), 2)},
		{"overwrite extending", write(0, pattern(8, 2*BlockSize+10), 1), write(BlockSize+5, pattern(9, 3*BlockSize), 2)},
		{"overwrite padded", func(s *Store) error { return s.Pad(1, 1) }, write(5*BlockSize-3, pattern(10, 100), 2)},
		{"pad", write(0, pattern(11, BlockSize+BlockSize/2), 1), func(s *Store) error { return s.Pad(1, 2) }},
		{"set version", write(0, pattern(12, 10), 1), func(s *Store) error { return s.SetVersion(1, 9) }},
		{"truncate inside a block", write(0, pattern(13, 3*BlockSize+100), 1), truncate(BlockSize+77, 2)},
		{"truncate at a block boundary", write(0, pattern(14, 3*BlockSize+100), 1), truncate(2*BlockSize, 2)},
		{"truncate to zero", write(0, pattern(15, 2*BlockSize), 1), truncate(0, 2)},
		{"truncate grows", write(0, pattern(16, BlockSize/2), 1), truncate(3*BlockSize+5, 2)},
		{"truncate after overwrite", func(s *Store) error {
			if err := s.Write(1, 0, pattern(17, 2*BlockSize), 1); err != nil {
				return err
			}
			return s.Write(1, 100, pattern(18, BlockSize), 2)
		}, truncate(BlockSize/2, 3)},
		{"second overwrite", func(s *Store) error {
			if err := s.Write(1, 0, pattern(19, 3*BlockSize), 1); err != nil {
				return err
			}
			return s.Write(1, 10, pattern(20, 2*BlockSize), 2) // leaves a longer journal record
		}, write(BlockSize+3, pattern(21, 100), 3)},
		{"append to a chunk without a data file", func(s *Store) error {
			if err := s.Pad(1, 1); err != nil {
				return err
			}
			return s.Truncate(1, 0, 2)
		}, func(s *Store) error { _, err := s.Append(1, pattern(22, 1000), 3); return err }},
		{"format-1 append", format1(pattern(23, BlockSize+7)),
			func(s *Store) error { _, err := s.Append(1, pattern(24, BlockSize), 2); return err }},
		{"format-1 overwrite", format1(pattern(25, 2*BlockSize)), write(BlockSize-5, pattern(26, 50), 2)},
		{"format-1 truncate", format1(pattern(27, 2*BlockSize)), truncate(BlockSize/3, 2)},
		{"format-1 set version", format1(pattern(28, 10)), func(s *Store) error { return s.SetVersion(1, 5) }},
	}
}

// state is what chunk 1 looks like from outside.
type state struct {
	exists  bool
	version uint64
	data    []byte
}

func (st state) String() string {
	return fmt.Sprintf("{exists %v version %d len %d}", st.exists, st.version, len(st.data))
}

func readState(t *testing.T, s *Store) state {
	t.Helper()
	ci, err := s.Stat(1)
	if errors.Is(err, ErrNotFound) {
		return state{}
	}
	if err != nil {
		t.Fatalf("Stat: %v", err)
	}
	d, err := s.Read(1, 0, testChunk)
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	return state{true, ci.Version, d}
}

func (st state) equal(o state) bool {
	return st.exists == o.exists && st.version == o.version && bytes.Equal(st.data, o.data)
}

// crashed abandons s as a killed process would: nothing is cleaned up,
// only the directory lock is released so that the test can reopen.
func crashed(s *Store) {
	s.files.closeAll()
	s.dirFile.Close()
	s.lockFile.Close()
}

type crashNow struct{}

// runArmed runs sc.op with BeforeStep failing once at step: by panicking
// (crash) or by returning failErr.
func runArmed(t *testing.T, dir string, sc scenario, step Step, crash bool, failErr error) (s *Store, opErr error, wasCrash bool) {
	t.Helper()
	armed := false
	cfg := testConfig(dir)
	cfg.Knobs = &TestingKnobs{BeforeStep: func(h Handle, st Step) error {
		if !armed || st != step {
			return nil
		}
		armed = false
		if crash {
			panic(crashNow{})
		}
		return failErr
	}}
	s = openT(t, cfg)
	if err := sc.setup(s); err != nil {
		t.Fatalf("setup: %v", err)
	}
	armed = true
	func() {
		defer func() {
			if r := recover(); r != nil {
				if _, ok := r.(crashNow); !ok {
					panic(r)
				}
				wasCrash = true
			}
		}()
		opErr = sc.op(s)
	}()
	if armed {
		t.Fatalf("step %s never ran", step)
	}
	return s, opErr, wasCrash
}

// referenceStates returns chunk 1 before and after sc, and the steps the
// mutation went through.
func referenceStates(t *testing.T, sc scenario) (before, after state, steps []Step) {
	cfg := testConfig(t.TempDir())
	cfg.Knobs = &TestingKnobs{BeforeStep: func(h Handle, st Step) error {
		steps = append(steps, st)
		return nil
	}}
	s := openT(t, cfg)
	if err := sc.setup(s); err != nil {
		t.Fatalf("setup: %v", err)
	}
	before = readState(t, s)
	steps = nil
	if err := sc.op(s); err != nil {
		t.Fatalf("op: %v", err)
	}
	return before, readState(t, s), steps
}

// committedAfter reports whether a failure at step i of steps must leave
// the new state. The commit point is the journal write for overwrites
// (a whole record is committed, a torn one is not), otherwise the last
// metadata write: the slot write, or for a new chunk the rename of its
// metadata file. (A format-1 chunk's upgrade renames a metadata file
// with unchanged content before the mutation's own commit.)
func committedAfter(steps []Step, i int) bool {
	commit := slices.Index(steps, StepJournalWrite)
	if commit < 0 {
		commit = max(slices.Index(steps, StepSlotWrite), slices.Index(steps, StepMetaRename))
	}
	return i > commit
}

// checkRecovered checks the reopened store: chunk 1 is exactly want, the
// directory holds no leftovers, scrub is clean and the chunk takes writes.
func checkRecovered(t *testing.T, dir string, want state) {
	t.Helper()
	s := openT(t, testConfig(dir))
	if got := readState(t, s); !got.equal(want) {
		t.Fatalf("after recovery chunk is %v, want %v", got, want)
	}
	ents, _ := os.ReadDir(filepath.Join(dir, "chunks"))
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), sufMeta) && !strings.HasSuffix(e.Name(), sufData) && !strings.HasSuffix(e.Name(), sufJournal) {
			t.Errorf("leftover file %s after recovery", e.Name())
		}
		if !want.exists {
			t.Errorf("file %s of a chunk that does not exist", e.Name())
		}
	}
	if want.exists {
		var fi os.FileInfo
		if fi, _ = os.Stat(s.path(1, sufData)); fi != nil && fi.Size() > int64(len(want.data)) {
			t.Errorf("data file is %d bytes, longer than the chunk (%d)", fi.Size(), len(want.data))
		}
	}
	s.Scrub(context.Background(), func(h Handle, b int, err error) { t.Errorf("Scrub after recovery: %v", err) })
	if err := s.Write(1, 10, []byte("after"), want.version+1); err != nil {
		t.Fatalf("write after recovery: %v", err)
	}
	if got, err := s.Read(1, 10, 5); err != nil || string(got) != "after" {
		t.Fatalf("read after recovery: %q, %v", got, err)
	}
	// Padding exposes anything an interrupted write left past the length.
	if err := s.Pad(1, want.version+2); err != nil {
		t.Fatalf("pad after recovery: %v", err)
	}
	// Everything past the length reads as zeros: nothing an interrupted
	// write left, and nothing a truncate cut, comes back.
	wantAll := make([]byte, testChunk)
	copy(wantAll, want.data)
	copy(wantAll[10:], "after")
	got, err := s.Read(1, 0, testChunk)
	if err != nil {
		t.Fatalf("read of the padded chunk: %v", err)
	}
	if i := firstDiff(got, wantAll); i >= 0 {
		t.Fatalf("padded chunk differs at byte %d: %d, want %d", i, got[i], wantAll[i])
	}
}

// firstDiff returns the first index where a and b differ, -1 if none.
func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}

// TestCrashAtEachStep kills the mutation at every step of every scenario
// (with torn writes at the write steps) and checks that reopening gives
// exactly the old chunk before the commit point and the new one after it.
func TestCrashAtEachStep(t *testing.T) {
	for _, sc := range scenarios() {
		before, after, steps := referenceStates(t, sc)
		if before.equal(after) {
			t.Fatalf("%s: the scenario changes nothing", sc.name)
		}
		for i, step := range steps {
			t.Run(fmt.Sprintf("%s/%s", sc.name, step), func(t *testing.T) {
				dir := t.TempDir()
				s, _, wasCrash := runArmed(t, dir, sc, step, true, nil)
				if !wasCrash {
					t.Fatal("no crash")
				}
				crashed(s)
				want := before
				if committedAfter(steps, i) {
					want = after
				}
				checkRecovered(t, dir, want)
			})
		}
	}
}

// TestFailAtEachStep makes every step fail with an I/O error instead: the
// call must return an error exactly when the old chunk remains (in
// process and after reopening), and succeed when recovery completed it.
func TestFailAtEachStep(t *testing.T) {
	for _, sc := range scenarios() {
		before, after, steps := referenceStates(t, sc)
		for i, step := range steps {
			t.Run(fmt.Sprintf("%s/%s", sc.name, step), func(t *testing.T) {
				dir := t.TempDir()
				s, err, _ := runArmed(t, dir, sc, step, false, syscall.EIO)
				want := before
				if committedAfter(steps, i) {
					want = after
				}
				if (err == nil) != (want.equal(after)) {
					t.Fatalf("op returned %v but the commit point was %s", err, map[bool]string{true: "passed", false: "not reached"}[want.equal(after)])
				}
				if err != nil && !errors.Is(err, syscall.EIO) {
					t.Fatalf("op error %v does not wrap the I/O error", err)
				}
				if got := readState(t, s); !got.equal(want) {
					t.Fatalf("in process chunk is %v, want %v", got, want)
				}
				s.Close()
				checkRecovered(t, dir, want)
			})
		}
	}
}

// TestDiskFull injects ENOSPC at every step that needs new disk space,
// once and persistently, and checks that the error says ENOSPC and the
// chunk keeps its old content and version.
func TestDiskFull(t *testing.T) {
	spaceSteps := []Step{StepReserve, StepDataWrite, StepJournalWrite, StepMetaWrite}
	for _, sc := range scenarios() {
		before, _, steps := referenceStates(t, sc)
		for _, step := range spaceSteps {
			if !slices.Contains(steps, step) {
				continue
			}
			t.Run(fmt.Sprintf("%s/%s", sc.name, step), func(t *testing.T) {
				dir := t.TempDir()
				s, err, _ := runArmed(t, dir, sc, step, false, syscall.ENOSPC)
				if !errors.Is(err, syscall.ENOSPC) {
					t.Fatalf("op = %v, want ENOSPC", err)
				}
				if got := readState(t, s); !got.equal(before) {
					t.Fatalf("chunk is %v after ENOSPC, want the old %v", got, before)
				}
				// The disk stays full: retries fail the same way.
				s.cfg.Knobs.BeforeStep = func(h Handle, st Step) error {
					if slices.Contains(spaceSteps, st) {
						return syscall.ENOSPC
					}
					return nil
				}
				for range 3 {
					if err := sc.op(s); !errors.Is(err, syscall.ENOSPC) {
						t.Fatalf("retry on a full disk = %v", err)
					}
				}
				if got := readState(t, s); !got.equal(before) {
					t.Fatalf("chunk is %v after retries, want the old %v", got, before)
				}
				s.Close()
				checkRecovered(t, dir, before)
			})
		}
	}
}

// buildJournal returns a journal file image writing p at off over base.
func buildJournal(h Handle, base uint64, off int64, p []byte, m meta) []byte {
	mb := encodeMeta(h, m)
	b := journalHeader(h, base, off, len(p), len(mb))
	b = append(append(b, mb...), p...)
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// TestStaleJournal covers journals left in place: once the metadata has
// passed one, recovery ignores it instead of replaying old bytes; a torn
// one (an uncommitted overwrite) is ignored; one that follows neither the
// metadata nor a version it passed marks the chunk damaged.
func TestStaleJournal(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(dir)
	s := openT(t, cfg)
	jp := filepath.Join(dir, "chunks", Handle(1).String()+sufJournal)
	m := newModel()
	var saved []byte
	steps := []struct {
		off int64
		p   []byte
	}{{0, pattern(1, 2*BlockSize)}, {10, []byte("journaled")}, {2 * BlockSize, []byte("fresh")}, {20, []byte("again")}}
	for i, w := range steps {
		if err := s.Write(1, w.off, w.p, uint64(i+1)); err != nil {
			t.Fatal(err)
		}
		m.write(1, w.off, w.p, uint64(i+1))
		if i == 1 {
			saved, _ = os.ReadFile(jp)
		}
	}
	if saved == nil {
		t.Fatal("the overwrite did not go through the journal")
	}
	s.Close()
	reopen := func(journal []byte) *Store {
		t.Helper()
		if err := os.WriteFile(jp, journal, 0o644); err != nil {
			t.Fatal(err)
		}
		return openT(t, cfg)
	}
	s = reopen(saved) // version 2 over 1; the metadata is at 4
	m.check(t, s)
	s.Close()
	s = reopen(saved[:len(saved)-1]) // torn
	m.check(t, s)
	s.Close()
	// Longer than its record (a longer, older record's tail follows it).
	s = reopen(append(bytes.Clone(saved), pattern(9, 3000)...))
	m.check(t, s)
	s.Close()

	// Version 9 over 8 while the metadata is at 4: not from this history.
	s = reopen(buildJournal(1, 8, 0, []byte("x"), meta{version: 9, length: 2*BlockSize + 5, crcs: make([]uint32, 3)}))
	var ce *CorruptError
	if _, err := s.Stat(1); !errors.As(err, &ce) || ce.Block != -1 {
		t.Fatalf("Stat with a journal from another history = %v", err)
	}
}
