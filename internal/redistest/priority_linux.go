package redistest

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"testing"
)

// yieldedNice is the niceness YieldToMasters gives the test process: well
// below the masters' (0), so the kernel runs a master that has work before
// the sidecar and the load the test makes.
const yieldedNice = 10

// prioritizedNice is the niceness Prioritize gives a master: far above
// anything else that runs at the default 0 (other test packages, busy
// loops), whose weight is a tenth of it.
const prioritizedNice = -10

// YieldToMasters lowers this test process's CPU priority below that of the
// redis-server masters started so far, which keep theirs. Tests that
// saturate the CPU to judge the sidecar's own speed need healthy masters:
// in a deployment the masters run on hosts of their own, but here they
// share two cores with the sidecar and the burst, and a master kept from
// the CPU for a node timeout is a slow master, truly. Yielding gives them
// back what their own hosts would. It cannot be undone (raising priority
// again needs privilege), so only tests that make test-load runs in a
// process of their own call it.
//
// Linux niceness is per thread, and a new thread inherits its creator's:
// every thread is reniced, twice over for threads started meanwhile.
func YieldToMasters(t testing.TB) {
	t.Helper()
	for range 2 {
		if err := renice(os.Getpid(), yieldedNice); err != nil {
			t.Logf("cannot yield the CPU to the masters: %v", err)
			return
		}
	}
}

// Prioritize raises the running server's CPU priority above everything
// that runs at the default one, as a master on a host of its own would be:
// for tests that starve the sidecar of CPU and must not starve the master
// too, whatever else runs on the machine. It needs privilege (root, or
// CAP_SYS_NICE); a restarted server has the default priority again.
func (s *Server) Prioritize() error {
	pid := s.Pid()
	if pid == 0 {
		return fmt.Errorf("redis-server %s is not running", s.Addr())
	}
	return renice(pid, prioritizedNice)
}

// renice sets the niceness of every thread of process pid (a thread that
// ended meanwhile is no matter).
func renice(pid, nice int) error {
	tasks, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	if err != nil {
		return err
	}
	for _, task := range tasks {
		tid, err := strconv.Atoi(task.Name())
		if err != nil {
			continue
		}
		if err := syscall.Setpriority(syscall.PRIO_PROCESS, tid, nice); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("thread %d: %w", tid, err)
		}
	}
	return nil
}
