package sidecartest

import (
	"net"
	"testing"
)

// LeaveStaleSocket leaves a Unix socket file at path that nobody serves,
// as a killed sidecar does.
func LeaveStaleSocket(t testing.TB, path string) {
	t.Helper()
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	_ = ln.Close()
}
