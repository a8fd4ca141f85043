package cli

import (
	"bytes"
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/govfs/govfs/internal/certs"
)

func TestServerTLSFlags(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var logBuf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logBuf, nil))
	for _, tc := range []struct {
		f      serverTLSFlags
		listen string
		want   string // error substring; "" = no error
	}{
		{serverTLSFlags{}, "127.0.0.1:1", "--tls DIR is required"},
		{serverTLSFlags{dir: "x", insecure: true}, "127.0.0.1:1", "exclude each other"},
		{serverTLSFlags{onNetwork: true}, "127.0.0.1:1", "only goes with --insecure"},
		{serverTLSFlags{insecure: true}, "10.1.2.3:7000", "not a loopback address"},
		{serverTLSFlags{insecure: true}, ":7000", "not a loopback address"},
		{serverTLSFlags{insecure: true, onNetwork: true}, "10.1.2.3:7000", ""},
		{serverTLSFlags{insecure: true}, "127.0.0.1:7000", ""},
		{serverTLSFlags{insecure: true}, "localhost:7000", ""},
		{serverTLSFlags{insecure: true}, "[::1]:7000", ""},
		{serverTLSFlags{dir: filepath.Join(t.TempDir(), "none")}, "10.1.2.3:7000", "--tls"},
	} {
		sec, err := tc.f.security(ctx, "meta", log, tc.listen)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v on %s: %v", tc.f, tc.listen, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%+v on %s: error %v, want %q", tc.f, tc.listen, err, tc.want)
		case tc.want == "" && sec != nil:
			t.Errorf("%+v: --insecure gave a security", tc.f)
		}
	}
	if !strings.Contains(logBuf.String(), "INSECURE") {
		t.Error("--insecure did not log a warning")
	}
	// With a real certificate directory.
	ca, dir := filepath.Join(t.TempDir(), "ca"), filepath.Join(t.TempDir(), "node")
	var out bytes.Buffer
	if err := Run(ctx, []string{"admin", "ca", "init", ca}, &out, &out); err != nil {
		t.Fatal(err)
	}
	if err := Run(ctx, []string{"admin", "cert", "issue", "--ca", ca, "--node", "meta1", "--out", dir}, &out, &out); err != nil {
		t.Fatal(err)
	}
	sec, err := (&serverTLSFlags{dir: dir}).security(ctx, "meta", log, "10.1.2.3:7000")
	if err != nil || sec == nil || sec.Identity().String() != "node/meta1" {
		t.Fatalf("security from %s: %v %v", dir, sec, err)
	}
}

func TestAdminCertIssueChecksItsInput(t *testing.T) {
	ctx := context.Background()
	ca := filepath.Join(t.TempDir(), "ca")
	var out bytes.Buffer
	if err := Run(ctx, []string{"admin", "ca", "init", ca, "--cluster", "prod"}, &out, &out); err != nil {
		t.Fatal(err)
	}
	if err := Run(ctx, []string{"admin", "ca", "init", ca}, &out, &out); err == nil || !strings.Contains(err.Error(), "already holds a CA key") {
		t.Errorf("ca init over a CA: %v", err)
	}
	outDir := filepath.Join(t.TempDir(), "c")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--ca", ca, "--out", outDir}, "exactly one of"},
		{[]string{"--ca", ca, "--out", outDir, "--node", "a", "--chunk", "b"}, "exactly one of"},
		{[]string{"--ca", ca, "--out", outDir, "--client", "alice"}, "give --uid"},
		{[]string{"--ca", ca, "--out", outDir, "--client", "alice", "--uid", "12x"}, "--uid"},
		{[]string{"--ca", ca, "--out", outDir, "--node", "n1", "--uid", "0"}, "carries no uids"},
		{[]string{"--out", outDir, "--node", "n1"}, "--ca DIR and --out DIR are required"},
		{[]string{"--ca", ca, "--out", outDir, "--node", "n1", "--days", "0"}, "--days"},
	} {
		err := Run(ctx, append([]string{"admin", "cert", "issue"}, tc.args...), &out, &out)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("cert issue %q: error %v, want %q", tc.args, err, tc.want)
		}
	}
	if _, err := certs.Load(outDir, nil); err == nil {
		t.Error("a refused cert issue wrote a certificate")
	}
	out.Reset()
	if err := Run(ctx, []string{"admin", "cert", "issue", "--ca", ca, "--out", outDir, "--client", "alice", "--uid", "1000,1001", "--gid", "100", "--squash"}, &out, &out); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := Run(ctx, []string{"admin", "cert", "show", outDir}, &out, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"client/alice", "1000,1001", "100", "squash    true"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("cert show lacks %q:\n%s", want, out.String())
		}
	}
}

func TestClientTLSDir(t *testing.T) {
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == tlsEnv {
				return v
			}
			return ""
		}
	}
	if d, err := clientTLSDir("", false, env("")); err == nil || !strings.Contains(err.Error(), tlsEnv) || d != "" {
		t.Errorf("no certificate anywhere: %q %v", d, err)
	}
	if d, err := clientTLSDir("", false, env("/e")); err != nil || d != "/e" {
		t.Errorf("from the environment: %q %v", d, err)
	}
	if d, err := clientTLSDir("/f", false, env("/e")); err != nil || d != "/f" {
		t.Errorf("flag over environment: %q %v", d, err)
	}
	if d, err := clientTLSDir("", true, env("/e")); err != nil || d != "" {
		t.Errorf("--insecure with GOVFS_TLS set: %q %v", d, err)
	}
	if _, err := clientTLSDir("/f", true, env("")); err == nil {
		t.Error("--tls with --insecure accepted")
	}
}

func TestDebugListenLoopbackOnly(t *testing.T) {
	for addr, ok := range map[string]bool{"": true, "127.0.0.1:6060": true, "[::1]:6060": true, "localhost:6060": true,
		"0.0.0.0:6060": false, ":6060": false, "10.0.0.5:6060": false} {
		_, err := debugListen("meta", addr)
		if (err == nil) != ok {
			t.Errorf("--debug-listen %q: %v", addr, err)
		}
	}
}
