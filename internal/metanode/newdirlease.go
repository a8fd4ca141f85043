package metanode

import (
	"errors"
	"syscall"

	"github.com/govfs/govfs/internal/engine"
	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/lease"
	"github.com/govfs/govfs/internal/multiraft"
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
//   - handed out only if the create succeeded; given back if it failed
//     or was not proposed; kept unanswered when the proposal may still
//     apply (a timeout, a lost leadership) or part of the batch met a
//     move's freeze (settleNewDirs).
//
// The batch's commit is the leadership check: a deposed minister's
// proposal does not commit, and its grant is never answered. Both or
// neither, for a client that asks (MutateRequest.new_dirs_or_nothing): a
// fenced table, a move under way, a client whose lease session this term
// does not know yet, refuse the whole batch unapplied (refused_new_dirs),
// and the client drops those leases and sends it again without asking,
// so it never trusts a lease on a directory that exists unleased. For an
// older client, best effort, as grantNewFiles: those get no lease, and
// the client, which waits for the answer, treats the lease as lost (its
// changes in the directory go after the create, as after any lost
// lease).

// preGrantNewDirs grants client a write directory lease on each directory
// of want that cmd creates with mark_dir_lease and that does not exist
// yet. Both or neither: those it could not grant while their directory
// is still absent (a fence, a move under way, no lease session, a state
// it could not read) are returned as refused, and the caller must then
// not propose cmd, and gives back keep. Otherwise it proposes cmd next
// and hands keep to settleNewDirs.
func (ls *leaseService) preGrantNewDirs(g ids.GroupID, client lease.ClientID, cmd *wire.Command, want []uint64) (keep []lease.Lease, refused []uint64) {
	wanted := make(map[ids.Ino]bool, len(want))
	for _, ino := range want {
		wanted[ids.Ino(ino)] = true
	}
	var cands []ids.Ino
	for _, c := range batchCmds(cmd) {
		if cr := c.GetCreate(); cr != nil && cr.GetType() == wire.FileType_DIRECTORY && cr.GetMarkDirLease() && wanted[ids.Ino(cr.GetIno())] {
			cands = append(cands, ids.Ino(cr.GetIno()))
		}
	}
	if len(cands) == 0 {
		return nil, nil
	}
	all := func(inos []ids.Ino) []uint64 {
		out := make([]uint64, len(inos))
		for i, ino := range inos {
			out[i] = uint64(ino)
		}
		return out
	}
	var absent []ids.Ino
	frozen := false
	err := ls.n.host.Read(g, func(r engine.Reader, _ uint64) error {
		var err error
		if frozen, err = namespace.AnyFrozen(r); err != nil {
			return err
		}
		for _, ino := range cands {
			switch _, err := namespace.GetAttr(r, ino); {
			case errors.Is(err, syscall.ENOENT):
				absent = append(absent, ino)
			case err != nil:
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, all(cands) // cannot tell which exist: none may be made unleased
	}
	if len(absent) == 0 {
		return nil, nil // made already (a retry whose answer was lost)
	}
	if frozen || client == 0 || len(want) > namespace.MaxBatch {
		// A move under way: leaseRoute's checks, per directory, are
		// not worth it.
		return nil, all(absent)
	}
	// No token: each attempt of a batch gets leases of its own, so an
	// attempt that fails gives back only its own, never one a concurrent
	// retry hands out (found in review: with the create's request as
	// token they shared one).
	reqs := make([]lease.Request, len(absent))
	for i, ino := range absent {
		reqs[i] = lease.Request{Client: client, Ino: ino, Mode: lease.Write, Off: 0, End: lease.ToEnd, Dir: true}
	}
	byIno := map[ids.Ino]lease.Lease{}
	for _, l := range ls.tryGrants(g, client, reqs) {
		byIno[l.Ino] = l
	}
	// Still absent once granted: then the lease is older than the
	// directory. (Another attempt of the same batch, whose answer was
	// lost, may have created it between the read above and the grant;
	// another client could then have changed it unseen by this lease.
	// Not refused then: it exists, and this attempt changes nothing.)
	err = ls.n.host.Read(g, func(r engine.Reader, _ uint64) error {
		for _, ino := range absent {
			_, err := namespace.GetAttr(r, ino)
			if err != nil && !errors.Is(err, syscall.ENOENT) {
				return err
			}
			l, ok := byIno[ino]
			switch {
			case err == nil:
			case ok:
				keep = append(keep, l)
				delete(byIno, ino)
			default:
				refused = append(refused, uint64(ino))
			}
		}
		return nil
	})
	if err != nil {
		for _, l := range keep {
			byIno[l.Ino] = l
		}
		keep, refused = nil, all(absent)
	}
	drop := make([]uint64, 0, len(byIno))
	for _, l := range byIno {
		drop = append(drop, uint64(l.ID))
	}
	ls.giveBack(g, client, drop, "new-directory")
	return keep, refused
}

// giveBackNewDirs gives back the grants of preGrantNewDirs for a command
// that is not proposed.
func (ls *leaseService) giveBackNewDirs(g ids.GroupID, client lease.ClientID, granted []lease.Lease) {
	drop := make([]uint64, len(granted))
	for i, l := range granted {
		drop[i] = uint64(l.ID)
	}
	ls.giveBack(g, client, drop, "new-directory")
}

// settleNewDirs answers the leases preGrantNewDirs granted for cmd: those
// whose directory cmd created (res; applied says cmd was proposed and
// applied, nothing of it refused as moving) are handed out, the others
// given back, unless unsure: the proposal failed in a way that may still
// see cmd applied (a timeout, a lost leadership), or part of it was
// refused as moving. Then they are kept unanswered,
// so that the directory is leased from its first moment still: the
// client, which trusts its pending lease until its answer, gives them
// back as orphans when they are recalled (once its request is answered),
// or they expire.
func (ls *leaseService) settleNewDirs(g ids.GroupID, client lease.ClientID, cmd *wire.Command, res *wire.Result, applied, unsure bool, granted []lease.Lease) []*wire.NewDirLease {
	if len(granted) == 0 || unsure {
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

// mayStillApply says whether a proposal that failed with err may still be
// applied: anything but a group this node does not host. (A
// NotLeaderError may come for an entry already appended, which a later
// minister commits; found in review.)
func mayStillApply(err error) bool {
	return err != nil && !errors.Is(err, multiraft.ErrUnknownGroup)
}

// batchCmds returns a batch's commands, or cmd alone (batches do not nest).
func batchCmds(cmd *wire.Command) []*wire.Command {
	if b := cmd.GetBatch(); b != nil {
		return b.GetCmds()
	}
	return []*wire.Command{cmd}
}
