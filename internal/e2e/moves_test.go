package e2e

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/govfs/govfs/client"
	"github.com/govfs/govfs/internal/rpc"
	"github.com/govfs/govfs/internal/testcluster"
	"github.com/govfs/govfs/internal/wire"
)

// TestPopulatedSubtreeMovesUnderLoad moves a populated subtree (files
// inline and in chunks, subdirectories, xattrs, a symlink, a hard link
// inside) to a new ministry and back while clients write inside it and
// elsewhere. A hard link across the boundary aborts the assign with a
// clear reason and changes nothing. Every acknowledged write is there
// afterwards, held by the right ministry, with its bytes.
func TestPopulatedSubtreeMovesUnderLoad(t *testing.T) {
	c := testcluster.StartForTest(t, 120*time.Second, testcluster.ProcConfig{Binary: binary, Dir: t.TempDir(), Nodes: 5, Chunks: 3, Tick: 50 * time.Millisecond})
	cl := newClient(t, c, c.Addrs(), 60*time.Second)
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()

	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	// The tree: /data/dK/fJ (small, inline), /data/big (chunks), a
	// symlink, an xattr, a hard link inside, and /other outside.
	for _, d := range []string{"/data", "/other", "/data/sub", "/data/sub/deeper"} {
		_, err := cl.Mkdir(ctx, d, 0o755)
		must(err)
	}
	want := map[string]string{}
	for k := range 6 {
		d := fmt.Sprintf("/data/d%d", k)
		_, err := cl.Mkdir(ctx, d, 0o755)
		must(err)
		for j := range 20 {
			p := fmt.Sprintf("%s/f%d", d, j)
			must(put(ctx, cl, p, p))
			want[p] = p
		}
	}
	big := strings.Repeat("0123456789abcdef", 40<<10) // 640 KiB
	must(put(ctx, cl, "/data/sub/deeper/big", big))
	want["/data/sub/deeper/big"] = big
	_, err := cl.Symlink(ctx, "d0/f0", "/data/link")
	must(err)
	must(cl.SetXattr(ctx, "/data/d1/f1", "user.tag", []byte("kept"), 0))
	_, err = cl.Link(ctx, "/data/d2/f2", "/data/sub/f2-again")
	must(err)
	want["/data/sub/f2-again"] = "/data/d2/f2"

	// A hard link from outside: the assign is aborted, nothing moves.
	_, err = cl.Link(ctx, "/data/d3/f3", "/other/outside-link")
	must(err)
	mv, err := cl.Assign(ctx, "/data", client.AssignOptions{New: true})
	if err != nil || mv.GetState() != wire.MoveState_MOVE_ABORTED || !strings.Contains(mv.GetError(), "hard link") {
		t.Fatalf("assign with a hard link across the boundary: %v, %v; want ABORTED naming the hard link", mv, err)
	}
	t.Logf("refused as expected: %s", mv.GetError())
	after, err := cl.ClusterMap(ctx)
	must(err)
	for _, m := range after.GetMinistries() {
		for _, st := range m.GetSubtrees() {
			if st.GetPath() == "/data" {
				t.Fatalf("the aborted assign gave /data to ministry %d", m.GetGroup())
			}
		}
	}
	// The ministry made for the aborted assign is dissolved: gone from
	// the map, and no node keeps a replica of it.
	waitUntil(t, 30*time.Second, fmt.Sprintf("ministry %d dissolved and dropped by every node", mv.GetTarget()), func() bool {
		info, err := cl.ClusterMap(ctx)
		if err != nil || ministryOf(info, mv.GetTarget()) != nil || !slices.Contains(info.GetDissolved(), mv.GetTarget()) {
			return false
		}
		return len(nodesHosting(ctx, c.Security(), c.Addrs(), mv.GetTarget())) == 0
	})
	must(put(ctx, cl, "/data/d0/after-abort", "after-abort")) // writable again
	want["/data/d0/after-abort"] = "after-abort"
	must(cl.Remove(ctx, "/other/outside-link"))

	// Writers inside and outside while the subtree moves.
	type writer struct {
		mu       sync.Mutex
		acked    map[string]string
		longest  time.Duration
		failures int
	}
	ws := make([]*writer, 4)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range ws {
		ws[w] = &writer{acked: map[string]string{}}
		dir := fmt.Sprintf("/data/d%d", w)
		if w == 3 {
			dir = "/other"
		}
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				p := fmt.Sprintf("%s/w%d", dir, i)
				start := time.Now()
				err := put(ctx, cl, p, p)
				took := time.Since(start)
				ws[w].mu.Lock()
				ws[w].longest = max(ws[w].longest, took)
				if err == nil {
					ws[w].acked[p] = p
				} else {
					// Allowed (a clear retryable error after the
					// bound), but every refused write must be absent
					// or whole.
					ws[w].failures++
				}
				ws[w].mu.Unlock()
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
	time.Sleep(time.Second)
	start := time.Now()
	mv, err = cl.Assign(ctx, "/data", client.AssignOptions{New: true})
	took := time.Since(start)
	if err != nil || mv.GetState() != wire.MoveState_MOVE_DONE {
		t.Fatalf("assign /data: %v %v", mv, err)
	}
	target := mv.GetTarget()
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()
	for w, wr := range ws {
		t.Logf("writer %d: %d acknowledged, %d refused, longest write %v (move took %v)", w, len(wr.acked), wr.failures, wr.longest.Round(time.Millisecond), took.Round(time.Millisecond))
		for p, v := range wr.acked {
			want[p] = v
		}
	}

	// Everything is there, read by a fresh client; the files under /data
	// are the new ministry's.
	check := func(label string, cl *client.Client) {
		t.Helper()
		for p, v := range want {
			b, err := get(ctx, cl, p)
			if err != nil || b != v {
				t.Fatalf("%s: %s = %d bytes (%v), want %d bytes", label, p, len(b), err, len(v))
			}
		}
		if tg, err := cl.Readlink(ctx, "/data/link"); err != nil || tg != "d0/f0" {
			t.Fatalf("%s: readlink: %q %v", label, tg, err)
		}
		if v, err := cl.GetXattr(ctx, "/data/d1/f1", "user.tag"); err != nil || !bytes.Equal(v, []byte("kept")) {
			t.Fatalf("%s: xattr: %q %v", label, v, err)
		}
		if a, err := cl.Stat(ctx, "/data/d2/f2"); err != nil || a.GetNlink() != 2 {
			t.Fatalf("%s: the hard link inside: %v %v", label, a, err)
		}
	}
	fresh := newClient(t, c, c.Addrs()[:1], 60*time.Second)
	check("after assign", fresh)
	d0, err := fresh.Stat(ctx, "/data/d0")
	must(err)
	pool := rpc.NewPool(c.Security())
	defer pool.Close()
	held := false
	for _, a := range c.Addrs() {
		if r, err := rawLookup(ctx, pool, a, target, d0.GetIno(), "f5"); err == nil && r.GetStatus().GetCode() == wire.Code_OK {
			held = true
		}
	}
	if !held {
		t.Fatalf("/data/d0/f5 is not held by ministry %d", target)
	}
	must(put(ctx, fresh, "/data/d5/new", "new"))
	want["/data/d5/new"] = "new"

	// And back to the root ministry.
	mv, err = cl.Unassign(ctx, "/data")
	if err != nil || mv.GetState() != wire.MoveState_MOVE_DONE || mv.GetTarget() != 1 {
		t.Fatalf("unassign /data: %v %v", mv, err)
	}
	check("after unassign", newClient(t, c, c.Addrs()[:1], 60*time.Second))
	if err := cl.Rename(ctx, "/data/d0/f1", "/other/moved-back", 0); err != nil {
		t.Fatalf("rename between /data and /other, both in ministry 1 again: %v", err)
	}
}

// TestMoveSurvivesKills kills (SIGKILL) the president's leader, which
// drives the move, while a populated subtree is being copied, and then
// the minister of the source during the next move: each move ends on
// one side (the new leader carries it on), every file is there with its
// bytes, and the subtree takes writes afterwards.
func TestMoveSurvivesKills(t *testing.T) {
	c := testcluster.StartForTest(t, 120*time.Second, testcluster.ProcConfig{Binary: binary, Dir: t.TempDir(), Nodes: 5, Tick: 50 * time.Millisecond})
	cl := newClient(t, c, c.Addrs(), 60*time.Second)
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	want := map[string]string{}
	for _, top := range []string{"/m1", "/m2"} {
		if _, err := cl.Mkdir(ctx, top, 0o755); err != nil {
			t.Fatal(err)
		}
		for k := range 10 {
			d := fmt.Sprintf("%s/d%d", top, k)
			if _, err := cl.Mkdir(ctx, d, 0o755); err != nil {
				t.Fatal(err)
			}
			for j := range 150 {
				p := fmt.Sprintf("%s/f%d", d, j)
				if err := put(ctx, cl, p, p); err != nil {
					t.Fatal(err)
				}
				want[p] = p
			}
		}
	}
	// moveWhileKilling starts assigning path and kills the node that
	// victim names once the move is recorded as COPYING.
	moveWhileKilling := func(path string, victim func() int) *wire.Move {
		t.Helper()
		go func() { _, _ = cl.Assign(ctx, path, client.AssignOptions{New: true}) }()
		var id uint64
		for id == 0 {
			info, err := cl.ClusterMap(ctx)
			if err == nil {
				for _, m := range info.GetMoves() {
					if m.GetPath() == path {
						id = m.GetId()
					}
				}
			}
			if ctx.Err() != nil {
				t.Fatalf("the move of %s never began", path)
			}
			time.Sleep(5 * time.Millisecond)
		}
		v := victim()
		c.Kill(v)
		t.Logf("move %d of %s: killed node %d", id, path, v+1)
		mv, err := cl.WaitMove(ctx, id)
		if err != nil {
			t.Fatalf("move %d of %s: %v", id, path, err)
		}
		if err := c.Start(v); err != nil {
			t.Fatalf("restart node %d: %v", v+1, err)
		}
		return mv
	}
	mv := moveWhileKilling("/m1", func() int { return groupLeader(t, c, 0) })
	t.Logf("move of /m1 after killing the president's leader: %v %s", mv.GetState(), mv.GetError())
	mv2 := moveWhileKilling("/m2", func() int { return groupLeader(t, c, 1) })
	t.Logf("move of /m2 after killing the source's minister: %v %s", mv2.GetState(), mv2.GetError())
	for _, m := range []*wire.Move{mv, mv2} {
		if m.GetState() != wire.MoveState_MOVE_DONE && m.GetState() != wire.MoveState_MOVE_ABORTED {
			t.Fatalf("move %d ended %v", m.GetId(), m.GetState())
		}
	}
	fresh := newClient(t, c, c.Addrs(), 60*time.Second)
	for p, v := range want {
		b, err := get(ctx, fresh, p)
		if err != nil || b != v {
			t.Fatalf("%s = %q, %v after the kills", p, b, err)
		}
	}
	for _, top := range []string{"/m1", "/m2"} {
		ents, err := fresh.Readdir(ctx, top+"/d3")
		if err != nil || len(ents) != 150 {
			t.Fatalf("%s/d3 has %d entries (%v), want 150 (nothing twice, nothing lost)", top, len(ents), err)
		}
		if err := put(ctx, fresh, top+"/d3/after", "after"); err != nil {
			t.Fatalf("write in %s after the move: %v", top, err)
		}
	}
}

// TestMoveKillsAtEachStep kills -9, at each step of a move (held there by
// --testing-move-pause on every node), the process whose loss that step
// must survive: the target's minister while the subtree is copied, the
// president's leader and the source's minister once the move is
// COMMITTED, and the target's minister after the source already sends
// clients to it but before its copy is open. Every move ends DONE, the
// subtree is wholly at the target, and every file is there once with its
// bytes and takes writes.
func TestMoveKillsAtEachStep(t *testing.T) {
	c := testcluster.StartForTest(t, 120*time.Second, testcluster.ProcConfig{Binary: binary, Dir: t.TempDir(), Nodes: 5, Tick: 50 * time.Millisecond,
		ExtraArgs: []string{"--testing-move-pause", "copied=1500ms,committed=1500ms,opening=1500ms"}})
	cl := newClient(t, c, c.Addrs(), 60*time.Second)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	type scenario struct {
		path, what string
		// at: the move state to wait for, then how long to wait more.
		at    wire.MoveState
		after time.Duration
		// victim: the process to kill, given the move.
		victim func(mv *wire.Move) int
	}
	scenarios := []scenario{
		{"/k1", "the target's minister while the subtree is copied", wire.MoveState_MOVE_COPYING, 300 * time.Millisecond,
			func(mv *wire.Move) int { return groupLeader(t, c, mv.GetTarget()) }},
		{"/k2", "the president's leader once COMMITTED", wire.MoveState_MOVE_COMMITTED, 0,
			func(*wire.Move) int { return groupLeader(t, c, 0) }},
		{"/k3", "the source's minister once COMMITTED", wire.MoveState_MOVE_COMMITTED, 0,
			func(mv *wire.Move) int { return groupLeader(t, c, mv.GetSource()) }},
		// The committed pause (1.5 s), then the source's first finish
		// page: the opening pause has begun.
		{"/k4", "the target's minister before its copy opens", wire.MoveState_MOVE_COMMITTED, 2 * time.Second,
			func(mv *wire.Move) int { return groupLeader(t, c, mv.GetTarget()) }},
	}
	want := map[string]string{}
	for _, s := range scenarios {
		if _, err := cl.Mkdir(ctx, s.path, 0o755); err != nil {
			t.Fatal(err)
		}
		for k := range 4 {
			d := fmt.Sprintf("%s/d%d", s.path, k)
			if _, err := cl.Mkdir(ctx, d, 0o755); err != nil {
				t.Fatal(err)
			}
			for j := range 50 {
				p := fmt.Sprintf("%s/f%d", d, j)
				if err := put(ctx, cl, p, p); err != nil {
					t.Fatal(err)
				}
				want[p] = p
			}
		}
	}
	for _, s := range scenarios {
		go func() { _, _ = cl.Assign(ctx, s.path, client.AssignOptions{New: true}) }()
		var mv *wire.Move
		waitUntil(t, 60*time.Second, fmt.Sprintf("the move of %s to reach %v", s.path, s.at), func() bool {
			info, err := cl.ClusterMap(ctx)
			if err != nil {
				return false
			}
			for _, m := range info.GetMoves() {
				if m.GetPath() == s.path && !m.GetUnassign() {
					mv = m
				}
			}
			return mv != nil && mv.GetState() == s.at
		})
		time.Sleep(s.after)
		v := s.victim(mv)
		info, err := cl.ClusterMap(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range info.GetMoves() {
			if m.GetId() == mv.GetId() && m.GetState() != s.at {
				t.Fatalf("move of %s is %v before the kill, want %v: the pauses are too short for this machine", s.path, m.GetState(), s.at)
			}
		}
		c.Kill(v)
		t.Logf("move %d of %s: killed node %d, %s", mv.GetId(), s.path, v+1, s.what)
		done, err := cl.WaitMove(ctx, mv.GetId())
		if err != nil {
			t.Fatalf("move %d of %s: %v", mv.GetId(), s.path, err)
		}
		if done.GetState() != wire.MoveState_MOVE_DONE {
			t.Fatalf("move of %s after killing %s: %v %s; want DONE", s.path, s.what, done.GetState(), done.GetError())
		}
		if err := c.Start(v); err != nil {
			t.Fatalf("restart node %d: %v", v+1, err)
		}
		info, err = cl.ClusterMap(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st := ministryOf(info, mv.GetTarget()).GetSubtrees(); len(st) != 1 || st[0].GetPath() != s.path {
			t.Fatalf("after the move of %s the target ministry %d holds %v", s.path, mv.GetTarget(), st)
		}
	}
	fresh := newClient(t, c, c.Addrs(), 60*time.Second)
	for p, v := range want {
		if b, err := get(ctx, fresh, p); err != nil || b != v {
			t.Fatalf("%s = %q, %v after the kills", p, b, err)
		}
	}
	for _, s := range scenarios {
		for k := range 4 {
			d := fmt.Sprintf("%s/d%d", s.path, k)
			if ents, err := fresh.Readdir(ctx, d); err != nil || len(ents) != 50 {
				t.Fatalf("%s has %d entries (%v), want 50 (nothing twice, nothing lost)", d, len(ents), err)
			}
		}
		if err := put(ctx, fresh, s.path+"/d0/after", "after"); err != nil {
			t.Fatalf("write in %s after the move: %v", s.path, err)
		}
	}
}
