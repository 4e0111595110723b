package redistest

import (
	"os"
	"strconv"
	"syscall"
	"testing"
)

// yieldedNice is the niceness YieldToMasters gives the test process: well
// below the masters' (0), so the kernel runs a master that has work before
// the sidecar and the load the test makes.
const yieldedNice = 10

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
		tasks, err := os.ReadDir("/proc/self/task")
		if err != nil {
			t.Logf("cannot yield the CPU to the masters: %v", err)
			return
		}
		for _, task := range tasks {
			tid, err := strconv.Atoi(task.Name())
			if err != nil {
				continue
			}
			if err := syscall.Setpriority(syscall.PRIO_PROCESS, tid, yieldedNice); err != nil {
				t.Logf("cannot yield the CPU to the masters (thread %d): %v", tid, err)
			}
		}
	}
}
