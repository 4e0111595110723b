package sidecartest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// cgroupV1CPU and cgroupV2 are where the CPU controller is mounted on
// cgroup v1 and v2 machines.
const (
	cgroupV1CPU = "/sys/fs/cgroup/cpu"
	cgroupV2    = "/sys/fs/cgroup"
)

// ErrNoCPULimit wraps LimitCPU's answer on a machine where this process
// cannot make a CPU cgroup (not root, no cgroup CPU controller mounted
// writable): tests skip then.
var ErrNoCPULimit = errors.New("cannot limit a process's CPU here")

// LimitCPU puts the running process into a cgroup of its own with a CPU
// quota, as a pod's CPU limit does: the kernel lets it run for quota of CPU
// time in every period and stalls it for the rest of the period once that
// is spent (Kubernetes' "200m" is 20ms of every 100ms). The cgroup also
// weighs ten times a process of the default priority, as a pod's CPU
// request would guarantee it its share, so that the quota, not whatever
// else runs on the machine, is what starves it. The cgroup is removed when
// the test ends (the process is moved back first, should it still run). A
// restarted process is not in it.
func (p *Process) LimitCPU(quota, period time.Duration) error {
	if quota < time.Millisecond || period < quota || period > time.Second {
		return fmt.Errorf("a CPU quota of %v per %v (1ms to 1s, at most the period)", quota, period)
	}
	pid := p.Pid()
	if pid == 0 {
		return errors.New("sidelock is not running")
	}
	quotaUS, periodUS := strconv.FormatInt(quota.Microseconds(), 10), strconv.FormatInt(period.Microseconds(), 10)
	name := fmt.Sprintf("sidecartest-%d-%d", os.Getpid(), pid)
	var dir, parent string
	var limits [][2]string
	switch {
	case writable(filepath.Join(cgroupV1CPU, "cpu.cfs_quota_us")):
		parent = cgroupV1CPU
		dir = filepath.Join(parent, name)
		limits = [][2]string{{"cpu.cfs_period_us", periodUS}, {"cpu.cfs_quota_us", quotaUS}, {"cpu.shares", "10240"}}
	case writable(filepath.Join(cgroupV2, "cgroup.subtree_control")):
		parent = cgroupV2
		dir = filepath.Join(parent, name)
		limits = [][2]string{{"cpu.max", quotaUS + " " + periodUS}, {"cpu.weight", "1000"}}
	default:
		return fmt.Errorf("%w: no writable cgroup CPU controller at %s or %s", ErrNoCPULimit, cgroupV1CPU, cgroupV2)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		return fmt.Errorf("%w: %w", ErrNoCPULimit, err)
	}
	p.t.Cleanup(func() {
		_ = os.WriteFile(filepath.Join(parent, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0)
		_ = os.Remove(dir)
	})
	for _, l := range append(limits, [2]string{"cgroup.procs", strconv.Itoa(pid)}) {
		if err := os.WriteFile(filepath.Join(dir, l[0]), []byte(l[1]), 0); err != nil {
			return fmt.Errorf("%w: %s: %w", ErrNoCPULimit, l[0], err)
		}
	}
	return nil
}

// writable reports whether this process may write the file at path.
func writable(path string) bool {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return false
	}
	_ = f.Close()
	return true
}
