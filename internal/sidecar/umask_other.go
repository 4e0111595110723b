//go:build !unix

package sidecar

import "io/fs"

// withUmask runs fn: there is no umask here, and the socket's mode is set
// right after it is bound.
func withUmask(_ fs.FileMode, fn func()) { fn() }
