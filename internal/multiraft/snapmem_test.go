package multiraft_test

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/govfs/govfs/internal/engine"
	"github.com/govfs/govfs/internal/wire"
)

// padSM stores, for every request, 64 KiB derived from its client and seq,
// so that a few hundred requests make a snapshot of many pages.
type padSM struct{}

const padSize = 64 << 10

func padValue(client, seq uint64) []byte {
	seed := fmt.Sprintf("%d/%d;", client, seq)
	return bytes.Repeat([]byte(seed), padSize/len(seed)+1)[:padSize]
}

func (padSM) Apply(rw engine.ReadWriter, index uint64, cmd *wire.Command) (*wire.Result, error) {
	k := binary.BigEndian.AppendUint64([]byte("r"), cmd.GetReq().GetClientId())
	k = binary.BigEndian.AppendUint64(k, cmd.GetReq().GetSeq())
	if err := rw.Set(k, padValue(cmd.GetReq().GetClientId(), cmd.GetReq().GetSeq())); err != nil {
		return nil, err
	}
	return &wire.Result{Start: index}, nil
}

// rssBytes is this process's resident set size.
func rssBytes() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// BenchmarkSnapshotCatchUp measures the memory a follower's catch-up by
// snapshot costs: a follower misses GOVFS_SNAPSHOT_MB (default 256) MiB of
// state, comes back and receives it as one snapshot. Reported: the peak
// growth of the process's resident set during the catch-up (the three
// nodes share the process; sender and receiver both stream; block caches
// are 8 MiB each so that they do not hide the transfer), and the
// catch-up's rate. Run: go test ./internal/multiraft -run '^$' -bench SnapshotCatchUp -benchtime 1x
func BenchmarkSnapshotCatchUp(b *testing.B) {
	mb := 256
	if v, err := strconv.Atoi(os.Getenv("GOVFS_SNAPSHOT_MB")); err == nil && v > 0 {
		mb = v
	}
	for range b.N {
		b.StopTimer()
		c := newClusterOf(b, 64, padSM{})
		// Small block caches: a 128 MiB cache per engine filling up
		// as the state is read would hide what the transfer costs.
		c.cacheBytes = 8 << 20
		for _, id := range peers {
			c.kill(id)
			c.start(id)
		}
		if _, err := c.propose(1, 9, 1); err != nil {
			b.Fatal(err)
		}
		l := c.leader(1)
		victim := peers[0]
		if victim == l {
			victim = peers[1]
		}
		c.kill(victim)
		n := uint64(mb) << 20 / padSize
		var wg sync.WaitGroup
		for w := range uint64(16) {
			wg.Go(func() {
				for s := 2 + w; s <= n+1; s += 16 {
					if _, err := c.propose(1, 9, s); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		target := c.hosts[c.leader(1)].Applied(1)
		c.waitAll(1, target) // the other follower applies its share first
		debug.FreeOSMemory()
		base := rssBytes()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		heapBase := int64(ms.HeapInuse)
		var peak, heapPeak atomic.Int64
		done := make(chan struct{})
		var sampler sync.WaitGroup
		sampler.Go(func() {
			for {
				peak.Store(max(peak.Load(), rssBytes()))
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				heapPeak.Store(max(heapPeak.Load(), int64(ms.HeapInuse)))
				select {
				case <-done:
					return
				case <-time.After(5 * time.Millisecond):
				}
			}
		})
		b.StartTimer()
		t0 := time.Now()
		c.start(victim)
		for c.hosts[victim].Applied(1) < target {
			time.Sleep(5 * time.Millisecond)
		}
		took := time.Since(t0)
		b.StopTimer()
		close(done)
		sampler.Wait()
		b.ReportMetric(float64(peak.Load()-base)/(1<<20), "peak-rss-growth-MiB")
		b.ReportMetric(float64(heapPeak.Load()-heapBase)/(1<<20), "peak-heap-growth-MiB")
		b.ReportMetric(float64(mb), "state-MiB")
		b.ReportMetric(float64(mb)/took.Seconds(), "MiB/s")
	}
}
