package redistest

import "syscall"

// dieWithParent makes the kernel kill redis-server if the test binary dies
// without running its cleanups (go test -timeout panics, SIGKILL), so no
// orphaned servers pile up on developer machines and CI runners.
func dieWithParent() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
