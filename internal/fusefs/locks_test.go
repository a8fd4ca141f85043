package fusefs_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

func setlk(f *os.File, cmd int, typ int16, start, length int64) error {
	return syscall.FcntlFlock(f.Fd(), cmd, &syscall.Flock_t{Type: typ, Whence: 0, Start: start, Len: length})
}

// TestMountLocks checks cluster-wide fcntl and flock locks between two
// mount processes of one cluster: a write lock held through one mount
// blocks the other's conflicting range until it is released (a blocked
// F_SETLKW returns then), disjoint ranges are locked at once, F_GETLK
// names the holder's range, unlocking part of a lock splits it, a close
// drops the process's locks, and a lock of a mount killed with SIGKILL
// ends when its lease expires (one TTL, 10 s). Data written before the
// kill is intact.
func TestMountLocks(t *testing.T) {
	canMount(t)
	c := startCluster(t)
	dirA, dirB := filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")
	must(t, os.Mkdir(dirA, 0o755))
	must(t, os.Mkdir(dirB, 0o755))
	ma := startMount(t, c, dirA)
	startMount(t, c, dirB)

	data := bytes.Repeat([]byte("locked rows "), 1000)
	must(t, os.WriteFile(filepath.Join(dirA, "f"), data, 0o644))
	fa, err := os.OpenFile(filepath.Join(dirA, "f"), os.O_RDWR, 0)
	must(t, err)
	defer fa.Close()
	fb, err := os.OpenFile(filepath.Join(dirB, "f"), os.O_RDWR, 0)
	must(t, err)
	defer fb.Close()

	must(t, setlk(fa, syscall.F_SETLK, syscall.F_WRLCK, 0, 100))
	wantErrno(t, "conflicting write lock", setlk(fb, syscall.F_SETLK, syscall.F_WRLCK, 50, 10), syscall.EAGAIN)
	wantErrno(t, "conflicting read lock", setlk(fb, syscall.F_SETLK, syscall.F_RDLCK, 99, 1), syscall.EAGAIN)
	must(t, setlk(fb, syscall.F_SETLK, syscall.F_WRLCK, 200, 100)) // disjoint: at once

	q := syscall.Flock_t{Type: syscall.F_WRLCK, Start: 10, Len: 5}
	must(t, syscall.FcntlFlock(fb.Fd(), syscall.F_GETLK, &q))
	if q.Type != syscall.F_WRLCK || q.Start != 0 || q.Len != 100 {
		t.Fatalf("F_GETLK: %+v, want the write lock [0, 100)", q)
	}
	q = syscall.Flock_t{Type: syscall.F_WRLCK, Start: 100, Len: 100}
	must(t, syscall.FcntlFlock(fb.Fd(), syscall.F_GETLK, &q))
	if q.Type != syscall.F_UNLCK {
		t.Fatalf("F_GETLK on a free range: %+v, want F_UNLCK", q)
	}

	// A blocked F_SETLKW returns once the range is unlocked (part of the
	// lock: [0, 40) and [80, 100) stay locked).
	got := make(chan error, 1)
	start := time.Now()
	go func() { got <- setlk(fb, syscall.F_SETLKW, syscall.F_WRLCK, 50, 10) }()
	select {
	case err := <-got:
		t.Fatalf("F_SETLKW returned %v while the range was locked", err)
	case <-time.After(1500 * time.Millisecond):
	}
	must(t, setlk(fa, syscall.F_SETLK, syscall.F_UNLCK, 40, 40))
	select {
	case err := <-got:
		must(t, err)
		t.Logf("F_SETLKW granted %v after it was asked, %v after the unlock", time.Since(start).Round(time.Millisecond), time.Since(start.Add(1500*time.Millisecond)).Round(time.Millisecond))
	case <-time.After(15 * time.Second):
		t.Fatal("F_SETLKW still blocked 15 s after the unlock")
	}
	wantErrno(t, "left part of a split lock", setlk(fb, syscall.F_SETLK, syscall.F_RDLCK, 0, 10), syscall.EAGAIN)
	wantErrno(t, "right part of a split lock", setlk(fb, syscall.F_SETLK, syscall.F_RDLCK, 85, 5), syscall.EAGAIN)

	// Closing any descriptor of the file drops the process's locks on it.
	other, err := os.Open(filepath.Join(dirA, "f"))
	must(t, err)
	must(t, other.Close())
	must(t, setlk(fb, syscall.F_SETLK, syscall.F_WRLCK, 0, 10))
	must(t, setlk(fb, syscall.F_SETLK, syscall.F_UNLCK, 0, 0))

	// flock: shared locks share, exclusive ones conflict across mounts.
	must(t, syscall.Flock(int(fa.Fd()), syscall.LOCK_SH|syscall.LOCK_NB))
	must(t, syscall.Flock(int(fb.Fd()), syscall.LOCK_SH|syscall.LOCK_NB))
	wantErrno(t, "exclusive flock over a shared one", syscall.Flock(int(fb.Fd()), syscall.LOCK_EX|syscall.LOCK_NB), syscall.EWOULDBLOCK)
	must(t, syscall.Flock(int(fb.Fd()), syscall.LOCK_UN))
	must(t, syscall.Flock(int(fa.Fd()), syscall.LOCK_UN))

	// An open-file-description lock ends with the last close of its
	// description (the kernel does not name it at close: the mount
	// releases every lock of a file no descriptor has open).
	const fOFDSetlk = 37 // F_OFD_SETLK
	fo, err := os.OpenFile(filepath.Join(dirA, "f"), os.O_RDWR, 0)
	must(t, err)
	must(t, setlk(fo, fOFDSetlk, syscall.F_WRLCK, 0, 10))
	wantErrno(t, "OFD lock held", setlk(fb, syscall.F_SETLK, syscall.F_WRLCK, 5, 1), syscall.EAGAIN)
	must(t, fo.Close())
	must(t, fa.Close()) // the last descriptor of the file on mount A
	// The kernel sends RELEASE after close(2) returned (FUSE does not
	// wait for it), so the lock goes a moment later: under load, B may
	// ask first (seen in CI).
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		err := setlk(fb, syscall.F_SETLK, syscall.F_WRLCK, 5, 1)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EAGAIN) || time.Now().After(deadline) {
			t.Fatalf("B's lock after the last close of the OFD lock's file on A: %v", err)
		}
	}
	must(t, setlk(fb, syscall.F_SETLK, syscall.F_UNLCK, 0, 0))
	fa, err = os.OpenFile(filepath.Join(dirA, "f"), os.O_RDWR, 0)
	must(t, err)
	defer fa.Close()

	// A lock protects data: what A wrote under its lock (buffered, no
	// fsync) is what B reads once it holds the lock, even though B read
	// (and cached) the old bytes before.
	must(t, os.WriteFile(filepath.Join(dirA, "data"), []byte("old!"), 0o644))
	da, err := os.OpenFile(filepath.Join(dirA, "data"), os.O_RDWR, 0)
	must(t, err)
	defer da.Close()
	db, err := os.OpenFile(filepath.Join(dirB, "data"), os.O_RDWR, 0)
	must(t, err)
	defer db.Close()
	four := make([]byte, 4)
	if _, err := db.ReadAt(four, 0); err != nil || string(four) != "old!" {
		t.Fatalf("B's first read %q, %v", four, err)
	}
	must(t, setlk(da, syscall.F_SETLK, syscall.F_WRLCK, 0, 0))
	_, err = da.WriteAt([]byte("new!"), 0)
	must(t, err)
	must(t, setlk(da, syscall.F_SETLK, syscall.F_UNLCK, 0, 0))
	must(t, setlk(db, syscall.F_SETLKW, syscall.F_RDLCK, 0, 0))
	if _, err := db.ReadAt(four, 0); err != nil || string(four) != "new!" {
		t.Fatalf("B read %q (%v) under its lock after A's locked write, want new!", four, err)
	}
	must(t, setlk(db, syscall.F_SETLK, syscall.F_UNLCK, 0, 0))

	// An upgrade is not queued behind a waiter for the same range: A
	// holds a read lock, B waits for a write lock, A upgrades (it would
	// wait for ever behind B, which waits for A), unlocks, and B gets it.
	must(t, setlk(da, syscall.F_SETLK, syscall.F_RDLCK, 0, 0))
	bWaits := make(chan error, 1)
	go func() { bWaits <- setlk(db, syscall.F_SETLKW, syscall.F_WRLCK, 0, 0) }()
	time.Sleep(300 * time.Millisecond) // B is queued
	upgraded := make(chan error, 1)
	go func() { upgraded <- setlk(da, syscall.F_SETLKW, syscall.F_WRLCK, 0, 0) }()
	select {
	case err := <-upgraded:
		must(t, err)
	case <-time.After(15 * time.Second):
		t.Fatal("A's upgrade is stuck behind B, which waits for A")
	}
	must(t, setlk(da, syscall.F_SETLK, syscall.F_UNLCK, 0, 0))
	select {
	case err := <-bWaits:
		must(t, err)
	case <-time.After(15 * time.Second):
		t.Fatal("B did not get the lock after A's unlock")
	}
	must(t, setlk(db, syscall.F_SETLK, syscall.F_UNLCK, 0, 0))

	// A lock of a dead mount ends with its lease.
	must(t, setlk(fa, syscall.F_SETLK, syscall.F_WRLCK, 0, 0))
	wantErrno(t, "whole-file lock held", setlk(fb, syscall.F_SETLK, syscall.F_RDLCK, 5000, 1), syscall.EAGAIN)
	ma.kill(t)
	start = time.Now()
	must(t, setlk(fb, syscall.F_SETLKW, syscall.F_WRLCK, 0, 0))
	waited := time.Since(start)
	t.Logf("lock of the killed mount taken over after %v", waited.Round(time.Millisecond))
	if waited > 25*time.Second {
		t.Fatalf("the dead mount's lock lasted %v, more than the lease TTL allows", waited)
	}
	b, err := os.ReadFile(filepath.Join(dirB, "f"))
	must(t, err)
	if !bytes.Equal(b, data) {
		t.Fatalf("file after the kill: %d bytes, want the %d written before", len(b), len(data))
	}
}
