//go:build linux

package spec

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sidelock/sidelock/internal/redistest"
)

// TestRealAnswersMatchTheSpec drives the built sidecar over three real
// masters through every answer the spec documents, checks each answer
// (status, Content-Type, documented headers, body, every event of every
// stream) against httpapi/openapi.json with kin-openapi, runs the npm
// clients (a generated openapi-fetch client, the eventsource package)
// through a checking proxy, and then requires coverage both ways: every
// documented (path, method, status), problem code and event was seen, and
// nothing was seen that the spec does not document.
func TestRealAnswersMatchTheSpec(t *testing.T) {
	bin := buildSidecar(t)
	masters := startMasters(t)
	c := newChecker(t)
	// A: the defaults, but a 3s key TTL so that failing renewals show as
	// expiring and lost within seconds.
	a := startSidecar(t, bin, masters, "SIDELOCK_KEY_PREFIX=spec-a:", "SIDELOCK_KEY_TTL=3s")
	// B: an API token and tiny limits, for 401 and 429.
	b := startSidecar(t, bin, masters, "SIDELOCK_KEY_PREFIX=spec-b:", "SIDELOCK_API_TOKEN="+bTokenValue,
		"SIDELOCK_MAX_LOCKS=1", "SIDELOCK_MAX_WAITERS=1")

	api := &caller{t: t, hc: c.client(lockAPI), base: a.api}
	admin := &caller{t: t, hc: c.client(adminAPI), base: a.admin}
	steps := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"lifecycle", func(t *testing.T) { exerciseLifecycle(t, api) }},
		{"semaphores", func(t *testing.T) { exerciseSemaphoreLifecycle(t, api) }},
		{"rwlocks", func(t *testing.T) { exerciseRWLockLifecycle(t, api) }},
		{"locksets", func(t *testing.T) { exerciseLockSetLifecycle(t, api) }},
		{"bad input", func(t *testing.T) { exerciseBadInput(t, api); exerciseKindsBadInput(t, api) }},
		{"streams", func(t *testing.T) { exerciseStreams(t, api) }},
		{"watch", func(t *testing.T) { exerciseWatch(t, api) }},
		{"watch cap", func(t *testing.T) { exerciseWatchCap(t, api) }},
		{"router", func(t *testing.T) { exerciseRouter(t, api, admin) }},
		{"headers too large", func(t *testing.T) { exerciseHeadersTooLarge(t, c, api, admin) }},
		{"admin", func(t *testing.T) { exerciseAdmin(t, admin) }},
		{"auth and limits", func(t *testing.T) {
			exerciseAuthAndLimits(t, &caller{t: t, hc: c.client(lockAPI), base: b.api, bearer: bTokenValue},
				&caller{t: t, hc: c.client(adminAPI), base: b.admin})
		}},
		{"shutdown", func(t *testing.T) {
			exerciseShutdown(t, b, &caller{t: t, hc: c.client(lockAPI), base: b.api, bearer: bTokenValue},
				&caller{t: t, hc: c.client(adminAPI), base: b.admin})
		}},
		{"npm clients", func(t *testing.T) { runNodeClients(t, c, a) }},
		{"no quorum", func(t *testing.T) { exerciseNoQuorum(t, api, admin, masters) }},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			api.t, admin.t = t, t
			s.run(t)
			c.report(t)
		})
	}
	api.t, admin.t = t, t
	c.report(t)
	t.Run("coverage", func(t *testing.T) { c.checkCoverage(t) })
}

// bTokenValue is sidecar B's SIDELOCK_API_TOKEN (16-1024 printable bytes).
const bTokenValue = "spec-harness-token-0123456789"

func exerciseLifecycle(t *testing.T, api *caller) {
	api.expect(http.StatusOK, "", "GET", "/locks", nil, "")
	lease := api.require(http.StatusOK, "POST", "/locks/spec/life?ttl=10s&owner=spec", nil, "")
	token := lease.field("token")
	held := api.expect(http.StatusConflict, "lock_held", "POST", "/locks/spec/life", nil, "")
	if held.header.Get("Retry-After") == "" {
		t.Error("409 without Retry-After")
	}
	api.expect(http.StatusOK, "", "GET", "/locks/spec/life", nil, "")
	api.expect(http.StatusOK, "", "GET", "/locks", nil, "")
	api.expect(http.StatusOK, "", "PUT", "/locks/spec/life", hdr{"Lock-Token": token}, "")
	api.expect(http.StatusOK, "", "PUT", "/locks/spec/life", nil, `{"token":"`+token+`","ttl":"20s"}`)

	events, closeEvents := api.stream("GET", "/locks/spec/life/events", hdr{"Lock-Token": token})
	api.expect(http.StatusNoContent, "", "DELETE", "/locks/spec/life", hdr{"Lock-Token": token}, "")
	waitForEvent(t, events, "released", 10*time.Second)
	closeEvents()

	api.expect(http.StatusGone, "lease_gone", "DELETE", "/locks/spec/life", hdr{"Lock-Token": token}, "")
	api.expect(http.StatusGone, "lease_gone", "PUT", "/locks/spec/life", hdr{"Lock-Token": token}, "")
	api.expect(http.StatusGone, "lease_gone", "GET", "/locks/spec/life/events", hdr{"Lock-Token": token}, "")
	// A standard SSE client's reconnect to an ended lease: 204 stops it.
	api.expect(http.StatusNoContent, "", "GET", "/locks/spec/life/events", hdr{"Lock-Token": token, "Last-Event-ID": "3"}, "")
	api.expect(http.StatusNoContent, "", "POST", "/locks/spec/life?hold=true", hdr{"Last-Event-ID": "1"}, "")
	// The name sent as a generated client sends it.
	escaped := api.require(http.StatusOK, "POST", "/locks/spec%2Fescaped?ttl=5s", nil, "")
	api.expect(http.StatusNoContent, "", "DELETE", "/locks/spec/escaped", hdr{"Lock-Token": escaped.field("token")}, "")
}

// exerciseBadInput provokes every 400 code and 413 and 422, on every
// operation that documents them.
func exerciseBadInput(t *testing.T, api *caller) {
	tok := hdr{"Lock-Token": strings.Repeat("0", 32)}
	for _, bad := range []struct{ code, method, path string }{
		{"invalid_name", "POST", "/locks/a%252Fb"},
		{"invalid_name", "PUT", "/locks/a%20b"},
		{"invalid_name", "DELETE", "/locks/a/../b"},
		{"invalid_name", "GET", "/locks/a%252Fb"},
		{"invalid_name", "GET", "/locks/a%252Fb/events"},
		{"invalid_ttl", "POST", "/locks/spec/bad?ttl=soon"},
		{"invalid_wait", "POST", "/locks/spec/bad?wait=forever"},
		{"invalid_max_hold", "POST", "/locks/spec/bad?max_hold=always"},
		{"invalid_hold", "POST", "/locks/spec/bad?hold=maybe"},
		{"invalid_query", "POST", "/locks/spec/bad?colour=red"},
		{"invalid_query", "GET", "/locks/spec/bad?colour=red"},
		{"missing_token", "PUT", "/locks/spec/bad"},
		{"missing_token", "DELETE", "/locks/spec/bad"},
		{"missing_token", "GET", "/locks/spec/bad/events"},
		{"invalid_token", "PUT", "/locks/spec/bad?token=xyz"},
	} {
		api.expect(http.StatusBadRequest, bad.code, bad.method, bad.path, nil, "")
	}
	api.expect(http.StatusBadRequest, "invalid_body", "POST", "/locks/spec/bad", nil, `{"TTL":"1h"}`)
	api.expect(http.StatusBadRequest, "invalid_request", "POST", "/locks/spec/bad?ttl=5s", nil, `{"ttl":"5s"}`)
	api.expect(http.StatusBadRequest, "invalid_ttl", "POST", "/locks/spec/bad?ttl=9999h", nil, "")

	big := `{"owner":"` + strings.Repeat("x", 70<<10) + `"}`
	for _, method := range []string{"POST", "PUT", "DELETE"} {
		api.expect(http.StatusRequestEntityTooLarge, "body_too_large", method, "/locks/spec/big", tok, big)
	}
	api.expect(http.StatusRequestEntityTooLarge, "body_too_large", "GET", "/locks/spec/big/events", tok, big)
	api.expect(http.StatusBadRequest, "invalid_owner", "POST", "/locks/spec/bad?owner=%01", nil, "")

	key := hdr{"Idempotency-Key": "spec-harness-key-0001"}
	first := api.require(http.StatusOK, "POST", "/locks/spec/idem?ttl=10s", key, "")
	api.expect(http.StatusUnprocessableEntity, "idempotency_mismatch", "POST", "/locks/spec/idem?ttl=20s", key, "")
	api.expect(http.StatusNoContent, "", "DELETE", "/locks/spec/idem", hdr{"Lock-Token": first.field("token")}, "")

	// GET /locks, /semaphores, /rwlocks and /locksets take no input:
	// ambiguous framing is their only 400.
	for _, target := range []struct{ method, path string }{
		{"POST", "/locks/smuggled"}, {"GET", "/locks"}, {"POST", "/semaphores/smuggled?permits=2"}, {"GET", "/semaphores"},
		{"POST", "/rwlocks/smuggled?mode=shared"}, {"GET", "/rwlocks"}, {"POST", "/locksets/smuggled/a,smuggled/b"}, {"GET", "/locksets"},
	} {
		req, _ := http.NewRequest(target.method, api.base+target.path, nil)
		r := raw(t, api.base, target.method+" "+target.path+" HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", req)
		api.hc.Transport.(*validating).checker.check(lockAPI, req, r.status, r.header, r.body)
		if r.status != http.StatusBadRequest || r.problemCode() != "ambiguous_framing" {
			t.Errorf("%s %s with Content-Length and Transfer-Encoding: got %d %q, want 400 ambiguous_framing", target.method, target.path, r.status, r.problemCode())
		}
	}
}

// exerciseStreams opens the lease streams of every kind, of a lock, a
// permit and a reader, and reads them to their end (exerciseStreamsOf).
func exerciseStreams(t *testing.T, api *caller) {
	for _, k := range kinds {
		exerciseStreamsOf(t, api, k)
	}
}

// exerciseRouter: paths and methods the spec has no operation for get the
// router's problems, on both listeners.
func exerciseRouter(t *testing.T, api, admin *caller) {
	api.expect(http.StatusNotFound, "not_found", "GET", "/nowhere", nil, "")
	api.expect(http.StatusMethodNotAllowed, "method_not_allowed", "PATCH", "/locks/spec/x", nil, "")
	api.expect(http.StatusMethodNotAllowed, "method_not_allowed", "POST", "/locks", nil, "")
	api.expect(http.StatusMethodNotAllowed, "method_not_allowed", "PATCH", "/semaphores/spec/x", nil, "")
	api.expect(http.StatusMethodNotAllowed, "method_not_allowed", "POST", "/semaphores", nil, "")
	api.expect(http.StatusMethodNotAllowed, "method_not_allowed", "PATCH", "/rwlocks/spec/x", nil, "")
	api.expect(http.StatusMethodNotAllowed, "method_not_allowed", "POST", "/rwlocks", nil, "")
	api.expect(http.StatusMethodNotAllowed, "method_not_allowed", "PATCH", "/locksets/spec/x,spec/y", nil, "")
	api.expect(http.StatusMethodNotAllowed, "method_not_allowed", "POST", "/locksets", nil, "")
	admin.expect(http.StatusNotFound, "not_found", "GET", "/locks", nil, "")
	admin.expect(http.StatusMethodNotAllowed, "method_not_allowed", "POST", "/healthz", nil, "")
}

func exerciseAdmin(t *testing.T, admin *caller) {
	admin.expect(http.StatusOK, "", "GET", "/healthz", nil, "")
	admin.expect(http.StatusOK, "", "GET", "/readyz", nil, "")
	m := admin.expect(http.StatusOK, "", "GET", "/metrics", nil, "")
	if !strings.Contains(string(m.body), "sidelock_locks_held") {
		t.Errorf("/metrics lacks sidelock_locks_held")
	}
}

// exerciseAuthAndLimits runs against sidecar B: every operation without
// the bearer token is 401; past SIDELOCK_MAX_LOCKS=1 and
// SIDELOCK_MAX_WAITERS=1 an acquire is 429.
func exerciseAuthAndLimits(t *testing.T, b, bAdmin *caller) {
	anon := &caller{t: t, hc: b.hc, base: b.base}
	tok := hdr{"Lock-Token": strings.Repeat("0", 32)}
	for _, op := range []struct{ method, path string }{
		{"GET", "/locks"}, {"POST", "/locks/spec/b"}, {"PUT", "/locks/spec/b"}, {"DELETE", "/locks/spec/b"},
		{"GET", "/locks/spec/b"}, {"GET", "/locks/spec/b/events"}, {"GET", "/locks/spec/b?watch=true"},
		{"GET", "/semaphores"}, {"POST", "/semaphores/spec/b?permits=2"}, {"PUT", "/semaphores/spec/b"}, {"DELETE", "/semaphores/spec/b"},
		{"GET", "/semaphores/spec/b?permits=2"}, {"GET", "/semaphores/spec/b/events"},
		{"GET", "/rwlocks"}, {"POST", "/rwlocks/spec/b?mode=shared"}, {"PUT", "/rwlocks/spec/b"}, {"DELETE", "/rwlocks/spec/b"},
		{"GET", "/rwlocks/spec/b"}, {"GET", "/rwlocks/spec/b/events"},
		{"GET", "/locksets"}, {"POST", "/locksets/spec/b,spec/c"}, {"PUT", "/locksets/spec/b,spec/c"}, {"DELETE", "/locksets/spec/b,spec/c"},
		{"GET", "/locksets/spec/b,spec/c"}, {"GET", "/locksets/spec/b,spec/c/events"},
	} {
		r := anon.expect(http.StatusUnauthorized, "unauthorized", op.method, op.path, tok, "")
		if r.header.Get("WWW-Authenticate") == "" {
			t.Errorf("%s %s: 401 without WWW-Authenticate", op.method, op.path)
		}
	}

	first := b.require(http.StatusOK, "POST", "/locks/spec/b/one?ttl=30s", nil, "")
	b.expect(http.StatusTooManyRequests, "too_many_locks", "POST", "/locks/spec/b/two?ttl=30s", nil, "")
	b.expect(http.StatusTooManyRequests, "too_many_locks", "POST", "/semaphores/spec/b/two?permits=2&ttl=30s", nil, "")
	b.expect(http.StatusTooManyRequests, "too_many_locks", "POST", "/rwlocks/spec/b/two?mode=shared&ttl=30s", nil, "")
	b.expect(http.StatusTooManyRequests, "too_many_locks", "POST", "/locksets/spec/b/two,spec/b/three?ttl=30s", nil, "")

	// One waiter fills SIDELOCK_MAX_WAITERS=1; once it waits, the next is refused.
	waiter := make(chan reply, 1)
	go func() { waiter <- b.do("POST", "/locks/spec/b/one?ttl=30s&wait=20s", nil, "") }()
	waitForGauge(t, bAdmin, "sidelock_waiters", 1)
	b.expect(http.StatusTooManyRequests, "too_many_waiters", "POST", "/locks/spec/b/one?ttl=30s&wait=5s", nil, "")
	b.expect(http.StatusNoContent, "", "DELETE", "/locks/spec/b/one", hdr{"Lock-Token": first.field("token")}, "")
	// The waiter is granted the released lock; releasing it frees B's one slot.
	granted := <-waiter
	b.expect(http.StatusNoContent, "", "DELETE", "/locks/spec/b/one", hdr{"Lock-Token": granted.field("token")}, "")
}

// exerciseShutdown sends SIGTERM to sidecar B while a caller waits for a
// held lock: the waiter is answered 503 shutting_down before the process
// exits.
func exerciseShutdown(t *testing.T, side *sidecar, b, bAdmin *caller) {
	b.require(http.StatusOK, "POST", "/locks/spec/b/bye?ttl=30s", nil, "")
	answered := make(chan reply, 1)
	go func() { answered <- b.do("POST", "/locks/spec/b/bye?ttl=30s&wait=20s", nil, "") }()
	waitForGauge(t, bAdmin, "sidelock_waiters", 1)
	if err := side.proc.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-answered:
		if r.status != http.StatusServiceUnavailable || r.problemCode() != "shutting_down" {
			t.Errorf("a waiter at SIGTERM: got %d %q, want 503 shutting_down", r.status, r.problemCode())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the waiter had no answer 20s after SIGTERM")
	}
}

// exerciseNoQuorum kills two of the three masters under live leases, of
// locks, permits, readers and lock sets, and a watch: the lease streams warn (expiring)
// and end (lost), the watch says unavailable, acquire and inspect answer
// 503, and /readyz turns 503. PUT and DELETE are logged, not asserted: a
// heartbeat that cannot confirm on a quorum answers 200 with the earlier
// valid_until (lease.extend), and a lost lease is 410 — neither is a 503,
// which is why the spec lists none for them.
func exerciseNoQuorum(t *testing.T, api, admin *caller, masters []*redistest.Server) {
	type leaseStreams struct {
		k            leaseKind
		hold, events *sseReader
		token        hdr
	}
	var all []leaseStreams
	for _, k := range kinds {
		hold, _ := api.stream("POST", k.acquire("spec/nq/held", "hold=true&ttl=30s"), nil)
		nextEvent(t, hold, 10*time.Second) // acquired
		lease := api.require(http.StatusOK, "POST", k.acquire("spec/nq/beat", "ttl=30s"), nil, "")
		token := hdr{"Lock-Token": lease.field("token")}
		events, _ := api.stream("GET", k.path("spec/nq/beat")+"/events", token)
		all = append(all, leaseStreams{k, hold, events, token})
	}
	watch, _ := api.stream("GET", "/locks/spec/nq/held?watch=true", nil)
	nextEvent(t, watch, 10*time.Second) // state

	masters[0].Kill()
	masters[1].Kill()
	for _, s := range all {
		put := api.do("PUT", s.k.path("spec/nq/beat"), s.token, "")
		t.Logf("PUT %s without a quorum: %d %s", s.k.prefix, put.status, put.problemCode())
		api.expect(http.StatusServiceUnavailable, "no_quorum", "POST", s.k.acquire("spec/nq/other", ""), nil, "")
	}
	api.expect(http.StatusServiceUnavailable, "no_quorum", "GET", "/locks/spec/nq/other", nil, "")
	api.expect(http.StatusServiceUnavailable, "no_quorum", "GET", "/semaphores/spec/nq/other?permits=2", nil, "")
	api.expect(http.StatusServiceUnavailable, "no_quorum", "GET", "/rwlocks/spec/nq/other", nil, "")
	api.expect(http.StatusServiceUnavailable, "no_quorum", "GET", locksetKind.path("spec/nq/other"), nil, "")
	waitForEvent(t, watch, "unavailable", 15*time.Second)
	for _, s := range all {
		for _, stream := range []*sseReader{s.hold, s.events} {
			waitForEvent(t, stream, "expiring", 15*time.Second)
			waitForEvent(t, stream, "lost", 15*time.Second)
		}
		del := api.do("DELETE", s.k.path("spec/nq/beat"), s.token, "")
		t.Logf("DELETE %s of a lost lease without a quorum: %d %s", s.k.prefix, del.status, del.problemCode())
	}

	deadline := time.Now().Add(15 * time.Second)
	for admin.do("GET", "/readyz", nil, "").status != http.StatusServiceUnavailable {
		if time.Now().After(deadline) {
			t.Fatal("/readyz still not 503 15s after two of three masters died")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// checkCoverage: every documented answer, problem code and event was seen,
// unless listed in notProvoked with the reason.
func (c *checker) checkCoverage(t *testing.T) {
	for _, a := range c.documented() {
		if c.seen[a] == 0 {
			why, ok := notProvoked[a]
			if !ok {
				why, ok = statusesNotProvoked[a.status]
			}
			if ok {
				t.Logf("not provoked (allowed): %v: %s", a, why)
				continue
			}
			t.Errorf("documented but never seen: %v", a)
		}
	}
	for _, code := range c.documentedCodes() {
		if c.codes[code] == 0 {
			if why, ok := codesNotProvoked[code]; ok {
				t.Logf("code not provoked (allowed): %s: %s", code, why)
				continue
			}
			t.Errorf("problem code %q is documented but was never seen", code)
		}
	}
	for ev, why := range c.undocumentedEvents {
		t.Errorf("event %v was seen: %s", ev, why)
	}
	for _, ev := range c.documentedEvents() {
		if c.events[ev] == 0 {
			t.Errorf("event %v is documented but was never seen", ev)
		}
	}
	t.Logf("seen: %d documented answers, codes %v, events %v; outside the spec's operations: %v", len(c.seen), c.codes, c.events, c.outside)
}

// runNodeClients runs the npm tests (js/*.test.mjs) against sidecar A
// through a proxy that checks their answers too.
func runNodeClients(t *testing.T, c *checker, a *sidecar) {
	proxy := httptest.NewServer(c.proxy(a.api))
	t.Cleanup(proxy.Close)
	runNode(t, proxy.URL)
}

// waitForGauge polls an unlabelled gauge of /metrics until it reads want.
func waitForGauge(t *testing.T, admin *caller, name string, want float64) {
	t.Helper()
	line := fmt.Sprintf("%s %g", name, want)
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		m := admin.do("GET", "/metrics", nil, "")
		if slices.Contains(strings.Split(string(m.body), "\n"), line) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("/metrics never showed %q", line)
		}
	}
}

// exerciseHeadersTooLarge sends headers over the HTTP server's limit to
// every operation that documents 431, on its own listener. Each is sent
// raw and read at once: net/http answers and closes such a connection
// unread, and an HTTP client may see the reset before the answer. They run
// together: the server lingers half a second on each before closing.
func exerciseHeadersTooLarge(t *testing.T, c *checker, api, admin *caller) {
	// Over MaxHeaderBytes (16 KiB) plus the 4 KiB net/http allows beyond it.
	huge := hdr{"X-Padding": strings.Repeat("p", 24<<10)}
	type sent struct {
		a   answer
		l   listener
		req *http.Request
		r   reply
		err error
	}
	var all []*sent
	var wg sync.WaitGroup
	for _, a := range c.documented() {
		if a.status != http.StatusRequestHeaderFieldsTooLarge {
			continue
		}
		on, l := api, lockAPI
		if c.listenerOf(c.doc.Paths.Find(a.path)) == adminAPI {
			on, l = admin, adminAPI
		}
		s := &sent{a: a, l: l, req: on.request(context.Background(), a.method, strings.ReplaceAll(a.path, "{name}", "spec/huge"), huge, "")}
		all = append(all, s)
		wg.Go(func() { s.r, s.err = rawRequest(s.req, on.base) })
	}
	wg.Wait()
	for _, s := range all {
		if s.err != nil {
			t.Errorf("%v with 24 KiB of headers: %v", s.a, s.err)
			continue
		}
		c.check(s.l, s.req, s.r.status, s.r.header, s.r.body)
		if s.r.status != s.a.status {
			t.Errorf("%v with 24 KiB of headers: got %d", s.a, s.r.status)
		}
	}
}
