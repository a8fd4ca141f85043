package metanode

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/govfs/govfs/internal/ids"
)

// nodeCollector exports, at each scrape, what an operator alerts on and
// the node already knows: every hosted Raft group's term, indexes,
// leader and health, the leases each ministry led here holds, and the
// store's Pebble figures (docs/operations.md lists them).
type nodeCollector struct {
	n *Node

	term, commit, applied, leader, isLeader, healthy, voters *prometheus.Desc
	leases, clients                                          *prometheus.Desc
	disk, compactions, debt, stalls, stallTime, readAmp      *prometheus.Desc
}

func newNodeCollector(n *Node) *nodeCollector {
	g := []string{"group", "kind"}
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, nil)
	}
	return &nodeCollector{n: n,
		term:        d("govfs_raft_group_term", "Raft term of each group hosted here.", g...),
		commit:      d("govfs_raft_group_commit_index", "Commit index of each group as this replica knows it.", g...),
		applied:     d("govfs_raft_group_applied_index", "Applied index of each group's replica here.", g...),
		leader:      d("govfs_raft_group_leader", "Node id of each group's leader as this replica knows it (0: none known).", g...),
		isLeader:    d("govfs_raft_group_is_leader", "1 if this node leads the group.", g...),
		healthy:     d("govfs_raft_group_healthy", "1 if the group has a quorum reachable from this node: it leads it (and Raft's check-quorum keeps it leading only with a quorum), or it heard from the leader within an election timeout. /healthz fails when any is 0.", g...),
		voters:      d("govfs_raft_group_voters", "Voters in each group's configuration.", g...),
		leases:      d("govfs_leases_held", "Leases and locks held from the ministries this node leads.", g...),
		clients:     d("govfs_lease_clients", "Clients holding leases of the ministries this node leads.", g...),
		disk:        d("govfs_pebble_disk_bytes", "Disk space used by the node's Pebble store."),
		compactions: d("govfs_pebble_compactions_total", "Pebble compactions since the node started."),
		debt:        d("govfs_pebble_compaction_debt_bytes", "Pebble's estimate of the bytes left to compact."),
		stalls:      d("govfs_pebble_write_stalls_total", "Times Pebble held writes back (too many memtables or level-0 files)."),
		stallTime:   d("govfs_pebble_write_stall_seconds_total", "Time writes were held back by Pebble."),
		readAmp:     d("govfs_pebble_read_amplification", "Pebble read amplification (sub-levels a read may look in)."),
	}
}

func (c *nodeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.term, c.commit, c.applied, c.leader, c.isLeader, c.healthy, c.voters, c.leases, c.clients,
		c.disk, c.compactions, c.debt, c.stalls, c.stallTime, c.readAmp} {
		ch <- d
	}
}

func (c *nodeCollector) Collect(ch chan<- prometheus.Metric) {
	n := c.n
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	b2f := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	for _, st := range n.host.Status() {
		kind := "ministry"
		if st.Group == ids.PresidentGroup {
			kind = "president"
		}
		l := []string{strconv.FormatUint(uint64(st.Group), 10), kind}
		gauge(c.term, float64(st.Term), l...)
		gauge(c.commit, float64(st.Commit), l...)
		gauge(c.applied, float64(st.Applied), l...)
		gauge(c.leader, float64(st.Leader), l...)
		gauge(c.isLeader, b2f(st.Leader == n.cfg.ID), l...)
		gauge(c.healthy, b2f(n.host.CheckReadable(st.Group) == nil), l...)
		gauge(c.voters, float64(len(st.Voters)), l...)
	}
	if ls := n.leases; ls != nil {
		ls.mu.Lock()
		for g, gl := range ls.mu.groups {
			if gl.table == nil {
				continue
			}
			l := []string{strconv.FormatUint(uint64(g), 10), "ministry"}
			gauge(c.leases, float64(gl.table.Len()), l...)
			gauge(c.clients, float64(gl.table.Clients()), l...)
		}
		ls.mu.Unlock()
	}
	s := n.eng.Stats()
	gauge(c.disk, float64(s.DiskBytes))
	ch <- prometheus.MustNewConstMetric(c.compactions, prometheus.CounterValue, float64(s.Compactions))
	gauge(c.debt, float64(s.CompactionDebt))
	ch <- prometheus.MustNewConstMetric(c.stalls, prometheus.CounterValue, float64(s.WriteStalls))
	ch <- prometheus.MustNewConstMetric(c.stallTime, prometheus.CounterValue, s.WriteStallTime.Seconds())
	gauge(c.readAmp, float64(s.ReadAmp))
}

// healthy is /healthz: the node runs and every group it hosts has a
// quorum reachable from it (multiraft CheckReadable: it leads the group,
// which Raft's check-quorum allows only with a quorum in touch, or it
// heard from the leader within an election timeout). A failing node
// needs a look: it is cut off, or its groups lost their quorum.
func (n *Node) healthy() error {
	if err := n.host.Err(); err != nil {
		return fmt.Errorf("fatal: %w", err)
	}
	var errs []error
	for _, st := range n.host.Status() {
		if err := n.host.CheckReadable(st.Group); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// readyLag is how many entries a replica may be behind its commit index
// and still count as ready.
const readyLag = 1000

// ready is /readyz: healthy, and able to answer clients now: it knows
// its cluster, holds the cluster map, and every replica has applied
// what it knows to be committed (within readyLag entries). A node
// catching up after a restart or a new replica is healthy but not ready.
func (n *Node) ready() error {
	if err := n.healthy(); err != nil {
		return err
	}
	if n.ClusterID() == "" {
		return errors.New("the node does not know its cluster yet (forming, or joining)")
	}
	if n.mapView() == nil {
		return errors.New("the node has no copy of the cluster map yet")
	}
	var errs []error
	for _, st := range n.host.Status() {
		if st.Commit > st.Applied+readyLag {
			errs = append(errs, fmt.Errorf("group %v: applied %d of %d committed entries", st.Group, st.Applied, st.Commit))
		}
	}
	return errors.Join(errs...)
}
