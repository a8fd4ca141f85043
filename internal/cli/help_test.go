package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestVersionAndHelp(t *testing.T) {
	run := func(args ...string) (string, string, error) {
		var out, errw bytes.Buffer
		err := Run(context.Background(), args, &out, &errw)
		return out.String(), errw.String(), err
	}
	if out, _, err := run("--version"); err != nil || !strings.HasPrefix(out, "govfs ") || !strings.Contains(out, "go1.") {
		t.Errorf("--version: %q %v", out, err)
	}
	if out, _, err := run("help", "umount"); err != nil || !strings.Contains(out, "Usage: govfs umount") {
		t.Errorf("help umount: %q %v", out, err)
	}
	if out, _, err := run("help"); err != nil || !strings.Contains(out, "Commands:") || !strings.Contains(out, "bench    benchmarks: meta data mount locks move ls") {
		t.Errorf("help: %q %v", out, err)
	}
	if _, errOut, err := run(); err == nil || !strings.Contains(err.Error(), "no command given") || !strings.Contains(errOut, "Commands:") {
		t.Errorf("no arguments: %q %v", errOut, err)
	}
	if _, _, err := run("help", "nope"); err == nil || !strings.Contains(err.Error(), `unknown command "nope"`) {
		t.Errorf("help nope: %v", err)
	}
	if _, _, err := run("help", "fs", "ls"); err == nil {
		t.Error("help with two names accepted")
	}
}

// TestHelpFlagToStdout: CMD --help prints the command's synopsis and
// flags on stdout and succeeds, for the server commands too.
func TestHelpFlagToStdout(t *testing.T) {
	for _, args := range [][]string{{"chunk", "--help"}, {"meta", "-h"}, {"dev", "--help"}, {"mount", "--help"}} {
		var out, errb bytes.Buffer
		if err := Run(context.Background(), args, &out, &errb); err != nil {
			t.Errorf("%v: %v", args, err)
		}
		if !strings.HasPrefix(out.String(), "Usage: govfs "+args[0]) || !strings.Contains(out.String(), "-") || errb.Len() != 0 {
			t.Errorf("%v: stdout %q, stderr %q", args, out.String()[:min(out.Len(), 80)], errb.String())
		}
	}
}

// TestSubcommandHelp: every fs and admin subcommand with a flag set
// prints its synopsis, description and an example before its flags.
func TestSubcommandHelp(t *testing.T) {
	for name := range subHelp {
		args := append(strings.Fields(name), "--help")
		var out, errb bytes.Buffer
		if err := Run(context.Background(), args, &out, &errb); err != nil {
			t.Errorf("%s --help: %v", name, err)
			continue
		}
		if !strings.HasPrefix(out.String(), "Usage: govfs "+name) || !strings.Contains(out.String(), "Example") || !strings.Contains(out.String(), "Flags:") {
			t.Errorf("%s --help printed %q (stderr %q)", name, out.String()[:min(out.Len(), 120)], errb.String())
		}
	}
}
