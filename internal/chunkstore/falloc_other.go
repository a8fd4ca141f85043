//go:build !linux

package chunkstore

import "os"

// fallocate is a no-op where the system has no fallocate(2): a full disk
// is then found by the write itself.
func fallocate(f *os.File, off, n int64) error { return nil }
