package httpapi_test

import (
	"bufio"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"
)

// readEvent reads one server-sent event (name and data).
func readEvent(t *testing.T, sc *bufio.Scanner) (string, string) {
	t.Helper()
	var kind, data string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "" && kind != "":
			return kind, data
		case strings.HasPrefix(line, "event: "):
			kind = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			data = strings.TrimPrefix(line, "data: ")
		}
	}
	t.Fatalf("stream ended: %v", sc.Err())
	return "", ""
}

// A held lock streams "acquired", needs no heartbeat, and is free again
// as soon as the client's connection closes.
func TestHoldStreamsAndReleasesOnClose(t *testing.T) {
	srv := newAPI(t)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+"/locks/held?hold=true&ttl=1s", nil)
	res, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if ct := res.Header.Get("Content-Type"); ct != "text/event-stream" || res.StatusCode != 200 {
		t.Fatalf("%d %s", res.StatusCode, ct)
	}
	sc := bufio.NewScanner(res.Body)
	if kind, data := readEvent(t, sc); kind != "acquired" || !strings.Contains(data, `"token"`) || !strings.Contains(data, `"fence"`) {
		t.Fatalf("first event %s %s", kind, data)
	}
	time.Sleep(1500 * time.Millisecond) // past the 1s ttl, no heartbeat
	if got := call(t, srv, "POST", "/locks/held", ""); got.status != 409 {
		t.Fatalf("a held lock lapsed without heartbeats: %d", got.status)
	}
	cancel()
	res.Body.Close()
	deadline := time.Now().Add(2 * time.Second)
	for call(t, srv, "POST", "/locks/held", "").status != 200 {
		if time.Now().After(deadline) {
			t.Fatal("not free after the holding connection closed")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// GET /locks/{name}/events streams a plain lease's end.
func TestEventsStreamOfAHeartbeatLease(t *testing.T) {
	srv := newAPI(t)
	tok := call(t, srv, "POST", "/locks/jobs/7?ttl=1m", "").body["token"].(string)
	req, _ := http.NewRequest("GET", srv.URL+"/locks/jobs/7/events", nil)
	req.Header.Set("Lock-Token", tok)
	res, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("events: %d", res.StatusCode)
	}
	if got := call(t, srv, "DELETE", "/locks/jobs/7", "", "Lock-Token", tok); got.status != 204 {
		t.Fatalf("release: %d", got.status)
	}
	kind, data := readEvent(t, bufio.NewScanner(res.Body))
	if kind != "released" || !strings.Contains(data, `"reason":"released"`) {
		t.Fatalf("event %s %s", kind, data)
	}
	if got := call(t, srv, "GET", "/locks/jobs/7/events", "", "Lock-Token", tok); got.status != 410 {
		t.Fatalf("events of an ended lease: %d", got.status)
	}
	if got := call(t, srv, "POST", "/locks/jobs/events", ""); got.status != 400 || got.body["code"] != "invalid_name" {
		t.Fatalf("a name ending in events: %d %v", got.status, got.body)
	}
}

func TestHoldParamsAreValidated(t *testing.T) {
	srv := newAPI(t)
	for _, c := range []struct{ path, body, code string }{
		{"/locks/x?hold=maybe", "", "invalid_hold"},
		{"/locks/x", `{"hold":"yes"}`, "invalid_hold"},
		{"/locks/x", `{"hold":3}`, "invalid_body"},
		{"/locks/x?max_hold=forever", "", "invalid_max_hold"},
		{"/locks/x?hold=true", `{"hold":true}`, "invalid_request"},
	} {
		if got := call(t, srv, "POST", c.path, c.body); got.status != 400 || got.body["code"] != c.code {
			t.Errorf("%s %s: %d %v, want %s", c.path, c.body, got.status, got.body["code"], c.code)
		}
	}
	if got := call(t, srv, "POST", "/locks/x", `{"hold":false,"max_hold":"1m"}`); got.status != 200 {
		t.Fatalf("JSON hold=false: %d %v", got.status, got.body)
	}
}
