package testcluster

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/govfs/govfs/internal/certs"
	"github.com/govfs/govfs/internal/rpc"
)

// A secure process cluster keeps its certificates under Dir/tls: the CA
// in ca/, one directory per process (node1, chunk1, ...), and admin/ for
// the people and tests that use the cluster (an admin certificate that
// may act as any uid).

// TLSRoot is the directory of the cluster's certificates ("" when the
// cluster runs --insecure).
func (c *ProcCluster) TLSRoot() string {
	if c.cfg.Insecure {
		return ""
	}
	return filepath.Join(c.cfg.Dir, "tls")
}

// CADir is the cluster CA's directory ("" when insecure), for issuing
// more certificates (certs.Issue).
func (c *ProcCluster) CADir() string {
	if c.cfg.Insecure {
		return ""
	}
	return filepath.Join(c.TLSRoot(), "ca")
}

// ClientTLSDir is the admin certificate's directory, for client.Config's
// TLSDir and the CLI's --tls ("" when insecure).
func (c *ProcCluster) ClientTLSDir() string {
	if c.cfg.Insecure {
		return ""
	}
	return filepath.Join(c.TLSRoot(), "admin")
}

// procTLSDir is process i's certificate directory.
func (c *ProcCluster) procTLSDir(i int) string {
	if i >= c.cfg.Nodes {
		return filepath.Join(c.TLSRoot(), fmt.Sprintf("chunk%d", i-c.cfg.Nodes+1))
	}
	return filepath.Join(c.TLSRoot(), fmt.Sprintf("node%d", i+1))
}

// Security is the admin identity's TLS, for a test's own RPCs (nil when
// insecure).
func (c *ProcCluster) Security() *rpc.Security { return c.sec }

// NodeSecurity is a metadata node's TLS (node 1's certificate), for a
// test that sends what only nodes may send (nil when insecure).
func (c *ProcCluster) NodeSecurity() (*rpc.Security, error) {
	if c.cfg.Insecure {
		return nil, nil
	}
	st, err := certs.Load(c.procTLSDir(0), nil)
	if err != nil {
		return nil, err
	}
	return rpc.NewSecurity(st), nil
}

// setupTLS makes the CA and every certificate that is missing, and loads
// the admin identity.
func (c *ProcCluster) setupTLS() error {
	if c.cfg.Insecure {
		return nil
	}
	now := time.Now()
	if _, err := os.Stat(filepath.Join(c.CADir(), certs.CAKeyFile)); os.IsNotExist(err) {
		if err := certs.InitCA(c.CADir(), filepath.Base(c.cfg.Dir), 0, now); err != nil {
			return err
		}
	}
	issue := func(dir string, id certs.Identity) error {
		if _, err := os.Stat(filepath.Join(dir, certs.KeyFile)); err == nil {
			return nil
		}
		b, err := certs.Issue(c.CADir(), id, 0, now)
		if err != nil {
			return err
		}
		return b.Write(dir)
	}
	for i := 0; i < c.cfg.Nodes+c.cfg.Chunks; i++ {
		id := certs.Identity{Role: certs.RoleNode, Name: filepath.Base(c.procTLSDir(i))}
		if i >= c.cfg.Nodes {
			id.Role = certs.RoleChunk
		}
		if err := issue(c.procTLSDir(i), id); err != nil {
			return err
		}
	}
	if err := issue(c.ClientTLSDir(), certs.Identity{Role: certs.RoleAdmin, Name: "admin", AnyUID: true, AnyGID: true}); err != nil {
		return err
	}
	st, err := certs.Load(c.ClientTLSDir(), nil)
	if err != nil {
		return err
	}
	c.sec = rpc.NewSecurity(st)
	return nil
}

// tlsArgs are process i's security flags.
func (c *ProcCluster) tlsArgs(i int) []string {
	if c.cfg.Insecure {
		return []string{"--insecure"}
	}
	return []string{"--tls", c.procTLSDir(i)}
}
