package metanode

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"slices"
	"time"

	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/wire"
)

// The dashboard (docs/operations.md): every metadata node serves it on
// --http. The page (dashboard.html: a template, a little JavaScript, no
// build step, nothing fetched from elsewhere) polls /api/dashboard every
// two seconds. The figures are the president's leader's view: a node that
// does not lead the president asks the leader (or any president member)
// for it, and says whose view it shows and how old its map is; when none
// answers it shows its own copy and says so.

//go:embed dashboard.html
var dashboardHTML string

var dashboardPage = template.Must(template.New("dashboard").Parse(dashboardHTML))

// dashboardData is /api/dashboard's answer.
type dashboardData struct {
	ClusterID string `json:"cluster_id"`
	ServedBy  uint64 `json:"served_by"`
	// Source says whose view this is; ViewAgeMs how old the map it comes
	// from is (0: current).
	Source    string   `json:"source"`
	ViewAgeMs int64    `json:"view_age_ms"`
	Healthy   bool     `json:"healthy"`
	Problems  []string `json:"problems"`
	// OpsPerS is the sum of the ministries' requests per second.
	OpsPerS       float64           `json:"ops_per_s"`
	Ministries    []dashMinistry    `json:"ministries"`
	Nodes         []dashNode        `json:"nodes"`
	ChunkServers  []dashChunk       `json:"chunk_servers"`
	ReplicaGroups []dashGroup       `json:"replica_groups"`
	Events        []*wire.NodeEvent `json:"events"`
	Time          time.Time         `json:"time"`
}

type dashMinistry struct {
	ID       uint64   `json:"id"`
	Subtrees []string `json:"subtrees"`
	Members  []uint64 `json:"members"`
	Minister uint64   `json:"minister"`
	Epoch    uint64   `json:"epoch"`
	OpsPerS  float64  `json:"ops_per_s"`
}

type dashNode struct {
	ID    uint64   `json:"id"`
	Addr  string   `json:"addr"`
	Cert  string   `json:"cert"`
	Roles []string `json:"roles"`
	// State is alive, dead or unknown (the answering node has not
	// listened long enough).
	State      string  `json:"state"`
	LastSeenMs int64   `json:"last_seen_ms"`
	CPU        float64 `json:"cpu"`
	OpsPerS    float64 `json:"ops_per_s"`
}

type dashChunk struct {
	ID   uint64 `json:"id"`
	Addr string `json:"addr"`
	Host string `json:"host"`
	Rack string `json:"rack"`
	// State is alive, late (no heartbeat for over two intervals), dead
	// or unknown.
	State      string `json:"state"`
	LastSeenMs int64  `json:"last_seen_ms"`
	Used       int64  `json:"used"`
	Capacity   int64  `json:"capacity"`
	Chunks     uint64 `json:"chunks"`
	ReadBps    int64  `json:"read_bps"`
	WriteBps   int64  `json:"write_bps"`
}

type dashGroup struct {
	ID      uint64   `json:"id"`
	Members []uint64 `json:"members"`
	Syncing []uint64 `json:"syncing"`
	Primary uint64   `json:"primary"`
	Epoch   uint64   `json:"epoch"`
	State   string   `json:"state"`
}

// presidentView asks the president's leader (else any president member)
// for its ClusterInfo and Status, and says whose they are.
func (n *Node) presidentView(ctx context.Context) (*wire.ClusterInfoResponse, *wire.StatusResponse, string) {
	s := &metaService{n: n}
	if lead, me := n.host.Leader(ids.PresidentGroup); me || (lead == 0 && n.host.HasGroup(ids.PresidentGroup)) {
		info, _ := s.ClusterInfo(ctx, &wire.ClusterInfoRequest{})
		st, _ := s.Status(ctx, &wire.StatusRequest{})
		who := fmt.Sprintf("node %d, the president's leader", uint64(n.cfg.ID))
		if !me {
			who = fmt.Sprintf("node %d (the president has no leader now)", uint64(n.cfg.ID))
		}
		return info, st, who
	}
	addrs := n.presidentAddrs()
	if lead, _ := n.host.Leader(ids.PresidentGroup); lead != 0 {
		if a := n.addrOf(lead); a != "" {
			addrs = append([]string{a}, addrs...)
		}
	}
	var fallback *wire.ClusterInfoResponse
	var fallbackSt *wire.StatusResponse
	var fallbackWho string
	for _, a := range addrs {
		cc, err := n.pool.Get(a)
		if err != nil {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		mc := wire.NewMetaClient(cc)
		st, err1 := mc.Status(cctx, &wire.StatusRequest{})
		info, err2 := mc.ClusterInfo(cctx, &wire.ClusterInfoRequest{})
		cancel()
		if err1 != nil || err2 != nil {
			continue
		}
		who := fmt.Sprintf("node %d at %s", st.GetNodeId(), a)
		if len(st.GetChunkServers()) > 0 && st.GetChunkServers()[0].GetKnown() {
			return info, st, who + ", the president's leader"
		}
		if fallback == nil {
			fallback, fallbackSt, fallbackWho = info, st, who+", a president member"
		}
	}
	if fallback != nil {
		return fallback, fallbackSt, fallbackWho
	}
	info, _ := s.ClusterInfo(ctx, &wire.ClusterInfoRequest{})
	st, _ := s.Status(ctx, &wire.StatusRequest{})
	return info, st, fmt.Sprintf("node %d's own copy: no president member answered", uint64(n.cfg.ID))
}

// dashboard gathers /api/dashboard.
func (n *Node) dashboard(ctx context.Context) dashboardData {
	info, st, who := n.presidentView(ctx)
	d := dashboardData{ClusterID: n.ClusterID(), ServedBy: uint64(n.cfg.ID), Source: who, ViewAgeMs: info.GetMapAgeMs(),
		Time: n.cfg.Clock.Now(), Ministries: []dashMinistry{}, Nodes: []dashNode{}, ChunkServers: []dashChunk{},
		ReplicaGroups: []dashGroup{}, Problems: []string{}, Events: st.GetEvents()}
	if d.Events == nil {
		d.Events = []*wire.NodeEvent{}
	}
	problem := func(format string, args ...any) { d.Problems = append(d.Problems, fmt.Sprintf(format, args...)) }
	if info.GetStatus().GetCode() != wire.Code_OK {
		problem("cluster map: %s", info.GetStatus().GetMessage())
	}
	leads := map[uint64][]string{}
	for _, m := range info.GetMinistries() {
		dm := dashMinistry{ID: m.GetGroup(), Members: m.GetMembers(), Minister: m.GetLeader(), Epoch: m.GetEpoch(), OpsPerS: m.GetOpsPerS()}
		for _, s := range m.GetSubtrees() {
			dm.Subtrees = append(dm.Subtrees, s.GetPath())
		}
		if len(dm.Subtrees) == 0 && m.GetRootPath() != "" {
			dm.Subtrees = []string{m.GetRootPath()}
		}
		if dm.Minister == 0 {
			problem("ministry %d has no minister known", m.GetGroup())
		} else {
			leads[dm.Minister] = append(leads[dm.Minister], fmt.Sprintf("minister of %d", m.GetGroup()))
		}
		d.OpsPerS += dm.OpsPerS
		d.Ministries = append(d.Ministries, dm)
	}
	loads := map[uint64]*wire.NodeLoad{}
	for _, l := range info.GetNodeLoads() {
		loads[l.GetNodeId()] = l
	}
	presidentLeader := uint64(0)
	for _, g := range st.GetGroups() {
		if g.GetGroup() == uint64(ids.PresidentGroup) {
			presidentLeader = g.GetLeader()
		}
	}
	founders := map[uint64]bool{}
	for id := range n.ident.Peers {
		founders[uint64(id)] = true
	}
	for _, m := range info.GetMembers() {
		dn := dashNode{ID: m.GetId(), Addr: m.GetAddr(), Cert: m.GetCertName(), State: "unknown", LastSeenMs: -1}
		if founders[m.GetId()] {
			dn.Roles = append(dn.Roles, "president member")
		}
		if m.GetId() == presidentLeader {
			dn.Roles = append(dn.Roles, "president's leader")
		}
		dn.Roles = append(dn.Roles, leads[m.GetId()]...)
		if l := loads[m.GetId()]; l != nil {
			dn.LastSeenMs, dn.CPU = l.GetLastHeartbeatMsAgo(), l.GetCpu()
			for _, g := range l.GetGroups() {
				dn.OpsPerS += g.GetOpsPerS()
			}
			switch {
			case !l.GetKnown():
			case l.GetAlive():
				dn.State = "alive"
			default:
				dn.State = "dead"
				problem("metadata node %d (%s) is dead", m.GetId(), m.GetAddr())
			}
		}
		d.Nodes = append(d.Nodes, dn)
	}
	for _, cs := range st.GetChunkServers() {
		srv := cs.GetServer()
		dc := dashChunk{ID: srv.GetId(), Addr: srv.GetAddr(), Host: srv.GetHost(), Rack: srv.GetRack(), State: "unknown",
			LastSeenMs: cs.GetLastHeartbeatMsAgo(), Used: cs.GetUsed(), Capacity: srv.GetCapacity(), Chunks: cs.GetChunks(),
			ReadBps: cs.GetReadBytesPerS(), WriteBps: cs.GetWriteBytesPerS()}
		switch {
		case !cs.GetKnown():
		case cs.GetAlive() && cs.GetLastHeartbeatMsAgo() > 2*chunkHeartbeatInterval.Milliseconds():
			dc.State = "late"
			problem("chunk server %d (%s) has sent no heartbeat for %.1f s", srv.GetId(), srv.GetAddr(), float64(cs.GetLastHeartbeatMsAgo())/1000)
		case cs.GetAlive():
			dc.State = "alive"
		default:
			dc.State = "dead"
			problem("chunk server %d (%s) is dead", srv.GetId(), srv.GetAddr())
		}
		d.ChunkServers = append(d.ChunkServers, dc)
	}
	for _, g := range st.GetReplicaGroups() {
		dg := dashGroup{ID: g.GetId(), Members: g.GetMembers(), Syncing: g.GetSyncing(), Primary: g.GetPrimary(), Epoch: g.GetEpoch(), State: "ok"}
		full := len(g.GetMembers()) - len(g.GetSyncing())
		switch {
		case len(g.GetSyncing()) > 0:
			dg.State = fmt.Sprintf("syncing (%d of %d full)", full, replicationFactor)
		case len(g.GetMembers()) < replicationFactor:
			dg.State = fmt.Sprintf("under-replicated (%d of %d)", len(g.GetMembers()), replicationFactor)
		}
		for _, m := range g.GetMembers() {
			for _, c := range d.ChunkServers {
				if c.ID == m && c.State == "dead" && !slices.Contains(g.GetSyncing(), m) {
					dg.State = "member dead: being replaced"
				}
			}
		}
		if dg.State != "ok" {
			problem("replica group %d: %s", g.GetId(), dg.State)
		}
		d.ReplicaGroups = append(d.ReplicaGroups, dg)
	}
	if err := n.healthy(); err != nil {
		problem("node %v: %v", n.cfg.ID, err)
	}
	d.Healthy = len(d.Problems) == 0
	return d
}

func (n *Node) serveDashboard(mux *http.ServeMux) {
	mux.HandleFunc("/api/dashboard", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
		defer cancel()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_ = json.NewEncoder(w).Encode(n.dashboard(ctx))
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_ = dashboardPage.Execute(w, struct {
			ClusterID string
			Node      uint64
		}{n.ClusterID(), uint64(n.cfg.ID)})
	})
}
