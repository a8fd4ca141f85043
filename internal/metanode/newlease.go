package metanode

import (
	"log/slog"

	"github.com/govfs/govfs/internal/engine"
	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/lease"
	"github.com/govfs/govfs/internal/namespace"
	"github.com/govfs/govfs/internal/wire"
)

// Leases granted with a create (MutateRequest.lease_new_files): a mount
// that creates files under a directory lease gets each new regular
// file's read lease in the answer to the batch that created it, as
// CephFS hands out caps with a create's reply, so the file's next open
// asks nothing (bench mount's write_4k: the open was a lease request of
// 3.4 ms at 4 processes) and its attributes stay cached past the
// kernel's timeout (a 16-process stat phase asked once per file). Asked
// for separately, after the create, the same leases cost creates 10-25 %
// of their CPU (session 19).
//
// A grant here is what a try (wait 0) of a read lease with
// LeaseRequest.open_attr_only would give, made right after the command
// was applied on this minister: nothing is revoked or queued for it, and
// a file that cannot be leased at once (the table's fence, a move under
// way in the group, another client's drain or lease, a client whose
// lease session this term does not know yet) is simply left out; its
// open asks, as before.

// grantNewFiles grants client a read lease on each regular file of want
// that cmd created (res is its result), with the file's attributes read
// after the grant, and returns them with their time to live in
// milliseconds.
//
// Why those attributes are current: see openAfterGrant (another client's
// change of the file drains the new lease, or was applied before it).
// Changes of the client's own still queued are not in them; the client
// does not take them as current while it has any (fusefs newlease.go).
func (ls *leaseService) grantNewFiles(g ids.GroupID, client lease.ClientID, cmd *wire.Command, res *wire.Result, want []uint64) ([]*wire.NewFileLease, uint64) {
	if len(want) > namespace.MaxBatch {
		return nil, 0
	}
	wanted := make(map[ids.Ino]bool, len(want))
	for _, ino := range want {
		wanted[ids.Ino(ino)] = true
	}
	var files []createdFile
	for _, f := range createdFiles(cmd, res) {
		if wanted[f.ino] {
			files = append(files, f)
		}
	}
	if len(files) == 0 || client == 0 {
		return nil, 0
	}
	frozen := true
	_ = ls.n.host.Read(g, func(r engine.Reader, _ uint64) error {
		var err error
		frozen, err = namespace.AnyFrozen(r)
		return err
	})
	if frozen {
		return nil, 0 // a move under way: leaseRoute's checks, per file, are not worth it
	}
	reqs := make([]lease.Request, len(files))
	for i, f := range files {
		// Named by the create's request: a retry of the batch (its
		// answer lost) is given the same leases, not a second set
		// nobody would hold.
		var token uint64
		if f.seq != 0 {
			token = createLeaseToken | f.seq
		}
		reqs[i] = lease.Request{Client: client, Ino: f.ino, Mode: lease.Read, Off: 0, End: lease.ToEnd, Token: token}
	}
	granted := ls.tryGrants(g, client, reqs)
	if len(granted) == 0 {
		return nil, 0
	}
	out := make([]*wire.NewFileLease, 0, len(granted))
	var drop []uint64
	_ = ls.n.host.Read(g, func(r engine.Reader, _ uint64) error {
		// A move that froze one of the files between the check above
		// and its grant (the freeze drained nothing, there was nothing
		// yet): such a lease is not this minister's to keep (as
		// metaService.acquire checks again after its grants).
		if frozen, err := namespace.AnyFrozen(r); err != nil || frozen {
			return err
		}
		for _, l := range granted {
			a, err := namespace.GetAttr(r, l.Ino)
			if err != nil || a.GetType() != wire.FileType_REGULAR {
				continue
			}
			nl := &wire.NewFileLease{Id: uint64(l.ID), Ino: uint64(l.Ino), Attr: a}
			// And its chunk table, empty for a new file: without it the
			// File opened under this lease read the table at its first
			// write (write_4k: a read per file, beside the close's
			// commit). Current for the reason the attributes are.
			if cs, more, err := namespace.GetChunksUpTo(r, l.Ino, 1); err == nil && len(cs) == 0 && !more {
				if data, inline, err := namespace.InlineData(r, l.Ino); err == nil {
					nl.NoChunks, nl.Inline, nl.InlineData = true, inline, data
				}
			}
			out = append(out, nl)
		}
		return nil
	})
	if len(out) < len(granted) {
		// Read no attributes (gone already, or the read failed): not
		// handed out, so given back here.
		for _, l := range granted {
			if !containsLease(out, uint64(l.ID)) {
				drop = append(drop, uint64(l.ID))
			}
		}
	}
	ls.giveBack(g, client, drop, "new-file")

	return out, uint64(ls.ttl.Milliseconds())
}

// tryGrants grants what each of reqs (client's) asks for that the table
// can grant at once, as tries (wait 0; nothing revoked or queued for
// them), unless the table is fenced or client's lease session is not
// known in this term: the leases granted with a create (grantNewFiles,
// preGrantNewDirs).
func (ls *leaseService) tryGrants(g ids.GroupID, client lease.ClientID, reqs []lease.Request) []lease.Lease {
	now := ls.n.cfg.Clock.Now()
	ls.mu.Lock()
	defer ls.mu.Unlock()
	gl, err := ls.syncLocked(g)
	// Fenced: a new minister, which does not know its predecessor's
	// leases yet (nor, for preGrantNewDirs, has surely applied all it
	// committed).
	if err != nil || gl.table.Fenced(now) || !gl.beginGrantLocked(client) {
		return nil
	}
	defer gl.endGrantLocked(client)
	var granted []lease.Lease
	for _, r := range reqs {
		out, err := gl.table.Acquire(now, r, 0)
		if err == nil && out.Granted {
			granted = append(granted, out.Lease)
		}
	}
	return granted
}

// giveBack releases client's leases leaseIDs of g granted with a create
// but not handed out (what: which kind, for the log).
func (ls *leaseService) giveBack(g ids.GroupID, client lease.ClientID, leaseIDs []uint64, what string) {
	if len(leaseIDs) == 0 {
		return
	}
	if _, err := ls.release(g, &wire.LeaseRequest{ClientId: uint64(client), Ids: leaseIDs}); err != nil {
		ls.n.log.Debug("minister: give back leases granted with a create, not handed out", slog.String("kind", what),
			slog.Uint64("group", uint64(g)), slog.Any("err", err))
	}
}

func containsLease(ls []*wire.NewFileLease, id uint64) bool {
	for _, l := range ls {
		if l.GetId() == id {
			return true
		}
	}
	return false
}

// createLeaseToken marks the lease tokens of grants made with a create
// (the create's request seq below it); a client's own tokens count up
// from 1.
const createLeaseToken = 1 << 63

type createdFile struct {
	ino ids.Ino
	seq uint64 // the create's request
}

// createdFiles lists the regular files cmd created, from its result (a
// batch's commands included).
func createdFiles(cmd *wire.Command, res *wire.Result) []createdFile {
	return createdOfType(cmd, res, wire.FileType_REGULAR)
}

// createdOfType lists the inodes of type typ that cmd created, from its
// result (a batch's commands included; batches do not nest).
func createdOfType(cmd *wire.Command, res *wire.Result, typ wire.FileType) []createdFile {
	if res.GetErrno() != 0 {
		return nil
	}
	cmds, results := []*wire.Command{cmd}, []*wire.Result{res}
	if b := cmd.GetBatch(); b != nil {
		cmds, results = b.GetCmds(), res.GetResults()
	}
	var out []createdFile
	for i, c := range cmds {
		if i >= len(results) || results[i].GetErrno() != 0 {
			continue
		}
		if cr := c.GetCreate(); cr != nil && cr.GetType() == typ && results[i].GetAttr().GetType() == typ {
			out = append(out, createdFile{ids.Ino(results[i].GetAttr().GetIno()), c.GetReq().GetSeq()})
		}
	}
	return out
}
