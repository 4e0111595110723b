// Package framing watches the HTTP/1.1 requests read from each connection
// of a listener and flags a connection on which a request carried both
// Content-Length and Transfer-Encoding.
//
// net/http serves such a request (Transfer-Encoding wins and the
// Content-Length header is dropped before any handler sees it), but RFC 9112
// §6.3 calls it a likely request-smuggling attempt that "ought to be handled
// as an error": two parsers on the path may split the stream differently.
// The watcher reads the same bytes the server reads, never changes them,
// and only flags; the lock API then refuses every request of a flagged
// connection and closes it.
//
// The watcher follows request framing (heads, Content-Length bodies,
// chunked bodies) so that a body is never mistaken for a head. If it ever
// cannot follow (a malformed or oversized head, which the server itself
// refuses), it stops watching that connection rather than guess.
package framing

import (
	"net"
	"sync"
	"sync/atomic"
)

// Listener wraps a listener and watches every connection it accepts.
type Listener struct {
	net.Listener

	mu    sync.Mutex
	conns map[string]*conn // by remote address, while open
}

// Watch returns ln with every accepted connection watched.
func Watch(ln net.Listener) *Listener {
	return &Listener{Listener: ln, conns: make(map[string]*conn)}
}

// Accept wraps the next connection.
func (l *Listener) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	c := &conn{Conn: nc, l: l, key: nc.RemoteAddr().String()}
	l.mu.Lock()
	l.conns[c.key] = c
	l.mu.Unlock()
	return c, nil
}

// Ambiguous reports whether the open connection from remoteAddr (an
// http.Request's RemoteAddr) has sent a request with both Content-Length
// and Transfer-Encoding.
func (l *Listener) Ambiguous(remoteAddr string) bool {
	l.mu.Lock()
	c := l.conns[remoteAddr]
	l.mu.Unlock()
	return c != nil && c.ambiguous.Load()
}

func (l *Listener) forget(c *conn) {
	l.mu.Lock()
	if l.conns[c.key] == c {
		delete(l.conns, c.key)
	}
	l.mu.Unlock()
}

type conn struct {
	net.Conn
	l         *Listener
	key       string
	ambiguous atomic.Bool
	closeOnce sync.Once

	scan scanner // only the server's reading goroutine touches it
}

func (c *conn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && c.scan.feed(p[:n]) {
		c.ambiguous.Store(true)
	}
	return n, err
}

func (c *conn) Close() error {
	c.closeOnce.Do(func() { c.l.forget(c) })
	return c.Conn.Close()
}
