package httpapi_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/sidelock/sidelock/internal/redistest"
)

// Read/write locks through HTTP, over real masters: the semaphore tests'
// helpers, on /rwlocks.

// rwAPI serves the lock API over real masters, with a node timeout that a
// busy machine meets (see realAPI).
func rwAPI(t *testing.T, masters []*redistest.Server) *httptest.Server {
	return realAPI(t, masters, nil)
}

// side is the part of a read/write lock's lease body these tests read.
type side struct {
	Name  string `json:"name"`
	Token string `json:"token"`
	Owner string `json:"owner"`
	Mode  string `json:"mode"`
	Slot  int    `json:"slot"`
	Fence int64  `json:"fence"`
}

// takeSide POSTs to path and returns the reader or writer granted,
// checking what each side carries: a reader a slot and no fence, a writer
// a fence and no slot.
func takeSide(t *testing.T, srv *httptest.Server, path, body string) side {
	t.Helper()
	r := call(t, srv, "POST", path, body)
	if r.status != http.StatusOK {
		t.Fatalf("POST %s %s: %d %s", path, body, r.status, r.raw)
	}
	return sideOf(t, r.raw)
}

func sideOf(t *testing.T, raw string) side {
	t.Helper()
	var s side
	if err := json.Unmarshal([]byte(raw), &s); err != nil {
		t.Fatal(err)
	}
	reader := s.Mode == "shared" && s.Slot >= 1 && s.Slot <= 64 && s.Fence == 0
	writer := s.Mode == "exclusive" && s.Slot == 0 && s.Fence > 0
	if len(s.Token) != 32 || !reader && !writer {
		t.Fatalf("neither a reader nor a writer: %s", raw)
	}
	return s
}

// rwStatus is the answer of GET /rwlocks/{name}.
type rwStatus struct {
	Name   string `json:"name"`
	Writer *struct {
		Owner string `json:"owner"`
		Fence int64  `json:"fence"`
		Slot  int    `json:"slot"`
	} `json:"writer"`
	Readers []struct {
		Slot  int    `json:"slot"`
		Owner string `json:"owner"`
		Fence int64  `json:"fence"`
	} `json:"readers"`
	ReaderCount   int  `json:"reader_count"`
	WriterWaiting bool `json:"writer_waiting"`
}

func inspectRW(t *testing.T, srv *httptest.Server, name string) rwStatus {
	t.Helper()
	r := call(t, srv, "GET", "/rwlocks/"+name, "")
	var st rwStatus
	if err := json.Unmarshal([]byte(r.raw), &st); err != nil || r.status != http.StatusOK || jsonHas(r.raw, "token") {
		t.Fatalf("inspect %s: %d %s", name, r.status, r.raw)
	}
	return st
}

func rwToken(s side) []string { return []string{"Lock-Token", s.Token} }

// Two readers hold at once (each its own slot, no fence); a writer is
// refused while they do, then, once they are gone, holds alone with a
// fence, and a reader is refused while it does; mode defaults to
// exclusive, the next writer's fence is greater; inspection and the list
// show who holds it and how, without tokens; readers and writers are
// extended and released by their token on /rwlocks only, in a space of
// their own.
func TestRWLockThroughHTTP(t *testing.T) {
	srv := rwAPI(t, redistest.StartN(t, 3))
	a := takeSide(t, srv, "/rwlocks/cache?mode=shared&owner=a", "")
	b := takeSide(t, srv, "/rwlocks/cache", `{"mode":"shared","owner":"b"}`)
	if a.Mode != "shared" || b.Mode != "shared" || a.Slot == b.Slot {
		t.Fatalf("two readers: %+v, %+v", a, b)
	}
	held := call(t, srv, "POST", "/rwlocks/cache?mode=exclusive&owner=w", "")
	if held.status != http.StatusConflict || held.body["code"] != "lock_held" || held.header.Get("Retry-After") == "" {
		t.Fatalf("a writer while readers hold: %d %s (Retry-After %q)", held.status, held.raw, held.header.Get("Retry-After"))
	}

	st := inspectRW(t, srv, "cache")
	if st.Name != "cache" || st.Writer != nil || st.ReaderCount != 2 || len(st.Readers) != 2 || st.WriterWaiting {
		t.Fatalf("inspect with two readers (the refused writer gave up): %+v", st)
	}
	for _, r := range st.Readers {
		want := map[int]side{a.Slot: a, b.Slot: b}[r.Slot]
		if r.Owner != want.Owner || r.Fence != 0 {
			t.Errorf("reader of slot %d: %+v, want owner %q and no fence", r.Slot, r, want.Owner)
		}
	}
	list := call(t, srv, "GET", "/rwlocks", "")
	if rws, _ := list.body["rwlocks"].([]any); len(rws) != 2 || jsonHas(list.raw, "token") || strings.Count(list.raw, `"mode":"shared"`) != 2 {
		t.Fatalf("GET /rwlocks with two readers: %s", list.raw)
	}
	// A space of its own: the lock "cache" is free, and lists nothing.
	if r := call(t, srv, "GET", "/locks/cache", ""); r.body["held"] != false {
		t.Fatalf("the lock cache while the read/write lock cache is read: %s", r.raw)
	}
	for _, wrong := range []struct{ method, path string }{{"PUT", "/locks/cache"}, {"DELETE", "/semaphores/cache"}, {"DELETE", "/rwlocks/other"}} {
		if r := call(t, srv, wrong.method, wrong.path, "", rwToken(a)...); r.status != http.StatusGone || r.body["code"] != "lease_gone" {
			t.Fatalf("%s %s with a reader's token: %d %s", wrong.method, wrong.path, r.status, r.raw)
		}
	}

	if r := call(t, srv, "PUT", "/rwlocks/cache?ttl=40s", "", rwToken(a)...); r.status != http.StatusOK || r.body["mode"] != "shared" || r.body["slot"] != float64(a.Slot) || r.body["ttl"] != "40s" {
		t.Fatalf("extending a reader: %d %s", r.status, r.raw)
	}
	for _, r := range []side{a, b} {
		if got := call(t, srv, "DELETE", "/rwlocks/cache", "", rwToken(r)...); got.status != http.StatusNoContent {
			t.Fatalf("releasing a reader: %d %s", got.status, got.raw)
		}
	}

	w1 := takeSide(t, srv, "/rwlocks/cache?owner=w1", "") // mode defaults to exclusive
	if w1.Mode != "exclusive" {
		t.Fatalf("no mode: %+v, want the writer", w1)
	}
	if r := call(t, srv, "POST", "/rwlocks/cache?mode=shared", ""); r.status != http.StatusConflict || r.body["code"] != "lock_held" {
		t.Fatalf("a reader while a writer holds: %d %s", r.status, r.raw)
	}
	if r := call(t, srv, "POST", "/rwlocks/cache?mode=exclusive", ""); r.status != http.StatusConflict || r.body["code"] != "lock_held" {
		t.Fatalf("a second writer: %d %s", r.status, r.raw)
	}
	st = inspectRW(t, srv, "cache")
	if st.Writer == nil || st.Writer.Owner != "w1" || st.Writer.Fence != w1.Fence || st.Writer.Slot != 0 || st.ReaderCount != 0 || len(st.Readers) != 0 {
		t.Fatalf("inspect with a writer: %+v", st)
	}
	if r := call(t, srv, "PUT", "/rwlocks/cache", "", rwToken(w1)...); r.status != http.StatusOK || r.body["mode"] != "exclusive" || r.body["fence"] != float64(w1.Fence) {
		t.Fatalf("extending the writer: %d %s", r.status, r.raw)
	}
	if r := call(t, srv, "DELETE", "/rwlocks/cache", "", rwToken(w1)...); r.status != http.StatusNoContent {
		t.Fatalf("releasing the writer: %d %s", r.status, r.raw)
	}
	if r := call(t, srv, "DELETE", "/rwlocks/cache", "", rwToken(w1)...); r.status != http.StatusGone {
		t.Fatalf("releasing a released writer: %d %s", r.status, r.raw)
	}
	if w2 := takeSide(t, srv, "/rwlocks/cache", `{"mode":"exclusive"}`); w2.Fence <= w1.Fence {
		t.Fatalf("the next writer's fence %d is not above %d", w2.Fence, w1.Fence)
	}
}

// A writer that waits declares its intent on the masters: while it waits
// a new reader is refused, on another sidecar too, although only readers
// hold the lock (writer preference), and inspection says a writer
// waits; it gets in as soon as the readers release.
func TestRWLockWaitingWriterGoesFirst(t *testing.T) {
	masters := redistest.StartN(t, 3)
	srv, other := rwAPI(t, masters), rwAPI(t, masters)
	reader := takeSide(t, srv, "/rwlocks/schema?mode=shared", "")

	writer := postAsync(t, srv, "/rwlocks/schema?mode=exclusive&wait=5s&owner=migration")
	waitFor(t, "the writer's intent", func() bool { return inspectRW(t, srv, "schema").WriterWaiting })
	for _, s := range []*httptest.Server{srv, other} {
		if r := call(t, s, "POST", "/rwlocks/schema?mode=shared", ""); r.status != http.StatusConflict || r.body["code"] != "lock_held" {
			t.Fatalf("a new reader while a writer waits: %d %s", r.status, r.raw)
		}
	}
	if r := call(t, srv, "DELETE", "/rwlocks/schema", "", rwToken(reader)...); r.status != http.StatusNoContent {
		t.Fatalf("releasing the reader: %d %s", r.status, r.raw)
	}
	got := <-writer
	if got.status != http.StatusOK {
		t.Fatalf("the waiting writer once the reader left: %d %s", got.status, got.raw)
	}
	if w := sideOf(t, got.raw); w.Mode != "exclusive" || w.Owner != "migration" {
		t.Fatalf("the waiting writer got %s", got.raw)
	}
	if st := inspectRW(t, other, "schema"); st.Writer == nil || st.WriterWaiting || st.ReaderCount != 0 {
		t.Fatalf("inspect once the writer got in: %+v", st)
	}
}

// postAsync POSTs to path in a goroutine of its own; its answer comes on
// the channel. The goroutine ends before the test does.
func postAsync(t *testing.T, srv *httptest.Server, path string) <-chan response {
	done := make(chan response, 1)
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	wg.Go(func() {
		var r response
		res, err := srv.Client().Post(srv.URL+path, "", nil)
		if err != nil {
			t.Error(err)
		} else {
			raw, _ := io.ReadAll(res.Body)
			res.Body.Close()
			r = response{status: res.StatusCode, header: res.Header, raw: string(raw)}
		}
		done <- r
	})
	return done
}

// hold=true holds a reader for as long as the connection lives (acquired
// carries mode and slot): a writer waiting for it gets in when the stream
// closes. The writer's events stream ends with released.
func TestRWLockHeldStream(t *testing.T) {
	srv := rwAPI(t, redistest.StartN(t, 3))
	held, closeHeld := openClosable(t, srv, "POST", "/rwlocks/held?mode=shared&hold=true")
	ev := held.next()
	if ev.kind != "acquired" {
		t.Fatalf("a held reader opened with %s %s", ev.kind, ev.data)
	}
	if r := sideOf(t, ev.data); r.Mode != "shared" {
		t.Fatalf("a held reader: %s", ev.data)
	}
	if r := call(t, srv, "POST", "/rwlocks/held", ""); r.status != http.StatusConflict {
		t.Fatalf("a writer while a held reader reads: %d %s", r.status, r.raw)
	}
	closeHeld()
	writer := takeSide(t, srv, "/rwlocks/held?wait=5s&ttl=30s", "")

	events := openStream(t, srv, "GET", "/rwlocks/held/events", rwToken(writer)...)
	if r := call(t, srv, "DELETE", "/rwlocks/held", "", rwToken(writer)...); r.status != http.StatusNoContent {
		t.Fatalf("release: %d %s", r.status, r.raw)
	}
	if ev := events.next(); ev.kind != "released" {
		t.Fatalf("the events of a released writer: %s %s", ev.kind, ev.data)
	}
	if status, _ := reconnect(t, srv, "POST", "/rwlocks/held?mode=shared&hold=true", "Last-Event-ID", "4"); status != http.StatusNoContent {
		t.Fatalf("a held reader's reconnect: %d, want 204", status)
	}
}

// mode is shared or exclusive, on /rwlocks only, once (query or body);
// permits is refused there; a heartbeat, release or events stream takes
// no mode, and the inspection no parameter at all.
func TestRWLockModeIsValidated(t *testing.T) {
	srv := rwAPI(t, redistest.StartN(t, 3))
	for _, c := range []struct {
		method, path, body, code string
	}{
		{"POST", "/rwlocks/p?mode=read", "", "invalid_mode"},
		{"POST", "/rwlocks/p?mode=SHARED", "", "invalid_mode"},
		{"POST", "/rwlocks/p?mode=", "", "invalid_mode"},
		{"POST", "/rwlocks/p", `{"mode":"write"}`, "invalid_mode"},
		{"POST", "/rwlocks/p", `{"mode":1}`, "invalid_body"},
		{"POST", "/rwlocks/p", `{"Mode":"shared"}`, "invalid_body"},
		{"POST", "/locks/p?mode=shared", "", "invalid_mode"},
		{"POST", "/locks/p", `{"mode":"exclusive"}`, "invalid_mode"},
		{"POST", "/semaphores/p?permits=2&mode=shared", "", "invalid_mode"},
		{"POST", "/rwlocks/p?permits=2", "", "invalid_permits"},
		{"POST", "/rwlocks/p?mode=shared", `{"permits":2}`, "invalid_permits"},
		{"POST", "/rwlocks/p?mode=shared&mode=shared", "", "invalid_query"},
		{"POST", "/rwlocks/p?mode=shared", `{"mode":"shared"}`, "invalid_request"},
		{"PUT", "/rwlocks/p?mode=shared&token=" + zeroToken, "", "invalid_request"},
		{"DELETE", "/rwlocks/p", `{"mode":"shared","token":"` + zeroToken + `"}`, "invalid_request"},
		{"GET", "/rwlocks/p/events?mode=shared&token=" + zeroToken, "", "invalid_request"},
		{"GET", "/rwlocks/p?mode=shared", "", "invalid_query"},
		{"GET", "/rwlocks/p?watch=true", "", "invalid_query"},
		{"GET", "/rwlocks/a%252Fb", "", "invalid_name"},
		{"POST", "/rwlocks/job%231?mode=shared", "", "invalid_name"},
	} {
		r := call(t, srv, c.method, c.path, c.body)
		if r.status != http.StatusBadRequest || r.body["code"] != c.code {
			t.Errorf("%s %s %s: %d %v, want 400 %s", c.method, c.path, c.body, r.status, r.body["code"], c.code)
		}
	}
	if r := call(t, srv, "POST", "/locks/p?mode=shared", ""); !strings.Contains(r.raw, "/rwlocks/{name}") {
		t.Errorf("mode on a lock does not say where it applies: %s", r.raw)
	}
	if r := call(t, srv, "POST", "/rwlocks/p?mode=read", ""); !strings.Contains(r.raw, `mode must be \"shared\" or \"exclusive\"`) {
		t.Errorf("a bad mode does not say which are good: %s", r.raw)
	}
	if st := inspectRW(t, srv, "p"); st.Writer != nil || st.ReaderCount != 0 {
		t.Fatalf("a refused request took the read/write lock: %+v", st)
	}
	for _, ok := range []struct{ path, body string }{
		{"/rwlocks/q?mode=shared", ""},
		{"/rwlocks/q", `{"mode":"shared"}`},
		{"/rwlocks/r?mode=exclusive", ""},
	} {
		if r := call(t, srv, "POST", ok.path, ok.body); r.status != http.StatusOK {
			t.Errorf("POST %s %s: %d %s", ok.path, ok.body, r.status, r.raw)
		}
	}
}
