//go:build linux

package spec

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// leaseKind is one of the lock API's kinds of lease, as a test sends it:
// its path prefix and what every acquisition of it adds to the query.
type leaseKind struct {
	prefix string // "/locks/"
	query  string // "", "permits=2&" or "mode=shared&"
	// set: a lock set, which shares the locks' space; a test's name
	// stands for two locks of its own, <name>/a and <name>/b.
	set bool
}

var (
	lockKind      = leaseKind{prefix: "/locks/"}
	semaphoreKind = leaseKind{prefix: "/semaphores/", query: "permits=2&"}
	rwlockKind    = leaseKind{prefix: "/rwlocks/", query: "mode=shared&"}
	locksetKind   = leaseKind{prefix: "/locksets/", set: true}
	kinds         = []leaseKind{lockKind, semaphoreKind, rwlockKind, locksetKind}
)

// path is the path of name, of a set the two locks it stands for (named
// out of order: the sidecar sorts them).
func (k leaseKind) path(name string) string {
	if k.set {
		return k.prefix + name + "/b," + name + "/a"
	}
	return k.prefix + name
}

// acquire is the path of an acquisition of name with the given query.
func (k leaseKind) acquire(name, query string) string {
	return k.path(name) + "?" + k.query + query
}

// exerciseSemaphoreLifecycle takes, inspects, lists, extends and releases
// permits, and provokes a semaphore's own refusals: every permit held
// (409 lock_held with Retry-After), other permits (409 permits_mismatch).
func exerciseSemaphoreLifecycle(t *testing.T, api *caller) {
	api.expect(http.StatusOK, "", "GET", "/semaphores", nil, "")
	first := api.require(http.StatusOK, "POST", "/semaphores/spec/pool?permits=2&ttl=10s&owner=one", nil, "")
	second := api.require(http.StatusOK, "POST", "/semaphores/spec/pool", nil, `{"permits":2,"ttl":"10s","owner":"two"}`)
	full := api.expect(http.StatusConflict, "lock_held", "POST", "/semaphores/spec/pool?permits=2", nil, "")
	if full.header.Get("Retry-After") == "" {
		t.Error("409 lock_held of a full semaphore without Retry-After")
	}
	api.expect(http.StatusConflict, "permits_mismatch", "POST", "/semaphores/spec/pool?permits=3", nil, "")
	status := api.expect(http.StatusOK, "", "GET", "/semaphores/spec/pool?permits=2", nil, "")
	if !strings.Contains(string(status.body), `"held":2`) {
		t.Errorf("a full semaphore inspected: %s", status.body)
	}
	api.expect(http.StatusOK, "", "GET", "/semaphores", nil, "")
	tok := hdr{"Lock-Token": first.field("token")}
	api.expect(http.StatusOK, "", "PUT", "/semaphores/spec/pool", tok, "")
	api.expect(http.StatusOK, "", "PUT", "/semaphores/spec/pool", nil, `{"token":"`+first.field("token")+`","ttl":"20s"}`)
	api.expect(http.StatusNoContent, "", "DELETE", "/semaphores/spec/pool", tok, "")
	api.expect(http.StatusGone, "lease_gone", "DELETE", "/semaphores/spec/pool", tok, "")
	api.expect(http.StatusGone, "lease_gone", "PUT", "/semaphores/spec/pool", tok, "")
	api.expect(http.StatusGone, "lease_gone", "GET", "/semaphores/spec/pool/events", tok, "")
	api.expect(http.StatusNoContent, "", "GET", "/semaphores/spec/pool/events", hdr{"Lock-Token": first.field("token"), "Last-Event-ID": "3"}, "")
	api.expect(http.StatusNoContent, "", "POST", "/semaphores/spec/pool?permits=2&hold=true", hdr{"Last-Event-ID": "1"}, "")
	api.expect(http.StatusNoContent, "", "DELETE", "/semaphores/spec/pool", hdr{"Lock-Token": second.field("token")}, "")

	key := hdr{"Idempotency-Key": "spec-harness-key-0002"}
	idem := api.require(http.StatusOK, "POST", "/semaphores/spec/idem?permits=2&ttl=10s", key, "")
	api.expect(http.StatusUnprocessableEntity, "idempotency_mismatch", "POST", "/semaphores/spec/idem?permits=2&ttl=20s", key, "")
	api.expect(http.StatusNoContent, "", "DELETE", "/semaphores/spec/idem", hdr{"Lock-Token": idem.field("token")}, "")
}

// exerciseRWLockLifecycle takes two readers, is refused a writer while
// they read (409 lock_held with Retry-After), inspects and lists them,
// extends and releases them, then takes, inspects and releases a writer;
// and replays an acquisition by its Idempotency-Key.
func exerciseRWLockLifecycle(t *testing.T, api *caller) {
	api.expect(http.StatusOK, "", "GET", "/rwlocks", nil, "")
	first := api.require(http.StatusOK, "POST", "/rwlocks/spec/rw?mode=shared&ttl=10s&owner=one", nil, "")
	second := api.require(http.StatusOK, "POST", "/rwlocks/spec/rw", nil, `{"mode":"shared","ttl":"10s","owner":"two"}`)
	held := api.expect(http.StatusConflict, "lock_held", "POST", "/rwlocks/spec/rw?mode=exclusive", nil, "")
	if held.header.Get("Retry-After") == "" {
		t.Error("409 lock_held of a read lock without Retry-After")
	}
	status := api.expect(http.StatusOK, "", "GET", "/rwlocks/spec/rw", nil, "")
	if !strings.Contains(string(status.body), `"reader_count":2`) || !strings.Contains(string(status.body), `"writer":null`) {
		t.Errorf("a read lock inspected: %s", status.body)
	}
	api.expect(http.StatusOK, "", "GET", "/rwlocks", nil, "")
	tok := hdr{"Lock-Token": first.field("token")}
	api.expect(http.StatusOK, "", "PUT", "/rwlocks/spec/rw", tok, "")
	api.expect(http.StatusOK, "", "PUT", "/rwlocks/spec/rw", nil, `{"token":"`+first.field("token")+`","ttl":"20s"}`)
	api.expect(http.StatusNoContent, "", "DELETE", "/rwlocks/spec/rw", tok, "")
	api.expect(http.StatusGone, "lease_gone", "DELETE", "/rwlocks/spec/rw", tok, "")
	api.expect(http.StatusGone, "lease_gone", "PUT", "/rwlocks/spec/rw", tok, "")
	api.expect(http.StatusGone, "lease_gone", "GET", "/rwlocks/spec/rw/events", tok, "")
	api.expect(http.StatusNoContent, "", "GET", "/rwlocks/spec/rw/events", hdr{"Lock-Token": first.field("token"), "Last-Event-ID": "3"}, "")
	api.expect(http.StatusNoContent, "", "POST", "/rwlocks/spec/rw?mode=shared&hold=true", hdr{"Last-Event-ID": "1"}, "")
	api.expect(http.StatusNoContent, "", "DELETE", "/rwlocks/spec/rw", hdr{"Lock-Token": second.field("token")}, "")

	writer := api.require(http.StatusOK, "POST", "/rwlocks/spec/rw?ttl=10s&owner=writer", nil, "")
	api.expect(http.StatusConflict, "lock_held", "POST", "/rwlocks/spec/rw?mode=shared", nil, "")
	if status := api.expect(http.StatusOK, "", "GET", "/rwlocks/spec/rw", nil, ""); !strings.Contains(string(status.body), `"owner":"writer"`) {
		t.Errorf("a write lock inspected: %s", status.body)
	}
	api.expect(http.StatusNoContent, "", "DELETE", "/rwlocks/spec/rw", hdr{"Lock-Token": writer.field("token")}, "")

	key := hdr{"Idempotency-Key": "spec-harness-key-0003"}
	idem := api.require(http.StatusOK, "POST", "/rwlocks/spec/idem?mode=shared&ttl=10s", key, "")
	api.expect(http.StatusUnprocessableEntity, "idempotency_mismatch", "POST", "/rwlocks/spec/idem?mode=shared&ttl=20s", key, "")
	api.expect(http.StatusNoContent, "", "DELETE", "/rwlocks/spec/idem", hdr{"Lock-Token": idem.field("token")}, "")
}

// exerciseLockSetLifecycle takes a set, is refused a set that overlaps
// it (409 lock_held with Retry-After) and one that changed while it was
// taken (409 set_changed), inspects and lists it and one of its locks,
// extends and releases it by its names in other orders; and replays an
// acquisition by its Idempotency-Key.
func exerciseLockSetLifecycle(t *testing.T, api *caller) {
	api.expect(http.StatusOK, "", "GET", "/locksets", nil, "")
	set := api.require(http.StatusOK, "POST", "/locksets/spec/set/b,spec/set/a?ttl=10s&owner=one", nil, "")
	if set.field("name") != "spec/set/a,spec/set/b" || !strings.Contains(string(set.body), `"locks":[{"name":"spec/set/a"`) {
		t.Errorf("a set's lease: %s", set.body)
	}
	held := api.expect(http.StatusConflict, "lock_held", "POST", "/locksets/spec/set/c,spec/set/b", nil, `{"ttl":"10s","owner":"two"}`)
	if held.header.Get("Retry-After") == "" {
		t.Error("409 lock_held of a lock set without Retry-After")
	}
	if status := api.expect(http.StatusOK, "", "GET", "/locksets/spec/set/c,spec/set/a,spec/set/b", nil, ""); !strings.Contains(string(status.body), `"held":2`) {
		t.Errorf("a set of three with two held, inspected: %s", status.body)
	}
	if lock := api.expect(http.StatusOK, "", "GET", "/locks/spec/set/a", nil, ""); !strings.Contains(string(lock.body), `"owner":"one"`) {
		t.Errorf("a lock of a held set, inspected: %s", lock.body)
	}
	api.expect(http.StatusOK, "", "GET", "/locksets", nil, "")
	tok := hdr{"Lock-Token": set.field("token")}
	api.expect(http.StatusOK, "", "PUT", "/locksets/spec/set/a,spec/set/b", tok, "")
	api.expect(http.StatusOK, "", "PUT", "/locksets/spec/set/b,spec/set/a", nil, `{"token":"`+set.field("token")+`","ttl":"20s"}`)
	api.expect(http.StatusNoContent, "", "DELETE", "/locksets/spec/set/b,spec/set/a", tok, "")
	api.expect(http.StatusGone, "lease_gone", "DELETE", "/locksets/spec/set/a,spec/set/b", tok, "")
	api.expect(http.StatusGone, "lease_gone", "PUT", "/locksets/spec/set/a,spec/set/b", tok, "")
	api.expect(http.StatusGone, "lease_gone", "GET", "/locksets/spec/set/a,spec/set/b/events", tok, "")
	api.expect(http.StatusNoContent, "", "GET", "/locksets/spec/set/a,spec/set/b/events", hdr{"Lock-Token": set.field("token"), "Last-Event-ID": "3"}, "")
	api.expect(http.StatusNoContent, "", "POST", "/locksets/spec/set/a,spec/set/b?hold=true", hdr{"Last-Event-ID": "1"}, "")

	key := hdr{"Idempotency-Key": "spec-harness-key-0004"}
	idem := api.require(http.StatusOK, "POST", "/locksets/spec/idem/a,spec/idem/b?ttl=10s", key, "")
	if again := api.expect(http.StatusOK, "", "POST", "/locksets/spec/idem/b,spec/idem/a?ttl=10s", key, ""); again.field("token") != idem.field("token") {
		t.Errorf("an idempotent retry of a set: %s, first %s", again.body, idem.body)
	}
	api.expect(http.StatusUnprocessableEntity, "idempotency_mismatch", "POST", "/locksets/spec/idem/a,spec/idem/b?ttl=20s", key, "")
	api.expect(http.StatusNoContent, "", "DELETE", "/locksets/spec/idem/a,spec/idem/b", hdr{"Lock-Token": idem.field("token")}, "")
	// The key of a single lock finds that lock, with its own token, among
	// the set's: the set changed while it was taken.
	single := hdr{"Idempotency-Key": "spec-harness-key-0005"}
	api.require(http.StatusOK, "POST", "/locks/spec/changed/b?ttl=10s", single, "")
	api.expect(http.StatusConflict, "set_changed", "POST", "/locksets/spec/changed/a,spec/changed/b?ttl=10s", single, "")
	api.expect(http.StatusOK, "", "GET", "/locksets", nil, "")
}

// exerciseKindsBadInput provokes the new kinds' 400 codes and their 413s.
func exerciseKindsBadInput(t *testing.T, api *caller) {
	tok := hdr{"Lock-Token": strings.Repeat("0", 32)}
	for _, bad := range []struct{ code, method, path string }{
		{"invalid_name", "POST", "/semaphores/a%252Fb?permits=2"},
		{"invalid_name", "PUT", "/semaphores/a%20b"},
		{"invalid_name", "DELETE", "/semaphores/a/../b"},
		{"invalid_name", "GET", "/semaphores/a%252Fb?permits=2"},
		{"invalid_name", "GET", "/semaphores/a%252Fb/events"},
		{"invalid_permits", "POST", "/semaphores/spec/bad"},
		{"invalid_permits", "POST", "/semaphores/spec/bad?permits=65"},
		{"invalid_permits", "GET", "/semaphores/spec/bad"},
		{"invalid_permits", "POST", "/locks/spec/bad?permits=2"},
		{"invalid_ttl", "POST", "/semaphores/spec/bad?permits=2&ttl=soon"},
		{"invalid_query", "POST", "/semaphores/spec/bad?permits=2&colour=red"},
		{"invalid_query", "GET", "/semaphores/spec/bad?permits=2&colour=red"},
		{"invalid_watch", "GET", "/locks/spec/bad?watch=maybe"},
		{"invalid_query", "GET", "/locks/spec/bad?watch=true&colour=red"},
		{"missing_token", "PUT", "/semaphores/spec/bad"},
		{"missing_token", "DELETE", "/semaphores/spec/bad"},
		{"missing_token", "GET", "/semaphores/spec/bad/events"},
		{"invalid_token", "PUT", "/semaphores/spec/bad?token=xyz"},
		{"invalid_name", "POST", "/rwlocks/a%252Fb?mode=shared"},
		{"invalid_name", "PUT", "/rwlocks/a%20b"},
		{"invalid_name", "DELETE", "/rwlocks/a/../b"},
		{"invalid_name", "GET", "/rwlocks/a%252Fb"},
		{"invalid_name", "GET", "/rwlocks/a%252Fb/events"},
		{"invalid_mode", "POST", "/rwlocks/spec/bad?mode=read"},
		{"invalid_mode", "POST", "/locks/spec/bad?mode=shared"},
		{"invalid_mode", "POST", "/semaphores/spec/bad?permits=2&mode=shared"},
		{"invalid_permits", "POST", "/rwlocks/spec/bad?permits=2"},
		{"invalid_ttl", "POST", "/rwlocks/spec/bad?mode=shared&ttl=soon"},
		{"invalid_query", "POST", "/rwlocks/spec/bad?mode=shared&colour=red"},
		{"invalid_query", "GET", "/rwlocks/spec/bad?mode=shared"},
		{"missing_token", "PUT", "/rwlocks/spec/bad"},
		{"missing_token", "DELETE", "/rwlocks/spec/bad"},
		{"missing_token", "GET", "/rwlocks/spec/bad/events"},
		{"invalid_token", "PUT", "/rwlocks/spec/bad?token=xyz"},
		{"invalid_name", "POST", "/locksets/spec/a,spec/a"},
		{"invalid_name", "POST", "/locksets/spec/a,,spec/b"},
		{"invalid_name", "PUT", "/locksets/0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16"},
		{"invalid_name", "DELETE", "/locksets/spec/a,spec/../b"},
		{"invalid_name", "GET", "/locksets/spec/a,spec%252Fb"},
		{"invalid_name", "GET", "/locksets/spec/a,spec/a/events"},
		{"invalid_permits", "POST", "/locksets/spec/a,spec/b?permits=2"},
		{"invalid_mode", "POST", "/locksets/spec/a,spec/b?mode=shared"},
		{"invalid_ttl", "POST", "/locksets/spec/a,spec/b?ttl=soon"},
		{"invalid_query", "POST", "/locksets/spec/a,spec/b?colour=red"},
		{"invalid_query", "GET", "/locksets/spec/a,spec/b?watch=true"},
		{"missing_token", "PUT", "/locksets/spec/a,spec/b"},
		{"missing_token", "DELETE", "/locksets/spec/a,spec/b"},
		{"missing_token", "GET", "/locksets/spec/a,spec/b/events"},
		{"invalid_token", "PUT", "/locksets/spec/a,spec/b?token=xyz"},
	} {
		api.expect(http.StatusBadRequest, bad.code, bad.method, bad.path, nil, "")
	}
	api.expect(http.StatusBadRequest, "invalid_body", "POST", "/semaphores/spec/bad", nil, `{"permits":true}`)
	api.expect(http.StatusBadRequest, "invalid_request", "POST", "/semaphores/spec/bad?permits=2", nil, `{"permits":2}`)
	api.expect(http.StatusBadRequest, "invalid_mode", "POST", "/rwlocks/spec/bad", nil, `{"mode":"write"}`)
	api.expect(http.StatusBadRequest, "invalid_request", "POST", "/rwlocks/spec/bad?mode=shared", nil, `{"mode":"shared"}`)

	big := `{"owner":"` + strings.Repeat("x", 70<<10) + `"}`
	for _, method := range []string{"POST", "PUT", "DELETE"} {
		api.expect(http.StatusRequestEntityTooLarge, "body_too_large", method, "/semaphores/spec/big?permits=2", tok, big)
		api.expect(http.StatusRequestEntityTooLarge, "body_too_large", method, "/rwlocks/spec/big?mode=shared", tok, big)
		api.expect(http.StatusRequestEntityTooLarge, "body_too_large", method, "/locksets/spec/big/a,spec/big/b", tok, big)
	}
	api.expect(http.StatusRequestEntityTooLarge, "body_too_large", "GET", "/semaphores/spec/big/events", tok, big)
	api.expect(http.StatusRequestEntityTooLarge, "body_too_large", "GET", "/rwlocks/spec/big/events", tok, big)
	api.expect(http.StatusRequestEntityTooLarge, "body_too_large", "GET", "/locksets/spec/big/a,spec/big/b/events", tok, big)
}

// exerciseStreamsOf opens every kind of lease stream of k at once and
// reads each to its end: a held lease that max_hold ends (acquired,
// renewed, lost), a held lease released by its token (acquired,
// released), the events of a heartbeat lease left to expire (lost,
// expired), and those of one renewed and then released (renewed,
// released).
func exerciseStreamsOf(t *testing.T, api *caller, k leaseKind) {
	capped, _ := api.stream("POST", k.acquire("spec/streams/capped", "hold=true&ttl=3s&max_hold=3s"), nil)
	released, _ := api.stream("POST", k.acquire("spec/streams/released", "hold=true&ttl=30s"), nil)
	lapsing := api.require(http.StatusOK, "POST", k.acquire("spec/streams/lapsing", "ttl=2s"), nil, "")
	lapsingEvents, _ := api.stream("GET", k.path("spec/streams/lapsing")+"/events", hdr{"Lock-Token": lapsing.field("token")})
	renewing := api.require(http.StatusOK, "POST", k.acquire("spec/streams/renewing", "ttl=30s"), nil, "")
	renewingEvents, _ := api.stream("GET", k.path("spec/streams/renewing")+"/events", hdr{"Lock-Token": renewing.field("token")})

	ev := nextEvent(t, released, 10*time.Second)
	var lease struct{ Token string }
	if err := json.Unmarshal([]byte(ev.data), &lease); ev.name != "acquired" || err != nil {
		t.Fatalf("%s: a held stream opened with %s %s", k.prefix, ev.name, ev.data)
	}
	api.expect(http.StatusNoContent, "", "DELETE", k.path("spec/streams/released"), hdr{"Lock-Token": lease.Token}, "")
	waitForEvent(t, released, "released", 10*time.Second)

	if ev := nextEvent(t, capped, 10*time.Second); ev.name != "acquired" {
		t.Fatalf("%s: a held stream opened with %q, want acquired", k.prefix, ev.name)
	}
	waitForEvent(t, capped, "renewed", 10*time.Second)
	if ev := waitForEvent(t, capped, "lost", 10*time.Second); !strings.Contains(ev.data, `"max_hold"`) {
		t.Errorf("%s: the held stream ended with %s, want reason max_hold", k.prefix, ev.data)
	}
	if ev := waitForEvent(t, lapsingEvents, "lost", 10*time.Second); !strings.Contains(ev.data, `"expired"`) {
		t.Errorf("%s: the events stream ended with %s, want reason expired", k.prefix, ev.data)
	}
	waitForEvent(t, renewingEvents, "renewed", 10*time.Second)
	api.expect(http.StatusNoContent, "", "DELETE", k.path("spec/streams/renewing"), hdr{"Lock-Token": renewing.field("token")}, "")
	waitForEvent(t, renewingEvents, "released", 10*time.Second)
}

// exerciseWatch follows a lock through a watch stream: state, then a
// grant (acquired, naming the owner) and its release (released).
func exerciseWatch(t *testing.T, api *caller) {
	watch, closeWatch := api.stream("GET", "/locks/spec/watched?watch=true", nil)
	defer closeWatch()
	if ev := nextEvent(t, watch, 10*time.Second); ev.name != "state" || !strings.Contains(ev.data, `"held":false`) {
		t.Fatalf("a watch of a free lock opened with %s %s", ev.name, ev.data)
	}
	lease := api.require(http.StatusOK, "POST", "/locks/spec/watched?ttl=10s&owner=spec-leader", nil, "")
	if ev := nextEvent(t, watch, 10*time.Second); ev.name != "acquired" || !strings.Contains(ev.data, `"owner":"spec-leader"`) {
		t.Fatalf("a grant watched as %s %s", ev.name, ev.data)
	}
	api.expect(http.StatusNoContent, "", "DELETE", "/locks/spec/watched", hdr{"Lock-Token": lease.field("token")}, "")
	if ev := nextEvent(t, watch, 10*time.Second); ev.name != "released" || !strings.Contains(ev.data, `"reason":"released"`) {
		t.Fatalf("a release watched as %s %s", ev.name, ev.data)
	}
}

// watchCap is the sidecar's cap of watch streams (internal/watch's
// DefaultMaxStreams, which docs/api.md and the spec state).
const watchCap = 256

// exerciseWatchCap fills the sidecar's watch streams until one is refused
// 429 too_many_watchers: at the latest the one past the cap (sooner if a
// stream of an earlier step has not left yet).
func exerciseWatchCap(t *testing.T, api *caller) {
	var closers []func()
	defer func() {
		for _, c := range closers {
			c()
		}
	}()
	for opened := 0; opened <= watchCap; opened++ {
		req := api.request(t.Context(), "GET", "/locks/spec/crowded?watch=true", nil, "")
		res, err := api.hc.Do(req)
		if err != nil {
			t.Fatalf("watch %d: %v", opened+1, err)
		}
		if res.StatusCode == http.StatusTooManyRequests {
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if opened == 0 {
				t.Fatal("the first watch was refused")
			}
			if r := (reply{res.StatusCode, res.Header, body}); r.problemCode() != "too_many_watchers" || r.header.Get("Retry-After") == "" {
				t.Errorf("a watch past the cap: %d %q (Retry-After %q)", r.status, r.problemCode(), r.header.Get("Retry-After"))
			}
			t.Logf("watch %d was refused 429 (cap %d)", opened+1, watchCap)
			return
		}
		closers = append(closers, func() { res.Body.Close() })
		if res.StatusCode != http.StatusOK {
			t.Fatalf("watch %d: %d", opened+1, res.StatusCode)
		}
	}
	t.Fatalf("%d watch streams were served: the cap is %d", watchCap+1, watchCap)
}
