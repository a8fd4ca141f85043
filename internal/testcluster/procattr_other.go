//go:build !linux

package testcluster

import "syscall"

// procAttr starts a node in its own process group.
func procAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
