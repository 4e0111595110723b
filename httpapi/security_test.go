package httpapi_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sidelock/sidelock/httpapi"
	"github.com/sidelock/sidelock/internal/config"
	"github.com/sidelock/sidelock/internal/lease"
	"github.com/sidelock/sidelock/internal/sidecar"
	"github.com/sidelock/sidelock/internal/sidecar/inprocess"
)

const apiToken = "test-api-token-7f3a9c1e5b2d"

// newGuardedAPI serves the lock API behind RequireToken, with small limits,
// logging at debug level into logs.
func newGuardedAPI(t testing.TB, cfg lease.Config, logs *bytes.Buffer) (*httptest.Server, *lease.Manager) {
	t.Helper()
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	core := inprocess.Start(t, inprocess.Options{
		Config: func(c *config.Config) { c.KeyPrefix, c.MaxWait = "s:", time.Minute },
		Sidecar: []sidecar.Option{sidecar.WithLogger(log), sidecar.WithLeaseTuning(func(lc *lease.Config) {
			lc.MaxLocks, lc.MaxWaiters, lc.MaxWaitersPerName = cfg.MaxLocks, cfg.MaxWaiters, cfg.MaxWaitersPerName
		})},
	})
	srv := httptest.NewServer(core.Handler(httpapi.WithAPIToken(apiToken)))
	t.Cleanup(srv.Close)
	return srv, core.Leases()
}

// Without the right bearer token every route answers 401 unauthorized,
// with a WWW-Authenticate challenge, and nothing is locked; with it the
// API works. Neither the token nor a wrong guess is ever logged or echoed.
func TestAPITokenIsRequiredOnEveryRoute(t *testing.T) {
	var logs bytes.Buffer
	srv, _ := newGuardedAPI(t, lease.Config{}, &logs)
	const guess = "wrong-guess-1234567890abcdef"
	bad := [][]string{
		nil,
		{"Authorization", "Bearer " + guess},
		{"Authorization", "Bearer " + apiToken[:len(apiToken)-1]},
		{"Authorization", "Bearer " + apiToken + "x"},
		{"Authorization", "Basic " + apiToken},
		{"Authorization", apiToken},
		{"Authorization", "Bearer"},
		{"Authorization", "Bearer "},
	}
	routes := [][2]string{{"POST", "/locks/a"}, {"PUT", "/locks/a"}, {"DELETE", "/locks/a"}, {"GET", "/locks/a"}, {"GET", "/locks"}, {"GET", "/locks/a/events"}, {"GET", "/nope"},
		{"POST", "/rwlocks/a?mode=shared"}, {"GET", "/rwlocks/a"}, {"GET", "/rwlocks"},
		{"POST", "/locksets/a,b"}, {"GET", "/locksets/a,b"}, {"GET", "/locksets"}}
	for _, header := range bad {
		for _, rt := range routes {
			got := call(t, srv, rt[0], rt[1], "", header...)
			if got.status != 401 || got.body["code"] != "unauthorized" || !strings.HasPrefix(got.header.Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("%s %s with %q: %d %v %v", rt[0], rt[1], header, got.status, got.body, got.header)
			}
			for _, secret := range []string{apiToken, guess} {
				if strings.Contains(got.raw, secret) {
					t.Errorf("%s %s: the answer echoes a token: %s", rt[0], rt[1], got.raw)
				}
			}
		}
	}
	auth := []string{"Authorization", "Bearer " + apiToken}
	got := call(t, srv, "POST", "/locks/a", "", auth...)
	if got.status != 200 {
		t.Fatalf("acquire with the token: %d %v", got.status, got.body)
	}
	if lower := call(t, srv, "GET", "/locks/a", "", "Authorization", "bearer "+apiToken); lower.status != 200 || lower.body["held"] != true {
		t.Fatalf("inspect with a lower-case scheme: %d %v", lower.status, lower.body)
	}
	if rel := call(t, srv, "DELETE", "/locks/a", "", append(auth, "Lock-Token", got.body["token"].(string))...); rel.status != 204 {
		t.Fatalf("release with the token: %d %v", rel.status, rel.body)
	}
	for _, secret := range []string{apiToken, guess} {
		if strings.Contains(logs.String(), secret) {
			t.Fatalf("the log holds a token:\n%s", logs.String())
		}
	}
}

// Two Authorization headers are refused even if one is right: a proxy
// that appends its own must not let a request through.
func TestTwoAuthorizationHeadersAreRefused(t *testing.T) {
	srv, _ := newGuardedAPI(t, lease.Config{}, &bytes.Buffer{})
	req := httptest.NewRequest("POST", srv.URL+"/locks/a", nil)
	req.RequestURI = ""
	req.Header.Add("Authorization", "Bearer "+apiToken)
	req.Header.Add("Authorization", "Bearer other-token-0123456789")
	res, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 401 {
		t.Fatalf("two Authorization headers: %d, want 401", res.StatusCode)
	}
}

// An empty token means no authentication (loopback only; config enforces it).
func TestEmptyTokenLetsRequestsThrough(t *testing.T) {
	srv := newAPI(t)
	h := httpapi.RequireToken("", discardLogger())(srv.Config.Handler)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/locks", nil))
	if rec.Code != 200 {
		t.Fatalf("no token configured: %d", rec.Code)
	}
}

// Beyond SIDELOCK_MAX_LOCKS acquire answers 429 too_many_locks with a
// Retry-After; beyond SIDELOCK_MAX_WAITERS a waiting acquire answers 429
// too_many_waiters at once.
func TestLimitsAnswer429(t *testing.T) {
	srv, m := newGuardedAPI(t, lease.Config{MaxLocks: 2, MaxWaiters: 1}, &bytes.Buffer{})
	auth := []string{"Authorization", "Bearer " + apiToken}
	first := call(t, srv, "POST", "/locks/one", "", auth...)
	call(t, srv, "POST", "/locks/two", "", auth...)
	got := call(t, srv, "POST", "/locks/three", "", auth...)
	if got.status != 429 || got.body["code"] != "too_many_locks" || got.header.Get("Retry-After") == "" {
		t.Fatalf("third lock with max 2: %d %v %v", got.status, got.body, got.header)
	}
	if again := call(t, srv, "POST", "/locks/one", "", auth...); again.status != 409 {
		t.Fatalf("a held name at the limit: %d %v, want 409 lock_held", again.status, again.body)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	waiting := make(chan struct{})
	go func() {
		defer close(waiting)
		req := httptest.NewRequestWithContext(ctx, "POST", srv.URL+"/locks/one?wait=30s", nil)
		req.RequestURI = ""
		req.Header.Set(auth[0], auth[1])
		if res, err := srv.Client().Do(req); err == nil {
			res.Body.Close()
		}
	}()
	for deadline := time.Now().Add(5 * time.Second); m.Waiters() != 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the first waiter never queued")
		}
	}
	start := time.Now()
	if got := call(t, srv, "POST", "/locks/two?wait=30s", "", auth...); got.status != 429 || got.body["code"] != "too_many_waiters" ||
		got.header.Get("Retry-After") == "" || time.Since(start) > time.Second {
		t.Fatalf("second waiter with max 1: %d %v %v after %v", got.status, got.body, got.header, time.Since(start))
	}
	cancel()
	<-waiting
	// Release only once the server has seen the waiter go: a grant that
	// lands before the server notices a disconnect is answered into the
	// closed connection and held until its ttl (reported separately).
	for deadline := time.Now().Add(5 * time.Second); m.Waiters() != 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the departed waiter is still queued")
		}
	}
	if rel := call(t, srv, "DELETE", "/locks/one", "", append(auth, "Lock-Token", first.body["token"].(string))...); rel.status != 204 {
		t.Fatalf("release: %d %v", rel.status, rel.body)
	}
	if got := call(t, srv, "POST", "/locks/three", "", auth...); got.status != 200 {
		t.Fatalf("after a release, below the limit again: %d %v", got.status, got.body)
	}
}
