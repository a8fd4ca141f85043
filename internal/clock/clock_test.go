package clock

import (
	"testing"
	"time"
)

func TestManualFiresInOrder(t *testing.T) {
	m := NewManual(time.Unix(0, 0))
	tk := m.NewTicker(10 * time.Millisecond)
	after := m.After(25 * time.Millisecond)
	m.Advance(9 * time.Millisecond)
	select {
	case <-tk.C():
		t.Fatal("ticker fired early")
	default:
	}
	m.Advance(16 * time.Millisecond) // now 25 ms
	select {
	case at := <-tk.C():
		if at != time.Unix(0, 0).Add(10*time.Millisecond) && at != time.Unix(0, 0).Add(20*time.Millisecond) {
			t.Fatalf("tick at %v", at)
		}
	default:
		t.Fatal("ticker did not fire")
	}
	select {
	case at := <-after:
		if !at.Equal(time.Unix(0, 0).Add(25 * time.Millisecond)) {
			t.Fatalf("timer at %v", at)
		}
	default:
		t.Fatal("timer did not fire")
	}
	if got := m.Now(); !got.Equal(time.Unix(0, 0).Add(25 * time.Millisecond)) {
		t.Fatalf("now %v", got)
	}
	tk.Stop()
	m.Advance(time.Second)
	select {
	case <-tk.C():
		t.Fatal("stopped ticker fired")
	default:
	}
}
