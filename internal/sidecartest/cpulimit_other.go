//go:build !linux

package sidecartest

import (
	"errors"
	"fmt"
	"time"
)

// ErrNoCPULimit wraps LimitCPU's answer where it cannot limit a process's
// CPU: tests skip then.
var ErrNoCPULimit = errors.New("cannot limit a process's CPU here")

// LimitCPU needs Linux's cgroups.
func (p *Process) LimitCPU(quota, period time.Duration) error {
	return fmt.Errorf("%w: cgroups are Linux's", ErrNoCPULimit)
}
