package sim

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sidelock/sidelock/internal/lease"
)

// The oracle's own tests: each check must fire on a small hand-made
// history that breaks its promise, and stay quiet on one that keeps it,
// so a check that silently stopped working cannot pass for a clean run.

// synth is a finished run with an empty history and no simulation.
func synth() *world {
	t0 := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	w := &world{p: defaultParams(), t0: t0, stopAt: t0.Add(time.Minute)}
	w.rec = newRecorder(t0)
	return w
}

func at(w *world, d time.Duration) time.Time { return w.t0.Add(d) }

// grantOf adds a request answered with a grant.
func grantOf(w *world, owner, name string, asked, answered time.Duration, fence int64, vu time.Duration) *grant {
	r := w.rec
	q := &request{owner: owner, name: name, sidecar: "s1g1", req: lease.Request{Name: name, Owner: owner, TTL: 10 * time.Second},
		start: at(w, asked), end: at(w, answered)}
	g := &grant{r: q, answer: at(w, answered), fence: fence, res: name, expiresAt: at(w, answered+10*time.Second)}
	g.promises = []promise{{at: at(w, answered), vu: at(w, vu), src: "acquire"}}
	q.g = g
	r.requests = append(r.requests, q)
	r.byOwner[owner] = q
	return g
}

func checksOf(vs []violation) []string {
	var out []string
	for _, v := range vs {
		if !slices.Contains(out, v.check) {
			out = append(out, v.check)
		}
	}
	slices.Sort(out)
	return out
}

func TestOracleOverlap(t *testing.T) {
	w := synth()
	g1 := grantOf(w, "A", "job", 0, time.Second, 10, 5*time.Second)
	grantOf(w, "B", "job", 2*time.Second, 3*time.Second, 20, 8*time.Second)
	if got := checksOf(check(w)); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("B granted at 3s within A's promise to 5s: checks %v fired, want [a]", got)
	}
	g1.releaseStart = at(w, 2500*time.Millisecond) // A gave its promise up first
	if got := checksOf(check(w)); len(got) != 0 {
		t.Fatalf("A released at 2.5s, B granted at 3s: checks %v fired, want none", got)
	}
	g1.promises = append(g1.promises, promise{at: at(w, 4*time.Second), vu: at(w, 9*time.Second), src: "renewed event"})
	g1.releaseStart = time.Time{}
	if got := checksOf(check(w)); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("a later promise of A counts too: checks %v fired, want [a]", got)
	}
}

func TestOracleFences(t *testing.T) {
	w := synth()
	grantOf(w, "A", "job", 0, time.Second, 100, 1500*time.Millisecond)
	grantOf(w, "B", "job", 2*time.Second, 3*time.Second, 50, 6*time.Second)
	if got := checksOf(check(w)); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("B began after A's grant with a lower fence: checks %v fired, want [b]", got)
	}
	w = synth()
	grantOf(w, "A", "job", 0, time.Second, 100, 1500*time.Millisecond)
	grantOf(w, "B", "job", 500*time.Millisecond, 3*time.Second, 50, 6*time.Second) // began before A's grant
	if got := checksOf(check(w)); len(got) != 0 {
		t.Fatalf("B began before A was granted: checks %v fired, want none", got)
	}
}

func TestOracleKeys(t *testing.T) {
	w := synth()
	g := grantOf(w, "A", "job", 0, time.Second, 10, 3*time.Second)
	g.tenure = "x:A" // the value the masters hold for A's grant
	g.releaseStart, g.releaseDone = at(w, 2*time.Second), at(w, 2*time.Second)
	g.endAt, g.endHow = at(w, 2*time.Second), "release returned"
	w.rec.keys = append(w.rec.keys,
		keyEvent{master: 0, key: keyPrefix + "job", value: "x:A", op: "extend-many", send: at(w, 1900*time.Millisecond), at: at(w, 2100*time.Millisecond)},
	)
	if got := checksOf(check(w)); !slices.Equal(got, []string{"c2"}) {
		t.Fatalf("a renewal landing after the release re-created the key: checks %v fired, want [c2]", got)
	}
	w.rec.keys = append(w.rec.keys,
		keyEvent{master: 1, key: keyPrefix + "job", value: "x:A", op: "acquire-plain", send: at(w, 2500*time.Millisecond), at: at(w, 2500*time.Millisecond)},
	)
	if got := checksOf(check(w)); !slices.Equal(got, []string{"c", "c2"}) {
		t.Fatalf("a write sent after the release created the key: checks %v fired, want [c c2]", got)
	}
}

func TestOracleLiveness(t *testing.T) {
	w := synth()
	a := grantOf(w, "A", "job", 0, 7*time.Second, 10, 9*time.Second)
	a.releaseStart, a.releaseDone = at(w, 8*time.Second), at(w, 8*time.Second)
	a.endAt, a.endHow = a.releaseDone, "release returned"
	// B waits from 7.5s to 20s for a name free from 8s on: far beyond the
	// bound (key ttl + 1s).
	b := &request{owner: "B", name: "job", sidecar: "s2g1", req: lease.Request{Name: "job", Wait: 30 * time.Second},
		start: at(w, 7500*time.Millisecond), end: at(w, 20*time.Second)}
	w.rec.requests = append(w.rec.requests, b)
	w.rec.byOwner["B"] = b
	if got := checksOf(check(w)); !slices.Equal(got, []string{"d"}) {
		t.Fatalf("a free name not granted for 12s: checks %v fired, want [d]", got)
	}
	// A fault until 14s and its settling time leave too short a quiet span.
	w.rec.faults = append(w.rec.faults, &fault{kind: "pause", target: "m1", start: at(w, 6*time.Second), end: at(w, 14*time.Second)})
	if got := checksOf(check(w)); len(got) != 0 {
		t.Fatalf("the name was free only while the masters were disturbed: checks %v fired, want none", got)
	}
}

// grantAs adds a grant of a semaphore's slot or a read/write lock's side
// (as of req's Permits or Mode).
func grantAs(w *world, owner string, req lease.Request, slot int, asked, answered time.Duration, fence int64, vu time.Duration) *grant {
	g := grantOf(w, owner, req.Name, asked, answered, fence, vu)
	req.Owner, req.TTL = owner, 10*time.Second
	g.r.req, g.slot, g.res = req, slot, resourceOf(req, slot)
	return g
}

func TestOraclePermits(t *testing.T) {
	sem := lease.Request{Name: "pool", Permits: 2}
	w := synth()
	grantAs(w, "A", sem, 1, 0, time.Second, 10, 6*time.Second)
	grantAs(w, "B", sem, 2, 0, 2*time.Second, 10, 6*time.Second)
	c := grantAs(w, "C", sem, 1, 0, 3*time.Second, 20, 6*time.Second)
	if got := checksOf(check(w)); !slices.Equal(got, []string{"a", "f"}) {
		t.Fatalf("three holders of 2 permits at 3s, two on slot 1: checks %v fired, want [a f]", got)
	}
	c.slot, c.res = 3, "pool#3" // a slot beyond the permits: only the count sees it
	if got := checksOf(check(w)); !slices.Equal(got, []string{"f"}) {
		t.Fatalf("three holders of 2 permits at 3s on three slots: checks %v fired, want [f]", got)
	}
	c.answer = at(w, 7*time.Second)
	if got := checksOf(check(w)); len(got) != 0 {
		t.Fatalf("C granted after A's and B's promises: checks %v fired, want none", got)
	}
}

func TestOracleReaders(t *testing.T) {
	reader := lease.Request{Name: "doc", Mode: lease.ModeShared}
	writer := lease.Request{Name: "doc", Mode: lease.ModeExclusive}
	w := synth()
	grantAs(w, "R1", reader, 1, 0, time.Second, 0, 5*time.Second)
	grantAs(w, "R2", reader, 2, 0, 2*time.Second, 0, 5*time.Second) // readers share
	wr := grantAs(w, "W", writer, 0, 0, 3*time.Second, 10, 8*time.Second)
	if got := checksOf(check(w)); !slices.Equal(got, []string{"g"}) {
		t.Fatalf("a writer granted at 3s within readers' promises to 5s: checks %v fired, want [g]", got)
	}
	wr.answer = at(w, 6*time.Second)
	grantAs(w, "R3", reader, 1, 0, 7*time.Second, 0, 9*time.Second)
	if got := checksOf(check(w)); !slices.Equal(got, []string{"g"}) {
		t.Fatalf("a reader granted at 7s within the writer's promise to 8s: checks %v fired, want [g]", got)
	}
	wr.releaseStart = at(w, 6500*time.Millisecond)
	grantAs(w, "W2", writer, 0, 6200*time.Millisecond, 10*time.Second, 5, 12*time.Second)
	if got := checksOf(check(w)); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("W released before R3; W2 asked after W's grant with a lower fence: checks %v fired, want [b]", got)
	}
}

// setOf adds the grant of a lock set with a member per name, each with
// its fence and its own valid_until, the set promised until vu.
func setOf(w *world, owner string, names []string, answered, vu time.Duration, fences []int64, own []time.Duration) *grant {
	set := strings.Join(names, ",")
	g := grantOf(w, owner, set, 0, answered, 0, vu)
	var locks []lease.Info
	for i, n := range names {
		locks = append(locks, lease.Info{Name: n, Fence: fences[i], ValidUntil: at(w, own[i])})
	}
	w.rec.grantMembersLocked(g, lease.Info{Name: set, ValidUntil: at(w, vu), Locks: locks})
	return g
}

func TestOracleSetLocks(t *testing.T) {
	w := synth()
	setOf(w, "S", []string{"a", "b"}, time.Second, 5*time.Second, []int64{10, 20}, []time.Duration{5 * time.Second, 6 * time.Second})
	grantOf(w, "L", "b", 2*time.Second, 4*time.Second, 30, 9*time.Second)
	if got := checksOf(check(w)); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("the lock b granted at 4s while the set holding it is promised to 5s: checks %v fired, want [a]", got)
	}
	w = synth()
	setOf(w, "S", []string{"a", "b"}, time.Second, 5*time.Second, []int64{10, 20}, []time.Duration{5 * time.Second, 6 * time.Second})
	grantOf(w, "L", "b", 2*time.Second, 5500*time.Millisecond, 15, 9*time.Second)
	vs := check(w)
	if got := checksOf(vs); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("the lock b granted at 5.5s, within b's own promise to 6s, with a fence below the set's: checks %v fired, want [a b]", got)
	}
	if got := classesOf(skipClasses(vs, []string{"a/G1-set-lock-own-valid_until-only"})); !slices.Equal(got, []string{"b/fence-not-above-earlier-grant"}) {
		t.Fatalf("the lock's own promise is classed apart: classes %v remain once it is skipped, want the fence's only", got)
	}
}

// Only waiting locks are judged by (d), and a set being taken holds its
// locks unseen.
func TestOracleLivenessKinds(t *testing.T) {
	w := synth()
	a := grantOf(w, "A", "job", 0, 7*time.Second, 10, 9*time.Second)
	a.releaseStart, a.releaseDone = at(w, 8*time.Second), at(w, 8*time.Second)
	a.endAt, a.endHow = a.releaseDone, "release returned"
	waiter := func(owner string, req lease.Request, from, to time.Duration) {
		req.Owner, req.Wait = owner, 30*time.Second
		q := &request{owner: owner, name: req.Name, sidecar: "s2g1", req: req, start: at(w, from), end: at(w, to)}
		w.rec.requests = append(w.rec.requests, q)
		w.rec.byOwner[owner] = q
	}
	waiter("B", lease.Request{Name: "job", Permits: 1}, 7500*time.Millisecond, 20*time.Second)
	waiter("S", lease.Request{Name: "job,other"}, 7500*time.Millisecond, 20*time.Second)
	waiter("C", lease.Request{Name: "job"}, 7500*time.Millisecond, 20*time.Second)
	if got := checksOf(check(w)); len(got) != 0 {
		t.Fatalf("a set was taking job while C waited: checks %v fired, want none", got)
	}
	w.rec.requests = slices.DeleteFunc(w.rec.requests, func(q *request) bool { return q.owner == "S" })
	vs := check(w)
	if len(vs) != 1 || vs[0].check != "d" || !strings.Contains(vs[0].title, "while C waited") {
		t.Fatalf("C waited 12s for a free job (the semaphore B is not the lock's waiter): findings %v, want one (d) of C", classesOf(vs))
	}
}
