package certs

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
)

// Store holds a process's certificate, key and trusted CAs, loaded from a
// certificate directory, and hands out TLS configurations that always use
// the newest of them: Reload (SIGHUP, or Watch noticing a changed file)
// swaps them in without dropping connections, so certificates and the CA
// are rotated without downtime. Connections made before keep the
// certificates they were made with.
type Store struct {
	dir string
	now func() time.Time

	mu      sync.RWMutex
	cert    *tls.Certificate
	id      Identity
	pool    *x509.CertPool
	expires time.Time
	stamp   string // file sizes and times at the last load

	// ticketKey encrypts the session tickets this process issues as a
	// server; a new one at every reload, so no session made under the
	// old certificates or CAs resumes after a rotation.
	ticketKey [32]byte

	// Completed handshakes as server and as client, and how many of
	// them resumed a session (Handshakes).
	served, dialed, resumed atomic.Uint64
}

// Handshakes counts the TLS handshakes completed with this store's
// configurations, as server and as client, and those that resumed an
// earlier session (no certificate signatures).
func (s *Store) Handshakes() (served, dialed, resumed uint64) {
	return s.served.Load(), s.dialed.Load(), s.resumed.Load()
}

func (s *Store) count(side *atomic.Uint64, cs tls.ConnectionState) {
	side.Add(1)
	if cs.DidResume {
		s.resumed.Add(1)
	}
}

// Load reads a certificate directory (CAFile, CertFile, KeyFile). now is
// the clock certificates are checked against (time.Now when nil).
func Load(dir string, now func() time.Time) (*Store, error) {
	if now == nil {
		now = time.Now
	}
	s := &Store{dir: dir, now: now}
	if err := s.Reload(); err != nil {
		return nil, err
	}
	return s, nil
}

// Dir is the certificate directory.
func (s *Store) Dir() string { return s.dir }

// Identity is the identity of this process's certificate.
func (s *Store) Identity() Identity {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.id
}

// Expires is when this process's certificate stops being valid.
func (s *Store) Expires() time.Time {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.expires
}

func (s *Store) fileStamp() string {
	st := ""
	for _, f := range []string{CAFile, CertFile, KeyFile} {
		if fi, err := os.Stat(filepath.Join(s.dir, f)); err == nil {
			st += fmt.Sprintf("%d/%d;", fi.Size(), fi.ModTime().UnixNano())
		}
	}
	return st
}

// Reload reads the directory again. On any error the old certificates
// stay in use.
func (s *Store) Reload() error {
	stamp := s.fileStamp()
	caPEM, err := os.ReadFile(filepath.Join(s.dir, CAFile))
	if err != nil {
		return fmt.Errorf("read the trusted CA (a certificate directory holds %s, %s and %s, written by govfs admin cert issue): %w", CAFile, CertFile, KeyFile, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return fmt.Errorf("%s holds no PEM certificate", filepath.Join(s.dir, CAFile))
	}
	pair, err := tls.LoadX509KeyPair(filepath.Join(s.dir, CertFile), filepath.Join(s.dir, KeyFile))
	if err != nil {
		return fmt.Errorf("load certificate %s and key %s (made by govfs admin cert issue): %w",
			filepath.Join(s.dir, CertFile), filepath.Join(s.dir, KeyFile), err)
	}
	leaf := pair.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return fmt.Errorf("parse %s: %w", filepath.Join(s.dir, CertFile), err)
		}
		pair.Leaf = leaf
	}
	id, err := IdentityOf(leaf)
	if err != nil {
		return fmt.Errorf("%s: %w", filepath.Join(s.dir, CertFile), err)
	}
	// Our own certificate must chain to the CA we trust, or every peer
	// would refuse us with a message far from the cause.
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: s.now(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return fmt.Errorf("%s does not verify against %s (issued by another cluster's CA, or expired?): %w",
			filepath.Join(s.dir, CertFile), filepath.Join(s.dir, CAFile), err)
	}
	var key [32]byte
	if _, err := rand.Read(key[:]); err != nil {
		return fmt.Errorf("session ticket key: %w", err)
	}
	s.mu.Lock()
	s.cert, s.id, s.pool, s.expires, s.stamp, s.ticketKey = &pair, id, pool, leaf.NotAfter, stamp, key
	s.mu.Unlock()
	return nil
}

// Watch reloads whenever the directory's files change, looking every
// interval, until ctx ends; errors go to onErr (the old certificates stay).
func (s *Store) Watch(ctx context.Context, interval time.Duration, onErr func(error)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.mu.RLock()
		old := s.stamp
		s.mu.RUnlock()
		if s.fileStamp() == old {
			continue
		}
		if err := s.Reload(); err != nil && onErr != nil {
			onErr(err)
		}
	}
}

func (s *Store) current() (*tls.Certificate, *x509.CertPool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.cert, s.pool
}

// currentServer is the certificate, trusted CAs and ticket key in one
// snapshot: a reload between separate reads could let a client checked
// against the old CAs get a ticket under the new key.
func (s *Store) currentServer() (*tls.Certificate, *x509.CertPool, [32]byte) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.cert, s.pool, s.ticketKey
}

// ServerConfig is for a listener: it requires a client certificate from
// the trusted CA.
func (s *Store) ServerConfig() *tls.Config {
	base := &tls.Config{MinVersion: tls.VersionTLS13}
	base.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		cert, pool, key := s.currentServer()
		cfg := &tls.Config{
			MinVersion:   tls.VersionTLS13,
			Certificates: []tls.Certificate{*cert},
			ClientAuth:   tls.RequireAndVerifyClientCert,
			ClientCAs:    pool,
			Time:         s.now,
			// The client's role is checked per request (rpc.PeerIdentity);
			// here only that its certificate parses as one.
			VerifyConnection: func(cs tls.ConnectionState) error {
				if len(cs.PeerCertificates) == 0 {
					return errors.New("govfs: no client certificate")
				}
				if _, err := IdentityOf(cs.PeerCertificates[0]); err != nil {
					return err
				}
				s.count(&s.served, cs)
				return nil
			},
		}
		cfg.SetSessionTicketKeys([][32]byte{key})
		return cfg, nil
	}
	return base
}

// ClientConfig is for dialling a GovFS server: the server must present a
// certificate from the trusted CA with a server role (node or chunk).
// Host names are not checked (see the package comment).
func (s *Store) ClientConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		// Verification is VerifyConnection's, against the current CA.
		InsecureSkipVerify: true,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			cert, _ := s.current()
			return cert, nil
		},
		VerifyConnection: func(cs tls.ConnectionState) error {
			if _, err := s.VerifyServer(cs.PeerCertificates); err != nil {
				return err
			}
			s.count(&s.dialed, cs)
			return nil
		},
		// Resumed sessions skip the key exchange's signatures: reconnects
		// to a node cost less.
		ClientSessionCache: tls.NewLRUClientSessionCache(512),
	}
}

// VerifyServer checks a server's certificate chain against the trusted
// CA and its role, and returns its identity.
func (s *Store) VerifyServer(chain []*x509.Certificate) (Identity, error) {
	if len(chain) == 0 {
		return Identity{}, errors.New("govfs: the server presented no certificate")
	}
	_, pool := s.current()
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	if _, err := chain[0].Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, CurrentTime: s.now(),
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		return Identity{}, fmt.Errorf("govfs: server certificate %q is not trusted (another cluster's CA, or expired?): %w", chain[0].Subject.CommonName, err)
	}
	id, err := IdentityOf(chain[0])
	if err != nil {
		return Identity{}, err
	}
	if !id.Role.Server() {
		return Identity{}, fmt.Errorf("govfs: the server presented a %s certificate (%s); only node and chunk certificates serve", id.Role, id)
	}
	return id, nil
}
