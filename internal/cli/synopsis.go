package cli

import (
	"flag"
	"fmt"
	"io"
)

// withSynopsis makes f's -h (and govfs help CMD) print the command's
// synopsis, description and examples before its flags.
func withSynopsis(f *flag.FlagSet, w io.Writer, text string) {
	f.Usage = func() {
		fmt.Fprintln(w, text)
		fmt.Fprintln(w, "\nFlags:")
		f.PrintDefaults()
	}
}

const metaUsage = `Usage: govfs meta (--id N --peers ID=ADDR,... | --join ADDRS) --listen ADDR --data DIR (--tls DIR | --insecure) [flags]

Runs a metadata node: a member of the president group (the cluster map)
and of the ministries (metadata groups) the president places on it.

The nodes listed in --peers form a new cluster the first time they all
run (each with its own --id); a node started with --join instead adds
itself to a running cluster, gets its id from the president and starts
idle. Its data directory remembers the cluster and its id: restart it
with the same flags. Every connection is mutual TLS from the cluster CA
(--tls, from 'govfs admin cert issue --node NAME'); --insecure runs
plaintext on loopback addresses only.

Examples:
  govfs meta --id 1 --listen 10.0.0.1:7000 --data /var/lib/govfs/meta --tls /etc/govfs/tls/meta \
    --peers 1=10.0.0.1:7000,2=10.0.0.2:7000,3=10.0.0.3:7000 --http 10.0.0.1:7080
  govfs meta --join 10.0.0.1:7000,10.0.0.2:7000 --listen 10.0.0.4:7000 --data /var/lib/govfs/meta --tls /etc/govfs/tls/meta

--http serves the dashboard (/), /metrics, /healthz and /readyz
(docs/operations.md). A whole deployment: docs/deploy.md.`

const chunkUsage = `Usage: govfs chunk --listen ADDR --data DIR --meta ADDRS --rack RACK (--tls DIR | --insecure) [flags]

Runs a chunk server: it stores chunks in --data, registers with the
president (the same store always gets the same server id), heartbeats
every 2 s, and serves reads and writes for the replica groups it is a
member of. The president groups chunk servers three by three, never two
replicas on one host (--host) and preferably across racks (--rack) and
pods (--pod). Clients need a chunk access token from their ministry for
every request (TLS clusters; docs/security.md).

Example:
  govfs chunk --listen 10.0.0.1:7100 --data /var/lib/govfs/chunk --meta 10.0.0.1:7000,10.0.0.2:7000,10.0.0.3:7000 \
    --rack rack1 --tls /etc/govfs/tls/chunk --http 10.0.0.1:7180`

const devUsage = `Usage: govfs dev [--dir DIR] [--mount DIR] [--meta-nodes N] [--node-cpu F] [--insecure]

Runs a whole local cluster until Ctrl-C: metadata nodes and three chunk
servers on 127.0.0.1, each its own process, with a cluster CA and
certificates made under --dir (mutual TLS; --insecure for plaintext).
It prints the addresses, the dashboard's URL and the two export lines
the CLI needs. Started again on the same --dir, the cluster comes back
with its data. --mount also mounts it with FUSE.

Examples:
  govfs dev                                # the same as make dev
  govfs dev --dir ./govfs-dev --mount ./govfs-dev/mnt
  govfs dev --meta-nodes 5 --node-cpu 0.4  # the scale-out testbed: each node in its own CPU-capped cgroup`
