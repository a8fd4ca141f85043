package metanode

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/govfs/govfs/internal/clustermap"
	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/namespace"
	"github.com/govfs/govfs/internal/wire"
)

const (
	// inodeGrant is how many inode numbers a ministry asks for at a time;
	// it asks again when fewer than inodeLowWater remain.
	inodeGrant    = 1 << 20
	inodeLowWater = 1 << 18
)

// maintain runs the leader duties every 50 ms until Stop.
func (n *Node) maintain() {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-n.host.Fatal():
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := n.maintainOnce(ctx); err != nil {
			n.log.Debug("leader duties", "err", err)
		}
		cancel()
	}
}

func (n *Node) maintainOnce(ctx context.Context) error {
	// Learn the cluster id from group 0's state and remember it.
	if n.ClusterID() == "" {
		cid, err := clustermap.ClusterID(n.stateReader(ids.PresidentGroup))
		if err != nil {
			return err
		}
		if cid != "" {
			n.ident.ClusterID = cid
			if err := saveIdentity(n.eng, n.ident); err != nil {
				return err
			}
			n.clusterID.Store(cid)
			n.log.Info("cluster id", "cluster", cid)
		} else if _, me := n.host.Leader(ids.PresidentGroup); me {
			var members []*wire.Member
			for _, id := range sortedIDs(n.cfg.Peers) {
				members = append(members, &wire.Member{Id: uint64(id), Addr: n.cfg.Peers[id]})
			}
			_, _, err := n.host.Propose(ctx, ids.PresidentGroup, &wire.Command{Version: 1, NowNs: n.cfg.Clock.Now().UnixNano(),
				Op: &wire.Command_InitCluster{InitCluster: &wire.InitClusterOp{ClusterId: newClusterID(), Members: members}}})
			return err
		}
	}
	_, leadsPresident := n.host.Leader(ids.PresidentGroup)
	n.chunks.leading(n.cfg.Clock.Now(), leadsPresident)
	n.gc.tick(n.cfg.Clock.Now(), leadsPresident)
	n.logLiveness(leadsPresident)
	if leadsPresident {
		if err := n.planReplicaGroups(ctx); err != nil {
			n.log.Debug("replica group planning", "err", err)
		}
	}
	if err := n.fetchMap(ctx); err != nil {
		n.log.Debug("cluster map", "err", err)
	}
	if err := n.refreshTokenKeys(ctx, leadsPresident); err != nil {
		n.log.Debug("chunk token keys", "err", err)
	}
	v := n.mapView()
	if err := n.syncMap(ctx, v); err != nil {
		n.log.Warn("cluster map", "err", err)
	}
	n.moves.tick(n, leadsPresident)
	var errs []error
	if leadsPresident && v != nil {
		if err := n.replaceDeadMembers(ctx, v); err != nil {
			errs = append(errs, fmt.Errorf("replace dead ministry members: %w", err))
		}
	}
	for _, g := range n.hostedMinistries() {
		if _, me := n.host.Leader(g); me {
			if err := n.ministerDuties(ctx, g); err != nil {
				errs = append(errs, fmt.Errorf("%v: %w", g, err))
			}
			if m := v.ministryOrNil(g); m != nil {
				if err := n.reconcileMembers(g, m); err != nil {
					errs = append(errs, fmt.Errorf("%v: members: %w", g, err))
				}
			}
		}
	}
	return errors.Join(errs...)
}

// ministerDuties runs on the minister of g: the root ministry creates
// "/", and every ministry asks the president for inode numbers before it
// runs out.
func (n *Node) ministerDuties(ctx context.Context, g ids.GroupID) error {
	r := n.stateReader(g)
	if g == ids.RootMinistry {
		if _, err := namespace.GetAttr(r, ids.RootIno); err != nil {
			_, _, err := n.host.Propose(ctx, g, &wire.Command{Version: 1, NowNs: n.cfg.Clock.Now().UnixNano(),
				Op: &wire.Command_InitMinistry{InitMinistry: &wire.InitMinistryOp{RootIno: uint64(ids.RootIno), Mode: 0o755}}})
			if err != nil {
				return err
			}
		}
	}
	free, err := namespace.FreeInodes(r)
	if err != nil {
		return err
	}
	if free >= inodeLowWater {
		return nil
	}
	res, err := n.proposeAnywhere(ctx, ids.PresidentGroup, &wire.Command{Version: 1, NowNs: n.cfg.Clock.Now().UnixNano(),
		Op: &wire.Command_AllocInodes{AllocInodes: &wire.AllocInodesOp{Ministry: uint64(g), Count: inodeGrant}}})
	if err != nil {
		return fmt.Errorf("ask president for inodes: %w", err)
	}
	if res.GetErrno() != 0 {
		return fmt.Errorf("president refused inode grant: %s", res.GetMessage())
	}
	_, _, err = n.host.Propose(ctx, g, &wire.Command{Version: 1, NowNs: n.cfg.Clock.Now().UnixNano(),
		Op: &wire.Command_GrantInodes{GrantInodes: &wire.GrantInodesOp{Start: res.GetStart(), End: res.GetEnd()}}})
	return err
}

func newClusterID() string {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}
