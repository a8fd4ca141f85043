package cli

import (
	"testing"
	"time"
)

func TestParseMovePauses(t *testing.T) {
	got, err := parseMovePauses("committed=2s, opening=500ms")
	if err != nil || got["committed"] != 2*time.Second || got["opening"] != 500*time.Millisecond || len(got) != 2 {
		t.Fatalf("parse: %v %v", got, err)
	}
	if got, err := parseMovePauses(""); err != nil || got != nil {
		t.Fatalf("empty: %v %v", got, err)
	}
	for _, bad := range []string{"committed", "frozen=1s", "copied=-1s", "copied=1h", "opening=soon"} {
		if _, err := parseMovePauses(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
