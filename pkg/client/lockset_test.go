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

const setLease = `{"name":"accounts/1,accounts/2","token":"00112233445566778899aabbccddeeff","owner":"t1","ttl":"30s",` +
	`"valid_until":"2030-01-01T00:00:00Z","locks":[` +
	`{"name":"accounts/1","fence":4,"valid_until":"2030-01-01T00:00:00Z"},` +
	`{"name":"accounts/2","fence":9,"valid_until":"2030-01-01T00:00:01Z"}]}`

// The lock set calls go to /locksets/{names}: each name escaped as a lock
// name is, joined by a plain ","; they send the token and read the set's
// lease with its locks.
func TestLockSetCallsUseTheirKeyspace(t *testing.T) {
	c, seen := recordingServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodDelete {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		io.WriteString(w, setLease)
	})
	ctx := context.Background()
	names := []string{"accounts/2", "accounts/1"}
	l, err := c.AcquireLockSet(ctx, names, Options{Owner: "t1", Wait: 2 * time.Second})
	if err != nil || l.Name != "accounts/1,accounts/2" || l.Token == "" || l.Fence != 0 {
		t.Fatalf("AcquireLockSet: %+v, %v", l, err)
	}
	if len(l.Locks) != 2 || l.Locks[0] != (SetLock{"accounts/1", 4, time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}) || l.Locks[1].Fence != 9 {
		t.Fatalf("the set's locks: %+v", l.Locks)
	}
	if e, err := c.ExtendLockSet(ctx, names, l.Token, 20*time.Second); err != nil || len(e.Locks) != 2 {
		t.Fatalf("ExtendLockSet: %+v, %v", e, err)
	}
	if err := c.ReleaseLockSet(ctx, names, l.Token); err != nil {
		t.Fatal(err)
	}
	for _, want := range []request{
		{method: "POST", path: "/locksets/accounts/2,accounts/1", query: "owner=t1&wait=2s"},
		{method: "PUT", path: "/locksets/accounts/2,accounts/1", query: "ttl=20s", token: l.Token},
		{method: "DELETE", path: "/locksets/accounts/2,accounts/1", token: l.Token},
	} {
		if got := <-seen; got != want {
			t.Errorf("request %+v, want %+v", got, want)
		}
	}
}

// A name's characters that mean something in a URL reach the sidecar
// escaped within their own name; only the separator stays a plain ",".
func TestLockSetPathEscapesEachName(t *testing.T) {
	if got, want := lockSetPath([]string{"a b", "c?d/e"}), "/locksets/a%20b,c%3Fd/e"; got != want {
		t.Errorf("lockSetPath = %q, want %q", got, want)
	}
}

// A set refused because a lock is held is ErrLockHeld, as a lock's.
func TestLockSetConflictIsErrLockHeld(t *testing.T) {
	c, _ := recordingServer(t, func(w http.ResponseWriter, r *http.Request) {
		problem(w, http.StatusConflict, "lock_held", 0)
	})
	if _, err := c.AcquireLockSet(context.Background(), []string{"a", "b"}, Options{}); !errors.Is(err, ErrLockHeld) {
		t.Errorf("%v, want ErrLockHeld", err)
	}
}

// HoldLockSet streams like Hold, and keeps the set's locks the first
// event carried; closing the stream (Release) ends it.
func TestHoldLockSetReadsTheLocksFromTheStream(t *testing.T) {
	c, seen := recordingServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "retry: 1000\n\nid: 1\nevent: acquired\ndata: %s\n\n", setLease)
		fmt.Fprintf(w, "event: renewed\ndata: {\"valid_until\":\"2030-01-01T00:00:05Z\"}\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	h, err := c.HoldLockSet(context.Background(), []string{"accounts/1", "accounts/2"}, Options{Owner: "t1"})
	if err != nil {
		t.Fatal(err)
	}
	if e := <-h.Events(); e.Kind != "renewed" || e.ValidUntil.IsZero() {
		t.Errorf("first event after the grant: %+v", e)
	}
	h.Release()
	if h.Lease.Name != "accounts/1,accounts/2" || h.Lease.Token == "" || len(h.Locks) != 2 || h.Locks[1].Fence != 9 {
		t.Errorf("held set %+v with locks %+v", h.Lease, h.Locks)
	}
	if got := <-seen; got.path != "/locksets/accounts/1,accounts/2" || !strings.Contains(got.query, "hold=true") {
		t.Errorf("request %+v", got)
	}
}

// A stream that does not open with the grant is an error, not a held set.
func TestHoldLockSetRefusesAStreamWithoutTheGrant(t *testing.T) {
	c, _ := recordingServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "event: lost\ndata: {}\n\n")
	})
	if h, err := c.HoldLockSet(context.Background(), []string{"a", "b"}, Options{}); err == nil {
		h.Release()
		t.Fatal("a stream opening with lost was taken for a grant")
	}
}
