package metanode

import (
	"errors"
	"syscall"

	"github.com/govfs/govfs/internal/engine"
	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/lease"
	"github.com/govfs/govfs/internal/namespace"
	"github.com/govfs/govfs/internal/wire"
)

// Directory leases granted with a directory's create
// (MutateRequest.lease_new_dirs). A mount that makes a directory under
// its parent's directory lease holds the new directory's lease from the
// start, so that what it then does inside is answered at once
// (docs/leases.md, "Directory leases"). That lease used to be its own
// request (LeaseRequest.new_dir), sent before the create and holding it
// back until answered: a leadership confirmation, two existence reads and
// a read of the attributes per directory, 0.07 ms of the minister's CPU
// per mkdir, twice everything else a mkdir costs it (16 processes making
// directories, session 23). Here it is part of the batch that creates the
// directory, granted in the same handler:
//
//   - before the batch is proposed, and only on a directory that does not
//     exist yet (read before and after the grant), each attempt of the
//     batch its own lease: from the moment the directory exists, another
//     client's change of it drains the lease (nobody can reach an inode
//     that does not exist; its number is the creating client's
//     reservation);
//   - only for a create marked for leases (CreateOp.mark_dir_lease), so
//     that a new minister, which does not know the lease, fences the
//     directory's entry changes until the holder reclaimed it;
//   - kept only if the create succeeded; given back otherwise (failed,
//     moving, not proposed).
//
// The batch's commit is the leadership check: a deposed minister's
// proposal does not commit, and its grant is never answered. Best effort,
// as grantNewFiles: a fenced table, a move under way, a client whose
// lease session this term does not know yet, get no lease, and the client
// treats the lease as lost (its changes in the directory go after the
// create, as after any lost lease).

// preGrantNewDirs grants client a write directory lease on each directory
// of want that cmd creates with mark_dir_lease and that does not exist
// yet. The caller proposes cmd next and hands the grants to settleNewDirs.
func (ls *leaseService) preGrantNewDirs(g ids.GroupID, client lease.ClientID, cmd *wire.Command, want []uint64) []lease.Lease {
	if len(want) == 0 || len(want) > namespace.MaxBatch || client == 0 {
		return nil
	}
	wanted := make(map[ids.Ino]bool, len(want))
	for _, ino := range want {
		wanted[ids.Ino(ino)] = true
	}
	var reqs []lease.Request
	_ = ls.n.host.Read(g, func(r engine.Reader, _ uint64) error {
		if frozen, err := namespace.AnyFrozen(r); err != nil || frozen {
			return err // a move under way: leaseRoute's checks, per directory, are not worth it
		}
		for _, c := range batchCmds(cmd) {
			cr := c.GetCreate()
			if cr == nil || cr.GetType() != wire.FileType_DIRECTORY || !cr.GetMarkDirLease() || !wanted[ids.Ino(cr.GetIno())] {
				continue
			}
			if _, err := namespace.GetAttr(r, ids.Ino(cr.GetIno())); errors.Is(err, syscall.ENOENT) {
				// No token: each attempt of a batch gets leases of its
				// own, so an attempt that fails gives back only its own,
				// never one a concurrent retry hands out (found in
				// review: with the create's request as token they
				// shared one).
				reqs = append(reqs, lease.Request{Client: client, Ino: ids.Ino(cr.GetIno()), Mode: lease.Write, Off: 0, End: lease.ToEnd, Dir: true})
			}
		}
		return nil
	})
	granted := ls.tryGrants(g, client, reqs)
	if len(granted) == 0 {
		return nil
	}
	// Still absent once granted: then the lease is older than the
	// directory. (Another attempt of the same batch, whose answer was
	// lost, may have created it between the read above and the grant;
	// another client could then have changed it unseen by this lease.)
	var keep []lease.Lease
	var drop []uint64
	err := ls.n.host.Read(g, func(r engine.Reader, _ uint64) error {
		for _, l := range granted {
			if _, err := namespace.GetAttr(r, l.Ino); errors.Is(err, syscall.ENOENT) {
				keep = append(keep, l)
			} else {
				drop = append(drop, uint64(l.ID))
			}
		}
		return nil
	})
	if err != nil {
		keep, drop = nil, drop[:0]
		for _, l := range granted {
			drop = append(drop, uint64(l.ID))
		}
	}
	ls.giveBack(g, client, drop, "new-directory")
	return keep
}

// settleNewDirs answers the leases preGrantNewDirs granted for cmd: those
// whose directory cmd created (res; applied says cmd was proposed and
// applied, not refused as moving) are handed out, the others given back.
func (ls *leaseService) settleNewDirs(g ids.GroupID, client lease.ClientID, cmd *wire.Command, res *wire.Result, applied bool, granted []lease.Lease) []*wire.NewDirLease {
	if len(granted) == 0 {
		return nil
	}
	made := map[ids.Ino]bool{}
	if applied {
		for _, d := range createdOfType(cmd, res, wire.FileType_DIRECTORY) {
			made[d.ino] = true
		}
	}
	var out []*wire.NewDirLease
	var drop []uint64
	for _, l := range granted {
		if made[l.Ino] {
			out = append(out, &wire.NewDirLease{Id: uint64(l.ID), Ino: uint64(l.Ino)})
		} else {
			drop = append(drop, uint64(l.ID))
		}
	}
	ls.giveBack(g, client, drop, "new-directory")
	return out
}

// batchCmds returns a batch's commands, or cmd alone (batches do not nest).
func batchCmds(cmd *wire.Command) []*wire.Command {
	if b := cmd.GetBatch(); b != nil {
		return b.GetCmds()
	}
	return []*wire.Command{cmd}
}
