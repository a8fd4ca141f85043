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

	"github.com/govfs/govfs/internal/wire"
)

const adminUsage = `Usage: govfs admin [--meta ADDRS] [--timeout D] <command> [arguments]

Commands:
  status [--json]       members, reachability and every Raft group's state
  ministries [--json]   ministries: subtrees, members, minister, epoch; moves under way
  nodes [--json]        metadata nodes: address, liveness, role in each group
  assign PATH --new [--nodes 4,5,6] | --ministry ID
                        give the directory PATH (and everything below it) to a
                        new ministry, or to an existing one
  unassign PATH         give PATH back to the ministry of its parent
  move-replica MINISTRY --from NODE [--to NODE] [--no-wait]
                        move a ministry's replica to another node (default:
                        the live node hosting the fewest replicas)
  drain NODE [--to NODE] [--no-wait]
                        move every ministry replica off NODE (before taking it
                        out of service)
  ca init DIR [--cluster NAME]
                        make a cluster CA in DIR (ca.crt, ca.key; keep ca.key safe)
  cert issue --ca DIR --out DIR (--node NAME | --chunk NAME | --client NAME | --admin NAME)
             [--uid U,... | --uid '*'] [--gid G,... | --gid '*'] [--squash] [--days N]
                        issue a certificate (writes ca.crt, tls.crt, tls.key)
  cert show DIR         the identity and validity of a certificate directory

Metadata nodes come from --meta host:port,... or $GOVFS_META, the client
certificate from --tls DIR or $GOVFS_TLS (--insecure for a cluster started
with --insecure). ca and cert need no cluster. See docs/security.md.`

// runAdmin implements `govfs admin`.
func runAdmin(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var g fsGlobal
	top := flag.NewFlagSet("govfs admin", flag.ContinueOnError)
	top.SetOutput(stderr)
	top.Usage = func() { fmt.Fprintln(stderr, adminUsage) }
	g.register(top)
	if err := top.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if top.NArg() == 0 {
		fmt.Fprintln(stderr, adminUsage)
		return errors.New("admin: missing command")
	}
	var err error
	rest := top.Args()[1:]
	switch sub := top.Arg(0); sub {
	case "status":
		err = adminStatus(ctx, g, rest, stdout, stderr)
	case "ministries":
		err = adminMinistries(ctx, g, rest, stdout, stderr)
	case "nodes":
		err = adminNodes(ctx, g, rest, stdout, stderr)
	case "assign":
		err = adminAssign(ctx, g, rest, false, stdout, stderr)
	case "unassign":
		err = adminAssign(ctx, g, rest, true, stdout, stderr)
	case "move-replica":
		err = adminMoveReplica(ctx, g, rest, false, stdout, stderr)
	case "drain":
		err = adminMoveReplica(ctx, g, rest, true, stdout, stderr)
	case "ca":
		err = adminCA(rest, stdout, stderr)
	case "cert":
		err = adminCert(rest, stdout, stderr)
	default:
		fmt.Fprintln(stderr, adminUsage)
		return fmt.Errorf("admin: unknown command %q", sub)
	}
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	return err
}

func adminStatus(ctx context.Context, g fsGlobal, args []string, stdout, stderr io.Writer) error {
	var asJSON, rawBytes bool
	f, err := subFlags("status", &g, stderr, args, func(f *flag.FlagSet) {
		f.BoolVar(&asJSON, "json", false, "print a JSON object instead of tables")
		f.BoolVar(&rawBytes, "bytes", false, "print sizes as byte counts (for scripts) instead of KiB, MiB, GiB")
	})
	if err != nil {
		return err
	}
	if f.NArg() > 0 {
		return fmt.Errorf("admin status: unexpected arguments %q", f.Args())
	}
	cl, err := dialCluster(ctx, g)
	if err != nil {
		return dialError("admin status", err)
	}
	defer cl.Close()
	members := cl.Members()
	resps := make([]*wire.StatusResponse, len(members))
	errs := make([]error, len(members))
	// The fan-out is one goroutine per member, bounded by the (small)
	// member list; each writes only its own slot.
	var wg sync.WaitGroup
	for i, m := range members {
		wg.Go(func() { resps[i], errs[i] = cl.Status(ctx, m.GetAddr()) })
	}
	wg.Wait()
	rep := buildStatusReport(cl.ClusterID(), members, resps, errs)
	rep.Bytes = rawBytes
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		writeStatusReport(stdout, rep)
	}
	if !slices.ContainsFunc(rep.Members, func(m memberReport) bool { return m.Reachable }) {
		return errors.New("admin status: no member is reachable")
	}
	return nil
}

// statusReport is what `admin status` shows; its JSON form is for scripts.
type statusReport struct {
	ClusterID     string               `json:"cluster_id"`
	Members       []memberReport       `json:"members"`
	Groups        []groupReport        `json:"groups"`
	ChunkServers  []chunkServerReport  `json:"chunk_servers"`
	ReplicaGroups []replicaGroupReport `json:"replica_groups"`
	// Bytes prints sizes as byte counts (--bytes, for scripts); JSON
	// always has byte counts.
	Bytes bool `json:"-"`
}

type replicaGroupReport struct {
	ID      uint64   `json:"id"`
	Epoch   uint64   `json:"epoch"`
	Primary uint64   `json:"primary"`
	Members []uint64 `json:"members"`
	// Syncing members are still being filled (no reads, no acks).
	Syncing []uint64 `json:"syncing"`
	// State is "ok", "syncing" or "under-replicated".
	State string `json:"state"`
	// PlacementNotes are the placement rules the members do not meet.
	PlacementNotes []string `json:"placement_notes"`
}

// groupState summarises a replica group for operators.
func groupState(members, syncing []uint64) string {
	switch {
	case len(members)-len(syncing) < 3:
		if len(syncing) > 0 {
			return fmt.Sprintf("syncing (%d of 3 full)", len(members)-len(syncing))
		}
		return fmt.Sprintf("under-replicated (%d of 3)", len(members))
	case len(syncing) > 0:
		return "syncing"
	}
	return "ok"
}

// chunkServerReport is a chunk server as the president's leader sees it
// (liveness is only known there).
type chunkServerReport struct {
	ID       uint64 `json:"id"`
	Addr     string `json:"addr"`
	Host     string `json:"host"`
	Rack     string `json:"rack"`
	Pod      string `json:"pod,omitempty"`
	Alive    bool   `json:"alive"`
	Known    bool   `json:"liveness_known"`
	Capacity int64  `json:"capacity"`
	Used     int64  `json:"used"`
	Chunks   uint64 `json:"chunks"`
	// LastHeartbeatMsAgo is -1 when no heartbeat was seen.
	LastHeartbeatMsAgo int64 `json:"last_heartbeat_ms_ago"`
	// Load from the last heartbeat.
	BytesInFlight  int64 `json:"bytes_in_flight"`
	ReadBytesPerS  int64 `json:"read_bytes_per_s"`
	WriteBytesPerS int64 `json:"write_bytes_per_s"`
}

type memberReport struct {
	ID   uint64 `json:"id"`
	Addr string `json:"addr"`
	// CertName is the node certificate the node is bound to (TLS).
	CertName  string `json:"cert_name,omitempty"`
	Reachable bool   `json:"reachable"`
	Error     string `json:"error,omitempty"`
	// MeanEntriesPerAppend is the node's raft batching figure.
	MeanEntriesPerAppend float64 `json:"mean_entries_per_append"`
}

type groupReport struct {
	Group uint64 `json:"group"`
	Kind  string `json:"kind"`
	// Leader, Term, Commit and Applied are as the leader reports them (or,
	// with no reachable leader, the replica with the highest term).
	Leader  uint64       `json:"leader"`
	Term    uint64       `json:"term"`
	Commit  uint64       `json:"commit"`
	Applied uint64       `json:"applied"`
	Voters  []uint64     `json:"voters"`
	Nodes   []nodeReport `json:"nodes"`
}

// nodeReport is one member's view of a group.
type nodeReport struct {
	Node uint64 `json:"node"`
	// Role is the replica's raft role, "unreachable", or "-" when the
	// node does not host the group.
	Role    string `json:"role"`
	Applied uint64 `json:"applied,omitempty"`
}

// buildStatusReport merges the members' Status answers (resps[i] or
// errs[i] for members[i]) into one view.
func buildStatusReport(clusterID string, members []*wire.Member, resps []*wire.StatusResponse, errs []error) statusReport {
	rep := statusReport{ClusterID: clusterID, Members: []memberReport{}, Groups: []groupReport{}, ChunkServers: []chunkServerReport{}}
	// Chunk servers: from the member that knows liveness (the president's
	// leader), else from any member.
	var chunkSrc *wire.StatusResponse
	for i := range members {
		if errs[i] == nil && resps[i] != nil {
			if chunkSrc == nil {
				chunkSrc = resps[i]
			}
			for _, cs := range resps[i].GetChunkServers() {
				if cs.GetKnown() {
					chunkSrc = resps[i]
				}
			}
		}
	}
	for _, cs := range chunkSrc.GetChunkServers() {
		srv := cs.GetServer()
		cr := chunkServerReport{ID: srv.GetId(), Addr: srv.GetAddr(), Host: srv.GetHost(), Rack: srv.GetRack(), Pod: srv.GetPod(),
			Alive: cs.GetAlive(), Known: cs.GetKnown(), Capacity: srv.GetCapacity(), Used: cs.GetUsed(), Chunks: cs.GetChunks(),
			LastHeartbeatMsAgo: -1, BytesInFlight: cs.GetBytesInFlight(), ReadBytesPerS: cs.GetReadBytesPerS(), WriteBytesPerS: cs.GetWriteBytesPerS()}
		if cs.GetKnown() && (cs.GetAlive() || cs.GetLastHeartbeatMsAgo() > 0) {
			cr.LastHeartbeatMsAgo = cs.GetLastHeartbeatMsAgo()
		}
		rep.ChunkServers = append(rep.ChunkServers, cr)
	}
	rep.ReplicaGroups = []replicaGroupReport{}
	for _, g := range chunkSrc.GetReplicaGroups() {
		rep.ReplicaGroups = append(rep.ReplicaGroups, replicaGroupReport{ID: g.GetId(), Epoch: g.GetEpoch(), Primary: g.GetPrimary(),
			Members: g.GetMembers(), Syncing: append([]uint64{}, g.GetSyncing()...), State: groupState(g.GetMembers(), g.GetSyncing()),
			PlacementNotes: append([]string{}, g.GetPlacementNotes()...)})
	}
	type view struct {
		node uint64
		gs   *wire.GroupStatus
	}
	byGroup := map[uint64][]view{}
	for i, m := range members {
		mr := memberReport{ID: m.GetId(), Addr: m.GetAddr(), CertName: m.GetCertName()}
		if errs[i] != nil || resps[i] == nil {
			if errs[i] != nil {
				mr.Error = reason(errs[i])
			}
		} else {
			mr.Reachable = true
			mr.MeanEntriesPerAppend = resps[i].GetMeanEntriesPerAppend()
			for _, gs := range resps[i].GetGroups() {
				byGroup[gs.GetGroup()] = append(byGroup[gs.GetGroup()], view{m.GetId(), gs})
			}
		}
		rep.Members = append(rep.Members, mr)
	}
	var groups []uint64
	for g := range byGroup {
		groups = append(groups, g)
	}
	slices.Sort(groups)
	for _, g := range groups {
		views := byGroup[g]
		// Prefer the leader's own view, then the most recent one.
		best, bestLeader := views[0].gs, false
		for _, v := range views {
			l := v.node != 0 && v.gs.GetLeader() == v.node
			switch {
			case l && !bestLeader:
				best, bestLeader = v.gs, true
			case l == bestLeader && (v.gs.GetTerm() > best.GetTerm() ||
				v.gs.GetTerm() == best.GetTerm() && v.gs.GetCommit() > best.GetCommit()):
				best = v.gs
			}
		}
		gr := groupReport{
			Group: g, Kind: best.GetKind(), Leader: best.GetLeader(), Term: best.GetTerm(),
			Commit: best.GetCommit(), Applied: best.GetApplied(), Voters: best.GetVoters(),
			Nodes: []nodeReport{},
		}
		if gr.Kind == "" {
			gr.Kind = "ministry"
			if g == 0 {
				gr.Kind = "president"
			}
		}
		for i, m := range rep.Members {
			nr := nodeReport{Node: m.ID, Role: "-"}
			switch {
			case !m.Reachable:
				nr.Role = "unreachable"
			default:
				for _, v := range views {
					if v.node == members[i].GetId() {
						nr.Role = roleName(v.gs.GetRole())
						nr.Applied = v.gs.GetApplied()
					}
				}
			}
			gr.Nodes = append(gr.Nodes, nr)
		}
		rep.Groups = append(rep.Groups, gr)
	}
	return rep
}

// roleName normalizes a raft role such as "StateLeader" to "leader".
func roleName(r string) string {
	r = strings.TrimPrefix(strings.ToLower(r), "state")
	if r == "" {
		return "?"
	}
	return r
}

// writeStatusReport prints the report as tables.
func writeStatusReport(w io.Writer, rep statusReport) {
	fmt.Fprintf(w, "cluster %s\n\n", rep.ClusterID)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MEMBER\tADDR\tREACHABLE\tCERTIFICATE")
	for _, m := range rep.Members {
		r := "yes"
		if !m.Reachable {
			r = "no"
		}
		cert := "-"
		if m.CertName != "" {
			cert = "node/" + m.CertName
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", m.ID, m.Addr, r, cert)
	}
	tw.Flush()
	fmt.Fprintln(w)
	fmt.Fprintln(tw, "GROUP\tKIND\tLEADER\tTERM\tCOMMIT\tAPPLIED\tROLES")
	for _, g := range rep.Groups {
		var roles []string
		for _, n := range g.Nodes {
			roles = append(roles, strconv.FormatUint(n.Node, 10)+":"+n.Role)
		}
		leader := "-"
		if g.Leader != 0 {
			leader = strconv.FormatUint(g.Leader, 10)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%d\t%s\n", g.Group, g.Kind, leader, g.Term, g.Commit, g.Applied, strings.Join(roles, " "))
	}
	tw.Flush()
	if len(rep.ChunkServers) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(tw, "CHUNK SERVER\tADDR\tHOST\tRACK\tPOD\tSTATE\tCHUNKS\tUSED\tCAPACITY\tREAD MB/s\tWRITE MB/s")
		for _, c := range rep.ChunkServers {
			state := "unknown"
			switch {
			case c.Known && c.Alive:
				state = "alive"
			case c.Known:
				state = "dead"
			}
			pod := c.Pod
			if pod == "" {
				pod = "-"
			}
			size := humanSize
			if rep.Bytes {
				size = func(n int64) string { return strconv.FormatInt(n, 10) }
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%.1f\t%.1f\n", c.ID, c.Addr, c.Host, c.Rack, pod, state, c.Chunks,
				size(c.Used), size(c.Capacity), float64(c.ReadBytesPerS)/1e6, float64(c.WriteBytesPerS)/1e6)
		}
		tw.Flush()
	}
	if len(rep.ReplicaGroups) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(tw, "REPLICA GROUP\tEPOCH\tPRIMARY\tMEMBERS\tSTATE")
		for _, g := range rep.ReplicaGroups {
			var ms []string
			for _, m := range g.Members {
				s := strconv.FormatUint(m, 10)
				if slices.Contains(g.Syncing, m) {
					s += "(syncing)"
				}
				ms = append(ms, s)
			}
			fmt.Fprintf(tw, "%d\t%d\t%d\t%s\t%s\n", g.ID, g.Epoch, g.Primary, strings.Join(ms, ","), g.State)
		}
		tw.Flush()
		for _, g := range rep.ReplicaGroups {
			for _, note := range g.PlacementNotes {
				fmt.Fprintf(w, "replica group %d placement: %s\n", g.ID, note)
			}
		}
	}
	for _, m := range rep.Members {
		if !m.Reachable && m.Error != "" {
			fmt.Fprintf(w, "\nmember %d (%s) unreachable: %s", m.ID, m.Addr, m.Error)
		}
	}
	if slices.ContainsFunc(rep.Members, func(m memberReport) bool { return !m.Reachable && m.Error != "" }) {
		fmt.Fprintln(w)
	}
}
