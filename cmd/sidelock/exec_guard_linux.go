package main

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
	"time"
)

// selfExecutable is this very binary, even if its file was replaced or
// deleted since it started (an upgrade while a job runs).
func selfExecutable() string { return "/proc/self/exe" }

// groupLeaderDyingWithParent starts a child as the leader of a new process
// group that the kernel sends sig when the forking thread dies.
func groupLeaderDyingWithParent(sig syscall.Signal) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: sig}
}

// dyingWithParent starts a child, in its parent's process group, that the
// kernel sends sig when the forking thread dies.
func dyingWithParent(sig syscall.Signal) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: sig}
}

// sweepGroup can spare the guard, which is in the group it sweeps.
const sweepSparesCaller = true

// sweepPause is how long sweepGroup lets SIGKILLed processes die before
// it looks again.
const sweepPause = 2 * time.Millisecond

// sweepGroup SIGKILLs every process of the process group pgid but the
// caller (the guard is in the group it sweeps) and returns once none of
// them is alive: dead, or a zombie, which can no longer act. A process
// that is forking while killed is caught by the next look. Without a
// readable /proc it falls back to one kill of the whole group, caller
// included.
func sweepGroup(pgid int) {
	self := os.Getpid()
	for {
		alive, err := liveGroupMembers(pgid, self)
		if err != nil {
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			return
		}
		if len(alive) == 0 {
			return
		}
		for _, pid := range alive {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(sweepPause)
	}
}

// liveGroupMembers lists the processes of group pgid, but self, that are
// neither zombies nor dead, from /proc/PID/stat.
func liveGroupMembers(pgid, self int) ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var alive []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		if group, state, ok := procGroupAndState(pid); ok && group == pgid && state != 'Z' && state != 'X' {
			alive = append(alive, pid)
		}
	}
	return alive, nil
}

// procGroupAndState reads a process's group and state from
// /proc/PID/stat: "pid (comm) state ppid pgrp ...", where comm may hold
// spaces and parentheses, so the fields are counted from the last ')'.
func procGroupAndState(pid int) (pgid int, state byte, ok bool) {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false // gone meanwhile
	}
	end := bytes.LastIndexByte(raw, ')')
	if end < 0 {
		return 0, 0, false
	}
	fields := bytes.Fields(raw[end+1:])
	if len(fields) < 3 || len(fields[0]) != 1 {
		return 0, 0, false
	}
	pgid, err = strconv.Atoi(string(fields[2]))
	return pgid, fields[0][0], err == nil
}
