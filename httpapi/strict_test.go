package httpapi_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sidelock/sidelock/httpapi"
	"github.com/sidelock/sidelock/internal/framing"
)

// A JSON body means one thing or is refused: repeated names (the last
// used to win: {"ttl":"2s","ttl":"3600s"} took an hour), names in another
// case ("TTL" used to be taken as ttl), a null body or null values, and
// anything but one object.
func TestJSONBodiesAreStrict(t *testing.T) {
	srv := newAPI(t)
	for _, body := range []string{
		`{"ttl":"2s","ttl":"3600s"}`,
		`{"TTL":"3600s"}`,
		`{"Ttl":"3600s"}`,
		`{"hold":false,"Hold":true}`,
		`null`,
		`{"ttl":null}`,
		`[]`,
		`"ttl"`,
		`{"ttl":"2s"} {}`,
		`{"ttl":"2s"}]`,
		`{"ttl":"2s",}`,
	} {
		got := call(t, srv, "POST", "/locks/strict", body)
		if got.status != 400 || got.body["code"] != "invalid_body" {
			t.Errorf("body %s: %d %v, want 400 invalid_body", body, got.status, got.body)
		}
	}
	if got := call(t, srv, "GET", "/locks/strict", ""); got.body["held"] != false {
		t.Fatalf("a refused body took the lock: %v", got.body)
	}
	if got := call(t, srv, "POST", "/locks/strict", `{"ttl":"2s","owner":"w-1","hold":false}`); got.status != 200 {
		t.Fatalf("a good body: %d %v", got.status, got.body)
	}
}

// Owners are shown to humans: control characters and bidirectional
// controls (U+202E reverses the text after it) are refused.
func TestOwnerRefusesControlAndBidiCharacters(t *testing.T) {
	srv := newAPI(t)
	for _, owner := range []string{"evil\u202Etxt.exe", "a\u2066b", "a\u200Fb", "a\u0085b", "a\x1bb", "a\u061Cb"} {
		got := call(t, srv, "POST", "/locks/owner", `{"owner":"`+owner+`"}`)
		if got.status != 400 {
			t.Errorf("owner %q: %d %v, want 400", owner, got.status, got.body)
		}
	}
	if got := call(t, srv, "POST", "/locks/owner", `{"owner":"worker-7 (café)"}`); got.status != 200 {
		t.Fatalf("a good owner: %d %v", got.status, got.body)
	}
}

// Requests refused for a missing or wrong token are counted in the
// request metrics like every other answer.
func TestUnauthorizedRequestsAreCounted(t *testing.T) {
	core := newCore(t)
	srv := httptest.NewServer(core.Handler(httpapi.WithAPIToken(apiToken)))
	t.Cleanup(srv.Close)
	for range 3 {
		if got := call(t, srv, "POST", "/locks/a", "", "Authorization", "Bearer wrong-guess-1234567890"); got.status != 401 {
			t.Fatalf("wrong token: %d", got.status)
		}
	}
	admin := httptest.NewServer(core.AdminHandler())
	t.Cleanup(admin.Close)
	res, err := admin.Client().Get(admin.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(res.Body)
	res.Body.Close()
	metrics := string(raw)
	counted := 0
	for _, line := range strings.Split(metrics, "\n") {
		if strings.HasPrefix(line, "sidelock_http_requests_total{") && strings.Contains(line, `code="401"`) {
			n, _ := strconv.Atoi(line[strings.LastIndexByte(line, ' ')+1:])
			counted += n
		}
	}
	if counted != 3 {
		t.Fatalf("401s counted: %d, want 3", counted)
	}
}

// An Idempotency-Key hands back a lease only to a request that repeats it
// exactly. Reused with other parameters it is refused (422) and the lease
// is untouched; with hold=true it is refused, so a replay can never bind a
// heartbeat lease to a connection whose close would release it.
func TestIdempotencyKeyCannotBeBorrowed(t *testing.T) {
	srv := newAPI(t)
	const key = "job-1-5f0c2a9e7b31d4"
	idem := []string{"Idempotency-Key", key}
	a := call(t, srv, "POST", "/locks/idem1?ttl=60s", "", idem...)
	if a.status != 200 {
		t.Fatalf("A: %d %v", a.status, a.body)
	}
	for _, q := range []string{"?ttl=30s", "", "?ttl=60s&owner=b", "?ttl=60s&max_hold=1h"} {
		got := call(t, srv, "POST", "/locks/idem1"+q, "", idem...)
		if got.status != 422 || got.body["code"] != "idempotency_mismatch" || strings.Contains(got.raw, a.body["token"].(string)) {
			t.Errorf("reuse %q: %d %s, want 422 idempotency_mismatch without the token", q, got.status, got.raw)
		}
	}
	if got := call(t, srv, "POST", "/locks/idem1?ttl=60s&hold=true", "", idem...); got.status != 400 || strings.Contains(got.raw, a.body["token"].(string)) {
		t.Errorf("reuse with hold=true: %d %s, want 400 without the token", got.status, got.raw)
	}
	if got := call(t, srv, "PUT", "/locks/idem1", "", "Lock-Token", a.body["token"].(string)); got.status != 200 {
		t.Fatalf("A's lease after the reuses: %d %v", got.status, got.body)
	}
	if got := call(t, srv, "POST", "/locks/idem1?ttl=60s", "", idem...); got.status != 200 || got.body["token"] != a.body["token"] {
		t.Fatalf("an exact replay: %d %v, want A's lease", got.status, got.body)
	}
	if got := call(t, srv, "POST", "/locks/idem1", "", "Idempotency-Key", "short"); got.status != 400 {
		t.Fatalf("a guessable key: %d %v, want 400", got.status, got.body)
	}
}

// A request carrying both Content-Length and Transfer-Encoding is refused
// (400 ambiguous_framing), takes nothing, and its connection is closed; a
// well-framed chunked request on another connection is served.
func TestBothContentLengthAndTransferEncodingAreRefused(t *testing.T) {
	core := newCore(t)
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := framing.Watch(inner)
	srv := &http.Server{Handler: core.Handler(httpapi.WithFramingCheck(ln.Ambiguous)), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })

	send := func(request string) (*http.Response, *bufio.Reader, net.Conn) {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprint(c, request)
		br := bufio.NewReader(c)
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body = io.NopCloser(strings.NewReader(string(body)))
		return res, br, c
	}
	res, br, _ := send("POST /locks/smuggled HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" +
		"POST /locks/second HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != 400 || !strings.Contains(string(body), "ambiguous_framing") {
		t.Fatalf("both headers: %d %s, want 400 ambiguous_framing", res.StatusCode, body)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("the connection was not closed after the refusal (read: %v); the pipelined request may be served", err)
	}
	res, _, _ = send("POST /locks/chunked HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nd\r\n{\"ttl\":\"10s\"}\r\n0\r\n\r\n")
	if res.StatusCode != 200 {
		body, _ := io.ReadAll(res.Body)
		t.Fatalf("a well-framed chunked acquire: %d %s", res.StatusCode, body)
	}
	for _, name := range []string{"smuggled", "second"} {
		if st, _ := core.Leases().Inspect(context.Background(), name); st.Held {
			t.Errorf("%s is held after a refused connection", name)
		}
	}
}
