package testcluster

import "syscall"

// procAttr starts a node in its own session (so its own process group),
// and has the kernel kill it if the process that started it dies without
// stopping it (a test binary that panics on its timeout skips its
// cleanup; `govfs dev` killed with SIGKILL), so no node outlives its
// owner.
//
// Its own session, as a daemon's: with the kernel's autogroup scheduling
// (kernel.sched_autogroup_enabled, on in Debian), CPU is shared fairly
// between sessions, not processes. Every node in its starter's session
// made the whole cluster one group, against the benchmark's load and
// against each MooseFS daemon (each its own session) on a busy 2-core
// machine: cp -a through a mount in the cluster's session took 14-17 s,
// 10-11 s through the same mount in its own (docs/benchmarks.md, session
// 24).
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL}
}
