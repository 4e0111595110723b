package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

const (
	readerLease = `{"name":"books/42","token":"00112233445566778899aabbccddeeff","owner":"r1","ttl":"30s",` +
		`"valid_until":"2030-01-01T00:00:00Z","mode":"shared","slot":5}`
	writerLease = `{"name":"books/42","token":"ffeeddccbbaa99887766554433221100","owner":"w1","ttl":"30s",` +
		`"valid_until":"2030-01-01T00:00:00Z","mode":"exclusive","fence":9}`
)

// The read/write lock calls go to /rwlocks/{name} (escaped as lock names
// are), send the mode and the token, and read a reader's lease.
func TestRWLockCallsUseTheirKeyspace(t *testing.T) {
	c, seen := recordingServer(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodDelete:
			w.WriteHeader(http.StatusNoContent)
		case http.MethodGet:
			io.WriteString(w, `{"name":"books/42","writer":null,"readers":[{"slot":5,"owner":"r1","valid_until":"2030-01-01T00:00:00Z"}],`+
				`"reader_count":1,"writer_waiting":true}`)
		default:
			io.WriteString(w, readerLease)
		}
	})
	ctx := context.Background()
	l, err := c.AcquireRWLock(ctx, "books/42", Shared, Options{Owner: "r1", Wait: 2 * time.Second})
	if err != nil || l.Mode != Shared || l.Slot != 5 || l.Fence != 0 || l.Token == "" {
		t.Fatalf("AcquireRWLock: %+v, %v", l, err)
	}
	if _, err := c.ExtendRWLock(ctx, "books/42", l.Token, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := c.ReleaseRWLock(ctx, "books/42", l.Token); err != nil {
		t.Fatal(err)
	}
	st, err := c.InspectRWLock(ctx, "books/42")
	if err != nil || st.Writer != nil || st.ReaderCount != 1 || len(st.Readers) != 1 || st.Readers[0].Slot != 5 || !st.WriterWaiting {
		t.Fatalf("InspectRWLock: %+v, %v", st, err)
	}
	for _, want := range []request{
		{method: "POST", path: "/rwlocks/books/42", query: "mode=shared&owner=r1&wait=2s"},
		{method: "PUT", path: "/rwlocks/books/42", query: "ttl=20s", token: l.Token},
		{method: "DELETE", path: "/rwlocks/books/42", token: l.Token},
		{method: "GET", path: "/rwlocks/books/42"},
	} {
		if got := <-seen; got != want {
			t.Errorf("request %+v, want %+v", got, want)
		}
	}
}

// A writer holding the lock is read as a holder with its fence; no mode
// leaves the choice to the sidecar (exclusive) instead of sending one.
func TestRWLockWriterAndDefaultMode(t *testing.T) {
	c, seen := recordingServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			io.WriteString(w, `{"name":"books/42","writer":{"owner":"w1","fence":9,"valid_until":"2030-01-01T00:00:00Z"},`+
				`"readers":[],"reader_count":0,"writer_waiting":false}`)
			return
		}
		io.WriteString(w, writerLease)
	})
	ctx := context.Background()
	l, err := c.AcquireRWLock(ctx, "books/42", "", Options{})
	if err != nil || l.Mode != Exclusive || l.Fence != 9 || l.Slot != 0 {
		t.Fatalf("AcquireRWLock: %+v, %v", l, err)
	}
	if got := <-seen; got.query != "" {
		t.Errorf("no mode sent %q, want none", got.query)
	}
	st, err := c.InspectRWLock(ctx, "books/42")
	if err != nil || st.Writer == nil || st.Writer.Owner != "w1" || st.Writer.Fence != 9 || len(st.Readers) != 0 || st.WriterWaiting {
		t.Fatalf("InspectRWLock: %+v, %v", st, err)
	}
}

// A read/write lock held by the other side is ErrLockHeld, with the
// sidecar's retry hint.
func TestRWLockConflictIsErrLockHeld(t *testing.T) {
	c, _ := recordingServer(t, func(w http.ResponseWriter, r *http.Request) {
		problem(w, http.StatusConflict, "lock_held", 250)
	})
	_, err := c.AcquireRWLock(context.Background(), "books/42", Exclusive, Options{})
	var apiErr *Error
	if !errors.Is(err, ErrLockHeld) || !errors.As(err, &apiErr) || apiErr.RetryAfter != 250*time.Millisecond {
		t.Errorf("%#v, want ErrLockHeld retrying after 250ms", err)
	}
}

// HoldRWLock streams like Hold: its lease carries the mode and the
// reader's slot, and closing the stream (Release) ends it.
func TestHoldRWLockReadsTheReaderFromTheStream(t *testing.T) {
	c, seen := recordingServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "retry: 1000\n\nid: 1\nevent: acquired\ndata: %s\n\n", readerLease)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	h, err := c.HoldRWLock(context.Background(), "books/42", Shared, Options{Owner: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	h.Release()
	if h.Lease.Mode != Shared || h.Lease.Slot != 5 {
		t.Errorf("held reader %+v", h.Lease)
	}
	if got := <-seen; got.path != "/rwlocks/books/42" || !strings.Contains(got.query, "hold=true") || !strings.Contains(got.query, "mode=shared") {
		t.Errorf("request %+v", got)
	}
}
