package rpc

import (
	"context"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

// ServerMetrics records, per gRPC method and outcome code, how many
// requests a server answered and how long they took
// (govfs_rpc_server_seconds: a histogram, so its _count is the rate).
type ServerMetrics struct {
	seconds *prometheus.HistogramVec
}

// NewServerMetrics registers the histogram with reg.
func NewServerMetrics(reg prometheus.Registerer) *ServerMetrics {
	m := &ServerMetrics{seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "govfs_rpc_server_seconds",
		Help:    "Latency of the gRPC requests this server answered, by method (Service/Method) and gRPC code.",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2, 17), // 100 µs .. 6.5 s
	}, []string{"method", "code"})}
	if reg != nil {
		reg.MustRegister(m.seconds)
	}
	return m
}

// methodName shortens "/govfs.Meta/Mutate" to "Meta/Mutate".
func methodName(full string) string {
	full = strings.TrimPrefix(full, "/")
	if i := strings.LastIndex(full, "."); i >= 0 && i < strings.Index(full, "/") {
		return full[i+1:]
	}
	return full
}

// Unary is the unary server interceptor.
func (m *ServerMetrics) Unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	start := time.Now()
	resp, err := h(ctx, req)
	m.seconds.WithLabelValues(methodName(info.FullMethod), status.Code(err).String()).Observe(time.Since(start).Seconds())
	return resp, err
}

// Stream is the stream server interceptor.
func (m *ServerMetrics) Stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	start := time.Now()
	err := h(srv, ss)
	m.seconds.WithLabelValues(methodName(info.FullMethod), status.Code(err).String()).Observe(time.Since(start).Seconds())
	return err
}
