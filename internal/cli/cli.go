// Package cli implements the govfs subcommands. Commands take a context,
// their arguments and output writers, and return an error that main prints
// before exiting non-zero. Only this package (and cmd) reads flags and
// environment variables.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"runtime/debug"
	"slices"
	"strings"
)

const usage = `govfs — a distributed file system with replicated metadata groups

Usage: govfs <command> [arguments]

Commands:
  dev      run a local cluster (metadata nodes, 3 chunk servers, optionally
           mounted) until Ctrl-C
  meta     run a metadata node (form a cluster with --peers, or --join one)
  chunk    run a chunk server
  fs       file operations: ls stat mkdir touch rm rmdir mv ln readlink cat
           put get append
  mount    mount the cluster with FUSE (foreground, or --background)
  umount   unmount a govfs mount
  admin    cluster administration: status ministries nodes assign unassign
  bench    benchmarks: meta data mount locks move ls
  version  print the version and the commit this binary was built from
  help     help [command]: a command's usage and flags

Run 'govfs help <command>' (or 'govfs <command> -h') for a command's flags.`

// errUsage is returned after usage was printed for a bad invocation.
var errUsage = errors.New("bad usage (see above)")

// Run runs the govfs command line.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	// Asked for help (govfs CMD ... -h): the usage is the output, on
	// stdout, as govfs help CMD prints it.
	if len(args) > 1 && slices.ContainsFunc(args[1:], func(a string) bool { return a == "-h" || a == "-help" || a == "--help" }) {
		stderr = stdout
	}
	err := run(ctx, args, stdout, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil // -h printed the usage: not a failure
	}
	return err
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintln(stderr, usage)
		return errors.New("no command given: choose one of the commands listed above")
	}
	switch args[0] {
	case "meta":
		return runMeta(ctx, args[1:], stdout, stderr)
	case "chunk":
		return runChunk(ctx, args[1:], stdout, stderr)
	case "dev":
		return runDev(ctx, args[1:], stdout, stderr)
	case "fs":
		return runFS(ctx, args[1:], stdout, stderr)
	case "admin":
		return runAdmin(ctx, args[1:], stdout, stderr)
	case "mount":
		return runMount(ctx, args[1:], stdout, stderr)
	case "umount":
		return runUmount(ctx, args[1:], stdout, stderr)
	case "bench":
		return runBench(ctx, args[1:], stdout, stderr)
	case "-h", "-help", "--help":
		fmt.Fprintln(stdout, usage)
		return nil
	case "help":
		if len(args) == 1 {
			fmt.Fprintln(stdout, usage)
			return nil
		}
		if len(args) > 2 || args[1] == "help" || strings.HasPrefix(args[1], "-") {
			fmt.Fprintln(stderr, usage)
			return fmt.Errorf("help: give one command name, e.g. govfs help fs")
		}
		if args[1] == "version" {
			fmt.Fprintln(stdout, "Usage: govfs version (or govfs --version)\n\nPrints the module version, the commit and the Go version of this binary.")
			return nil
		}
		// The command's own -h, printed to stdout: it is what was asked.
		return run(ctx, []string{args[1], "-h"}, stdout, stdout)
	case "version", "-version", "--version":
		fmt.Fprintln(stdout, versionString())
		return nil
	default:
		fmt.Fprintln(stderr, usage)
		return fmt.Errorf("unknown command %q", args[0])
	}
}

func newLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	switch strings.ToLower(level) {
	case "debug":
		l = slog.LevelDebug
	case "info", "":
		l = slog.LevelInfo
	case "warn":
		l = slog.LevelWarn
	case "error":
		l = slog.LevelError
	default:
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}

// versionString describes the binary from its build information: the
// module version (devel for a build from a checkout), the commit and
// whether the tree had uncommitted changes, and the Go version.
func versionString() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "govfs (no build information in this binary)"
	}
	commit, when, dirty := "unknown", "", false
	for _, st := range bi.Settings {
		switch st.Key {
		case "vcs.revision":
			commit = st.Value
		case "vcs.time":
			when = st.Value
		case "vcs.modified":
			dirty = st.Value == "true"
		}
	}
	out := fmt.Sprintf("govfs %s, commit %s", bi.Main.Version, commit)
	if dirty {
		out += " (with uncommitted changes)"
	}
	if when != "" {
		out += ", committed " + when
	}
	return out + ", " + bi.GoVersion
}
