//go:build !linux

package redistest

import (
	"errors"
	"testing"
)

// YieldToMasters does nothing outside Linux (see priority_linux.go).
func YieldToMasters(t testing.TB) { t.Helper() }

// Prioritize needs Linux's per-thread niceness.
func (s *Server) Prioritize() error {
	return errors.New("redistest: raising a master's CPU priority needs Linux")
}
