package chunkserver

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/govfs/govfs/internal/certs"
	"github.com/govfs/govfs/internal/chunktoken"
	"github.com/govfs/govfs/internal/dataproto"
	"github.com/govfs/govfs/internal/rpc"
	"github.com/govfs/govfs/internal/testcluster"
	"github.com/govfs/govfs/internal/wire"
)

func startServer(t *testing.T, meta []string, dir string) *Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Each server its own "host" and rack: they share this machine.
	s, err := Start(ctx, Config{Listen: "127.0.0.1:0", DataDir: dir, MetaAddrs: meta, Host: dir, Rack: "r-" + filepath.Base(dir), NoSync: true,
		ChunkSize: 1 << 20, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

type dataConn struct {
	t *testing.T
	c net.Conn
	r *dataproto.Reader
	n uint64
}

func dial(t *testing.T, addr string) *dataConn {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &dataConn{t: t, c: c, r: dataproto.NewReader(bufio.NewReader(c), 0)}
}

func (d *dataConn) call(f *dataproto.Frame) *dataproto.Frame {
	d.t.Helper()
	d.n++
	f.RequestID = d.n
	if err := dataproto.WriteFrame(d.c, f); err != nil {
		d.t.Fatal(err)
	}
	r, err := d.r.Next()
	if err != nil {
		d.t.Fatal(err)
	}
	if r.RequestID != f.RequestID {
		d.t.Fatalf("reply to request %d, want %d", r.RequestID, f.RequestID)
	}
	return r
}

func readReq(group, epoch, h uint64, off int64, n uint32) *dataproto.Frame {
	return &dataproto.Frame{Type: dataproto.TypeRead, Handle: h, Group: group, Epoch: epoch, Offset: off, Payload: binary.BigEndian.AppendUint32(nil, n)}
}

// waitGroup waits until every server knows one common replica group and
// returns it.
func waitGroup(t *testing.T, servers []*Server) *wire.ReplicaGroup {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		var common *wire.ReplicaGroup
		ok := true
		for _, s := range servers {
			s.groups.mu.Lock()
			var g *wire.ReplicaGroup
			for _, x := range s.groups.groups {
				g = x
			}
			s.groups.mu.Unlock()
			if g == nil || (common != nil && g.GetId() != common.GetId()) {
				ok = false
				break
			}
			common = g
		}
		if ok && common != nil {
			return common
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("the servers never learned a common replica group")
	return nil
}

func TestReplicatedChunks(t *testing.T) {
	c := testcluster.NewInProc(t, 3)
	var servers []*Server
	dirs := map[uint64]string{}
	for i := 0; i < 3; i++ {
		dir := t.TempDir()
		s := startServer(t, c.Addrs(), dir)
		defer s.Stop()
		servers = append(servers, s)
		dirs[s.ID()] = dir
	}
	byID := map[uint64]*Server{}
	for _, s := range servers {
		byID[s.ID()] = s
	}
	// The president places a group over the three and each learns it.
	g := waitGroup(t, servers)
	if len(g.GetMembers()) != 3 || g.GetEpoch() != 1 {
		t.Fatalf("group %v", g)
	}
	// And reports them alive.
	cc, _ := rpc.Dial(c.Addrs()[0], nil)
	defer cc.Close()
	primary := byID[g.GetPrimary()]
	var secondary *Server
	for _, m := range g.GetMembers() {
		if m != g.GetPrimary() {
			secondary = byID[m]
		}
	}
	grp, ep := g.GetId(), g.GetEpoch()
	h7, h8, h99 := handle(grp, 7), handle(grp, 8), handle(grp, 99)
	d := dial(t, primary.Addr())
	data := bytes.Repeat([]byte("govfs-"), 30000) // 180 KB, 3 blocks
	w := d.call(&dataproto.Frame{Type: dataproto.TypeWrite, Handle: h7, Group: grp, Epoch: ep, Payload: data})
	if w.Status != dataproto.StatusOK || w.Version != 1 {
		t.Fatalf("write: %v %s (version %d)", w.Status, w.Payload, w.Version)
	}
	// Every member has it, with the same version.
	for _, s := range servers {
		r := dial(t, s.Addr()).call(readReq(grp, ep, h7, 0, uint32(len(data)+100)))
		if r.Status != dataproto.StatusOK || !bytes.Equal(r.Payload, data) || r.Version != 1 {
			t.Fatalf("server %d: status %v, %d bytes, version %d", s.ID(), r.Status, len(r.Payload), r.Version)
		}
	}
	// The primary orders appends: distinct consecutive offsets, the same
	// on every replica.
	a1 := d.call(&dataproto.Frame{Type: dataproto.TypeAppend, Handle: h7, Group: grp, Epoch: ep, Payload: []byte("rec1")})
	a2 := d.call(&dataproto.Frame{Type: dataproto.TypeAppend, Handle: h7, Group: grp, Epoch: ep, Payload: []byte("rec2")})
	if a1.Status != dataproto.StatusOK || a1.Offset != int64(len(data)) || a2.Offset != a1.Offset+4 || a2.Version != 3 {
		t.Fatalf("appends at %d (%v) and %d, version %d", a1.Offset, a1.Status, a2.Offset, a2.Version)
	}
	if r := dial(t, secondary.Addr()).call(readReq(grp, ep, h7, a1.Offset, 8)); string(r.Payload) != "rec1rec2" || r.Version != 3 {
		t.Fatalf("secondary after appends: %q version %d", r.Payload, r.Version)
	}
	// Writes to a non-primary, stale epochs, unknown groups, bad reads.
	sd := dial(t, secondary.Addr())
	if r := sd.call(&dataproto.Frame{Type: dataproto.TypeWrite, Handle: h7, Group: grp, Epoch: ep, Payload: []byte("x")}); r.Status != dataproto.StatusNotPrimary {
		t.Errorf("write to a secondary: %v", r.Status)
	}
	if r := d.call(&dataproto.Frame{Type: dataproto.TypeWrite, Handle: h7, Group: grp, Epoch: ep + 1, Payload: []byte("x")}); r.Status != dataproto.StatusStaleEpoch {
		t.Errorf("write with a wrong epoch: %v", r.Status)
	}
	if r := d.call(&dataproto.Frame{Type: dataproto.TypeWrite, Handle: handle(grp+5, 7), Group: grp + 5, Epoch: ep, Payload: []byte("x")}); r.Status != dataproto.StatusStaleEpoch {
		t.Errorf("write to an unknown group: %v", r.Status)
	}
	if r := d.call(readReq(grp, ep, h99, 0, 10)); r.Status != dataproto.StatusNotFound {
		t.Errorf("read of an unknown chunk: %v", r.Status)
	}
	if r := d.call(&dataproto.Frame{Type: dataproto.TypeRead, Handle: h7, Group: grp, Epoch: ep}); r.Status != dataproto.StatusInvalid {
		t.Errorf("read without a length: %v", r.Status)
	}
	if r := d.call(&dataproto.Frame{Type: dataproto.TypeWrite, Handle: h7, Group: grp, Epoch: ep, Offset: 1 << 30, Payload: []byte("x")}); r.Status != dataproto.StatusInvalid {
		t.Errorf("write past the chunk size: %v", r.Status)
	}
	// A flipped byte on one replica's disk is detected there; the others
	// still serve the block.
	files, _ := filepath.Glob(filepath.Join(dirs[secondary.ID()], "*", "*"))
	flipped := false
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err == nil && len(b) >= len(data) && bytes.Equal(b[:100], data[:100]) {
			b[70000] ^= 0xff
			if err := os.WriteFile(f, b, 0o644); err != nil {
				t.Fatal(err)
			}
			flipped = true
		}
	}
	if !flipped {
		t.Fatalf("chunk data file not found among %v", files)
	}
	if r := sd.call(readReq(grp, ep, h7, 65536, 100)); r.Status != dataproto.StatusCorrupt {
		t.Errorf("read of a corrupted block: %v", r.Status)
	}
	if r := d.call(readReq(grp, ep, h7, 65536, 100)); r.Status != dataproto.StatusOK || !bytes.Equal(r.Payload, data[65536:65636]) {
		t.Errorf("read of the same block from the primary: %v", r.Status)
	}
	// The secondary repairs the block from another member in the
	// background.
	waitFor(t, "the corrupt block to be repaired", func() bool {
		r := sd.call(readReq(grp, ep, h7, 65536, 100))
		return r.Status == dataproto.StatusOK && bytes.Equal(r.Payload, data[65536:65636])
	})
	// A handle of another group is malformed.
	if r := d.call(&dataproto.Frame{Type: dataproto.TypeWrite, Handle: handle(grp+1, 7), Group: grp, Epoch: ep, Payload: []byte("x")}); r.Status != dataproto.StatusInvalid {
		t.Errorf("write of another group's chunk: %v", r.Status)
	}
	// A retried append (same request id) gets its first offset back.
	r1 := d.call(&dataproto.Frame{Type: dataproto.TypeAppend, Handle: h7, Group: grp, Epoch: ep, Version: 424242, Payload: []byte("once")})
	r2 := d.call(&dataproto.Frame{Type: dataproto.TypeAppend, Handle: h7, Group: grp, Epoch: ep, Version: 424242, Payload: []byte("once")})
	if r1.Status != dataproto.StatusOK || r2.Status != dataproto.StatusOK || r1.Offset != r2.Offset || r2.Version != r1.Version {
		t.Errorf("retried append: first at %d v%d (%v), retry at %d v%d (%v)", r1.Offset, r1.Version, r1.Status, r2.Offset, r2.Version, r2.Status)
	}
	// Garbage on the data port ends that connection only.
	gc, _ := net.Dial("tcp", primary.Addr())
	gc.Write(bytes.Repeat([]byte{0xde, 0xad}, 100))
	gc.Close()
	if r := dial(t, primary.Addr()).call(readReq(grp, ep, h7, 0, 10)); r.Status != dataproto.StatusOK {
		t.Errorf("after garbage: %v", r.Status)
	}
	// The collector's delete is refused when it was decided at an older
	// epoch of a group this server is now a member of; else it deletes.
	h9 := handle(grp, 9)
	if r := d.call(&dataproto.Frame{Type: dataproto.TypeWrite, Handle: h9, Group: grp, Epoch: ep, Payload: []byte("gc me")}); r.Status != dataproto.StatusOK {
		t.Fatalf("write: %v", r.Status)
	}
	if r := sd.call(&dataproto.Frame{Type: dataproto.TypeDelete, Handle: h9, Group: grp, Epoch: ep - 1}); r.Status != dataproto.StatusStaleEpoch {
		t.Errorf("delete decided at an older epoch: %v", r.Status)
	}
	if r := sd.call(&dataproto.Frame{Type: dataproto.TypeDelete, Handle: h9, Group: grp, Epoch: ep}); r.Status != dataproto.StatusOK {
		t.Errorf("delete: %v %s", r.Status, r.Payload)
	}
	if r := sd.call(readReq(grp, ep, h9, 0, 10)); r.Status != dataproto.StatusNotFound {
		t.Errorf("read after delete: %v", r.Status)
	}
	// A member that is down fails the write (never acknowledged without
	// every full member).
	secondary.Stop()
	if r := d.call(&dataproto.Frame{Type: dataproto.TypeWrite, Handle: h8, Group: grp, Epoch: ep, Payload: []byte("y")}); r.Status == dataproto.StatusOK {
		t.Error("write acknowledged with a member down")
	}

	// Restarted on the same store, a server keeps its id.
	id := secondary.ID()
	s2 := startServer(t, c.Addrs(), dirs[id])
	defer s2.Stop()
	if s2.ID() != id {
		t.Fatalf("restart got id %d, want %d", s2.ID(), id)
	}
}

// A member that missed a mutation (it was down) gets the primary's copy
// before the chunk's next mutation, instead of applying it over the hole.
func TestMemberThatMissedAMutationIsBroughtUpToDate(t *testing.T) {
	c := testcluster.NewInProc(t, 3)
	var servers []*Server
	dirs := map[*Server]string{}
	for i := 0; i < 3; i++ {
		dir := t.TempDir()
		s := startServer(t, c.Addrs(), dir)
		defer func() { s.Stop() }()
		servers = append(servers, s)
		dirs[s] = dir
	}
	g := waitGroup(t, servers)
	var primary, secondary *Server
	for _, s := range servers {
		if s.ID() == g.GetPrimary() {
			primary = s
		} else {
			secondary = s
		}
	}
	grp, ep := g.GetId(), g.GetEpoch()
	h := handle(grp, 11)
	d := dial(t, primary.Addr())
	write := func(off int64, data string) *dataproto.Frame {
		return d.call(&dataproto.Frame{Type: dataproto.TypeWrite, Handle: h, Group: grp, Epoch: ep, Offset: off, Payload: []byte(data)})
	}
	if r := write(0, "first"); r.Status != dataproto.StatusOK {
		t.Fatalf("write v1: %v %s", r.Status, r.Payload)
	}
	// The secondary misses version 2: the write is not acknowledged.
	dir := dirs[secondary]
	secondary.Stop()
	if r := write(5, "-second"); r.Status == dataproto.StatusOK {
		t.Fatal("write acknowledged with a member down")
	}
	back := startServer(t, c.Addrs(), dir)
	defer back.Stop()
	// Without any further write, the primary's background reconcile
	// installs version 2 on the returning member.
	bd := dial(t, back.Addr())
	waitFor(t, "the returning member to get the missed version", func() bool {
		r := bd.call(readReq(grp, ep, h, 0, 100))
		return r.Status == dataproto.StatusOK && string(r.Payload) == "first-second" && r.Version == 2
	})
	// The next write applies version 3 everywhere.
	var r *dataproto.Frame
	waitFor(t, "a write to succeed after the member returned", func() bool {
		r = write(12, "-third")
		return r.Status == dataproto.StatusOK
	})
	want := "first-second-third"
	for _, s := range []*Server{primary, back} {
		got := dial(t, s.Addr()).call(readReq(grp, ep, h, 0, 100))
		if got.Status != dataproto.StatusOK || string(got.Payload) != want || got.Version != r.Version {
			t.Fatalf("server %d: %v %q version %d, want %q version %d", s.ID(), got.Status, got.Payload, got.Version, want, r.Version)
		}
	}
	// A replicate over a missed version is refused, never applied.
	rep := dial(t, back.Addr()).call(&dataproto.Frame{Type: dataproto.TypeReplicate, Handle: h, Group: grp, Epoch: ep, Version: r.Version + 2, Payload: []byte("x")})
	if rep.Status != dataproto.StatusStaleVersion {
		t.Fatalf("replicate over a missed version: %v", rep.Status)
	}
}

func handle(group, n uint64) uint64 {
	h, err := dataproto.MakeHandle(group, n)
	if err != nil {
		panic(err)
	}
	return h
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestUnknownTokenKeyLearntOnDemand: a token signed with a key the server
// has not learnt yet (a new cluster's first key, minted with before the
// next 2-s heartbeat brings it) is accepted after an immediate
// heartbeat, not refused; a token naming a key the president never made
// stays refused, and does not make the server ask again at once.
func TestUnknownTokenKeyLearntOnDemand(t *testing.T) {
	c := testcluster.NewInProc(t, 3)
	s := startServer(t, c.Addrs(), t.TempDir())
	defer s.Stop()
	waitFor(t, "the president's token keys", func() bool { return s.tokens.Len() > 0 })
	// The keys, as the president's leader gives them in a heartbeat.
	var key chunktoken.Key
	for _, a := range c.Addrs() {
		cc, err := rpc.Dial(a, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := wire.NewMetaClient(cc).ChunkHeartbeat(t.Context(), &wire.ChunkHeartbeatRequest{ClusterId: s.clusterID, ServerId: s.ID()})
		cc.Close()
		if err == nil && resp.GetStatus().GetCode() == wire.Code_OK && len(resp.GetTokenKeys()) > 0 {
			k := resp.GetTokenKeys()[0]
			key = chunktoken.Key{ID: k.GetId(), Secret: k.GetSecret()}
		}
	}
	if key.Secret == nil {
		t.Fatal("no node answered a heartbeat with the token keys")
	}
	// The server forgets them: as before its first heartbeat.
	s.tokens.SetKeys(nil)
	caller := rpc.Caller{Secure: true, Identity: certs.Identity{Role: certs.RoleClient, Name: "c1"}}
	const h = 1<<40 + 7
	write := func(k chunktoken.Key) *dataproto.Frame {
		return &dataproto.Frame{Type: dataproto.TypeWrite, Handle: h,
			Token: chunktoken.Mint(k, h, chunktoken.Write, time.Now().Add(time.Minute), caller.Identity.String())}
	}
	if st, err := s.checkToken(caller, write(key)); st != dataproto.StatusOK || err != nil {
		t.Fatalf("token of key %d, which the server had not learnt: status %d, %v; want it learnt and accepted", key.ID, st, err)
	}
	// A key older than those known is not asked for.
	s.keyFetch.mu.Lock()
	s.keyFetch.last = time.Time{}
	s.keyFetch.mu.Unlock()
	if key.ID > 1 {
		old := chunktoken.Key{ID: key.ID - 1, Secret: []byte("dropped")}
		if _, err := s.checkToken(caller, write(old)); !errors.Is(err, chunktoken.ErrUnknownKey) {
			t.Fatalf("token of an older key: %v", err)
		}
		s.keyFetch.mu.Lock()
		asked := s.keyFetch.last
		s.keyFetch.mu.Unlock()
		if !asked.IsZero() {
			t.Fatal("a token of a key older than those known made the server heartbeat")
		}
	}
	made := chunktoken.Key{ID: key.ID + 1000, Secret: []byte("made up")}
	if st, err := s.checkToken(caller, write(made)); st != dataproto.StatusBadToken || !errors.Is(err, chunktoken.ErrUnknownKey) {
		t.Fatalf("token of a key nobody made: status %d, %v; want StatusBadToken, unknown key", st, err)
	}
	s.keyFetch.mu.Lock()
	asked := s.keyFetch.last
	s.keyFetch.mu.Unlock()
	if _, err := s.checkToken(caller, write(made)); !errors.Is(err, chunktoken.ErrUnknownKey) {
		t.Fatalf("second made-up token: %v", err)
	}
	s.keyFetch.mu.Lock()
	again := s.keyFetch.last
	s.keyFetch.mu.Unlock()
	if asked.IsZero() || !again.Equal(asked) {
		t.Fatalf("on-demand heartbeats at %v then %v: want one, then none within %v", asked, again, keyFetchSpacing)
	}
}

// TestUnknownGroupLearntOnDemand: a request naming a replica group the
// server has not heard of yet (a group the president has just formed,
// before the member's next 2-s heartbeat) makes it ask the president at
// once, and it knows the group then; a group the president never made
// stays unknown, and does not make the server ask again at once.
func TestUnknownGroupLearntOnDemand(t *testing.T) {
	c := testcluster.NewInProc(t, 3)
	var servers []*Server
	for range 3 {
		s := startServer(t, c.Addrs(), t.TempDir())
		defer s.Stop()
		servers = append(servers, s)
	}
	var g *wire.ReplicaGroup
	var s *Server
	waitFor(t, "a replica group", func() bool {
		for _, x := range servers {
			for _, y := range x.groups.all() {
				g, s = y, x
			}
		}
		return g != nil
	})
	// The server forgets its groups: as before the heartbeat that
	// brought the group.
	s.groups.set(nil, nil)
	s.groupFetch.mu.Lock()
	s.groupFetch.last = time.Time{}
	s.groupFetch.mu.Unlock()
	probe := func(group, epoch uint64) *dataproto.Frame {
		return s.handle(&dataproto.Frame{Type: dataproto.TypeRead, Handle: handle(group, 1), Group: group, Epoch: epoch, Offset: 0})
	}
	if r := probe(g.GetId(), g.GetEpoch()); r.Status == dataproto.StatusStaleEpoch {
		t.Fatalf("read of group %d at epoch %d, which the server had not heard of: %q; want the group learnt", g.GetId(), g.GetEpoch(), r.Payload)
	}
	if x, _ := s.groups.get(g.GetId()); x == nil {
		t.Fatal("the group is not known after the request")
	}
	s.groupFetch.mu.Lock()
	asked := s.groupFetch.last
	s.groupFetch.mu.Unlock()
	if asked.IsZero() {
		t.Fatal("no heartbeat sent for the unknown group")
	}
	const madeUp = 999
	if r := probe(madeUp, 1); r.Status != dataproto.StatusStaleEpoch {
		t.Fatalf("read of a group nobody made: status %d %q; want it refused", r.Status, r.Payload)
	}
	s.groupFetch.mu.Lock()
	again := s.groupFetch.last
	s.groupFetch.mu.Unlock()
	if !again.Equal(asked) && again.Sub(asked) < keyFetchSpacing {
		t.Fatalf("on-demand heartbeats at %v then %v: want none within %v of the first", asked, again, keyFetchSpacing)
	}
}
