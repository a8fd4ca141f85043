package certs

import (
	"context"
	"crypto/tls"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/govfs/govfs/internal/wire"
)

func TestIdentityRoundTrip(t *testing.T) {
	ca := filepath.Join(t.TempDir(), "ca")
	now := time.Now()
	if err := InitCA(ca, "test", 0, now); err != nil {
		t.Fatal(err)
	}
	if err := InitCA(ca, "test", 0, now); err == nil || !strings.Contains(err.Error(), "already holds a CA key") {
		t.Fatalf("second InitCA on one directory: %v", err)
	}
	for _, id := range []Identity{
		{Role: RoleNode, Name: "node1"},
		{Role: RoleChunk, Name: "rack7-host3"},
		{Role: RoleClient, Name: "alice", UIDs: []uint32{1000, 1001}, GIDs: []uint32{100}, Squash: true},
		{Role: RoleAdmin, Name: "mounthost", AnyUID: true, AnyGID: true},
	} {
		b, err := Issue(ca, id, 0, now)
		if err != nil {
			t.Fatalf("%v: %v", id, err)
		}
		dir := filepath.Join(t.TempDir(), id.Name)
		if err := b.Write(dir); err != nil {
			t.Fatal(err)
		}
		st, err := Load(dir, nil)
		if err != nil {
			t.Fatalf("%v: %v", id, err)
		}
		got := st.Identity()
		if got.String() != id.String() || got.Squash != id.Squash || got.AnyUID != id.AnyUID || got.AnyGID != id.AnyGID ||
			len(got.UIDs) != len(id.UIDs) || len(got.GIDs) != len(id.GIDs) {
			t.Errorf("identity %+v came back as %+v", id, got)
		}
		for _, u := range id.UIDs {
			if !got.AllowsUID(u) {
				t.Errorf("%v: uid %d not allowed", id, u)
			}
		}
		if got.AllowsUID(4242) != id.AnyUID {
			t.Errorf("%v: AllowsUID(4242) = %v", id, got.AllowsUID(4242))
		}
	}
}

func TestVouch(t *testing.T) {
	user := Identity{Role: RoleClient, Name: "alice", UIDs: []uint32{1000}, GIDs: []uint32{100, 27}}
	cred := &wire.Cred{Uid: 1000, Gid: 100, Groups: []uint32{27, 4, 0}}
	if err := user.Vouch(cred); err != nil || len(cred.Groups) != 1 || cred.Groups[0] != 27 {
		t.Errorf("alice's groups: %v %v, want only 27 kept", cred, err)
	}
	for _, bad := range []*wire.Cred{{Uid: 0, Gid: 100}, {Uid: 1001, Gid: 100}, {Uid: 1000, Gid: 0}} {
		if err := user.Vouch(bad); err == nil {
			t.Errorf("alice's certificate vouched for %v", bad)
		}
	}
	host := Identity{Role: RoleClient, Name: "h", AnyUID: true, AnyGID: true, Squash: true}
	for _, tc := range []struct{ in, want *wire.Cred }{
		{&wire.Cred{Uid: 0, Gid: 0, Groups: []uint32{0, 5}}, &wire.Cred{Uid: NobodyID, Gid: NobodyID}},
		{&wire.Cred{Uid: 1000, Gid: 0, Groups: []uint32{0, 5}}, &wire.Cred{Uid: 1000, Gid: NobodyID, Groups: []uint32{5}}},
		{&wire.Cred{Uid: 1000, Gid: 100}, &wire.Cred{Uid: 1000, Gid: 100}},
	} {
		got := proto.Clone(tc.in).(*wire.Cred)
		if err := host.Vouch(got); err != nil || !proto.Equal(got, tc.want) {
			t.Errorf("squash %v: %v %v, want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestIssueRefusesBadIdentities(t *testing.T) {
	ca := filepath.Join(t.TempDir(), "ca")
	if err := InitCA(ca, "test", 0, time.Now()); err != nil {
		t.Fatal(err)
	}
	for _, id := range []Identity{
		{Role: "root", Name: "x"},
		{Role: RoleClient, Name: ""},
		{Role: RoleClient, Name: "a/b"},
		{Role: RoleClient, Name: strings.Repeat("n", 129)},
		{Role: RoleNode, Name: "n1", UIDs: []uint32{0}},
		{Role: RoleChunk, Name: "c1", Squash: true},
	} {
		if _, err := Issue(ca, id, 0, time.Now()); err == nil {
			t.Errorf("Issue(%+v) succeeded", id)
		}
	}
	if _, err := Issue(filepath.Join(t.TempDir(), "nothing"), Identity{Role: RoleNode, Name: "n"}, 0, time.Now()); err == nil ||
		!strings.Contains(err.Error(), "ca init") {
		t.Errorf("Issue without a CA: %v", err)
	}
	if _, _, err := ParseIDList("1,x"); err == nil {
		t.Error("ParseIDList accepted 1,x")
	}
}

func TestLoadRefusesForeignAndExpired(t *testing.T) {
	now := time.Now()
	caA, caB := filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")
	for _, d := range []string{caA, caB} {
		if err := InitCA(d, filepath.Base(d), 0, now); err != nil {
			t.Fatal(err)
		}
	}
	id := Identity{Role: RoleNode, Name: "n1"}
	fromB, _ := Issue(caB, id, 0, now)
	fromA, _ := Issue(caA, id, 0, now)
	dir := filepath.Join(t.TempDir(), "mixed")
	if err := (Bundle{CA: fromA.CA, Cert: fromB.Cert, Key: fromB.Key}).Write(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir, nil); err == nil || !strings.Contains(err.Error(), "does not verify") {
		t.Errorf("Load of another CA's certificate: %v", err)
	}
	old, _ := Issue(caA, id, time.Hour, now.Add(-3*time.Hour))
	dir = filepath.Join(t.TempDir(), "old")
	_ = old.Write(dir)
	if _, err := Load(dir, nil); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Errorf("Load of an expired certificate: %v", err)
	}
	// Key of one certificate, certificate of another.
	dir = filepath.Join(t.TempDir(), "mismatch")
	_ = (Bundle{CA: fromA.CA, Cert: fromA.Cert, Key: fromB.Key}).Write(dir)
	if _, err := Load(dir, nil); err == nil {
		t.Error("Load of a certificate with another's key succeeded")
	}
}

// TestRotationWithoutRestart: a server and a client keep a connection
// working while the server's certificate is reissued into its directory
// and reloaded; new handshakes present the new certificate.
func TestRotationWithoutRestart(t *testing.T) {
	now := time.Now()
	ca := filepath.Join(t.TempDir(), "ca")
	if err := InitCA(ca, "test", 0, now); err != nil {
		t.Fatal(err)
	}
	issueTo := func(dir string, id Identity) {
		b, err := Issue(ca, id, 0, now)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Write(dir); err != nil {
			t.Fatal(err)
		}
	}
	srvDir, cliDir := filepath.Join(t.TempDir(), "srv"), filepath.Join(t.TempDir(), "cli")
	issueTo(srvDir, Identity{Role: RoleNode, Name: "old"})
	issueTo(cliDir, Identity{Role: RoleClient, Name: "c", UIDs: []uint32{1}})
	srv, err := Load(srvDir, nil)
	if err != nil {
		t.Fatal(err)
	}
	cli, err := Load(cliDir, nil)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := tls.Listen("tcp", "127.0.0.1:0", srv.ServerConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 1)
				for {
					if _, err := c.Read(buf); err != nil {
						return
					}
					if _, err := c.Write(buf); err != nil {
						return
					}
				}
			}()
		}
	}()
	peerName := func(cfg *tls.Config) (string, net.Conn) {
		c, err := tls.Dial("tcp", lis.Addr().String(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write([]byte{1}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Read(make([]byte, 1)); err != nil {
			t.Fatal(err)
		}
		id, err := IdentityOf(c.ConnectionState().PeerCertificates[0])
		if err != nil {
			t.Fatal(err)
		}
		return id.Name, c
	}
	name, first := peerName(cli.ClientConfig())
	defer first.Close()
	if name != "old" {
		t.Fatalf("server presented %q", name)
	}
	issueTo(srvDir, Identity{Role: RoleNode, Name: "new"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go srv.Watch(ctx, 10*time.Millisecond, func(err error) { t.Error(err) })
	deadline := time.Now().Add(5 * time.Second)
	for srv.Identity().Name != "new" {
		if time.Now().After(deadline) {
			t.Fatal("Watch did not reload the reissued certificate")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// A fresh configuration (no session to resume) meets the new one.
	if name, c := peerName(cli.ClientConfig()); name != "new" {
		t.Errorf("after reload the server presented %q", name)
	} else {
		c.Close()
	}
	// One configuration dialling twice resumes its first session (the
	// ClientSessionCache rpc.Security keeps for all its connections).
	shared := cli.ClientConfig()
	for range 2 {
		_, c := peerName(shared)
		c.Close()
	}
	// A reload (rotation) ends resumption of sessions made before it.
	if err := srv.Reload(); err != nil {
		t.Fatal(err)
	}
	_, c := peerName(shared)
	c.Close()
	if served, _, _ := srv.Handshakes(); served != 5 {
		t.Errorf("server counted %d handshakes, want 5", served)
	}
	if _, dialed, resumed := cli.Handshakes(); dialed != 5 || resumed != 1 {
		t.Errorf("client counted %d handshakes (%d resumed), want 5 (1: none after the reload)", dialed, resumed)
	}
	// The connection made before the rotation still works.
	if _, err := first.Write([]byte{2}); err != nil {
		t.Fatal(err)
	}
	if _, err := first.Read(make([]byte, 1)); err != nil {
		t.Fatalf("old connection broke by the rotation: %v", err)
	}
	// A client certificate (no server role) is refused as a server.
	cliLis, err := tls.Listen("tcp", "127.0.0.1:0", cli.ServerConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer cliLis.Close()
	go func() {
		c, err := cliLis.Accept()
		if err == nil {
			_ = c.(*tls.Conn).Handshake()
			c.Close()
		}
	}()
	if c, err := tls.Dial("tcp", cliLis.Addr().String(), srv.ClientConfig()); err == nil || !strings.Contains(err.Error(), "incompatible key usage") {
		// (a client certificate has no server usage; were it forged
		// with one, VerifyServer's role check refuses it too)
		if c != nil {
			c.Close()
		}
		t.Errorf("dialing a server with a client certificate: %v", err)
	}
}
