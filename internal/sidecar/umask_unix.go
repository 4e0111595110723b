//go:build unix

package sidecar

import (
	"io/fs"
	"syscall"
)

// withUmask runs fn under the umask mask. The umask is the process's: the
// sidecar calls this at start-up, and a file another goroutine created
// meanwhile would at worst get a narrower mode.
func withUmask(mask fs.FileMode, fn func()) {
	old := syscall.Umask(int(mask))
	defer syscall.Umask(old)
	fn()
}
