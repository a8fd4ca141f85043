package cli

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// defaultMountLog is where a background mount of dir logs unless
// --log-file says otherwise: /var/log/govfs for root, else the user's
// state directory ($XDG_STATE_HOME/govfs, ~/.local/state/govfs), named
// after the mount point (docs/fuse.md).
func defaultMountLog(dir string) string {
	name := "mount-" + strings.Trim(strings.ReplaceAll(dir, "/", "-"), "-") + ".log"
	if os.Geteuid() == 0 {
		return filepath.Join("/var/log/govfs", name)
	}
	if s := os.Getenv("XDG_STATE_HOME"); s != "" {
		return filepath.Join(s, "govfs", name)
	}
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".local", "state", "govfs", name)
	}
	return filepath.Join(os.TempDir(), "govfs-"+name)
}

// mountInBackground runs `govfs mount` again, without --background, as a
// process of its own session (so it outlives this one and the terminal),
// logging to logFile, and returns once dir is mounted — or with the end
// of the log if the background process exits first.
func mountInBackground(ctx context.Context, dir, logFile string, args []string, stdout io.Writer) error {
	if logFile == "" {
		logFile = defaultMountLog(dir)
		if err := os.MkdirAll(filepath.Dir(logFile), 0o700); err != nil {
			return fmt.Errorf("mount: log directory for the background mount: %w (give --log-file)", err)
		}
	}
	bin, err := os.Executable()
	if err != nil {
		return fmt.Errorf("mount: find this program to run it in the background: %w", err)
	}
	child := []string{"mount"}
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case a == "--background" || a == "-background" || strings.HasPrefix(a, "--background=") || strings.HasPrefix(a, "-background="):
		case a == "--log-file" || a == "-log-file":
			i++ // and its value
		case strings.HasPrefix(a, "--log-file=") || strings.HasPrefix(a, "-log-file="):
		default:
			child = append(child, a)
		}
	}
	log, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("mount: open the log file: %w", err)
	}
	defer log.Close()
	start, _ := log.Seek(0, io.SeekEnd)
	cmd := exec.Command(bin, child...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("mount: start the background process: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.After(60 * time.Second)
	for {
		if mounted(dir) {
			fmt.Fprintf(stdout, "GovFS mounted on %s by background process %d (log %s; 'govfs umount %s' to unmount)\n", dir, cmd.Process.Pid, logFile, dir)
			return nil
		}
		select {
		case err := <-exited:
			return fmt.Errorf("mount: the background process ended (%v) before %s was mounted; its log:\n%s", err, dir, logTail(logFile, start))
		case <-deadline:
			_ = cmd.Process.Kill()
			return fmt.Errorf("mount: %s was not mounted within a minute; stopped the background process; its log:\n%s", dir, logTail(logFile, start))
		case <-ctx.Done():
			_ = cmd.Process.Kill()
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// mounted reports whether a FUSE file system is mounted on dir, from
// /proc/self/mountinfo.
func mounted(dir string) bool {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent major:minor root mountpoint options ... - fstype source
		fields := strings.Fields(sc.Text())
		sep := slices.Index(fields, "-")
		if len(fields) < 5 || sep < 0 || sep+1 >= len(fields) {
			continue
		}
		if unescapeMountinfo(fields[4]) == dir && strings.HasPrefix(fields[sep+1], "fuse") {
			return true
		}
	}
	return false
}

// unescapeMountinfo undoes the octal escapes (\040 for a space, ...)
// mountinfo uses in paths.
func unescapeMountinfo(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && s[i+1] >= '0' && s[i+1] <= '3' {
			var v byte
			ok := true
			for _, c := range s[i+1 : i+4] {
				if c < '0' || c > '7' {
					ok = false
					break
				}
				v = v*8 + byte(c-'0')
			}
			if ok {
				b.WriteByte(v)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// logTail returns what the log got from offset start on (at most 2 KB).
func logTail(path string, start int64) string {
	b, err := os.ReadFile(path)
	if err != nil || int64(len(b)) < start {
		return "(log unreadable)"
	}
	b = b[start:]
	if len(b) > 2048 {
		b = b[len(b)-2048:]
	}
	return string(b)
}
