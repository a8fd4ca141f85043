package namespace

import (
	"errors"

	"github.com/govfs/govfs/internal/posix"
	"github.com/govfs/govfs/internal/wire"
)

// The permission rules are package posix's (the mount checks the same
// before it answers a change itself); here their refusals become the
// ministry's POSIX errors, with their messages.

const (
	mayExec  = posix.MayExec
	mayWrite = posix.MayWrite
)

func ministryErr(err error) error {
	var d *posix.Denied
	if errors.As(err, &d) {
		return errnof(d.Errno, "%s", d.Msg)
	}
	return err
}

func checkAccess(a *wire.Attr, c *wire.Cred, want uint32, what string) error {
	return ministryErr(posix.CheckAccess(a, c, want, what))
}

func mayCreate(dir *wire.Attr, c *wire.Cred, what string) error {
	return ministryErr(posix.MayCreate(dir, c, what))
}

func mayDelete(dir, victim *wire.Attr, c *wire.Cred, what string) error {
	return ministryErr(posix.MayDelete(dir, victim, c, what))
}

func newOwner(dir *wire.Attr, c *wire.Cred, typ wire.FileType, want *wire.Cred, mode uint32) (*wire.Cred, uint32, error) {
	o, m, err := posix.NewOwner(dir, c, typ, want, mode)
	return o, m, ministryErr(err)
}

func checkSetattr(a *wire.Attr, c *wire.Cred, op *wire.SetattrOp) (uint32, error) {
	clear, err := posix.CheckSetattr(a, c, op)
	return clear, ministryErr(err)
}

func mayWriteData(a *wire.Attr, c *wire.Cred, what string) error {
	return ministryErr(posix.MayWriteData(a, c, what))
}

func mayMknod(typ wire.FileType, c *wire.Cred, what string) error {
	return ministryErr(posix.MayMknod(typ, c, what))
}

func mayXattr(a *wire.Attr, c *wire.Cred, name []byte, what string) error {
	return ministryErr(posix.MayXattr(a, c, name, what))
}
