package chunkserver

import (
	"bytes"
	"slices"
	"testing"
	"time"

	"github.com/govfs/govfs/internal/dataproto"
	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/testcluster"
	"github.com/govfs/govfs/internal/wire"
)

// When the primary of a group dies, the president (after 10 s without a
// heartbeat) replaces it with the spare server, a survivor becomes
// primary and fills the newcomer, and the group is back to three full
// members holding every acknowledged byte.
func TestDeadPrimaryIsReplacedAndTheNewMemberFilled(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the 10 s dead-server timeout")
	}
	c := testcluster.NewInProc(t, 3)
	var servers []*Server
	for i := 0; i < 4; i++ {
		s := startServer(t, c.Addrs(), t.TempDir())
		defer func() { s.Stop() }()
		servers = append(servers, s)
	}
	byID := map[uint64]*Server{}
	for _, s := range servers {
		byID[s.ID()] = s
	}
	// Wait for the group (three of the four servers).
	var g *wire.ReplicaGroup
	waitFor(t, "a replica group", func() bool {
		for _, s := range servers {
			for _, x := range s.groups.all() {
				g = x
			}
		}
		return g != nil
	})
	grp, ep := g.GetId(), g.GetEpoch()
	primary := byID[g.GetPrimary()]
	d := dial(t, primary.Addr())
	// Several chunks, one of them mutated twice.
	want := map[uint64][]byte{}
	for i := uint64(1); i <= 5; i++ {
		h := handle(grp, i)
		want[h] = bytes.Repeat([]byte{byte(i)}, int(i)*100_000)
		var r *dataproto.Frame
		waitFor(t, "the group to take writes", func() bool {
			r = d.call(&dataproto.Frame{Type: dataproto.TypeWrite, Handle: h, Group: grp, Epoch: ep, Payload: want[h]})
			return r.Status == dataproto.StatusOK
		})
	}
	h1 := handle(grp, 1)
	if r := d.call(&dataproto.Frame{Type: dataproto.TypeWrite, Handle: h1, Group: grp, Epoch: ep, Offset: 50, Payload: []byte("patched")}); r.Status != dataproto.StatusOK {
		t.Fatalf("overwrite: %v %s", r.Status, r.Payload)
	}
	copy(want[h1][50:], "patched")

	killed := time.Now()
	primary.Stop()
	dead := primary.ID()
	// Wait for a group of three full members without the dead one.
	var ng *wire.ReplicaGroup
	waitFor(t, "the group to be whole again", func() bool {
		for _, s := range servers {
			if s == primary {
				continue
			}
			if x, _ := s.groups.get(grp); x != nil && len(x.GetMembers()) == 3 && len(x.GetSyncing()) == 0 && !slices.Contains(x.GetMembers(), dead) {
				ng = x
				return true
			}
		}
		return false
	})
	t.Logf("group whole again %v after the kill: %v", time.Since(killed).Round(100*time.Millisecond), ng)
	if ng.GetEpoch() < ep+2 {
		t.Fatalf("epoch %d after a replacement and a sync, want >= %d", ng.GetEpoch(), ep+2)
	}
	// Every member, the new one included, serves every byte (once it has
	// learned the group's final epoch).
	for _, m := range ng.GetMembers() {
		s := byID[m]
		dc := dial(t, s.Addr())
		for h, data := range want {
			var r *dataproto.Frame
			waitFor(t, "a member to serve the chunk", func() bool {
				r = dc.call(readReq(grp, ng.GetEpoch(), h, 0, uint32(len(data))))
				return r.Status != dataproto.StatusStaleEpoch
			})
			if r.Status != dataproto.StatusOK || !bytes.Equal(r.Payload, data) {
				t.Fatalf("member %d chunk %x: %v, %d bytes (want %d): %s", m, h, r.Status, len(r.Payload), len(data), r.Payload)
			}
		}
	}
	// And the new primary takes writes.
	np := dial(t, byID[ng.GetPrimary()].Addr())
	if r := np.call(&dataproto.Frame{Type: dataproto.TypeWrite, Handle: h1, Group: grp, Epoch: ng.GetEpoch(), Payload: []byte("after")}); r.Status != dataproto.StatusOK {
		t.Fatalf("write through the new primary: %v %s", r.Status, r.Payload)
	}
}

// A chunk server that cannot reach the president for leaseTimeout stops
// serving (the president may be handing its groups to others), and
// serves again once a heartbeat gets through.
func TestServerCutOffFromThePresidentStopsServing(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the 7 s lease")
	}
	c := testcluster.NewInProc(t, 3)
	var servers []*Server
	for i := 0; i < 3; i++ {
		s := startServer(t, c.Addrs(), t.TempDir())
		defer s.Stop()
		servers = append(servers, s)
	}
	g := waitGroup(t, servers)
	h := handle(g.GetId(), 1)
	var primary *Server
	for _, s := range servers {
		if s.ID() == g.GetPrimary() {
			primary = s
		}
	}
	d := dial(t, primary.Addr())
	waitFor(t, "a write", func() bool {
		return d.call(&dataproto.Frame{Type: dataproto.TypeWrite, Handle: h, Group: g.GetId(), Epoch: g.GetEpoch(), Payload: []byte("x")}).Status == dataproto.StatusOK
	})
	c.StopAll()
	cut := time.Now()
	waitFor(t, "the server to stop serving", func() bool {
		return d.call(readReq(g.GetId(), g.GetEpoch(), h, 0, 1)).Status == dataproto.StatusStaleEpoch
	})
	if since := time.Since(cut); since < leaseTimeout-2*time.Second {
		t.Fatalf("stopped serving %v after the president went away, before its lease could run out", since)
	}
	for _, id := range []uint64{1, 2, 3} {
		c.Start(ids.NodeID(id))
	}
	waitFor(t, "the server to serve again", func() bool {
		r := d.call(readReq(g.GetId(), g.GetEpoch(), h, 0, 1))
		return r.Status == dataproto.StatusOK && string(r.Payload) == "x"
	})
}
