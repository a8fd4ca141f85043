package e2e

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/govfs/govfs/client"
	"github.com/govfs/govfs/internal/certs"
	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/testcluster"
	"github.com/govfs/govfs/internal/wire"
)

// userClient connects with a certificate issued for id, acting as cred.
func userClient(t *testing.T, c *testcluster.ProcCluster, id certs.Identity, cred *wire.Cred) (*client.Client, string) {
	t.Helper()
	b, err := certs.Issue(c.CADir(), id, 0, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), id.Name)
	if err := b.Write(dir); err != nil {
		t.Fatal(err)
	}
	cfg := client.DefaultConfig()
	cfg.MetaAddrs, cfg.TLSDir, cfg.Cred, cfg.OpTimeout = c.Addrs(), dir, cred, 20*time.Second
	cl, err := client.New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl, dir
}

func wantErrno(t *testing.T, what string, err error, want syscall.Errno) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Errorf("%s: %v, want %v", what, err, want)
	}
}

// TestPermissionsThroughLibraryAndCLI: users holding their own
// certificates, through the Go library and the CLI, get EACCES and EPERM
// from the ministry for the rules of namespace/perm.go; a certificate
// cannot act for a uid it does not list; root squash turns root into
// nobody. Refused changes leave the tree as it was.
func TestPermissionsThroughLibraryAndCLI(t *testing.T) {
	c := testcluster.StartForTest(t, 60*time.Second, testcluster.ProcConfig{Binary: binary, Dir: t.TempDir(), Nodes: 3, Tick: 50 * time.Millisecond})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	admin := newClient(t, c, c.Addrs(), 30*time.Second) // admin certificate, acting as root
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(admin.Mkdir(ctx, "/home", 0o755))
	must(admin.Mkdir(ctx, "/home/alice", 0o750))
	must(admin.Mkdir(ctx, "/tmp", 0o777))
	must(admin.Mkdir(ctx, "/rootonly", 0o755))
	for path, set := range map[string]func() error{
		"/home/alice": func() error { return admin.Chown(ctx, "/home/alice", 1000, 100) },
		"/tmp":        func() error { return admin.Chmod(ctx, "/tmp", 0o1777) },
	} {
		if err := set(); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
	}

	alice, aliceDir := userClient(t, c, certs.Identity{Role: certs.RoleClient, Name: "alice", UIDs: []uint32{1000}, GIDs: []uint32{100}},
		&wire.Cred{Uid: 1000, Gid: 100})
	bob, _ := userClient(t, c, certs.Identity{Role: certs.RoleClient, Name: "bob", UIDs: []uint32{1001}, GIDs: []uint32{101}},
		&wire.Cred{Uid: 1001, Gid: 101})

	// Alice in her home and /tmp; not in /rootonly.
	must(alice.Create(ctx, "/home/alice/notes", 0o600, true))
	must(alice.Create(ctx, "/tmp/alice.txt", 0o644, true))
	if a, err := alice.Stat(ctx, "/tmp/alice.txt"); err != nil || a.GetUid() != 1000 || a.GetGid() != 100 {
		t.Fatalf("alice's file: %v %v, want owner 1000:100", a, err)
	}
	_, err := alice.Mkdir(ctx, "/rootonly/x", 0o755)
	wantErrno(t, "alice mkdir in a root 0755 directory", err, syscall.EACCES)
	wantErrno(t, "alice chmod of root's directory", alice.Chmod(ctx, "/rootonly", 0o777), syscall.EPERM)
	wantErrno(t, "alice giving her file away", alice.Chown(ctx, "/tmp/alice.txt", 1001, 100), syscall.EPERM)

	// Bob: not in alice's home (0750, not his group); not deleting or
	// renaming alice's file in the sticky /tmp; his own is his.
	_, err = bob.Create(ctx, "/home/alice/bobs", 0o644, true)
	wantErrno(t, "bob creating in alice's home", err, syscall.EACCES)
	wantErrno(t, "bob removing alice's file from sticky /tmp", bob.Remove(ctx, "/tmp/alice.txt"), syscall.EPERM)
	wantErrno(t, "bob renaming alice's file in sticky /tmp", bob.Rename(ctx, "/tmp/alice.txt", "/tmp/mine.txt", 0), syscall.EPERM)
	wantErrno(t, "bob chmod of alice's file", bob.Chmod(ctx, "/tmp/alice.txt", 0o666), syscall.EPERM)
	must(bob.Create(ctx, "/tmp/bob.txt", 0o644, true))
	if err := bob.Remove(ctx, "/tmp/bob.txt"); err != nil {
		t.Fatal(err)
	}

	// Reads: bob may neither look up nor list inside alice's home (0750,
	// not his group), nor read her user attributes on a 0600 file; alice
	// may. Attributes of what he can reach need no permission.
	if err := alice.SetXattr(ctx, "/home/alice/notes", "user.tag", []byte("mine"), 0); err != nil {
		t.Fatal(err)
	}
	_, err = bob.Stat(ctx, "/home/alice/notes")
	wantErrno(t, "bob looking up in alice's home", err, syscall.EACCES)
	_, err = bob.Readdir(ctx, "/home/alice")
	wantErrno(t, "bob listing alice's home", err, syscall.EACCES)
	must(admin.Create(ctx, "/tmp/shared", 0o600, true))
	if err := admin.SetXattr(ctx, "/tmp/shared", "user.tag", []byte("root's"), 0); err != nil {
		t.Fatal(err)
	}
	_, err = bob.GetXattr(ctx, "/tmp/shared", "user.tag")
	wantErrno(t, "bob reading a user attribute of root's 0600 file", err, syscall.EACCES)
	if _, err := bob.Stat(ctx, "/tmp/shared"); err != nil {
		t.Errorf("bob's stat of a file he can reach: %v", err)
	}
	if ents, err := alice.Readdir(ctx, "/home/alice"); err != nil || len(ents) != 1 {
		t.Errorf("alice listing her home: %v %v", ents, err)
	}
	if v, err := alice.GetXattr(ctx, "/home/alice/notes", "user.tag"); err != nil || string(v) != "mine" {
		t.Errorf("alice reading her attribute: %q %v", v, err)
	}

	// In a setgid directory of a group alice's certificate does not list,
	// her new directory takes that group (as the mount asks for it).
	must(admin.Mkdir(ctx, "/proj", 0o777))
	if err := admin.Chown(ctx, "/proj", 0, 50); err != nil {
		t.Fatal(err)
	}
	if err := admin.Chmod(ctx, "/proj", 0o2777); err != nil {
		t.Fatal(err)
	}
	proj := mustIno(t, ctx, admin, "/proj")
	pa, err := alice.MakeNode(ctx, proj, "x", client.NodeSpec{Type: wire.FileType_DIRECTORY, Mode: 0o2755, Cred: &wire.Cred{Uid: 1000, Gid: 50}})
	if err != nil || pa.GetGid() != 50 || pa.GetUid() != 1000 {
		t.Fatalf("alice's directory in a setgid group-50 directory: %v %v", pa, err)
	}

	// Alice's certificate does not let her act as root or as bob.
	for _, cred := range []*wire.Cred{{Uid: 0, Gid: 0}, {Uid: 1001, Gid: 101}, {Uid: 1000, Gid: 0}} {
		_, err := alice.Mkdir(client.WithCaller(ctx, cred), "/tmp/as-other", 0o755)
		wantErrno(t, "alice's certificate acting as "+cred.String(), err, syscall.EACCES)
		if err != nil && !strings.Contains(err.Error(), "certificate client/alice") {
			t.Errorf("refusal does not name the certificate: %v", err)
		}
	}

	// Root squash: a host certificate for every uid, squashing root.
	squashed, _ := userClient(t, c, certs.Identity{Role: certs.RoleClient, Name: "host7", AnyUID: true, AnyGID: true, Squash: true},
		&wire.Cred{Uid: 0, Gid: 0})
	_, err = squashed.Mkdir(ctx, "/rootonly/squashed", 0o755)
	wantErrno(t, "squashed root mkdir in a root 0755 directory", err, syscall.EACCES)
	a, err := squashed.Mkdir(ctx, "/tmp/by-squashed-root", 0o755)
	if err != nil || a.GetUid() != 65534 || a.GetGid() != 65534 {
		t.Fatalf("squashed root's directory: %v %v, want owned by 65534:65534", a, err)
	}
	// The host acts for its users as they are.
	a, err = squashed.Mkdir(client.WithCaller(ctx, &wire.Cred{Uid: 1000, Gid: 100}), "/home/alice/from-host", 0o755)
	if err != nil || a.GetUid() != 1000 {
		t.Fatalf("host certificate acting for alice: %v %v", a, err)
	}

	// The CLI as alice (run as uid 1000 when we are root): the same
	// answers, in words. Her certificate and the binary go where she can
	// read them.
	base, err := os.MkdirTemp("", "govfs-perm-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	bin := filepath.Join(base, "govfs")
	if data, err := os.ReadFile(binary); err != nil {
		t.Fatal(err)
	} else if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	certDir := filepath.Join(base, "alice")
	if err := os.CopyFS(certDir, os.DirFS(aliceDir)); err != nil {
		t.Fatal(err)
	}
	cli := func(args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, bin, append([]string{"fs", "--meta", strings.Join(c.Addrs(), ","), "--tls", certDir}, args...)...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		// The CLI acts as the process's uid; run it as alice.
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 1000, Gid: 100}}
		err := cmd.Run()
		return out.String(), err
	}
	if os.Geteuid() == 0 {
		if err := os.Chmod(base, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"", certs.CAFile, certs.CertFile, certs.KeyFile} {
			if err := os.Chown(filepath.Join(certDir, f), 1000, 100); err != nil {
				t.Fatal(err)
			}
		}
		if out, err := cli("mkdir", "/rootonly/cli"); err == nil || !strings.Contains(out, "permission denied") {
			t.Errorf("govfs fs mkdir as alice in /rootonly: %v\n%s", err, out)
		}
		if out, err := cli("mkdir", "/home/alice/cli"); err != nil {
			t.Errorf("govfs fs mkdir as alice in her home: %v\n%s", err, out)
		}
		if out, err := cli("rm", "/tmp/by-squashed-root"); err == nil || !strings.Contains(out, "operation not permitted") {
			t.Errorf("govfs fs rm of nobody's directory in sticky /tmp as alice: %v\n%s", err, out)
		}
	}

	// Nothing refused changed the tree.
	ents, err := admin.ReaddirAll(ctx, mustIno(t, ctx, admin, "/rootonly"), client.Linearizable())
	if err != nil || len(ents) != 0 {
		t.Errorf("/rootonly after refused creates: %v %v", ents, err)
	}
	for _, p := range []string{"/tmp/alice.txt", "/tmp/by-squashed-root"} {
		if _, err := admin.Stat(ctx, p); err != nil {
			t.Errorf("%s after refused deletes: %v", p, err)
		}
	}
	if a, err := admin.Stat(ctx, "/tmp/alice.txt"); err != nil || a.GetMode()&0o7777 != 0o644 || a.GetUid() != 1000 {
		t.Errorf("/tmp/alice.txt after refused chmod and chown: %v %v", a, err)
	}
}

func mustIno(t *testing.T, ctx context.Context, cl *client.Client, path string) ids.Ino {
	t.Helper()
	a, err := cl.Stat(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	return ids.Ino(a.GetIno())
}
