//go:build linux

package chaos

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sidelock/sidelock/pkg/client"
)

// Lock sets under the same faults as the locks. A set's grant is, for the
// oracle, one grant of each of its locks, with the set's valid_until (the
// earliest of its locks'; a lock's own, where later, counts too: the
// sidecar keeps each lock until its own) and the lock's own fence: the
// lock checks (overlaps, fence order, broken promises, the fenced
// resource) apply to each lock, whoever else takes it — other sets, or
// plain locks of the same name. On top of them: a set is never partly
// held, i.e. no lock of a set is held by anyone else while the set holds
// it (no section of it open alongside the set's, no grant of it while the
// set's promise stands, and the set not granted while another's promise on
// it stands), and every set answer names the set canonically and carries
// each of its locks with a fence.

// hotSets are the sets the set workers take turns on: they share set/b,
// so sets of every sidecar contend, and a plain lock worker takes set/c
// (setLockMix). The second is asked for out of canonical order.
var hotSets = []target{lockSet("set/a", "set/b"), lockSet("set/c", "set/b")}

// The set workers per sidecar: heartbeats and a held connection on the
// sets, and a try-once caller of the plain lock set/c.
var (
	setMix     = []clientKind{heartbeat, holder}
	setLockMix = []clientKind{trier}
)

// spawnLockSetWorkers starts the set workers, and the plain lock worker
// on a name of a set, on every sidecar.
func (r *run) spawnLockSetWorkers(ctx context.Context) {
	r.spawnOn(ctx, setMix, hotSets)
	r.spawnOn(ctx, setLockMix, []target{lock("set/c")})
}

// lockSet is the target of a lock set, asked for with names in the order
// given.
func lockSet(names ...string) target { return target{set: strings.Join(names, ",")} }

// setNames are the names a worker asks for.
func (t target) setNames() []string { return strings.Split(t.set, ",") }

// canonical is the set's canonical name: its names sorted, as answers
// name it.
func (t target) canonical() string {
	names := t.setNames()
	slices.Sort(names)
	return strings.Join(names, ",")
}

// members are the set's locks in canonical order, each as the target of a
// lock of this set.
func (t target) members() []target {
	names := t.setNames()
	slices.Sort(names)
	out := make([]target, len(names))
	for i, n := range names {
		out[i] = target{name: n, set: t.canonical()}
	}
	return out
}

// setAnswerProblem is what a set's answer lacks: the canonical name, each
// of its locks (in canonical order) with a fence and a valid_until no
// earlier than the set's, and no fence of its own.
func setAnswerProblem(t target, a answer) string {
	want := t.members()
	switch {
	case a.lease.Name != t.canonical():
		return fmt.Sprintf("the set %q answered as %q, want its canonical name %q", t.set, a.lease.Name, t.canonical())
	case a.lease.Fence != 0:
		return fmt.Sprintf("the set has a fence of its own (%d)", a.lease.Fence)
	case len(a.locks) != len(want):
		return fmt.Sprintf("%d locks in the answer, want %d", len(a.locks), len(want))
	}
	for i, l := range a.locks {
		switch {
		case l.Name != want[i].name:
			return fmt.Sprintf("lock %d is %q, want %q", i, l.Name, want[i].name)
		case l.Fence <= 0:
			return fmt.Sprintf("lock %q without a fence", l.Name)
		case l.ValidUntil.Before(a.lease.ValidUntil):
			return fmt.Sprintf("lock %q valid until %s, before the set's %s", l.Name,
				l.ValidUntil.Format("15:04:05.000"), a.lease.ValidUntil.Format("15:04:05.000"))
		}
	}
	return ""
}

// setVerdict is what the oracle concluded about the lock sets.
type setVerdict struct {
	entered, granted int // sets entered (critical sections), and granted (promises)
	// partialSections counts sets entered one of whose locks someone
	// else's section held at the same time (within Redlock's assumptions:
	// none); partialPromised, sets one of whose locks was granted to
	// someone else while the set's promise stood, or granted while another
	// grant's promise on it stood.
	partialSections, partialPromised int
	worstSection                     string
	worstPromisedBy                  time.Duration
	worstPromised                    string
	promisesChecked                  int // valid_untils published to the sets
	malformed                        int // answers without their canonical name or locks
	worstMalformed                   string
}

// judgeLockSets finds the sets that did not hold each of their locks
// alone, by sections and by promises.
func judgeLockSets(sections []*section, promises []*promise, bad []malformedAnswer) setVerdict {
	v := setVerdict{entered: len(setGrants(sections))}
	grants := setGrants(promises)
	v.granted = len(grants)
	for _, p := range grants {
		v.promisesChecked += p.published // its first lock's: each lock gets every set's valid_until
	}
	partial := partialSets(sections)
	v.partialSections, v.worstSection = len(partial.sets), partial.worst
	partial = partialSets(promises)
	v.partialPromised, v.worstPromisedBy, v.worstPromised = len(partial.sets), partial.by, partial.worst
	for _, m := range bad {
		if m.isSet() {
			v.malformed++
			if v.worstMalformed == "" {
				v.worstMalformed = m.set + ": " + m.what
			}
		}
	}
	return v
}

// setSpan is a span of a lock's holder, which a set's grant may be.
type setSpan interface {
	span
	exclusive() string
	setGrant() string
}

// setGrant names the set grant a lock's span belongs to: its set and
// owner (unique per grant); "" when it is no set's.
func (s *section) setGrant() string { return setGrantOf(s.target, s.owner) }
func (p *promise) setGrant() string { return setGrantOf(p.target, p.owner) }

func setGrantOf(t target, owner string) string {
	if !t.inSet() {
		return ""
	}
	return t.set + " of " + owner
}

// setGrants is one span (of its first lock) per set grant.
func setGrants[S setSpan](spans []S) map[string]S {
	out := map[string]S{}
	for _, s := range spans {
		if g := s.setGrant(); g != "" {
			if _, seen := out[g]; !seen {
				out[g] = s
			}
		}
	}
	return out
}

// partialSet is what partialSets found.
type partialSet struct {
	sets  map[string]bool // the set grants met by another holder of one of their locks
	by    time.Duration   // the longest such a meeting lasted
	worst string          // that meeting
}

// partialSets finds, lock by lock, the set grants whose span of a lock met
// another holder's span of it, whichever began first.
func partialSets[S setSpan](spans []S) partialSet {
	ps := partialSet{sets: map[string]bool{}}
	for _, group := range groupBy(spans, func(s S) string { return s.exclusive() }) {
		if !slices.ContainsFunc(group, func(s S) bool { return s.setGrant() != "" }) {
			continue // no set took this lock
		}
		meetings(group, func(s S, open []S) {
			for _, o := range open {
				if o.setGrant() == "" && s.setGrant() == "" {
					continue // two plain locks: the lock checks' business
				}
				for _, g := range []string{o.setGrant(), s.setGrant()} {
					if g != "" {
						ps.sets[g] = true
					}
				}
				end := o.to()
				if s.to().Before(end) {
					end = s.to()
				}
				if by := end.Sub(s.from()); by > ps.by || ps.worst == "" {
					ps.by, ps.worst = by, describeMeeting(s, []S{o})
				}
			}
		})
	}
	return ps
}

// checkLockSets: no set partly held, in critical sections within
// Redlock's assumptions and by published promises whenever no master lost
// data (each lock's own checks are the lock checks'); every answer of a
// set's shape; sets granted at all.
func checkLockSets(sc scenario, v setVerdict) []string {
	var problems []string
	if v.partialSections > 0 && sc.within() {
		problems = append(problems, fmt.Sprintf("%d lock sets entered while another holder's critical section held one of their locks: %s",
			v.partialSections, v.worstSection))
	}
	if v.partialPromised > 0 && !sc.dataLoss {
		problems = append(problems, fmt.Sprintf("%d lock sets had a lock granted to another while the set's valid_until stood, or were granted one while another's stood "+
			"(%d valid_untils of %d sets checked); the longest for %v: %s",
			v.partialPromised, v.promisesChecked, v.granted, v.worstPromisedBy.Round(time.Millisecond), v.worstPromised))
	}
	if v.malformed > 0 {
		problems = append(problems, fmt.Sprintf("%d lock set answers without their canonical name or locks: %s", v.malformed, v.worstMalformed))
	}
	if v.entered == 0 {
		problems = append(problems, "no lock set entered at all")
	}
	return problems
}

// setText is one scenario's lock set figures for the results.
func setText(v setVerdict) string {
	return fmt.Sprintf("%d sets entered (%d granted), %d partly held in critical sections, %d partly held by promises (%d valid_untils checked), %d malformed answers",
		v.entered, v.granted, v.partialSections, v.partialPromised, v.promisesChecked, v.malformed)
}

// rwSetTable is the results' table of the read/write locks and the lock
// sets.
func rwSetTable(results []result) string {
	var b strings.Builder
	b.WriteString("\n" + rwSetHowToRead)
	b.WriteString("| scenario | reads / writes entered | read–write overlaps: sections / promised (valid_untils checked) | write–write: sections / promised | writer fence regressions | sets entered (granted) | sets partly held: sections / promised (valid_untils checked) | malformed answers |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|\n")
	for _, r := range results {
		rw, s := r.v.rwlocks, r.v.locksets
		fmt.Fprintf(&b, "| %s | %d / %d | %d / %d (%d) | %d / %d | %d | %d (%d) | %d / %d (%d) | %d |\n",
			r.name, rw.reads, rw.writes, rw.crossedSections, rw.crossedPromised, rw.promisesChecked, rw.writerSections, rw.writerPromised,
			rw.fenceRegressions, s.entered, s.granted, s.partialSections, s.partialPromised, s.promisesChecked, rw.malformed+s.malformed)
	}
	return b.String()
}

// rwSetHowToRead explains the read/write locks' and lock sets' table.
const rwSetHowToRead = `Read/write locks and lock sets ran alongside in every scenario: per sidecar, two readers (heartbeats, a held
connection) and a writer (heartbeats) on one read/write lock, two set workers (heartbeats, a held connection) on the sets
{set/a, set/b} and {set/b, set/c} (asked for as "set/c,set/b"), and a try-once caller of the plain lock set/c.

- **read–write overlaps** — reads entered while a write's critical section was open or writes while a read's was;
  reads granted while a write's valid_until stood or writes while a read's did. **write–write** — the same between
  writes (the writer is also a lock in the first table). **writer fence regressions** — writes whose fence was not
  above every earlier write's, in the order the answers arrived.
- **sets partly held** — sets one of whose locks another holder (another set, or the plain lock) held in a critical
  section at the same time, or was granted while the set's valid_until stood (or the set while another's stood).
  Each lock of a set is also a lock in the first table, granted with the set's valid_until (and its own, where later)
  and its own fence.
- **malformed answers** — a read without its slot, a write without a fence, a set without its canonical name or one
  of its locks with a fence.

`

// The lock set judge on hand-made histories: it runs without a cluster.
func TestLockSetJudge(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	ab, bc := lockSet("set/a", "set/b"), lockSet("set/c", "set/b")
	// grantSet records a set's grant as the workers do: one promise per
	// lock, with the set's valid_until and the lock's fence.
	grantSet := func(o *oracle, set target, owner string, from, until int) []*promise {
		var out []*promise
		for i, m := range set.members() {
			out = append(out, o.granted(m, owner, "lock set heartbeat", 0, int64(from+i+1), at(from), at(until)))
		}
		return out
	}
	release := func(o *oracle, ps []*promise, when int) {
		for _, p := range ps {
			o.releasing(p, at(when))
		}
	}
	cases := []struct {
		name           string
		history        func(o *oracle)
		granted, partl int
		broken         int // the lock checks' count, for comparison
	}{
		{"overlapping sets in turn", func(o *oracle) {
			release(o, grantSet(o, ab, "s1", 0, 2000), 100)
			release(o, grantSet(o, bc, "s2", 200, 2200), 300)
		}, 2, 0, 0},
		{"sets sharing no lock at once", func(o *oracle) {
			grantSet(o, lockSet("set/a"), "s1", 0, 2000)
			grantSet(o, lockSet("set/c", "set/d"), "s2", 10, 2010)
		}, 2, 0, 0},
		{"two sets holding set/b at once", func(o *oracle) {
			grantSet(o, ab, "s1", 0, 2000)
			grantSet(o, bc, "s2", 500, 2500)
		}, 2, 2, 1},
		{"a plain lock granted while the set held it", func(o *oracle) {
			grantSet(o, bc, "s1", 0, 2000)
			o.granted(lock("set/c"), "l1", "trier", 1, 9, at(1000), at(3000))
		}, 1, 1, 1},
		{"a set granted while a plain lock's renewed promise stood", func(o *oracle) {
			p := o.granted(lock("set/c"), "l1", "trier", 1, 9, at(0), at(500))
			o.promised(p, at(2000), "heartbeat")
			grantSet(o, bc, "s1", 1000, 3000)
		}, 1, 1, 1},
		{"a plain lock after the set's release", func(o *oracle) {
			release(o, grantSet(o, bc, "s1", 0, 2000), 400)
			o.granted(lock("set/c"), "l1", "trier", 1, 9, at(500), at(2500))
		}, 1, 0, 0},
		{"two plain locks are not the sets' business", func(o *oracle) {
			o.granted(lock("set/c"), "l1", "trier", 1, 1, at(0), at(2000))
			o.granted(lock("set/c"), "l2", "trier", 1, 2, at(10), at(2010))
		}, 0, 0, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := newOracle()
			tc.history(o)
			v := judgeLockSets(nil, o.promises, nil)
			if v.granted != tc.granted || v.partialPromised != tc.partl {
				t.Fatalf("%d sets granted, %d partly held (%s); want %d, %d", v.granted, v.partialPromised, v.worstPromised, tc.granted, tc.partl)
			}
			if tc.partl > 0 && v.worstPromised == "" {
				t.Fatal("no description of the worst")
			}
			if n, _, _ := brokenPromises(o.promises); n != tc.broken {
				t.Fatalf("the lock checks found %d broken promises, want %d", n, tc.broken)
			}
		})
	}
}

// Sections: a set whose lock another holder's section held at the same
// time is partly held; sections in turn are not. Valid_untils are counted
// once per set, malformed answers by kind.
func TestLockSetSectionsJudge(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	held := func(tg target, owner string, from, to int) *section {
		return &section{target: tg, owner: owner, enter: at(from), exit: at(to), reason: "done"}
	}
	ab := lockSet("set/a", "set/b").members()
	bc := lockSet("set/b", "set/c").members()
	sections := []*section{
		held(ab[0], "s1", 0, 100), held(ab[1], "s1", 0, 100),
		held(bc[0], "s2", 100, 200), held(bc[1], "s2", 100, 200), // in turn on set/b
		held(lock("set/c"), "l1", 150, 160),                                // inside s2's set/c
		held(lock("hot/a"), "x", 0, 500), held(lock("hot/a"), "y", 10, 20), // no set's
	}
	o := newOracle()
	for _, m := range ab {
		p := o.granted(m, "s1", "lock set holder", 0, 1, at(0), at(2000))
		o.promised(p, at(2500), "renewed")
	}
	o.malformed(lockSet("set/b", "set/a"), "1 locks in the answer, want 2")
	o.malformed(lock("hot/a"), "not a set")
	v := judgeLockSets(sections, o.promises, o.malformedAnswers)
	if v.entered != 2 || v.partialSections != 1 || !strings.Contains(v.worstSection, "l1") || !strings.Contains(v.worstSection, "s2") {
		t.Fatalf("%+v", v)
	}
	if v.granted != 1 || v.promisesChecked != 2 || v.malformed != 1 {
		t.Fatalf("%d granted, %d valid_untils, %d malformed; want 1, 2, 1", v.granted, v.promisesChecked, v.malformed)
	}
}

// A set's answer must name it canonically and carry each of its locks, in
// canonical order, with a fence and a valid_until no earlier than the set's.
func TestSetAnswerProblem(t *testing.T) {
	until := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	set := lockSet("b", "a")
	good := func() answer {
		return answer{lease: client.Lease{Name: "a,b", ValidUntil: until},
			locks: []client.SetLock{{Name: "a", Fence: 3, ValidUntil: until}, {Name: "b", Fence: 1, ValidUntil: until.Add(time.Second)}}}
	}
	for _, tc := range []struct {
		name  string
		spoil func(a *answer)
		want  string
	}{
		{"as promised", func(*answer) {}, ""},
		{"named as asked, not canonically", func(a *answer) { a.lease.Name = "b,a" }, "canonical"},
		{"a fence of its own", func(a *answer) { a.lease.Fence = 4 }, "fence of its own"},
		{"a lock missing", func(a *answer) { a.locks = a.locks[:1] }, "1 locks"},
		{"out of order", func(a *answer) { a.locks[0], a.locks[1] = a.locks[1], a.locks[0] }, `lock 0 is "b"`},
		{"a lock without a fence", func(a *answer) { a.locks[1].Fence = 0 }, `"b" without a fence`},
		{"a lock valid for less than the set", func(a *answer) { a.locks[0].ValidUntil = until.Add(-time.Millisecond) }, "before the set's"},
	} {
		a := good()
		tc.spoil(&a)
		got := setAnswerProblem(set, a)
		if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// A set's answer is recorded as one part per lock of the set, in canonical
// order, each with its own fence (0 when the answer lacks the lock); any
// other answer as one part, with the slot the lease got.
func TestPartsOf(t *testing.T) {
	set := lockSet("set/c", "set/b")
	parts := partsOf(set, answer{locks: []client.SetLock{{Name: "set/b", Fence: 7}}})
	if len(parts) != 2 || parts[0].target != (target{name: "set/b", set: "set/b,set/c"}) || parts[0].fence != 7 ||
		parts[1].name != "set/c" || parts[1].fence != 0 || !parts[1].inSet() {
		t.Fatalf("set parts %+v", parts)
	}
	read := target{name: "rw", mode: client.Shared}
	parts = partsOf(read, answer{lease: client.Lease{Slot: 5, Mode: client.Shared}})
	if len(parts) != 1 || parts[0].slot != 5 || parts[0].exclusive() != "" || parts[0].key() != keyPrefix+"rw#r5" {
		t.Fatalf("read parts %+v", parts)
	}
}
