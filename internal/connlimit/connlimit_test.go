package connlimit_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sidelock/sidelock/internal/connlimit"
)

// serve runs an http.Server behind a Listener with cap max. Requests to
// /block stay in the handler until release is closed.
func serve(t *testing.T, max int) (addr string, l *connlimit.Listener, release chan struct{}) {
	t.Helper()
	return serveWith(t, connlimit.Config{Max: max})
}

// serveWith is serve with more of the Listener's settings.
func serveWith(t *testing.T, cfg connlimit.Config) (addr string, l *connlimit.Listener, release chan struct{}) {
	t.Helper()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxLingering, cfg.Linger, cfg.Refusal = 4, time.Second, connlimit.OverloadResponse("test cap", time.Second)
	l, err = connlimit.New(inner, cfg)
	if err != nil {
		t.Fatal(err)
	}
	release = make(chan struct{})
	srv := &http.Server{ConnState: l.ConnState, ReadHeaderTimeout: time.Minute, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/block" {
			w.WriteHeader(http.StatusOK)
			_ = http.NewResponseController(w).Flush()
			select {
			case <-release:
			case <-r.Context().Done():
			}
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { srv.Close() })
	return l.Addr().String(), l, release
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// block starts a request that stays in the handler, and returns once its
// status line has arrived (the server counts it active).
func block(t *testing.T, addr string) net.Conn {
	t.Helper()
	c := dial(t, addr)
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "GET /block HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("blocking request: %v %v", res, err)
	}
	_ = c.SetDeadline(time.Time{})
	return c
}

// closedByPeer reports whether the server closed c within d.
func closedByPeer(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c)
	return err == nil // EOF: io.Copy returns nil
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 10s: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// At the cap with every connection busy in a request, a new connection is
// answered 429 overloaded with Retry-After and closed, and the busy ones
// are untouched.
func TestRefusesWhenEveryConnectionIsBusy(t *testing.T) {
	addr, l, release := serve(t, 3)
	defer close(release)
	busy := []net.Conn{block(t, addr), block(t, addr), block(t, addr)}
	c := dial(t, addr)
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	_, _ = io.WriteString(c, "GET /x HTTP/1.1\r\nHost: x\r\n\r\n")
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	var body struct{ Code string }
	_ = json.NewDecoder(res.Body).Decode(&body)
	if res.StatusCode != http.StatusTooManyRequests || body.Code != "overloaded" || res.Header.Get("Retry-After") != "1" {
		t.Fatalf("answer at the cap: %d %+v Retry-After %q", res.StatusCode, body, res.Header.Get("Retry-After"))
	}
	if st := l.Stats(); st.Refused != 1 || st.Open != 3 || st.ShedNew+st.ShedIdle != 0 {
		t.Fatalf("stats %+v, want 1 refused, 3 open, none shed", st)
	}
	for i, b := range busy {
		if closedByPeer(b, 50*time.Millisecond) {
			t.Fatalf("busy connection %d was closed", i)
		}
	}
}

// At the cap, a connection that never sent a request is shed (the oldest
// first) before an idle keep-alive one, and the newcomer is served.
func TestShedsSilentThenIdleBeforeRefusing(t *testing.T) {
	addr, l, release := serve(t, 3)
	defer close(release)
	busy := block(t, addr)
	// An idle keep-alive connection: one request answered, then quiet.
	idle := dial(t, addr)
	_, _ = io.WriteString(idle, "GET /x HTTP/1.1\r\nHost: x\r\n\r\n")
	idleR := bufio.NewReader(idle)
	if res, err := http.ReadResponse(idleR, nil); err != nil || res.StatusCode != http.StatusNoContent {
		t.Fatalf("idle's request: %v %v", res, err)
	}
	silent := dial(t, addr)
	eventually(t, "3 open", func() bool { return l.Stats().Open == 3 })

	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	get := func() {
		t.Helper()
		res, err := client.Get("http://" + addr + "/x")
		if err != nil || res.StatusCode != http.StatusNoContent {
			t.Fatalf("newcomer at the cap: %v %v", res, err)
		}
		res.Body.Close()
	}
	get()
	if !closedByPeer(silent, 5*time.Second) {
		t.Fatal("the silent connection was not shed first")
	}
	if st := l.Stats(); st.ShedNew != 1 || st.ShedIdle != 0 {
		t.Fatalf("stats %+v, want the silent connection shed", st)
	}
	eventually(t, "room again", func() bool { return l.Stats().Open < 3 })
	silent2 := dial(t, addr) // fills the place the newcomer left
	eventually(t, "3 open", func() bool { return l.Stats().Open == 3 })
	get()
	if !closedByPeer(silent2, 5*time.Second) {
		t.Fatal("the second silent connection was not shed")
	}
	eventually(t, "room again", func() bool { return l.Stats().Open < 3 })
	busy2 := block(t, addr) // fills the place with a busy connection
	get()                   // no silent one left: the idle keep-alive one goes
	if !closedByPeer(idle, 5*time.Second) {
		t.Fatal("the idle keep-alive connection was not shed")
	}
	for _, b := range []net.Conn{busy, busy2} {
		if closedByPeer(b, 50*time.Millisecond) {
			t.Fatal("a connection in a request was shed")
		}
	}
	st := l.Stats()
	if st.Refused != 0 || st.ShedNew != 2 || st.ShedIdle != 1 {
		t.Fatalf("stats %+v, want 2 silent and 1 idle shed, none refused", st)
	}
}

// The cap holds under a flood: never more than Max open, and the server
// keeps serving once the flood is gone.
func TestFloodNeverExceedsTheCap(t *testing.T) {
	const capacity, flood = 10, 60
	addr, l, release := serve(t, capacity)
	defer close(release)
	for range capacity / 2 {
		block(t, addr)
	}
	for range flood {
		dial(t, addr)
		if st := l.Stats(); st.Open > capacity {
			t.Fatalf("%d open over a cap of %d", st.Open, capacity)
		}
	}
	eventually(t, "the flood was handled", func() bool {
		st := l.Stats()
		return st.ShedNew+st.Refused >= flood-capacity/2
	})
	st := l.Stats()
	if st.Open > capacity {
		t.Fatalf("stats %+v over the cap", st)
	}
	t.Logf("after %d silent connections at cap %d with %d busy: %+v", flood, capacity, capacity/2, st)
}

func TestOverloadResponseParses(t *testing.T) {
	raw := connlimit.OverloadResponse(`say "why"`, 1500*time.Millisecond)
	res, err := http.ReadResponse(bufio.NewReader(strings.NewReader(string(raw))), nil)
	if err != nil {
		t.Fatal(err)
	}
	var body map[string]any
	if err := json.NewDecoder(res.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != 429 || res.Header.Get("Retry-After") != "2" || !res.Close ||
		body["code"] != "overloaded" || body["detail"] != `say "why"` || body["retry_after_ms"] != 1500.0 {
		t.Fatalf("%d %v %v", res.StatusCode, res.Header, body)
	}
}

func TestNewRefusesNoCap(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if _, err := connlimit.New(ln, connlimit.Config{}); err == nil {
		t.Fatal("Max 0 accepted")
	}
}

// A connection too young to judge is never shed: one that just opened has
// not had time to send its request, and one between two heartbeats is
// about to be reused. The newcomer is refused instead, and the same
// connections are shed once they have been silent or idle long enough.
func TestYoungConnectionsAreNotShed(t *testing.T) {
	const grace = 300 * time.Millisecond
	addr, l, release := serveWith(t, connlimit.Config{Max: 2, MinSilent: grace, MinIdle: grace})
	defer close(release)
	idle := dial(t, addr)
	_, _ = io.WriteString(idle, "GET /x HTTP/1.1\r\nHost: x\r\n\r\n")
	if res, err := http.ReadResponse(bufio.NewReader(idle), nil); err != nil || res.StatusCode != http.StatusNoContent {
		t.Fatalf("idle's request: %v %v", res, err)
	}
	silent := dial(t, addr)
	eventually(t, "2 open", func() bool { return l.Stats().Open == 2 })
	opened := time.Now()

	// A raw connection: the refusal may arrive before the request is
	// written, which an http.Client reports as an error rather than a 429.
	newcomer := dial(t, addr)
	_ = newcomer.SetDeadline(time.Now().Add(10 * time.Second))
	_, _ = io.WriteString(newcomer, "GET /x HTTP/1.1\r\nHost: x\r\n\r\n")
	res, err := http.ReadResponse(bufio.NewReader(newcomer), nil)
	if time.Since(opened) < grace {
		if err != nil || res.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("newcomer while both are young: %v %v, want 429", res, err)
		}
		if st := l.Stats(); st.ShedNew+st.ShedIdle != 0 {
			t.Fatalf("a young connection was shed: %+v", st)
		}
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	time.Sleep(time.Until(opened.Add(grace + 50*time.Millisecond)))
	get := func() {
		t.Helper()
		res, err := client.Get("http://" + addr + "/x")
		if err != nil || res.StatusCode != http.StatusNoContent {
			t.Fatalf("newcomer once the others are old enough: %v %v", res, err)
		}
		res.Body.Close()
	}
	get()
	if !closedByPeer(silent, 5*time.Second) {
		t.Fatal("the silent connection was not shed once old enough")
	}
	eventually(t, "room again", func() bool { return l.Stats().Open < 2 })
	_ = block(t, addr) // fills the place: only the idle one can go now
	get()
	if !closedByPeer(idle, 5*time.Second) {
		t.Fatal("the idle connection was not shed once old enough")
	}
}
