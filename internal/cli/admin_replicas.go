package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"time"

	"github.com/govfs/govfs/client"
	"github.com/govfs/govfs/internal/wire"
)

// adminMoveReplica implements `govfs admin move-replica MINISTRY --from N
// [--to M]` and, with drain, `govfs admin drain NODE [--to M]`: the
// president changes the map's members at once; unless --no-wait, the
// command then waits until every moved ministry's configuration is the
// new members (the new node caught up and voting, the old one out).
func adminMoveReplica(ctx context.Context, g fsGlobal, args []string, drain bool, stdout, stderr io.Writer) error {
	name := "move-replica"
	if drain {
		name = "drain"
	}
	var from, to uint64
	var noWait, asJSON bool
	f, err := subFlags(name, &g, stderr, args, func(f *flag.FlagSet) {
		if !drain {
			f.Uint64Var(&from, "from", 0, "the node whose replica moves")
		}
		f.Uint64Var(&to, "to", 0, "the node that takes the replica (default: the live node hosting the fewest replicas)")
		f.BoolVar(&noWait, "no-wait", false, "return once the map records the new members, without waiting for the groups to change")
		f.BoolVar(&asJSON, "json", false, "print the moves as JSON")
	})
	if err != nil {
		return err
	}
	if f.NArg() != 1 {
		what := "MINISTRY (an id; see govfs admin ministries)"
		if drain {
			what = "NODE (an id; see govfs admin nodes)"
		}
		return fmt.Errorf("admin %s: want one %s, got %d arguments", name, what, f.NArg())
	}
	id, err := strconv.ParseUint(f.Arg(0), 10, 64)
	if err != nil || (drain && id == 0) {
		return fmt.Errorf("admin %s: %q is not an id", name, f.Arg(0))
	}
	if !drain && from == 0 {
		return fmt.Errorf("admin move-replica: give --from NODE, the node whose replica of ministry %d moves", id)
	}
	cl, err := dialCluster(ctx, g)
	if err != nil {
		return dialError("admin "+name, err)
	}
	defer cl.Close()
	start := time.Now()
	var resp *wire.MoveReplicasResponse
	if drain {
		from = id
		resp, err = cl.Drain(ctx, id, to)
	} else {
		resp, err = cl.MoveReplica(ctx, id, from, to)
	}
	if err != nil {
		if d := client.ErrorDetail(err); d != "" {
			return fmt.Errorf("%w (%s)", err, d)
		}
		return err
	}
	rep := replicaMovesReport{Node: from, Moves: []replicaMoveReport{}, Stays: resp.GetStays()}
	for _, mv := range resp.GetMoves() {
		rep.Moves = append(rep.Moves, replicaMoveReport{Ministry: mv.GetMinistry(), From: mv.GetFrom(), To: mv.GetTo(), Members: mv.GetMembers()})
	}
	if !asJSON {
		if len(rep.Moves) == 0 {
			fmt.Fprintf(stdout, "node %d holds no ministry replica: nothing to move\n", from)
		}
		for _, mv := range rep.Moves {
			fmt.Fprintf(stdout, "ministry %d: replica moves from node %d to node %d (members %s)\n", mv.Ministry, mv.From, mv.To, joinIDs(mv.Members))
		}
	}
	if !noWait && len(rep.Moves) > 0 {
		waitErr := waitReplicaMoves(ctx, cl, &rep, start, func(mv replicaMoveReport) {
			if !asJSON {
				fmt.Fprintf(stdout, "ministry %d: voters now %s (%v)\n", mv.Ministry, joinIDs(mv.Members), mv.Took)
			}
		})
		if waitErr != nil {
			return fmt.Errorf("admin %s: the map has the new members, but %w; the ministers go on (see govfs admin ministries)", name, waitErr)
		}
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	for _, g := range rep.Stays {
		fmt.Fprintf(stdout, "node %d still votes in group %d, the president's (its voters are the --peers of formation)\n", from, g)
	}
	return nil
}

type replicaMovesReport struct {
	Node  uint64              `json:"node"`
	Moves []replicaMoveReport `json:"moves"`
	// Stays lists groups the node still votes in that cannot move.
	Stays []uint64 `json:"stays"`
}

type replicaMoveReport struct {
	Ministry uint64   `json:"ministry"`
	From     uint64   `json:"from"`
	To       uint64   `json:"to"`
	Members  []uint64 `json:"members"`
	// Done: the group's voters are Members (only when waited for).
	Done bool          `json:"done"`
	Took time.Duration `json:"took_ns"`
}

// waitReplicaMoves polls the ministers until each moved group's voters
// are its new members, and reports each as it gets there.
func waitReplicaMoves(ctx context.Context, cl *client.Client, rep *replicaMovesReport, start time.Time, done func(replicaMoveReport)) error {
	for {
		info, resps, _, err := clusterViews(ctx, cl)
		if err == nil {
			ms := buildMinistriesReport(info, resps)
			left := 0
			for i := range rep.Moves {
				mv := &rep.Moves[i]
				if mv.Done {
					continue
				}
				j := slices.IndexFunc(ms.Ministries, func(m ministryReport) bool { return m.ID == mv.Ministry })
				if j >= 0 && slices.Equal(sortedIDs(ms.Ministries[j].Members), sortedIDs(mv.Members)) && len(ms.Ministries[j].Voters) > 0 && ms.Ministries[j].settled() {
					mv.Done, mv.Took = true, time.Since(start).Round(time.Millisecond)
					done(*mv)
					continue
				}
				left++
			}
			if left == 0 {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			var waiting []uint64
			for _, mv := range rep.Moves {
				if !mv.Done {
					waiting = append(waiting, mv.Ministry)
				}
			}
			return fmt.Errorf("ministries %s had not finished after %v", joinIDs(waiting), time.Since(start).Round(time.Second))
		case <-time.After(200 * time.Millisecond):
		}
	}
}
