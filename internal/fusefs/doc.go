// Package fusefs serves a GovFS cluster as a POSIX file system through
// FUSE, on the node API of github.com/hanwen/go-fuse/v2/fs. Every kernel
// request becomes calls of the client library (package client); the
// package keeps no state of its own beyond open files and a little cache
// of what it last told the kernel.
//
// Contract:
//
//   - Inode numbers are GovFS inode numbers (st_ino is stable across
//     mounts and clients). FUSE node ids are go-fuse's own.
//
//   - Modes are stored exactly as the kernel sends them: the mount does
//     not ask for FUSE_DONT_MASK, so the kernel applies the caller's umask
//     and this package applies none. New inodes belong to the calling
//     uid/gid (or the parent's gid, with the setgid bit inherited by
//     directories, under a setgid directory).
//
//   - Errors are syscall.Errno values unwrapped from the client's errors
//     (errno); anything without an errno is EIO and logged.
//
//   - Requests are not cancelled by the kernel's interrupts: a mutation
//     that was sent completes (or fails within the client's OpTimeout), so
//     a retried system call never sees its own first attempt as EEXIST.
//
//   - Writes are buffered per open file handle into one extent of up to
//     Config.WriteBuffer bytes, and pushed (client.File.WriteAt: durable on
//     every replica, size grown in the ministry) when the extent is full,
//     when a write is not contiguous with it, and on flush (close), fsync
//     and release. A push that fails is reported by the write that caused
//     it or by the next write, flush or fsync of that handle: close(2)
//     returns it. Reads of an inode first push the buffered writes of every
//     handle of that inode on this mount, and getattr reports a size that
//     covers them, so a process sees its own writes.
//
//   - Consistency. An open takes a whole-file read lease when it can
//     (lease.go): while it is held, attributes and the page cache are kept
//     (getattr and opens need no request), and another client's change
//     revokes it first, dropping the kernel's caches of the inode. Without
//     one, close-to-open: open(2) reads the attributes linearizably and,
//     when they changed since the kernel last saw them, invalidates the
//     kernel's cached attributes; the page cache is dropped on every open
//     whose inode changed. Entry timeouts stay short (Config.EntryTimeout,
//     1 s by default): leases do not cover names.
//
//   - Unlinking a file that is open on this mount renames it to a hidden
//     name (".govfs-hidden-<ino>") in the same directory, and the last
//     release removes it, so the open file stays readable and writable as
//     POSIX requires. readdir on this mount does not list hidden names.
//
// See docs/fuse.md for what is built and what is not.
package fusefs
