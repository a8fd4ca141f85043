package placement

import (
	"errors"
	"fmt"
	"sort"
)

// Server is what the planner knows about a chunk server.
type Server struct {
	ID       uint64
	Host     string
	Rack     string
	Pod      string
	Capacity int64
	Used     int64
	Alive    bool
}

func (s Server) free() int64 { return s.Capacity - s.Used }

// Location names where a writer runs (all fields optional).
type Location struct {
	Host, Rack, Pod string
}

// Plan is the outcome of PlaceGroup.
type Plan struct {
	// Members are the chosen servers, primary first.
	Members []uint64
	// Relaxed lists the rules that could not be met, in words an operator
	// understands (empty when the placement is the ideal one).
	Relaxed []string
}

// ErrNotEnoughServers means fewer live hosts than replicas were asked for.
var ErrNotEnoughServers = errors.New("placement: not enough live chunk servers on distinct hosts")

// PlaceGroup chooses n members for a new replica group among servers.
// It fails only when fewer than n distinct live hosts exist.
func PlaceGroup(servers []Server, n int, near Location) (Plan, error) {
	if n <= 0 {
		return Plan{}, fmt.Errorf("placement: %d replicas requested", n)
	}
	live := make([]Server, 0, len(servers))
	for _, s := range servers {
		if s.Alive && s.Capacity > 0 {
			live = append(live, s)
		}
	}
	// Most free space first, then id: the deterministic preference order.
	sort.Slice(live, func(i, j int) bool {
		if live[i].free() != live[j].free() {
			return live[i].free() > live[j].free()
		}
		return live[i].ID < live[j].ID
	})
	hosts := map[string]bool{}
	for _, s := range live {
		hosts[s.Host] = true
	}
	if len(hosts) < n {
		return Plan{}, fmt.Errorf("%w: %d wanted, %d hosts with a live server", ErrNotEnoughServers, n, len(hosts))
	}
	var plan Plan
	used := map[string]bool{} // hosts
	pick := func(ok func(Server) bool) (Server, bool) {
		for _, s := range live {
			if !used[s.Host] && ok(s) {
				return s, true
			}
		}
		return Server{}, false
	}
	take := func(s Server) {
		used[s.Host] = true
		plan.Members = append(plan.Members, s.ID)
	}
	any := func(Server) bool { return true }

	// 1st: near the writer.
	first, ok := Server{}, false
	if near.Host != "" {
		first, ok = pick(func(s Server) bool { return s.Host == near.Host })
	}
	if !ok && near.Rack != "" {
		first, ok = pick(func(s Server) bool { return s.Rack == near.Rack && (near.Pod == "" || s.Pod == near.Pod) })
	}
	if !ok && near.Pod != "" {
		first, ok = pick(func(s Server) bool { return s.Pod == near.Pod })
	}
	if !ok {
		first, _ = pick(any)
		if near != (Location{}) {
			plan.Relaxed = append(plan.Relaxed, "no live server near the writer; first replica placed by free space")
		}
	}
	take(first)
	if n == 1 {
		return plan, nil
	}

	// 2nd: another pod.
	second, ok := pick(func(s Server) bool { return s.Pod != first.Pod })
	if !ok {
		second, ok = pick(func(s Server) bool { return s.Rack != first.Rack })
		if ok {
			plan.Relaxed = append(plan.Relaxed, "only one pod: second replica on another rack of the same pod")
		} else {
			second, _ = pick(any)
			plan.Relaxed = append(plan.Relaxed, "only one rack: second replica on another host of the same rack")
		}
	}
	take(second)
	if n == 2 {
		return plan, nil
	}

	// 3rd: the second's pod, another rack.
	third, ok := pick(func(s Server) bool { return s.Pod == second.Pod && s.Rack != second.Rack })
	if !ok {
		third, ok = pick(func(s Server) bool { return s.Rack != second.Rack && s.Rack != first.Rack })
		if ok {
			plan.Relaxed = append(plan.Relaxed, "no second rack in the second replica's pod: third replica on a third rack elsewhere")
		} else if third, ok = pick(func(s Server) bool { return s.Rack != second.Rack }); ok {
			plan.Relaxed = append(plan.Relaxed, "third replica shares a rack with the first")
		} else {
			third, _ = pick(any)
			plan.Relaxed = append(plan.Relaxed, "third replica shares a rack with the second")
		}
	}
	take(third)

	// Further replicas: any unused host.
	for len(plan.Members) < n {
		s, _ := pick(any)
		take(s)
	}
	return plan, nil
}

// AddMember chooses a live server to join a group whose members are
// current (replacing a dead one): never on a host a member is on,
// preferably on a rack no member is on, then the most free space. It
// returns ErrNotEnoughServers when no host is left.
func AddMember(servers []Server, current []uint64) (uint64, error) {
	byID := map[uint64]Server{}
	for _, s := range servers {
		byID[s.ID] = s
	}
	hosts, racks := map[string]bool{}, map[string]bool{}
	for _, id := range current {
		if s, ok := byID[id]; ok {
			hosts[s.Host], racks[s.Rack] = true, true
		}
	}
	var best Server
	found := false
	better := func(a, b Server) bool { // a preferred over b
		if ra, rb := !racks[a.Rack], !racks[b.Rack]; ra != rb {
			return ra
		}
		if a.free() != b.free() {
			return a.free() > b.free()
		}
		return a.ID < b.ID
	}
	for _, s := range servers {
		if !s.Alive || s.Capacity <= 0 || hosts[s.Host] {
			continue
		}
		if !found || better(s, best) {
			best, found = s, true
		}
	}
	if !found {
		return 0, fmt.Errorf("%w: no live server on a host the group does not use", ErrNotEnoughServers)
	}
	return best.ID, nil
}

// Describe says, in words an operator understands, which placement rules
// a replica group with these members does not meet and why (nothing when
// it meets them all): replicas in one pod, or sharing a rack, and whether
// the cluster offers better. servers is every registered server.
func Describe(servers []Server, members []uint64) []string {
	byID := map[uint64]Server{}
	pods, racks := map[string]bool{}, map[string]bool{}
	for _, s := range servers {
		byID[s.ID] = s
		if s.Alive {
			pods[s.Pod], racks[s.Pod+"/"+s.Rack] = true, true
		}
	}
	mPods, mRacks := map[string]bool{}, map[string]bool{}
	for _, id := range members {
		s := byID[id]
		mPods[s.Pod], mRacks[s.Pod+"/"+s.Rack] = true, true
	}
	var notes []string
	if len(members) > 1 && len(mPods) == 1 {
		if len(pods) <= 1 {
			notes = append(notes, "all replicas in one pod (the cluster has only one)")
		} else {
			notes = append(notes, "all replicas in one pod although live servers exist in another")
		}
	}
	if len(mRacks) < len(members) {
		if len(racks) < len(members) {
			notes = append(notes, fmt.Sprintf("replicas share a rack (the cluster has %d live racks for %d replicas)", len(racks), len(members)))
		} else {
			notes = append(notes, "replicas share a rack although enough racks have live servers")
		}
	}
	return notes
}
