package metanode

import (
	"testing"
	"time"

	"github.com/govfs/govfs/internal/wire"
)

func TestMetaLivenessFromHeartbeats(t *testing.T) {
	t0 := time.Unix(1000, 0)
	members := []*wire.Member{{Id: 1}, {Id: 2}, {Id: 3}}
	var l metaLiveness
	l.note(t0, &wire.MetaHeartbeatRequest{NodeId: 1, Cpu: 0.5, Groups: []*wire.GroupLoad{{Group: 1, OpsPerS: 100}, {Group: 2, OpsPerS: 5}}})
	l.note(t0, &wire.MetaHeartbeatRequest{NodeId: 2, Groups: []*wire.GroupLoad{{Group: 1, OpsPerS: 20}}})

	// Just started: the silent node 3 is not known yet, not dead.
	got := l.loads(t0.Add(time.Second), t0, members)
	if !got[0].GetAlive() || !got[0].GetKnown() || got[0].GetCpu() != 0.5 || got[0].GetLastHeartbeatMsAgo() != 1000 {
		t.Fatalf("node 1: %v", got[0])
	}
	if got[2].GetKnown() || got[2].GetAlive() || got[2].GetLastHeartbeatMsAgo() != -1 {
		t.Fatalf("node 3 right after start: %v", got[2])
	}
	if ops := groupOps(got); ops[1] != 120 || ops[2] != 5 {
		t.Fatalf("ops per group: %v", ops)
	}
	// Later: node 1 keeps reporting, 2 went silent, 3 never spoke.
	now := t0.Add(metaDeadAfter + time.Second)
	l.note(now, &wire.MetaHeartbeatRequest{NodeId: 1, Cpu: 0.25, Groups: []*wire.GroupLoad{{Group: 1, OpsPerS: 7}}})
	got = l.loads(now, t0, members)
	if !got[0].GetAlive() || got[1].GetAlive() || !got[1].GetKnown() || got[2].GetAlive() || !got[2].GetKnown() {
		t.Fatalf("after %v: %v", metaDeadAfter, got)
	}
	// A dead node's last report does not count toward ops/s.
	if ops := groupOps(got); ops[1] != 7 {
		t.Fatalf("ops per group with node 2 dead: %v", ops)
	}
}
