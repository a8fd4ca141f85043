package cli

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/govfs/govfs/internal/certs"
	"github.com/govfs/govfs/internal/rpc"
)

// tlsEnv names the environment variable holding a client's certificate
// directory when --tls is not given.
const tlsEnv = "GOVFS_TLS"

// certWatchInterval is how often a server looks for renewed certificates
// (SIGHUP reloads at once).
const certWatchInterval = 10 * time.Second

// serverTLSFlags are the security flags of govfs meta and govfs chunk.
type serverTLSFlags struct {
	dir       string
	insecure  bool
	onNetwork bool
}

func (f *serverTLSFlags) register(fs *flag.FlagSet, role certs.Role) {
	fs.StringVar(&f.dir, "tls", "", fmt.Sprintf("certificate directory (ca.crt, tls.crt, tls.key) from 'govfs admin cert issue --%s NAME'; every connection is mutual TLS", role))
	fs.BoolVar(&f.insecure, "insecure", false, "run plaintext: no certificates, every caller trusted; only on loopback addresses (see --insecure-on-network)")
	fs.BoolVar(&f.onNetwork, "insecure-on-network", false, "with --insecure, allow listening on non-loopback addresses: anyone who can reach them can read and destroy every file")
}

// security checks the flags against the addresses this process listens
// on and loads the certificates; it keeps them fresh (a file watch and
// SIGHUP) until ctx ends. nil means plaintext.
func (f *serverTLSFlags) security(ctx context.Context, cmd string, log *slog.Logger, listen ...string) (*rpc.Security, error) {
	switch {
	case f.dir != "" && f.insecure:
		return nil, fmt.Errorf("%s: --tls and --insecure exclude each other", cmd)
	case f.onNetwork && !f.insecure:
		return nil, fmt.Errorf("%s: --insecure-on-network only goes with --insecure", cmd)
	case f.dir == "" && !f.insecure:
		return nil, fmt.Errorf("%s: --tls DIR is required (a certificate directory made by 'govfs admin cert issue'; see docs/security.md), or --insecure to run plaintext on loopback", cmd)
	}
	if f.insecure {
		for _, a := range listen {
			if a == "" {
				continue
			}
			if !loopback(a) && !f.onNetwork {
				return nil, fmt.Errorf("%s: --insecure refuses to listen on %s, which is not a loopback address: anyone who reaches it could read and destroy every file. Use --tls, or add --insecure-on-network if this network is truly private", cmd, a)
			}
		}
		log.Warn("INSECURE: running without TLS; every connection is plaintext and every caller is trusted (started with --insecure)", "listen", listen)
		return nil, nil
	}
	store, err := certs.Load(f.dir, nil)
	if err != nil {
		return nil, fmt.Errorf("%s: --tls: %w", cmd, err)
	}
	keepFresh(ctx, store, log)
	sec := rpc.NewSecurity(store)
	log.Info("security", "mode", sec.String())
	return sec, nil
}

// keepFresh reloads store on SIGHUP and when its files change, until ctx
// ends: certificates and the CA are rotated without a restart.
func keepFresh(ctx context.Context, store *certs.Store, log *slog.Logger) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		defer signal.Stop(hup)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				if err := store.Reload(); err != nil {
					log.Error("SIGHUP: certificates not reloaded; the old ones stay in use", "err", err)
				} else {
					log.Info("SIGHUP: certificates reloaded", "identity", store.Identity().String(), "expires", store.Expires())
				}
			}
		}
	}()
	go store.Watch(ctx, certWatchInterval, func(err error) {
		log.Error("certificate files changed but could not be loaded; the old ones stay in use", "err", err)
	})
}

// loopback says whether a listen address binds only loopback interfaces.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// clientTLSDir is the certificate directory a client command uses: --tls,
// else $GOVFS_TLS; "" with --insecure.
func clientTLSDir(flagVal string, insecure bool, getenv func(string) string) (string, error) {
	dir := flagVal
	if dir == "" && !insecure {
		dir = getenv(tlsEnv)
	}
	switch {
	case dir != "" && insecure && flagVal != "":
		return "", fmt.Errorf("--tls and --insecure exclude each other")
	case insecure:
		return "", nil
	case dir == "":
		return "", fmt.Errorf("no client certificate: pass --tls DIR or set %s (`govfs dev` prints an export line for it; 'govfs admin cert issue --client NAME' makes one), or --insecure for a cluster started with --insecure", tlsEnv)
	}
	// Absolute: a background mount re-executes itself elsewhere.
	return filepath.Abs(dir)
}

// debugListen checks --debug-listen: /debug/pprof shows memory contents
// and a trace stalls the process, so it listens on loopback only (reach
// it from elsewhere through an SSH tunnel).
func debugListen(cmd, addr string) (string, error) {
	if addr != "" && !loopback(addr) {
		return "", fmt.Errorf("%s: --debug-listen %s: /debug/pprof listens on loopback addresses only (127.0.0.1:PORT, [::1]:PORT); reach it through an SSH tunnel", cmd, addr)
	}
	return addr, nil
}
