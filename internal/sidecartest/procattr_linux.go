package sidecartest

import "syscall"

// dieWithParent makes the kernel kill the sidecar if the test binary dies
// without running its cleanups (go test -timeout panics, SIGKILL), so no
// orphaned sidecar keeps a port or a lock after the test.
func dieWithParent() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
