package namespace

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"syscall"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/govfs/govfs/internal/engine"
	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/wire"
)

func req(client, seq, firstIncomplete uint64) *wire.RequestID {
	return &wire.RequestID{ClientId: client, Seq: seq, FirstIncomplete: firstIncomplete}
}

func hasResult(t *testing.T, r engine.Reader, client, seq uint64) bool {
	t.Helper()
	v, err := r.Get(resultKey(client, seq))
	if err != nil {
		t.Fatal(err)
	}
	return v != nil
}

func TestDedupReturnsFirstResult(t *testing.T) {
	v := newEnv(t)
	first := v.cmd(mkop(root, "d", wire.FileType_DIRECTORY), req(7, 1, 1))
	if first.Errno != 0 {
		t.Fatalf("mkdir: %v", first)
	}
	rootVer := v.attr(root).Version
	// The retry would fail with EEXIST if applied again.
	again := v.cmd(mkop(root, "d", wire.FileType_DIRECTORY), req(7, 1, 1))
	if !proto.Equal(again, first) {
		t.Fatalf("retry = %v, want the first result %v", again, first)
	}
	if v.attr(root).Version != rootVer {
		t.Fatal("retry applied the command again")
	}
	// A failing request is remembered too, and a different client with the
	// same seq is a different request.
	bad := v.cmd(mkop(root, "d", wire.FileType_DIRECTORY), req(7, 2, 1))
	if syscall.Errno(bad.Errno) != syscall.EEXIST {
		t.Fatalf("second mkdir = %v", bad)
	}
	v.ok(&wire.Command_Unlink{Unlink: &wire.UnlinkOp{Parent: uint64(root), Name: []byte("d"), Dir: true}})
	if again := v.cmd(mkop(root, "d", wire.FileType_DIRECTORY), req(7, 2, 1)); !proto.Equal(again, bad) {
		t.Fatalf("retry of failed request = %v, want %v", again, bad)
	}
	if other := v.cmd(mkop(root, "d", wire.FileType_DIRECTORY), req(8, 1, 1)); other.Errno != 0 || other.Attr.Ino == first.Attr.Ino {
		t.Fatalf("other client's request = %v", other)
	}
	// Client 0 means "no dedup": nothing is remembered.
	v.cmd(mkop(root, "e", wire.FileType_REGULAR), req(0, 1, 1))
	if hasResult(t, v.rw, 0, 1) {
		t.Fatal("result stored for client 0")
	}
}

func TestDedupPruning(t *testing.T) {
	v := newEnv(t)
	for seq := uint64(1); seq <= 5; seq++ {
		v.cmd(&wire.Command_GrantInodes{GrantInodes: &wire.GrantInodesOp{Start: 100000 + seq, End: 100000 + seq + 1}}, req(3, seq, 1))
	}
	for seq := uint64(1); seq <= 5; seq++ {
		if !hasResult(t, v.rw, 3, seq) {
			t.Fatalf("result %d missing", seq)
		}
	}
	// The client has seen answers up to 3: 1..3 are dropped.
	v.cmd(&wire.Command_GrantInodes{GrantInodes: &wire.GrantInodesOp{Start: 200000, End: 200001}}, req(3, 6, 4))
	for seq, want := range map[uint64]bool{1: false, 2: false, 3: false, 4: true, 5: true, 6: true} {
		if hasResult(t, v.rw, 3, seq) != want {
			t.Errorf("result %d present = %v, want %v", seq, !want, want)
		}
	}
	// A delayed duplicate of a dropped request is refused, not re-applied.
	before := v.attr(root).Version
	stale := v.cmd(mkop(root, "late", wire.FileType_REGULAR), req(3, 2, 1))
	if syscall.Errno(stale.Errno) != syscall.EINVAL || stale.Message == "" {
		t.Fatalf("stale request = %v", stale)
	}
	if _, ok := v.lookup(root, "late"); ok || v.attr(root).Version != before {
		t.Fatal("stale request was applied")
	}
	// Retained answers are still answered.
	if r := v.cmd(mkop(root, "x", wire.FileType_REGULAR), req(3, 5, 4)); r.Errno != 0 || r.Start != 100005 {
		t.Fatalf("retry of seq 5 = %v", r)
	}
	// The window bounds a client that never advances first_incomplete.
	v.cmd(mkop(root, "w", wire.FileType_REGULAR), req(3, 5+dedupWindow+1000, 4))
	if hasResult(t, v.rw, 3, 5) || !hasResult(t, v.rw, 3, 5+dedupWindow+1000) {
		t.Fatal("the window of dedupWindow answers is not enforced")
	}
	if r := v.cmd(mkop(root, "w2", wire.FileType_REGULAR), req(3, 5+1000-1, 4)); syscall.Errno(r.Errno) != syscall.EINVAL {
		t.Fatalf("request below the window = %v", r)
	}
	if r := v.cmd(mkop(root, "w2", wire.FileType_REGULAR), req(3, 5+1000, 4)); r.Errno != 0 {
		t.Fatalf("request inside the window = %v", r)
	}
	// first_incomplete beyond seq never drops the answer just stored.
	v.cmd(mkop(root, "y", wire.FileType_REGULAR), req(3, 2001, 5000))
	if !hasResult(t, v.rw, 3, 2001) {
		t.Fatal("current answer dropped")
	}
}

func TestClientExpiry(t *testing.T) {
	v := newEnv(t)
	for c := uint64(1); c <= 10; c++ {
		v.cmd(mkop(root, "f"+string(rune('a'+c)), wire.FileType_REGULAR), req(c, 1, 1))
	}
	// Last use is kept to the minute: client 99 is two quanta younger.
	v.now += 2 * idleQuantumNs
	v.cmd(mkop(root, "z", wire.FileType_REGULAR), req(99, 1, 1))
	v.now += clientIdleNs - idleQuantumNs // clients 1..10 are over an hour old, 99 is not
	v.cmd(nil, nil)
	for c := uint64(1); c <= 10; c++ {
		if hasResult(t, v.rw, c, 1) {
			t.Fatalf("client %d not expired", c)
		}
		if n := countPrefix(t, v.rw, clientKey(c)); n != 0 {
			t.Fatalf("client record %d remains", c)
		}
	}
	if !hasResult(t, v.rw, 99, 1) {
		t.Fatal("client 99 expired before its hour")
	}
	// Active clients survive: 99 refreshes, then an hour passes for 99's
	// previous use but not its latest.
	v.now += idleQuantumNs
	v.cmd(nil, req(99, 1, 1))
	v.now += clientIdleNs - idleQuantumNs
	v.cmd(nil, nil)
	if !hasResult(t, v.rw, 99, 1) {
		t.Fatal("recently used client expired")
	}
	if n := countPrefix(t, v.rw, []byte{kindIdle}); n != 1 {
		t.Fatalf("%d idle index entries, want 1", n)
	}
	// Expiry runs at most once per quantum of command time.
	v.now += 2 * clientIdleNs
	v.cmd(mkop(root, "late", wire.FileType_REGULAR), req(7, 1, 1)) // runs expiry: 99 goes
	if hasResult(t, v.rw, 99, 1) {
		t.Fatal("client 99 not expired after two idle hours")
	}
}

func TestCommandErrors(t *testing.T) {
	v := newEnv(t)
	v.fails(nil, syscall.EINVAL)
	v.fails(&wire.Command_InitCluster{InitCluster: &wire.InitClusterOp{ClusterId: "x"}}, syscall.EINVAL)
	v.fails(&wire.Command_AllocInodes{AllocInodes: &wire.AllocInodesOp{Ministry: 1, Count: 10}}, syscall.EINVAL)
	for _, ver := range []uint32{0, 2} {
		if _, err := Apply(v.rw, &wire.Command{Version: ver, Op: &wire.Command_Create{Create: mkop(root, "x", wire.FileType_REGULAR).Create}}); err == nil {
			t.Fatalf("version %d accepted", ver)
		}
	}
	if _, ok := v.lookup(root, "x"); ok {
		t.Fatal("command of unknown version applied")
	}
}

// TestDeterministic applies the same commands to two stores and compares
// every key.
func TestDeterministic(t *testing.T) {
	run := func() string {
		v, n := newTree(t)
		v.ok(ren(root, "a", n["b"], "a", 0))
		v.ok(&wire.Command_SetXattr{SetXattr: &wire.SetXattrOp{Ino: uint64(n["f"]), Name: []byte("user.k"), Value: []byte("v")}})
		v.ok(ren(n["c"], "cf", root, "g", 0))
		v.cmd(mkop(root, "r", wire.FileType_FIFO), req(5, 1, 1))
		return v.dump()
	}
	if a, b := run(), run(); a != b {
		t.Fatalf("states differ:\n%s\n---\n%s", a, b)
	}
}

// TestFailureForAnInodeNotHereIsNotRemembered: a request that failed
// only because its directory is not held here (it moved away) is not
// remembered: once the directory is back, the same request applies
// instead of answering the stale ENOENT (found by the nemesis test
// across moves). A failure with the directory here is remembered.
func TestFailureForAnInodeNotHereIsNotRemembered(t *testing.T) {
	v := newEnv(t)
	d := ids.Ino(v.ok(mkop(root, "d", wire.FileType_DIRECTORY)).Attr.Ino)
	saved, err := v.rw.Get(inodeKey(d))
	if err != nil || saved == nil {
		t.Fatalf("inode record of %v: %v", d, err)
	}
	// The directory leaves (as a move's finish deletes it here).
	if err := v.rw.Delete(inodeKey(d)); err != nil {
		t.Fatal(err)
	}
	if r := v.cmd(mkop(d, "f", wire.FileType_REGULAR), req(9, 1, 1)); syscall.Errno(r.Errno) != syscall.ENOENT {
		t.Fatalf("create in a directory not here = %v, want ENOENT", r)
	}
	if hasResult(t, v.rw, 9, 1) {
		t.Fatal("the ENOENT of a request whose directory is not here was remembered")
	}
	// It comes back (a move back imports it): the same request applies.
	if err := v.rw.Set(inodeKey(d), saved); err != nil {
		t.Fatal(err)
	}
	if r := v.cmd(mkop(d, "f", wire.FileType_REGULAR), req(9, 1, 1)); r.Errno != 0 {
		t.Fatalf("the same request once the directory is back = %v, want it applied", r)
	}
	// With the directory here, a failure stands and is remembered.
	if r := v.cmd(&wire.Command_Unlink{Unlink: &wire.UnlinkOp{Parent: uint64(d), Name: []byte("nope")}}, req(9, 2, 1)); syscall.Errno(r.Errno) != syscall.ENOENT {
		t.Fatalf("unlink of a missing name = %v", r)
	}
	if !hasResult(t, v.rw, 9, 2) {
		t.Fatal("an ENOENT for a missing name in a directory held here was not remembered")
	}
}

// countDeletes counts point deletes of keys under a prefix.
type countDeletes struct {
	engine.ReadWriter
	under []byte
	n     int
}

func (c *countDeletes) Delete(key []byte) error {
	if bytes.HasPrefix(key, c.under) {
		c.n++
	}
	return c.ReadWriter.Delete(key)
}

// A client's seqs are spread over every ministry it talks to: this one
// sees one in five. Only the answers it holds are deleted when the
// client's watermark passes them (no tombstones for seqs it never saw),
// and none it holds below the watermark is left behind.
func TestDedupSparseSeqsDeleteOnlyHeldAnswers(t *testing.T) {
	v := newEnv(t)
	const client = 9
	c := &countDeletes{ReadWriter: v.rw, under: resultPrefix(client)}
	v.rw = c
	for seq := uint64(5); seq <= 1000; seq += 5 {
		before := c.n
		v.cmd(&wire.Command_GrantInodes{GrantInodes: &wire.GrantInodesOp{Start: 100000 + seq, End: 100000 + seq + 1}}, req(client, seq, seq-2))
		if d := c.n - before; d > 1 {
			t.Fatalf("seq %d: %d deletes of answers, at most one was held below the watermark", seq, d)
		}
	}
	var left []uint64
	if err := v.rw.Scan(resultPrefix(client), prefixEnd(resultPrefix(client)), func(k, _ []byte) bool {
		left = append(left, binary.BigEndian.Uint64(k[9:]))
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(left, []uint64{1000}) {
		t.Fatalf("answers left %v, want only the last (1000)", left)
	}

	// A record from before tracking (16 bytes) still drops every answer
	// below the watermark, blindly.
	const old = 10
	for seq := uint64(1); seq <= 3; seq++ {
		v.cmd(&wire.Command_GrantInodes{GrantInodes: &wire.GrantInodesOp{Start: 200000 + seq, End: 200000 + seq + 1}}, req(old, seq, 1))
	}
	rec, _, err := loadClient(v.rw, old)
	if err != nil {
		t.Fatal(err)
	}
	rec.tracked, rec.held = false, nil
	if err := v.rw.Set(clientKey(old), rec.encode()[:16]); err != nil {
		t.Fatal(err)
	}
	v.cmd(&wire.Command_GrantInodes{GrantInodes: &wire.GrantInodesOp{Start: 300000, End: 300001}}, req(old, 9, 9))
	for seq := uint64(1); seq <= 3; seq++ {
		if hasResult(t, v.rw, old, seq) {
			t.Fatalf("untracked record left answer %d below the watermark", seq)
		}
	}
	if !hasResult(t, v.rw, old, 9) {
		t.Fatal("current answer dropped")
	}
}

func TestClientRecordEncoding(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 500 {
		rec := clientRecord{lastUse: rng.Uint64(), watermark: rng.Uint64N(1 << 40), tracked: rng.IntN(4) != 0}
		if rec.tracked {
			for range rng.IntN(40) {
				rec.hold(rec.watermark + rng.Uint64N(3000))
			}
		}
		got, err := decodeClient(rec.encode())
		if err != nil {
			t.Fatal(err)
		}
		if got.lastUse != rec.lastUse || got.watermark != rec.watermark || got.tracked != rec.tracked || !slices.Equal(got.held, rec.held) {
			t.Fatalf("round trip %+v -> %+v", rec, got)
		}
	}
	// Answers further apart than the window stop the tracking.
	rec := clientRecord{tracked: true}
	rec.hold(10)
	rec.hold(10 + maxHeldSpan)
	if rec.tracked || rec.held != nil {
		t.Fatalf("span over the bound still tracked: %+v", rec)
	}
	for _, bad := range [][]byte{make([]byte, 15), append(make([]byte, 16), 2), append(make([]byte, 16), 1, 0)} {
		if _, err := decodeClient(bad); err == nil {
			t.Errorf("corrupt record %x decoded", bad)
		}
	}
}

// TestDedupModel drives dedupBegin/dedupFinish with requests in random
// order, retries and acknowledgements, for a client whose record tracks
// its answers and for one that deletes blindly, against a model: a retry
// of an answered request gets that answer while it is at or above the
// watermark, anything below the watermark is refused, and a new request
// is never taken for a retry.
func TestDedupModel(t *testing.T) {
	for _, mode := range []struct{ tracked, cached bool }{{true, false}, {false, false}, {true, true}, {false, true}} {
		tracked := mode.tracked
		// cached: through a batch's record cache (applyBatch), stored
		// every few requests, as batches end.
		var cc *clientCache
		if mode.cached {
			cc = &clientCache{}
		}
		v := newEnv(t)
		const client = 5
		rng := rand.New(rand.NewPCG(7, uint64(len(fmt.Sprint(tracked)))))
		answered := map[uint64]bool{}
		watermark := uint64(0)
		next := uint64(1)
		for step := range 5000 {
			var seq uint64
			if len(answered) > 0 && rng.IntN(3) == 0 {
				seq = next - 1 - rng.Uint64N(min(next-1, 40)) // a retry, maybe of a dropped one
			} else {
				seq = next + rng.Uint64N(4) // some seqs go to other ministries
				next = seq + 1
			}
			first := watermark
			if rng.IntN(2) == 0 && seq > watermark {
				first += rng.Uint64N(seq - watermark + 1)
			}
			r := req(client, seq, first)
			if cc != nil && step%7 == 0 {
				if err := cc.flush(v.rw); err != nil {
					t.Fatal(err)
				}
			}
			res, done, err := dedupBegin(v.rw, r, v.now, cc)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case seq < watermark:
				if !done || syscall.Errno(res.GetErrno()) != syscall.EINVAL {
					t.Fatalf("tracked=%v step %d: seq %d below the watermark %d: %v %v", tracked, step, seq, watermark, res, done)
				}
				continue
			case answered[seq]:
				if !done || res.GetStart() != seq {
					t.Fatalf("tracked=%v step %d: retry of answered seq %d: %v %v", tracked, step, seq, res, done)
				}
				continue
			case done:
				t.Fatalf("tracked=%v step %d: new seq %d taken for a retry: %v", tracked, step, seq, res)
			}
			if err := dedupFinish(v.rw, r, &wire.Result{Start: seq}, cc); err != nil {
				t.Fatal(err)
			}
			answered[seq] = true
			if b := min(max(first, watermark), seq); b > watermark {
				watermark = b
			}
			for s := range answered {
				if s < watermark {
					delete(answered, s)
				}
			}
			if step == 0 && !tracked {
				if cc != nil {
					if err := cc.flush(v.rw); err != nil {
						t.Fatal(err)
					}
				}
				rec, _, err := loadClient(v.rw, client)
				if err != nil {
					t.Fatal(err)
				}
				rec.tracked, rec.held = false, nil
				if err := storeClient(v.rw, client, rec); err != nil {
					t.Fatal(err)
				}
			}
		}
		if cc != nil {
			if err := cc.flush(v.rw); err != nil {
				t.Fatal(err)
			}
		}
		rec, _, err := loadClient(v.rw, client)
		if err != nil || rec.tracked != tracked {
			t.Fatalf("record tracked=%v, want %v (%v)", rec.tracked, tracked, err)
		}
	}
}
