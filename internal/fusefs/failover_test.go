package fusefs_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/govfs/govfs/client"
	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/testcluster"
)

// Minister failover through real mounts (issue 10 §2 and §3): leases and
// locks are reclaimed by the new minister, so a kill -9 of the minister
// neither loses a lock nor stalls operations for a lease TTL.

// rootMinister returns the index of the process leading the root
// ministry (group 1).
func rootMinister(t *testing.T, c *testcluster.ProcCluster) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	i, err := c.Leader(ctx, ids.RootMinistry)
	if err != nil {
		t.Fatal(err)
	}
	return i
}

// killMinister kills -9 the root minister and returns its index; it is
// started again at cleanup.
func killMinister(t *testing.T, c *testcluster.ProcCluster) int {
	t.Helper()
	victim := rootMinister(t, c)
	c.Kill(victim)
	t.Cleanup(func() { _ = c.Start(victim) })
	return victim
}

// fenceEnded waits for a node's log to say its lease fence ended and
// returns that line; all says whether every client reclaimed.
func fenceEnded(t *testing.T, c *testcluster.ProcCluster, within time.Duration) (line string, all bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		for i := range c.Procs() {
			b, _ := os.ReadFile(c.LogPath(i))
			for _, l := range strings.Split(string(b), "\n") {
				if strings.Contains(l, "lease fence ended") {
					return l, strings.Contains(l, "all_reclaimed=true")
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("no node logged the end of its lease fence within %v", within)
	return "", false
}

// TestMountLocksAcrossMinisterKill: two mounts hold fcntl locks; the
// minister is killed. The locks are reclaimed: for longer than a lease
// TTL afterwards neither mount is granted the other's lock, the holders
// keep writing (no EIO), and once one unlocks, the other's blocked
// F_SETLKW gets the range and reads what the holder wrote under it.
func TestMountLocksAcrossMinisterKill(t *testing.T) {
	canMount(t)
	c := startCluster(t)
	ma, mb := mountProc(t, c), mountProc(t, c)
	data := bytes.Repeat([]byte("L"), 4096)
	must(t, os.WriteFile(filepath.Join(ma, "f"), data, 0o644))
	fa, err := os.OpenFile(filepath.Join(ma, "f"), os.O_RDWR, 0)
	must(t, err)
	defer fa.Close()
	fb, err := os.OpenFile(filepath.Join(mb, "f"), os.O_RDWR, 0)
	must(t, err)
	defer fb.Close()
	must(t, setlk(fa, syscall.F_SETLK, syscall.F_WRLCK, 0, 100))
	must(t, setlk(fb, syscall.F_SETLK, syscall.F_WRLCK, 200, 100))

	killMinister(t, c)
	killed := time.Now()
	// Past the old locks' expiry: a lock that was not reclaimed would be
	// free by then.
	for i := 0; time.Since(killed) < 13*time.Second; i++ {
		if err := setlk(fb, syscall.F_SETLK, syscall.F_WRLCK, 50, 10); !errors.Is(err, syscall.EAGAIN) {
			t.Fatalf("%v after the kill: B's try on A's locked range: %v, want EAGAIN", time.Since(killed), err)
		}
		if err := setlk(fa, syscall.F_SETLK, syscall.F_RDLCK, 250, 10); !errors.Is(err, syscall.EAGAIN) {
			t.Fatalf("%v after the kill: A's try on B's locked range: %v, want EAGAIN", time.Since(killed), err)
		}
		// The holder writes under its lock throughout.
		if _, err := fa.WriteAt([]byte(fmt.Sprintf("%04d", i)), 0); err != nil {
			t.Fatalf("%v after the kill: A's write under its lock: %v", time.Since(killed), err)
		}
		must(t, fa.Sync())
		time.Sleep(200 * time.Millisecond)
	}
	line, all := fenceEnded(t, c, 5*time.Second)
	if !all {
		t.Errorf("the new minister's fence ran out instead of ending by reclaim: %s", line)
	}
	t.Logf("new minister: %s", line)
	want := make([]byte, 4)
	_, err = fa.ReadAt(want, 0)
	must(t, err)
	got := make(chan error, 1)
	go func() { got <- setlk(fb, syscall.F_SETLKW, syscall.F_WRLCK, 0, 100) }()
	must(t, setlk(fa, syscall.F_SETLK, syscall.F_UNLCK, 0, 100))
	select {
	case err := <-got:
		must(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("B's F_SETLKW still blocked 10 s after A's unlock")
	}
	b := make([]byte, 4)
	_, err = fb.ReadAt(b, 0)
	must(t, err)
	if !bytes.Equal(b, want) {
		t.Fatalf("B read %q under the lock, A wrote %q", b, want)
	}
}

// TestSqliteTwoMountsAcrossMinisterKill: two sqlite3 processes, each on
// its own mount, insert into one WAL-mode database while the minister
// is killed. SQLite keeps the WAL index in shared memory, which two
// machines (two mounts) cannot share, so they use EXCLUSIVE locking
// mode: the index lives in each process's heap and fcntl locks, which
// the cluster holds, serialise the writers. Every insert that
// succeeded is there, and integrity_check is ok.
func TestSqliteTwoMountsAcrossMinisterKill(t *testing.T) {
	canMount(t)
	needProgram(t, "sqlite3")
	c := startCluster(t)
	ma, mb := mountProc(t, c), mountProc(t, c)
	sqlite(t, filepath.Join(ma, "db.sqlite"), "PRAGMA journal_mode=WAL; CREATE TABLE t(id INTEGER PRIMARY KEY, who TEXT, n INTEGER);")
	stop := time.Now().Add(20 * time.Second)
	// One transaction per process. Two processes that both took the
	// SHARED lock each wait for the other's to go (SQLite's busy handler
	// does not break that deadlock; on a local disk the window is
	// microseconds, across machines milliseconds), and SQLite sometimes
	// answers SQLITE_BUSY at once: a short busy timeout and a retry after
	// a random pause resolve both, as applications do. A transaction that
	// failed did nothing.
	r := rand.New(rand.NewPCG(3, 3))
	var rmu sync.Mutex
	pause := func() time.Duration {
		rmu.Lock()
		defer rmu.Unlock()
		return time.Duration(10+r.IntN(150)) * time.Millisecond
	}
	insert := func(db, who string, n int) error {
		for {
			cmd := exec.Command("sqlite3", "-bail", "-cmd", "PRAGMA locking_mode=EXCLUSIVE;", "-cmd", ".timeout 300", db,
				fmt.Sprintf("BEGIN IMMEDIATE; INSERT INTO t(who, n) VALUES('%s', %d); COMMIT;", who, n))
			out, err := cmd.CombinedOutput()
			if err != nil && strings.Contains(string(out), "database is locked") && time.Now().Before(stop.Add(time.Minute)) {
				time.Sleep(pause())
				continue
			}
			if err != nil {
				return fmt.Errorf("sqlite3 insert %s %d: %v: %s", who, n, err, out)
			}
			return nil
		}
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	done := map[string][]int{}
	errs := make(chan error, 2)
	for _, w := range []struct{ who, dir string }{{"a", ma}, {"b", mb}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			db := filepath.Join(w.dir, "db.sqlite")
			for n := 0; time.Now().Before(stop); n++ {
				if err := insert(db, w.who, n); err != nil {
					errs <- err
					return
				}
				mu.Lock()
				done[w.who] = append(done[w.who], n)
				mu.Unlock()
			}
		}()
	}
	time.Sleep(3 * time.Second)
	killMinister(t, c)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for _, dir := range []string{ma, mb} {
		db := filepath.Join(dir, "db.sqlite")
		for _, who := range []string{"a", "b"} {
			out := sqlite(t, db, fmt.Sprintf("PRAGMA locking_mode=EXCLUSIVE; SELECT count(*), coalesce(sum(n), 0) FROM t WHERE who = '%s';", who))
			ns := done[who]
			sum := 0
			for _, n := range ns {
				sum += n
			}
			want := fmt.Sprintf("%d|%d\n", len(ns), sum)
			if !strings.HasSuffix(out, want) {
				t.Errorf("%s: rows of %s: %q, want %q (every acknowledged insert)", dir, who, out, want)
			}
		}
		if out := sqlite(t, db, "PRAGMA locking_mode=EXCLUSIVE; PRAGMA integrity_check;"); !strings.HasSuffix(out, "ok\n") {
			t.Errorf("%s: integrity_check: %q", dir, out)
		}
	}
	t.Logf("inserts across the kill: a %d, b %d", len(done["a"]), len(done["b"]))
}

// opStat collects the latencies of one kind of operation, with when
// each started.
type opStat struct {
	mu  sync.Mutex
	ops []timedOp
}

type timedOp struct {
	start time.Time
	took  time.Duration
}

func (s *opStat) add(start time.Time, took time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ops = append(s.ops, timedOp{start, took})
}

// summary describes the operations that ended in [from, to) (so those
// in flight at a disruption count after it): count, p50, p99, max, and
// when (relative to the disruption) the slowest started.
func (s *opStat) summary(from, to, kill time.Time) string {
	var ds []timedOp
	for _, o := range s.ops {
		if end := o.start.Add(o.took); !end.Before(from) && end.Before(to) {
			ds = append(ds, o)
		}
	}
	if len(ds) == 0 {
		return "none"
	}
	slices.SortFunc(ds, func(a, b timedOp) int { return int(a.took - b.took) })
	q := func(f float64) time.Duration {
		return ds[min(len(ds)-1, int(float64(len(ds))*f))].took.Round(time.Millisecond)
	}
	worst := ds[len(ds)-1]
	return fmt.Sprintf("n=%d p50=%v p99=%v max=%v (started %+.1fs from the disruption)", len(ds), q(0.5), q(0.99),
		worst.took.Round(time.Millisecond), worst.start.Sub(kill).Seconds())
}

// TestMinisterKillUnderLeaseLoad kills -9 the root minister while two
// mounts run a lease-heavy workload: writers create, write and fsync new
// files and overwrite files (with fsync) that a reader on the other
// mount keeps open and reads under read leases (so every overwrite
// drains them), renames, and lockers take fcntl locks. It reports the
// latency of each kind of operation before and after the kill (the
// longest is the stall a user sees; docs/benchmarks.md has the
// figures), checks that the new minister's fence ended by reclaim, and
// checks that every acknowledged write is there, intact.
func TestMinisterKillUnderLeaseLoad(t *testing.T) {
	leaseLoad(t, "kill", func(c *testcluster.ProcCluster) { killMinister(t, c) })
}

// TestMinisterPauseUnderLeaseLoad is the same workload with the root
// minister paused (SIGSTOP) for 5 s and then resumed: its sockets stay
// open, so clients wait for their calls to it to time out before they
// look for the new minister.
func TestMinisterPauseUnderLeaseLoad(t *testing.T) {
	leaseLoad(t, "pause", func(c *testcluster.ProcCluster) {
		victim := rootMinister(t, c)
		c.Pause(victim)
		time.Sleep(5 * time.Second)
		c.Resume(victim)
	})
}

// leaseLoad runs the workload of TestMinisterKillUnderLeaseLoad around
// disrupt (called 8 s in; the load goes on 20 s after it starts).
func leaseLoad(t *testing.T, what string, disrupt func(*testcluster.ProcCluster)) {
	canMount(t)
	c := startCluster(t)
	ma, mb := mountProc(t, c), mountProc(t, c)
	stats := map[string]*opStat{}
	for _, k := range []string{"create+write+fsync", "overwrite+fsync", "open+read (other mount)", "rename", "lock+write+unlock"} {
		stats[k] = &opStat{}
	}
	const files = 8
	// Files past the inline limit: their writes go to the chunk servers
	// (8 KiB was, before the limit went from 4 to 16 KiB).
	const chunkFileSize = client.DefaultInlineMax + 4096
	for i := range files {
		must(t, os.WriteFile(filepath.Join(ma, fmt.Sprintf("shared%d", i)), bytes.Repeat([]byte{'0'}, chunkFileSize), 0o644))
	}
	must(t, os.Mkdir(filepath.Join(ma, "new"), 0o755))
	began := time.Now()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var emu sync.Mutex
	var failures []string
	fail := func(format string, args ...any) {
		emu.Lock()
		defer emu.Unlock()
		failures = append(failures, fmt.Sprintf(format, args...))
	}
	// Acknowledged state: the last fsynced content of each shared file
	// and the new files written.
	var amu sync.Mutex
	last := map[int]byte{}
	created := map[string]byte{}
	run := func(kind string, op func(i int) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				start := time.Now()
				if err := op(i); err != nil {
					fail("%s #%d: %v", kind, i, err)
					return
				}
				stats[kind].add(start, time.Since(start))
			}
		}()
	}
	for w := range 2 {
		run("create+write+fsync", func(i int) error {
			name := filepath.Join(ma, "new", fmt.Sprintf("w%d-%d", w, i))
			f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
			if err != nil {
				return err
			}
			b := byte('a' + i%26)
			if _, err := f.Write(bytes.Repeat([]byte{b}, 2*chunkFileSize)); err != nil {
				f.Close()
				return err
			}
			if err := f.Sync(); err != nil {
				f.Close()
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
			amu.Lock()
			created[name] = b
			amu.Unlock()
			return nil
		})
	}
	for w := range 2 {
		run("overwrite+fsync", func(i int) error {
			k := w*files/2 + i%(files/2)
			f, err := os.OpenFile(filepath.Join(ma, fmt.Sprintf("shared%d", k)), os.O_RDWR, 0)
			if err != nil {
				return err
			}
			b := byte('A' + i%26)
			_, err = f.WriteAt(bytes.Repeat([]byte{b}, chunkFileSize), 0)
			if err == nil {
				err = f.Sync()
			}
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err == nil {
				amu.Lock()
				last[k] = b
				amu.Unlock()
			}
			return err
		})
	}
	run("open+read (other mount)", func(i int) error {
		b, err := os.ReadFile(filepath.Join(mb, fmt.Sprintf("shared%d", i%files)))
		if err == nil && len(b) != chunkFileSize {
			err = fmt.Errorf("read %d bytes of shared%d", len(b), i%files)
		}
		return err
	})
	// Paced: a rename loop without pause queues asynchronous renames
	// faster than their batches are applied, and every other request of
	// that mount waits for the queue (seconds; docs/fuse.md).
	run("rename", func(i int) error {
		time.Sleep(5 * time.Millisecond)
		from, to := filepath.Join(mb, "r0"), filepath.Join(mb, "r1")
		if i == 0 {
			return os.WriteFile(from, []byte("r"), 0o644)
		}
		if i%2 == 0 {
			from, to = to, from
		}
		return os.Rename(from, to)
	})
	// One lock file per mount: contention between the two lockers
	// would measure how long one waits for the other, not the cluster.
	for m, dir := range []string{ma, mb} {
		run("lock+write+unlock", func(i int) error {
			f, err := os.OpenFile(filepath.Join(dir, fmt.Sprintf("locked%d", m)), os.O_RDWR|os.O_CREATE, 0o644)
			if err != nil {
				return err
			}
			defer f.Close()
			if err := setlk(f, syscall.F_SETLKW, syscall.F_WRLCK, 0, 0); err != nil {
				return fmt.Errorf("lock: %w", err)
			}
			if _, err := f.WriteAt([]byte(fmt.Sprintf("%d-%06d\n", m, i)), 0); err != nil {
				return err
			}
			return setlk(f, syscall.F_SETLK, syscall.F_UNLCK, 0, 0)
		})
	}
	time.Sleep(8 * time.Second)
	killedAt := time.Now()
	disrupt(c)
	time.Sleep(20*time.Second - time.Since(killedAt))
	close(stop)
	wg.Wait()
	ended := time.Now().Add(time.Minute) // every operation has ended
	for _, f := range failures {
		t.Error(f)
	}
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range stats {
			if !yield(k) {
				return
			}
		}
	}) {
		s := stats[k]
		t.Logf("%-24s before the %s: %s", k, what, s.summary(began, killedAt, killedAt))
		t.Logf("%-24s after the %s:  %s", k, what, s.summary(killedAt, ended, killedAt))
	}
	// Every acknowledged write is there, read through the other mount.
	for k, b := range last {
		got, err := os.ReadFile(filepath.Join(mb, fmt.Sprintf("shared%d", k)))
		if err != nil || !bytes.Equal(got, bytes.Repeat([]byte{b}, chunkFileSize)) {
			t.Errorf("shared%d: %d bytes (%v), want %d x %q (its last fsynced overwrite)", k, len(got), err, chunkFileSize, b)
		}
	}
	for name, b := range created {
		got, err := os.ReadFile(strings.Replace(name, ma, mb, 1))
		if err != nil || !bytes.Equal(got, bytes.Repeat([]byte{b}, 2*chunkFileSize)) {
			t.Errorf("%s: %d bytes (%v), want %d x %q", name, len(got), err, 2*chunkFileSize, b)
		}
	}
	t.Logf("%d files created and %d overwritten files checked", len(created), len(last))
	line, all := fenceEnded(t, c, 5*time.Second)
	if !all {
		t.Errorf("the new minister's fence ran out instead of ending by reclaim: %s", line)
	}
	t.Logf("new minister: %s", line)
}

// TestMountLockLostGivesEIO: a mount cut off from the cluster for longer
// than a lease TTL (every metadata node paused 11 s) can no longer keep
// its lock; its descriptors of the file then fail with EIO (as on NFS),
// close included, while a new open works, and another mount can take
// the lock.
func TestMountLockLostGivesEIO(t *testing.T) {
	canMount(t)
	c := startCluster(t)
	ma, mb := mountProc(t, c), mountProc(t, c)
	must(t, os.WriteFile(filepath.Join(ma, "f"), []byte("before"), 0o644))
	fa, err := os.OpenFile(filepath.Join(ma, "f"), os.O_RDWR, 0)
	must(t, err)
	must(t, setlk(fa, syscall.F_SETLK, syscall.F_WRLCK, 0, 0))
	for i := range 3 {
		c.Pause(i)
	}
	time.Sleep(11 * time.Second) // the lease TTL is 10 s
	for i := range 3 {
		c.Resume(i)
	}
	_, err = fa.WriteAt([]byte("after"), 0)
	wantErrno(t, "write after the lock was lost", err, syscall.EIO)
	wantErrno(t, "close after the lock was lost", fa.Close(), syscall.EIO)
	b, err := os.ReadFile(filepath.Join(ma, "f"))
	if err != nil || string(b) != "before" {
		t.Fatalf("a new open after the loss: %q, %v (want the data written before)", b, err)
	}
	fb, err := os.OpenFile(filepath.Join(mb, "f"), os.O_RDWR, 0)
	must(t, err)
	defer fb.Close()
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		err := setlk(fb, syscall.F_SETLK, syscall.F_WRLCK, 0, 0)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EAGAIN) || time.Now().After(deadline) {
			t.Fatalf("the other mount's lock after the loss: %v", err)
		}
	}
}
