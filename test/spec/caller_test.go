package spec

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"
)

// caller sends requests to one listener of a sidecar through the checking
// client, so every answer is validated and counted.
type caller struct {
	t      *testing.T
	hc     *http.Client
	base   string
	bearer string // SIDELOCK_API_TOKEN of the sidecar, if it has one
}

// reply is an answer whose body was read in full.
type reply struct {
	status int
	header http.Header
	body   []byte
}

// problemCode is the code of a problem answer ("" otherwise).
func (r reply) problemCode() string {
	var p struct {
		Code string `json:"code"`
	}
	_ = json.Unmarshal(r.body, &p)
	return p.Code
}

// field is a top-level string member of a JSON answer.
func (r reply) field(name string) string {
	var m map[string]any
	_ = json.Unmarshal(r.body, &m)
	s, _ := m[name].(string)
	return s
}

// hdr is a request's extra headers.
type hdr map[string]string

func (c *caller) request(ctx context.Context, method, path string, h hdr, body string) *http.Request {
	c.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.bearer != "" {
		req.Header.Set("Authorization", "Bearer "+c.bearer)
	}
	for k, v := range h {
		req.Header.Set(k, v)
	}
	return req
}

// do sends one request and reads its whole answer.
func (c *caller) do(method, path string, h hdr, body string) reply {
	c.t.Helper()
	res, err := c.hc.Do(c.request(context.Background(), method, path, h, body))
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		c.t.Fatalf("%s %s: reading the body: %v", method, path, err)
	}
	return reply{res.StatusCode, res.Header, b}
}

// expect sends one request and marks the test failed unless the answer
// has the status (and, for a problem, the code) wanted; the scenario goes
// on, so one run reports every answer that is wrong.
func (c *caller) expect(status int, code, method, path string, h hdr, body string) reply {
	c.t.Helper()
	r := c.do(method, path, h, body)
	if r.status != status || r.problemCode() != code {
		c.t.Errorf("%s %s: got %d %q, want %d %q: %s", method, path, r.status, r.problemCode(), status, code, truncate(r.body))
	}
	return r
}

// require is expect for an answer the next steps build on (a grant whose
// token they use): without it the test stops.
func (c *caller) require(status int, method, path string, h hdr, body string) reply {
	c.t.Helper()
	r := c.do(method, path, h, body)
	if r.status != status {
		c.t.Fatalf("%s %s: got %d %q, want %d: %s", method, path, r.status, r.problemCode(), status, truncate(r.body))
	}
	return r
}

// stream opens an event stream; cancel closes it (the tap's checks end
// with it). It fails the test unless the answer is 200 text/event-stream.
func (c *caller) stream(method, path string, h hdr) (*sseReader, context.CancelFunc) {
	c.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	res, err := c.hc.Do(c.request(ctx, method, path, h, ""))
	if err != nil {
		cancel()
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	if res.StatusCode != http.StatusOK || mediaType(res.Header) != sseMediaType {
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		cancel()
		c.t.Fatalf("%s %s: got %d %s, want an event stream: %s", method, path, res.StatusCode, res.Header.Get("Content-Type"), truncate(b))
	}
	closeAll := func() { cancel(); res.Body.Close() }
	c.t.Cleanup(closeAll)
	return newSSEReader(res.Body), closeAll
}

// nextEvent reads the next event within a bound, failing the test if the
// stream ends or stalls first.
func nextEvent(t *testing.T, r *sseReader, within time.Duration) sseEvent {
	t.Helper()
	type result struct {
		ev  sseEvent
		err error
	}
	got := make(chan result, 1)
	go func() { ev, err := r.next(); got <- result{ev, err} }()
	select {
	case res := <-got:
		if res.err != nil {
			t.Fatalf("the stream ended before an event: %v", res.err)
		}
		return res.ev
	case <-time.After(within):
		t.Fatalf("no event within %v", within)
		return sseEvent{}
	}
}

// waitForEvent reads events until one named name (returned) or within ends.
func waitForEvent(t *testing.T, r *sseReader, name string, within time.Duration) sseEvent {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ev := nextEvent(t, r, time.Until(deadline))
		if ev.name == name {
			return ev
		}
	}
}

// raw sends bytes on a fresh connection to the lock API (what no HTTP
// client would send) and returns the parsed answer; req describes the
// request for the checker.
func raw(t *testing.T, base, payload string, req *http.Request) reply {
	t.Helper()
	r, err := sendRaw(base, payload, req)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func sendRaw(base, payload string, req *http.Request) (reply, error) {
	conn, err := net.DialTimeout("tcp", strings.TrimPrefix(base, "http://"), 5*time.Second)
	if err != nil {
		return reply{}, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, payload); err != nil {
		return reply{}, err
	}
	res, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		return reply{}, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if errors.Is(err, syscall.ECONNRESET) && res.ContentLength < 0 && res.Close {
		// A body that runs to the connection's end, which the server
		// resets because it left our request unread (431): what came
		// before the reset is the body.
		err = nil
	}
	return reply{res.StatusCode, res.Header, b}, err
}

// rawRequest writes req on a fresh connection and reads the answer at once
// (for requests the server answers and then resets).
func rawRequest(req *http.Request, base string) (reply, error) {
	var b strings.Builder
	if err := req.Write(&b); err != nil {
		return reply{}, err
	}
	return sendRaw(base, b.String(), req)
}
