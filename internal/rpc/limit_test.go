package rpc

import (
	"context"
	"github.com/govfs/govfs/internal/wire"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/govfs/govfs/internal/certs"
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

func TestInFlightLimiter(t *testing.T) {
	l := NewInFlightLimiter(2)
	as := func(role certs.Role, name string) context.Context {
		return context.WithValue(context.Background(), callerKey{}, Caller{Secure: true, Identity: certs.Identity{Role: role, Name: name}})
	}
	alice := as(certs.RoleClient, "alice")
	d1, err1 := l.enter(alice)
	d2, err2 := l.enter(alice)
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	if _, err := l.enter(alice); status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "client/alice") {
		t.Fatalf("third request of alice: %v", err)
	}
	// Another client, and the cluster's own nodes, are not held up.
	if d, err := l.enter(as(certs.RoleClient, "bob")); err != nil {
		t.Fatal(err)
	} else {
		d()
	}
	for range 5 {
		if _, err := l.enter(as(certs.RoleNode, "meta1")); err != nil {
			t.Fatalf("a node's request: %v", err)
		}
	}
	d1()
	if d, err := l.enter(alice); err != nil {
		t.Fatalf("after one finished: %v", err)
	} else {
		d()
	}
	d2()
	if len(l.n) != 0 {
		t.Fatalf("counts left behind: %v", l.n)
	}
}

// Raft traffic between plaintext nodes (named by address, like clients)
// is never counted: the interceptors skip the Raft service by name.
func TestClusterMethodsNotLimited(t *testing.T) {
	for _, m := range []string{wire.Raft_Send_FullMethodName, wire.Raft_Stream_FullMethodName, wire.Raft_SendSnapshot_FullMethodName,
		wire.Meta_MetaHeartbeat_FullMethodName, wire.Meta_ChunkHeartbeat_FullMethodName} {
		if !clusterMethod(m) {
			t.Errorf("%s is counted as a client's request", m)
		}
	}
	for _, m := range []string{wire.Meta_Mutate_FullMethodName, wire.Meta_Read_FullMethodName, wire.Meta_Lease_FullMethodName} {
		if clusterMethod(m) {
			t.Errorf("%s is not limited", m)
		}
	}
}
