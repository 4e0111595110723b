//go:build !linux

package main

import (
	"os"
	"syscall"
)

// Without PR_SET_PDEATHSIG and /proc, the guard notices exec's death by
// polling getppid, and sweeping the command's group is a single SIGKILL
// that does not wait for the processes to die.

func selfExecutable() string {
	exe, err := os.Executable()
	if err != nil {
		return os.Args[0]
	}
	return exe
}

func groupLeaderDyingWithParent(syscall.Signal) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

func dyingWithParent(syscall.Signal) *syscall.SysProcAttr { return nil }

// sweepGroup cannot spare the guard, which is in the group it sweeps: the
// guard sweeps only once exec is gone, and dies with the command then
// (exec sweeps after a command that exited).
const sweepSparesCaller = false

// sweepGroup SIGKILLs the process group pgid, the caller too if it is in
// it.
func sweepGroup(pgid int) { _ = syscall.Kill(-pgid, syscall.SIGKILL) }
