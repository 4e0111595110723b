//go:build !linux

package redistest

import "syscall"

// dieWithParent has no portable equivalent outside Linux; t.Cleanup still
// kills servers on every normal exit.
func dieWithParent() *syscall.SysProcAttr { return nil }
