package sim

import (
	"slices"
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
	g := &grant{r: q, answer: at(w, answered), fence: fence, expiresAt: at(w, answered+10*time.Second)}
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
