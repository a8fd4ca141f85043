package client

import (
	"context"

	"google.golang.org/protobuf/proto"

	"github.com/govfs/govfs/internal/certs"
	"github.com/govfs/govfs/internal/wire"
)

type callerKey struct{}

// WithCaller returns a context under which changes are made on behalf of
// cred (uid, gid and supplementary groups): the ministry checks POSIX
// permissions against it. Without it the caller is Config.Cred. A
// cluster running mutual TLS refuses a caller the client's certificate
// does not allow (docs/security.md).
func WithCaller(ctx context.Context, cred *wire.Cred) context.Context {
	return context.WithValue(ctx, callerKey{}, cred)
}

// callerFor is the caller of a change made under ctx.
func (c *Client) callerFor(ctx context.Context) *wire.Cred {
	if cred, ok := ctx.Value(callerKey{}).(*wire.Cred); ok && cred != nil {
		return proto.Clone(cred).(*wire.Cred)
	}
	return proto.Clone(c.cfg.Cred).(*wire.Cred)
}

// Caller is the caller of a change made under ctx (WithCaller's, else
// Config.Cred) as the metadata nodes will take it: squashed and with
// groups filtered as the client's certificate says (certs.Identity.Vouch).
// An error means the certificate does not allow it: the change will be
// refused. For local checks before a change is answered here.
func (c *Client) Caller(ctx context.Context) (*wire.Cred, error) {
	cred := c.callerFor(ctx)
	if c.store == nil {
		return cred, nil
	}
	if id := c.store.Identity(); id.Role == certs.RoleClient || id.Role == certs.RoleAdmin {
		if err := id.Vouch(cred); err != nil {
			return nil, err
		}
	}
	return cred, nil
}

// TrustedWithEveryFile says whether this Client's certificate is given
// read and write chunk access tokens for every file whatever the user (a
// mount host's certificate for every uid and gid without root squash, an
// admin's; and every client of a plaintext cluster, which checks no
// token). A mount whose certificate is not must make each File's I/O in
// its opener's name (File.ActAs).
func (c *Client) TrustedWithEveryFile() bool {
	if c.store == nil {
		return true
	}
	id := c.store.Identity()
	switch id.Role {
	case certs.RoleAdmin, certs.RoleNode:
		return true
	case certs.RoleClient:
		return id.AnyUID && id.AnyGID && !id.Squash
	}
	return false
}
