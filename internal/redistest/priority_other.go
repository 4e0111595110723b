//go:build !linux

package redistest

import "testing"

// YieldToMasters does nothing outside Linux (see priority_linux.go).
func YieldToMasters(t testing.TB) { t.Helper() }
