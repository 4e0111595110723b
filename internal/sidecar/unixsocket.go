package sidecar

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"sync/atomic"
	"time"

	"github.com/sidelock/sidelock/internal/config"
)

// socketMode lets the sidecar's user and group connect (connecting needs
// write permission): in a pod, the containers that share its fsGroup and
// mount the socket's volume.
const socketMode fs.FileMode = 0o660

// liveProbeTimeout bounds the dial that tells a stale socket from one a
// running process still serves; a live listener on a local socket answers
// at once.
const liveProbeTimeout = time.Second

// listenAPI opens the lock API's listener: a Unix socket when
// SIDELOCK_LISTEN_ADDR is unix://path, else TCP.
func listenAPI(cfg config.Config) (net.Listener, error) {
	if path, ok := cfg.UnixSocket(); ok {
		return listenUnix(path)
	}
	return net.Listen("tcp", cfg.ListenAddr)
}

// listenUnix binds a Unix socket at path with socketMode, replacing a
// stale socket left by a sidecar that did not shut down cleanly. Closing
// the listener removes the socket file (net.UnixListener's default).
func listenUnix(path string) (net.Listener, error) {
	if err := removeStaleSocket(path); err != nil {
		return nil, err
	}
	var ln *net.UnixListener
	var err error
	// The umask makes the socket no wider than socketMode from the moment
	// it exists, so nobody else can connect before the chmod below.
	withUmask(0o777&^socketMode, func() {
		ln, err = net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	})
	if err != nil {
		return nil, err
	}
	// Exactly socketMode, whatever narrower umask the process has.
	if err := os.Chmod(path, socketMode); err != nil {
		_ = ln.Close()
		return nil, fmt.Errorf("SIDELOCK_LISTEN_ADDR: %w", err)
	}
	return &unixListener{UnixListener: ln}, nil
}

// removeStaleSocket clears path for a new socket: nothing there is fine, a
// socket nobody serves any more is removed; anything else (a regular file,
// a directory, a socket another process serves) is refused, never deleted.
func removeStaleSocket(path string) error {
	info, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("SIDELOCK_LISTEN_ADDR: %w", err)
	case info.Mode().Type() != fs.ModeSocket:
		return fmt.Errorf("SIDELOCK_LISTEN_ADDR: %s exists and is not a socket (%s); refusing to replace it: remove it or choose another path",
			path, describeType(info.Mode()))
	}
	if conn, err := net.DialTimeout("unix", path, liveProbeTimeout); err == nil {
		conn.Close()
		return fmt.Errorf("SIDELOCK_LISTEN_ADDR: another process serves the socket %s (a second sidecar?); refusing to replace it", path)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("SIDELOCK_LISTEN_ADDR: removing the stale socket: %w", err)
	}
	return nil
}

// describeType names a file's type for a refusal.
func describeType(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return "a regular file"
	case m.IsDir():
		return "a directory"
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	default:
		return "type " + m.Type().String()
	}
}

// unixListener gives each accepted connection an address of its own. A
// Unix socket's clients are unnamed, so every connection would have the
// same RemoteAddr, which the framing watch (and the logs) use to tell
// connections apart.
type unixListener struct {
	*net.UnixListener
	accepted atomic.Uint64
}

func (l *unixListener) Accept() (net.Conn, error) {
	c, err := l.UnixListener.Accept()
	if err != nil {
		return nil, err
	}
	name := fmt.Sprintf("unix#%d", l.accepted.Add(1))
	return &unixConn{Conn: c, remote: &net.UnixAddr{Name: name, Net: "unix"}}, nil
}

// unixConn is an accepted connection with its own RemoteAddr.
type unixConn struct {
	net.Conn
	remote net.Addr
}

func (c *unixConn) RemoteAddr() net.Addr { return c.remote }
