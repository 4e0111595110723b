package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sidelock/sidelock/internal/lease"
	"github.com/sidelock/sidelock/internal/watch"
)

// Server-sent events: a held lock (POST ?hold=true) and a lease's event
// stream (GET /locks/{name}/events) both answer text/event-stream with
// events "acquired" (hold only), "renewed", "expiring" (renewals keep
// failing: stop by its valid_until unless renewed first), and finally
// "released" or "lost" with a reason. A "lost" at shutdown carries the
// valid_until that still stands: the keys are left to lapse then.
//
// Standard SSE clients (EventSource) reconnect on their own when a stream
// ends, sending the last event id they saw. So every stream opens with a
// deliberate retry, every event has an id (a sequence number of the
// stream, never anything secret such as the token), and a request that
// carries Last-Event-ID is a reconnect: if the lease it followed has
// ended, it gets 204 No Content, which makes EventSource stop for good.
// A reconnect never acquires: a held lease lives exactly as long as its
// connection, so POST ?hold=true with Last-Event-ID is always 204 (see
// handleAcquire); GET .../events resumes while the lease lives.

// retryMillis is the reconnect delay streams announce. Nothing relies on
// it to stop a client (the 204 above does): it is short so that a client
// whose event stream of a live lease broke resumes within a second and
// misses little, and a reconnect to an ended lease learns at once.
const retryMillis = 1000

// lastEventIDHeader marks a reconnect of a standard SSE client.
const lastEventIDHeader = "Last-Event-ID"

// isReconnect reports whether r resumes an earlier stream. A present but
// empty header counts too: never guess a fresh start.
func isReconnect(r *http.Request) bool {
	_, ok := r.Header[http.CanonicalHeaderKey(lastEventIDHeader)]
	return ok
}

// eventsSuffix ends the path of a lease's event stream.
const eventsSuffix = "/events"

// sse writes one stream; every event is flushed at once.
type sse struct {
	w  http.ResponseWriter
	rc *http.ResponseController
	id uint64 // of the last event written
	// lastValid is the valid_until of the last acquired or renewed event
	// written: a renewal that did not move it (capped by the lease's end
	// or max_hold) is not written again.
	lastValid time.Time
}

// startSSE opens a stream whose event ids follow the request's
// Last-Event-ID when that is a number (a resumed stream), else start at 1.
func startSSE(w http.ResponseWriter, r *http.Request) *sse {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	s := &sse{w: w, rc: http.NewResponseController(w)}
	if n, err := strconv.ParseUint(r.Header.Get(lastEventIDHeader), 10, 63); err == nil {
		s.id = n
	}
	if _, err := w.Write([]byte("retry: " + strconv.Itoa(retryMillis) + "\n\n")); err == nil {
		_ = s.rc.Flush()
	}
	return s
}

// send writes one event with the stream's next id; an error means the
// client is gone.
func (s *sse) send(event string, data any) error {
	payload, err := json.Marshal(data)
	if err != nil {
		return err
	}
	s.id++
	if _, err := s.w.Write([]byte("id: " + strconv.FormatUint(s.id, 10) + "\nevent: " + event + "\ndata: " + string(payload) + "\n\n")); err != nil {
		return err
	}
	return s.rc.Flush()
}

type renewedData struct {
	Name       string    `json:"name"`
	ValidUntil time.Time `json:"valid_until"`
}

type endedData struct {
	Name   string `json:"name"`
	Reason string `json:"reason"`
	// ValidUntil is the promise that still stands after a shutdown.
	ValidUntil *time.Time `json:"valid_until,omitempty"`
}

// relay streams a lease's events until it ends or the client leaves.
func relay(ctx context.Context, s *sse, name string, events <-chan lease.Event) {
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-events:
			if !ok {
				return
			}
			if e.Kind != lease.EventEnded {
				if e.Kind == lease.EventRenewed && e.ValidUntil.Equal(s.lastValid) {
					continue // nothing new to tell: no duplicate valid_until
				}
				s.lastValid = time.Time{} // a renewed after expiring is news
				if e.Kind == lease.EventRenewed {
					s.lastValid = e.ValidUntil
				}
				if s.send(string(e.Kind), renewedData{Name: name, ValidUntil: e.ValidUntil.UTC()}) != nil {
					return
				}
				continue
			}
			_ = s.send(endEvent(e.Reason), endedData{Name: name, Reason: string(e.Reason), ValidUntil: optionalTime(e.ValidUntil)})
			return
		}
	}
}

// reasonEndedUnseen is the reason of a lost event for a held lease that
// ended between its grant and the stream's subscription to its events,
// which therefore never saw why (lease.EndReason names every other).
const reasonEndedUnseen = "ended"

// endEvent is "released" for an end the caller asked for, "lost" for any
// other: the lock is gone and the caller must stop acting on it.
func endEvent(r lease.EndReason) string {
	if r == lease.EndReleased {
		return "released"
	}
	return "lost"
}

// serveHold streams a lock held for as long as this connection lives: it
// is released on the masters as soon as the client goes away.
func serveHold(w http.ResponseWriter, r *http.Request, leases leaseAPI, info lease.Info) {
	defer func() { _ = leases.Release(context.WithoutCancel(r.Context()), info.Name, info.Token) }()
	events, cancel, err := leases.Watch(info.Name, info.Token)
	s := startSSE(w, r)
	s.lastValid = info.ValidUntil
	if s.send("acquired", leaseJSON(info)) != nil {
		return
	}
	if err != nil { // ended between the grant and the subscription
		_ = s.send("lost", endedData{Name: info.Name, Reason: reasonEndedUnseen})
		return
	}
	defer cancel()
	relay(r.Context(), s, info.Name, events)
}

func handleEvents(log *slog.Logger, k kind) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tr, err := readTokenRequest(r, k, opEvents)
		if err != nil {
			writeError(w, log, err)
			return
		}
		events, cancel, err := k.api.Watch(tr.name, tr.token)
		if errors.Is(err, lease.ErrLeaseGone) && isReconnect(r) {
			// The lease this client followed has ended: 204 stops
			// EventSource, where 410 would only make it report an error.
			w.WriteHeader(http.StatusNoContent)
			return
		}
		if err != nil {
			writeError(w, log, err)
			return
		}
		defer cancel()
		s := startSSE(w, r)
		if _, err := s.w.Write([]byte(": watching " + tr.name + "\n\n")); err == nil {
			_ = s.rc.Flush()
		}
		relay(r.Context(), s, tr.name, events)
	})
}

// byEventsSuffix sends GET /locks/{name}/events to the event stream and
// every other GET /locks/{name} to inspection.
func byEventsSuffix(events, inspect http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, eventsSuffix) {
			events.ServeHTTP(w, r)
			return
		}
		inspect.ServeHTTP(w, r)
	})
}

// serveWatch streams a lock's holder to anyone (GET /locks/{name}?watch=true):
// "state" first, then "acquired", "released" and "unavailable" as package
// watch reports them. A reconnect (Last-Event-ID) resumes the ids and
// starts again with the state: nothing of a lock's past is replayed.
func serveWatch(w http.ResponseWriter, r *http.Request, log *slog.Logger, watches *watch.Hub, name string) {
	changes, cancel, err := watches.Subscribe(name)
	if err != nil {
		writeError(w, log, err)
		return
	}
	defer cancel()
	s := startSSE(w, r)
	for {
		select {
		case <-r.Context().Done():
			return
		case c, ok := <-changes:
			if !ok || s.send(string(c.Kind), watchJSON(name, c)) != nil {
				return
			}
		}
	}
}
