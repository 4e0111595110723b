package cluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cgroupDirs are cgroupRoot in every cgroup v1 hierarchy mounted here.
func cgroupDirs() []string {
	hierarchies, _ := filepath.Glob("/sys/fs/cgroup/*")
	var dirs []string
	for _, h := range hierarchies {
		if fi, err := os.Lstat(h); err == nil && fi.IsDir() {
			dirs = append(dirs, filepath.Join(h, cgroupRoot))
		}
	}
	return dirs
}

// makeCgroupRoot makes cgroupRoot in every hierarchy: the kubelet refuses a
// cgroupRoot that does not exist.
func makeCgroupRoot() error {
	for _, d := range cgroupDirs() {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("cgroup root: %w", err)
		}
	}
	return nil
}

// killCgroups kills every process in the pods' cgroups (containers a
// killed run's shims left running) and removes the cgroups, deepest first.
// It returns the PIDs it killed.
func killCgroups() []int {
	var killed []int
	for range 50 {
		pids := cgroupPIDs()
		if len(pids) == 0 {
			break
		}
		for _, pid := range pids {
			if err := syscall.Kill(pid, syscall.SIGKILL); err == nil || !errors.Is(err, syscall.ESRCH) {
				killed = append(killed, pid)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, root := range cgroupDirs() {
		var dirs []string
		_ = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		slices.Reverse(dirs)
		for _, d := range dirs {
			_ = os.Remove(d)
		}
	}
	slices.Sort(killed)
	return slices.Compact(killed)
}

// cgroupPIDs are the processes in the pods' cgroups.
func cgroupPIDs() []int {
	var pids []int
	for _, root := range cgroupDirs() {
		_ = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
			if err != nil || d.Name() != "cgroup.procs" {
				return nil
			}
			b, _ := os.ReadFile(path)
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil {
					pids = append(pids, pid)
				}
			}
			return nil
		})
	}
	return pids
}
