package rpc

import (
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// DebugServer serves /debug/pprof on its own listener, apart from
// /metrics: a profile shows memory contents and a trace stalls the
// process, so it is bound to loopback (the CLI refuses other addresses)
// and reached through an SSH tunnel.
type DebugServer struct {
	srv  *http.Server
	done chan struct{}
}

// StartDebug listens on addr and serves /debug/pprof until Stop.
func StartDebug(addr string) (*DebugServer, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen for /debug/pprof on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	d := &DebugServer{srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}, done: make(chan struct{})}
	go func() {
		defer close(d.done)
		_ = d.srv.Serve(lis)
	}()
	return d, nil
}

// Stop closes the listener and open connections and waits for the
// server to end (nil-safe).
func (d *DebugServer) Stop() {
	if d == nil {
		return
	}
	_ = d.srv.Close()
	<-d.done
}
