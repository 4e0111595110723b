package httpapi

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/sidelock/sidelock/internal/lease"
)

// Server-sent events: a held lock (POST ?hold=true) and a lease's event
// stream (GET /locks/{name}/events) both answer text/event-stream with
// events "acquired" (hold only), "renewed", "expiring" (renewals keep
// failing: stop by its valid_until unless renewed first), and finally
// "released" or "lost" with a reason. A "lost" at shutdown carries the
// valid_until that still stands: the keys are left to lapse then.

// eventsSuffix ends the path of a lease's event stream.
const eventsSuffix = "/events"

// sse writes one stream; every event is flushed at once.
type sse struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

func startSSE(w http.ResponseWriter) *sse {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	s := &sse{w: w, rc: http.NewResponseController(w)}
	_ = s.rc.Flush()
	return s
}

// send writes one event; an error means the client is gone.
func (s *sse) send(event string, data any) error {
	payload, err := json.Marshal(data)
	if err != nil {
		return err
	}
	if _, err := s.w.Write([]byte("event: " + event + "\ndata: " + string(payload) + "\n\n")); err != nil {
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
func serveHold(w http.ResponseWriter, r *http.Request, leases *lease.Manager, info lease.Info) {
	defer func() { _ = leases.Release(context.WithoutCancel(r.Context()), info.Name, info.Token) }()
	events, cancel, err := leases.Watch(info.Name, info.Token)
	s := startSSE(w)
	if s.send("acquired", leaseJSON(info)) != nil {
		return
	}
	if err != nil { // ended between the grant and the subscription
		_ = s.send("lost", endedData{Name: info.Name, Reason: "ended"})
		return
	}
	defer cancel()
	relay(r.Context(), s, info.Name, events)
}

func handleEvents(log *slog.Logger, leases *lease.Manager) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tr, err := readTokenRequest(r, false)
		if err != nil {
			writeError(w, log, err)
			return
		}
		events, cancel, err := leases.Watch(tr.name, tr.token)
		if err != nil {
			writeError(w, log, err)
			return
		}
		defer cancel()
		s := startSSE(w)
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
