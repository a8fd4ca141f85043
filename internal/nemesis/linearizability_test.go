// Package nemesis holds system-level fault-injection tests: an in-process
// metadata cluster (testcluster.InProc over raftsim) is crashed,
// partitioned and made lossy while clients run, and the recorded history
// is checked for linearizability with porcupine.
package nemesis

import (
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand"
	randv2 "math/rand/v2"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/govfs/govfs/client"
	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/rpc"
	"github.com/govfs/govfs/internal/testcluster"
	"github.com/govfs/govfs/internal/wire"
)

// ---- the model: a directory holding a subset of a few names ----

// names are the entries the workload touches; state bit i = names[i] exists.
var names = []string{"a", "b", "c"}

type opKind uint8

const (
	opCreate opKind = iota // exclusive create
	opUnlink
	opRename // plain rename (replaces the target)
	opStat   // linearizable Lookup
)

func (k opKind) String() string {
	return [...]string{"create", "unlink", "rename", "stat"}[k]
}

// outcome is what an operation answered.
type outcome uint8

const (
	resOK      outcome = iota // mutation applied / stat found the name
	resEEXIST                 // create: the name existed
	resENOENT                 // unlink, rename: source missing; stat: absent
	resUnknown                // timeout, unavailable...: maybe applied, maybe not
	resEXDEV                  // rename across ministries: refused, nothing changed
)

func (o outcome) String() string {
	return [...]string{"ok", "EEXIST", "ENOENT", "unknown", "EXDEV"}[o]
}

type fsInput struct {
	kind     opKind
	from, to int // indexes into names; to only for rename
	// dir and toDir index the directories of the run (toDir only for
	// rename); each directory is a separate object of the model, and
	// porcupine checks each one's history on its own (linearizability is
	// local). A rename between directories of different ministries must
	// answer EXDEV and change nothing.
	dir, toDir int
}

type fsOutput struct{ res outcome }

// state is a bitmask of existing names: canonical, so == is equality.
type state uint8

func bit(i int) state { return 1 << uint(i) }

func (s state) String() string {
	var in []string
	for i, n := range names {
		if s&bit(i) != 0 {
			in = append(in, n)
		}
	}
	return "{" + strings.Join(in, ",") + "}"
}

// step returns every state the directory can be in after the operation,
// given what it answered; none when the answer is impossible from s. An
// unknown outcome of a mutation yields both "it happened" and "it did not".
func step(s state, in fsInput, out outcome) []state {
	if in.kind == opRename && in.dir != in.toDir {
		// Across ministries: refused, or no answer; never applied (if it
		// were, a name would appear or vanish in one of the directories
		// with nothing to explain it).
		if out == resEXDEV || out == resUnknown {
			return []state{s}
		}
		return nil
	}
	present := s&bit(in.from) != 0
	// after is the state if the mutation takes effect; effective says it
	// changes something observable (i.e. succeeds rather than failing).
	var after state
	var okWhenPresent bool // the op succeeds iff the name is present
	switch in.kind {
	case opStat:
		switch {
		case out == resOK && present, out == resENOENT && !present:
			return []state{s}
		}
		return nil
	case opCreate:
		after, okWhenPresent = s|bit(in.from), false
	case opUnlink:
		after, okWhenPresent = s&^bit(in.from), true
	case opRename:
		after, okWhenPresent = s, true
		if in.from != in.to {
			after = s&^bit(in.from) | bit(in.to)
		}
	}
	succeeds := present == okWhenPresent
	failure := resENOENT
	if in.kind == opCreate {
		failure = resEEXIST
	}
	switch {
	case out == resUnknown && succeeds:
		if after == s {
			return []state{s}
		}
		return []state{s, after}
	case out == resUnknown: // the op would fail: no change either way
		return []state{s}
	case out == resOK && succeeds:
		return []state{after}
	case out == failure && !succeeds:
		return []state{s}
	}
	return nil
}

func describeOp(in fsInput, out outcome) string {
	from := fmt.Sprintf("d%d/%s", in.dir, names[in.from])
	switch in.kind {
	case opRename:
		return fmt.Sprintf("rename(%s,d%d/%s) -> %v", from, in.toDir, names[in.to], out)
	case opStat:
		if out == resOK {
			return fmt.Sprintf("stat(%s) -> exists", from)
		}
		return fmt.Sprintf("stat(%s) -> %v", from, out)
	}
	return fmt.Sprintf("%v(%s) -> %v", in.kind, from, out)
}

var dirModel = (&porcupine.NondeterministicModel{
	Init: func() []interface{} { return []interface{}{state(0)} },
	// One directory per partition, by the operation's source directory.
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		var parts [][]porcupine.Operation
		for _, op := range history {
			d := op.Input.(fsInput).dir
			for len(parts) <= d {
				parts = append(parts, nil)
			}
			parts[d] = append(parts[d], op)
		}
		return parts
	},
	Step: func(st, input, output interface{}) []interface{} {
		next := step(st.(state), input.(fsInput), output.(fsOutput).res)
		out := make([]interface{}, len(next))
		for i, n := range next {
			out[i] = n
		}
		return out
	},
	Equal: func(a, b interface{}) bool { return a.(state) == b.(state) },
	DescribeOperation: func(input, output interface{}) string {
		return describeOp(input.(fsInput), output.(fsOutput).res)
	},
	DescribeState: func(st interface{}) string { return st.(state).String() },
}).ToModel()

func TestModel(t *testing.T) {
	a, b := 0, 1
	cases := []struct {
		s    state
		in   fsInput
		out  outcome
		want []state
	}{
		{0, fsInput{kind: opCreate, from: a, to: 0}, resOK, []state{bit(a)}},
		{bit(a), fsInput{kind: opCreate, from: a, to: 0}, resOK, nil},
		{bit(a), fsInput{kind: opCreate, from: a, to: 0}, resEEXIST, []state{bit(a)}},
		{0, fsInput{kind: opCreate, from: a, to: 0}, resEEXIST, nil},
		{0, fsInput{kind: opCreate, from: a, to: 0}, resUnknown, []state{0, bit(a)}},
		{bit(a), fsInput{kind: opCreate, from: a, to: 0}, resUnknown, []state{bit(a)}},
		{bit(a), fsInput{kind: opUnlink, from: a, to: 0}, resOK, []state{0}},
		{0, fsInput{kind: opUnlink, from: a, to: 0}, resENOENT, []state{0}},
		{0, fsInput{kind: opUnlink, from: a, to: 0}, resOK, nil},
		{bit(a), fsInput{kind: opUnlink, from: a, to: 0}, resUnknown, []state{bit(a), 0}},
		{bit(a), fsInput{kind: opRename, from: a, to: b}, resOK, []state{bit(b)}},
		{bit(a) | bit(b), fsInput{kind: opRename, from: a, to: b}, resOK, []state{bit(b)}},
		{bit(a), fsInput{kind: opRename, from: a, to: a}, resOK, []state{bit(a)}},
		{bit(b), fsInput{kind: opRename, from: a, to: b}, resENOENT, []state{bit(b)}},
		{bit(b), fsInput{kind: opRename, from: a, to: b}, resOK, nil},
		{bit(a), fsInput{kind: opRename, from: a, to: b}, resUnknown, []state{bit(a), bit(b)}},
		{bit(a), fsInput{kind: opRename, from: a, to: a}, resUnknown, []state{bit(a)}},
		{bit(a), fsInput{kind: opStat, from: a, to: 0}, resOK, []state{bit(a)}},
		{bit(a), fsInput{kind: opStat, from: a, to: 0}, resENOENT, nil},
		{0, fsInput{kind: opStat, from: a, to: 0}, resENOENT, []state{0}},
		// Across ministries: refused or unanswered, never applied.
		{bit(a), fsInput{kind: opRename, from: a, to: b, toDir: 1}, resEXDEV, []state{bit(a)}},
		{bit(a), fsInput{kind: opRename, from: a, to: b, toDir: 1}, resUnknown, []state{bit(a)}},
		{bit(a), fsInput{kind: opRename, from: a, to: b, toDir: 1}, resOK, nil},
		{bit(a), fsInput{kind: opRename, from: a, to: b}, resEXDEV, nil},
	}
	for _, tc := range cases {
		if got := step(tc.s, tc.in, tc.out); !slices.Equal(got, tc.want) {
			t.Errorf("step(%v, %s) = %v, want %v", tc.s, describeOp(tc.in, tc.out), got, tc.want)
		}
	}
	// A history that is not linearizable must be caught: a create
	// acknowledged before a stat began, which then misses it.
	bad := []porcupine.Operation{
		{ClientId: 0, Input: fsInput{kind: opCreate, from: a, to: 0}, Call: 0, Output: fsOutput{resOK}, Return: 10},
		{ClientId: 1, Input: fsInput{kind: opStat, from: a, to: 0}, Call: 20, Output: fsOutput{resENOENT}, Return: 30},
	}
	if porcupine.CheckOperations(dirModel, bad) {
		t.Error("stale read after an acknowledged create was accepted")
	}
	// The same with the create's outcome unknown is fine.
	bad[0].Output, bad[0].Return = fsOutput{resUnknown}, math.MaxInt64/2
	if !porcupine.CheckOperations(dirModel, bad) {
		t.Error("unknown create was not allowed to take effect later (or never)")
	}
	// Directories are separate objects: a create in d0 says nothing
	// about d1, but a stale read in d1 is caught in d1's partition.
	two := []porcupine.Operation{
		{ClientId: 0, Input: fsInput{kind: opCreate, from: a}, Call: 0, Output: fsOutput{resOK}, Return: 10},
		{ClientId: 1, Input: fsInput{kind: opStat, from: a, dir: 1, toDir: 1}, Call: 20, Output: fsOutput{resENOENT}, Return: 30},
	}
	if !porcupine.CheckOperations(dirModel, two) {
		t.Error("a create in one directory was taken to affect another")
	}
	two = append(two,
		porcupine.Operation{ClientId: 2, Input: fsInput{kind: opCreate, from: b, dir: 1, toDir: 1}, Call: 40, Output: fsOutput{resOK}, Return: 50},
		porcupine.Operation{ClientId: 3, Input: fsInput{kind: opStat, from: b, dir: 1, toDir: 1}, Call: 60, Output: fsOutput{resENOENT}, Return: 70})
	if porcupine.CheckOperations(dirModel, two) {
		t.Error("a stale read in the second directory was accepted")
	}
}

// ---- the run ----

const (
	workers    = 5
	runFor     = 7 * time.Second
	opTimeout  = 3 * time.Second
	callTimout = 500 * time.Millisecond
)

func testSeed(t *testing.T) int64 {
	if s := os.Getenv("GOVFS_NEMESIS_SEED"); s != "" {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("GOVFS_NEMESIS_SEED=%q: %v", s, err)
		}
		return v
	}
	return time.Now().UnixNano()
}

func newClient(t *testing.T, addrs []string, seed int64, opTO, callTO time.Duration) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cl, err := client.New(ctx, client.Config{
		MetaAddrs:   addrs,
		CallTimeout: callTO,
		OpTimeout:   opTO,
		Rand:        randv2.New(randv2.NewPCG(uint64(seed), uint64(seed)^0x5bd1e995)),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// classify turns a mutation's error into an outcome; anything that is
// not a definite answer is unknown (the mutation may yet be applied).
func classify(err error) outcome {
	switch {
	case err == nil:
		return resOK
	case errors.Is(err, syscall.EEXIST):
		return resEEXIST
	case errors.Is(err, syscall.ENOENT):
		return resENOENT
	case errors.Is(err, syscall.EXDEV):
		return resEXDEV
	}
	return resUnknown
}

// nemesis injects faults into c until end, in a seeded order.
type nemesis struct {
	c   *testcluster.InProc
	rng *rand.Rand
	log []string
	t0  time.Time
	// groups whose leaders the faults aim at, one picked per fault
	// (default: the root ministry).
	groups []ids.GroupID
}

func (n *nemesis) note(format string, args ...any) {
	n.log = append(n.log, fmt.Sprintf("%7.3fs ", time.Since(n.t0).Seconds())+fmt.Sprintf(format, args...))
}

func (n *nemesis) allIDs() []ids.NodeID {
	var out []ids.NodeID
	for id := range n.c.Peers {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

func (n *nemesis) leader() (ids.NodeID, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	g := ids.RootMinistry
	if len(n.groups) > 0 {
		g = n.groups[n.rng.Intn(len(n.groups))]
	}
	id, err := n.c.Leader(ctx, g)
	if err != nil {
		n.note("no leader of group %v within 2s: %v", g, err)
		return 0, false
	}
	n.note("group %v is led by %v", g, id)
	return id, true
}

func (n *nemesis) crashLeader() {
	id, ok := n.leader()
	if !ok {
		return
	}
	n.note("crash leader %v", id)
	n.c.Stop(id)
	time.Sleep(500 * time.Millisecond)
	n.note("restart %v", id)
	n.c.Start(id)
}

func (n *nemesis) crashFollower() {
	lead, ok := n.leader()
	if !ok {
		return
	}
	var fs []ids.NodeID
	for _, id := range n.allIDs() {
		if id != lead {
			fs = append(fs, id)
		}
	}
	id := fs[n.rng.Intn(len(fs))]
	n.note("crash follower %v (leader %v)", id, lead)
	n.c.Stop(id)
	time.Sleep(500 * time.Millisecond)
	n.note("restart %v", id)
	n.c.Start(id)
}

func (n *nemesis) partitionLeader() {
	id, ok := n.leader()
	if !ok {
		return
	}
	var others []ids.NodeID
	for _, o := range n.allIDs() {
		if o != id {
			others = append(others, o)
		}
	}
	n.note("partition leader %v from %v", id, others)
	n.c.Net.Partition([]ids.NodeID{id}, others)
	time.Sleep(600 * time.Millisecond)
	n.note("heal")
	n.c.Net.Heal()
}

func (n *nemesis) lossy() {
	n.note("drop 10%% of raft messages")
	n.c.Net.SetDropRate(0.1)
	time.Sleep(700 * time.Millisecond)
	n.note("drop 0%%")
	n.c.Net.SetDropRate(0)
}

// run injects faults until end, then heals and restarts everything.
func (n *nemesis) run(end time.Time) {
	faults := []func(){n.crashLeader, n.partitionLeader, n.lossy, n.crashFollower}
	for time.Now().Before(end) {
		for _, i := range n.rng.Perm(len(faults)) {
			if !time.Now().Before(end) {
				break
			}
			faults[i]()
			time.Sleep(time.Duration(150+n.rng.Intn(200)) * time.Millisecond)
		}
	}
	n.recover()
}

func (n *nemesis) recover() {
	n.c.Net.Heal()
	n.c.Net.SetDropRate(0)
	for _, id := range n.allIDs() {
		if n.c.Node(id) == nil {
			n.note("restart %v (end of run)", id)
			n.c.Start(id)
		}
	}
}

// rawLookup asks the node at addr itself (no client failover) for a
// linearizable Lookup of name in dir.
func rawLookup(ctx context.Context, pool *rpc.Pool, addr string, g ids.GroupID, dir ids.Ino, name string) (bool, error) {
	cc, err := pool.Get(addr)
	if err != nil {
		return false, err
	}
	resp, err := wire.NewMetaClient(cc).Read(ctx, &wire.ReadRequest{Group: uint64(g),
		Consistency: wire.ReadConsistency_LINEARIZABLE,
		Op:          &wire.ReadRequest_Lookup{Lookup: &wire.LookupReq{Parent: uint64(dir), Name: []byte(name)}}})
	if err != nil {
		return false, err
	}
	switch st := resp.GetStatus(); {
	case st.GetCode() == wire.Code_OK:
		return true, nil
	case st.GetCode() == wire.Code_ERRNO && syscall.Errno(st.GetErrno()) == syscall.ENOENT:
		return false, nil
	default:
		return false, fmt.Errorf("%v: %s", st.GetCode(), st.GetMessage())
	}
}

// rawLookupRetry retries rawLookup until it answers or ctx ends.
func rawLookupRetry(ctx context.Context, pool *rpc.Pool, addr string, g ids.GroupID, dir ids.Ino, name string) (bool, error) {
	for {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		ok, err := rawLookup(rctx, pool, addr, g, dir, name)
		cancel()
		if err == nil {
			return ok, nil
		}
		select {
		case <-ctx.Done():
			return false, fmt.Errorf("lookup %q on %s: %w (last: %v)", name, addr, ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// nemesisCluster starts the in-process cluster of the nemesis tests and
// an admin client, with the run's seed (logged, to repeat a run).
func nemesisCluster(t *testing.T) (int64, *testcluster.InProc, *client.Client) {
	seed := testSeed(t)
	t.Logf("seed %d (set GOVFS_NEMESIS_SEED to repeat the choices)", seed)
	c := testcluster.NewInProc(t, 3)
	return seed, c, newClient(t, c.Addrs(), seed, 20*time.Second, time.Second)
}

// assignNew gives the subtree at path to a new ministry (while every
// node is up: a new one needs three live nodes) and returns its group.
func assignNew(t *testing.T, admin *client.Client, path string) ids.GroupID {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	mv, err := admin.Assign(ctx, path, client.AssignOptions{New: true})
	if err != nil || mv.GetState() != wire.MoveState_MOVE_DONE {
		t.Fatalf("assign %s: %v %v", path, mv, err)
	}
	return ids.GroupID(mv.GetTarget())
}

// TestLinearizableUnderNemesis runs five clients doing creates, unlinks,
// renames and linearizable lookups of three names in one directory while
// the leader of the root ministry is crashed and partitioned away,
// followers are crashed and raft messages are dropped. The history must
// be linearizable against a model of the directory, with every answer
// that is not definite (timeouts, unavailability) taken as "maybe
// applied, maybe later". Afterwards every node must answer the same
// final state with linearizable reads, and that state is part of the
// checked history.
func TestLinearizableUnderNemesis(t *testing.T) {
	seed, c, admin := nemesisCluster(t)
	dir := mkdirRetry(t, admin, "lin")
	checkLinearizable(t, seed, c, admin, []linDir{{dir, ids.RootMinistry}}, nil)
}

// TestLinearizableAcrossMinistries is TestLinearizableUnderNemesis on
// two directories held by two ministries, with the faults aimed at
// either ministry's leader; one rename in four goes from one directory
// to the other and must answer EXDEV and change nothing. Each
// directory's history must be linearizable and every node must agree on
// both final states.
func TestLinearizableAcrossMinistries(t *testing.T) {
	seed, c, admin := nemesisCluster(t)
	near := mkdirRetry(t, admin, "near")
	far := mkdirRetry(t, admin, "far")
	checkLinearizable(t, seed, c, admin, []linDir{{near, ids.RootMinistry}, {far, assignNew(t, admin, "/far")}}, nil)
}

// TestLinearizableAcrossMoves is TestLinearizableUnderNemesis while the
// directory the workload uses is moved back and forth between the root
// ministry and another one (assign, unassign) under the same faults:
// the history must still be linearizable, every node must agree on the
// final state, and at least one move must have completed during the run.
func TestLinearizableAcrossMoves(t *testing.T) {
	seed, c, admin := nemesisCluster(t)
	ctx := context.Background()
	dir := mkdirRetry(t, admin, "lin")
	// A second ministry, made while every node is up (a new one needs
	// three live nodes); the mover then uses it by id.
	mkdirRetry(t, admin, "other")
	other := uint64(assignNew(t, admin, "/other"))
	var moves []string
	mover := func(stop <-chan struct{}) {
		assigned := false
		for {
			select {
			case <-stop:
				// Home again for the final per-node checks.
				for assigned {
					mctx, mcancel := context.WithTimeout(ctx, 60*time.Second)
					m, err := admin.Unassign(mctx, "/lin")
					mcancel()
					switch {
					case err == nil && m.GetState() == wire.MoveState_MOVE_DONE:
						assigned = false
					case err != nil && errors.Is(err, syscall.EINVAL):
						assigned = false // already home (a move we did not see end)
					case err != nil:
						moves = append(moves, fmt.Sprintf("final unassign: %v", err))
						time.Sleep(200 * time.Millisecond)
					}
				}
				return
			default:
			}
			mctx, mcancel := context.WithTimeout(ctx, 20*time.Second)
			var m *wire.Move
			var err error
			what := "assign"
			if assigned {
				what = "unassign"
				m, err = admin.Unassign(mctx, "/lin")
			} else {
				m, err = admin.Assign(mctx, "/lin", client.AssignOptions{Ministry: other})
			}
			mcancel()
			switch {
			case err == nil:
				moves = append(moves, fmt.Sprintf("%s: %v %s", what, m.GetState(), m.GetError()))
				if m.GetState() == wire.MoveState_MOVE_DONE {
					assigned = !assigned
				}
			case errors.Is(err, syscall.EEXIST) && !assigned, errors.Is(err, syscall.EINVAL) && assigned:
				// The previous request took effect after all.
				assigned = !assigned
				moves = append(moves, fmt.Sprintf("%s: already done (%v)", what, err))
			default:
				moves = append(moves, fmt.Sprintf("%s: %v", what, err))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	checkLinearizable(t, seed, c, admin, []linDir{{dir, ids.RootMinistry}}, mover)
	done := 0
	var notDone []string
	for _, m := range moves {
		if strings.Contains(m, "MOVE_DONE") {
			done++
		} else if len(notDone) < 8 {
			notDone = append(notDone, m)
		}
	}
	t.Logf("%d of %d assigns and unassigns of /lin done during the run; others: %s", done, len(moves), strings.Join(notDone, "; "))
	if done < 2 {
		t.Fatalf("only %d moves of /lin completed while the workload ran: the test proved nothing about moves", done)
	}
}

// linDir is a directory of the workload and the ministry that holds it
// once the background work (moves) has stopped.
type linDir struct {
	ino   ids.Ino
	group ids.GroupID
}

// checkLinearizable runs the workload on the names of dirs under the
// nemesis (aimed at the leaders of the dirs' ministries; and, when given,
// background until the workload stops), then checks the history with
// porcupine and that every node agrees on the final state.
func checkLinearizable(t *testing.T, seed int64, c *testcluster.InProc, admin *client.Client, dirs []linDir, background func(stop <-chan struct{})) {
	ctx := context.Background()
	t0 := time.Now()
	now := func() int64 { return int64(time.Since(t0)) }
	const pending = math.MinInt64 // Return of an unknown mutation, fixed below
	var (
		mu        sync.Mutex
		history   []porcupine.Operation
		unexpects []string // definite errors other than EEXIST/ENOENT, for the log
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		cl := newClient(t, c.Addrs(), seed+int64(w)+1, opTimeout, callTimout)
		rng := rand.New(rand.NewSource(seed + 100 + int64(w)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			var local []porcupine.Operation
			defer func() {
				mu.Lock()
				history = append(history, local...)
				mu.Unlock()
			}()
			for {
				select {
				case <-stop:
					return
				default:
				}
				in := fsInput{from: rng.Intn(len(names)), to: rng.Intn(len(names)), dir: rng.Intn(len(dirs))}
				in.toDir = in.dir
				switch p := rng.Intn(100); {
				case p < 30:
					in.kind = opCreate
				case p < 55:
					in.kind = opUnlink
				case p < 75:
					in.kind = opRename
					if len(dirs) > 1 && rng.Intn(4) == 0 {
						in.toDir = (in.dir + 1 + rng.Intn(len(dirs)-1)) % len(dirs)
					}
				default:
					in.kind = opStat
				}
				octx, cancel := context.WithTimeout(ctx, opTimeout)
				call := now()
				var err error
				dir := dirs[in.dir].ino
				switch in.kind {
				case opCreate:
					_, err = cl.CreateAt(octx, dir, names[in.from], 0o644, true)
				case opUnlink:
					err = cl.UnlinkAt(octx, dir, names[in.from])
				case opRename:
					err = cl.RenameAt(octx, dir, names[in.from], dirs[in.toDir].ino, names[in.to], 0)
				case opStat:
					_, err = cl.Lookup(octx, dir, names[in.from], client.Linearizable())
				}
				ret := now()
				cancel()
				res := classify(err)
				if (in.kind == opStat && res == resEEXIST) || (res == resEXDEV && in.dir == in.toDir) {
					res = resUnknown // not an answer these ops can give: logged below
				}
				if res == resUnknown && !errors.Is(err, syscall.ETIMEDOUT) && !errors.Is(err, context.DeadlineExceeded) || res == resOK && in.dir != in.toDir {
					mu.Lock()
					unexpects = append(unexpects, fmt.Sprintf("%s: %v", describeOp(in, res), err))
					mu.Unlock()
				}
				if res == resUnknown {
					if in.kind == opStat {
						continue // a read without an answer constrains nothing
					}
					ret = pending
				}
				local = append(local, porcupine.Operation{ClientId: w, Input: in, Call: call, Output: fsOutput{res}, Return: ret})
			}
		}()
	}

	nem := &nemesis{c: c, rng: rand.New(rand.NewSource(seed)), t0: t0}
	for _, d := range dirs {
		if !slices.Contains(nem.groups, d.group) {
			nem.groups = append(nem.groups, d.group)
		}
	}
	bgStop, bgDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(bgDone)
		if background != nil {
			background(bgStop)
		}
	}()
	nem.run(t0.Add(runFor))
	close(stop)
	wg.Wait()
	close(bgStop)
	<-bgDone
	for _, l := range nem.log {
		t.Log("nemesis:", l)
	}
	rctx, rcancel := context.WithTimeout(ctx, 20*time.Second)
	defer rcancel()
	if err := c.WaitReady(rctx); err != nil {
		t.Fatalf("cluster did not recover after the nemesis: %v", err)
	}

	// Final state: a linearizable lookup of every name through the
	// client (part of the checked history), and the same from each node.
	pool := rpc.NewPool(nil)
	defer pool.Close()
	finals := make([]state, len(dirs))
	for d, ld := range dirs {
		final := state(0)
		for i, name := range names {
			call := now()
			_, err := admin.Lookup(rctx, ld.ino, name, client.Linearizable())
			ret := now()
			res := classify(err)
			if res != resOK && res != resENOENT {
				t.Fatalf("final lookup of d%d/%q after healing: %v", d, name, err)
			}
			if res == resOK {
				final |= bit(i)
			}
			history = append(history, porcupine.Operation{ClientId: workers, Input: fsInput{kind: opStat, from: i, dir: d, toDir: d}, Call: call, Output: fsOutput{res}, Return: ret})
		}
		finals[d] = final
		for _, addr := range c.Addrs() {
			got := state(0)
			for i, name := range names {
				ok, err := rawLookupRetry(rctx, pool, addr, ld.group, ld.ino, name)
				if err != nil {
					t.Fatal(err)
				}
				if ok {
					got |= bit(i)
				}
			}
			if got != final {
				t.Errorf("node %s reads d%d as %v linearizably, the client read %v", addr, d, got, final)
			}
		}
		ents, err := admin.ReaddirAll(rctx, ld.ino, client.Linearizable())
		if err != nil {
			t.Fatal(err)
		}
		var listed []string
		for _, e := range ents {
			listed = append(listed, string(e.GetName()))
		}
		if want := strings.Trim(final.String(), "{}"); strings.Join(listed, ",") != want {
			t.Errorf("readdir of d%d lists [%s], lookups found %v", d, strings.Join(listed, ","), final)
		}
	}

	// Unknown mutations may take effect any time after their call.
	end := now() + 1
	counts := map[string]int{}
	definite, okMut := 0, 0
	for i := range history {
		op := &history[i]
		in, res := op.Input.(fsInput), op.Output.(fsOutput).res
		if op.Return == pending {
			op.Return = end
		}
		counts[fmt.Sprintf("%v %v", in.kind, res)]++
		if op.ClientId == workers {
			continue
		}
		if res != resUnknown {
			definite++
		}
		if res == resOK && in.kind != opStat {
			okMut++
		}
	}
	var keys []string
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%d", k, counts[k]))
	}
	t.Logf("%d operations (%d definite, %d applied mutations): %s; final state %v", len(history), definite, okMut, strings.Join(parts, " "), finals)
	if len(unexpects) > 0 {
		t.Logf("%d non-timeout indefinite errors, e.g. %s", len(unexpects), unexpects[0])
	}
	if len(dirs) > 1 && counts[fmt.Sprintf("%v %v", opRename, resEXDEV)] == 0 {
		t.Fatalf("no rename across ministries was answered EXDEV: the test proved nothing about them")
	}
	if definite < 100 || okMut < 20 {
		t.Fatalf("only %d definite answers and %d applied mutations: the workload made too little progress to mean anything", definite, okMut)
	}

	start := time.Now()
	res, info := porcupine.CheckOperationsVerbose(dirModel, history, 20*time.Second)
	t.Logf("porcupine: %v in %v", res, time.Since(start).Round(time.Millisecond))
	switch res {
	case porcupine.Ok:
	case porcupine.Illegal:
		f, err := os.CreateTemp("", "govfs-linearizability-*.html")
		if err != nil {
			t.Fatalf("history is NOT linearizable (and the visualization could not be written: %v)", err)
		}
		f.Close()
		if err := porcupine.VisualizePath(dirModel, info, f.Name()); err != nil {
			t.Fatalf("history is NOT linearizable (visualization failed: %v)", err)
		}
		t.Fatalf("history is NOT linearizable; see %s (seed %d)\n%s\nnemesis:\n%s", f.Name(), seed,
			explain(history, info), strings.Join(nem.log, "\n"))
	default:
		t.Fatalf("porcupine could not decide linearizability within its timeout (%d ops, seed %d)", len(history), seed)
	}
}

// fmtOp renders an operation with its interval in seconds from the start.
func fmtOp(id int, op porcupine.Operation, end int64) string {
	ret := fmt.Sprintf("%.6fs", float64(op.Return)/1e9)
	if op.Return >= end {
		ret = "end"
	}
	s := fmt.Sprintf("#%d client %d [%.6fs, %s] %s", id, op.ClientId, float64(op.Call)/1e9, ret,
		describeOp(op.Input.(fsInput), op.Output.(fsOutput).res))
	if op.Metadata != nil {
		s += fmt.Sprintf(" (%v)", op.Metadata)
	}
	return s
}

// explain describes where the longest partial linearization porcupine
// found gets stuck: its last steps, and the operations around the first
// one it could not place.
func explain(history []porcupine.Operation, info porcupine.LinearizationInfo) string {
	pls := info.PartialLinearizations()
	if len(pls) == 0 || len(pls[0]) == 0 {
		return "(no partial linearization)"
	}
	longest := slices.MaxFunc(pls[0], func(a, b []int) int { return len(a) - len(b) })
	var end int64
	for _, op := range history {
		end = max(end, op.Return)
	}
	var b strings.Builder
	in := map[int]bool{}
	states := []state{0}
	fmt.Fprintf(&b, "longest partial linearization: %d of %d operations; its last steps:\n", len(longest), len(history))
	for i, id := range longest {
		in[id] = true
		op := history[id]
		var next []state
		for _, s := range states {
			for _, n := range step(s, op.Input.(fsInput), op.Output.(fsOutput).res) {
				if !slices.Contains(next, n) {
					next = append(next, n)
				}
			}
		}
		states = next
		if i >= len(longest)-12 {
			fmt.Fprintf(&b, "  %s  => %v\n", fmtOp(id, op, end), states)
		}
	}
	first := -1
	for id, op := range history {
		if !in[id] && (first < 0 || op.Call < history[first].Call) {
			first = id
		}
	}
	if first < 0 {
		return b.String()
	}
	fmt.Fprintf(&b, "first operation that cannot be placed: %s\noperations overlapping it (from 20ms before):\n", fmtOp(first, history[first], end))
	lo, hi := history[first].Call-int64(20*time.Millisecond), history[first].Return
	var around []int
	for id, op := range history {
		if op.Return >= lo && op.Call <= hi {
			around = append(around, id)
		}
	}
	sort.Slice(around, func(i, j int) bool { return history[around[i]].Call < history[around[j]].Call })
	for _, id := range around {
		mark := " "
		if id == first {
			mark = "*"
		}
		fmt.Fprintf(&b, " %s%s\n", mark, fmtOp(id, history[id], end))
	}
	return b.String()
}

// mkdirRetry creates a directory under the root. A fresh cluster's
// ministry may still be waiting for its first inode grant: the server
// answers that with a retryable UNAVAILABLE, which the client retries, so
// a create right after WaitReady must simply succeed (no ENOSPC).
func mkdirRetry(t *testing.T, cl *client.Client, name string) ids.Ino {
	t.Helper()
	a, err := cl.MkdirAt(context.Background(), ids.RootIno, name, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	return ids.Ino(a.GetIno())
}

// ---- split brain ----

// TestNoSplitBrainUnderPartition cuts the root ministry's leader off from
// the other two nodes. A create sent to the isolated node itself (raw
// Mutate, so no client failover to the majority) must not be
// acknowledged, nor may it answer a linearizable read with stale data,
// while a client of the majority creates successfully. After healing the
// majority's create is visible on every node and the isolated one's is
// not (it never reached a quorum and nobody retried it).
func TestNoSplitBrainUnderPartition(t *testing.T) {
	c := testcluster.NewInProc(t, 3)
	ctx := context.Background()
	seed := testSeed(t)
	admin := newClient(t, c.Addrs(), seed, 20*time.Second, time.Second)
	dir := mkdirRetry(t, admin, "split")

	lctx, lcancel := context.WithTimeout(ctx, 5*time.Second)
	defer lcancel()
	lead, err := c.Leader(lctx, ids.RootMinistry)
	if err != nil {
		t.Fatal(err)
	}
	var others []ids.NodeID
	var majority []string
	for id, addr := range c.Peers {
		if id != lead {
			others = append(others, id)
			majority = append(majority, addr)
		}
	}
	slices.Sort(majority)
	isoAddr := c.Peers[lead]
	pool := rpc.NewPool(nil)
	defer pool.Close()
	cc, err := pool.Get(isoAddr)
	if err != nil {
		t.Fatal(err)
	}
	iso := wire.NewMetaClient(cc)
	var cid [8]byte
	if _, err := crand.Read(cid[:]); err != nil {
		t.Fatal(err)
	}
	clientID := binary.LittleEndian.Uint64(cid[:]) | 1

	c.Net.Partition([]ids.NodeID{lead}, others)
	t.Logf("partitioned leader %v (%s) from %v", lead, isoAddr, others)
	defer c.Net.Heal()

	// Straight away, while the isolated node may still believe it leads.
	isoDone := make(chan error, 1)
	go func() {
		sent := time.Now()
		mctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		resp, err := iso.Mutate(mctx, &wire.MutateRequest{Group: uint64(ids.RootMinistry), Cmd: &wire.Command{
			Version: 1,
			Req:     &wire.RequestID{ClientId: clientID, Seq: 1, FirstIncomplete: 1},
			Op: &wire.Command_Create{Create: &wire.CreateOp{Parent: uint64(dir), Name: []byte("iso"),
				Type: wire.FileType_REGULAR, Mode: 0o644, Exclusive: true, Cred: &wire.Cred{}}},
		}})
		switch {
		case err != nil: // no answer: not acknowledged
			t.Logf("isolated node gave no answer after %v: %v", time.Since(sent).Round(time.Millisecond), err)
			isoDone <- nil
		case resp.GetStatus().GetCode() == wire.Code_OK:
			isoDone <- fmt.Errorf("isolated node %v acknowledged a create without a quorum: %v", lead, resp)
		default:
			t.Logf("isolated node answered %v after %v: %s", resp.GetStatus().GetCode(),
				time.Since(sent).Round(time.Millisecond), resp.GetStatus().GetMessage())
			isoDone <- nil
		}
	}()

	maj := newClient(t, majority, seed+1, 10*time.Second, 500*time.Millisecond)
	mctx, mcancel := context.WithTimeout(ctx, 10*time.Second)
	defer mcancel()
	start := time.Now()
	if _, err := maj.CreateAt(mctx, dir, "maj", 0o644, true); err != nil {
		t.Fatalf("the majority side could not create while the old leader was cut off: %v", err)
	}
	t.Logf("majority create acknowledged after %v", time.Since(start).Round(time.Millisecond))
	if err := <-isoDone; err != nil {
		t.Fatal(err)
	}
	// The isolated node must not serve a linearizable read now: it would
	// miss "maj".
	for i := 0; i < 3; i++ {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		found, err := rawLookup(rctx, pool, isoAddr, ids.RootMinistry, dir, "maj")
		cancel()
		if err == nil && !found {
			t.Fatalf("isolated node %v served a stale linearizable read: \"maj\" missing", lead)
		}
	}

	c.Net.Heal()
	hctx, hcancel := context.WithTimeout(ctx, 10*time.Second)
	defer hcancel()
	for _, addr := range c.Addrs() {
		found, err := rawLookupRetry(hctx, pool, addr, ids.RootMinistry, dir, "maj")
		if err != nil {
			t.Fatal(err)
		}
		if !found {
			t.Errorf("acknowledged create of \"maj\" is missing on %s after healing", addr)
		}
		found, err = rawLookupRetry(hctx, pool, addr, ids.RootMinistry, dir, "iso")
		if err != nil {
			t.Fatal(err)
		}
		if found {
			t.Errorf("\"iso\", proposed only on the isolated node, exists on %s after healing", addr)
		}
	}
}
