package chunkserver

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/govfs/govfs/internal/chunkstore"
	"github.com/govfs/govfs/internal/dataproto"
	"github.com/govfs/govfs/internal/wire"
)

type syncKey struct{ group, member uint64 }

// syncState is the primary's record of filling one syncing member.
type syncState struct {
	epoch uint64
	// installed are the chunks this primary installed on the member
	// since it started syncing; only those are trusted (a member that
	// rejoins may hold old copies at equal versions but other bytes).
	installed map[uint64]bool
	// missed is set when a mutation could not be forwarded to the member:
	// the pass must run again before the member counts as full.
	missed  bool
	running bool
	// reporting is set from the moment the pass decides to report the
	// member full until this server sees it full: meanwhile a mutation
	// the member misses fails instead of being left to a later pass.
	reporting bool
}

func (s *Server) syncStateLocked(k syncKey) *syncState {
	if s.syncs == nil {
		s.syncs = map[syncKey]*syncState{}
	}
	st := s.syncs[k]
	if st == nil {
		st = &syncState{installed: map[uint64]bool{}}
		s.syncs[k] = st
	}
	return st
}

func (s *Server) syncInstalled(group, m, h uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.syncs[syncKey{group, m}]; st != nil {
		st.installed[h] = true
	}
}

// syncMissed notes that a mutation of chunk h did not reach syncing
// member m. It reports false when the miss must fail the mutation: the
// member is being reported full.
func (s *Server) syncMissed(group, m, h uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.syncs[syncKey{group, m}]
	if st == nil {
		return true // no pass yet: the first one copies every chunk
	}
	if st.reporting {
		return false
	}
	st.missed = true
	delete(st.installed, h)
	return true
}

// syncLoop starts a copy pass for every syncing member of every group
// this server is the primary of.
func (s *Server) syncLoop() {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		groups := s.groups.all()
		// Forget the passes of members that are no longer syncing here.
		s.mu.Lock()
		for k, st := range s.syncs {
			if st.running {
				continue
			}
			if g, _ := s.groups.get(k.group); g == nil || g.GetPrimary() != s.id || !slices.Contains(g.GetSyncing(), k.member) {
				delete(s.syncs, k)
			}
		}
		s.mu.Unlock()
		for _, g := range groups {
			if g.GetPrimary() != s.id {
				continue
			}
			for _, m := range g.GetSyncing() {
				k := syncKey{g.GetId(), m}
				s.mu.Lock()
				st := s.syncStateLocked(k)
				if st.reporting && st.epoch != g.GetEpoch() {
					st.reporting = false // the group moved on: fill it again
				}
				// A member reported full waits for the new epoch.
				start := !st.running && !st.reporting
				st.running = !st.reporting || st.running
				s.mu.Unlock()
				if !start {
					continue
				}
				s.wg.Add(1)
				go func() {
					defer s.wg.Done()
					err := s.syncMember(g.GetId(), m)
					s.mu.Lock()
					if st := s.syncs[k]; st != nil {
						st.running = false
					}
					s.mu.Unlock()
					if err != nil {
						s.log.Warn("fill new member", "group", g.GetId(), "member", m, "err", err)
					}
				}()
			}
		}
	}
}

// errSyncAbandoned ends a pass whose group changed under it.
var errSyncAbandoned = errors.New("the replica group changed")

// syncMember copies every chunk of the group to member m until a whole
// pass misses nothing, then tells the president m is full.
func (s *Server) syncMember(group, m uint64) error {
	start := time.Now()
	var copied int64
	for pass := 1; ; pass++ {
		g, _ := s.groups.get(group)
		if g == nil || g.GetPrimary() != s.id || !slices.Contains(g.GetSyncing(), m) {
			return nil // done elsewhere, or no longer ours
		}
		s.mu.Lock()
		st := s.syncStateLocked(syncKey{group, m})
		if st.epoch != g.GetEpoch() {
			// A new epoch (e.g. this server just became primary): trust
			// nothing installed before it.
			st.epoch, st.installed = g.GetEpoch(), map[uint64]bool{}
		}
		st.missed = false
		s.mu.Unlock()
		infos, err := s.store.List()
		if err != nil {
			return err
		}
		for _, in := range infos {
			if dataproto.HandleGroup(uint64(in.Handle)) != group {
				continue
			}
			n, err := s.syncChunk(group, m, g.GetEpoch(), uint64(in.Handle))
			if err != nil {
				return err
			}
			copied += n
			if err := s.throttle(n); err != nil {
				return err
			}
		}
		// From here on a miss fails the mutation instead (reporting),
		// so nothing can slip between this check and the president's
		// commit.
		s.mu.Lock()
		st = s.syncStateLocked(syncKey{group, m})
		missed := st.missed
		st.reporting = !missed
		s.mu.Unlock()
		if missed {
			continue
		}
		// Every chunk is on m as of its copy, and every later mutation
		// reached it: m is full.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = s.president(ctx, func(ctx context.Context, mc wire.MetaClient) (*wire.Status, error) {
			resp, err := mc.Mutate(ctx, &wire.MutateRequest{ClusterId: s.clusterID, Group: 0, Cmd: &wire.Command{Version: 1,
				Op: &wire.Command_MemberSynced{MemberSynced: &wire.MemberSyncedOp{Group: group, Member: m, Epoch: g.GetEpoch()}}}})
			if err == nil && resp.GetStatus().GetCode() == wire.Code_ERRNO {
				return &wire.Status{}, fmt.Errorf("president refused: %s", resp.GetResult().GetMessage())
			}
			return resp.GetStatus(), err
		})
		cancel()
		if err != nil {
			s.mu.Lock()
			st.reporting = false
			s.mu.Unlock()
			return fmt.Errorf("report member %d of group %d full: %w", m, group, err)
		}
		s.log.Info("new member filled", "group", group, "member", m, "bytes", copied, "passes", pass, "took", time.Since(start))
		return nil
	}
}

// syncChunk installs chunk h on member m unless this pass or an earlier
// one of the same epoch already did and m still has its version. It
// returns the bytes sent.
func (s *Server) syncChunk(group, m, epoch, h uint64) (int64, error) {
	unlock := s.locks.lock(h)
	defer unlock()
	g, addrs := s.groups.get(group)
	if g == nil || g.GetEpoch() != epoch || g.GetPrimary() != s.id {
		return 0, errSyncAbandoned
	}
	info, err := s.store.Stat(chunkstore.Handle(h))
	if errors.Is(err, chunkstore.ErrNotFound) {
		return 0, nil // deleted since the listing
	} else if err != nil {
		return 0, err
	}
	s.mu.Lock()
	trusted := s.syncStateLocked(syncKey{group, m}).installed[h]
	s.mu.Unlock()
	cur, err := s.memberVersion(addrs[m], g, h)
	if err != nil {
		return 0, fmt.Errorf("member %d: %w", m, err)
	}
	if trusted && cur == info.Version {
		return 0, nil
	}
	if err := s.installOn(g, addrs, m, h, cur); err != nil {
		return 0, err
	}
	return info.Length, nil
}

// throttle sleeps so copying stays under the configured repair rate.
func (s *Server) throttle(n int64) error {
	rate := s.cfg.RepairRate
	if rate <= 0 || n <= 0 {
		return nil
	}
	select {
	case <-s.stop:
		return errors.New("chunk server stopping")
	case <-time.After(time.Duration(float64(n) / float64(rate) * float64(time.Second))):
		return nil
	}
}
