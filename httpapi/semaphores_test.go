package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"
)

// permit is the part of a semaphore's lease body these tests read.
type permit struct {
	Name    string `json:"name"`
	Token   string `json:"token"`
	Owner   string `json:"owner"`
	Fence   int64  `json:"fence"`
	Permits int    `json:"permits"`
	Slot    int    `json:"slot"`
}

// takePermit POSTs to path and returns the permit granted.
func takePermit(t *testing.T, srv *httptest.Server, path string) permit {
	t.Helper()
	r := call(t, srv, "POST", path, "")
	if r.status != http.StatusOK {
		t.Fatalf("POST %s: %d %s", path, r.status, r.raw)
	}
	var p permit
	if err := json.Unmarshal([]byte(r.raw), &p); err != nil {
		t.Fatal(err)
	}
	if len(p.Token) != 32 || p.Fence == 0 {
		t.Fatalf("POST %s: a permit without its token or fence: %s", path, r.raw)
	}
	return p
}

// semaphoreStatus is the answer of GET /semaphores/{name}.
type semaphoreStatus struct {
	Name    string `json:"name"`
	Permits int    `json:"permits"`
	Held    int    `json:"held"`
	Holders []struct {
		Slot  int    `json:"slot"`
		Owner string `json:"owner"`
		Fence int64  `json:"fence"`
		Token string `json:"token"`
	} `json:"holders"`
}

// A semaphore of 2 permits through HTTP: two callers get the two slots
// (each with its token and fence), the third is refused 409 lock_held
// with a hint, inspection and the list show both holders without tokens,
// a permit is extended and released with its token only on /semaphores,
// and the released slot is the next caller's.
func TestSemaphoreThroughHTTP(t *testing.T) {
	srv := newAPI(t)
	a := takePermit(t, srv, "/semaphores/pool?permits=2&owner=a")
	b := takePermit(t, srv, "/semaphores/pool?permits=2&owner=b")
	if a.Permits != 2 || b.Permits != 2 || a.Slot == b.Slot || !slices.Contains([]int{1, 2}, a.Slot) || !slices.Contains([]int{1, 2}, b.Slot) {
		t.Fatalf("two permits of 2: %+v, %+v", a, b)
	}
	full := call(t, srv, "POST", "/semaphores/pool?permits=2&owner=c", "")
	if full.status != http.StatusConflict || full.body["code"] != "lock_held" || full.header.Get("Retry-After") == "" {
		t.Fatalf("a third caller of 2 permits: %d %v (Retry-After %q)", full.status, full.body, full.header.Get("Retry-After"))
	}

	var st semaphoreStatus
	inspect := call(t, srv, "GET", "/semaphores/pool?permits=2", "")
	if err := json.Unmarshal([]byte(inspect.raw), &st); err != nil || inspect.status != http.StatusOK {
		t.Fatalf("inspect: %d %s", inspect.status, inspect.raw)
	}
	if st.Name != "pool" || st.Permits != 2 || st.Held != 2 || len(st.Holders) != 2 || st.Holders[0].Slot != 1 || st.Holders[1].Slot != 2 {
		t.Fatalf("inspect of a full semaphore: %s", inspect.raw)
	}
	for _, h := range st.Holders {
		want := map[int]permit{a.Slot: a, b.Slot: b}[h.Slot]
		if h.Owner != want.Owner || h.Fence != want.Fence || h.Token != "" {
			t.Errorf("holder of slot %d: %+v, want owner %q fence %d and no token", h.Slot, h, want.Owner, want.Fence)
		}
	}
	list := call(t, srv, "GET", "/semaphores", "")
	if sems, _ := list.body["semaphores"].([]any); len(sems) != 2 || jsonHas(list.raw, "token") {
		t.Fatalf("GET /semaphores: %s", list.raw)
	}
	// A space of its own: the lock "pool" is free, and lists nothing.
	if r := call(t, srv, "GET", "/locks/pool", ""); r.body["held"] != false {
		t.Fatalf("the lock pool while the semaphore pool is full: %s", r.raw)
	}
	if r := call(t, srv, "GET", "/locks", ""); r.raw != `{"locks":[]}`+"\n" {
		t.Fatalf("GET /locks with only permits held: %s", r.raw)
	}

	tok := func(p permit) []string { return []string{"Lock-Token", p.Token} }
	if r := call(t, srv, "PUT", "/semaphores/pool?ttl=40s", "", tok(a)...); r.status != http.StatusOK || r.body["slot"] != float64(a.Slot) || r.body["ttl"] != "40s" {
		t.Fatalf("extending a permit: %d %s", r.status, r.raw)
	}
	for _, wrong := range []struct{ method, path string }{{"PUT", "/locks/pool"}, {"DELETE", "/locks/pool"}, {"DELETE", "/semaphores/other"}} {
		if r := call(t, srv, wrong.method, wrong.path, "", tok(a)...); r.status != http.StatusGone || r.body["code"] != "lease_gone" {
			t.Fatalf("%s %s with a permit's token: %d %s", wrong.method, wrong.path, r.status, r.raw)
		}
	}
	if r := call(t, srv, "DELETE", "/semaphores/pool", "", tok(a)...); r.status != http.StatusNoContent {
		t.Fatalf("releasing a permit: %d %s", r.status, r.raw)
	}
	if r := call(t, srv, "DELETE", "/semaphores/pool", "", tok(a)...); r.status != http.StatusGone {
		t.Fatalf("releasing a released permit: %d %s", r.status, r.raw)
	}
	if c := takePermit(t, srv, "/semaphores/pool?permits=2&owner=c"); c.Slot != a.Slot {
		t.Fatalf("the freed slot was %d, the next caller got %d", a.Slot, c.Slot)
	}
}

// jsonHas tells whether a JSON text has a member named key anywhere.
func jsonHas(raw, key string) bool {
	var v any
	if json.Unmarshal([]byte(raw), &v) != nil {
		return false
	}
	var walk func(any) bool
	walk = func(v any) bool {
		switch v := v.(type) {
		case map[string]any:
			if _, ok := v[key]; ok {
				return true
			}
			for _, e := range v {
				if walk(e) {
					return true
				}
			}
		case []any:
			return slices.ContainsFunc(v, walk)
		}
		return false
	}
	return walk(v)
}

// A permit has the lock's streams: hold=true streams it (acquired with
// permits and slot) and frees it when the connection closes; the events
// stream of a heartbeat permit ends with released when it is released.
func TestSemaphoreStreams(t *testing.T) {
	srv := newAPI(t)
	held, closeHeld := openClosable(t, srv, "POST", "/semaphores/one?permits=1&hold=true")
	ev := held.next()
	var p permit
	if err := json.Unmarshal([]byte(ev.data), &p); ev.kind != "acquired" || err != nil || p.Permits != 1 || p.Slot != 1 || p.Token == "" {
		t.Fatalf("a held permit opened with %s %s", ev.kind, ev.data)
	}
	if r := call(t, srv, "POST", "/semaphores/one?permits=1", ""); r.status != http.StatusConflict {
		t.Fatalf("the one permit while held: %d %s", r.status, r.raw)
	}
	closeHeld()
	// Closing the stream frees the permit: a waiter gets it.
	beat := takePermit(t, srv, "/semaphores/one?permits=1&wait=5s&ttl=30s")

	events := openStream(t, srv, "GET", "/semaphores/one/events", "Lock-Token", beat.Token)
	if r := call(t, srv, "DELETE", "/semaphores/one", "", "Lock-Token", beat.Token); r.status != http.StatusNoContent {
		t.Fatalf("release: %d %s", r.status, r.raw)
	}
	if ev := events.next(); ev.kind != "released" {
		t.Fatalf("the events of a released permit: %s %s", ev.kind, ev.data)
	}
	if status, _ := reconnect(t, srv, "POST", "/semaphores/one?permits=1&hold=true", "Last-Event-ID", "4"); status != http.StatusNoContent {
		t.Fatalf("a held permit's reconnect: %d, want 204", status)
	}
}

// permits is required on /semaphores, refused on /locks, an integer
// within [1, 64] in the query or the body, once; a permit's heartbeat,
// release and events take no permits; inspection needs them.
func TestSemaphorePermitsAreValidated(t *testing.T) {
	srv := newAPI(t)
	for _, c := range []struct {
		method, path, body, code string
	}{
		{"POST", "/semaphores/p", "", "invalid_permits"},
		{"POST", "/locks/p?permits=2", "", "invalid_permits"},
		{"POST", "/locks/p", `{"permits":2}`, "invalid_permits"},
		{"POST", "/semaphores/p?permits=0", "", "invalid_permits"},
		{"POST", "/semaphores/p?permits=65", "", "invalid_permits"},
		{"POST", "/semaphores/p?permits=abc", "", "invalid_permits"},
		{"POST", "/semaphores/p?permits=-1", "", "invalid_permits"},
		{"POST", "/semaphores/p?permits=00002", "", "invalid_permits"},
		{"POST", "/semaphores/p", `{"permits":2.5}`, "invalid_permits"},
		{"POST", "/semaphores/p", `{"permits":true}`, "invalid_body"},
		{"POST", "/semaphores/p?permits=2&permits=2", "", "invalid_query"},
		{"POST", "/semaphores/p?permits=2", `{"permits":2}`, "invalid_request"},
		{"PUT", "/semaphores/p?permits=2&token=" + zeroToken, "", "invalid_request"},
		{"DELETE", "/semaphores/p?permits=2&token=" + zeroToken, "", "invalid_request"},
		{"GET", "/semaphores/p/events?permits=2&token=" + zeroToken, "", "invalid_request"},
		{"GET", "/semaphores/p", "", "invalid_permits"},
		{"GET", "/semaphores/p?permits=0", "", "invalid_permits"},
		{"GET", "/semaphores/p?permits=65", "", "invalid_permits"},
		{"GET", "/semaphores/p?permits=2&permits=2", "", "invalid_query"},
		{"GET", "/semaphores/p?permits=2&owner=x", "", "invalid_query"},
		{"GET", "/semaphores/a%252Fb?permits=2", "", "invalid_name"},
		{"POST", "/semaphores/job%231?permits=2", "", "invalid_name"},
	} {
		r := call(t, srv, c.method, c.path, c.body)
		if r.status != http.StatusBadRequest || r.body["code"] != c.code {
			t.Errorf("%s %s %s: %d %v, want 400 %s", c.method, c.path, c.body, r.status, r.body["code"], c.code)
		}
	}
	for _, ok := range []struct{ path, body string }{
		{"/semaphores/q?permits=64", ""},
		{"/semaphores/r?permits=0003", ""},
		{"/semaphores/s", `{"permits":3}`},
		{"/semaphores/t", `{"permits":"3"}`},
	} {
		if r := call(t, srv, "POST", ok.path, ok.body); r.status != http.StatusOK {
			t.Errorf("POST %s %s: %d %s", ok.path, ok.body, r.status, r.raw)
		}
	}
}

// A sidecar refuses permits that differ from those of its own holders of
// the semaphore (409 permits_mismatch, with or without an
// Idempotency-Key), and takes them again once those holders are gone.
func TestSemaphorePermitsMismatch(t *testing.T) {
	srv := newAPI(t)
	key := []string{"Idempotency-Key", "semaphore-test-key-0001"}
	first := call(t, srv, "POST", "/semaphores/m?permits=2&ttl=30s", "", key...)
	if first.status != http.StatusOK {
		t.Fatalf("first permit: %d %s", first.status, first.raw)
	}
	if again := call(t, srv, "POST", "/semaphores/m?permits=2&ttl=30s", "", key...); again.body["token"] != first.body["token"] {
		t.Fatalf("an idempotent retry of a permit: %s, first %s", again.raw, first.raw)
	}
	if r := call(t, srv, "POST", "/semaphores/m?permits=2&ttl=31s", "", key...); r.status != http.StatusUnprocessableEntity {
		t.Fatalf("the key with another ttl: %d %s", r.status, r.raw)
	}
	for _, header := range [][]string{nil, key} {
		r := call(t, srv, "POST", "/semaphores/m?permits=3&ttl=30s", "", header...)
		if r.status != http.StatusConflict || r.body["code"] != "permits_mismatch" {
			t.Fatalf("other permits (headers %v): %d %s", header, r.status, r.raw)
		}
	}
	if r := call(t, srv, "DELETE", "/semaphores/m", "", "Lock-Token", first.body["token"].(string)); r.status != http.StatusNoContent {
		t.Fatalf("release: %d %s", r.status, r.raw)
	}
	if r := call(t, srv, "POST", "/semaphores/m?permits=3", ""); r.status != http.StatusOK {
		t.Fatalf("other permits once the holders are gone: %d %s", r.status, r.raw)
	}
}

// streamBound bounds every stream these tests open: an event that never
// comes fails the test ("stream ended") instead of hanging it.
const streamBound = 10 * time.Second

// openClosable is openStream with a close of its own, to end the
// stream mid-test (the handler sees its request's context end), and a
// bound on its whole life.
func openClosable(t *testing.T, srv *httptest.Server, method, path string, header ...string) (*sseStream, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), streamBound)
	req, _ := http.NewRequestWithContext(ctx, method, srv.URL+path, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := srv.Client().Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	closeIt := func() { cancel(); res.Body.Close() }
	t.Cleanup(closeIt)
	if ct := res.Header.Get("Content-Type"); res.StatusCode != http.StatusOK || ct != "text/event-stream" {
		t.Fatalf("%s %s: %d %s", method, path, res.StatusCode, ct)
	}
	return &sseStream{t: t, sc: bufio.NewScanner(res.Body)}, closeIt
}
