package metanode

import (
	"context"
	"encoding/json"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/govfs/govfs/internal/engine"
	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/rpc"
	"github.com/govfs/govfs/internal/wire"
)

var identityKey = []byte("nident")

// identity is what a data directory remembers about its node.
type identity struct {
	NodeID    ids.NodeID            `json:"node_id"`
	Peers     map[ids.NodeID]string `json:"peers"`
	ClusterID string                `json:"cluster_id,omitempty"`
	// Joined: the node was admitted with --join (Peers are then the
	// cluster's initial members, learned when it joined).
	Joined bool `json:"joined,omitempty"`
	// Groups are the ministries this node was given a replica of after
	// formation (the president's map assigned them).
	Groups []hostedGroup `json:"groups,omitempty"`
	// Dropped are ministries this node left (membership change): their
	// replica and key range were deleted, and they are not started again
	// unless the map gives them back (then empty, never bootstrapped).
	Dropped []uint64 `json:"dropped,omitempty"`
	// Addrs are the metadata nodes' addresses as the map last listed
	// them: after a restart of every node, those of a ministry made only
	// of joined nodes find each other before any president member is up.
	Addrs map[ids.NodeID]string `json:"addrs,omitempty"`
}

// hostedGroup is a ministry replica the node started, with the voters
// it was created with (to bootstrap it again if the node crashed before
// its first write).
type hostedGroup struct {
	Group   uint64   `json:"group"`
	Members []uint64 `json:"members"`
	// Joined: the replica was started empty (the node was added to a
	// running ministry); it is never bootstrapped.
	Joined bool `json:"joined,omitempty"`
}

func loadIdentity(e *engine.Engine) (*identity, error) {
	b, err := e.Get(identityKey)
	if err != nil || b == nil {
		return nil, err
	}
	id := &identity{}
	if err := json.Unmarshal(b, id); err != nil {
		return nil, fmt.Errorf("decode node identity: %w", err)
	}
	return id, nil
}

func saveIdentity(e *engine.Engine, id *identity) error {
	b, err := json.Marshal(id)
	if err != nil {
		return err
	}
	wb := e.NewWriteBatch()
	defer wb.Close()
	if err := wb.Set(identityKey, b); err != nil {
		return err
	}
	return wb.Commit(true)
}

// checkIdentity refuses a data directory that belongs to another node or
// was formed with other peers.
func checkIdentity(cfg *Config, stored *identity) error {
	if stored == nil {
		return nil
	}
	if len(cfg.Join) > 0 || stored.Joined {
		if !stored.Joined {
			return fmt.Errorf("data directory %s belongs to node %d, formed with --peers: start it with --id %d --peers %s, not --join",
				cfg.DataDir, uint64(stored.NodeID), uint64(stored.NodeID), FormatPeers(stored.Peers))
		}
		if cfg.ID != 0 && cfg.ID != stored.NodeID {
			return fmt.Errorf("data directory %s belongs to node %d, not node %d: start without --id (a joined node keeps the id it was given)",
				cfg.DataDir, uint64(stored.NodeID), uint64(cfg.ID))
		}
		return nil
	}
	if stored.NodeID != cfg.ID {
		return fmt.Errorf("data directory %s belongs to node %d (cluster %q), not node %d: start with --id %d, or give this node an empty --data directory",
			cfg.DataDir, uint64(stored.NodeID), stored.ClusterID, uint64(cfg.ID), uint64(stored.NodeID))
	}
	if FormatPeers(stored.Peers) != FormatPeers(cfg.Peers) {
		return fmt.Errorf("--peers %s conflicts with the members this data directory was formed with (%s): start with --peers %s (membership changes are not supported yet)",
			FormatPeers(cfg.Peers), FormatPeers(stored.Peers), FormatPeers(stored.Peers))
	}
	return nil
}

// certNameOf is the certificate name a node speaks with ("" on a
// plaintext connection).
func certNameOf(c rpc.Caller) string {
	if !c.Secure {
		return ""
	}
	return c.Name
}

// bindNodeCert checks that a secure heartbeat for member m comes from the
// certificate m is bound to; a founder not bound yet is bound to this
// one by the president's leader (the first heartbeat after formation),
// so that from then on no other node certificate can speak for it, in
// raft traffic or heartbeats.
func (n *Node) bindNodeCert(ctx context.Context, m *wire.Member) error {
	c := rpc.CallerOf(ctx)
	if !c.Secure {
		return nil
	}
	if want := m.GetCertName(); want != "" {
		if want != c.Name {
			return status.Errorf(codes.PermissionDenied, "node %d speaks with certificate node/%s; the caller's certificate is %s", m.GetId(), want, c.Identity)
		}
		return nil
	}
	if _, me := n.host.Leader(ids.PresidentGroup); !me {
		return nil // the leader binds it at one of the next heartbeats
	}
	res, _, err := n.host.Propose(ctx, ids.PresidentGroup, &wire.Command{Version: 1, NowNs: n.cfg.Clock.Now().UnixNano(),
		Op: &wire.Command_BindNodeCert{BindNodeCert: &wire.BindNodeCertOp{Node: m.GetId(), CertName: c.Name}}})
	if err != nil {
		return nil // retried at the next heartbeat
	}
	if res.GetErrno() != 0 {
		return status.Errorf(codes.PermissionDenied, "node %d: %s", m.GetId(), res.GetMessage())
	}
	n.log.Info("node certificate bound", "node", m.GetId(), "cert", c.Name)
	return nil
}
