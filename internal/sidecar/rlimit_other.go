//go:build !unix

package sidecar

// openFileLimit is unknown (0) where there is no RLIMIT_NOFILE.
func openFileLimit() uint64 { return 0 }
