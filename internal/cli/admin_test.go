package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/govfs/govfs/internal/wire"
)

func testStatusReport() statusReport {
	members := []*wire.Member{{Id: 1, Addr: "127.0.0.1:7001", CertName: "meta1"}, {Id: 2, Addr: "127.0.0.1:7002", CertName: "meta2"}, {Id: 3, Addr: "127.0.0.1:7003"}}
	resps := []*wire.StatusResponse{
		{NodeId: 1, Groups: []*wire.GroupStatus{
			{Group: 0, Kind: "president", Leader: 1, Term: 2, Commit: 15, Applied: 15, Role: "StateLeader", Voters: []uint64{1, 2, 3}},
			{Group: 1, Kind: "ministry", Leader: 2, Term: 3, Commit: 40, Applied: 39, Role: "StateFollower", Voters: []uint64{1, 2, 3}},
		}},
		{NodeId: 2, Groups: []*wire.GroupStatus{
			{Group: 0, Kind: "president", Leader: 1, Term: 2, Commit: 14, Applied: 14, Role: "StateFollower", Voters: []uint64{1, 2, 3}},
			{Group: 1, Kind: "ministry", Leader: 2, Term: 3, Commit: 41, Applied: 41, Role: "StateLeader", Voters: []uint64{1, 2, 3}},
		}},
		nil,
	}
	errs := []error{nil, nil, errors.New("connection refused")}
	return buildStatusReport("c-1", members, resps, errs)
}

func TestStatusReport(t *testing.T) {
	rep := testStatusReport()
	if len(rep.Members) != 3 || !rep.Members[0].Reachable || rep.Members[2].Reachable || rep.Members[2].Error != "connection refused" {
		t.Fatalf("members = %+v", rep.Members)
	}
	if len(rep.Groups) != 2 {
		t.Fatalf("groups = %+v", rep.Groups)
	}
	g1 := rep.Groups[1]
	if g1.Leader != 2 || g1.Commit != 41 || g1.Applied != 41 || g1.Kind != "ministry" {
		t.Fatalf("group 1 should show the leader's view: %+v", g1)
	}
	var b bytes.Buffer
	writeStatusReport(&b, rep)
	want := `cluster c-1

MEMBER  ADDR            REACHABLE  CERTIFICATE
1       127.0.0.1:7001  yes        node/meta1
2       127.0.0.1:7002  yes        node/meta2
3       127.0.0.1:7003  no         -

GROUP  KIND       LEADER  TERM  COMMIT  APPLIED  ROLES
0      president  1       2     15      15       1:leader 2:follower 3:unreachable
1      ministry   2       3     41      41       1:follower 2:leader 3:unreachable

member 3 (127.0.0.1:7003) unreachable: connection refused
`
	if b.String() != want {
		t.Fatalf("text:\n%s\nwant:\n%s", b.String(), want)
	}
}

func TestStatusReportJSON(t *testing.T) {
	data, err := json.Marshal(testStatusReport())
	if err != nil {
		t.Fatal(err)
	}
	var back struct {
		ClusterID string `json:"cluster_id"`
		Members   []struct {
			ID        uint64 `json:"id"`
			Reachable bool   `json:"reachable"`
		} `json:"members"`
		Groups []struct {
			Group  uint64 `json:"group"`
			Leader uint64 `json:"leader"`
			Nodes  []struct {
				Node uint64 `json:"node"`
				Role string `json:"role"`
			} `json:"nodes"`
		} `json:"groups"`
	}
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if back.ClusterID != "c-1" || len(back.Members) != 3 || back.Groups[0].Nodes[2].Role != "unreachable" || back.Groups[1].Leader != 2 {
		t.Fatalf("json = %s", data)
	}
}

func TestRunAdminArgs(t *testing.T) {
	t.Setenv(metaEnv, "")
	var out, errOut bytes.Buffer
	ctx := context.Background()
	if err := runAdmin(ctx, []string{"status"}, &out, &errOut); err == nil || !strings.Contains(err.Error(), metaEnv) {
		t.Fatalf("status without meta = %v", err)
	}
	if err := runAdmin(ctx, []string{"frob"}, &out, &errOut); err == nil || !strings.Contains(err.Error(), "frob") {
		t.Fatalf("unknown command = %v", err)
	}
	if err := runAdmin(ctx, nil, &out, &errOut); err == nil {
		t.Fatal("no command succeeded")
	}
	if err := runAdmin(ctx, []string{"status", "extra"}, &out, &errOut); err == nil {
		t.Fatal("extra argument accepted")
	}
}
