package cli

import (
	"context"
	"flag"
	"io"
	"os"

	"github.com/govfs/govfs/internal/testcluster"
)

// benchSec are a bench's security flags: the client certificate for a
// cluster given with --meta, or plaintext; a local cluster the bench
// starts runs mutual TLS unless --insecure.
type benchSec struct {
	tls      string
	insecure bool
}

func (b *benchSec) register(f *flag.FlagSet) {
	f.StringVar(&b.tls, "tls", "", "with --meta: client certificate directory (default $"+tlsEnv+")")
	f.BoolVar(&b.insecure, "insecure", false, "plaintext: the --meta cluster runs --insecure, or the local cluster is started so")
}

// benchTarget is the cluster a bench runs against.
type benchTarget struct {
	addrs  []string
	tlsDir string // "" for plaintext
}

// cluster returns meta (with the certificate from the flags or the
// environment) or, when meta is empty, a local cluster started from cfg;
// stop ends that cluster (a no-op for meta).
func (b benchSec) cluster(ctx context.Context, meta []string, stderr io.Writer, cfg testcluster.ProcConfig) (benchTarget, func(), error) {
	if len(meta) > 0 {
		dir, err := clientTLSDir(b.tls, b.insecure, os.Getenv)
		if err != nil {
			return benchTarget{}, nil, err
		}
		return benchTarget{addrs: meta, tlsDir: dir}, func() {}, nil
	}
	cfg.Insecure = b.insecure
	stop, t, err := startLocalCluster(ctx, stderr, cfg)
	return t, stop, err
}
