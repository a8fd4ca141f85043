package fusefs_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"github.com/govfs/govfs/internal/ids"
)

// TestWriteBehindAcrossMounts: small files overwritten on one mount,
// whose closes are answered before the writes are committed
// (--write-behind), are read whole by another mount's next open, and by
// the writer's own; after an fsync a client that takes no lease reads
// them too. An O_SYNC descriptor writes through.
func TestWriteBehindAcrossMounts(t *testing.T) {
	canMount(t)
	c := startCluster(t)
	addr := freeAddr(t)
	a := mountProc(t, c, "--metrics", addr)
	b := mountProc(t, c)
	cl := newClient(t, c, c.Addrs())
	dir := filepath.Join(a, "wb")
	must(t, os.Mkdir(dir, 0o755))
	const files = 30
	name := func(m string, i int) string { return filepath.Join(m, "wb", "f"+strconv.Itoa(i)) }
	content := func(i, gen int) []byte {
		return bytes.Repeat([]byte(strconv.Itoa(i)+"."+strconv.Itoa(gen)+"|"), 300+37*i)
	}
	for i := range files {
		must(t, os.WriteFile(name(a, i), content(i, 0), 0o644))
	}
	fsyncDir(t, dir)
	behind0 := mountCounter(t, addr, "govfs_mount_writes_behind_total")
	for i := range files {
		f, err := os.OpenFile(name(a, i), os.O_WRONLY, 0)
		must(t, err)
		_, err = f.WriteAt(content(i, 1), 0)
		must(t, err)
		must(t, f.Close())
		// The other mount's open right after the close.
		if got, err := os.ReadFile(name(b, i)); err != nil || !bytes.Equal(got, content(i, 1)) {
			t.Fatalf("the other mount reads %s after its close: %d bytes (%v), want the %d written", name(b, i), len(got), err, len(content(i, 1)))
		}
		if got, err := os.ReadFile(name(a, i)); err != nil || !bytes.Equal(got, content(i, 1)) {
			t.Fatalf("the writer reads %s back: %d bytes (%v)", name(a, i), len(got), err)
		}
	}
	if n := mountCounter(t, addr, "govfs_mount_writes_behind_total") - behind0; n < files/2 {
		t.Fatalf("%d of %d closes were answered before their commits; want most", n, files)
	}
	// Overwritten again, not read by the other mount: an fsync of the
	// directory makes them current for a client that takes no lease.
	for i := range files {
		f, err := os.OpenFile(name(a, i), os.O_WRONLY, 0)
		must(t, err)
		_, err = f.WriteAt(content(i, 2), 0)
		must(t, err)
		must(t, f.Close())
	}
	fsyncDir(t, dir)
	for i := range files {
		f, _, err := cl.OpenIno(t.Context(), ids.Ino(inoOf(t, name(a, i))), syscall.O_RDONLY)
		must(t, err)
		got := make([]byte, 64<<10)
		n, _ := f.ReadAt(t.Context(), got, 0)
		_ = f.Close()
		if !bytes.Equal(got[:n], content(i, 2)) {
			t.Fatalf("after the fsync a client without a lease reads %d bytes of %s, want the %d written", n, name(a, i), len(content(i, 2)))
		}
	}
	// O_SYNC: through.
	before := mountCounter(t, addr, "govfs_mount_writes_behind_total")
	f, err := os.OpenFile(name(a, 0), os.O_WRONLY|os.O_SYNC, 0)
	must(t, err)
	_, err = f.WriteAt(content(0, 3), 0)
	must(t, err)
	must(t, f.Close())
	if n := mountCounter(t, addr, "govfs_mount_writes_behind_total") - before; n != 0 {
		t.Fatalf("an O_SYNC descriptor's write was queued behind (%d)", n)
	}
}
