// Package connlimit caps the connections an http.Server holds open.
//
// Every connection costs the process a file descriptor and, in net/http,
// a goroutine and buffers; with no cap, one client opening idle
// connections exhausts RLIMIT_NOFILE and the admin listener's probes fail
// with it. A Listener hands the server at most Max connections at once.
// When a new one arrives at the cap it first sheds a connection that is
// doing nothing — one that never sent a request (oldest first), else an
// idle keep-alive one (longest idle first) — and only when every
// connection is busy in a request (a waiter, a held lock's stream, an
// event stream) is the new one refused, with an HTTP answer that names the
// overload. A connection in a request is never shed.
package connlimit

import (
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Config sets a Listener's cap and how it refuses.
type Config struct {
	// Max is the most connections handed to the server at once (at least 1).
	Max int
	// Refusal is written to a connection refused at the cap before it is
	// closed: a complete HTTP response (see OverloadResponse).
	Refusal []byte
	// MaxLingering bounds the refused connections kept open at once while
	// their answer drains (see refuse); each holds a descriptor. Beyond it
	// a refusal is written without waiting and the connection closed.
	MaxLingering int
	// Linger bounds how long one refused connection is kept for its
	// answer to be read.
	Linger time.Duration
	// MinSilent and MinIdle are how long a connection must have been
	// silent since it opened, or idle since its last answer, before it may
	// be shed. A client that just connected has not had time to send its
	// request, and one between two heartbeats is about to reuse its
	// connection: shedding either would fail a live caller (a keep-alive
	// PUT is not retried by most clients) where refusing the newcomer
	// names the overload. Zero sheds at once.
	MinSilent, MinIdle time.Duration
}

// Stats are a Listener's counts, for metrics.
type Stats struct {
	Open, Max int
	// Refused connections got the overload answer; ShedNew and ShedIdle
	// were closed to make room (never spoke / idle keep-alive).
	Refused, ShedNew, ShedIdle uint64
}

// Listener is a net.Listener whose Accept keeps at most Max connections
// open. Set the server's ConnState to its ConnState, so it knows which
// connections are idle.
type Listener struct {
	net.Listener
	cfg     Config
	linger  chan struct{} // a token per refused connection still draining
	mu      sync.Mutex
	conns   map[*Conn]struct{} // guarded by mu
	refused atomic.Uint64
	shedNew atomic.Uint64
	shedIdl atomic.Uint64
}

// New wraps inner.
func New(inner net.Listener, cfg Config) (*Listener, error) {
	if cfg.Max < 1 {
		return nil, errors.New("connlimit: Max must be at least 1")
	}
	return &Listener{
		Listener: inner, cfg: cfg,
		linger: make(chan struct{}, max(cfg.MaxLingering, 0)),
		conns:  make(map[*Conn]struct{}, cfg.Max),
	}, nil
}

// Conn is a connection handed out by a Listener; closing it frees its place.
type Conn struct {
	net.Conn
	l    *Listener
	once sync.Once
	// Guarded by l.mu: the server's last word on it, and since when.
	state http.ConnState
	since time.Time
}

// Close closes the connection and frees its place under the cap.
func (c *Conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.forget(c) })
	return err
}

// Accept returns the next connection the cap has room for, making room by
// shedding a connection that does nothing; connections that find every
// place busy are answered and closed here, never returned.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		nc, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		c, victim := l.admit(nc, time.Now())
		if victim != nil {
			_ = victim.Close()
		}
		if c != nil {
			return c, nil
		}
		l.refuse(nc)
	}
}

// admit registers nc if there is room, or room once victim (returned for
// the caller to close outside the lock) is gone; nil when every place is
// busy.
func (l *Listener) admit(nc net.Conn, now time.Time) (c, victim *Conn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.conns) >= l.cfg.Max {
		victim = l.victimLocked(now)
		if victim == nil {
			return nil, nil
		}
		// Its place is taken at once: the new connection must not wait for
		// the victim's server goroutine to notice the close.
		delete(l.conns, victim)
		l.countShed(victim.state)
	}
	c = &Conn{Conn: nc, l: l, state: http.StateNew, since: now}
	l.conns[c] = struct{}{}
	return c, victim
}

// victimLocked picks the connection to shed: the oldest that never sent a
// request for MinSilent (a client that connects and stays silent is no
// client at all), else the longest idle keep-alive one, idle for MinIdle
// (the least likely to be reused before its idle timeout). Connections in
// a request — including held streams and waiters — are never picked, nor
// ones too young to judge. The caller holds mu.
func (l *Listener) victimLocked(now time.Time) *Conn {
	var oldestNew, oldestIdle *Conn
	silentBefore, idleBefore := now.Add(-l.cfg.MinSilent), now.Add(-l.cfg.MinIdle)
	for c := range l.conns {
		switch {
		case c.state == http.StateNew && !c.since.After(silentBefore):
			if oldestNew == nil || c.since.Before(oldestNew.since) {
				oldestNew = c
			}
		case c.state == http.StateIdle && !c.since.After(idleBefore):
			if oldestIdle == nil || c.since.Before(oldestIdle.since) {
				oldestIdle = c
			}
		}
	}
	if oldestNew != nil {
		return oldestNew
	}
	return oldestIdle
}

func (l *Listener) countShed(s http.ConnState) {
	if s == http.StateNew {
		l.shedNew.Add(1)
	} else {
		l.shedIdl.Add(1)
	}
}

func (l *Listener) forget(c *Conn) {
	l.mu.Lock()
	delete(l.conns, c)
	l.mu.Unlock()
}

// ConnState records what the server says of each connection; it is the
// http.Server's ConnState hook (chain it if the server needs another).
func (l *Listener) ConnState(nc net.Conn, s http.ConnState) {
	c, ok := nc.(*Conn)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, open := l.conns[c]; open {
		c.state, c.since = s, time.Now()
	}
}

// refuse answers a connection that found every place busy and closes it.
// Closing a socket with unread request bytes makes the kernel reset it,
// and a reset can destroy the answer before the client reads it; so the
// write side is shut first and the request drained, for at most Linger,
// on a bounded number of goroutines. Beyond that bound (a flood) the
// answer is written without waiting and the connection closed at once.
func (l *Listener) refuse(nc net.Conn) {
	l.refused.Add(1)
	select {
	case l.linger <- struct{}{}:
		go func() {
			defer func() { <-l.linger }()
			answerAndLinger(nc, l.cfg.Refusal, l.cfg.Linger)
		}()
	default:
		_ = nc.SetWriteDeadline(time.Now().Add(10 * time.Millisecond))
		_, _ = nc.Write(l.cfg.Refusal)
		_ = nc.Close()
	}
}

func answerAndLinger(nc net.Conn, answer []byte, linger time.Duration) {
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(linger))
	if _, err := nc.Write(answer); err != nil {
		return
	}
	if cw, ok := nc.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(nc, 64<<10)) // until the client closes, or the deadline
}

// Stats returns the counts so far.
func (l *Listener) Stats() Stats {
	l.mu.Lock()
	open := len(l.conns)
	l.mu.Unlock()
	return Stats{Open: open, Max: l.cfg.Max, Refused: l.refused.Load(), ShedNew: l.shedNew.Load(), ShedIdle: l.shedIdl.Load()}
}
