package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Event is one server-sent event of a held lock or a lease's stream.
type Event struct {
	Kind string // "renewed", "expiring", "released" or "lost"
	// ValidUntil is the promise as of "renewed" and "expiring", and the one
	// that still stands after a "lost" at shutdown (zero otherwise).
	ValidUntil time.Time
	Reason     string // for "released" and "lost"
}

// Held is a lock held for as long as its connection is open.
type Held struct {
	Lease  Lease
	events chan Event
	cancel context.CancelFunc
	done   chan struct{}
	conn   net.Conn // the connection the lock is held over

	mu   sync.Mutex
	last Event // the final event, once the stream ended
}

// Hold acquires name with hold=true and keeps the connection open: the
// sidecar renews the lock while it is open and releases it the moment it
// closes, whether by Release, process exit or a crash.
func (c *Client) Hold(ctx context.Context, name string, opts Options) (*Held, error) {
	return c.hold(ctx, locks.path(name), opts.query(true), opts.IdempotencyKey)
}

// hold is Hold of the resource at path, with the query q (hold=true).
func (c *Client) hold(ctx context.Context, path string, q url.Values, idempotencyKey string) (*Held, error) {
	streamCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, cancel) // until acquired, ctx bounds the wait
	var conn net.Conn
	traced := httptrace.WithClientTrace(streamCtx, &httptrace.ClientTrace{
		GotConn: func(info httptrace.GotConnInfo) { conn = info.Conn },
	})
	res, err := c.do(traced, http.MethodPost, path, q, "", idempotencyKey)
	if err != nil {
		stop()
		cancel()
		return nil, err
	}
	h := &Held{events: make(chan Event, 16), cancel: cancel, done: make(chan struct{}), conn: conn}
	sc := bufio.NewScanner(res.Body)
	first, err := nextEvent(sc)
	stop()
	if err == nil && first.kind != "acquired" {
		err = fmt.Errorf("sidelock: first event %q, want acquired", first.kind)
	}
	if err == nil {
		err = json.Unmarshal([]byte(first.data), &h.Lease)
	}
	if err != nil {
		res.Body.Close()
		cancel()
		return nil, err
	}
	go h.read(res, sc)
	return h, nil
}

// Events delivers renewals and warnings ("expiring") and then the final
// "released" or "lost" event; it is closed when the stream ends. A reader
// more than 16 events behind misses some; End always has the final one.
func (h *Held) Events() <-chan Event { return h.events }

// Done is closed when the stream has ended.
func (h *Held) Done() <-chan struct{} { return h.done }

// End is the stream's final event (zero until Done is closed, and when
// the connection broke without one).
func (h *Held) End() Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.last
}

// Conn is the connection the lock is held over. Never read or write it;
// it is there so that a child process can inherit a duplicate of its
// descriptor: the kernel closes the connection, and the sidecar releases
// the lock, only once every copy is closed (sidelock exec keeps the lock
// this way until its command is dead, even if exec itself is killed).
func (h *Held) Conn() net.Conn { return h.conn }

// Release closes the connection, which releases the lock, and waits for
// the stream to end.
func (h *Held) Release() {
	h.cancel()
	<-h.done
}

func (h *Held) read(res *http.Response, sc *bufio.Scanner) {
	defer close(h.done)
	defer close(h.events)
	defer res.Body.Close()
	for {
		ev, err := nextEvent(sc)
		if err != nil {
			return
		}
		var payload struct {
			ValidUntil time.Time `json:"valid_until"`
			Reason     string    `json:"reason"`
		}
		_ = json.Unmarshal([]byte(ev.data), &payload)
		e := Event{Kind: ev.kind, ValidUntil: payload.ValidUntil, Reason: payload.Reason}
		final := ev.kind == "released" || ev.kind == "lost"
		if final {
			h.mu.Lock()
			h.last = e
			h.mu.Unlock()
		}
		select {
		case h.events <- e:
		default: // a reader this far behind misses events; End keeps the last
		}
		if final {
			return
		}
	}
}

var errStreamEnded = errors.New("sidelock: event stream ended")

// sseEvent is one server-sent event.
type sseEvent struct {
	kind, data string
	id         string // its id: field, if any: a reconnect's Last-Event-ID
	// retry is the reconnection delay of a retry: field read since the
	// previous event, when hasRetry.
	retry    time.Duration
	hasRetry bool
}

// nextEvent reads one event's name, data and id, skipping comments and
// keeping a retry: field (a block of its own when a stream opens) for the
// event that follows it.
func nextEvent(sc *bufio.Scanner) (sseEvent, error) {
	var e sseEvent
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if e.kind != "" {
				return e, nil
			}
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "event: "):
			e.kind = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			e.data += strings.TrimPrefix(line, "data: ")
		case strings.HasPrefix(line, "id: "):
			e.id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "retry: "):
			if ms, err := strconv.Atoi(strings.TrimPrefix(line, "retry: ")); err == nil && ms >= 0 {
				e.retry, e.hasRetry = time.Duration(ms)*time.Millisecond, true
			}
		}
	}
	if err := sc.Err(); err != nil {
		return sseEvent{}, err
	}
	return sseEvent{}, errStreamEnded
}
