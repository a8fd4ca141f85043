package fusefs

import (
	"strconv"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/prometheus/client_golang/prometheus"
)

// metricsFS times every FUSE operation the mount answers, by operation
// and outcome (govfs mount --metrics: docs/operations.md).
type metricsFS struct {
	fuse.RawFileSystem
	seconds       *prometheus.HistogramVec
	read, written prometheus.Counter
}

func newMetricsFS(raw fuse.RawFileSystem, reg prometheus.Registerer) *metricsFS {
	m := &metricsFS{RawFileSystem: raw,
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "govfs_mount_op_seconds",
			Help:    "Latency of the FUSE operations the mount answered, by operation and outcome (ok or the errno's name).",
			Buckets: prometheus.ExponentialBuckets(0.00002, 2, 20), // 20 µs .. 10 s
		}, []string{"op", "status"}),
		read:    prometheus.NewCounter(prometheus.CounterOpts{Name: "govfs_mount_read_bytes_total", Help: "Bytes returned to read(2) through the mount."}),
		written: prometheus.NewCounter(prometheus.CounterOpts{Name: "govfs_mount_written_bytes_total", Help: "Bytes accepted from write(2) through the mount."}),
	}
	reg.MustRegister(m.seconds, m.read, m.written)
	return m
}

func statusName(st fuse.Status) string {
	if st == fuse.OK {
		return "ok"
	}
	if n := syscall.Errno(st).Error(); n != "" {
		return n
	}
	return strconv.Itoa(int(st))
}

func (m *metricsFS) done(op string, start time.Time, st fuse.Status) {
	m.seconds.WithLabelValues(op, statusName(st)).Observe(time.Since(start).Seconds())
}

func (m *metricsFS) Lookup(c <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	t := time.Now()
	st := m.RawFileSystem.Lookup(c, h, name, out)
	if st == fuse.OK && out.NodeId == 0 {
		// A missing name, answered as a negative entry: counted as
		// what it is.
		m.done("lookup", t, fuse.ENOENT)
		return st
	}
	m.done("lookup", t, st)
	return st
}

func (m *metricsFS) GetAttr(c <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	t := time.Now()
	st := m.RawFileSystem.GetAttr(c, in, out)
	m.done("getattr", t, st)
	return st
}

func (m *metricsFS) SetAttr(c <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	t := time.Now()
	st := m.RawFileSystem.SetAttr(c, in, out)
	m.done("setattr", t, st)
	return st
}

func (m *metricsFS) Mknod(c <-chan struct{}, in *fuse.MknodIn, name string, out *fuse.EntryOut) fuse.Status {
	t := time.Now()
	st := m.RawFileSystem.Mknod(c, in, name, out)
	m.done("mknod", t, st)
	return st
}

func (m *metricsFS) Mkdir(c <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	t := time.Now()
	st := m.RawFileSystem.Mkdir(c, in, name, out)
	m.done("mkdir", t, st)
	return st
}

func (m *metricsFS) Unlink(c <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	t := time.Now()
	st := m.RawFileSystem.Unlink(c, h, name)
	m.done("unlink", t, st)
	return st
}

func (m *metricsFS) Rmdir(c <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	t := time.Now()
	st := m.RawFileSystem.Rmdir(c, h, name)
	m.done("rmdir", t, st)
	return st
}

func (m *metricsFS) Rename(c <-chan struct{}, in *fuse.RenameIn, oldName, newName string) fuse.Status {
	t := time.Now()
	st := m.RawFileSystem.Rename(c, in, oldName, newName)
	m.done("rename", t, st)
	return st
}

func (m *metricsFS) Link(c <-chan struct{}, in *fuse.LinkIn, name string, out *fuse.EntryOut) fuse.Status {
	t := time.Now()
	st := m.RawFileSystem.Link(c, in, name, out)
	m.done("link", t, st)
	return st
}

func (m *metricsFS) Symlink(c <-chan struct{}, h *fuse.InHeader, target, name string, out *fuse.EntryOut) fuse.Status {
	t := time.Now()
	st := m.RawFileSystem.Symlink(c, h, target, name, out)
	m.done("symlink", t, st)
	return st
}

func (m *metricsFS) Readlink(c <-chan struct{}, h *fuse.InHeader) ([]byte, fuse.Status) {
	t := time.Now()
	b, st := m.RawFileSystem.Readlink(c, h)
	m.done("readlink", t, st)
	return b, st
}

func (m *metricsFS) Access(c <-chan struct{}, in *fuse.AccessIn) fuse.Status {
	t := time.Now()
	st := m.RawFileSystem.Access(c, in)
	m.done("access", t, st)
	return st
}

func (m *metricsFS) GetXAttr(c <-chan struct{}, h *fuse.InHeader, attr string, dest []byte) (uint32, fuse.Status) {
	t := time.Now()
	n, st := m.RawFileSystem.GetXAttr(c, h, attr, dest)
	m.done("getxattr", t, st)
	return n, st
}

func (m *metricsFS) ListXAttr(c <-chan struct{}, h *fuse.InHeader, dest []byte) (uint32, fuse.Status) {
	t := time.Now()
	n, st := m.RawFileSystem.ListXAttr(c, h, dest)
	m.done("listxattr", t, st)
	return n, st
}

func (m *metricsFS) SetXAttr(c <-chan struct{}, in *fuse.SetXAttrIn, attr string, data []byte) fuse.Status {
	t := time.Now()
	st := m.RawFileSystem.SetXAttr(c, in, attr, data)
	m.done("setxattr", t, st)
	return st
}

func (m *metricsFS) RemoveXAttr(c <-chan struct{}, h *fuse.InHeader, attr string) fuse.Status {
	t := time.Now()
	st := m.RawFileSystem.RemoveXAttr(c, h, attr)
	m.done("removexattr", t, st)
	return st
}

func (m *metricsFS) Create(c <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	t := time.Now()
	st := m.RawFileSystem.Create(c, in, name, out)
	m.done("create", t, st)
	return st
}

func (m *metricsFS) Open(c <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	t := time.Now()
	st := m.RawFileSystem.Open(c, in, out)
	m.done("open", t, st)
	return st
}

func (m *metricsFS) Read(c <-chan struct{}, in *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	t := time.Now()
	r, st := m.RawFileSystem.Read(c, in, buf)
	m.done("read", t, st)
	if st == fuse.OK && r != nil {
		m.read.Add(float64(r.Size()))
	}
	return r, st
}

func (m *metricsFS) Write(c <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	t := time.Now()
	n, st := m.RawFileSystem.Write(c, in, data)
	m.done("write", t, st)
	m.written.Add(float64(n))
	return n, st
}

func (m *metricsFS) Flush(c <-chan struct{}, in *fuse.FlushIn) fuse.Status {
	t := time.Now()
	st := m.RawFileSystem.Flush(c, in)
	m.done("flush", t, st)
	return st
}

func (m *metricsFS) Fsync(c <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	t := time.Now()
	st := m.RawFileSystem.Fsync(c, in)
	m.done("fsync", t, st)
	return st
}

func (m *metricsFS) Fallocate(c <-chan struct{}, in *fuse.FallocateIn) fuse.Status {
	t := time.Now()
	st := m.RawFileSystem.Fallocate(c, in)
	m.done("fallocate", t, st)
	return st
}

func (m *metricsFS) OpenDir(c <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	t := time.Now()
	st := m.RawFileSystem.OpenDir(c, in, out)
	m.done("opendir", t, st)
	return st
}

func (m *metricsFS) ReadDir(c <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	t := time.Now()
	st := m.RawFileSystem.ReadDir(c, in, out)
	m.done("readdir", t, st)
	return st
}

func (m *metricsFS) ReadDirPlus(c <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	t := time.Now()
	st := m.RawFileSystem.ReadDirPlus(c, in, out)
	m.done("readdirplus", t, st)
	return st
}

func (m *metricsFS) StatFs(c <-chan struct{}, h *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	t := time.Now()
	st := m.RawFileSystem.StatFs(c, h, out)
	m.done("statfs", t, st)
	return st
}

func (m *metricsFS) SetLkw(c <-chan struct{}, in *fuse.LkIn) fuse.Status {
	t := time.Now()
	st := m.RawFileSystem.SetLkw(c, in)
	m.done("setlkw", t, st)
	return st
}

func (m *metricsFS) SetLk(c <-chan struct{}, in *fuse.LkIn) fuse.Status {
	t := time.Now()
	st := m.RawFileSystem.SetLk(c, in)
	m.done("setlk", t, st)
	return st
}

// Writev is what go-fuse calls first for a write; Write follows when it
// answers ENOSYS (then only Write is counted).
func (m *metricsFS) Writev(c <-chan struct{}, in *fuse.WriteIn, data [][]byte) (uint32, fuse.Status) {
	t := time.Now()
	n, st := m.RawFileSystem.Writev(c, in, data)
	if st != fuse.ENOSYS {
		m.done("write", t, st)
		m.written.Add(float64(n))
	}
	return n, st
}
