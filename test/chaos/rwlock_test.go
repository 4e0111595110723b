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

// Read/write locks under the same faults as the locks. A read/write lock
// promises that no read and write hold it at once, that writers hold it
// one at a time, and that writers' fences rise in grant order: no reader's
// critical section is open while a writer's is, no read is granted while a
// write's promise (its valid_untils, as the oracle defines them for locks)
// stands nor a write while a read's does, and each writer's fence is above
// every earlier writer's. The writer is a lock of its own
// (target.exclusive), so the lock checks (overlaps, fence order, broken
// promises, the fenced resource) also run on the writers; reads write
// nothing.

// hotRWLock is the read/write lock the rw workers contend for: one, so
// that reads and writes of every sidecar meet.
const hotRWLock = "rw/a"

// The rw workers per sidecar: two readers (heartbeats, a held connection)
// and a writer (heartbeats), 6 readers and 3 writers in all.
var (
	rwReaderMix = []clientKind{heartbeat, holder}
	rwWriterMix = []clientKind{heartbeat}
)

// spawnRWLockWorkers starts the rw workers on every sidecar.
func (r *run) spawnRWLockWorkers(ctx context.Context) {
	r.spawnOn(ctx, rwReaderMix, []target{{name: hotRWLock, mode: client.Shared}})
	r.spawnOn(ctx, rwWriterMix, []target{{name: hotRWLock, mode: client.Exclusive}})
}

// rwAnswerProblem is what a read's or a write's answer lacks: its mode, a
// reader's slot within 1..64 (and no fence), a writer's fence.
func rwAnswerProblem(t target, l client.Lease) string {
	switch {
	case l.Mode != t.mode:
		return fmt.Sprintf("a %s request answered with mode %q", t.mode, l.Mode)
	case t.isWriter() && l.Fence <= 0:
		return fmt.Sprintf("a write with fence %d", l.Fence)
	case !t.isWriter() && (l.Slot < 1 || l.Slot > maxReaders):
		return fmt.Sprintf("a read with slot %d, outside 1..%d", l.Slot, maxReaders)
	case !t.isWriter() && l.Fence != 0:
		return fmt.Sprintf("a read with fence %d (readers have none)", l.Fence)
	}
	return ""
}

// maxReaders is the most readers a read/write lock admits at once
// (lease.MaxReaders).
const maxReaders = 64

// rwVerdict is what the oracle concluded about the read/write locks.
type rwVerdict struct {
	reads, writes int // critical sections entered
	// crossedSections counts critical sections entered while one of the
	// other side (a write for a read, a read for a write) was open;
	// writerSections writes entered while another write was open (both:
	// within Redlock's assumptions, none).
	crossedSections, writerSections int
	worstSection                    string
	// promises checked: grants and the valid_untils published to them;
	// crossedPromised counts grants answered while a promise of the other
	// side stood, writerPromised writes while another write's stood.
	promiseGrants, promisesChecked  int
	crossedPromised, writerPromised int
	worstPromisedBy                 time.Duration
	worstPromised                   string
	// fenceRegressions counts writes whose fence was not above every
	// earlier write's, in the order their answers arrived.
	fenceRegressions int
	worstFence       string
	malformed        int // answers without their mode, slot or fence
	worstMalformed   string
}

// judgeRWLocks applies the read/write checks to each read/write lock's
// sections and promises.
func judgeRWLocks(sections []*section, promises []*promise, bad []malformedAnswer) rwVerdict {
	var v rwVerdict
	for name, group := range groupBy(sections, (*section).rwName) {
		for _, s := range group {
			if s.isWriter() {
				v.writes++
			} else {
				v.reads++
			}
		}
		c := conflicts(group)
		v.crossedSections += c.crossed
		v.writerSections += c.writers
		if v.worstSection == "" && c.worst != "" {
			v.worstSection = name + ": " + c.worst
		}
	}
	for name, group := range groupBy(promises, (*promise).rwName) {
		v.promiseGrants += len(group)
		for _, p := range group {
			v.promisesChecked += p.published
		}
		c := conflicts(group)
		v.crossedPromised += c.crossed
		v.writerPromised += c.writers
		if c.by > v.worstPromisedBy || v.worstPromised == "" && c.worst != "" {
			v.worstPromisedBy, v.worstPromised = c.by, name+": "+c.worst
		}
		n, worst := fenceRegressions(group)
		v.fenceRegressions += n
		if v.worstFence == "" && worst != "" {
			v.worstFence = name + ": " + worst
		}
	}
	for _, m := range bad {
		if m.isRWLock() {
			v.malformed++
			if v.worstMalformed == "" {
				v.worstMalformed = m.name + ": " + m.what
			}
		}
	}
	return v
}

// rwName is a read/write lock's name, "" for the other kinds: what the
// read/write checks group by.
func (t target) rwName() string {
	if t.isRWLock() {
		return t.name
	}
	return ""
}

// groupBy groups items by key, leaving out those whose key is "".
func groupBy[S any](items []S, key func(S) string) map[string][]S {
	out := map[string][]S{}
	for _, s := range items {
		if k := key(s); k != "" {
			out[k] = append(out[k], s)
		}
	}
	return out
}

// sided is a span of a read/write lock: a read or a write.
type sided interface {
	span
	isWriter() bool
}

// conflict is what conflicts found.
type conflict struct {
	crossed, writers int
	by               time.Duration // the most any span was early
	worst            string        // that span, and those it met
}

// conflicts counts the spans that began while a span they exclude was
// still open: crossed, a read meeting a write or a write meeting a read;
// writers, a write meeting another write. by is the most any of them was
// early: how long after its start the last span it met ended.
func conflicts[S sided](spans []S) conflict {
	var c conflict
	meetings(spans, func(s S, open []S) {
		var met []S
		crossed, writers := false, false
		for _, o := range open {
			switch {
			case s.isWriter() != o.isWriter():
				crossed = true
			case s.isWriter():
				writers = true
			default:
				continue // two reads
			}
			met = append(met, o)
		}
		if len(met) == 0 {
			return
		}
		if crossed {
			c.crossed++
		}
		if writers {
			c.writers++
		}
		early := time.Duration(0)
		for _, o := range met {
			early = max(early, o.to().Sub(s.from()))
		}
		if early > c.by || c.worst == "" {
			c.by, c.worst = early, describeMeeting(s, met)
		}
	})
	return c
}

// meetings calls met with each span that began while others were still
// open, and those (a span is open from its from() to its to(), exclusive:
// one that begins exactly when another ends does not meet it), in the
// order the spans began.
func meetings[S span](spans []S, met func(s S, open []S)) {
	sorted := slices.Clone(spans)
	slices.SortStableFunc(sorted, func(a, b S) int { return a.from().Compare(b.from()) })
	var open []S
	for _, s := range sorted {
		open = slices.DeleteFunc(open, func(o S) bool { return !o.to().After(s.from()) })
		if len(open) > 0 {
			met(s, open)
		}
		open = append(open, s)
	}
}

func describeMeeting[S span](s S, met []S) string {
	held := make([]string, len(met))
	for i, o := range met {
		held[i] = o.describe()
	}
	return fmt.Sprintf("%s began while %s", s.describe(), strings.Join(held, "; "))
}

// fenceRegressions counts the writes of one read/write lock whose fence
// was not above every earlier write's, in the order their answers
// arrived. A write answered past its own valid_until is left out: it never
// held the lock (the client does not act on it), and its answer may
// arrive after the next writer's.
func fenceRegressions(group []*promise) (n int, worst string) {
	var writes []*promise
	for _, p := range group {
		if p.isWriter() && p.granted.Before(p.until) {
			writes = append(writes, p)
		}
	}
	slices.SortStableFunc(writes, func(a, b *promise) int { return a.granted.Compare(b.granted) })
	var highest *promise
	for _, p := range writes {
		if highest != nil && p.fence <= highest.fence {
			n++
			if worst == "" {
				worst = fmt.Sprintf("%s got fence %d after %s", p.describe(), p.fence, highest.describe())
			}
		}
		if highest == nil || p.fence > highest.fence {
			highest = p
		}
	}
	return n, worst
}

// checkRWLocks: no read and write at once, in critical sections within
// Redlock's assumptions and by published promises whenever no master lost
// data; one write at a time (also among the lock checks); writers' fences
// rising; every answer of its kind's shape.
func checkRWLocks(sc scenario, v rwVerdict) []string {
	var problems []string
	if v.crossedSections+v.writerSections > 0 && sc.within() {
		problems = append(problems, fmt.Sprintf("%d read/write lock critical sections entered while the other side's was open, %d writes while another write's: %s",
			v.crossedSections, v.writerSections, v.worstSection))
	}
	if v.crossedPromised+v.writerPromised > 0 && !sc.dataLoss {
		problems = append(problems, fmt.Sprintf("%d reads or writes granted while the other side's valid_until stood, %d writes while another write's "+
			"(%d valid_untils of %d grants checked); the worst by %v: %s",
			v.crossedPromised, v.writerPromised, v.promisesChecked, v.promiseGrants, v.worstPromisedBy.Round(time.Millisecond), v.worstPromised))
	}
	if v.fenceRegressions > 0 && !sc.dataLoss {
		problems = append(problems, fmt.Sprintf("%d writes got a fence not above an earlier write's: %s", v.fenceRegressions, v.worstFence))
	}
	if v.malformed > 0 {
		problems = append(problems, fmt.Sprintf("%d read/write lock answers without their mode, slot or fence: %s", v.malformed, v.worstMalformed))
	}
	if v.reads == 0 || v.writes == 0 {
		problems = append(problems, fmt.Sprintf("read/write lock: %d reads and %d writes entered, want both", v.reads, v.writes))
	}
	return problems
}

// rwText is one scenario's read/write lock figures for the results.
func rwText(v rwVerdict) string {
	return fmt.Sprintf("%d reads and %d writes entered, %d read/write and %d write/write overlaps in critical sections, "+
		"%d read/write and %d write/write promised (%d valid_untils checked), %d writer fence regressions, %d malformed answers",
		v.reads, v.writes, v.crossedSections, v.writerSections, v.crossedPromised, v.writerPromised, v.promisesChecked,
		v.fenceRegressions, v.malformed)
}

// The read/write judge on hand-made histories: it runs without a cluster.
func TestRWLockJudge(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	reader := func(slot int) target { return target{name: "rw", mode: client.Shared, slot: slot} }
	writer := target{name: "rw", mode: client.Exclusive}
	cases := []struct {
		name                         string
		history                      func(o *oracle)
		crossed, writers, regression int
		by                           time.Duration
	}{
		{"readers share it", func(o *oracle) {
			o.granted(reader(1), "r1", "rwlock reader heartbeat", 0, 0, at(0), at(2000))
			o.granted(reader(2), "r2", "rwlock reader holder", 1, 0, at(10), at(2010))
		}, 0, 0, 0, 0},
		{"a read while a write's promise stood", func(o *oracle) {
			o.granted(writer, "w1", "rwlock writer heartbeat", 0, 3, at(0), at(2000))
			o.granted(reader(1), "r1", "rwlock reader heartbeat", 1, 0, at(500), at(2500))
		}, 1, 0, 0, 1500 * time.Millisecond},
		{"a write while a read's renewed promise stood", func(o *oracle) {
			p := o.granted(reader(1), "r1", "rwlock reader holder", 0, 0, at(0), at(1000))
			o.promised(p, at(3000), "renewed")
			o.granted(writer, "w1", "rwlock writer heartbeat", 1, 3, at(2000), at(4000))
		}, 1, 0, 0, time.Second},
		{"a write once the reads were released", func(o *oracle) {
			p := o.granted(reader(1), "r1", "rwlock reader heartbeat", 0, 0, at(0), at(2000))
			q := o.granted(reader(2), "r2", "rwlock reader heartbeat", 1, 0, at(10), at(2010))
			o.releasing(p, at(100))
			o.releasing(q, at(200))
			o.granted(writer, "w1", "rwlock writer heartbeat", 2, 3, at(300), at(2300))
		}, 0, 0, 0, 0},
		{"a read exactly at the write's valid_until", func(o *oracle) {
			o.granted(writer, "w1", "rwlock writer heartbeat", 0, 3, at(0), at(2000))
			o.granted(reader(1), "r1", "rwlock reader heartbeat", 1, 0, at(2000), at(4000))
		}, 0, 0, 0, 0},
		{"two writes at once", func(o *oracle) {
			o.granted(writer, "w1", "rwlock writer heartbeat", 0, 3, at(0), at(2000))
			o.granted(writer, "w2", "rwlock writer heartbeat", 1, 4, at(1200), at(3200))
		}, 0, 1, 0, 800 * time.Millisecond},
		{"a write's fence below an earlier write's", func(o *oracle) {
			p := o.granted(writer, "w1", "rwlock writer heartbeat", 0, 5, at(0), at(2000))
			o.releasing(p, at(100))
			o.granted(writer, "w2", "rwlock writer heartbeat", 1, 4, at(200), at(2200))
		}, 0, 0, 1, 0},
		{"a write answered past its validity does not order fences", func(o *oracle) {
			o.granted(writer, "w1", "rwlock writer heartbeat", 0, 5, at(0), at(1000))
			o.granted(writer, "w2", "rwlock writer heartbeat", 1, 4, at(1500), at(1400)) // late: never held
		}, 0, 0, 0, 0},
		{"other names and kinds do not count", func(o *oracle) {
			o.granted(writer, "w1", "rwlock writer heartbeat", 0, 3, at(0), at(2000))
			o.granted(target{name: "rw2", mode: client.Shared, slot: 1}, "r1", "rwlock reader heartbeat", 1, 0, at(10), at(2010))
			o.granted(lock("rw"), "l1", "heartbeat", 2, 1, at(20), at(2020))
			o.granted(target{name: "rw", permits: 2, slot: 1}, "s1", "semaphore heartbeat", 2, 1, at(30), at(2030))
		}, 0, 0, 0, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := newOracle()
			tc.history(o)
			v := judgeRWLocks(nil, o.promises, nil)
			if v.crossedPromised != tc.crossed || v.writerPromised != tc.writers || v.fenceRegressions != tc.regression || v.worstPromisedBy != tc.by {
				t.Fatalf("got %d crossed, %d writers by %v (%s), %d fence regressions (%s); want %d, %d by %v, %d",
					v.crossedPromised, v.writerPromised, v.worstPromisedBy, v.worstPromised, v.fenceRegressions, v.worstFence,
					tc.crossed, tc.writers, tc.by, tc.regression)
			}
			if tc.crossed+tc.writers > 0 && v.worstPromised == "" || tc.regression > 0 && v.worstFence == "" {
				t.Fatal("no description of the worst")
			}
		})
	}
}

// Sections: a read open while a write is, and two writes, are reported;
// reads together are not. Malformed answers are counted by kind.
func TestRWLockSectionsJudge(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	held := func(mode client.Mode, owner string, from, to int) *section {
		return &section{target: target{name: "rw", mode: mode}, owner: owner, enter: at(from), exit: at(to), reason: "done"}
	}
	v := judgeRWLocks([]*section{
		held(client.Shared, "r1", 0, 100), held(client.Shared, "r2", 50, 150), // two reads: fine
		held(client.Exclusive, "w1", 150, 300), // exactly as the reads end
		held(client.Shared, "r3", 250, 400),    // during w1
		held(client.Exclusive, "w2", 290, 310), // during w1 and r3
	}, nil, []malformedAnswer{{target{name: "rw", mode: client.Shared}, "a read with slot 0"}, {lock("rw"), "not an rwlock"}})
	if v.reads != 3 || v.writes != 2 || v.crossedSections != 2 || v.writerSections != 1 || !strings.Contains(v.worstSection, "w1") {
		t.Fatalf("%+v", v)
	}
	if v.malformed != 1 || !strings.Contains(v.worstMalformed, "slot 0") {
		t.Fatalf("malformed: %d (%s)", v.malformed, v.worstMalformed)
	}
}

// A read's and a write's answers of the wrong shape are told apart from
// good ones.
func TestRWAnswerProblem(t *testing.T) {
	read, write := target{name: "rw", mode: client.Shared}, target{name: "rw", mode: client.Exclusive}
	for _, tc := range []struct {
		t    target
		l    client.Lease
		want string // in the problem; "" for none
	}{
		{read, client.Lease{Mode: client.Shared, Slot: 64}, ""},
		{write, client.Lease{Mode: client.Exclusive, Fence: 1}, ""},
		{read, client.Lease{Mode: client.Exclusive, Slot: 3}, "mode"},
		{read, client.Lease{Mode: client.Shared, Slot: 65}, "slot 65"},
		{read, client.Lease{Mode: client.Shared, Slot: 1, Fence: 2}, "fence 2"},
		{write, client.Lease{Mode: client.Exclusive}, "fence 0"},
	} {
		got := rwAnswerProblem(tc.t, tc.l)
		if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
			t.Errorf("%+v for %+v: %q, want %q", tc.l, tc.t, got, tc.want)
		}
	}
}
