package client

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/govfs/govfs/internal/wire"
)

// fetchSpans deferred wg.Wait() before cancel(): when delivery fails with
// more than readWindow spans left, the feeder waits on the window forever
// and fetchSpans never returns (e.g. `govfs fs cat big | head`: EPIPE).
func TestFetchSpansReturnsOnDeliverError(t *testing.T) {
	c := &Client{}
	spans := splitSpans(0, 20*requestSize, 64<<20) // 20 spans, all holes (no refs)
	done := make(chan error, 1)
	go func() {
		done <- c.fetchSpans(context.Background(), spans, map[uint64]*wire.ChunkRef{}, func(span, []byte) error {
			return errors.New("write the output: broken pipe")
		})
	}()
	select {
	case err := <-done:
		t.Logf("returned: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("fetchSpans hung after its deliver func failed")
	}
}
