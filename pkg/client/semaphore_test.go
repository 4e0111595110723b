package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// request is what a test server saw of one request.
type request struct {
	method, path, query, token, lastEventID string
}

// recordingServer answers each request with answer and records it.
func recordingServer(t *testing.T, answer func(w http.ResponseWriter, r *http.Request)) (*Client, <-chan request) {
	t.Helper()
	seen := make(chan request, 64)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select { // a client gone wrong may send more than a test reads
		case seen <- request{method: r.Method, path: r.URL.EscapedPath(), query: r.URL.RawQuery,
			token: r.Header.Get("Lock-Token"), lastEventID: r.Header.Get("Last-Event-ID")}:
		default:
		}
		answer(w, r)
	}))
	t.Cleanup(srv.Close)
	return New(srv.URL, nil), seen
}

func problem(w http.ResponseWriter, status int, code string, retryAfterMS int) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"code":%q,"detail":"d","retry_after_ms":%d}`, code, retryAfterMS)
}

const permitLease = `{"name":"pool/db","token":"00112233445566778899aabbccddeeff","owner":"w1","ttl":"30s",` +
	`"valid_until":"2030-01-01T00:00:00Z","fence":7,"permits":3,"slot":2}`

// The semaphore calls go to /semaphores/{name} (escaped as lock names
// are), send the permits and the token, and read a permit's lease.
func TestSemaphoreCallsUseTheirKeyspace(t *testing.T) {
	c, seen := recordingServer(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodDelete:
			w.WriteHeader(http.StatusNoContent)
		case http.MethodGet:
			io.WriteString(w, `{"name":"pool/db","permits":3,"held":1,"holders":[{"slot":2,"owner":"w1","fence":7,"valid_until":"2030-01-01T00:00:00Z"}]}`)
		default:
			io.WriteString(w, permitLease)
		}
	})
	ctx := context.Background()
	l, err := c.AcquireSemaphore(ctx, "pool/db", 3, Options{Owner: "w1", Wait: 2 * time.Second})
	if err != nil || l.Permits != 3 || l.Slot != 2 || l.Fence != 7 || l.Token == "" {
		t.Fatalf("AcquireSemaphore: %+v, %v", l, err)
	}
	if _, err := c.ExtendSemaphore(ctx, "pool/db", l.Token, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := c.ReleaseSemaphore(ctx, "pool/db", l.Token); err != nil {
		t.Fatal(err)
	}
	st, err := c.InspectSemaphore(ctx, "pool/db", 3)
	if err != nil || st.Permits != 3 || st.Held != 1 || len(st.Holders) != 1 || st.Holders[0].Slot != 2 || st.Holders[0].Owner != "w1" {
		t.Fatalf("InspectSemaphore: %+v, %v", st, err)
	}
	for _, want := range []request{
		{method: "POST", path: "/semaphores/pool/db", query: "owner=w1&permits=3&wait=2s"},
		{method: "PUT", path: "/semaphores/pool/db", query: "ttl=20s", token: l.Token},
		{method: "DELETE", path: "/semaphores/pool/db", token: l.Token},
		{method: "GET", path: "/semaphores/pool/db", query: "permits=3"},
	} {
		if got := <-seen; got != want {
			t.Errorf("request %+v, want %+v", got, want)
		}
	}
}

// A lock's calls still go to /locks/: the keyspaces do not mix.
func TestLockCallsStayInTheLockKeyspace(t *testing.T) {
	c, seen := recordingServer(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, permitLease) })
	if _, err := c.Acquire(context.Background(), "pool/db", Options{}); err != nil {
		t.Fatal(err)
	}
	if got := <-seen; got.path != "/locks/pool/db" || got.query != "" {
		t.Errorf("lock acquire went to %+v", got)
	}
}

// Both 409s are told apart: all permits held (ErrLockHeld, with the
// sidecar's retry hint) and a disagreement on N (ErrPermitsMismatch).
func TestSemaphoreConflictsMapToTheirSentinels(t *testing.T) {
	for _, tc := range []struct {
		code       string
		want, not  error
		retryAfter time.Duration
	}{
		{"lock_held", ErrLockHeld, ErrPermitsMismatch, 250 * time.Millisecond},
		{"permits_mismatch", ErrPermitsMismatch, ErrLockHeld, 0},
	} {
		c, _ := recordingServer(t, func(w http.ResponseWriter, r *http.Request) {
			problem(w, http.StatusConflict, tc.code, int(tc.retryAfter/time.Millisecond))
		})
		_, err := c.AcquireSemaphore(context.Background(), "pool", 2, Options{})
		var apiErr *Error
		switch {
		case !errors.Is(err, tc.want) || errors.Is(err, tc.not):
			t.Errorf("%s: %v is not %v (or is %v)", tc.code, err, tc.want, tc.not)
		case !errors.As(err, &apiErr) || apiErr.RetryAfter != tc.retryAfter:
			t.Errorf("%s: %#v, want retry after %v", tc.code, err, tc.retryAfter)
		}
	}
}

// HoldSemaphore streams like Hold: its lease carries the slot, and
// closing the stream (Release) ends it.
func TestHoldSemaphoreReadsThePermitFromTheStream(t *testing.T) {
	c, seen := recordingServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "retry: 1000\n\nid: 1\nevent: acquired\ndata: %s\n\n", permitLease)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	h, err := c.HoldSemaphore(context.Background(), "pool/db", 3, Options{Owner: "w1"})
	if err != nil {
		t.Fatal(err)
	}
	h.Release()
	if h.Lease.Slot != 2 || h.Lease.Permits != 3 {
		t.Errorf("held permit %+v", h.Lease)
	}
	if got := <-seen; got.path != "/semaphores/pool/db" || !strings.Contains(got.query, "hold=true") || !strings.Contains(got.query, "permits=3") {
		t.Errorf("request %+v", got)
	}
}
