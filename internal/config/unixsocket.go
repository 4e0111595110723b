package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// UnixScheme starts a SIDELOCK_LISTEN_ADDR that is a Unix domain socket's
// path (unix:///run/sidelock/api.sock) rather than host:port.
const UnixScheme = "unix://"

// MaxUnixSocketPath is the longest socket path Linux takes: sun_path holds
// 108 bytes, the last one the terminating NUL. (macOS holds 104; a path
// that fits there fits here.)
const MaxUnixSocketPath = 107

// UnixSocket is the path of the lock API's Unix socket, when
// SIDELOCK_LISTEN_ADDR names one.
func (c Config) UnixSocket() (path string, ok bool) {
	return strings.CutPrefix(c.ListenAddr, UnixScheme)
}

// checkUnixSocketPath refuses a socket path the sidecar could not bind,
// before anything else starts: relative (it would depend on the working
// directory), too long for sun_path, or in a directory that does not exist
// (in Kubernetes, the shared volume is not mounted).
func checkUnixSocketPath(path string) error {
	switch {
	case !filepath.IsAbs(path) || path == "/":
		return fmt.Errorf("%q is not an absolute path: write %s/run/sidelock/api.sock (three slashes)", UnixScheme+path, UnixScheme)
	case path != filepath.Clean(path):
		return fmt.Errorf("%q is not a clean path (no trailing slash, . or ..); write %s%s", UnixScheme+path, UnixScheme, filepath.Clean(path))
	case len(path) > MaxUnixSocketPath:
		return fmt.Errorf("socket path %q is %d bytes long, beyond the %d a Unix socket's address holds", path, len(path), MaxUnixSocketPath)
	}
	dir := filepath.Dir(path)
	info, err := os.Stat(dir)
	switch {
	case err != nil:
		return fmt.Errorf("directory %s of the socket: %w (in Kubernetes: is the volume mounted there?)", dir, err)
	case !info.IsDir():
		return fmt.Errorf("%s, where the socket would go, is not a directory", dir)
	}
	return nil
}
