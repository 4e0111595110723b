package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

// sseEvent is one server-sent event as a standard client sees it.
type sseEvent struct {
	id    uint64
	kind  string
	data  string
	retry string // the last retry: line seen before this event
}

// sseStream reads the events of one stream, checking the framing a
// standard SSE client relies on.
type sseStream struct {
	t     *testing.T
	sc    *bufio.Scanner
	retry string
}

func (s *sseStream) next() sseEvent {
	s.t.Helper()
	var e sseEvent
	idSeen := false
	for s.sc.Scan() {
		line := s.sc.Text()
		switch {
		case line == "" && e.kind != "":
			if !idSeen {
				s.t.Fatalf("event %s %s has no id", e.kind, e.data)
			}
			e.retry = s.retry
			return e
		case strings.HasPrefix(line, "retry: "):
			s.retry = strings.TrimPrefix(line, "retry: ")
		case strings.HasPrefix(line, "id: "):
			n, err := strconv.ParseUint(strings.TrimPrefix(line, "id: "), 10, 64)
			if err != nil {
				s.t.Fatalf("id line %q is not a sequence number", line)
			}
			e.id, idSeen = n, true
		case strings.HasPrefix(line, "event: "):
			e.kind = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			e.data = strings.TrimPrefix(line, "data: ")
		}
	}
	s.t.Fatalf("stream ended: %v", s.sc.Err())
	return e
}

// openStream sends a request expected to answer an event stream.
func openStream(t *testing.T, srv *httptest.Server, method, path string, header ...string) *sseStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, method, srv.URL+path, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); res.Body.Close() })
	if ct := res.Header.Get("Content-Type"); res.StatusCode != 200 || ct != "text/event-stream" {
		t.Fatalf("%s %s: %d %s", method, path, res.StatusCode, ct)
	}
	return &sseStream{t: t, sc: bufio.NewScanner(res.Body)}
}

// reconnect sends a request as a reconnecting SSE client would, with a
// deadline: a server that wrongly answers with a stream fails the test
// instead of hanging it.
func reconnect(t *testing.T, srv *httptest.Server, method, path string, header ...string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, srv.URL+path, nil)
	req.Header.Set("Accept", "text/event-stream")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	c := &http.Client{Transport: srv.Client().Transport, Timeout: 3 * time.Second}
	res, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("%s %s: %d, then %v (%q)", method, path, res.StatusCode, err, body)
	}
	return res.StatusCode, string(body)
}

// readUntilEnd reads events until released or lost, checking that ids
// (sequence numbers: nothing secret) increase by one from first, a retry
// was announced, and no renewed event
// repeats the valid_until of the previous acquired or renewed one.
func readUntilEnd(t *testing.T, s *sseStream, first uint64) (events []sseEvent, renewed int) {
	t.Helper()
	var lastValid string
	for want := first; ; want++ {
		e := s.next()
		events = append(events, e)
		if e.id != want {
			t.Fatalf("event %s: id %d, want %d", e.kind, e.id, want)
		}
		if e.retry == "" {
			t.Fatalf("event %s before any retry: line", e.kind)
		}
		var d struct {
			ValidUntil string `json:"valid_until"`
		}
		if err := json.Unmarshal([]byte(e.data), &d); err != nil {
			t.Fatalf("event %s: %v", e.kind, err)
		}
		switch e.kind {
		case "acquired":
			lastValid = d.ValidUntil
		case "renewed":
			if d.ValidUntil == lastValid {
				t.Fatalf("renewed event %d repeats valid_until %s", e.id, d.ValidUntil)
			}
			lastValid = d.ValidUntil
			renewed++
		case "expiring":
			lastValid = ""
		case "released", "lost":
			return events, renewed
		}
	}
}

// A held stream announces a retry and numbers its events; a renewal whose
// valid_until is capped by max_hold (so does not move) is not sent again.
// After the cap ends the lease, a reconnect as EventSource makes it
// (Last-Event-ID) gets 204 and acquires nothing.
func TestHoldStreamIdsRetryAndNoRepeatedValidUntil(t *testing.T) {
	srv := newAPI(t)
	// key ttl 1s: a renewal every 333ms; from about 1.1s on every
	// renewal's valid_until is the max_hold cap, the same each time.
	s := openStream(t, srv, "POST", "/locks/capped?hold=true&ttl=1s&max_hold=2s")
	events, renewed := readUntilEnd(t, s, 1)
	if events[0].kind != "acquired" || events[0].retry != "1000" {
		t.Fatalf("first event %+v", events[0])
	}
	last := events[len(events)-1]
	if last.kind != "lost" || !strings.Contains(last.data, `"reason":"max_hold"`) {
		t.Fatalf("last event %+v", last)
	}
	if renewed < 2 {
		t.Fatalf("only %d renewed events", renewed)
	}

	status, body := reconnect(t, srv, "POST", "/locks/capped?hold=true&ttl=1s&max_hold=2s",
		"Last-Event-ID", strconv.FormatUint(last.id, 10))
	if status != 204 || body != "" {
		t.Fatalf("reconnect after lost: %d %q, want 204 and nothing acquired", status, body)
	}
	if st := call(t, srv, "GET", "/locks/capped", ""); st.status != 200 || st.body["held"] != false {
		t.Fatalf("lock after the refused reconnect: %d %v", st.status, st.body)
	}
	if got := call(t, srv, "POST", "/locks/capped", ""); got.status != 200 {
		t.Fatalf("another caller could not take the lock: %d %v", got.status, got.body)
	}
}

// POST ?hold=true with Last-Event-ID never acquires, even while the lock
// is free and whatever the id (or none): the held lease it followed ended
// with its connection.
func TestHoldReconnectIsRefusedWith204(t *testing.T) {
	srv := newAPI(t)
	for _, id := range []string{"1", "", "not-a-number"} {
		if status, body := reconnect(t, srv, "POST", "/locks/r?hold=true", "Last-Event-ID", id); status != 204 || body != "" {
			t.Fatalf("Last-Event-ID %q: %d %q", id, status, body)
		}
		if st := call(t, srv, "GET", "/locks/r", ""); st.body["held"] != false {
			t.Fatalf("Last-Event-ID %q: the reconnect acquired: %v", id, st.body)
		}
	}
	// Without the header it is an ordinary held acquisition.
	s := openStream(t, srv, "POST", "/locks/r?hold=true")
	if e := s.next(); e.kind != "acquired" || e.id != 1 {
		t.Fatalf("first event %+v", e)
	}
}

// GET /locks/{name}/events: a reconnect resumes while the lease lives
// (ids continue after Last-Event-ID), and gets 204 once it has ended; a
// renewal capped by the lease's own end is not repeated.
func TestEventsReconnectResumesOrEnds(t *testing.T) {
	srv := newAPI(t)
	tok := call(t, srv, "POST", "/locks/hb?ttl=1m", "").body["token"].(string)
	s := openStream(t, srv, "GET", "/locks/hb/events", "Lock-Token", tok, "Last-Event-ID", "41")
	if got := call(t, srv, "DELETE", "/locks/hb", "", "Lock-Token", tok); got.status != 204 {
		t.Fatalf("release: %d", got.status)
	}
	if e := s.next(); e.kind != "released" || e.id != 42 || e.retry != "1000" {
		t.Fatalf("resumed stream event %+v", e)
	}
	if status, body := reconnect(t, srv, "GET", "/locks/hb/events", "Lock-Token", tok, "Last-Event-ID", "42"); status != 204 || body != "" {
		t.Fatalf("reconnect to an ended lease: %d %q", status, body)
	}
	// Without Last-Event-ID an ended lease stays 410, as before.
	if got := call(t, srv, "GET", "/locks/hb/events", "", "Lock-Token", tok); got.status != 410 {
		t.Fatalf("events of an ended lease: %d", got.status)
	}

	// ttl 1s and no heartbeat: renewals every 333ms all end at the
	// lease's end, so only the first is news.
	tok = call(t, srv, "POST", "/locks/short?ttl=1s", "").body["token"].(string)
	s = openStream(t, srv, "GET", "/locks/short/events", "Lock-Token", tok)
	start := time.Now()
	events, renewed := readUntilEnd(t, s, 1)
	if last := events[len(events)-1]; last.kind != "lost" || !strings.Contains(last.data, `"reason":"expired"`) {
		t.Fatalf("last event %+v", last)
	}
	if renewed == 0 {
		t.Fatalf("no renewed event in %v", time.Since(start))
	}
}
