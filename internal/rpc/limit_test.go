package rpc

import (
	"net"
	"testing"
	"time"
)

// TestLimitPerPeer: past the limit a peer's new connections are closed
// at once; closing one makes room again.
func TestLimitPerPeer(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := LimitPerPeer(raw, 2, nil)
	defer l.Close()
	accepted := make(chan net.Conn, 10)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	dial := func() net.Conn {
		c, err := net.Dial("tcp", raw.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	closedByServer := func(c net.Conn) bool {
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		_, err := c.Read(make([]byte, 1))
		return err != nil && !isTimeout(err)
	}
	a, b := dial(), dial()
	sa, sb := <-accepted, <-accepted
	third := dial()
	if !closedByServer(third) {
		t.Fatal("a third connection from the same peer was kept")
	}
	select {
	case c := <-accepted:
		t.Fatalf("the third connection was accepted: %v", c.RemoteAddr())
	default:
	}
	_ = sa.Close()
	_ = a.Close()
	time.Sleep(50 * time.Millisecond)
	fourth := dial()
	select {
	case <-accepted:
	case <-time.After(2 * time.Second):
		t.Fatal("no room after a connection closed")
	}
	_ = fourth.Close()
	_ = sb.Close()
	_ = b.Close()
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}
