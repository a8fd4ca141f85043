package rpc

import (
	"context"
	"crypto/tls"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	grpcpeer "google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/govfs/govfs/internal/certs"
	"github.com/prometheus/client_golang/prometheus"
)

// Security is the TLS side of a process's connections (docs/security.md).
// A nil *Security is plaintext: every caller is trusted, which only a
// cluster started with --insecure does.
type Security struct {
	store  *certs.Store
	client *tls.Config
	server *tls.Config
}

// NewSecurity returns the security of a process holding store's
// certificates (nil store: plaintext, a nil *Security).
func NewSecurity(store *certs.Store) *Security {
	if store == nil {
		return nil
	}
	return &Security{store: store, client: store.ClientConfig(), server: store.ServerConfig()}
}

// Store is the certificate store (nil for plaintext).
func (s *Security) Store() *certs.Store {
	if s == nil {
		return nil
	}
	return s.store
}

// Identity is this process's own identity (zero for plaintext).
func (s *Security) Identity() certs.Identity {
	if s == nil {
		return certs.Identity{}
	}
	return s.store.Identity()
}

// ServerOption is the gRPC server's transport credentials.
func (s *Security) ServerOption() grpc.ServerOption {
	if s == nil {
		return grpc.Creds(insecure.NewCredentials())
	}
	return grpc.Creds(credentials.NewTLS(s.server))
}

// DialOption is a gRPC client's transport credentials.
func (s *Security) DialOption() grpc.DialOption {
	if s == nil {
		return grpc.WithTransportCredentials(insecure.NewCredentials())
	}
	return grpc.WithTransportCredentials(credentials.NewTLS(s.client))
}

// ClientTLS is the configuration for dialling a data port (nil: plain TCP).
func (s *Security) ClientTLS() *tls.Config {
	if s == nil {
		return nil
	}
	return s.client
}

// ServerTLS is the configuration for a data port listener (nil: plain TCP).
func (s *Security) ServerTLS() *tls.Config {
	if s == nil {
		return nil
	}
	return s.server
}

// Caller is who made a request, from its connection's certificate.
type Caller struct {
	// Secure is false on a plaintext connection: nothing is known, and
	// the caller is trusted (an --insecure cluster).
	Secure bool
	certs.Identity
}

// Is says whether the caller may act in one of roles: true for every
// role on a plaintext connection.
func (c Caller) Is(roles ...certs.Role) bool {
	return !c.Secure || slices.Contains(roles, c.Role)
}

type callerKey struct{}

// CallerOf reads the caller of a gRPC request: as Authorize's unary
// interceptor left it in ctx, else from the connection's certificate.
func CallerOf(ctx context.Context) Caller {
	if c, ok := ctx.Value(callerKey{}).(Caller); ok {
		return c
	}
	return callerOfPeer(ctx)
}

func callerOfPeer(ctx context.Context) Caller {
	p, ok := grpcpeer.FromContext(ctx)
	if !ok {
		return Caller{}
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(ti.State.PeerCertificates) == 0 {
		return Caller{}
	}
	id, err := certs.IdentityOf(ti.State.PeerCertificates[0])
	if err != nil {
		// The handshake checked it parses; keep a caller that no role
		// table admits.
		return Caller{Secure: true, Identity: certs.Identity{Role: "unknown"}}
	}
	return Caller{Secure: true, Identity: id}
}

// CallerOfConn reads the caller of a data connection (after its handshake).
func CallerOfConn(cs *tls.ConnectionState) Caller {
	if cs == nil {
		return Caller{}
	}
	if len(cs.PeerCertificates) == 0 {
		return Caller{Secure: true, Identity: certs.Identity{Role: "unknown"}}
	}
	id, err := certs.IdentityOf(cs.PeerCertificates[0])
	if err != nil {
		return Caller{Secure: true, Identity: certs.Identity{Role: "unknown"}}
	}
	return Caller{Secure: true, Identity: id}
}

// Denied is the error for a caller whose certificate's role may not make
// a call.
func Denied(c Caller, what string, roles ...certs.Role) error {
	rs := make([]string, len(roles))
	for i, r := range roles {
		rs[i] = string(r)
	}
	return status.Errorf(codes.PermissionDenied, "%s is for %s certificates; the caller's certificate is %s", what, strings.Join(rs, " or "), c.Identity)
}

// Authorize returns interceptors that admit a call only from a caller
// whose role roles[method] lists (full method names, as
// "/govfs.Meta/Mutate"); a method missing from the table is refused, so
// a new RPC is closed until someone decides who may call it.
//
// sec is the server's security: when it runs TLS, a call without a
// certificate (which its credentials should make impossible) is refused,
// never trusted.
func Authorize(sec *Security, roles map[string][]certs.Role) (grpc.UnaryServerInterceptor, grpc.StreamServerInterceptor) {
	check := func(ctx context.Context, method string) (Caller, error) {
		c := callerOfPeer(ctx)
		if !c.Secure {
			if sec != nil {
				return c, status.Errorf(codes.Unauthenticated, "%s: the connection carries no client certificate", method)
			}
			return c, nil
		}
		allowed, ok := roles[method]
		if !ok {
			return c, status.Errorf(codes.PermissionDenied, "%s is not open to any certificate", method)
		}
		if !c.Is(allowed...) {
			return c, Denied(c, method, allowed...)
		}
		return c, nil
	}
	unary := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		c, err := check(ctx, info.FullMethod)
		if err != nil {
			return nil, err
		}
		// The handler's checks (metanode/authz.go) read it from here
		// instead of parsing the certificate again.
		return h(context.WithValue(ctx, callerKey{}, c), req)
	}
	stream := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		if _, err := check(ss.Context(), info.FullMethod); err != nil {
			return err
		}
		return h(srv, ss)
	}
	return unary, stream
}

// RegisterMetrics adds the TLS handshake counters to reg (nothing for
// plaintext): connections are pooled and sessions resumed, so these
// should grow with connections made, not with requests.
func (s *Security) RegisterMetrics(reg prometheus.Registerer) {
	if s == nil {
		return
	}
	counter := func(name, help string, get func() uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(get()) })
	}
	reg.MustRegister(
		counter("govfs_tls_handshakes_served_total", "TLS handshakes completed as server.", func() uint64 { v, _, _ := s.store.Handshakes(); return v }),
		counter("govfs_tls_handshakes_dialed_total", "TLS handshakes completed as client.", func() uint64 { _, v, _ := s.store.Handshakes(); return v }),
		counter("govfs_tls_handshakes_resumed_total", "TLS handshakes (either side) that resumed a session.", func() uint64 { _, _, v := s.store.Handshakes(); return v }),
	)
}

// String describes the security for logs.
func (s *Security) String() string {
	if s == nil {
		return "plaintext (--insecure)"
	}
	id := s.store.Identity()
	return fmt.Sprintf("mutual TLS as %s (certificates in %s, valid until %s)", id, s.store.Dir(), s.store.Expires().Format("2006-01-02"))
}
