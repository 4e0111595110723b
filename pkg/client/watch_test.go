package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

// sse writes events as the sidecar frames them, and flushes.
func sse(w http.ResponseWriter, lines ...string) {
	for _, l := range lines {
		io.WriteString(w, l+"\n")
	}
	w.(http.Flusher).Flush()
}

func streamHeader(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
}

// next takes the watch's next change, failing after 5s.
func next(t *testing.T, w *Watch) Change {
	t.Helper()
	select {
	case ch, ok := <-w.Changes():
		if !ok {
			t.Fatalf("Changes closed: %v", w.Err())
		}
		return ch
	case <-time.After(5 * time.Second):
		t.Fatal("no change within 5s")
	}
	return Change{}
}

// stopWatch cancels a watch and waits until its goroutine has ended.
func stopWatch(t *testing.T, cancel context.CancelFunc, w *Watch) {
	t.Helper()
	cancel()
	if err := w.Err(); !errors.Is(err, context.Canceled) {
		t.Errorf("the watch ended with %v, want context.Canceled", err)
	}
}

// Every event kind is parsed, and the request is GET /locks/{name}?watch=true.
func TestWatchParsesEveryKind(t *testing.T) {
	c, seen := recordingServer(t, func(w http.ResponseWriter, r *http.Request) {
		streamHeader(w)
		sse(w, "retry: 1000", "",
			"id: 1", "event: state", `data: {"name":"jobs/a","held":true,"owner":"p1","fence":4,"valid_until":"2030-01-01T00:00:10Z","since":"2030-01-01T00:00:00Z"}`, "",
			": keep-alive", "",
			"id: 2", "event: released", `data: {"name":"jobs/a","reason":"expired"}`, "",
			"id: 3", "event: acquired", `data: {"name":"jobs/a","owner":"p2","fence":5,"valid_until":"2030-01-01T00:00:20Z","since":"2030-01-01T00:00:11Z"}`, "",
			"id: 4", "event: unavailable", `data: {"name":"jobs/a","detail":"no quorum"}`, "",
			"id: 5", "event: state", `data: {"name":"jobs/a","held":false}`, "")
		<-r.Context().Done()
	})
	ctx, cancel := context.WithCancel(context.Background())
	w, err := c.Watch(ctx, "jobs/a")
	if err != nil {
		t.Fatal(err)
	}
	defer stopWatch(t, cancel, w)
	at := func(s string) time.Time { return time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).Add(mustDuration(s)) }
	for i, want := range []Change{
		{Kind: "state", Name: "jobs/a", Held: true, Owner: "p1", Fence: 4, ValidUntil: at("10s"), Since: at("0s")},
		{Kind: "released", Name: "jobs/a", Reason: "expired"},
		{Kind: "acquired", Name: "jobs/a", Held: true, Owner: "p2", Fence: 5, ValidUntil: at("20s"), Since: at("11s")},
		{Kind: "unavailable", Name: "jobs/a", Detail: "no quorum"},
		{Kind: "state", Name: "jobs/a"},
	} {
		if got := next(t, w); !sameChange(got, want) {
			t.Errorf("change %d: %+v, want %+v", i, got, want)
		}
	}
	if got := <-seen; got.method != "GET" || got.path != "/locks/jobs/a" || got.query != "watch=true" || got.lastEventID != "" {
		t.Errorf("request %+v", got)
	}
}

func mustDuration(s string) time.Duration {
	d, err := time.ParseDuration(s)
	if err != nil {
		panic(err)
	}
	return d
}

func sameChange(a, b Change) bool {
	return a.Kind == b.Kind && a.Name == b.Name && a.Held == b.Held && a.Owner == b.Owner && a.Fence == b.Fence &&
		a.ValidUntil.Equal(b.ValidUntil) && a.Since.Equal(b.Since) && a.Reason == b.Reason && a.Detail == b.Detail
}

// A broken stream is reconnected with the last event id, after the
// stream's retry delay; meanwhile an "unavailable" change says the state
// is unknown, and the sidecar's fresh "state" follows.
func TestWatchReconnectsWithLastEventID(t *testing.T) {
	var calls atomic.Int32
	var broke, back atomic.Int64 // when the stream broke, when it was back (UnixNano)
	c, seen := recordingServer(t, func(w http.ResponseWriter, r *http.Request) {
		streamHeader(w)
		if calls.Add(1) == 1 {
			sse(w, "retry: 5", "",
				"id: 1", "event: state", `data: {"name":"n","held":true,"owner":"p1","fence":1}`, "",
				"id: 2", "event: acquired", `data: {"name":"n","owner":"p2","fence":2}`, "")
			broke.Store(time.Now().UnixNano())
			return // the stream breaks
		}
		back.Store(time.Now().UnixNano())
		sse(w, "retry: 1000", "", "id: 3", "event: state", `data: {"name":"n","held":true,"owner":"p2","fence":2}`, "")
		<-r.Context().Done()
	})
	ctx, cancel := context.WithCancel(context.Background())
	w, err := c.Watch(ctx, "n")
	if err != nil {
		t.Fatal(err)
	}
	defer stopWatch(t, cancel, w)
	var kinds []string
	for range 4 {
		ch := next(t, w)
		kinds = append(kinds, fmt.Sprintf("%s:%s", ch.Kind, ch.Owner))
	}
	if want := "[state:p1 acquired:p2 unavailable: state:p2]"; fmt.Sprint(kinds) != want {
		t.Errorf("changes %v, want %s", kinds, want)
	}
	first, second := <-seen, <-seen
	if first.lastEventID != "" || second.lastEventID != "2" {
		t.Errorf("Last-Event-ID %q then %q, want none then 2", first.lastEventID, second.lastEventID)
	}
	// The stream's retry (5ms), not the default second, paced the reconnect.
	if gap := time.Duration(back.Load() - broke.Load()); gap >= defaultRetry/2 {
		t.Errorf("reconnected %v after the break; the stream asked for 5ms", gap)
	}
}

// A reconnect that the sidecar refuses for now (429, 503) is tried again;
// one it refuses for good (400) ends the watch with that error.
func TestWatchRetriesTransientRefusalsAndStopsOnPermanentOnes(t *testing.T) {
	var calls atomic.Int32
	c, _ := recordingServer(t, func(w http.ResponseWriter, r *http.Request) {
		switch calls.Add(1) {
		case 1:
			streamHeader(w)
			sse(w, "retry: 1", "", "id: 1", "event: state", `data: {"name":"n","held":false}`, "")
		case 2:
			problem(w, http.StatusTooManyRequests, "too_many_watchers", 0)
		case 3:
			problem(w, http.StatusServiceUnavailable, "shutting_down", 0)
		default:
			problem(w, http.StatusBadRequest, "invalid_query", 0)
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel) // before the server's Close, which waits for the watch's requests
	w, err := c.Watch(ctx, "n")
	if err != nil {
		t.Fatal(err)
	}
	if ch := next(t, w); ch.Kind != "state" {
		t.Fatalf("first change %+v", ch)
	}
	if ch := next(t, w); ch.Kind != "unavailable" {
		t.Fatalf("after the break: %+v", ch)
	}
	select {
	case ch, ok := <-w.Changes():
		if ok {
			t.Fatalf("a change after the permanent refusal: %+v", ch)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the watch did not end within 5s of a permanent refusal")
	}
	var apiErr *Error
	if err := w.Err(); !errors.As(err, &apiErr) || apiErr.Code != "invalid_query" || calls.Load() != 4 {
		t.Errorf("ended with %v after %d requests, want invalid_query after 4", err, calls.Load())
	}
}

// The first connection's failure is Watch's own error: a refusal with its
// code, or an answer that is not a stream (a sidecar without watches).
func TestWatchFailsAtOnceWhenTheFirstConnectionFails(t *testing.T) {
	c, _ := recordingServer(t, func(w http.ResponseWriter, r *http.Request) {
		problem(w, http.StatusTooManyRequests, "too_many_watchers", 1000)
	})
	if _, err := c.Watch(context.Background(), "n"); !hasCode(err, "too_many_watchers") {
		t.Errorf("Watch: %v, want too_many_watchers", err)
	}
	c, _ = recordingServer(t, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"name":"n","held":false}`)
	})
	var nas *notAStream
	if _, err := c.Watch(context.Background(), "n"); !errors.As(err, &nas) {
		t.Errorf("Watch of a JSON answer: %v, want notAStream", err)
	}
}

// A reader that stops reading holds the stream back, not the changes
// away; cancelling ends the watch even then.
func TestWatchWaitsForItsReaderAndEndsOnCancel(t *testing.T) {
	c, _ := recordingServer(t, func(w http.ResponseWriter, r *http.Request) {
		streamHeader(w)
		for i := 1; i <= 3; i++ {
			sse(w, fmt.Sprintf("id: %d", i), "event: acquired", fmt.Sprintf(`data: {"name":"n","owner":"p%d","fence":%d}`, i, i), "")
		}
		<-r.Context().Done()
	})
	ctx, cancel := context.WithCancel(context.Background())
	w, err := c.Watch(ctx, "n")
	if err != nil {
		t.Fatal(err)
	}
	for i := int64(1); i <= 2; i++ {
		if ch := next(t, w); ch.Fence != i {
			t.Fatalf("change %+v, want fence %d", ch, i)
		}
	}
	stopWatch(t, cancel, w) // the third change is never taken
	select {
	case <-w.Done():
	default:
		t.Error("Done not closed after Err returned")
	}
}
