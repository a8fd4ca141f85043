package multiraft

import (
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"
)

func TestSupersededCommitOnly(t *testing.T) {
	app := func(to, commit uint64, ents int) *pb.Message {
		m := &pb.Message{}
		m.Type, m.To, m.Commit = pb.MsgApp.Enum(), &to, &commit
		for range ents {
			m.Entries = append(m.Entries, &pb.Entry{})
		}
		return m
	}
	msgs := []*pb.Message{
		app(2, 5, 0), // superseded by the MsgApp to 2 below
		app(3, 5, 0), // the only one to 3: sent
		app(2, 6, 2),
		app(2, 6, 0), // last to 2: sent
		app(3, 4, 1), // lower commit than the one to 3 above: that one stays
	}
	want := []bool{true, false, false, false, false}
	for i, w := range want {
		if got := supersededCommitOnly(msgs, i); got != w {
			t.Errorf("message %d: superseded %v, want %v", i, got, w)
		}
	}
}
