package chunkserver

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/govfs/govfs/internal/chunkstore"
	"github.com/govfs/govfs/internal/dataproto"
	"github.com/govfs/govfs/internal/wire"
)

// This file keeps the members of a replica group in agreement:
//
//   - reconcile: before the primary orders a chunk's first mutation in an
//     epoch (or the first after a failed one), it asks every full member
//     for its version, makes the highest one its own and installs it on
//     the members behind. Within an epoch versions are unique per chunk,
//     so equal versions mean equal bytes.
//   - sync: a member the president added to a group (replacing a dead one)
//     starts "syncing": the primary installs every chunk of the group on
//     it, rate-limited, then tells the president it is full.
//   - repair: a corrupt block found by a read or the scrubber is fetched
//     from another full member and rewritten in place.

// unreconciled forgets that chunk h's members agree (after a failed
// mutation, or a delete).
func (s *Server) unreconciled(h uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.reconciled, h)
}

// reconcileLater forgets that chunk h's members agree and has the
// background loop bring them into agreement as soon as it can (a member
// that was down comes back, or is replaced), so a failed mutation does
// not leave replicas that differ until the chunk's next mutation.
func (s *Server) reconcileLater(group, h uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.reconciled, h)
	if s.toReconcile == nil {
		s.toReconcile = map[uint64]reconcileNote{}
	}
	s.reconcileGen++
	s.toReconcile[h] = reconcileNote{group: group, gen: s.reconcileGen}
}

// reconcileNote is a chunk waiting for reconcileLoop; gen tells a note
// made while the loop worked on the chunk from the one it worked on.
type reconcileNote struct {
	group, gen uint64
}

// reconcileLoop retries the chunks reconcileLater noted, every second.
func (s *Server) reconcileLoop() {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		s.mu.Lock()
		todo := maps.Clone(s.toReconcile)
		s.mu.Unlock()
		for h, note := range todo {
			done, err := s.reconcileNow(note.group, h)
			if err != nil {
				s.log.Debug("reconcile chunk", "chunk", h, "err", err)
			}
			if done {
				s.mu.Lock()
				if s.toReconcile[h].gen == note.gen {
					delete(s.toReconcile, h)
				}
				s.mu.Unlock()
			}
		}
		s.appends.sweep(time.Now())
	}
}

// reconcileNow reconciles chunk h if this server is still its group's
// primary; done says whether nothing is left to do here (reconciled, or
// no longer ours to reconcile).
func (s *Server) reconcileNow(group, h uint64) (bool, error) {
	unlock := s.locks.lock(h)
	defer unlock()
	g, addrs := s.groups.get(group)
	if g == nil || g.GetPrimary() != s.id {
		return true, nil // the new primary reconciles before mutating
	}
	if err := s.reconcile(g, addrs, h); err != nil {
		return false, err
	}
	return true, nil
}

// reconcile makes the full members of g agree on chunk h; the caller
// holds the chunk lock and is the primary.
func (s *Server) reconcile(g *wire.ReplicaGroup, addrs map[uint64]string, h uint64) error {
	s.mu.Lock()
	done := s.reconciled[h] == g.GetEpoch()
	s.mu.Unlock()
	if done {
		return nil
	}
	local := uint64(0)
	if info, err := s.store.Stat(chunkstore.Handle(h)); err == nil {
		local = info.Version
	} else if ce := (*chunkstore.CorruptError)(nil); errors.As(err, &ce) {
		// Our own copy is damaged: take a member's (below).
		s.repairLater(g.GetId(), chunkstore.Handle(h))
	} else if !errors.Is(err, chunkstore.ErrNotFound) {
		return err
	}
	versions := map[uint64]uint64{}
	best, bestAt := local, s.id
	for _, m := range g.GetMembers() {
		if m == s.id || slices.Contains(g.GetSyncing(), m) {
			continue
		}
		v, err := s.memberVersion(addrs[m], g, h)
		if err != nil {
			return fmt.Errorf("member %d: %w", m, err)
		}
		versions[m] = v
		if v != anyVersion && v > best {
			best, bestAt = v, m
		}
	}
	if bestAt != s.id {
		// A member is ahead (it has a mutation the old primary ordered
		// but never acknowledged, or our copy is damaged): take its copy.
		data, v, err := s.fetchChunk(addrs[bestAt], g, h)
		if err != nil {
			return fmt.Errorf("fetch chunk from member %d: %w", bestAt, err)
		}
		if err := s.replaceLocal(h, v, data); err != nil {
			return err
		}
		best = v
	}
	for m, v := range versions {
		if v != best {
			if err := s.installOn(g, addrs, m, h, v); err != nil {
				return err
			}
		}
	}
	s.mu.Lock()
	if s.reconciled == nil {
		s.reconciled = map[uint64]uint64{}
	}
	s.reconciled[h] = g.GetEpoch()
	s.mu.Unlock()
	return nil
}

// fetchChunk reads a whole chunk from another member, checking that its
// version does not change between requests.
func (s *Server) fetchChunk(addr string, g *wire.ReplicaGroup, h uint64) ([]byte, uint64, error) {
	st, err := s.peers.Call(addr, &dataproto.Frame{Type: dataproto.TypeStat, Handle: h, Group: g.GetId(), Epoch: g.GetEpoch()})
	if err != nil {
		return nil, 0, err
	}
	if st.Status != dataproto.StatusOK {
		return nil, 0, fmt.Errorf("stat: status %d: %s", st.Status, st.Payload)
	}
	data := make([]byte, 0, st.Offset)
	for off := int64(0); off < st.Offset; {
		n := min(int64(maxReadLength), st.Offset-off)
		rf, err := s.peers.Call(addr, &dataproto.Frame{Type: dataproto.TypeRead, Handle: h, Group: g.GetId(), Epoch: g.GetEpoch(),
			Offset: off, Payload: binary.BigEndian.AppendUint32(nil, uint32(n))})
		switch {
		case err != nil:
			return nil, 0, err
		case rf.Status != dataproto.StatusOK:
			return nil, 0, fmt.Errorf("read at %d: status %d: %s", off, rf.Status, rf.Payload)
		case rf.Version != st.Version:
			return nil, 0, fmt.Errorf("read at %d: version moved from %d to %d", off, st.Version, rf.Version)
		case int64(len(rf.Payload)) != n:
			return nil, 0, fmt.Errorf("read at %d: %d bytes, want %d", off, len(rf.Payload), n)
		}
		data = append(data, rf.Payload...)
		off += n
	}
	return data, st.Version, nil
}

// replaceLocal makes data at version v this server's copy of chunk h.
// The caller holds the chunk lock. Delete then write is not atomic, but
// a crash between leaves the chunk missing here, which the primary's
// next reconcile (or sync pass) notices and repairs.
func (s *Server) replaceLocal(h uint64, v uint64, data []byte) error {
	ch := chunkstore.Handle(h)
	if err := s.store.Delete(ch); err != nil && !errors.Is(err, chunkstore.ErrNotFound) {
		return fmt.Errorf("replace chunk %d: %w", h, err)
	}
	// The append ids stay: the new copy holds every record they name
	// (it is the same or a later version of this chunk).
	if len(data) == 0 {
		// An empty chunk with a version was truncated to 0, so v >= 2.
		if v < 2 {
			return fmt.Errorf("replace chunk %d: empty at version %d", h, v)
		}
		if err := s.store.Write(ch, 0, []byte{0}, v-1); err != nil {
			return fmt.Errorf("replace chunk %d: %w", h, err)
		}
		return s.store.Truncate(ch, 0, v)
	}
	if err := s.store.Write(ch, 0, data, v); err != nil {
		return fmt.Errorf("replace chunk %d: %w", h, err)
	}
	return nil
}

// anyVersion as an install's expected version replaces whatever copy
// the member has (its copy is damaged, so its version is unknown).
const anyVersion = math.MaxUint64

// memberVersion asks member addr for its version of chunk h: 0 when it
// has none, anyVersion when its copy is damaged.
func (s *Server) memberVersion(addr string, g *wire.ReplicaGroup, h uint64) (uint64, error) {
	rf, err := s.peers.Call(addr, &dataproto.Frame{Type: dataproto.TypeStat, Handle: h, Group: g.GetId(), Epoch: g.GetEpoch()})
	switch {
	case err != nil:
		return 0, err
	case rf.Status == dataproto.StatusNotFound:
		return 0, nil
	case rf.Status == dataproto.StatusCorrupt:
		return anyVersion, nil
	case rf.Status != dataproto.StatusOK:
		return 0, fmt.Errorf("status %d: %s", rf.Status, rf.Payload)
	}
	return rf.Version, nil
}

// installOn sends this server's copy of chunk h to member m, replacing
// m's copy if m still has version expect (0: none; anyVersion: a damaged
// one), so a delayed install can never take m back to older bytes. The
// caller holds the chunk lock.
func (s *Server) installOn(g *wire.ReplicaGroup, addrs map[uint64]string, m uint64, h uint64, expect uint64) error {
	ch := chunkstore.Handle(h)
	info, err := s.store.Stat(ch)
	if err != nil {
		return fmt.Errorf("install chunk %d on member %d: %w", h, m, err)
	}
	data, err := s.store.Read(ch, 0, int(info.Length))
	if err != nil {
		var ce *chunkstore.CorruptError
		if errors.As(err, &ce) {
			s.repairLater(g.GetId(), ch)
		}
		return fmt.Errorf("install chunk %d on member %d: %w", h, m, err)
	}
	payload := binary.BigEndian.AppendUint64(make([]byte, 0, 8+len(data)), expect)
	payload = append(payload, data...)
	rf, err := s.peers.Call(addrs[m], &dataproto.Frame{Type: dataproto.TypeInstall, Handle: h, Group: g.GetId(), Epoch: g.GetEpoch(),
		Version: info.Version, Offset: info.Length, Payload: payload})
	if err != nil {
		return fmt.Errorf("install chunk %d on member %d: %w", h, m, err)
	}
	if rf.Status != dataproto.StatusOK {
		return fmt.Errorf("install chunk %d on member %d: status %d: %s", h, m, rf.Status, rf.Payload)
	}
	s.syncInstalled(g.GetId(), m, h)
	if s.met != nil {
		s.met.installs.Inc()
	}
	return nil
}

// install answers TypeInstall: the primary replaces this member's copy.
// The payload is the version the primary expects this member to have
// (8 bytes; see installOn) and then the chunk's bytes.
func (s *Server) install(f *dataproto.Frame, h chunkstore.Handle, reply *dataproto.Frame) *dataproto.Frame {
	if len(f.Payload) < 8 || f.Offset != int64(len(f.Payload)-8) {
		return failf(reply, dataproto.StatusInvalid, "install: length %d but %d bytes sent after the expected version", f.Offset, len(f.Payload)-8)
	}
	if f.Version == 0 || f.Handle == 0 {
		return failf(reply, dataproto.StatusInvalid, "install: chunk handle and version are required")
	}
	expect := binary.BigEndian.Uint64(f.Payload)
	unlock := s.locks.lock(f.Handle)
	defer unlock()
	if expect != anyVersion {
		cur := uint64(0)
		info, err := s.store.Stat(h)
		switch {
		case err == nil:
			cur = info.Version
		case !errors.Is(err, chunkstore.ErrNotFound):
			reply.Status, reply.Payload = status(err)
			return reply
		}
		if cur != expect {
			// A delayed install: the primary has moved on since it asked.
			return failf(reply, dataproto.StatusStaleVersion, "install of chunk %d version %d expected this copy at version %d, it is at %d",
				f.Handle, f.Version, expect, cur)
		}
	}
	reply.Status, reply.Payload = status(s.replaceLocal(f.Handle, f.Version, f.Payload[8:]))
	reply.Version = f.Version
	return reply
}

// repairLater repairs chunk h in the background (once at a time).
func (s *Server) repairLater(group uint64, h chunkstore.Handle) {
	s.mu.Lock()
	if s.repairs == nil {
		s.repairs = map[uint64]bool{}
	}
	if s.repairs[uint64(h)] {
		s.mu.Unlock()
		return
	}
	s.repairs[uint64(h)] = true
	s.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer func() {
			s.mu.Lock()
			delete(s.repairs, uint64(h))
			s.mu.Unlock()
		}()
		if err := s.repair(group, h); err != nil {
			s.met.repaired("failed")
			s.log.Warn("repair chunk", "chunk", uint64(h), "err", err)
			return
		}
		s.met.repaired("ok")
		s.log.Info("repaired chunk", "chunk", uint64(h))
	}()
}

// repair rewrites every corrupt block of chunk h with the bytes of another
// full member holding the same version, or the whole chunk when its
// metadata is damaged.
func (s *Server) repair(group uint64, h chunkstore.Handle) error {
	unlock := s.locks.lock(uint64(h))
	defer unlock()
	g, addrs := s.groups.get(group)
	if g == nil {
		return fmt.Errorf("replica group %d unknown", group)
	}
	var sources []string
	for _, m := range g.GetMembers() {
		if m != s.id && !slices.Contains(g.GetSyncing(), m) {
			sources = append(sources, addrs[m])
		}
	}
	if len(sources) == 0 {
		return errors.New("no other full member to repair from")
	}
	info, err := s.store.Stat(h)
	if err != nil {
		var ce *chunkstore.CorruptError
		if !errors.As(err, &ce) {
			return err
		}
		// The metadata itself is bad: replace the whole copy.
		return s.replaceFrom(sources, g, h)
	}
	repaired := 0
	for b := int64(0); b*chunkstore.BlockSize < info.Length; b++ {
		off := b * chunkstore.BlockSize
		n := min(chunkstore.BlockSize, info.Length-off)
		_, err := s.store.Read(h, off, int(n))
		var ce *chunkstore.CorruptError
		if err == nil {
			continue
		}
		if !errors.As(err, &ce) {
			return err
		}
		if ce.Block < 0 {
			return s.replaceFrom(sources, g, h)
		}
		var last error
		for _, a := range sources {
			rf, err := s.peers.Call(a, &dataproto.Frame{Type: dataproto.TypeRead, Handle: uint64(h), Group: g.GetId(), Epoch: g.GetEpoch(),
				Offset: off, Payload: binary.BigEndian.AppendUint32(nil, uint32(n))})
			switch {
			case err != nil:
				last = err
				continue
			case rf.Status != dataproto.StatusOK || rf.Version != info.Version || int64(len(rf.Payload)) != n:
				last = fmt.Errorf("%s: status %d, version %d (want %d), %d bytes: %s", a, rf.Status, rf.Version, info.Version, len(rf.Payload), rf.Payload)
				continue
			}
			if last = s.store.RepairBlock(h, int(b), rf.Payload); last == nil {
				repaired++
				break
			}
		}
		if last != nil {
			return fmt.Errorf("block %d: %w", b, last)
		}
	}
	if repaired > 0 {
		s.log.Info("repaired blocks", "chunk", uint64(h), "blocks", repaired)
	}
	return nil
}

func (s *Server) replaceFrom(sources []string, g *wire.ReplicaGroup, h chunkstore.Handle) error {
	var last error
	for _, a := range sources {
		data, v, err := s.fetchChunk(a, g, uint64(h))
		if err != nil {
			last = err
			continue
		}
		return s.replaceLocal(uint64(h), v, data)
	}
	return fmt.Errorf("replace the whole chunk: %w", last)
}

// scrubLoop verifies every block once per interval and repairs what it
// finds bad.
func (s *Server) scrubLoop(every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			select {
			case <-s.stop:
			case <-ctx.Done():
			}
			cancel()
		}()
		err := s.store.Scrub(ctx, func(h chunkstore.Handle, block int, err error) {
			s.log.Warn("scrub found a bad block", "chunk", uint64(h), "block", block, "err", err)
			if s.met != nil {
				s.met.scrubBad.Inc()
			}
			s.repairLater(dataproto.HandleGroup(uint64(h)), h)
		})
		cancel()
		if err != nil && !errors.Is(err, context.Canceled) {
			s.log.Warn("scrub", "err", err)
		}
	}
}
