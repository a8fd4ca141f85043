package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/govfs/govfs/internal/certs"
	"github.com/govfs/govfs/internal/chunktoken"
	"github.com/govfs/govfs/internal/dataproto"
	"github.com/govfs/govfs/internal/testcluster"
	"github.com/govfs/govfs/internal/wire"
)

// TestChunkTokens: chunk servers of a TLS cluster serve a client only
// with a chunk access token from the ministry, for that chunk, that
// certificate and that access, not expired (issue 13 item 3). Tokens
// live 4 s here, so they expire, and the signing key rotates, within the
// test; the library renews them and keeps working.
func TestChunkTokens(t *testing.T) {
	const lifetime = 4 * time.Second
	c := testcluster.StartForTest(t, 90*time.Second, testcluster.ProcConfig{Binary: binary, Dir: t.TempDir(), Nodes: 3, Chunks: 3,
		Tick: 50 * time.Millisecond, ChunkArgs: []string{"--chunk-size", "1048576"},
		ExtraArgs: []string{"--chunk-token-lifetime", lifetime.String()}})
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	host := newClient(t, c, c.Addrs(), 30*time.Second)
	victimData := make([]byte, 1<<20+4096)
	_, _ = rand.Read(victimData)
	if _, err := host.WriteFile(ctx, "/victim", bytes.NewReader(victimData), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := host.WriteFile(ctx, "/secret", bytes.NewReader(bytes.Repeat([]byte("s"), 1<<20+1)), 0o600); err != nil {
		t.Fatal(err)
	}

	// mallory holds a certificate for uid 1000: she may read /victim
	// (0644, root's) but not write it, and may not read /secret (0600).
	mallory := certs.Identity{Role: certs.RoleClient, Name: "mallory", UIDs: []uint32{1000}, GIDs: []uint32{1000}}
	malloryCl, _ := userClient(t, c, mallory, &wire.Cred{Uid: 1000, Gid: 1000})
	// Her raw requests hold a certificate of the same identity.
	mb, err := certs.Issue(c.CADir(), mallory, 0, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	malloryBundle := &mb
	bob, err := certs.Issue(c.CADir(), certs.Identity{Role: certs.RoleClient, Name: "bob", UIDs: []uint32{1000}}, 0, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var malloryMetas []wire.MetaClient
	for _, a := range c.Addrs() {
		malloryMetas = append(malloryMetas, wire.NewMetaClient(mustDialTLS(t, a, tlsWith(t, malloryBundle))))
	}
	meta := malloryMetas[0]
	chunksOf := func(path string) []*wire.ChunkRef {
		t.Helper()
		a, err := host.Stat(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := meta.Read(ctx, &wire.ReadRequest{ClusterId: host.ClusterID(), Group: 1, Consistency: wire.ReadConsistency_LINEARIZABLE,
			Caller: &wire.Cred{Uid: 1000, Gid: 1000}, Op: &wire.ReadRequest_GetChunks{GetChunks: &wire.GetChunksReq{Ino: a.GetIno()}}})
		if err != nil || resp.GetStatus().GetCode() != wire.Code_OK || len(resp.GetChunks()) != 2 {
			t.Fatalf("chunks of %s as mallory: %v %v", path, resp, err)
		}
		return resp.GetChunks()
	}
	victim, secret := chunksOf("/victim"), chunksOf("/secret")
	if len(victim[0].GetToken()) != chunktoken.Size {
		t.Fatalf("mallory's record of /victim has no token: %v", victim[0])
	}
	if len(secret[0].GetToken()) != 0 {
		t.Fatalf("mallory got a token for /secret (0600, root's): %v", secret[0])
	}

	info, err := host.ClusterMap(ctx)
	if err != nil {
		t.Fatal(err)
	}
	primaryOf := func(ref *wire.ChunkRef) (string, uint64) {
		for _, g := range info.GetReplicaGroups() {
			if g.GetId() == ref.GetGroup() {
				for _, s := range info.GetChunkServers() {
					if s.GetId() == g.GetPrimary() {
						return s.GetAddr(), g.GetEpoch()
					}
				}
			}
		}
		t.Fatalf("no primary for group %d", ref.GetGroup())
		return "", 0
	}
	// send sends one frame as holder, retrying while the chunk server
	// does not know the token's key yet (it learns keys from its
	// heartbeat, every 2 s) when want is OK.
	send := func(holder *certs.Bundle, f dataproto.Frame, want dataproto.Status) *dataproto.Frame {
		t.Helper()
		addr, epoch := primaryOf(&wire.ChunkRef{Group: f.Group})
		f.Epoch = epoch
		for deadline := time.Now().Add(5 * time.Second); ; {
			conn, err := tls.Dial("tcp", addr, tlsWith(t, holder))
			if err != nil {
				t.Fatal(err)
			}
			r, err := dataCall(conn, &f)
			conn.Close()
			if err != nil {
				t.Fatal(err)
			}
			if r.Status == dataproto.StatusBadToken && want == dataproto.StatusOK && time.Now().Before(deadline) &&
				strings.Contains(string(r.Payload), "key") {
				time.Sleep(200 * time.Millisecond)
				continue
			}
			return r
		}
	}
	read := func(ref *wire.ChunkRef, tok []byte) dataproto.Frame {
		return dataproto.Frame{Type: dataproto.TypeRead, RequestID: 1, Handle: ref.GetHandle(), Group: ref.GetGroup(),
			Payload: []byte{0, 0, 16, 0}, Token: tok}
	}
	write := func(ref *wire.ChunkRef, tok []byte) dataproto.Frame {
		return dataproto.Frame{Type: dataproto.TypeWrite, RequestID: 2, Handle: ref.GetHandle(), Group: ref.GetGroup(),
			Payload: bytes.Repeat([]byte("X"), 4096), Token: tok}
	}
	expect := func(what string, r *dataproto.Frame, want dataproto.Status, says string) {
		t.Helper()
		if r.Status != want || !strings.Contains(string(r.Payload), says) {
			msg := r.Payload[:min(len(r.Payload), 200)] // a served read's bytes, cut
			t.Errorf("%s: status %d %q, want %d saying %q", what, r.Status, msg, want, says)
		}
	}

	// Her own token reads her chunk.
	r := send(malloryBundle, read(victim[0], victim[0].GetToken()), dataproto.StatusOK)
	if r.Status != dataproto.StatusOK || !bytes.Equal(r.Payload, victimData[:4096]) {
		t.Fatalf("mallory's read with her token: status %d %q", r.Status, r.Payload)
	}
	// Everything else is refused, and says why.
	expect("read without a token", send(malloryBundle, read(victim[0], nil), 0), dataproto.StatusBadToken, "missing")
	expect("write without a token", send(malloryBundle, write(victim[0], nil), 0), dataproto.StatusBadToken, "missing")
	expect("truncate with a read token", send(malloryBundle, dataproto.Frame{Type: dataproto.TypeTruncate, RequestID: 3,
		Handle: victim[0].GetHandle(), Group: victim[0].GetGroup(), Token: victim[0].GetToken()}, 0), dataproto.StatusDenied, "allows read")
	expect("read of /secret with /victim's token", send(malloryBundle, read(secret[0], victim[0].GetToken()), 0),
		dataproto.StatusDenied, "does not match")
	expect("read of chunk 1 with chunk 0's token", send(malloryBundle, read(victim[1], victim[0].GetToken()), 0),
		dataproto.StatusDenied, "does not match")
	expect("write with a read token", send(malloryBundle, write(victim[0], victim[0].GetToken()), 0),
		dataproto.StatusDenied, "allows read")
	expect("mallory's token presented by bob", send(&bob, read(victim[0], victim[0].GetToken()), 0),
		dataproto.StatusDenied, "does not match")
	forged := bytes.Clone(victim[0].GetToken())
	forged[1] = byte(chunktoken.Read | chunktoken.Write)
	expect("a token whose access was raised", send(malloryBundle, write(victim[0], forged), 0), dataproto.StatusDenied, "does not match")

	// A small file's bytes live inline in the ministry: not for her when
	// she may neither read nor write it; nor does a read that names no
	// user, or the nodes' own reads (raw keys, every chunk record).
	if _, err := host.WriteFile(ctx, "/small-secret", strings.NewReader("root's small secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	sa, err := host.Stat(ctx, "/small-secret")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		req  *wire.ReadRequest
		want string
	}{
		{"inline bytes of a 0600 file", &wire.ReadRequest{Caller: &wire.Cred{Uid: 1000, Gid: 1000},
			Op: &wire.ReadRequest_GetChunks{GetChunks: &wire.GetChunksReq{Ino: sa.GetIno()}}}, "neither read nor write"},
		{"a read naming no user", &wire.ReadRequest{Op: &wire.ReadRequest_Readdir{Readdir: &wire.ReaddirReq{Ino: 1}}}, "names none"},
		{"the chunk table", &wire.ReadRequest{Caller: &wire.Cred{Uid: 1000, Gid: 1000},
			Op: &wire.ReadRequest_ChunkTable{ChunkTable: &wire.ChunkTableReq{}}}, "for node certificates"},
		{"a move's raw keys", &wire.ReadRequest{Caller: &wire.Cred{Uid: 1000, Gid: 1000},
			Op: &wire.ReadRequest_ExportKeys{ExportKeys: &wire.ExportKeysReq{Move: 1, Ino: 1}}}, "for node certificates"},
	} {
		tc.req.ClusterId, tc.req.Group, tc.req.Consistency = host.ClusterID(), 1, wire.ReadConsistency_LINEARIZABLE
		resp, err := meta.Read(ctx, tc.req)
		got := fmt.Sprint(err, resp.GetStatus().GetMessage())
		if len(resp.GetInlineData()) > 0 || !strings.Contains(got, tc.want) {
			t.Errorf("%s: %v %v (inline %q), want a refusal saying %q", tc.name, resp.GetStatus(), err, resp.GetInlineData(), tc.want)
		}
	}

	// Through the library she reads /victim, may not write it, and may
	// not read /secret: the chunk servers refuse what the ministry did
	// not grant, whatever the library is told to do.
	var buf bytes.Buffer
	if _, err := malloryCl.ReadFile(ctx, "/victim", &buf); err != nil || !bytes.Equal(buf.Bytes(), victimData) {
		t.Fatalf("mallory reads /victim: %v (equal %v)", err, bytes.Equal(buf.Bytes(), victimData))
	}
	if f, err := malloryCl.Open(ctx, "/victim", syscall.O_WRONLY, 0); err == nil {
		_, err = f.WriteAt(ctx, []byte("overwritten"), 0)
		f.Close()
		wantErrno(t, "mallory writes /victim's chunk", err, syscall.EACCES)
	}
	if f, err := malloryCl.Open(ctx, "/secret", syscall.O_RDONLY, 0); err == nil {
		_, err = f.ReadAt(ctx, make([]byte, 10), 0)
		f.Close()
		wantErrno(t, "mallory reads /secret", err, syscall.EACCES)
	}

	// She cannot give a file of hers someone else's chunk (then write it
	// through her file): only a chunk the president allocated to her
	// certificate may be recorded, and the library's own allocations work.
	if _, err := host.Mkdir(ctx, "/home-m", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := host.Chown(ctx, "/home-m", 1000, 1000); err != nil {
		t.Fatal(err)
	}
	own := bytes.Repeat([]byte("m"), 1<<20+10)
	if _, err := malloryCl.WriteFile(ctx, "/home-m/own", bytes.NewReader(own), 0o644); err != nil {
		t.Fatalf("mallory writes her own file: %v", err)
	}
	ownAttr, err := host.Stat(ctx, "/home-m/own")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		tok  []byte
	}{{"no token", nil}, {"the victim's read token", victim[0].GetToken()}, {"a raised access byte", forged}} {
		ref := &wire.ChunkRef{Index: 7, Handle: victim[0].GetHandle(), Group: victim[0].GetGroup(), Token: tc.tok}
		// To every node, so that the leader, which would apply it, has it.
		var resp *wire.MutateResponse
		var err error
		for _, mc := range malloryMetas {
			resp, err = mc.Mutate(ctx, &wire.MutateRequest{ClusterId: host.ClusterID(), Group: 1, Cmd: &wire.Command{Version: 1,
				Req:    &wire.RequestID{ClientId: 777, Seq: 1, FirstIncomplete: 1},
				Caller: &wire.Cred{Uid: 1000, Gid: 1000},
				Op:     &wire.Command_SetChunk{SetChunk: &wire.SetChunkOp{Ino: ownAttr.GetIno(), Chunk: ref}}}})
			if resp.GetStatus().GetCode() != wire.Code_NOT_LEADER {
				break
			}
		}
		if err == nil || !strings.Contains(err.Error(), "allocated to this certificate") {
			t.Errorf("SetChunk of the victim's chunk into her file, %s: %v %v", tc.name, resp, err)
		}
	}
	buf.Reset()
	if _, err := malloryCl.ReadFile(ctx, "/home-m/own", &buf); err != nil || !bytes.Equal(buf.Bytes(), own) {
		t.Fatalf("mallory reads her own file: %v", err)
	}

	// Expired: after the lifetime her token is refused as such (the
	// key may have rotated out too), and the library renews its own.
	time.Sleep(lifetime + time.Second)
	expect("an expired token", send(malloryBundle, read(victim[0], victim[0].GetToken()), 0), dataproto.StatusBadToken, "expired")
	f, err := malloryCl.Open(ctx, "/victim", syscall.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 4096)
	if _, err := f.ReadAt(ctx, got, 0); err != nil || !bytes.Equal(got, victimData[:4096]) {
		t.Fatalf("read through a File: %v", err)
	}
	time.Sleep(lifetime + time.Second) // the File's tokens expire
	if _, err := f.ReadAt(ctx, got, 1<<20); err != nil || !bytes.Equal(got, victimData[1<<20:1<<20+4096]) {
		t.Fatalf("read through a File after its tokens expired: %v", err)
	}
	f.Close()
	// The host client's writes and reads go on across rotations.
	more := make([]byte, 3<<20)
	_, _ = rand.Read(more)
	if _, err := host.WriteFile(ctx, "/later", bytes.NewReader(more), 0o644); err != nil {
		t.Fatal(err)
	}
	buf.Reset()
	if _, err := host.ReadFile(ctx, "/later", &buf); err != nil || !bytes.Equal(buf.Bytes(), more) {
		t.Fatalf("host reads /later: %v", err)
	}

	// Nothing changed: /victim's bytes are the host's.
	buf.Reset()
	if _, err := host.ReadFile(ctx, "/victim", &buf); err != nil || !bytes.Equal(buf.Bytes(), victimData) {
		t.Fatalf("/victim after the attacks: %v (equal %v)", err, bytes.Equal(buf.Bytes(), victimData))
	}
}
