package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"time"
)

// Change is one change of a watched lock, as the sidecar saw it.
type Change struct {
	// Kind is "state" (the whole state: first, and again after every
	// reconnect or outage), "acquired" (a new holder; a holder replaced
	// without a free moment between is just another "acquired"),
	// "released" (the lock is free) or "unavailable" (the masters, or
	// the sidecar itself, cannot be read: the state is unknown until the
	// next "state").
	Kind string
	Name string
	// Held says whether the lock is held: the state's for "state", true
	// for "acquired", false for "released" and "unavailable" (unknown).
	Held bool
	// Owner, Fence, ValidUntil and Since describe the holder while Held.
	// Since is when the sidecar first saw this holder, not its grant.
	Owner      string
	Fence      int64
	ValidUntil time.Time
	Since      time.Time
	// Reason is a release's: "released" (announced) or "expired" (the
	// holder's keys lapsed, or the announcement was missed).
	Reason string
	// Detail says why the state is "unavailable".
	Detail string
}

// changeData is the data of every watch event; each uses some members.
type changeData struct {
	Name       string    `json:"name"`
	Held       bool      `json:"held"`
	Owner      string    `json:"owner"`
	Fence      int64     `json:"fence"`
	ValidUntil time.Time `json:"valid_until"`
	Since      time.Time `json:"since"`
	Reason     string    `json:"reason"`
	Detail     string    `json:"detail"`
}

// Watch follows a lock's changes over one event stream, reconnecting
// when it breaks, until its context ends.
type Watch struct {
	c       *Client
	name    string
	changes chan Change
	done    chan struct{}
	err     error // why it ended; set before done is closed

	lastID     string        // the last event id seen: a reconnect's Last-Event-ID
	retry      time.Duration // the stream's reconnection delay
	lastKind   string        // the last change delivered
	lastBroken error         // why the stream last broke, for its "unavailable"
}

// defaultRetry is the reconnection delay until a stream says otherwise
// (the sidecar's own retry: 1000).
const defaultRetry = time.Second

// Watch starts following name (no token needed: anyone may watch). The
// first "state" follows on Changes. It fails at once if the sidecar
// cannot be reached or refuses the watch (429 too_many_watchers, ...);
// later, a broken stream is reconnected (with Last-Event-ID, after the
// stream's retry delay) until ctx ends, with an "unavailable" change
// meanwhile and a fresh "state" once it is back. Cancel ctx to stop.
func (c *Client) Watch(ctx context.Context, name string) (*Watch, error) {
	w := &Watch{c: c, name: name, changes: make(chan Change), done: make(chan struct{}), retry: defaultRetry}
	stream, err := w.connect(ctx)
	if err != nil {
		return nil, err
	}
	go w.run(ctx, stream)
	return w, nil
}

// Changes delivers the changes in order; it is closed when the watch
// ends. The stream is not read while a change waits to be taken, so a
// slow reader delays, but never misses, the changes.
func (w *Watch) Changes() <-chan Change { return w.changes }

// Done is closed when the watch has ended.
func (w *Watch) Done() <-chan struct{} { return w.done }

// Err waits for the watch to end and says why: ctx's error, or the
// sidecar's refusal of a reconnect that retrying cannot mend (400, 401,
// 404, ...).
func (w *Watch) Err() error {
	<-w.done
	return w.err
}

func (w *Watch) run(ctx context.Context, stream io.ReadCloser) {
	defer close(w.done)
	defer close(w.changes)
	for {
		w.lastBroken = w.follow(ctx, stream)
		if ctx.Err() != nil {
			w.err = ctx.Err()
			return
		}
		if !w.deliver(ctx, Change{Kind: "unavailable", Name: w.name, Detail: "the sidecar's stream broke: " + w.lastBroken.Error()}) {
			w.err = ctx.Err()
			return
		}
		var err error
		if stream, err = w.reconnect(ctx); err != nil {
			w.err = err
			return
		}
	}
}

// follow delivers the stream's changes until it breaks or ctx ends.
func (w *Watch) follow(ctx context.Context, stream io.ReadCloser) error {
	defer stream.Close()
	sc := bufio.NewScanner(stream)
	for {
		ev, err := nextEvent(sc)
		if err != nil {
			return err
		}
		if ev.hasRetry {
			w.retry = ev.retry
		}
		if ev.id != "" {
			w.lastID = ev.id
		}
		ch, err := parseChange(ev)
		if err != nil {
			return err
		}
		if !w.deliver(ctx, ch) {
			return ctx.Err()
		}
	}
}

// deliver hands a change to the reader; false if ctx ended first. A
// second "unavailable" in a row (an outage the stream reported, then the
// stream broke) says nothing new and is dropped.
func (w *Watch) deliver(ctx context.Context, ch Change) bool {
	if ch.Kind == "unavailable" && w.lastKind == "unavailable" {
		return true
	}
	select {
	case w.changes <- ch:
		w.lastKind = ch.Kind
		return true
	case <-ctx.Done():
		return false
	}
}

// reconnect opens the stream again, after the stream's retry delay,
// until it is open, ctx ends, or the sidecar refuses it for good.
func (w *Watch) reconnect(ctx context.Context) (io.ReadCloser, error) {
	for {
		t := time.NewTimer(w.retry)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
		stream, err := w.connect(ctx)
		if err == nil || ctx.Err() != nil || permanent(err) {
			return stream, err
		}
	}
}

// connect opens the watch stream, resuming after the last event seen;
// the caller closes what it returns.
func (w *Watch) connect(ctx context.Context) (io.ReadCloser, error) {
	header := http.Header{"Accept": {"text/event-stream"}}
	if w.lastID != "" {
		header.Set("Last-Event-ID", w.lastID)
	}
	res, err := w.c.send(ctx, http.MethodGet, locks.path(w.name), url.Values{"watch": {"true"}}, header)
	if err != nil {
		return nil, err
	}
	if mt, _, _ := mime.ParseMediaType(res.Header.Get("Content-Type")); res.StatusCode != http.StatusOK || mt != "text/event-stream" {
		res.Body.Close()
		return nil, &notAStream{status: res.Status, contentType: res.Header.Get("Content-Type")}
	}
	return res.Body, nil
}

// notAStream is a 2xx answer that is not a watch stream (a sidecar
// without watches would inspect and answer JSON).
type notAStream struct{ status, contentType string }

func (e *notAStream) Error() string {
	return fmt.Sprintf("sidelock: the watch answered %s %q, not an event stream", e.status, e.contentType)
}

// permanent says whether a failed reconnect cannot succeed by retrying:
// a refusal of the request itself (4xx but 408 and 429) or an answer
// that is no stream. Connection errors, 5xx, 408 and 429 are retried.
func permanent(err error) bool {
	var apiErr *Error
	if errors.As(err, &apiErr) {
		s := apiErr.Status
		return s >= 400 && s < 500 && s != http.StatusRequestTimeout && s != http.StatusTooManyRequests
	}
	var nas *notAStream
	return errors.As(err, &nas)
}

// parseChange turns a watch event into a Change.
func parseChange(ev sseEvent) (Change, error) {
	var d changeData
	if err := json.Unmarshal([]byte(ev.data), &d); err != nil {
		return Change{}, fmt.Errorf("sidelock: decoding the %q event: %w", ev.kind, err)
	}
	ch := Change{Kind: ev.kind, Name: d.Name, Held: d.Held, Owner: d.Owner, Fence: d.Fence,
		ValidUntil: d.ValidUntil, Since: d.Since, Reason: d.Reason, Detail: d.Detail}
	switch ev.kind {
	case "acquired":
		ch.Held = true
	case "released", "unavailable":
		ch.Held = false
	}
	return ch, nil
}
