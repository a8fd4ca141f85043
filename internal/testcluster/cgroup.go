package testcluster

// CPU caps for the scale-out testbed (docs/benchmarks.md, "Testbed"):
// every metadata process runs in its own cgroup limited to a fraction of
// one core, so N processes on a 2-core machine behave like N small
// servers. cgroup v2 (cpu.max) or v1 (cpu.cfs_quota_us), whichever the
// machine has.

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

const cgroupPeriodUs = 20_000

// cpuCaps is the set of cgroups of one cluster.
type cpuCaps struct {
	root string // this cluster's parent cgroup
	v2   bool
	frac float64
}

// newCPUCaps prepares a parent cgroup for processes capped at frac of a
// core each.
func newCPUCaps(frac float64) (*cpuCaps, error) {
	if frac*cgroupPeriodUs < 1000 || frac > 64 {
		return nil, fmt.Errorf("CPU cap %v: give at least %v of a core (the kernel's smallest quota is 1 ms per %d ms period) and at most 64 cores",
			frac, 1000.0/cgroupPeriodUs, cgroupPeriodUs/1000)
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := "govfs-" + hex.EncodeToString(b[:])
	if ctrl, err := os.ReadFile("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		if !strings.Contains(string(ctrl), "cpu") {
			return nil, errors.New("cgroup v2 without the cpu controller: CPU caps are not available here")
		}
		root := filepath.Join("/sys/fs/cgroup", name)
		if err := os.Mkdir(root, 0o755); err != nil {
			return nil, fmt.Errorf("create cgroup %s (needs root): %w", root, err)
		}
		// Children may use the cpu controller.
		if err := os.WriteFile(filepath.Join(root, "cgroup.subtree_control"), []byte("+cpu"), 0o644); err != nil {
			_ = os.Remove(root)
			return nil, fmt.Errorf("enable the cpu controller in %s: %w", root, err)
		}
		return &cpuCaps{root: root, v2: true, frac: frac}, nil
	}
	base := "/sys/fs/cgroup/cpu"
	if _, err := os.Stat(filepath.Join(base, "cpu.cfs_quota_us")); err != nil {
		return nil, errors.New("no cgroup cpu controller (neither v2 nor v1 at /sys/fs/cgroup/cpu): CPU caps are not available here")
	}
	root := filepath.Join(base, name)
	if err := os.Mkdir(root, 0o755); err != nil {
		return nil, fmt.Errorf("create cgroup %s (needs root): %w", root, err)
	}
	return &cpuCaps{root: root, frac: frac}, nil
}

// cap moves process pid into its own capped cgroup named name.
func (c *cpuCaps) cap(name string, pid int) error {
	dir := filepath.Join(c.root, name)
	if err := os.Mkdir(dir, 0o755); err != nil && !os.IsExist(err) {
		return fmt.Errorf("create cgroup %s: %w", dir, err)
	}
	quota := int(c.frac * cgroupPeriodUs)
	if c.v2 {
		if err := os.WriteFile(filepath.Join(dir, "cpu.max"), []byte(fmt.Sprintf("%d %d", quota, cgroupPeriodUs)), 0o644); err != nil {
			return fmt.Errorf("cap %s: %w", dir, err)
		}
	} else {
		if err := os.WriteFile(filepath.Join(dir, "cpu.cfs_period_us"), []byte(strconv.Itoa(cgroupPeriodUs)), 0o644); err != nil {
			return fmt.Errorf("cap %s: %w", dir, err)
		}
		if err := os.WriteFile(filepath.Join(dir, "cpu.cfs_quota_us"), []byte(strconv.Itoa(quota)), 0o644); err != nil {
			return fmt.Errorf("cap %s: %w", dir, err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
		return fmt.Errorf("move process %d into %s: %w", pid, dir, err)
	}
	return nil
}

// remove deletes the cgroups (their processes have exited).
func (c *cpuCaps) remove() {
	ents, _ := os.ReadDir(c.root)
	for _, e := range ents {
		if e.IsDir() {
			dir := filepath.Join(c.root, e.Name())
			// A process may take a moment to leave after it exited.
			for i := 0; i < 50 && os.Remove(dir) != nil; i++ {
				time.Sleep(20 * time.Millisecond)
			}
		}
	}
	_ = os.Remove(c.root)
}
