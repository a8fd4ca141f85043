package fusefs

import (
	"context"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// NewRawForTest returns the file system a mount of cfg serves, as the
// kernel would talk to it, without a kernel mount (go-fuse's
// notifications then answer ENOSYS), and a function to stop it. Tests
// drive it with FUSE requests in-process, so sequences of operations
// run in milliseconds each.
func NewRawForTest(ctx context.Context, cfg Config) (fuse.RawFileSystem, func(), error) {
	fsys, err := New(cfg)
	if err != nil {
		return nil, nil, err
	}
	root, err := fsys.prepare(ctx)
	if err != nil {
		return nil, nil, err
	}
	return newLockFS(fs.NewNodeFS(root, fsys.options())), fsys.closeCache, nil
}
