package fusefs_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// pjdfstestMinOK is fewer than the 382 cases pjdfstest 0.2.2 passes on
// the mount: a run that passes far fewer did not really run.
const pjdfstestMinOK = 350

// TestPjdfstest runs pjdfstest (the POSIX conformance suite of FreeBSD,
// as rewritten in Rust: crates.io pjdfstest 0.2.2, which `make test`
// installs into .tools/ with cargo) on a mount with allow_other, as root
// (it switches to other users itself), twice: with default_permissions
// (the kernel checks, and the ministry checks every change again as the
// test's users: the two must agree), and without it (the ministry's
// checks alone, docs/security.md). Every case must pass or be skipped for
// a reason pjdfstest states (no remount, no second file system).
func TestPjdfstest(t *testing.T) {
	canMount(t)
	bin := findPjdfstest(t)
	if os.Geteuid() != 0 {
		t.Skip("pjdfstest changes users: run as root")
	}
	cfg := pjdfstestConfig(t)
	c := startCluster(t)
	// Both mounts from t: a subtest's longer temporary directory names
	// would push pjdfstest's socket paths past the 108 bytes allowed.
	withKernel := mountProc(t, c, "--allow-other", "--default-permissions")
	alone := mountProc(t, c, "--allow-other")
	t.Run("default_permissions", func(t *testing.T) { runPjdfstest(t, bin, cfg, withKernel, "pjd") })
	t.Run("ministry_checks_only", func(t *testing.T) { runPjdfstest(t, bin, cfg, alone, "pjd2") })
}

func runPjdfstest(t *testing.T, bin, cfg, mnt, sub string) {
	// The other users must reach the mount: t.TempDir makes 0700
	// directories on its way.
	for d := filepath.Dir(mnt); d != os.TempDir() && d != "/" && d != "."; d = filepath.Dir(d) {
		must(t, os.Chmod(d, 0o755))
	}
	dir := filepath.Join(mnt, sub) // both mounts show one cluster
	must(t, os.Mkdir(dir, 0o777))
	must(t, os.Chmod(dir, 0o777))

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-c", cfg, "-p", dir)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	runErr := cmd.Run()
	ok, skipped, failed := parsePjdfstest(out.String())
	t.Logf("pjdfstest: %d ok, %d skipped, %d failed in %v", ok, skipped, len(failed), time.Since(start).Round(time.Millisecond))
	if len(failed) > 0 {
		t.Errorf("pjdfstest failures:\n%s", strings.Join(failed, "\n"))
	}
	if runErr != nil && len(failed) == 0 {
		t.Errorf("pjdfstest: %v\n%s", runErr, tail(out.Bytes(), 4000))
	}
	if ok < pjdfstestMinOK {
		t.Errorf("pjdfstest passed %d cases, want at least %d:\n%s", ok, pjdfstestMinOK, tail(out.Bytes(), 4000))
	}
}

// findPjdfstest returns the pjdfstest binary: $PJDFSTEST, the repository's
// .tools/bin (make test), or $PATH.
func findPjdfstest(t *testing.T) string {
	if p := os.Getenv("PJDFSTEST"); p != "" {
		return p
	}
	if p, err := filepath.Abs("../../.tools/bin/pjdfstest"); err == nil {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath("pjdfstest"); err == nil {
		return p
	}
	t.Skip("pjdfstest not installed (make test installs it with cargo)")
	return ""
}

// pjdfstestConfig writes the runner's configuration: the features the
// mount has, and two existing unprivileged users for the permission cases.
func pjdfstestConfig(t *testing.T) string {
	var entries []string
	for _, c := range [][]string{{"nobody", "nogroup"}, {"nobody", "nobody"}, {"daemon", "daemon"}, {"bin", "bin"}} {
		if len(entries) == 2 {
			break
		}
		if _, err := user.Lookup(c[0]); err != nil {
			continue
		}
		if _, err := user.LookupGroup(c[1]); err != nil {
			continue
		}
		if len(entries) == 1 && strings.Contains(entries[0], `"`+c[0]+`"`) {
			continue
		}
		entries = append(entries, fmt.Sprintf("[%q, %q]", c[0], c[1]))
	}
	if len(entries) < 2 {
		t.Skip("pjdfstest needs two unprivileged users with groups (nobody, daemon or bin)")
	}
	conf := fmt.Sprintf(`[features]
posix_fallocate = {}
utime_now = {}
utimensat = {}
rename_ctime = {}

[settings]
naptime = 0.001
allow_remount = false

[dummy_auth]
entries = [%s]
`, strings.Join(entries, ", "))
	p := filepath.Join(t.TempDir(), "pjdfstest.toml")
	must(t, os.WriteFile(p, []byte(conf), 0o644))
	return p
}

var pjdLine = regexp.MustCompile(`^([a-z0-9_:]+)\s+(ok|FAILED|skipped)$`)

// parsePjdfstest counts the runner's verdicts; a failure comes with the
// lines that explain it, up to the backtrace.
func parsePjdfstest(out string) (ok, skipped int, failed []string) {
	sc := bufio.NewScanner(strings.NewReader(out))
	var cur []string
	collecting := false
	flush := func() {
		if cur != nil {
			failed = append(failed, strings.Join(cur, "\n  "))
			cur = nil
		}
	}
	for sc.Scan() {
		line := sc.Text()
		if m := pjdLine.FindStringSubmatch(strings.TrimSpace(line)); m != nil {
			flush()
			switch m[2] {
			case "ok":
				ok++
			case "skipped":
				skipped++
			case "FAILED":
				cur, collecting = []string{m[1]}, true
			}
			continue
		}
		if strings.HasPrefix(line, "Backtrace") {
			collecting = false
		}
		if collecting && len(cur) < 6 && strings.TrimSpace(line) != "" {
			cur = append(cur, strings.TrimSpace(line))
		}
	}
	flush()
	return ok, skipped, failed
}
