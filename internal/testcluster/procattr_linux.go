package testcluster

import "syscall"

// procAttr starts a node in its own process group, and has the kernel
// kill it if the process that started it dies without stopping it (a
// test binary that panics on its timeout skips its cleanup; `govfs dev`
// killed with SIGKILL), so no node outlives its owner.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
