//go:build linux

package chaos

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// Counting semaphores under the same faults as the locks. A semaphore of
// N permits promises that at no instant more than N callers hold it: no
// more than N critical sections of it are open at once, and no grant is
// answered while N earlier grants' valid_untils still stand (their
// promises, as the oracle defines them for locks). Each slot is a lock of
// its own, so the lock checks (overlaps, fence order, broken promises, the
// fenced resource) also run per slot: they group by target.exclusive.

// hotSemaphores are the semaphores the semaphore workers contend for:
// two and three permits, so that callers of every sidecar fill them.
var hotSemaphores = []target{{name: "sem/a", permits: 2}, {name: "sem/b", permits: 3}}

// semaphoreMix is the semaphore workers per sidecar: heartbeats, a held
// connection and a try-once caller (12 callers on 5 permits in all).
var semaphoreMix = []clientKind{heartbeat, heartbeat, holder, trier}

// spawnSemaphoreWorkers starts the semaphore workers on every sidecar.
func (r *run) spawnSemaphoreWorkers(ctx context.Context) {
	r.spawnOn(ctx, semaphoreMix, hotSemaphores)
}

// semaphoreVerdict is what the oracle concluded about the semaphores.
type semaphoreVerdict struct {
	grants int // permits granted (critical sections entered)
	// overN counts critical sections entered while N others of the same
	// semaphore were open (within Redlock's assumptions: none).
	overN     int
	worstOver string
	// promises checked: grants and the valid_untils published to them;
	// overPromised counts grants answered while N earlier grants of the
	// semaphore still had their promise standing.
	promiseGrants, promisesChecked int
	overPromised                   int
	worstOverPromisedBy            time.Duration
	worstOverPromised              string
	// badSlots counts grants whose slot was not within 1..N.
	badSlots int
}

// judgeSemaphores applies the at-most-N checks to the semaphores'
// sections and promises.
func judgeSemaphores(sections []*section, promises []*promise) semaphoreVerdict {
	var v semaphoreVerdict
	for name, group := range semaphoreSections(sections) {
		v.grants += len(group)
		n, _, worst := overCapacity(group, permitsOf(group))
		v.overN += n
		if v.worstOver == "" && worst != "" {
			v.worstOver = name + ": " + worst
		}
	}
	for name, group := range semaphorePromises(promises) {
		v.promiseGrants += len(group)
		for _, s := range group {
			v.promisesChecked += s.published
			if s.slot < 1 || s.slot > s.permits {
				v.badSlots++
			}
		}
		n, by, worst := overCapacity(group, permitsOf(group))
		v.overPromised += n
		if by > v.worstOverPromisedBy {
			v.worstOverPromisedBy, v.worstOverPromised = by, name+": "+worst
		}
	}
	return v
}

// span is one holder of a semaphore over time: a critical section, or a
// grant's promise.
type span interface {
	from() time.Time // entered, or the grant's answer arrived
	to() time.Time   // left, or the promise stopped standing
	describe() string
	limit() int // the semaphore's permits
}

func (s *section) from() time.Time { return s.enter }
func (s *section) to() time.Time   { return s.exit }
func (s *section) limit() int      { return s.permits }
func (s *section) describe() string {
	return fmt.Sprintf("%s (%s, sidecar%d, fence %d, %s–%s, ended by %s)", s.owner, s.holding(), s.sidecar, s.fence,
		s.enter.Format("15:04:05.000"), s.exit.Format("15:04:05.000"), s.reason)
}

func (p *promise) from() time.Time { return p.granted }
func (p *promise) to() time.Time   { return p.end() }
func (p *promise) limit() int      { return p.permits }
func (p *promise) describe() string {
	end := "promised until " + p.until.Format("15:04:05.000") + " by its " + p.untilBy
	if p.end().Before(p.until) {
		end = "released at " + p.end().Format("15:04:05.000")
	}
	return fmt.Sprintf("%s (%s, %s, sidecar%d, fence %d, granted %s, %s)", p.owner, p.kind, p.holding(),
		p.sidecar, p.fence, p.granted.Format("15:04:05.000"), end)
}

// semaphoreSections groups the semaphores' sections by semaphore.
func semaphoreSections(sections []*section) map[string][]*section {
	out := map[string][]*section{}
	for _, s := range sections {
		if s.isSemaphore() {
			out[s.name] = append(out[s.name], s)
		}
	}
	return out
}

// semaphorePromises groups the semaphores' grants by semaphore.
func semaphorePromises(promises []*promise) map[string][]*promise {
	out := map[string][]*promise{}
	for _, p := range promises {
		if p.isSemaphore() {
			out[p.name] = append(out[p.name], p)
		}
	}
	return out
}

// permitsOf is the fewest permits any holder of a semaphore asked for:
// every caller must ask for the same N, and the bound is the smallest.
func permitsOf[S span](group []S) int {
	n := 0
	for _, s := range group {
		if n == 0 || s.limit() < n {
			n = s.limit()
		}
	}
	return n
}

// overCapacity counts the spans that began while capacity others were
// still open (a span is open from its from() to its to(), exclusive: one
// that begins exactly when another ends does not meet it). by is the most
// any of them was early: how long after its start enough of the others
// had ended; worst describes that one and the spans it met.
func overCapacity[S span](spans []S, capacity int) (n int, by time.Duration, worst string) {
	sorted := slices.Clone(spans)
	slices.SortStableFunc(sorted, func(a, b S) int { return a.from().Compare(b.from()) })
	var open []S // begun, not yet ended, sorted by end
	for _, s := range sorted {
		open = slices.DeleteFunc(open, func(o S) bool { return !o.to().After(s.from()) })
		if len(open) >= capacity {
			n++
			// For s to fit, len(open)-capacity+1 of them must have ended.
			if early := open[len(open)-capacity].to().Sub(s.from()); early > by || worst == "" {
				by, worst = early, describeCrowd(s, open, capacity)
			}
		}
		i, _ := slices.BinarySearchFunc(open, s, func(a, b S) int { return a.to().Compare(b.to()) })
		open = slices.Insert(open, i, s)
	}
	return n, by, worst
}

func describeCrowd[S span](s S, open []S, capacity int) string {
	held := make([]string, len(open))
	for i, o := range open {
		held[i] = o.describe()
	}
	return fmt.Sprintf("%s began while %d of %d permits were held: %s", s.describe(), len(open), capacity, strings.Join(held, "; "))
}

// semaphoreText is one scenario's semaphore figures for the results.
func semaphoreText(v semaphoreVerdict) string {
	return fmt.Sprintf("%d permits granted, %d over N in critical sections, %d over N promised (%d valid_untils checked), %d slots out of range",
		v.grants, v.overN, v.overPromised, v.promisesChecked, v.badSlots)
}

// The at-most-N checker on hand-made histories: it runs without a cluster.
func TestSemaphoreCapacityChecker(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	sem := func(slot int) target { return target{name: "s", permits: 2, slot: slot} }
	cases := []struct {
		name    string
		history func(o *oracle)
		over    int
		by      time.Duration
	}{
		{"two holders of two permits", func(o *oracle) {
			o.granted(sem(1), "a", "heartbeat", 0, 1, at(0), at(2000))
			o.granted(sem(2), "b", "heartbeat", 1, 1, at(10), at(2010))
		}, 0, 0},
		{"a third while both promises stood", func(o *oracle) {
			o.granted(sem(1), "a", "heartbeat", 0, 1, at(0), at(2000))
			o.granted(sem(2), "b", "heartbeat", 1, 1, at(10), at(3000))
			o.granted(sem(3), "c", "heartbeat", 2, 1, at(500), at(2500))
		}, 1, 1500 * time.Millisecond},
		{"a third once one was released", func(o *oracle) {
			p := o.granted(sem(1), "a", "heartbeat", 0, 1, at(0), at(2000))
			o.granted(sem(2), "b", "heartbeat", 1, 1, at(10), at(3000))
			o.releasing(p, at(400))
			o.granted(sem(1), "c", "holder", 2, 2, at(500), at(2500))
		}, 0, 0},
		{"a third exactly at a valid_until", func(o *oracle) {
			o.granted(sem(1), "a", "heartbeat", 0, 1, at(0), at(2000))
			o.granted(sem(2), "b", "heartbeat", 1, 1, at(10), at(3000))
			o.granted(sem(1), "c", "heartbeat", 2, 2, at(2000), at(4000))
		}, 0, 0},
		{"a renewal's valid_until counts", func(o *oracle) {
			p := o.granted(sem(1), "a", "holder", 0, 1, at(0), at(1000))
			o.promised(p, at(3000), "renewed")
			o.granted(sem(2), "b", "heartbeat", 1, 1, at(10), at(3000))
			o.granted(sem(1), "c", "heartbeat", 2, 2, at(2000), at(4000))
		}, 1, time.Second},
		{"other semaphores and locks do not count", func(o *oracle) {
			o.granted(sem(1), "a", "heartbeat", 0, 1, at(0), at(2000))
			o.granted(sem(2), "b", "heartbeat", 1, 1, at(10), at(2010))
			o.granted(target{name: "t", permits: 2, slot: 1}, "c", "heartbeat", 2, 1, at(20), at(2020))
			o.granted(lock("s"), "d", "heartbeat", 2, 1, at(30), at(2030))
		}, 0, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := newOracle()
			tc.history(o)
			v := judgeSemaphores(nil, o.promises)
			if v.overPromised != tc.over || v.worstOverPromisedBy != tc.by {
				t.Fatalf("over N promised %d by %v (%s), want %d by %v", v.overPromised, v.worstOverPromisedBy, v.worstOverPromised, tc.over, tc.by)
			}
			if tc.over > 0 && v.worstOverPromised == "" {
				t.Fatal("no description of the worst")
			}
		})
	}
}

// Sections: three of two permits open at once is one too many, and a slot
// outside 1..N is reported.
func TestSemaphoreSectionsChecker(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	held := func(slot, from, to int) *section {
		return &section{target: target{name: "s", permits: 2, slot: slot}, owner: fmt.Sprint("o", slot, from), enter: at(from), exit: at(to), reason: "done"}
	}
	v := judgeSemaphores([]*section{held(1, 0, 100), held(2, 50, 300), held(1, 100, 200), held(3, 150, 160)}, nil)
	if v.grants != 4 || v.overN != 1 || !strings.Contains(v.worstOver, "slot 3") {
		t.Fatalf("got %d grants, %d over N (%s), want 4 and 1 naming slot 3", v.grants, v.overN, v.worstOver)
	}
	o := newOracle()
	o.granted(target{name: "s", permits: 2, slot: 3}, "a", "heartbeat", 0, 1, at(0), at(10))
	if v := judgeSemaphores(nil, o.promises); v.badSlots != 1 {
		t.Fatalf("slot 3 of 2 permits: %d bad slots, want 1", v.badSlots)
	}
}

// checkSemaphores: at most N holders of a semaphore at once, in critical
// sections within Redlock's assumptions, by published promises whenever no
// master lost data, and every slot within 1..N.
func checkSemaphores(sc scenario, v semaphoreVerdict) []string {
	var problems []string
	if v.overN > 0 && sc.within() {
		problems = append(problems, fmt.Sprintf("%d semaphore critical sections entered while N others were open: %s", v.overN, v.worstOver))
	}
	if v.overPromised > 0 && !sc.dataLoss {
		problems = append(problems, fmt.Sprintf("%d permits granted while N earlier grants' valid_untils still stood (%d valid_untils of %d grants checked); the worst by %v: %s",
			v.overPromised, v.promisesChecked, v.promiseGrants, v.worstOverPromisedBy.Round(time.Millisecond), v.worstOverPromised))
	}
	if v.badSlots > 0 {
		problems = append(problems, fmt.Sprintf("%d permits granted a slot outside 1..N", v.badSlots))
	}
	if v.grants == 0 {
		problems = append(problems, "no semaphore permit granted at all")
	}
	return problems
}
