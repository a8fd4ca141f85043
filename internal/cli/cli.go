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
	"strings"
)

const usage = `govfs — a distributed file system with replicated metadata groups

Usage: govfs <command> [arguments]

Commands:
  dev     run a local cluster (3 metadata nodes) until Ctrl-C
  meta    run a metadata node
  chunk   run a chunk server (stores chunks; replication not built yet)
  fs      file operations: ls stat mkdir touch rm rmdir mv ln readlink
  mount   mount the cluster with FUSE (foreground); umount unmounts it
  admin   cluster administration: status
  bench   benchmarks: meta

Run 'govfs <command> -h' for a command's flags.`

// errUsage is returned after usage was printed for a bad invocation.
var errUsage = errors.New("bad usage (see above)")

// Run runs the govfs command line.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	err := run(ctx, args, stdout, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil // -h printed the usage: not a failure
	}
	return err
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintln(stderr, usage)
		return errUsage
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
	case "-h", "-help", "--help", "help":
		fmt.Fprintln(stdout, usage)
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
