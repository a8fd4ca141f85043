package placement

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

func srv(id uint64, host, rack, pod string, free int64) Server {
	return Server{ID: id, Host: host, Rack: rack, Pod: pod, Capacity: 1 << 40, Used: 1<<40 - free, Alive: true}
}

func byID(servers []Server) map[uint64]Server {
	m := map[uint64]Server{}
	for _, s := range servers {
		m[s.ID] = s
	}
	return m
}

func TestIdealPlacement(t *testing.T) {
	var servers []Server
	id := uint64(1)
	for _, pod := range []string{"p1", "p2"} {
		for _, rack := range []string{"r1", "r2"} {
			for h := 0; h < 2; h++ {
				servers = append(servers, srv(id, fmt.Sprintf("%s-%s-h%d", pod, rack, h), pod+rack, pod, int64(100+id)))
				id++
			}
		}
	}
	m := byID(servers)
	plan, err := PlaceGroup(servers, 3, Location{Host: "p1-r1-h0"})
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Relaxed) != 0 {
		t.Fatalf("relaxed %v on an ideal cluster", plan.Relaxed)
	}
	a, b, c := m[plan.Members[0]], m[plan.Members[1]], m[plan.Members[2]]
	if a.Host != "p1-r1-h0" {
		t.Errorf("first replica on %s, want the writer's host", a.Host)
	}
	if b.Pod == a.Pod {
		t.Errorf("second replica in the first's pod %s", b.Pod)
	}
	if c.Pod != b.Pod || c.Rack == b.Rack {
		t.Errorf("third replica %s/%s, want pod %s on a rack other than %s", c.Pod, c.Rack, b.Pod, b.Rack)
	}
	// Deterministic.
	again, _ := PlaceGroup(servers, 3, Location{Host: "p1-r1-h0"})
	if !slices.Equal(again.Members, plan.Members) {
		t.Fatalf("plans differ: %v vs %v", plan.Members, again.Members)
	}
}

func TestNeverTwoReplicasOnOneHost(t *testing.T) {
	// Two servers (disks) on each of three hosts.
	servers := []Server{
		srv(1, "a", "r1", "p", 900), srv(2, "a", "r1", "p", 800),
		srv(3, "b", "r1", "p", 700), srv(4, "b", "r1", "p", 600),
		srv(5, "c", "r1", "p", 500), srv(6, "c", "r1", "p", 400),
	}
	plan, err := PlaceGroup(servers, 3, Location{})
	if err != nil {
		t.Fatal(err)
	}
	m := byID(servers)
	hosts := map[string]bool{}
	for _, id := range plan.Members {
		if hosts[m[id].Host] {
			t.Fatalf("two replicas on host %s: %v", m[id].Host, plan.Members)
		}
		hosts[m[id].Host] = true
	}
	if len(plan.Relaxed) == 0 {
		t.Fatal("one pod, one rack: the plan must say which rules it relaxed")
	}
}

func TestSmallClustersFallBackOrFail(t *testing.T) {
	// The dev cluster: three servers on one host-less machine are
	// distinct "hosts" by address, three racks, one pod.
	dev := []Server{srv(1, "127.0.0.1:1", "r1", "", 10), srv(2, "127.0.0.1:2", "r2", "", 10), srv(3, "127.0.0.1:3", "r3", "", 10)}
	plan, err := PlaceGroup(dev, 3, Location{})
	if err != nil || len(plan.Members) != 3 {
		t.Fatalf("dev cluster: %v %v", plan, err)
	}
	if len(plan.Relaxed) == 0 {
		t.Error("one pod: the relaxation must be reported")
	}
	// Dead or full servers do not count.
	dev[2].Alive = false
	if _, err := PlaceGroup(dev, 3, Location{}); !errors.Is(err, ErrNotEnoughServers) {
		t.Fatalf("2 live hosts for 3 replicas: %v", err)
	}
	dev[2].Alive = true
	dev[2].Capacity = 0
	if _, err := PlaceGroup(dev, 3, Location{}); !errors.Is(err, ErrNotEnoughServers) {
		t.Fatalf("server without capacity counted: %v", err)
	}
	if _, err := PlaceGroup(dev, 0, Location{}); err == nil {
		t.Fatal("0 replicas accepted")
	}
}

func TestPrefersFreeSpace(t *testing.T) {
	servers := []Server{srv(1, "a", "r1", "p1", 10), srv(2, "b", "r1", "p1", 1000), srv(3, "c", "r2", "p2", 5), srv(4, "d", "r2", "p2", 500)}
	plan, err := PlaceGroup(servers, 2, Location{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(plan.Members, []uint64{2, 4}) {
		t.Fatalf("members %v, want the emptiest server of each pod [2 4]", plan.Members)
	}
}

func TestAddMember(t *testing.T) {
	servers := []Server{
		{ID: 1, Host: "h1", Rack: "r1", Capacity: 100, Alive: true},
		{ID: 2, Host: "h2", Rack: "r2", Capacity: 100, Alive: true},
		{ID: 3, Host: "h3", Rack: "r1", Capacity: 100, Used: 0, Alive: true},  // rack of member 1
		{ID: 4, Host: "h4", Rack: "r3", Capacity: 100, Used: 50, Alive: true}, // new rack, less free
		{ID: 5, Host: "h1", Rack: "r9", Capacity: 100, Alive: true},           // host of member 1
		{ID: 6, Host: "h6", Rack: "r4", Capacity: 100, Alive: false},
	}
	id, err := AddMember(servers, []uint64{1, 2})
	if err != nil || id != 4 {
		t.Fatalf("AddMember = %d, %v; want 4 (a new rack beats free space; never member 1's host)", id, err)
	}
	if _, err := AddMember(servers[:2], []uint64{1, 2}); !errors.Is(err, ErrNotEnoughServers) {
		t.Fatalf("no candidate: %v", err)
	}
}

func TestDescribe(t *testing.T) {
	servers := []Server{
		{ID: 1, Host: "h1", Rack: "r1", Pod: "p1", Alive: true},
		{ID: 2, Host: "h2", Rack: "r2", Pod: "p1", Alive: true},
		{ID: 3, Host: "h3", Rack: "r2", Pod: "p1", Alive: true},
		{ID: 4, Host: "h4", Rack: "r9", Pod: "p2", Alive: true},
	}
	if got := Describe(servers, []uint64{1, 4, 2}); len(got) != 0 {
		t.Errorf("ideal group described as %q", got)
	}
	got := Describe(servers, []uint64{1, 2, 3})
	if len(got) != 2 || !strings.Contains(got[0], "although live servers exist in another") || !strings.Contains(got[1], "share a rack although") {
		t.Errorf("one pod, shared rack: %q", got)
	}
	got = Describe(servers[:3], []uint64{1, 2, 3})
	if len(got) != 2 || !strings.Contains(got[0], "the cluster has only one") || !strings.Contains(got[1], "2 live racks for 3 replicas") {
		t.Errorf("small cluster: %q", got)
	}
}
