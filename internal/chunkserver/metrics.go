package chunkserver

import (
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/govfs/govfs/internal/dataproto"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics are the chunk server's Prometheus series, served on
// Config.HTTPListen with /healthz.
type metrics struct {
	requests  *prometheus.CounterVec // by type and status
	bytesRead prometheus.Counter
	bytesIn   prometheus.Counter
	// diskErrors counts requests that failed on the store (I/O errors,
	// a full disk).
	diskErrors prometheus.Counter
	repairs    *prometheus.CounterVec // by outcome
	installs   prometheus.Counter
	scrubBad   prometheus.Counter
}

func newMetrics(reg *prometheus.Registry, s *Server) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "govfs_chunk_requests_total",
			Help: "Data-protocol requests served, by frame type and reply status."}, []string{"type", "status"}),
		bytesRead: prometheus.NewCounter(prometheus.CounterOpts{Name: "govfs_chunk_read_bytes_total", Help: "Bytes returned by reads."}),
		bytesIn: prometheus.NewCounter(prometheus.CounterOpts{Name: "govfs_chunk_written_bytes_total",
			Help: "Bytes of writes, appends, replicated mutations and installs applied."}),
		repairs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "govfs_chunk_repairs_total",
			Help: "Chunks repaired after a corrupt block was found, by outcome."}, []string{"outcome"}),
		installs: prometheus.NewCounter(prometheus.CounterOpts{Name: "govfs_chunk_installs_sent_total",
			Help: "Whole chunks this server sent to another member (reconcile or filling a new member)."}),
		scrubBad: prometheus.NewCounter(prometheus.CounterOpts{Name: "govfs_chunk_scrub_bad_blocks_total", Help: "Bad blocks the scrubber found."}),
		diskErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "govfs_chunk_disk_errors_total",
			Help: "Requests that failed on this server's store: I/O errors and a full disk (corrupt blocks are govfs_chunk_repairs_total and govfs_chunk_scrub_bad_blocks_total)."}),
	}
	// Both outcomes exported from the start (at 0), so that dashboards and
	// alerts find the series before the first repair.
	m.repairs.WithLabelValues("ok")
	m.repairs.WithLabelValues("failed")
	reg.MustRegister(m.requests, m.bytesRead, m.bytesIn, m.repairs, m.installs, m.scrubBad, m.diskErrors,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "govfs_chunk_bytes_in_flight", Help: "Payload bytes of requests being served."},
			func() float64 {
				s.load.mu.Lock()
				defer s.load.mu.Unlock()
				return float64(s.load.inFlight)
			}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "govfs_chunk_store_used_bytes", Help: "Bytes used on the store's file system."},
			func() float64 {
				used, _, _ := s.store.Usage()
				return float64(used)
			}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "govfs_chunk_store_capacity_bytes", Help: "Size of the store's file system."},
			func() float64 {
				_, capacity, _ := s.store.Usage()
				return float64(capacity)
			}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "govfs_chunk_seconds_since_heartbeat", Help: "Seconds since a heartbeat last reached the president."},
			func() float64 {
				s.mu.Lock()
				defer s.mu.Unlock()
				return time.Since(s.lastBeat).Seconds()
			}),
	)
	return m
}

func (m *metrics) served(f, reply *dataproto.Frame) {
	if m == nil {
		return
	}
	m.requests.WithLabelValues(f.Type.String(), strconv.Itoa(int(reply.Status))).Inc()
	if reply.Status == dataproto.StatusInternal || reply.Status == dataproto.StatusNoSpace {
		m.diskErrors.Inc()
	}
	if reply.Status != dataproto.StatusOK {
		return
	}
	switch f.Type {
	case dataproto.TypeRead:
		m.bytesRead.Add(float64(len(reply.Payload)))
	case dataproto.TypeWrite, dataproto.TypeAppend, dataproto.TypeReplicate, dataproto.TypeInstall:
		m.bytesIn.Add(float64(len(f.Payload)))
	}
}

// startHTTP serves /metrics and /healthz on addr.
func (s *Server) startHTTP(addr string) error {
	reg := prometheus.NewRegistry()
	s.met = newMetrics(reg, s)
	s.cfg.Security.RegisterMetrics(reg)
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		since := time.Since(s.lastBeat)
		s.mu.Unlock()
		if since > leaseTimeout {
			http.Error(w, fmt.Sprintf("no heartbeat reached the president for %v: not serving", since.Truncate(time.Second)), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("chunk server: listen for HTTP on %s: %w", addr, err)
	}
	s.http = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		_ = s.http.Serve(lis)
	}()
	return nil
}

func (m *metrics) repaired(outcome string) {
	if m != nil {
		m.repairs.WithLabelValues(outcome).Inc()
	}
}
