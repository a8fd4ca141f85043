package multiraft

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	appendEntries  prometheus.Histogram
	readyGroups    prometheus.Histogram
	fsync          prometheus.Histogram
	applied        prometheus.Counter
	snapshotsTaken prometheus.Counter
	// snapshotPagesStaged counts the pages of received snapshots written
	// to the staging area (each at most about stagePage bytes).
	snapshotPagesStaged prometheus.Counter
	snapshotsSent       prometheus.Counter
	// commitOnlySkipped counts entry-less MsgApps not sent because a
	// later MsgApp of the same Ready to the same follower carried at
	// least the same commit index.
	commitOnlySkipped prometheus.Counter

	mu         sync.Mutex
	appendMsgs uint64
	appendEnts uint64
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		appendEntries: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "govfs_raft_entries_per_append",
			Help:    "Entries carried by each MsgApp sent (proposal batching).",
			Buckets: []float64{0, 1, 2, 4, 8, 16, 32, 64, 128, 256},
		}),
		readyGroups: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "govfs_raft_groups_per_ready_round",
			Help:    "Groups handled in one Ready round (one fsync).",
			Buckets: []float64{1, 2, 4, 8, 16, 64, 256},
		}),
		fsync: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "govfs_raft_persist_sync_seconds",
			Help:    "Latency of the synced batch commit of a Ready round.",
			Buckets: prometheus.ExponentialBuckets(0.00005, 2, 14),
		}),
		applied:             prometheus.NewCounter(prometheus.CounterOpts{Name: "govfs_raft_entries_applied_total", Help: "Entries applied."}),
		snapshotsTaken:      prometheus.NewCounter(prometheus.CounterOpts{Name: "govfs_raft_snapshots_taken_total", Help: "Snapshots taken (log compactions)."}),
		snapshotPagesStaged: prometheus.NewCounter(prometheus.CounterOpts{Name: "govfs_raft_snapshot_pages_staged_total", Help: "Pages (about 1 MiB each) of received snapshots written to disk before install."}),
		snapshotsSent:       prometheus.NewCounter(prometheus.CounterOpts{Name: "govfs_raft_snapshots_sent_total", Help: "Snapshots streamed to followers."}),
		commitOnlySkipped: prometheus.NewCounter(prometheus.CounterOpts{Name: "govfs_raft_commit_only_appends_skipped_total",
			Help: "Entry-less MsgApps (commit index updates) not sent because a later MsgApp of the same round to the same follower superseded them."}),
	}
	if reg != nil {
		reg.MustRegister(m.appendEntries, m.readyGroups, m.fsync, m.applied, m.snapshotsTaken, m.snapshotsSent, m.snapshotPagesStaged, m.commitOnlySkipped)
	}
	return m
}

func (m *metrics) noteAppend(n int) {
	m.mu.Lock()
	m.appendMsgs++
	m.appendEnts += uint64(n)
	m.mu.Unlock()
}

func (m *metrics) meanEntriesPerAppend() float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.appendMsgs == 0 {
		return 0
	}
	return float64(m.appendEnts) / float64(m.appendMsgs)
}
