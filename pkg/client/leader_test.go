package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync/atomic"
	"testing"
	"time"
)

// grant answers a hold with its acquired event, and keeps it open.
func grant(w http.ResponseWriter, r *http.Request, fence int) {
	streamHeader(w)
	sse(w, "retry: 1000", "", "id: 1", "event: acquired",
		fmt.Sprintf(`data: {"name":"svc/leader","token":"00112233445566778899aabbccddeeff","owner":%q,"fence":%d}`, r.URL.Query().Get("owner"), fence), "")
	<-r.Context().Done()
}

// A campaign holds the lock with a long wait and tries again on every
// 409 until it is granted; the lease names this candidate and its term.
func TestCampaignRetriesUntilElected(t *testing.T) {
	var calls atomic.Int32
	c, seen := recordingServer(t, func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) < 3 {
			problem(w, http.StatusConflict, "lock_held", 0)
			return
		}
		grant(w, r, 9)
	})
	held, err := c.Campaign(context.Background(), "svc/leader", Options{Owner: "pod-b"})
	if err != nil {
		t.Fatal(err)
	}
	held.Release()
	if held.Lease.Owner != "pod-b" || held.Lease.Fence != 9 || calls.Load() != 3 {
		t.Errorf("elected %+v after %d attempts, want pod-b, term 9, after 3", held.Lease, calls.Load())
	}
	for range 3 {
		q, _ := url.ParseQuery((<-seen).query)
		if q.Get("hold") != "true" || q.Get("wait") != campaignWait.String() || q.Get("owner") != "pod-b" {
			t.Errorf("attempt %v, want hold=true, wait=%v, owner=pod-b", q, campaignWait)
		}
	}
}

// A sidecar whose max wait is below the campaign's default refuses it
// (400 invalid_wait); the campaign halves the wait until it is taken.
func TestCampaignFindsTheSidecarsMaxWait(t *testing.T) {
	const maxWait = time.Minute
	c, seen := recordingServer(t, func(w http.ResponseWriter, r *http.Request) {
		if d, _ := time.ParseDuration(r.URL.Query().Get("wait")); d > maxWait {
			problem(w, http.StatusBadRequest, "invalid_wait", 0)
			return
		}
		grant(w, r, 1)
	})
	held, err := c.Campaign(context.Background(), "svc/leader", Options{Owner: "a"})
	if err != nil {
		t.Fatal(err)
	}
	held.Release()
	var waits []string
	for len(seen) > 0 {
		q, _ := url.ParseQuery((<-seen).query)
		waits = append(waits, q.Get("wait"))
	}
	if fmt.Sprint(waits) != "[5m0s 2m30s 1m15s 37s]" {
		t.Errorf("waits %v", waits)
	}
}

// The caller's own wait is never changed: its invalid_wait is the
// caller's mistake. Errors other than 409 end the campaign.
func TestCampaignEndsOnOtherErrors(t *testing.T) {
	for _, code := range []string{"invalid_wait", "no_quorum"} {
		status := map[string]int{"invalid_wait": 400, "no_quorum": 503}[code]
		var calls atomic.Int32
		c, _ := recordingServer(t, func(w http.ResponseWriter, r *http.Request) {
			calls.Add(1)
			problem(w, status, code, 0)
		})
		if _, err := c.Campaign(context.Background(), "svc/leader", Options{Wait: time.Hour}); !hasCode(err, code) || calls.Load() != 1 {
			t.Errorf("%s: %v after %d attempts", code, err, calls.Load())
		}
	}
}

// Cancelling ends a campaign that waits for the lock (the request's
// connection closes) and one that pauses between attempts.
func TestCampaignEndsWithItsContext(t *testing.T) {
	waiting := make(chan struct{}, 1)
	c, _ := recordingServer(t, func(w http.ResponseWriter, r *http.Request) {
		waiting <- struct{}{}
		<-r.Context().Done() // the sidecar waits for the lock
	})
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-waiting; cancel() }()
	if _, err := c.Campaign(ctx, "svc/leader", Options{}); !errors.Is(err, context.Canceled) {
		t.Errorf("waiting campaign: %v, want context.Canceled", err)
	}

	// A sidecar with SIDELOCK_MAX_WAIT=0: the campaign's wait comes down
	// to 0, and the sidecar's hint (an hour) is the pause.
	refused := make(chan struct{}, 1)
	c, _ = recordingServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Has("wait") {
			problem(w, http.StatusBadRequest, "invalid_wait", 0)
			return
		}
		refused <- struct{}{}
		problem(w, http.StatusConflict, "lock_held", int(time.Hour/time.Millisecond))
	})
	ctx, cancel = context.WithCancel(context.Background())
	go func() { <-refused; cancel() }()
	start := time.Now()
	if _, err := c.Campaign(ctx, "svc/leader", Options{}); !errors.Is(err, context.Canceled) {
		t.Errorf("pausing campaign: %v, want context.Canceled", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Errorf("the pause outlived the context: %v", time.Since(start))
	}
}

// Leader is one inspection of the lock.
func TestLeaderInspectsTheLock(t *testing.T) {
	c, seen := recordingServer(t, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"name":"svc/leader","held":true,"owner":"pod-a","fence":12,"valid_until":"2030-01-01T00:00:00Z"}`)
	})
	st, err := c.Leader(context.Background(), "svc/leader")
	if err != nil || !st.Held || st.Owner != "pod-a" || st.Fence != 12 {
		t.Fatalf("Leader: %+v, %v", st, err)
	}
	if got := <-seen; got.method != "GET" || got.path != "/locks/svc/leader" || got.query != "" {
		t.Errorf("request %+v", got)
	}
}
