package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sidelock/sidelock/internal/config"
	"github.com/sidelock/sidelock/internal/fakeclock"
	"github.com/sidelock/sidelock/internal/lease"
	"github.com/sidelock/sidelock/internal/sidecar"
	"github.com/sidelock/sidelock/internal/sidecar/inprocess"
	"github.com/sidelock/sidelock/internal/watch"
	"github.com/sidelock/sidelock/pkg/redlock"
	"github.com/sidelock/sidelock/pkg/redlock/memnode"
)

// watchBench is a lock API whose watches are served as the sidecar
// serves them: a Hub told by the Manager of every lease that starts or
// ends (internal/sidecar wires the same), over in-memory masters on a
// clock the test moves.
type watchBench struct {
	t     *testing.T
	clock *fakeclock.Clock
	nodes []*memnode.Node
	m     *lease.Manager
	hub   *watch.Hub
	srv   *httptest.Server
}

func newWatchBench(t *testing.T, cfg watch.Config) *watchBench {
	t.Helper()
	b := &watchBench{t: t, clock: fakeclock.New(time.Now())}
	for _, name := range []string{"a", "b", "c"} {
		b.nodes = append(b.nodes, memnode.New(name, memnode.WithClock(b.clock.Now)))
	}
	core := b.sidecar(cfg)
	b.m, b.hub = core.Leases(), core.Watches()
	b.srv = httptest.NewServer(core.Handler())
	// Cleanups run last-in first-out: the server's handlers end before
	// the sidecar closes its hub and its Manager.
	t.Cleanup(b.srv.Close)
	return b
}

// sidecar is a sidecar over the bench's masters, assembled in process,
// its watch hub configured by cfg (Poll, MaxStreams); another sidecar's,
// whose watches nobody opens, is b.sidecar(watch.Config{}).
func (b *watchBench) sidecar(cfg watch.Config) *sidecar.Core {
	nodes := make([]redlock.Node, len(b.nodes))
	for i, n := range b.nodes {
		nodes[i] = n
	}
	return inprocess.Start(b.t, inprocess.Options{Nodes: nodes, Config: func(c *config.Config) {
		c.KeyPrefix, c.MaxWait = "w:", time.Minute
		if cfg.MaxStreams > 0 {
			c.MaxWatchers = cfg.MaxStreams
		}
	}, Sidecar: []sidecar.Option{sidecar.WithWatchPoll(cfg.Poll)}})
}

// watchData is the data of a watch stream's event.
type watchData struct {
	Name       string     `json:"name"`
	Held       bool       `json:"held"`
	Owner      string     `json:"owner"`
	Fence      int64      `json:"fence"`
	ValidUntil *time.Time `json:"valid_until"`
	Since      *time.Time `json:"since"`
	Reason     string     `json:"reason"`
	Detail     string     `json:"detail"`
}

// nextWatch reads the next event of a watch stream, which must be kind.
func nextWatch(t *testing.T, s *sseStream, kind string) (sseEvent, watchData) {
	t.Helper()
	ev := s.next()
	var d watchData
	if err := json.Unmarshal([]byte(ev.data), &d); err != nil || ev.kind != kind {
		t.Fatalf("got %s %s (%v), want a %s event", ev.kind, ev.data, err, kind)
	}
	return ev, d
}

// A watch stream, open to anyone without a token, starts with the state
// and then tells each holder (owner, fence, valid_until, since) and each
// release. A lease of this sidecar starting or ending wakes it at once
// (the poll here is an hour), and that release is an announced one
// (reason released). A watcher joining later starts with the holder, a
// reconnect resumes the ids, and the next holder's fence is higher.
func TestWatchFollowsTheHolder(t *testing.T) {
	b := newWatchBench(t, watch.Config{Poll: time.Hour})
	first, _ := openClosable(t, b.srv, "GET", "/locks/leader?watch=true")
	if ev, st := nextWatch(t, first, "state"); st.Held || st.Name != "leader" || st.Owner != "" || st.Since != nil || ev.id != 1 || ev.retry != "1000" {
		t.Fatalf("the state of a free lock: id %d retry %q %s", ev.id, ev.retry, ev.data)
	}

	alice := takeLock(t, b.srv, "/locks/leader?owner=alice")
	ev, acq := nextWatch(t, first, "acquired")
	if !acq.Held || acq.Owner != "alice" || acq.Fence != alice.Fence || acq.ValidUntil == nil || acq.Since == nil || ev.id != 2 {
		t.Fatalf("alice's grant watched as id %d %s, her fence %d", ev.id, ev.data, alice.Fence)
	}

	later, _ := openClosable(t, b.srv, "GET", "/locks/leader?watch=1", "Last-Event-ID", "41")
	if ev, st := nextWatch(t, later, "state"); !st.Held || st.Owner != "alice" || st.Fence != alice.Fence || st.Since == nil || !st.Since.Equal(*acq.Since) || ev.id != 42 {
		t.Fatalf("a watcher joining while alice holds: id %d %s (since of acquired %v)", ev.id, ev.data, acq.Since)
	}

	if r := call(t, b.srv, "DELETE", "/locks/leader", "", "Lock-Token", alice.Token); r.status != http.StatusNoContent {
		t.Fatalf("release: %d %s", r.status, r.raw)
	}
	for _, s := range []*sseStream{first, later} {
		if _, rel := nextWatch(t, s, "released"); rel.Held || rel.Reason != "released" || rel.Owner != "" || rel.Fence != 0 {
			t.Fatalf("alice's release watched as %+v", rel)
		}
	}

	bob := takeLock(t, b.srv, "/locks/leader?owner=bob")
	if _, acq := nextWatch(t, first, "acquired"); acq.Owner != "bob" || acq.Fence != bob.Fence || bob.Fence <= alice.Fence {
		t.Fatalf("bob's grant watched as %+v; fences alice %d, bob %d", acq, alice.Fence, bob.Fence)
	}
}

// lockGrant is what these tests read of a lock's lease.
type lockGrant struct {
	Token string `json:"token"`
	Fence int64  `json:"fence"`
}

func takeLock(t *testing.T, srv *httptest.Server, path string) lockGrant {
	t.Helper()
	r := call(t, srv, "POST", path, "")
	var g lockGrant
	if err := json.Unmarshal([]byte(r.raw), &g); err != nil || r.status != http.StatusOK {
		t.Fatalf("POST %s: %d %s", path, r.status, r.raw)
	}
	return g
}

// A holder on another sidecar whose keys lapse (nobody releases them, so
// nothing is announced) is seen free by the poll: released, reason
// expired.
func TestWatchTellsAnExpiryByItsReason(t *testing.T) {
	b := newWatchBench(t, watch.Config{Poll: 20 * time.Millisecond})
	other := b.sidecar(watch.Config{}).Leases()
	if _, err := other.Acquire(context.Background(), lease.Request{Name: "lapsing", Owner: "elsewhere"}); err != nil {
		t.Fatal(err)
	}
	s, _ := openClosable(t, b.srv, "GET", "/locks/lapsing?watch=true")
	if _, st := nextWatch(t, s, "state"); !st.Held || st.Owner != "elsewhere" {
		t.Fatalf("the state of a lock held elsewhere: %+v", st)
	}
	b.clock.Advance(time.Minute) // past the key TTL on every master
	if _, rel := nextWatch(t, s, "released"); rel.Reason != "expired" || rel.Held {
		t.Fatalf("lapsed keys watched as %+v, want reason expired", rel)
	}
}

// With the masters unreadable the stream says unavailable (with the
// error, and held false meaning unknown), once; when they answer again it
// sends the state afresh.
func TestWatchReportsUnavailableMasters(t *testing.T) {
	b := newWatchBench(t, watch.Config{Poll: 20 * time.Millisecond})
	takeLock(t, b.srv, "/locks/dark?owner=holder")
	s, _ := openClosable(t, b.srv, "GET", "/locks/dark?watch=true")
	nextWatch(t, s, "state")
	for _, n := range b.nodes {
		n.SetDown(true)
	}
	if _, u := nextWatch(t, s, "unavailable"); u.Detail == "" || u.Held || u.Owner != "" {
		t.Fatalf("masters down watched as %+v", u)
	}
	for _, n := range b.nodes {
		n.SetDown(false)
	}
	if _, st := nextWatch(t, s, "state"); !st.Held || st.Owner != "holder" {
		t.Fatalf("after the masters came back: %+v, want the state again", st)
	}
}

// watch is true, false, 1 or 0 (else invalid_watch), given once, and the
// only parameter of a lock's inspection; false is the plain inspection.
func TestWatchParamIsValidated(t *testing.T) {
	srv := newAPI(t)
	for _, c := range []struct{ query, code string }{
		{"watch=maybe", "invalid_watch"},
		{"watch=TRUE", "invalid_watch"},
		{"watch=", "invalid_watch"},
		{"watch=true&watch=true", "invalid_query"},
		{"watch=true&owner=x", "invalid_query"},
		{"permits=2", "invalid_query"},
	} {
		r := call(t, srv, "GET", "/locks/w?"+c.query, "")
		if r.status != http.StatusBadRequest || r.body["code"] != c.code {
			t.Errorf("GET /locks/w?%s: %d %v, want 400 %s", c.query, r.status, r.body["code"], c.code)
		}
	}
	for _, q := range []string{"watch=false", "watch=0"} {
		if r := call(t, srv, "GET", "/locks/w?"+q, ""); r.status != http.StatusOK || r.body["held"] != false {
			t.Errorf("GET /locks/w?%s: %d %s, want the inspection", q, r.status, r.raw)
		}
	}
	if r := call(t, srv, "GET", "/locks/w/events?watch=true", "", "Lock-Token", zeroToken); r.status != http.StatusBadRequest {
		t.Errorf("watch on the events stream: %d %s", r.status, r.raw)
	}
}

// Beyond the Hub's cap a watch is refused 429 too_many_watchers with
// Retry-After; a stream that ends frees its place; a closed Hub (the
// sidecar shutting down) ends its streams and refuses new ones with 503.
func TestWatchStreamsAreCapped(t *testing.T) {
	b := newWatchBench(t, watch.Config{MaxStreams: 1})
	s, closeFirst := openClosable(t, b.srv, "GET", "/locks/capped?watch=true")
	nextWatch(t, s, "state")
	r := refusedWatch(t, b.srv, "/locks/other?watch=true")
	if r.status != http.StatusTooManyRequests || r.body["code"] != "too_many_watchers" || r.header.Get("Retry-After") != "1" {
		t.Fatalf("a watch beyond the cap: %d %s (Retry-After %q)", r.status, r.raw, r.header.Get("Retry-After"))
	}
	closeFirst()
	waitFor(t, "the closed stream to leave the hub", func() bool { return b.hub.Streams() == 0 })
	again, _ := openClosable(t, b.srv, "GET", "/locks/other?watch=true")
	nextWatch(t, again, "state")

	b.hub.Close()
	if again.sc.Scan() {
		t.Fatalf("a watch stream went on after its hub closed: %q", again.sc.Text())
	}
	if r := refusedWatch(t, b.srv, "/locks/other?watch=true"); r.status != http.StatusServiceUnavailable || r.body["code"] != "shutting_down" {
		t.Fatalf("a watch of a closed hub: %d %s", r.status, r.raw)
	}
}

// refusedWatch sends a watch expected to be refused: call's answer, but a
// stream served instead fails the test within seconds, not hangs it.
func refusedWatch(t *testing.T, srv *httptest.Server, path string) response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+path, nil)
	res, err := srv.Client().Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer res.Body.Close()
	r := response{status: res.StatusCode, header: res.Header}
	if err := json.NewDecoder(res.Body).Decode(&r.body); err != nil {
		t.Fatalf("GET %s: %d %s, not a problem: %v", path, res.StatusCode, res.Header.Get("Content-Type"), err)
	}
	return r
}

// waitFor polls cond until it holds, failing the test after 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited 5s for %s", what)
		}
	}
}
