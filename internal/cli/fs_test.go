package cli

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/govfs/govfs/client"
	"github.com/govfs/govfs/internal/wire"
)

func TestModeString(t *testing.T) {
	tests := []struct {
		t    wire.FileType
		mode uint32
		want string
	}{
		{wire.FileType_DIRECTORY, 0o755, "drwxr-xr-x"},
		{wire.FileType_REGULAR, 0o644, "-rw-r--r--"},
		{wire.FileType_SYMLINK, 0o777, "lrwxrwxrwx"},
		{wire.FileType_FIFO, 0o600, "prw-------"},
		{wire.FileType_REGULAR, 0o4755, "-rwsr-xr-x"},
		{wire.FileType_REGULAR, 0o4644, "-rwSr--r--"},
		{wire.FileType_REGULAR, 0o2755, "-rwxr-sr-x"},
		{wire.FileType_REGULAR, 0o2745, "-rwxr-Sr-x"},
		{wire.FileType_DIRECTORY, 0o1777, "drwxrwxrwt"},
		{wire.FileType_DIRECTORY, 0o1776, "drwxrwxrwT"},
		{wire.FileType_FILE_TYPE_UNKNOWN, 0, "?---------"},
	}
	for _, tt := range tests {
		if got := modeString(tt.t, tt.mode); got != tt.want {
			t.Errorf("modeString(%v, %o) = %q, want %q", tt.t, tt.mode, got, tt.want)
		}
	}
}

var testTime = time.Date(2024, 3, 5, 14, 7, 9, 123456789, time.UTC).UnixNano()

func TestLongListing(t *testing.T) {
	entries := []lsEntry{
		{name: "dir", attr: &wire.Attr{Type: wire.FileType_DIRECTORY, Mode: 0o755, Nlink: 12, Uid: 0, Gid: 0, MtimeNs: testTime}},
		{name: "file", attr: &wire.Attr{Type: wire.FileType_REGULAR, Mode: 0o644, Nlink: 1, Uid: 1000, Gid: 100, Size: 12345, MtimeNs: testTime}},
		{name: "link", attr: &wire.Attr{Type: wire.FileType_SYMLINK, Mode: 0o777, Nlink: 1, Size: 4, MtimeNs: testTime}, target: "file"},
	}
	var b bytes.Buffer
	writeLongListing(&b, entries, time.UTC)
	want := "" +
		"drwxr-xr-x 12    0   0     0 2024-03-05 14:07 dir\n" +
		"-rw-r--r--  1 1000 100 12345 2024-03-05 14:07 file\n" +
		"lrwxrwxrwx  1    0   0     4 2024-03-05 14:07 link -> file\n"
	if b.String() != want {
		t.Fatalf("listing:\n%s\nwant:\n%s", b.String(), want)
	}
}

func TestStatOutput(t *testing.T) {
	a := &wire.Attr{Ino: 42, Type: wire.FileType_SYMLINK, Mode: 0o777, Nlink: 1, Size: 3, Uid: 7, Gid: 8,
		AtimeNs: testTime, MtimeNs: testTime, CtimeNs: testTime, Version: 9}
	var b bytes.Buffer
	writeStat(&b, "/l", a, "/x", time.UTC)
	want := "" +
		"  File: /l -> /x\n" +
		"  Size: 3               Type: symbolic link\n" +
		" Inode: 42              Links: 1\n" +
		"Access: (0777/lrwxrwxrwx)  Uid: 7  Gid: 8\n" +
		"Access: 2024-03-05 14:07:09.123456789 +0000\n" +
		"Modify: 2024-03-05 14:07:09.123456789 +0000\n" +
		"Change: 2024-03-05 14:07:09.123456789 +0000\n" +
		"Version: 9\n"
	if b.String() != want {
		t.Fatalf("stat:\n%s\nwant:\n%s", b.String(), want)
	}
}

func TestMetaAddrs(t *testing.T) {
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == metaEnv {
				return v
			}
			return ""
		}
	}
	got, err := metaAddrs("a:1, b:2,", env("c:3"))
	if err != nil || !slices.Equal(got, []string{"a:1", "b:2"}) {
		t.Fatalf("flag: %q, %v", got, err)
	}
	got, err = metaAddrs("", env("c:3,d:4"))
	if err != nil || !slices.Equal(got, []string{"c:3", "d:4"}) {
		t.Fatalf("env: %q, %v", got, err)
	}
	_, err = metaAddrs("", env(""))
	if err == nil || !strings.Contains(err.Error(), "--meta") || !strings.Contains(err.Error(), metaEnv) || !strings.Contains(err.Error(), "govfs dev") {
		t.Fatalf("missing: %v", err)
	}
}

func TestRunFSWithoutMeta(t *testing.T) {
	t.Setenv(metaEnv, "")
	var out, errOut bytes.Buffer
	err := runFS(context.Background(), []string{"ls", "/"}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), metaEnv) {
		t.Fatalf("runFS without meta = %v", err)
	}
}

func TestParseFS(t *testing.T) {
	var stderr bytes.Buffer
	inv, err := parseFS([]string{"--meta", "a:1,b:2", "ls", "-l", "/x"}, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if inv.global.meta != "a:1,b:2" || inv.sub != "ls" || !inv.long || !slices.Equal(inv.args, []string{"/x"}) {
		t.Fatalf("ls: %+v", inv)
	}
	inv, err = parseFS([]string{"ls"}, &stderr)
	if err != nil || !slices.Equal(inv.args, []string{"/"}) {
		t.Fatalf("ls default: %+v, %v", inv, err)
	}
	inv, err = parseFS([]string{"mkdir", "--meta", "c:3", "-p", "-m", "700", "/a/b", "/c"}, &stderr)
	if err != nil || !inv.parents || inv.mode != 0o700 || inv.global.meta != "c:3" || len(inv.args) != 2 {
		t.Fatalf("mkdir: %+v, %v", inv, err)
	}
	inv, err = parseFS([]string{"mkdir", "/a"}, &stderr)
	if err != nil || inv.mode != 0o755 || inv.parents {
		t.Fatalf("mkdir default: %+v, %v", inv, err)
	}
	inv, err = parseFS([]string{"mv", "--no-replace", "/a", "/b"}, &stderr)
	if err != nil || !inv.noReplace {
		t.Fatalf("mv: %+v, %v", inv, err)
	}
	inv, err = parseFS([]string{"ln", "-s", "t", "/l"}, &stderr)
	if err != nil || !inv.symbolic {
		t.Fatalf("ln: %+v, %v", inv, err)
	}
	inv, err = parseFS([]string{"rm", "-r", "-f", "/a"}, &stderr)
	if err != nil || !inv.recursive || !inv.force {
		t.Fatalf("rm: %+v, %v", inv, err)
	}
	inv, err = parseFS([]string{"--timeout", "3s", "stat", "/a"}, &stderr)
	if err != nil || inv.global.timeout != 3*time.Second {
		t.Fatalf("timeout: %+v, %v", inv, err)
	}

	// --inline-max: the client's default, none with 0, refused past
	// the ministry's limit or below 0 before anything is sent.
	for _, c := range []struct {
		args []string
		want int64 // client.Config.InlineMax; 1 = an error
	}{
		{[]string{"--meta", "a:1", "--insecure", "stat", "/a"}, client.DefaultInlineMax},
		{[]string{"--meta", "a:1", "--insecure", "--inline-max", "0", "stat", "/a"}, -1},
		{[]string{"--meta", "a:1", "--insecure", "--inline-max", "65536", "stat", "/a"}, 65536},
		{[]string{"--meta", "a:1", "--insecure", "--inline-max", "65537", "stat", "/a"}, 1},
		{[]string{"--meta", "a:1", "--insecure", "--inline-max", "-5", "stat", "/a"}, 1},
	} {
		inv, err := parseFS(c.args, &stderr)
		if err != nil {
			t.Fatalf("parseFS(%q): %v", c.args, err)
		}
		cfg, err := inv.global.clientConfig(func(string) string { return "" })
		switch {
		case c.want == 1 && (err == nil || !strings.Contains(err.Error(), "--inline-max")):
			t.Errorf("%q: clientConfig = %v, want an error naming --inline-max", c.args, err)
		case c.want != 1 && (err != nil || cfg.InlineMax != c.want):
			t.Errorf("%q: InlineMax = %d, %v; want %d", c.args, cfg.InlineMax, err, c.want)
		}
	}

	bad := [][]string{
		{},
		{"frob"},
		{"mv", "/a"},
		{"mv", "/a", "/b", "/c"},
		{"stat"},
		{"mkdir", "-m", "9", "/a"},
		{"mkdir", "-m", "17777", "/a"},
		{"ls", "-z"},
	}
	for _, args := range bad {
		if _, err := parseFS(args, &stderr); err == nil {
			t.Errorf("parseFS(%q) succeeded", args)
		}
	}
	if _, err := parseFS([]string{"-h"}, &stderr); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("parseFS(-h) = %v", err)
	}
}

func TestFSErrorMessage(t *testing.T) {
	r := &fsRunner{sub: "mkdir"}
	cerr := &client.Error{Op: "mkdir", Path: "/a", Err: syscall.EEXIST}
	err := r.fail("/a", cerr)
	if err.Error() != "fs mkdir /a: file exists" {
		t.Fatalf("message = %q", err.Error())
	}
	if !errors.Is(err, syscall.EEXIST) {
		t.Fatalf("%v does not wrap EEXIST", err)
	}
}
