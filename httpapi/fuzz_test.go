package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sidelock/sidelock/httpapi"
	"github.com/sidelock/sidelock/internal/config"
	"github.com/sidelock/sidelock/internal/lease"
	"github.com/sidelock/sidelock/internal/sidecar/inprocess"
)

// fuzzTarget is the lock API over in-memory masters, with one lock held
// that no fuzzed request may disturb.
type fuzzTarget struct {
	h     http.Handler
	m     *lease.Manager
	token string
}

func newFuzzTarget(t testing.TB) *fuzzTarget {
	core := inprocess.Start(t, inprocess.Options{Config: func(c *config.Config) { c.KeyPrefix, c.MaxWait = "f:", 0 }})
	m := core.Leases()
	in, err := m.Acquire(context.Background(), lease.Request{Name: "guarded", TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	return &fuzzTarget{h: core.Handler(), m: m, token: in.Token}
}

// serve runs one request and checks the invariants every answer keeps.
func (ft *fuzzTarget) serve(t *testing.T, req *http.Request) *httptest.ResponseRecorder {
	// A held lock streams until its client leaves: leave after a moment.
	ctx, cancel := context.WithTimeout(req.Context(), 20*time.Millisecond)
	defer cancel()
	req = req.WithContext(ctx)
	rec := httptest.NewRecorder()
	ft.h.ServeHTTP(rec, req)
	// A 503 once that moment has passed is its doing (timeout): the 66
	// reads of a read/write lock's inspection can outlast it on a busy
	// machine.
	timedOut := rec.Code == http.StatusServiceUnavailable && ctx.Err() != nil
	if rec.Code >= 500 && !timedOut {
		t.Fatalf("%s %q: status %d: %s", req.Method, req.URL, rec.Code, rec.Body)
	}
	stream := rec.Header().Get("Content-Type") == "text/event-stream"
	if rec.Body.Len() > 0 && !stream && !json.Valid(rec.Body.Bytes()) {
		t.Fatalf("%s %q: body is not JSON: %q", req.Method, req.URL, rec.Body)
	}
	// A grant whose caller left before the answer (the moment above, on a
	// starved machine) is released by deliverGrant and answers nothing: the
	// recorder's 200 is then its default, with no body and nothing to release.
	if rec.Code == http.StatusOK && req.Method == http.MethodPost && !stream && rec.Body.Len() > 0 {
		var body struct {
			Name, Token, Mode string
			Permits           int
			Locks             []json.RawMessage
		}
		_ = json.Unmarshal(rec.Body.Bytes(), &body)
		release := ft.m.Release
		switch {
		case body.Permits > 0:
			release = ft.m.Semaphores().Release
		case body.Mode != "":
			release = ft.m.RWLocks().Release
		case len(body.Locks) > 0:
			release = ft.m.LockSets().Release
		}
		if err := release(context.Background(), body.Name, body.Token); err != nil {
			t.Fatalf("releasing a fuzzed grant: %v", err)
		}
	}
	if _, err := ft.m.Extend(context.Background(), "guarded", ft.token, 0); err != nil {
		t.Fatalf("%s %q disturbed another caller's lock: %v", req.Method, req.URL, err)
	}
	return rec
}

func newRequest(method, target, body string) *http.Request {
	return newRequestIn("/locks/", method, target, body)
}

// newRequestIn is newRequest for a kind's path prefix.
func newRequestIn(prefix, method, target, body string) *http.Request {
	req := httptest.NewRequest(method, "http://127.0.0.1:7420/", strings.NewReader(body))
	req.URL.RawPath = ""
	req.URL.Path = prefix + target
	req.RequestURI = ""
	return req
}

// FuzzAcquireParams throws names, query strings and bodies at acquire.
func FuzzAcquireParams(f *testing.F) {
	f.Add("orders/42", "ttl=5s&owner=w1", "")
	f.Add("guarded", "", `{"ttl":"1m","wait":"0s"}`)
	f.Add("a//b", "ttl=5", `{"ttl":5}`)
	f.Add("x", "wait=1h", `{"owner":"\u0000"}`)
	f.Add("x", "ttl=%zz", "[]")
	f.Add("held", "hold=true&max_hold=2s", "")
	f.Add("x", "", `{"hold":true,"max_hold":"1s"}`)
	f.Add("x", "ttl=1.5&wait=0&max_hold=60", "")
	f.Add("x", "", `{"ttl":5,"wait":0.25,"max_hold":"90"}`)
	f.Add("x", "", `{"ttl":-1e309,"wait":1.0005}`)
	f.Add("x", "mode=shared", "")
	f.Add("x", "", `{"mode":"exclusive"}`)
	ft := newFuzzTarget(f)
	f.Fuzz(func(t *testing.T, name, query, body string) {
		req := newRequest(http.MethodPost, name, body)
		req.URL.RawQuery = query
		ft.serve(t, req)
	})
}

// FuzzSemaphoreParams throws names, query strings and bodies at a
// semaphore's acquire: permits joins the parameters.
func FuzzSemaphoreParams(f *testing.F) {
	f.Add("pool", "permits=3&ttl=5s", "")
	f.Add("pool", "", `{"permits":2,"wait":"0s"}`)
	f.Add("pool", "permits=0", `{"permits":"3"}`)
	f.Add("pool", "permits=65&permits=2", "")
	f.Add("pool", "", `{"permits":-1e309}`)
	f.Add("pool", "permits=1.5&hold=true", "")
	ft := newFuzzTarget(f)
	f.Fuzz(func(t *testing.T, name, query, body string) {
		req := newRequestIn("/semaphores/", http.MethodPost, name, body)
		req.URL.RawQuery = query
		ft.serve(t, req)
	})
}

// FuzzRWLockParams throws names, query strings and bodies at a read/write
// lock's acquire: mode joins the parameters.
func FuzzRWLockParams(f *testing.F) {
	f.Add("cache", "mode=shared&ttl=5s", "")
	f.Add("cache", "", `{"mode":"exclusive","wait":"0s"}`)
	f.Add("cache", "mode=shared", `{"mode":"shared"}`)
	f.Add("cache", "mode=shared&mode=exclusive", "")
	f.Add("cache", "mode=", `{"mode":1}`)
	f.Add("cache", "permits=2&hold=true", "")
	ft := newFuzzTarget(f)
	f.Fuzz(func(t *testing.T, name, query, body string) {
		req := newRequestIn("/rwlocks/", http.MethodPost, name, body)
		req.URL.RawQuery = query
		ft.serve(t, req)
	})
}

// FuzzLockSetParams throws names (several, joined by ","), query strings
// and bodies at a lock set's acquire; a set with the guarded lock must be
// refused without disturbing it.
func FuzzLockSetParams(f *testing.F) {
	f.Add("accounts/1,accounts/2", "ttl=5s&owner=w1", "")
	f.Add("b,guarded,a", "", `{"ttl":"1m","wait":"0s"}`)
	f.Add("a,a", "ttl=5", "")
	f.Add("a,,b", "", `{"ttl":5}`)
	f.Add("a,b/events", "hold=true", "")
	f.Add("a%2Cb", "max_hold=2s", "")
	f.Add("0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16", "", "")
	f.Add("x,y", "permits=2&mode=shared", `{"hold":true}`)
	ft := newFuzzTarget(f)
	f.Fuzz(func(t *testing.T, names, query, body string) {
		req := newRequestIn("/locksets/", http.MethodPost, names, body)
		req.URL.RawQuery = query
		ft.serve(t, req)
	})
}

// FuzzInspectQuery throws query strings at the inspections of a lock (a
// watch among them), of a semaphore, of a read/write lock and of a lock
// set.
func FuzzInspectQuery(f *testing.F) {
	f.Add(uint8(0), "guarded", "")
	f.Add(uint8(0), "guarded", "watch=true")
	f.Add(uint8(0), "x", "watch=1&watch=0")
	f.Add(uint8(1), "pool", "permits=4")
	f.Add(uint8(1), "pool", "permits=99999&watch=true")
	f.Add(uint8(2), "cache", "")
	f.Add(uint8(2), "cache", "mode=shared")
	f.Add(uint8(3), "guarded,x", "")
	f.Add(uint8(3), "x,x", "watch=true")
	ft := newFuzzTarget(f)
	prefixes := []string{"/locks/", "/semaphores/", "/rwlocks/", "/locksets/"}
	f.Fuzz(func(t *testing.T, kind uint8, name, query string) {
		prefix := prefixes[int(kind)%len(prefixes)]
		req := newRequestIn(prefix, http.MethodGet, name, "")
		req.URL.RawQuery = query
		ft.serve(t, req)
	})
}

// FuzzTokenParams throws tokens and ttls at extend and release, including
// the name of a lock held by someone else.
func FuzzTokenParams(f *testing.F) {
	f.Add("guarded", "00000000000000000000000000000000", "ttl=5s", true)
	f.Add("guarded", "nothex", "", false)
	f.Add("x", "", "token=abc", true)
	ft := newFuzzTarget(f)
	f.Fuzz(func(t *testing.T, name, token, query string, extend bool) {
		method := http.MethodDelete
		if extend {
			method = http.MethodPut
		}
		req := newRequest(method, name, "")
		req.URL.RawQuery = query
		if token != "" {
			req.Header.Set("Lock-Token", token)
		}
		rec := ft.serve(t, req)
		if name == "guarded" && token != ft.token && rec.Code < 400 {
			t.Fatalf("a wrong token was accepted: %d", rec.Code)
		}
	})
}

// fuzzAPIToken guards the lock API of FuzzHeaders.
const fuzzAPIToken = "fuzz-api-token-5d1c0e9b7a"

// FuzzHeaders throws Authorization, Lock-Token and Idempotency-Key headers
// (with names, queries and every method) at a token-guarded API. Besides
// the invariants of serve: a request whose Authorization header does not
// carry the API token is refused with 401 and nothing else, and a request
// that carries it exactly is never refused with 401.
func FuzzHeaders(f *testing.F) {
	f.Add(uint8(0), "orders/42", "", "Bearer "+fuzzAPIToken, "", "retry-1")
	f.Add(uint8(1), "guarded", "ttl=5s", "Bearer "+fuzzAPIToken, "00000000000000000000000000000000", "")
	f.Add(uint8(2), "guarded", "", "bearer   "+fuzzAPIToken+"  ", "nothex", "")
	f.Add(uint8(3), "guarded", "", "Basic "+fuzzAPIToken, "", "")
	f.Add(uint8(4), "guarded/events", "", "Bearer "+fuzzAPIToken, "ffffffffffffffffffffffffffffffff", "")
	f.Add(uint8(0), "x", "hold=true", "Bearer\x00"+fuzzAPIToken, "", "\x7f")
	f.Add(uint8(0), "guarded", "wait=0s", "Bearer "+fuzzAPIToken, "", strings.Repeat("k", 129))
	ft := newFuzzTarget(f)
	ft.h = httpapi.RequireToken(fuzzAPIToken, discardLogger())(ft.h)
	methods := []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodGet, http.MethodPatch}
	f.Fuzz(func(t *testing.T, method uint8, name, query, authorization, lockToken, idempotencyKey string) {
		req := newRequest(methods[int(method)%len(methods)], name, "")
		req.URL.RawQuery = query
		req.Header.Set("Authorization", authorization)
		if lockToken != "" {
			req.Header.Set("Lock-Token", lockToken)
		}
		if idempotencyKey != "" {
			req.Header.Set("Idempotency-Key", idempotencyKey)
		}
		rec := ft.serve(t, req)
		carriesToken := strings.Contains(authorization, fuzzAPIToken)
		if !carriesToken && rec.Code != http.StatusUnauthorized {
			t.Fatalf("Authorization %q without the token: %d, want 401", authorization, rec.Code)
		}
		if authorization == "Bearer "+fuzzAPIToken && rec.Code == http.StatusUnauthorized {
			t.Fatalf("the exact token was refused: %s", rec.Body)
		}
		if strings.Contains(rec.Body.String(), fuzzAPIToken) {
			t.Fatalf("the answer echoes the API token: %s", rec.Body)
		}
	})
}
