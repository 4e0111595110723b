//go:build !linux

package sidecartest

import "syscall"

// dieWithParent has no portable equivalent outside Linux; t.Cleanup still
// kills the sidecar on every normal exit.
func dieWithParent() *syscall.SysProcAttr { return nil }
