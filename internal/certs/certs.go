// Package certs is the cluster's certificate authority and the identities
// its certificates carry (DESIGN §9, docs/security.md).
//
// Every GovFS connection is mutual TLS from one cluster CA. A certificate
// names a role (node, chunk, client, admin) and a name, and a client's
// certificate pins the uids and gids it may act as; all of it travels in
// one URI SAN, govfs://ROLE/NAME?uid=..&gid=..&squash=1, so a peer's
// identity is read from its certificate and never from what it claims in
// a message.
//
// Peers are checked by CA and role, not by host name: nodes move between
// addresses and are dialled by the address the cluster map gives, so a
// host name in a certificate would pin what the cluster is built to
// change. The private CA issues certificates only to the cluster's own
// processes, which is what the host name check would otherwise stand for.
package certs

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/govfs/govfs/internal/wire"
)

// Role is what a certificate's holder is allowed to be.
type Role string

// Roles.
const (
	// RoleNode is a metadata node: raft, the president's and ministries'
	// internal commands, moves, joins.
	RoleNode Role = "node"
	// RoleChunk is a chunk server: registration, heartbeats, replication
	// between chunk servers.
	RoleChunk Role = "chunk"
	// RoleClient is a user of the file system (library, CLI, mount).
	RoleClient Role = "client"
	// RoleAdmin is a client that may also run administrative commands
	// (subtree moves).
	RoleAdmin Role = "admin"
)

// ParseRole checks a role name.
func ParseRole(s string) (Role, error) {
	switch r := Role(s); r {
	case RoleNode, RoleChunk, RoleClient, RoleAdmin:
		return r, nil
	}
	return "", fmt.Errorf("unknown certificate role %q (want node, chunk, client or admin)", s)
}

// Server says whether the role serves connections (and so may present
// its certificate as a server).
func (r Role) Server() bool { return r == RoleNode || r == RoleChunk }

// Identity is what a certificate says about its holder.
type Identity struct {
	Role Role
	// Name identifies the holder within its role: a node's or chunk
	// server's name (its host name by default), a client's user name.
	Name string
	// UIDs and GIDs a client may act as; AnyUID/AnyGID for a mount
	// host that acts for all its users (NFS AUTH_SYS on a trusted host).
	UIDs   []uint32
	GIDs   []uint32
	AnyUID bool
	AnyGID bool
	// Squash maps uid 0 to the nobody user (root squash).
	Squash bool
}

func (id Identity) String() string {
	return string(id.Role) + "/" + id.Name
}

// AllowsUID says whether the holder may act as uid.
func (id Identity) AllowsUID(uid uint32) bool {
	return id.AnyUID || slices.Contains(id.UIDs, uid)
}

// AllowsGID says whether the holder may act with gid.
func (id Identity) AllowsGID(gid uint32) bool {
	return id.AnyGID || slices.Contains(id.GIDs, gid)
}

const uriScheme = "govfs"

// NobodyID is the uid and gid root is squashed to.
const NobodyID = 65534

// Squash maps root to nobody in place, as knfsd's root_squash does: uid
// 0, and group 0 wherever it appears.
func Squash(cred *wire.Cred) {
	if cred.GetUid() == 0 {
		cred.Uid, cred.Gid, cred.Groups = NobodyID, NobodyID, nil
		return
	}
	if cred.GetGid() == 0 {
		cred.Gid = NobodyID
	}
	cred.Groups = slices.DeleteFunc(cred.Groups, func(g uint32) bool { return g == 0 })
}

// Vouch makes cred what this certificate may act as, in place: root
// squashed when it squashes, supplementary groups it does not list
// dropped (fewer rights, never more). A uid or primary gid it does not
// list is an error.
func (id Identity) Vouch(cred *wire.Cred) error {
	if id.Squash {
		wasRoot := cred.GetUid() == 0
		Squash(cred)
		if wasRoot {
			return nil // nobody, whatever the certificate lists
		}
	}
	if !id.AllowsUID(cred.GetUid()) {
		return fmt.Errorf("uid %d: certificate %s may act as uid %s only", cred.GetUid(), id, FormatIDs(id.AnyUID, id.UIDs))
	}
	if !id.AllowsGID(cred.GetGid()) {
		return fmt.Errorf("gid %d: certificate %s may act with gid %s only", cred.GetGid(), id, FormatIDs(id.AnyGID, id.GIDs))
	}
	cred.Groups = slices.DeleteFunc(cred.Groups, func(g uint32) bool { return !id.AllowsGID(g) })
	return nil
}

// FormatIDs shows a certificate's uid or gid list: "any", "none" or
// "1000,1001".
func FormatIDs(any bool, xs []uint32) string {
	if any {
		return "any"
	}
	if len(xs) == 0 {
		return "none"
	}
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.FormatUint(uint64(x), 10)
	}
	return strings.Join(s, ",")
}

func (id Identity) validate() error {
	if _, err := ParseRole(string(id.Role)); err != nil {
		return err
	}
	if id.Name == "" || len(id.Name) > 128 || strings.ContainsAny(id.Name, "/?#%\x00 ") {
		return fmt.Errorf("certificate name %q: want 1 to 128 characters without / ? # %% spaces or NUL", id.Name)
	}
	if (id.Role == RoleNode || id.Role == RoleChunk) && (len(id.UIDs)+len(id.GIDs) > 0 || id.AnyUID || id.AnyGID || id.Squash) {
		return fmt.Errorf("a %s certificate carries no uids, gids or squash (those are for client certificates)", id.Role)
	}
	return nil
}

func (id Identity) uri() *url.URL {
	q := url.Values{}
	list := func(any bool, xs []uint32) string {
		if any {
			return "*"
		}
		return FormatIDs(false, xs) // not empty: asked for only when set
	}
	if id.AnyUID || len(id.UIDs) > 0 {
		q.Set("uid", list(id.AnyUID, id.UIDs))
	}
	if id.AnyGID || len(id.GIDs) > 0 {
		q.Set("gid", list(id.AnyGID, id.GIDs))
	}
	if id.Squash {
		q.Set("squash", "1")
	}
	return &url.URL{Scheme: uriScheme, Host: string(id.Role), Path: "/" + id.Name, RawQuery: q.Encode()}
}

// ParseIDList parses "1000,1001" or "*" (any).
func ParseIDList(s string) (ids []uint32, any bool, err error) {
	if s == "*" {
		return nil, true, nil
	}
	if s == "" {
		return nil, false, nil
	}
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.ParseUint(strings.TrimSpace(f), 10, 32)
		if err != nil {
			return nil, false, fmt.Errorf("id list %q: %q is not a number from 0 to 4294967295 (or give * for any)", s, f)
		}
		ids = append(ids, uint32(v))
	}
	return ids, false, nil
}

// IdentityOf reads the identity a certificate carries.
func IdentityOf(c *x509.Certificate) (Identity, error) {
	for _, u := range c.URIs {
		if u.Scheme != uriScheme {
			continue
		}
		role, err := ParseRole(u.Host)
		if err != nil {
			return Identity{}, err
		}
		id := Identity{Role: role, Name: strings.TrimPrefix(u.Path, "/")}
		q := u.Query()
		if id.UIDs, id.AnyUID, err = ParseIDList(q.Get("uid")); err != nil {
			return Identity{}, err
		}
		if id.GIDs, id.AnyGID, err = ParseIDList(q.Get("gid")); err != nil {
			return Identity{}, err
		}
		id.Squash = q.Get("squash") == "1"
		if err := id.validate(); err != nil {
			return Identity{}, err
		}
		return id, nil
	}
	return Identity{}, fmt.Errorf("certificate %q carries no GovFS identity (a %s:// URI): it was not issued by govfs admin cert issue", c.Subject.CommonName, uriScheme)
}

// File names. A CA directory holds CAFile and CAKeyFile; a certificate
// directory (what --tls names) holds CAFile, CertFile and KeyFile.
const (
	CAFile    = "ca.crt"
	CAKeyFile = "ca.key"
	CertFile  = "tls.crt"
	KeyFile   = "tls.key"
)

// DefaultCAValidity and DefaultValidity are how long a new CA and a new
// certificate are valid.
const (
	DefaultCAValidity = 10 * 365 * 24 * time.Hour
	DefaultValidity   = 365 * 24 * time.Hour
)

func newKey() (*ecdsa.PrivateKey, error) {
	// P-256: the fastest handshakes Go has with hardware support, and
	// what every TLS stack accepts.
	return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
}

func serial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func keyPEM(k crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, err
	}
	return pemBlock("PRIVATE KEY", der), nil
}

// InitCA creates a cluster CA in dir (made if missing). It refuses to
// replace an existing CA key: every certificate of the cluster hangs on it.
func InitCA(dir, cluster string, validity time.Duration, now time.Time) error {
	if validity <= 0 {
		validity = DefaultCAValidity
	}
	if _, err := os.Stat(filepath.Join(dir, CAKeyFile)); err == nil {
		return fmt.Errorf("%s already holds a CA key: every certificate of its cluster depends on it, so it is not replaced (use another directory for a new CA)", dir)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("make CA directory: %w", err)
	}
	key, err := newKey()
	if err != nil {
		return fmt.Errorf("make CA key: %w", err)
	}
	sn, err := serial()
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          sn,
		Subject:               pkix.Name{Organization: []string{"GovFS"}, CommonName: "GovFS cluster CA " + cluster},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(validity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return fmt.Errorf("make CA certificate: %w", err)
	}
	kp, err := keyPEM(key)
	if err != nil {
		return err
	}
	if err := writeAtomic(filepath.Join(dir, CAKeyFile), kp, 0o600); err != nil {
		return err
	}
	return writeAtomic(filepath.Join(dir, CAFile), pemBlock("CERTIFICATE", der), 0o644)
}

// Bundle is an issued certificate with its key and the CA to trust.
type Bundle struct {
	CA, Cert, Key []byte // PEM
}

// Issue signs a certificate for id with the CA in caDir, valid from an
// hour before now for validity.
func Issue(caDir string, id Identity, validity time.Duration, now time.Time) (Bundle, error) {
	if err := id.validate(); err != nil {
		return Bundle{}, err
	}
	if validity <= 0 {
		validity = DefaultValidity
	}
	caPEM, err := os.ReadFile(filepath.Join(caDir, CAFile))
	if err != nil {
		return Bundle{}, fmt.Errorf("read the CA certificate (made by govfs admin ca init): %w", err)
	}
	caCert, err := parseCert(caPEM)
	if err != nil {
		return Bundle{}, fmt.Errorf("%s: %w", filepath.Join(caDir, CAFile), err)
	}
	caKeyPEM, err := os.ReadFile(filepath.Join(caDir, CAKeyFile))
	if err != nil {
		return Bundle{}, fmt.Errorf("read the CA key: %w", err)
	}
	caKey, err := parseKey(caKeyPEM)
	if err != nil {
		return Bundle{}, fmt.Errorf("%s: %w", filepath.Join(caDir, CAKeyFile), err)
	}
	key, err := newKey()
	if err != nil {
		return Bundle{}, err
	}
	sn, err := serial()
	if err != nil {
		return Bundle{}, err
	}
	usage := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	if id.Role.Server() {
		usage = append(usage, x509.ExtKeyUsageServerAuth)
	}
	notAfter := now.Add(validity)
	if notAfter.After(caCert.NotAfter) {
		notAfter = caCert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: sn,
		Subject:      pkix.Name{Organization: []string{"GovFS"}, CommonName: id.String()},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  usage,
		URIs:         []*url.URL{id.uri()},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, key.Public(), caKey)
	if err != nil {
		return Bundle{}, fmt.Errorf("sign certificate for %s: %w", id, err)
	}
	kp, err := keyPEM(key)
	if err != nil {
		return Bundle{}, err
	}
	return Bundle{CA: caPEM, Cert: pemBlock("CERTIFICATE", der), Key: kp}, nil
}

// Write stores the bundle in dir (made if missing) as CAFile, CertFile and
// KeyFile, each replaced atomically, the key last so a process reloading
// in between sees a certificate that does not match its key and keeps
// the old pair (Store.Reload) until the next look.
func (b Bundle) Write(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("make certificate directory: %w", err)
	}
	if err := writeAtomic(filepath.Join(dir, CAFile), b.CA, 0o644); err != nil {
		return err
	}
	if err := writeAtomic(filepath.Join(dir, CertFile), b.Cert, 0o644); err != nil {
		return err
	}
	return writeAtomic(filepath.Join(dir, KeyFile), b.Key, 0o600)
}

func writeAtomic(path string, data []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

func parseCert(p []byte) (*x509.Certificate, error) {
	b, _ := pem.Decode(p)
	if b == nil || b.Type != "CERTIFICATE" {
		return nil, errors.New("not a PEM certificate")
	}
	return x509.ParseCertificate(b.Bytes)
}

func parseKey(p []byte) (crypto.Signer, error) {
	b, _ := pem.Decode(p)
	if b == nil || b.Type != "PRIVATE KEY" {
		return nil, errors.New("not a PEM private key")
	}
	k, err := x509.ParsePKCS8PrivateKey(b.Bytes)
	if err != nil {
		return nil, err
	}
	s, ok := k.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("key of type %T cannot sign", k)
	}
	return s, nil
}
