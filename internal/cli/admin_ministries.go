package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/govfs/govfs/client"
	"github.com/govfs/govfs/internal/wire"
)

// subFlags parses a subcommand's flags (with --meta and --timeout).
func subFlags(name string, g *fsGlobal, stderr io.Writer, args []string, def func(*flag.FlagSet)) (*flag.FlagSet, error) {
	f := flag.NewFlagSet("govfs admin "+name, flag.ContinueOnError)
	f.SetOutput(stderr)
	withSubHelp(f, stderr, "admin "+name)
	f.StringVar(&g.meta, "meta", g.meta, "comma-separated metadata node addresses")
	f.DurationVar(&g.timeout, "timeout", g.timeout, "give up after this long")
	f.StringVar(&g.tls, "tls", g.tls, "client certificate directory (default $"+tlsEnv+")")
	f.BoolVar(&g.insecure, "insecure", g.insecure, "talk plaintext to a cluster started with --insecure")
	if def != nil {
		def(f)
	}
	// Flags may come after the path too (admin assign /p --new).
	pos, err := parseInterleaved(f, args)
	if err != nil {
		return nil, err
	}
	return f, f.Parse(append([]string{"--"}, pos...))
}

func adminAssign(ctx context.Context, g fsGlobal, args []string, unassign bool, stdout, stderr io.Writer) error {
	name := "assign"
	if unassign {
		name = "unassign"
	}
	var isNew bool
	var ministry uint64
	var nodes string
	var asJSON bool
	f, err := subFlags(name, &g, stderr, args, func(f *flag.FlagSet) {
		if !unassign {
			f.BoolVar(&isNew, "new", false, "create a new ministry for the subtree")
			f.Uint64Var(&ministry, "ministry", 0, "give the subtree to this existing ministry")
			f.StringVar(&nodes, "nodes", "", "with --new: metadata node ids of the new ministry, comma-separated (default: 3 live nodes hosting the fewest ministries)")
		}
		f.BoolVar(&asJSON, "json", false, "print the move as JSON")
	})
	if err != nil {
		return err
	}
	if f.NArg() != 1 {
		return fmt.Errorf("admin %s: want one PATH (a directory), got %d arguments", name, f.NArg())
	}
	path := f.Arg(0)
	opts := client.AssignOptions{New: isNew, Ministry: ministry}
	if !unassign {
		if isNew == (ministry != 0) {
			return fmt.Errorf("admin assign: give --new (a new ministry) or --ministry ID (an existing one)")
		}
		if nodes != "" {
			if !isNew {
				return fmt.Errorf("admin assign: --nodes chooses the members of a new ministry; use it with --new")
			}
			for _, s := range strings.Split(nodes, ",") {
				id, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
				if err != nil || id == 0 {
					return fmt.Errorf("admin assign: --nodes %q: %q is not a node id (see govfs admin nodes)", nodes, s)
				}
				opts.Nodes = append(opts.Nodes, id)
			}
		}
	}
	cl, err := dialCluster(ctx, g)
	if err != nil {
		return dialError("admin "+name, err)
	}
	defer cl.Close()
	start := time.Now()
	var mv *wire.Move
	if unassign {
		mv, err = cl.Unassign(ctx, path)
	} else {
		mv, err = cl.Assign(ctx, path, opts)
	}
	if err != nil {
		if d := client.ErrorDetail(err); d != "" {
			return fmt.Errorf("%w (%s)", err, d)
		}
		return err
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(moveReportOf(mv))
	}
	switch mv.GetState() {
	case wire.MoveState_MOVE_DONE:
		fmt.Fprintf(stdout, "%s now belongs to ministry %d (was %d); took %v\n", mv.GetPath(), mv.GetTarget(), mv.GetSource(), time.Since(start).Round(time.Millisecond))
		return nil
	case wire.MoveState_MOVE_ABORTED:
		return fmt.Errorf("admin %s %s: the move was abandoned and nothing changed: %s", name, path, mv.GetError())
	default:
		fmt.Fprintf(stdout, "move %d of %s to ministry %d is still under way (%s); see govfs admin ministries\n", mv.GetId(), mv.GetPath(), mv.GetTarget(), moveState(mv.GetState()))
		return nil
	}
}

func moveState(s wire.MoveState) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "MOVE_"))
}

type moveReport struct {
	ID     uint64 `json:"id"`
	Path   string `json:"path"`
	Ino    uint64 `json:"ino"`
	Source uint64 `json:"source"`
	Target uint64 `json:"target"`
	State  string `json:"state"`
	Error  string `json:"error,omitempty"`
}

func moveReportOf(m *wire.Move) moveReport {
	return moveReport{ID: m.GetId(), Path: m.GetPath(), Ino: m.GetIno(), Source: m.GetSource(), Target: m.GetTarget(),
		State: moveState(m.GetState()), Error: m.GetError()}
}

// ministriesReport is `admin ministries`; its JSON form is for scripts.
type ministriesReport struct {
	Ministries []ministryReport `json:"ministries"`
	Moves      []moveReport     `json:"moves"`
}

type ministryReport struct {
	ID       uint64   `json:"id"`
	Subtrees []string `json:"subtrees"`
	Members  []uint64 `json:"members"`
	// Leader is the minister's node id (0: none known).
	Leader uint64 `json:"leader"`
	Epoch  uint64 `json:"epoch"`
	// Applied is the leader's applied index (a measure of activity).
	Applied uint64 `json:"applied"`
	// OpsPerS is the requests per second its replicas served, from their
	// nodes' last heartbeats (0 when the answering node is not a
	// president member and cannot tell).
	OpsPerS float64 `json:"ops_per_s"`
	// Voters and Learners are the group's configuration as its minister
	// reports it (empty: no minister answered); they differ from Members
	// while a replica moves (govfs admin move-replica, drain, or a dead
	// member replaced).
	Voters   []uint64 `json:"voters"`
	Learners []uint64 `json:"learners"`
}

// settled says whether the group's configuration is the map's members.
func (m ministryReport) settled() bool {
	return len(m.Learners) == 0 && slices.Equal(sortedIDs(m.Voters), sortedIDs(m.Members))
}

func sortedIDs(l []uint64) []uint64 {
	out := slices.Clone(l)
	slices.Sort(out)
	return out
}

// clusterViews asks the map and every member's status.
func clusterViews(ctx context.Context, cl *client.Client) (*wire.ClusterInfoResponse, []*wire.StatusResponse, []error, error) {
	info, err := cl.ClusterMap(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	members := info.GetMembers()
	resps := make([]*wire.StatusResponse, len(members))
	errs := make([]error, len(members))
	var wg sync.WaitGroup
	for i, m := range members {
		wg.Go(func() { resps[i], errs[i] = cl.Status(ctx, m.GetAddr()) })
	}
	wg.Wait()
	return info, resps, errs, nil
}

func buildMinistriesReport(info *wire.ClusterInfoResponse, resps []*wire.StatusResponse) ministriesReport {
	rep := ministriesReport{Ministries: []ministryReport{}, Moves: []moveReport{}}
	for _, m := range info.GetMinistries() {
		mr := ministryReport{ID: m.GetGroup(), Members: m.GetMembers(), Epoch: m.GetEpoch(), Subtrees: []string{}, Leader: m.GetLeader(),
			OpsPerS: m.GetOpsPerS(), Voters: []uint64{}, Learners: []uint64{}}
		for _, st := range m.GetSubtrees() {
			mr.Subtrees = append(mr.Subtrees, st.GetPath())
		}
		var bestTerm uint64
		for _, r := range resps {
			for _, gs := range r.GetGroups() {
				if gs.GetGroup() == m.GetGroup() && gs.GetLeader() != 0 && gs.GetTerm() >= bestTerm {
					bestTerm, mr.Leader = gs.GetTerm(), gs.GetLeader()
					if gs.GetLeader() == r.GetNodeId() {
						mr.Applied = gs.GetApplied()
						mr.Voters, mr.Learners = append([]uint64{}, gs.GetVoters()...), append([]uint64{}, gs.GetLearners()...)
					}
				}
			}
		}
		rep.Ministries = append(rep.Ministries, mr)
	}
	for _, mv := range info.GetMoves() {
		rep.Moves = append(rep.Moves, moveReportOf(mv))
	}
	return rep
}

func adminMinistries(ctx context.Context, g fsGlobal, args []string, stdout, stderr io.Writer) error {
	var asJSON bool
	f, err := subFlags("ministries", &g, stderr, args, func(f *flag.FlagSet) {
		f.BoolVar(&asJSON, "json", false, "print a JSON object instead of a table")
	})
	if err != nil {
		return err
	}
	if f.NArg() > 0 {
		return fmt.Errorf("admin ministries: unexpected arguments %q", f.Args())
	}
	cl, err := dialCluster(ctx, g)
	if err != nil {
		return dialError("admin ministries", err)
	}
	defer cl.Close()
	info, resps, _, err := clusterViews(ctx, cl)
	if err != nil {
		return err
	}
	rep := buildMinistriesReport(info, resps)
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MINISTRY\tSUBTREES\tMEMBERS\tMINISTER\tEPOCH\tAPPLIED\tOPS/S")
	for _, m := range rep.Ministries {
		lead := "none"
		if m.Leader != 0 {
			lead = fmt.Sprintf("node %d", m.Leader)
		}
		subs := strings.Join(m.Subtrees, " ")
		if subs == "" {
			subs = "-"
		}
		members := joinIDs(m.Members)
		if len(m.Voters) > 0 && !m.settled() {
			// A replica is moving: say where the group is.
			members += " (now voters " + joinIDs(sortedIDs(m.Voters))
			if len(m.Learners) > 0 {
				members += ", learners " + joinIDs(sortedIDs(m.Learners))
			}
			members += ")"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%d\t%.0f\n", m.ID, subs, members, lead, m.Epoch, m.Applied, m.OpsPerS)
	}
	tw.Flush()
	var active []moveReport
	for _, mv := range rep.Moves {
		if mv.State == "copying" || mv.State == "committed" {
			active = append(active, mv)
		}
	}
	if len(active) > 0 {
		fmt.Fprintln(stdout, "\nmoves under way:")
		for _, mv := range active {
			fmt.Fprintf(stdout, "  move %d: %s from ministry %d to %d (%s)\n", mv.ID, mv.Path, mv.Source, mv.Target, mv.State)
		}
	}
	return nil
}

func joinIDs(l []uint64) string {
	s := make([]string, len(l))
	for i, v := range l {
		s[i] = strconv.FormatUint(v, 10)
	}
	return strings.Join(s, ",")
}

// nodesReport is `admin nodes`.
type nodesReport struct {
	Nodes []metaNodeReport `json:"nodes"`
}

type metaNodeReport struct {
	ID   uint64 `json:"id"`
	Addr string `json:"addr"`
	// Alive: from the node's heartbeats to the president's members when
	// the answering node is one of them, else whether it answered.
	Alive bool   `json:"alive"`
	Error string `json:"error,omitempty"`
	// Roles: group id → "leader", "follower", ... ("president" is group 0).
	Roles map[string]string `json:"roles"`
	// From the last heartbeat (-1 / 0 when none is known): how long ago
	// it came, CPU in cores, requests per second served per group (keys
	// as in roles).
	LastHeartbeatMs int64              `json:"last_heartbeat_ms"`
	CPU             float64            `json:"cpu"`
	OpsPerS         map[string]float64 `json:"ops_per_s"`
}

func groupName(g uint64) string {
	if g == 0 {
		return "president"
	}
	return fmt.Sprintf("ministry %d", g)
}

func buildNodesReport(info *wire.ClusterInfoResponse, resps []*wire.StatusResponse, errs []error) nodesReport {
	rep := nodesReport{Nodes: []metaNodeReport{}}
	for i, m := range info.GetMembers() {
		nr := metaNodeReport{ID: m.GetId(), Addr: m.GetAddr(), Roles: map[string]string{}, LastHeartbeatMs: -1, OpsPerS: map[string]float64{}}
		if errs[i] != nil || resps[i] == nil {
			nr.Error = reason(errs[i])
		} else {
			nr.Alive = true
			for _, gs := range resps[i].GetGroups() {
				nr.Roles[groupName(gs.GetGroup())] = roleName(gs.GetRole())
			}
		}
		for _, nl := range info.GetNodeLoads() {
			if nl.GetNodeId() != m.GetId() {
				continue
			}
			nr.LastHeartbeatMs, nr.CPU = nl.GetLastHeartbeatMsAgo(), nl.GetCpu()
			for _, gl := range nl.GetGroups() {
				nr.OpsPerS[groupName(gl.GetGroup())] = gl.GetOpsPerS()
			}
			if nl.GetKnown() {
				nr.Alive = nl.GetAlive()
				if !nr.Alive && nr.Error == "" {
					nr.Error = fmt.Sprintf("no heartbeat for %s", heardAgo(nl.GetLastHeartbeatMsAgo()))
				}
			}
		}
		rep.Nodes = append(rep.Nodes, nr)
	}
	return rep
}

func adminNodes(ctx context.Context, g fsGlobal, args []string, stdout, stderr io.Writer) error {
	var asJSON bool
	f, err := subFlags("nodes", &g, stderr, args, func(f *flag.FlagSet) {
		f.BoolVar(&asJSON, "json", false, "print a JSON object instead of a table")
	})
	if err != nil {
		return err
	}
	if f.NArg() > 0 {
		return fmt.Errorf("admin nodes: unexpected arguments %q", f.Args())
	}
	cl, err := dialCluster(ctx, g)
	if err != nil {
		return dialError("admin nodes", err)
	}
	defer cl.Close()
	info, resps, errs, err := clusterViews(ctx, cl)
	if err != nil {
		return err
	}
	rep := buildNodesReport(info, resps, errs)
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tADDRESS\tSTATE\tHEARD\tCPU\tROLES")
	for _, n := range rep.Nodes {
		state := "up"
		if !n.Alive {
			state = "down"
		}
		var roles []string
		for g, r := range n.Roles {
			if ops, ok := n.OpsPerS[g]; ok {
				r = fmt.Sprintf("%s %.0f op/s", r, ops)
			}
			roles = append(roles, g+": "+r)
		}
		slices.Sort(roles)
		rs := strings.Join(roles, ", ")
		if rs == "" && n.Alive {
			rs = "idle"
		}
		cpu := "-"
		if n.LastHeartbeatMs >= 0 {
			cpu = fmt.Sprintf("%.2f", n.CPU)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", n.ID, n.Addr, state, heardAgo(n.LastHeartbeatMs), cpu, rs)
	}
	tw.Flush()
	if !slices.ContainsFunc(rep.Nodes, func(n metaNodeReport) bool { return n.Alive }) {
		return errors.New("admin nodes: no node is reachable")
	}
	return nil
}

// heardAgo prints a heartbeat's age ("-" for never).
func heardAgo(ms int64) string {
	if ms < 0 {
		return "-"
	}
	return (time.Duration(ms) * time.Millisecond).Round(100*time.Millisecond).String() + " ago"
}
