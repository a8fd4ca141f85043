package client

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strings"
	"time"

	"github.com/govfs/govfs/internal/clock"
	"github.com/govfs/govfs/internal/wire"
)

// Config configures a Client. Start from DefaultConfig and set MetaAddrs.
type Config struct {
	// MetaAddrs are host:port addresses of metadata nodes used to find the
	// cluster; the full member list is learned from ClusterInfo.
	MetaAddrs []string
	// Consistency is the default read consistency (SESSION by default).
	Consistency wire.ReadConsistency
	// CallTimeout is the deadline of a single RPC attempt.
	CallTimeout time.Duration
	// OpTimeout is the overall budget of one operation, retries included.
	OpTimeout time.Duration
	// ConnectTimeout bounds how long New tries to reach any listed node.
	// When every listed address refuses connections (nothing listens:
	// a wrong address, a stopped cluster) New gives up after a second
	// with ECONNREFUSED instead.
	ConnectTimeout time.Duration
	// Cred is sent with mutations and becomes the owner of new inodes.
	Cred *wire.Cred
	// Logger receives debug logs about retries and routing; nil discards.
	Logger *slog.Logger
	// Rand drives backoff jitter and the choice of preferred member. It
	// need not be safe for concurrent use (the Client locks around it);
	// nil seeds one from the time.
	Rand *rand.Rand
	// Clock is the time source for timestamps, backoff and the retry
	// budget; nil means the wall clock.
	Clock clock.Clock
	// InlineMax is the largest file kept inline in its ministry (no chunk
	// servers): DefaultInlineMax (16 KiB) when 0, none when negative, at
	// most 64 KiB (the ministry's limit).
	InlineMax int64
	// Host, Rack and Pod say where this client runs, so reads prefer a
	// replica on the same host, then rack, then pod. Host defaults to the
	// machine's host name; empty Rack/Pod match nothing.
	Host, Rack, Pod string
	// TLSDir is a certificate directory (ca.crt, tls.crt, tls.key, made by
	// govfs admin cert issue --client or --admin): every connection is
	// then mutual TLS, and a changed certificate is picked up within
	// seconds. Empty: plaintext, which only a cluster started with
	// --insecure accepts.
	TLSDir string
}

// Defaults used by DefaultConfig and for zero fields passed to New.
const (
	DefaultCallTimeout = 5 * time.Second
	DefaultOpTimeout   = 30 * time.Second
	// DefaultConnectTimeout covers a cluster still electing its leaders.
	DefaultConnectTimeout = 10 * time.Second
)

// DefaultConfig returns a Config with every field but MetaAddrs set.
func DefaultConfig() Config {
	return Config{
		Consistency:    wire.ReadConsistency_SESSION,
		CallTimeout:    DefaultCallTimeout,
		OpTimeout:      DefaultOpTimeout,
		ConnectTimeout: DefaultConnectTimeout,
		Cred:           &wire.Cred{},
		Logger:         slog.New(slog.DiscardHandler),
		Rand:           newTimeRand(),
		Clock:          clock.Real{},
	}
}

func newTimeRand() *rand.Rand {
	now := uint64(time.Now().UnixNano())
	return rand.New(rand.NewPCG(now, now^0x9e3779b97f4a7c15))
}

// withDefaults fills zero fields from DefaultConfig.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.CallTimeout == 0 {
		c.CallTimeout = d.CallTimeout
	}
	if c.OpTimeout == 0 {
		c.OpTimeout = d.OpTimeout
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = min(d.ConnectTimeout, c.OpTimeout)
	}
	if c.Cred == nil {
		c.Cred = d.Cred
	}
	if c.Logger == nil {
		c.Logger = d.Logger
	}
	if c.Rand == nil {
		c.Rand = d.Rand
	}
	if c.Clock == nil {
		c.Clock = d.Clock
	}
	if c.Host == "" {
		c.Host, _ = os.Hostname()
	}
	return c
}

// Validate reports the first bad field and what to do about it.
func (c Config) Validate() error {
	if len(c.MetaAddrs) == 0 {
		return errors.New("client: Config.MetaAddrs is empty; give at least one metadata node address (host:port)")
	}
	for i, a := range c.MetaAddrs {
		if strings.TrimSpace(a) == "" || !strings.Contains(a, ":") {
			return fmt.Errorf("client: Config.MetaAddrs[%d] = %q is not a host:port address", i, a)
		}
	}
	switch c.Consistency {
	case wire.ReadConsistency_SESSION, wire.ReadConsistency_LINEARIZABLE:
	default:
		return fmt.Errorf("client: Config.Consistency = %d is unknown; use SESSION or LINEARIZABLE", c.Consistency)
	}
	if c.CallTimeout <= 0 {
		return fmt.Errorf("client: Config.CallTimeout = %v must be positive", c.CallTimeout)
	}
	if c.OpTimeout < c.CallTimeout {
		return fmt.Errorf("client: Config.OpTimeout = %v must be at least CallTimeout (%v)", c.OpTimeout, c.CallTimeout)
	}
	if c.ConnectTimeout <= 0 {
		return fmt.Errorf("client: Config.ConnectTimeout = %v must be positive", c.ConnectTimeout)
	}
	if c.InlineMax > 64<<10 {
		return fmt.Errorf("client: Config.InlineMax = %d is over the ministry's limit of 64 KiB", c.InlineMax)
	}
	return nil
}
