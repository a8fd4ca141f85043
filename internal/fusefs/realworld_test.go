package fusefs_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestRealWorld runs real programs on a real mount of a 3+3 process
// cluster: git, cp -a / mv / rm -rf of trees, sqlite3, and a tarball of
// this repository's internal/ directory. Each subtest takes a few
// seconds; a missing program skips only its subtest.
func TestRealWorld(t *testing.T) {
	canMount(t)
	c := startCluster(t)
	mnt := mountProc(t, c)
	p := func(rel string) string { return filepath.Join(mnt, rel) }

	t.Run("git", func(t *testing.T) {
		needProgram(t, "git")
		repo := p("repo")
		must(t, os.Mkdir(repo, 0o755))
		g := gitRunner(t, repo)
		g("init", "-q", "-b", "main")
		for i := range 3 {
			must(t, os.MkdirAll(filepath.Join(repo, "src", fmt.Sprint(i)), 0o755))
			for j := range 5 {
				body := strings.Repeat(fmt.Sprintf("commit %d file %d\n", i, j), 50*(j+1))
				must(t, os.WriteFile(filepath.Join(repo, "src", fmt.Sprint(i), fmt.Sprintf("f%d.txt", j)), []byte(body), 0o644))
			}
			must(t, os.WriteFile(filepath.Join(repo, "README"), []byte(fmt.Sprintf("revision %d\n", i)), 0o644))
			g("add", "-A")
			g("commit", "-q", "-m", fmt.Sprintf("commit %d", i))
		}
		// A rename and a delete, as a developer would.
		g("mv", "src/0", "src/zero")
		g("rm", "-q", "src/1/f0.txt")
		g("commit", "-q", "-m", "move and delete")
		log := g("log", "--oneline")
		if n := len(strings.Split(strings.TrimSpace(log), "\n")); n != 4 {
			t.Fatalf("git log: %d commits, want 4:\n%s", n, log)
		}
		g("fsck", "--full", "--strict")
		// gc packs loose objects (temp files, renames, mmap of the pack),
		// then everything is checked again. git repack feeds pack-objects
		// from /dev/null, so it needs a real one.
		if devNullOK() {
			g("gc", "-q", "--prune=now")
			g("fsck", "--full", "--strict")
		} else {
			t.Log("/dev/null is not the null device on this machine: git gc skipped")
		}
		if st := g("status", "--porcelain"); st != "" {
			t.Fatalf("git status after commit: %q", st)
		}
		if s := g("show", "HEAD~3:README"); s != "revision 0\n" {
			t.Fatalf("git show HEAD~3:README: %q", s)
		}
		// A clone of the repository on the mount, onto the mount.
		clone := p("clone")
		runIn(t, "", gitEnv(t), "git", "clone", "-q", repo, clone)
		run(t, "diff", "-r", "-x", ".git", repo, clone)
	})

	t.Run("cp-mv-rm", func(t *testing.T) {
		src := filepath.Join(t.TempDir(), "src")
		makeTree(t, src)
		// Give the tree distinct, old timestamps so that cp -a must set them.
		old := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
		must(t, os.Chtimes(filepath.Join(src, "pkg2/sub/f4.go"), old, old))
		must(t, os.Chmod(filepath.Join(src, "pkg3"), 0o750))

		run(t, "cp", "-a", src, p("cpa"))
		run(t, "diff", "-r", "--no-dereference", src, p("cpa"))
		sameMeta(t, src, p("cpa"), "pkg2/sub/f4.go", "pkg3", "run.sh", "link")
		if a, b := inoOf(t, p("cpa/hard")), inoOf(t, p("cpa/pkg1/sub/f2.go")); a != b {
			t.Fatalf("cp -a lost the hard link: inodes %d and %d", a, b)
		}

		// mv within the mount is a rename of the tree.
		must(t, os.Mkdir(p("moved"), 0o755))
		before := inoOf(t, p("cpa/pkg0"))
		run(t, "mv", p("cpa"), p("moved/tree"))
		if inoOf(t, p("moved/tree/pkg0")) != before {
			t.Fatal("mv within the mount changed inode numbers (copied instead of renamed)")
		}
		run(t, "diff", "-r", "--no-dereference", src, p("moved/tree"))
		// mv of a directory over an empty one, and of files between trees.
		must(t, os.Mkdir(p("moved/empty"), 0o755))
		// (syscall.Rename: os.Rename refuses to replace a directory.)
		must(t, syscall.Rename(p("moved/tree/pkg1"), p("moved/empty")))
		run(t, "mv", p("moved/empty"), p("moved/tree/pkg1"))
		run(t, "diff", "-r", "--no-dereference", src, p("moved/tree"))

		// mv across file systems: local → mount, then mount → local.
		local2 := filepath.Join(t.TempDir(), "copy")
		run(t, "cp", "-a", src, local2)
		run(t, "mv", local2, p("fromlocal"))
		if _, err := os.Stat(local2); !errors.Is(err, syscall.ENOENT) {
			t.Fatalf("mv to the mount left the source: %v", err)
		}
		run(t, "diff", "-r", "--no-dereference", src, p("fromlocal"))
		back := filepath.Join(t.TempDir(), "back")
		run(t, "mv", p("fromlocal"), back)
		if _, err := os.Stat(p("fromlocal")); !errors.Is(err, syscall.ENOENT) {
			t.Fatalf("mv from the mount left the source: %v", err)
		}
		run(t, "diff", "-r", "--no-dereference", src, back)

		run(t, "rm", "-rf", p("moved"))
		for _, gone := range []string{"moved", "cpa", "fromlocal"} {
			if _, err := os.Lstat(p(gone)); !errors.Is(err, syscall.ENOENT) {
				t.Fatalf("%s still there: %v", gone, err)
			}
		}
	})

	t.Run("sqlite3", func(t *testing.T) {
		needProgram(t, "sqlite3")
		must(t, os.Mkdir(p("db"), 0o755))
		for _, mode := range []string{"delete", "wal"} {
			db := p("db/" + mode + ".sqlite")
			sqlite(t, db, fmt.Sprintf(`PRAGMA journal_mode=%s;
CREATE TABLE t(id INTEGER PRIMARY KEY, name TEXT NOT NULL, blob BLOB);
BEGIN;
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n WHERE i < 5000)
INSERT INTO t SELECT i, 'row ' || i, randomblob(100) FROM n;
COMMIT;
CREATE INDEX t_name ON t(name);
BEGIN;
UPDATE t SET name = name || ' updated' WHERE id %% 2 = 0;
DELETE FROM t WHERE id > 4000;
COMMIT;
BEGIN;
DELETE FROM t;
ROLLBACK;`, mode))
			// A fresh process reads it back.
			got := sqlite(t, db, `SELECT count(*), sum(id), count(*) FILTER (WHERE name LIKE '% updated') FROM t;
PRAGMA integrity_check;`)
			if want := "4000|8002000|2000\nok\n"; got != want {
				t.Fatalf("%s: read back %q, want %q", mode, got, want)
			}
			if mode == "wal" {
				sqlite(t, db, "PRAGMA wal_checkpoint(TRUNCATE);")
			}
			// And a copy of the file, read off the mount, is the same database.
			local := filepath.Join(t.TempDir(), "copy.sqlite")
			run(t, "cp", db, local)
			if got := sqlite(t, local, "SELECT count(*), sum(id) FROM t; PRAGMA integrity_check;"); got != "4000|8002000\nok\n" {
				t.Fatalf("%s: local copy reads %q", mode, got)
			}
		}
	})

	// A file closed and at once unlinked: the kernel sends RELEASE
	// asynchronously, so the unlink may find the file still open and hide
	// it; the hidden name must still go away at the release.
	t.Run("unlink-after-close", func(t *testing.T) {
		must(t, os.Mkdir(p("uac"), 0o755))
		for i := range 200 {
			f := p(fmt.Sprintf("uac/f%d", i))
			must(t, os.WriteFile(f, []byte("x"), 0o644))
			must(t, os.Remove(f))
		}
		cl := newClient(t, c, c.Addrs())
		deadline := time.Now().Add(5 * time.Second)
		for {
			ents, err := cl.Readdir(context.Background(), "/uac")
			must(t, err)
			if len(ents) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("BUG: %d names left behind 5 s after unlink-after-close of 200 files (first %q): the unlink raced the release and the hidden name is never removed; rmdir then fails with ENOTEMPTY", len(ents), ents[0].GetName())
			}
			time.Sleep(50 * time.Millisecond)
		}
		must(t, syscall.Rmdir(p("uac")))
	})

	t.Run("source-tarball", func(t *testing.T) {
		tarball := sourceTarball(t)
		orig := filepath.Join(t.TempDir(), "orig")
		must(t, os.Mkdir(orig, 0o755))
		run(t, "tar", "-C", orig, "-xf", tarball)
		must(t, os.Mkdir(p("src"), 0o755))
		start := time.Now()
		run(t, "tar", "-C", p("src"), "-xf", tarball)
		t.Logf("unpacked %s onto the mount in %v", tarball, time.Since(start).Round(time.Millisecond))
		run(t, "diff", "-r", "--no-dereference", orig, p("src"))
		run(t, "rm", "-rf", p("src"))
	})
}

func needProgram(t *testing.T, name string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		t.Skipf("%s not installed (make test installs it on Debian)", name)
	}
}

// gitEnv isolates git from the machine's and the user's configuration.
func gitEnv(t *testing.T) []string {
	home := t.TempDir()
	return append(os.Environ(), "HOME="+home, "GIT_CONFIG_NOSYSTEM=1", "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com",
		"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com", "GIT_CONFIG_GLOBAL="+filepath.Join(home, "gitconfig"))
}

// gitRunner returns a function running git in dir and returning its stdout.
func gitRunner(t *testing.T, dir string) func(args ...string) string {
	env := gitEnv(t)
	return func(args ...string) string {
		t.Helper()
		return runIn(t, dir, env, "git", args...)
	}
}

// runIn runs a program in dir with env and returns its stdout; it fails
// the test, with stderr, when the program fails.
func runIn(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir, cmd.Env = dir, env
	cmd.Stdin = strings.NewReader("")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, tail(out, 2000), tail([]byte(stderr.String()), 2000))
	}
	return string(out)
}

// sqlite runs sql with sqlite3 on db and returns its output.
func sqlite(t *testing.T, db, sql string) string {
	t.Helper()
	cmd := exec.Command("sqlite3", "-bail", db)
	cmd.Stdin = strings.NewReader(sql)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("sqlite3 %s: %v\n%s", db, err, out)
	}
	// Drop journal_mode's echo ("delete", "wal").
	s := string(out)
	for _, echo := range []string{"delete\n", "wal\n"} {
		s = strings.TrimPrefix(s, echo)
	}
	return s
}

// devNullOK reports whether /dev/null is the character device it should
// be (a test environment was seen where something had replaced it with a
// regular file, which programs then read garbage from).
func devNullOK() bool {
	st, err := os.Stat(os.DevNull)
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func inoOf(t *testing.T, path string) uint64 {
	t.Helper()
	st, err := os.Lstat(path)
	must(t, err)
	return st.Sys().(*syscall.Stat_t).Ino
}

// sameMeta checks that cp -a kept modes and mtimes.
func sameMeta(t *testing.T, a, b string, rels ...string) {
	t.Helper()
	var mtimes []string
	for _, rel := range rels {
		sa, err := os.Lstat(filepath.Join(a, rel))
		must(t, err)
		sb, err := os.Lstat(filepath.Join(b, rel))
		must(t, err)
		if sa.Mode() != sb.Mode() {
			t.Errorf("cp -a: %s: mode %v, copy has %v", rel, sa.Mode(), sb.Mode())
		}
		if !sa.ModTime().Equal(sb.ModTime()) {
			mtimes = append(mtimes, fmt.Sprintf("%s: %v, copy %v", rel, sa.ModTime(), sb.ModTime()))
		}
	}
	if len(mtimes) > 0 {
		// NB: cp sets the times with futimens before close; the close
		// pushes the buffered data, which must not reset mtime.
		t.Errorf("BUG: cp -a did not keep mtimes (futimens before close is undone by the push at close):\n%s", strings.Join(mtimes, "\n"))
	}
}

// sourceTarball packs this repository's internal/ directory: with git
// archive from a checkout (the committed tree, steady while others edit
// the working tree), else with tar.
func sourceTarball(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	must(t, err)
	out := filepath.Join(t.TempDir(), "internal.tar")
	if _, err := exec.LookPath("git"); err == nil {
		cmd := exec.Command("git", "-C", root, "archive", "--format=tar", "-o", out, "HEAD", "internal")
		if b, err := cmd.CombinedOutput(); err == nil {
			return out
		} else {
			t.Logf("git archive: %v: %s; using tar", err, b)
		}
	}
	run(t, "tar", "-C", root, "-cf", out, "internal")
	return out
}
