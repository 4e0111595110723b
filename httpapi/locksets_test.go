package httpapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sidelock/sidelock/internal/redistest"
)

// Lock sets through HTTP, over real masters: the read/write lock tests'
// helpers, on /locksets.

// setAPI serves the lock API over real masters, with a node timeout that
// a busy machine meets (see realAPI).
func setAPI(t *testing.T, masters []*redistest.Server) *httptest.Server {
	return realAPI(t, masters, nil)
}

// setGrant is a lock set's lease body.
type setGrant struct {
	Name       string    `json:"name"`
	Token      string    `json:"token"`
	Owner      string    `json:"owner"`
	TTL        string    `json:"ttl"`
	ValidUntil time.Time `json:"valid_until"`
	Fence      int64     `json:"fence"`
	Locks      []struct {
		Name       string    `json:"name"`
		Fence      int64     `json:"fence"`
		ValidUntil time.Time `json:"valid_until"`
	} `json:"locks"`
}

// takeSet POSTs to /locksets/{names} and returns the set granted.
func takeSet(t *testing.T, srv *httptest.Server, names, query string) setGrant {
	t.Helper()
	r := call(t, srv, "POST", "/locksets/"+names+"?"+query, "")
	if r.status != http.StatusOK {
		t.Fatalf("POST /locksets/%s?%s: %d %s", names, query, r.status, r.raw)
	}
	return setOf(t, r.raw, names)
}

// setOf reads a set's lease and checks its shape: the canonical name (the
// names sorted), a token, no fence of its own, each lock in canonical
// order with its fence, and the set's valid_until the earliest of its
// locks'.
func setOf(t *testing.T, raw, names string) setGrant {
	t.Helper()
	var g setGrant
	if err := json.Unmarshal([]byte(raw), &g); err != nil {
		t.Fatal(err)
	}
	want := strings.Split(names, ",")
	slices.Sort(want)
	var got []string
	earliest := g.Locks[0].ValidUntil
	for _, l := range g.Locks {
		got = append(got, l.Name)
		if l.Fence == 0 {
			t.Errorf("lock %s of the set has no fence: %s", l.Name, raw)
		}
		if l.ValidUntil.Before(earliest) {
			earliest = l.ValidUntil
		}
	}
	var top map[string]any
	_ = json.Unmarshal([]byte(raw), &top)
	if _, fence := top["fence"]; fence || g.Name != strings.Join(want, ",") || !slices.Equal(got, want) || !g.ValidUntil.Equal(earliest) {
		t.Fatalf("the set %s: %s; want the name %q, no fence, its locks %v in that order, valid until the earliest of theirs",
			names, raw, strings.Join(want, ","), want)
	}
	return g
}

func (g setGrant) token() []string { return []string{"Lock-Token", g.Token} }

// lockHeld tells whether GET /locks/{name} says the lock is held.
func lockHeld(t *testing.T, srv *httptest.Server, name string) bool {
	t.Helper()
	r := call(t, srv, "GET", "/locks/"+name, "")
	if r.status != http.StatusOK {
		t.Fatalf("GET /locks/%s: %d %s", name, r.status, r.raw)
	}
	return r.body["held"] == true
}

// setStatus is the answer of GET /locksets/{names}.
type setStatus struct {
	Name  string `json:"name"`
	Held  int    `json:"held"`
	Locks []struct {
		Name  string `json:"name"`
		Held  bool   `json:"held"`
		Owner string `json:"owner"`
		Fence int64  `json:"fence"`
	} `json:"locks"`
}

// A set is taken whole: its answer names it canonically with each lock's
// fence, and each lock is then held as a lock (GET /locks/{name}, with the
// set's owner and that lock's fence). The set is inspected and listed
// without its token, extended and released by its names in other orders,
// and once released every lock is free and the token is gone.
func TestLockSetThroughHTTP(t *testing.T) {
	srv := setAPI(t, redistest.StartN(t, 3))
	g := takeSet(t, srv, "audit,accounts/2,accounts/1", "ttl=30s&owner=transfer")
	if g.Owner != "transfer" || len(g.Token) != 32 || g.TTL != "30s" {
		t.Fatalf("the set's lease: %+v", g)
	}
	for _, l := range g.Locks {
		r := call(t, srv, "GET", "/locks/"+l.Name, "")
		if r.body["held"] != true || r.body["owner"] != "transfer" || r.body["fence"] != float64(l.Fence) {
			t.Fatalf("the lock %s of a held set: %s", l.Name, r.raw)
		}
	}

	r := call(t, srv, "GET", "/locksets/accounts/2,audit,accounts/1", "")
	var st setStatus
	if err := json.Unmarshal([]byte(r.raw), &st); err != nil || r.status != http.StatusOK || jsonHas(r.raw, "token") {
		t.Fatalf("inspect: %d %s", r.status, r.raw)
	}
	if st.Name != g.Name || st.Held != 3 || len(st.Locks) != 3 {
		t.Fatalf("inspect of a held set: %s", r.raw)
	}
	for i, l := range st.Locks {
		if l.Name != g.Locks[i].Name || !l.Held || l.Owner != "transfer" || l.Fence != g.Locks[i].Fence {
			t.Errorf("inspected lock %d: %+v, want %s held by transfer with fence %d", i, l, g.Locks[i].Name, g.Locks[i].Fence)
		}
	}
	list := call(t, srv, "GET", "/locksets", "")
	if sets, _ := list.body["locksets"].([]any); len(sets) != 1 || jsonHas(list.raw, "token") || !strings.Contains(list.raw, `"name":"`+g.Name+`"`) {
		t.Fatalf("GET /locksets with one set: %s", list.raw)
	}

	ext := call(t, srv, "PUT", "/locksets/accounts/1,audit,accounts/2?ttl=40s", "", g.token()...)
	if ext.status != http.StatusOK || ext.body["ttl"] != "40s" {
		t.Fatalf("extend by the names in another order: %d %s", ext.status, ext.raw)
	}
	setOf(t, ext.raw, "audit,accounts/2,accounts/1")
	if r := call(t, srv, "DELETE", "/locksets/audit,accounts/1,accounts/2", "", g.token()...); r.status != http.StatusNoContent {
		t.Fatalf("release by the names in another order: %d %s", r.status, r.raw)
	}
	for _, l := range g.Locks {
		if lockHeld(t, srv, l.Name) {
			t.Errorf("the lock %s after its set's release is held", l.Name)
		}
	}
	if r := call(t, srv, "DELETE", "/locksets/accounts/1,accounts/2,audit", "", g.token()...); r.status != http.StatusGone || r.body["code"] != "lease_gone" {
		t.Fatalf("releasing a released set: %d %s", r.status, r.raw)
	}
	if r := call(t, srv, "GET", "/locksets", ""); r.raw != `{"locksets":[]}`+"\n" {
		t.Fatalf("GET /locksets once released: %s", r.raw)
	}
}

// With one of its names held elsewhere (another sidecar), a set is refused
// 409 lock_held with a hint, and none of its other names is left held: b
// was taken before the refusal on c, and released before the answer.
func TestLockSetIsAllOrNothing(t *testing.T) {
	masters := redistest.StartN(t, 3)
	srv, other := setAPI(t, masters), setAPI(t, masters)
	held := call(t, other, "POST", "/locks/c?ttl=30s", "")
	if held.status != http.StatusOK {
		t.Fatalf("taking c: %d %s", held.status, held.raw)
	}
	r := call(t, srv, "POST", "/locksets/d,c,b?ttl=30s", "")
	if r.status != http.StatusConflict || r.body["code"] != "lock_held" || r.header.Get("Retry-After") == "" {
		t.Fatalf("a set with c held elsewhere: %d %s (Retry-After %q)", r.status, r.raw, r.header.Get("Retry-After"))
	}
	for _, name := range []string{"b", "d"} {
		if lockHeld(t, other, name) {
			t.Errorf("%s is held after its set was refused", name)
		}
	}
	if r := call(t, srv, "GET", "/locks", ""); r.raw != `{"locks":[]}`+"\n" {
		t.Fatalf("the refused set left leases: %s", r.raw)
	}
	if r := call(t, srv, "GET", "/locksets/b,c,d", ""); r.body["held"] != float64(1) {
		t.Fatalf("inspect with only c held: %s", r.raw)
	}
}

// Two sets of the same names, asked in opposite orders on two sidecars,
// both waiting while one of their names is held: both are granted, in
// turn, as soon as the name is released and then the first set is.
func TestOverlappingLockSetsTakeTurns(t *testing.T) {
	masters := redistest.StartN(t, 3)
	a, b := setAPI(t, masters), setAPI(t, masters)
	y := call(t, a, "POST", "/locks/y?ttl=30s", "")
	if y.status != http.StatusOK {
		t.Fatalf("taking y: %d %s", y.status, y.raw)
	}
	answers := map[*httptest.Server]<-chan response{
		a: postAsync(t, a, "/locksets/x,y,z?wait=5s&ttl=30s&owner=a"),
		b: postAsync(t, b, "/locksets/z,y,x?wait=5s&ttl=30s&owner=b"),
	}
	waitFor(t, "a set to take x and wait for y", func() bool { return lockHeld(t, a, "x") })
	if r := call(t, a, "DELETE", "/locks/y", "", "Lock-Token", y.body["token"].(string)); r.status != http.StatusNoContent {
		t.Fatalf("releasing y: %d %s", r.status, r.raw)
	}
	for range 2 {
		var got response
		var on *httptest.Server
		select {
		case got = <-answers[a]:
			on = a
		case got = <-answers[b]:
			on = b
		}
		delete(answers, on)
		if got.status != http.StatusOK {
			t.Fatalf("a waiting set: %d %s", got.status, got.raw)
		}
		g := setOf(t, got.raw, "x,y,z")
		if r := call(t, on, "DELETE", "/locksets/z,x,y", "", g.token()...); r.status != http.StatusNoContent {
			t.Fatalf("releasing the set of %s: %d %s", g.Owner, r.status, r.raw)
		}
	}
}

// Releasing one lock of a set through the lock API, with the set's token,
// ends the set: its events stream reports released (naming the set) and
// ends, its other lock is free, and the set's token holds nothing more.
func TestReleasingOneLockEndsItsSet(t *testing.T) {
	srv := setAPI(t, redistest.StartN(t, 3))
	g := takeSet(t, srv, "q,p", "ttl=30s")
	events, _ := openClosable(t, srv, "GET", "/locksets/q,p/events", g.token()...)
	if r := call(t, srv, "DELETE", "/locks/q", "", g.token()...); r.status != http.StatusNoContent {
		t.Fatalf("releasing the lock q with the set's token: %d %s", r.status, r.raw)
	}
	if ev := events.next(); ev.kind != "released" || !strings.Contains(ev.data, `"name":"p,q"`) {
		t.Fatalf("the set's stream after one lock's release: %s %s", ev.kind, ev.data)
	}
	if events.sc.Scan() {
		t.Fatalf("the set's stream goes on after its end: %q", events.sc.Text())
	}
	waitFor(t, "p to end with its set", func() bool { return !lockHeld(t, srv, "p") })
	if r := call(t, srv, "PUT", "/locksets/p,q", "", g.token()...); r.status != http.StatusGone {
		t.Fatalf("extending the ended set: %d %s", r.status, r.raw)
	}
	if status, _ := reconnect(t, srv, "GET", "/locksets/p,q/events", append(g.token(), "Last-Event-ID", "1")...); status != http.StatusNoContent {
		t.Fatalf("a reconnect to the ended set's stream: %d, want 204", status)
	}
}

// hold=true holds a set for as long as the connection lives: acquired
// carries the set's lease with its locks, another caller is refused one
// of its locks meanwhile, and once the stream closes the set is free.
func TestLockSetHeldStream(t *testing.T) {
	srv := setAPI(t, redistest.StartN(t, 3))
	held, closeHeld := openClosable(t, srv, "POST", "/locksets/h2,h1?hold=true")
	ev := held.next()
	if ev.kind != "acquired" {
		t.Fatalf("a held set opened with %s %s", ev.kind, ev.data)
	}
	if g := setOf(t, ev.data, "h1,h2"); len(g.Token) != 32 {
		t.Fatalf("a held set's acquired event has no token: %s", ev.data)
	}
	if r := call(t, srv, "POST", "/locks/h2", ""); r.status != http.StatusConflict {
		t.Fatalf("a lock of a held set: %d %s", r.status, r.raw)
	}
	closeHeld()
	takeSet(t, srv, "h1,h2", "wait=5s")
	if status, _ := reconnect(t, srv, "POST", "/locksets/h1,h2?hold=true", "Last-Event-ID", "4"); status != http.StatusNoContent {
		t.Fatalf("a held set's reconnect: %d, want 204", status)
	}
}

// A lock of the set that ends while the set is taken is 409 set_changed,
// and nothing of the set is held: here the Idempotency-Key of a single
// lock b replays b (its own token) into the set, whose a has the set's.
func TestLockSetChangedIsAConflict(t *testing.T) {
	srv := setAPI(t, redistest.StartN(t, 3))
	key := []string{"Idempotency-Key", "lockset-test-key-0001"}
	if r := call(t, srv, "POST", "/locks/b?ttl=30s", "", key...); r.status != http.StatusOK {
		t.Fatalf("taking b: %d %s", r.status, r.raw)
	}
	r := call(t, srv, "POST", "/locksets/a,b?ttl=30s", "", key...)
	if r.status != http.StatusConflict || r.body["code"] != "set_changed" || !strings.Contains(r.raw, "try again") {
		t.Fatalf("a set that found only some of it by its key: %d %s", r.status, r.raw)
	}
	if lockHeld(t, srv, "a") {
		t.Fatal("a is held after its set was refused")
	}
}

// A set is 1 to 16 distinct lock names: a repeated, empty or bad name, 17
// names, or a name ending in the reserved segment is 400 invalid_name,
// saying why, on every route; permits, mode and an inspection's
// parameters are refused. %2C is a ',' and 16 names are a set.
func TestLockSetNamesAreValidated(t *testing.T) {
	srv := setAPI(t, redistest.StartN(t, 3))
	seventeen := make([]string, 17)
	for i := range seventeen {
		seventeen[i] = fmt.Sprintf("n%d", i)
	}
	for _, c := range []struct {
		method, path, code, says string
	}{
		{"POST", "/locksets/a,b,a", "invalid_name", `the lock set names \"a\" twice`},
		{"POST", "/locksets/" + strings.Join(seventeen, ","), "invalid_name", "at most 16 names (it has 17)"},
		{"POST", "/locksets/a,b%20c", "invalid_name", "may contain only"},
		{"POST", "/locksets/a,,b", "invalid_name", `1 to 256 bytes (in the set \"a,,b\")`},
		{"POST", "/locksets/a,", "invalid_name", "1 to 256 bytes"},
		{"POST", "/locksets/", "invalid_name", "1 to 256 bytes"},
		{"POST", "/locksets/a,x/events", "invalid_name", `segment \"events\"`},
		{"POST", "/locksets/a%252Fb,c", "invalid_name", "may contain only"},
		{"PUT", "/locksets/a,a", "invalid_name", "twice"},
		{"DELETE", "/locksets/a,a", "invalid_name", "twice"},
		{"GET", "/locksets/a,a", "invalid_name", "twice"},
		{"GET", "/locksets/a,a/events", "invalid_name", "twice"},
		{"POST", "/locksets/a,b?permits=2", "invalid_permits", "a lock set takes no permits"},
		{"POST", "/locksets/a,b?mode=shared", "invalid_mode", "a lock set takes no mode"},
		{"GET", "/locksets/a,b?watch=true", "invalid_query", "unknown parameter"},
	} {
		r := call(t, srv, c.method, c.path, "")
		if r.status != http.StatusBadRequest || r.body["code"] != c.code || !strings.Contains(r.raw, c.says) {
			t.Errorf("%s %.60s: %d %s, want 400 %s saying %s", c.method, c.path, r.status, r.raw, c.code, c.says)
		}
	}
	if r := call(t, srv, "GET", "/locks", ""); r.raw != `{"locks":[]}`+"\n" {
		t.Fatalf("refused sets took locks: %s", r.raw)
	}
	if r := call(t, srv, "POST", "/locksets/e2%2Ce1", ""); r.status != http.StatusOK {
		t.Fatalf("an escaped ',': %d %s", r.status, r.raw)
	} else {
		setOf(t, r.raw, "e1,e2")
	}
	takeSet(t, srv, strings.Join(seventeen[:16], ","), "")
}
