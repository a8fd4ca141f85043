package chunkserver

import (
	"errors"

	"github.com/govfs/govfs/internal/chunkstore"
	"github.com/govfs/govfs/internal/dataproto"
)

// list answers TypeList: the chunks this server holds, of one replica
// group or (Group 0) all of them.
func (s *Server) list(f *dataproto.Frame, reply *dataproto.Frame) *dataproto.Frame {
	infos, err := s.store.List()
	if err != nil {
		reply.Status, reply.Payload = status(err)
		return reply
	}
	es := make([]dataproto.ListEntry, 0, len(infos))
	for _, in := range infos {
		if f.Group != 0 && dataproto.HandleGroup(uint64(in.Handle)) != f.Group {
			continue
		}
		es = append(es, dataproto.ListEntry{Handle: uint64(in.Handle), Version: in.Version, Length: in.Length})
	}
	reply.Payload = dataproto.EncodeList(es)
	if len(reply.Payload) > dataproto.DefaultMaxPayload {
		return failf(reply, dataproto.StatusInvalid, "%d chunks do not fit in one list reply: list one replica group at a time", len(es))
	}
	return reply
}

// deleteChunk answers TypeDelete: the garbage collector removes a copy
// that no file references (or that this server holds for a group it is no
// longer a member of). Deleting a chunk that is not here succeeds.
func (s *Server) deleteChunk(f *dataproto.Frame, reply *dataproto.Frame) *dataproto.Frame {
	if f.Handle == 0 {
		return failf(reply, dataproto.StatusInvalid, "delete: no chunk handle given")
	}
	// Under the chunk's lock, so no install is in flight while we look.
	unlock := s.locks.lock(f.Handle)
	defer unlock()
	// The collector decided at the group epoch the frame names. If this
	// server has joined the chunk's group since (a member being filled
	// again), the copy may be one the primary just installed: refuse.
	if g, _ := s.groups.get(dataproto.HandleGroup(f.Handle)); g != nil && g.GetEpoch() > f.Epoch {
		return failf(reply, dataproto.StatusStaleEpoch, "delete chunk %d: decided at epoch %d of group %d, which is now at %d with this server a member",
			f.Handle, f.Epoch, g.GetId(), g.GetEpoch())
	}
	if err := s.store.Delete(chunkstore.Handle(f.Handle)); err != nil && !errors.Is(err, chunkstore.ErrNotFound) {
		reply.Status, reply.Payload = status(err)
		return reply
	}
	s.appends.forget(f.Handle)
	s.unreconciled(f.Handle)
	return reply
}
