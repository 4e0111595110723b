package httpapi_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sidelock/sidelock/internal/config"
	"github.com/sidelock/sidelock/internal/lease"
	"github.com/sidelock/sidelock/internal/sidecar"
	"github.com/sidelock/sidelock/internal/sidecar/inprocess"
)

// newCore is a sidecar assembled in process over three in-memory masters,
// closed when the test ends.
func newCore(t testing.TB) *sidecar.Core {
	t.Helper()
	return inprocess.Start(t, inprocess.Options{Config: func(c *config.Config) {
		c.KeyPrefix, c.MaxWait = "t:", time.Minute
	}})
}

// newManager is the lease manager of a sidecar over three in-memory
// masters.
func newManager(t testing.TB) *lease.Manager { return newCore(t).Leases() }

// newAPI serves the lock API of a sidecar over three in-memory masters.
func newAPI(t testing.TB) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(newCore(t).Handler())
	t.Cleanup(srv.Close)
	return srv
}

type response struct {
	status int
	header http.Header
	body   map[string]any
	raw    string
}

func call(t testing.TB, srv *httptest.Server, method, path string, body string, header ...string) response {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	r := response{status: res.StatusCode, header: res.Header, raw: string(raw)}
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &r.body); err != nil {
			t.Fatalf("%s %s: body is not JSON: %q", method, path, raw)
		}
		if ct := res.Header.Get("Content-Type"); !strings.Contains(ct, "json") {
			t.Fatalf("%s %s: content type %q", method, path, ct)
		}
	}
	return r
}

func TestCurlWalkthrough(t *testing.T) {
	srv := newAPI(t)
	got := call(t, srv, "POST", "/locks/orders/42?ttl=1m&owner=worker-1", "")
	if got.status != 200 {
		t.Fatalf("acquire: %d %v", got.status, got.body)
	}
	for _, k := range []string{"name", "token", "owner", "ttl", "lease_expires_at", "valid_until", "fence"} {
		if _, ok := got.body[k]; !ok {
			t.Errorf("acquire body lacks %q: %v", k, got.body)
		}
	}
	tok := got.body["token"].(string)
	if held := call(t, srv, "POST", "/locks/orders/42", ""); held.status != 409 || held.body["code"] != "lock_held" || held.header.Get("Retry-After") == "" {
		t.Fatalf("contended acquire: %d %v %v", held.status, held.body, held.header)
	}
	if ext := call(t, srv, "PUT", "/locks/orders/42", `{"ttl":"2m"}`, "Lock-Token", tok); ext.status != 200 || ext.body["ttl"] != "2m0s" {
		t.Fatalf("extend: %d %v", ext.status, ext.body)
	}
	if insp := call(t, srv, "GET", "/locks/orders/42", ""); insp.status != 200 || insp.body["held"] != true || insp.body["owner"] != "worker-1" || insp.body["token"] != nil || insp.body["fence"] != got.body["fence"] {
		t.Fatalf("inspect: %d %v", insp.status, insp.body)
	}
	if list := call(t, srv, "GET", "/locks", ""); list.status != 200 || len(list.body["locks"].([]any)) != 1 || strings.Contains(fmt.Sprint(list.body), tok) {
		t.Fatalf("list: %d %v", list.status, list.body)
	}
	if rel := call(t, srv, "DELETE", "/locks/orders/42?token="+tok, ""); rel.status != 204 {
		t.Fatalf("release: %d %v", rel.status, rel.body)
	}
	if again := call(t, srv, "DELETE", "/locks/orders/42", "", "Lock-Token", tok); again.status != 410 || again.body["code"] != "lease_gone" {
		t.Fatalf("second release: %d %v", again.status, again.body)
	}
}

func TestAcquireWithJSONBody(t *testing.T) {
	srv := newAPI(t)
	got := call(t, srv, "POST", "/locks/job", `{"ttl":"5s","owner":"cron","wait":"0s"}`, "Content-Type", "application/json")
	if got.status != 200 || got.body["ttl"] != "5s" || got.body["owner"] != "cron" {
		t.Fatalf("%d %v", got.status, got.body)
	}
}

// Bad input always gets a JSON 4xx with a stable code.
func TestBadInputGetsJSON4xx(t *testing.T) {
	srv := newAPI(t)
	tok := call(t, srv, "POST", "/locks/held", "").body["token"].(string)
	cases := []struct {
		method, path, body string
		header             []string
		status             int
		code               string
	}{
		{"POST", "/locks/", "", nil, 400, "invalid_name"},
		{"POST", "/locks/a%20b", "", nil, 400, "invalid_name"},
		{"POST", "/locks/a%252Fb", "", nil, 400, "invalid_name"}, // escaped twice; a%2Fb is the lock a/b (TestEscapedSlashInANameIsTheSameLock)
		{"POST", "/locks/a//b", "", nil, 400, "invalid_name"},
		{"POST", "/locks/" + strings.Repeat("x", 257), "", nil, 400, "invalid_name"},
		{"POST", "/locks/x?ttl=30x", "", nil, 400, "invalid_ttl"},
		{"POST", "/locks/x?ttl=-1s", "", nil, 400, "invalid_ttl"},
		{"POST", "/locks/x?ttl=0s", "", nil, 400, "invalid_ttl"},
		{"POST", "/locks/x?ttl=500ms", "", nil, 400, "invalid_ttl"}, // out of range: the code of the parameter
		{"POST", "/locks/x?ttl=2h", "", nil, 400, "invalid_ttl"},
		{"POST", "/locks/x?ttl=7200", "", nil, 400, "invalid_ttl"},
		{"POST", "/locks/x?ttl=9999999999999999h", "", nil, 400, "invalid_ttl"},
		{"POST", "/locks/x?wait=2m", "", nil, 400, "invalid_wait"},
		{"POST", "/locks/x?wait=soon", "", nil, 400, "invalid_wait"},
		{"POST", "/locks/x?tll=5s", "", nil, 400, "invalid_query"},
		{"POST", "/locks/x?ttl=5s&ttl=6s", "", nil, 400, "invalid_query"},
		{"POST", "/locks/x?ttl=%zz", "", nil, 400, "invalid_query"},
		{"POST", "/locks/x?ttl=5s", `{"ttl":"6s"}`, nil, 400, "invalid_request"},
		{"POST", "/locks/x", `{"ttl":true}`, nil, 400, "invalid_body"},
		{"POST", "/locks/x", `{"ttl":-1}`, nil, 400, "invalid_ttl"},
		{"POST", "/locks/x", `{"ttl":"5s"} {}`, nil, 400, "invalid_body"},
		{"POST", "/locks/x", `{"bogus":1}`, nil, 400, "invalid_body"},
		{"POST", "/locks/x", `not json`, nil, 400, "invalid_body"},
		{"POST", "/locks/x", `{"owner":"` + strings.Repeat("o", 129) + `"}`, nil, 400, "invalid_owner"},
		{"POST", "/locks/x", `{"owner":"a\u0000b"}`, nil, 400, "invalid_owner"},
		{"POST", "/locks/x", `{"token":"` + tok + `"}`, nil, 400, "invalid_request"},
		{"POST", "/locks/x", `{"ttl":"` + strings.Repeat("1", 70<<10) + `"}`, nil, 413, "body_too_large"},
		{"PUT", "/locks/held", "", nil, 400, "missing_token"},
		{"PUT", "/locks/held", "", []string{"Lock-Token", "nothex"}, 400, "invalid_token"},
		{"PUT", "/locks/held", "", []string{"Lock-Token", strings.ToUpper(tok)}, 400, "invalid_token"},
		{"PUT", "/locks/held?token=" + strings.Repeat("0", 32), "", []string{"Lock-Token", tok}, 400, "invalid_token"},
		{"PUT", "/locks/held", "", []string{"Lock-Token", strings.Repeat("0", 32)}, 410, "lease_gone"},
		{"PUT", "/locks/held?owner=x", "", []string{"Lock-Token", tok}, 400, "invalid_request"},
		{"PUT", "/locks/held?ttl=3h", "", []string{"Lock-Token", tok}, 400, "invalid_ttl"},
		{"DELETE", "/locks/held?ttl=5s", "", []string{"Lock-Token", tok}, 400, "invalid_request"},
		{"DELETE", "/locks/other", "", []string{"Lock-Token", tok}, 410, "lease_gone"},
		{"GET", "/locks/held?x=1", "", nil, 400, "invalid_query"},
		{"GET", "/nope", "", nil, 404, "not_found"},
		{"PATCH", "/locks/x", "", nil, 405, "method_not_allowed"},
		{"POST", "/locks", "", nil, 405, "method_not_allowed"},
	}
	for _, c := range cases {
		got := call(t, srv, c.method, c.path, c.body, c.header...)
		if got.status != c.status || got.body["code"] != c.code {
			t.Errorf("%s %.60s %.40s: %d %v, want %d %s", c.method, c.path, c.body, got.status, got.body["code"], c.status, c.code)
		}
		if got.body["status"] != float64(got.status) || got.body["title"] == "" {
			t.Errorf("%s %.60s: problem body %v lacks status/title", c.method, c.path, got.body)
		}
	}
	// None of that touched the lock.
	if got := call(t, srv, "PUT", "/locks/held", "", "Lock-Token", tok); got.status != 200 {
		t.Fatalf("the held lock was disturbed by bad requests: %d %v", got.status, got.body)
	}
}

// A 409 lock_held names the kind the request asked for, and no other: a
// plain lock's says nothing of permits, readers or sets.
func TestLockHeldNamesOnlyTheKindAskedFor(t *testing.T) {
	srv := newAPI(t)
	for _, c := range []struct {
		path, want string
		not        []string
	}{
		{"/locks/held-kind", "the lock is held by another owner", []string{"semaphore", "permit", "read", "set"}},
		{"/semaphores/held-kind?permits=1", "every permit of the semaphore is held", []string{"read", "set"}},
		{"/rwlocks/held-kind?mode=exclusive", "the read/write lock is held the other way", []string{"semaphore", "permit", "set"}},
		{"/locksets/held-kind-a,held-kind-b", "a lock of the set is held by another owner", []string{"semaphore", "permit", "read"}},
	} {
		if first := call(t, srv, "POST", c.path, ""); first.status != 200 {
			t.Fatalf("%s: %d %v", c.path, first.status, first.body)
		}
		got := call(t, srv, "POST", c.path, "")
		detail, _ := got.body["detail"].(string)
		if got.status != 409 || got.body["code"] != "lock_held" || !strings.HasPrefix(detail, c.want) {
			t.Errorf("%s: %d %v, want 409 lock_held %q", c.path, got.status, got.body, c.want)
		}
		for _, word := range c.not {
			if strings.Contains(detail, word) {
				t.Errorf("%s: detail %q speaks of %q, another kind", c.path, detail, word)
			}
		}
	}
}
