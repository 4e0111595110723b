package sim

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sidelock/sidelock/internal/lease"
)

// The oracle. It judges a finished run's history against sidelock's
// promises. A lock here is a lock, one lock of a set (judged with the
// set's promises and its own fence), one slot of a semaphore or the
// writer of a read/write lock: each is held by one caller at a time.
//
//	(a) no two grants of one lock overlap: for grants G1 answered before
//	    G2, G1's latest published valid_until (from any answer, event or
//	    List) is at most G2's answer time, unless G1's caller gave the lease
//	    up earlier by asking for its release; a lock of a set counts the
//	    set's valid_until and its own (Info.Locks, List), and a finding
//	    that only its own outlived is classed apart (G1-set-lock-own-…);
//	(b) fence order: a grant that began after another was answered has a
//	    larger fence;
//	(c) once every caller of a tenure (the grants whose keys the masters
//	    hold under one value, lease.Info.Tenure: one grant, or a plain
//	    lock's grants of one sidecar one after another) knew its lease was
//	    over (release returned, an ended event, ErrLeaseGone, or the lapse
//	    it chose), and the linger that may follow has passed, no key with
//	    the tenure's value is created on a master by a write sent after
//	    that; (c2) nor re-created by a renewal that lands after it (a ghost
//	    key: the next waiter waits a key ttl for nothing);
//	(d) liveness: while the masters are quiet (no fault for a key ttl and
//	    two health rounds, every master eligible on every sidecar) a lock
//	    name that is free is granted to a waiting lock within a key ttl + 1s;
//	(e) a waiting acquire rides over a lack of quorum: it answers no quorum
//	    only once its wait has run out (or its sidecar is shutting down);
//	(f) a semaphore of N permits has at most N grants standing at any
//	    instant, each standing from its answer to its latest published
//	    valid_until (or the release it asked for, if earlier);
//	(g) no reader of a read/write lock stands, so measured, while a writer
//	    of it does (writers among themselves are locks: (a) and (b)).

type violation struct {
	check    string // a, b, c, c2, d, e, f, g
	class    string // for tallies
	name     string
	at       time.Time
	title    string
	facts    []string
	from, to time.Time // the window of history to show
}

func classesOf(vs []violation) []string {
	var out []string
	for _, v := range vs {
		if !slices.Contains(out, v.class) {
			out = append(out, v.class)
		}
	}
	return out
}

func skipClasses(vs []violation, skip []string) []violation {
	if len(skip) == 0 {
		return vs
	}
	return slices.DeleteFunc(vs, func(v violation) bool {
		for _, s := range skip {
			if strings.HasPrefix(v.class, s) {
				return true
			}
		}
		return false
	})
}

// check runs every check on a finished run.
func check(w *world) []violation {
	r := w.rec
	r.mu.Lock()
	defer r.mu.Unlock()
	var vs []violation
	vs = append(vs, checkOverlap(w)...)
	vs = append(vs, checkFences(w)...)
	vs = append(vs, checkKeys(w)...)
	vs = append(vs, checkLiveness(w)...)
	vs = append(vs, checkWaits(w)...)
	vs = append(vs, checkPermits(w)...)
	vs = append(vs, checkReaders(w)...)
	slices.SortStableFunc(vs, func(a, b violation) int { return a.at.Compare(b.at) })
	return vs
}

// grantsByName lists each lock's grants in answer order, by what they
// hold on the masters ("n1", "n1#2", "n1#w"); a set's grant counts as a
// grant of each of its locks. Readers are left out: they share a lock.
func grantsByName(r *recorder) map[string][]*grant {
	out := map[string][]*grant{}
	for _, q := range r.requests {
		if q.g == nil || q.kind() == kindReader {
			continue
		}
		for _, g := range q.g.all() {
			if g.members == nil {
				out[g.res] = append(out[g.res], g)
			}
		}
	}
	for _, gs := range out {
		byAnswer(gs)
	}
	return out
}

func byAnswer(gs []*grant) {
	slices.SortStableFunc(gs, func(a, b *grant) int { return a.answer.Compare(b.answer) })
}

// grantsOfKind lists the grants of requests of kind k by the name asked
// for, in answer order.
func grantsOfKind(r *recorder, k kind) map[string][]*grant {
	out := map[string][]*grant{}
	for _, q := range r.requests {
		if q.g != nil && q.kind() == k {
			out[q.name] = append(out[q.name], q.g)
		}
	}
	for _, gs := range out {
		byAnswer(gs)
	}
	return out
}

func (w *world) describe(g *grant) string {
	r := w.rec
	last := g.latest()
	held := fmt.Sprintf("fence %d", g.fence)
	switch q := r.byOwner[g.owner()]; {
	case q != nil && q.kind() == kindSet:
		held = fmt.Sprintf("lock %s of the set %s, fence %d", g.name(), q.name, g.fence)
	case g.r.kind() == kindSemaphore:
		held = fmt.Sprintf("slot %d, fence %d", g.slot, g.fence)
	case g.r.kind() == kindReader:
		held = fmt.Sprintf("reader slot %d", g.slot)
	}
	s := fmt.Sprintf("%s via %s (%s): asked %s, granted %s, %s; latest valid_until %s (%s, seen %s); lease_expires %s",
		g.owner(), g.r.sidecar, describeReq(g.r.req), r.at(g.r.start), r.at(g.answer), held, r.at(last.vu), last.src, r.at(last.at), r.at(g.expiresAt))
	if !g.maxHoldAt.IsZero() {
		s += "; max_hold_at " + r.at(g.maxHoldAt)
	}
	if !g.releaseStart.IsZero() {
		s += fmt.Sprintf("; release asked %s, returned %s", r.at(g.releaseStart), r.at(g.releaseDone))
	}
	if !g.endAt.IsZero() {
		s += fmt.Sprintf("; caller knew it over at %s (%s)", r.at(g.endAt), g.endHow)
	}
	if g.endReason != "" {
		s += "; end reason " + string(g.endReason)
	}
	if len(g.lowered) > 0 {
		s += fmt.Sprintf("; ttl LOWERED by heartbeats at %s", fmtTimes(r.t0, g.lowered))
	}
	return s
}

func fmtTimes(t0 time.Time, ts []time.Time) string {
	var s []string
	for _, t := range ts {
		s = append(s, fmtAt(t0, t))
	}
	return strings.Join(s, ", ")
}

// givenUp is when G1's caller gave its promise up: when it asked for the
// release (zero if it never did).
func givenUp(g *grant) time.Time { return g.releaseStart }

// standsUntil is the end of a grant's promise: its latest published
// valid_until, or the release its caller asked for if that came first.
func standsUntil(g *grant) time.Time {
	limit := g.latest().vu
	if up := givenUp(g); !up.IsZero() && up.Before(limit) {
		limit = up
	}
	return limit
}

// checkOverlap is check (a).
func checkOverlap(w *world) []violation {
	r := w.rec
	var vs []violation
	for name, gs := range grantsByName(r) {
		for i, g1 := range gs {
			p := g1.latest()
			limit := standsUntil(g1)
			for _, g2 := range gs[i+1:] {
				if !limit.After(g2.answer) || g2 == g1 {
					continue
				}
				cause, tags := w.overlapCause(g1, g2)
				v := violation{
					check: "a", class: "a/" + cause, name: name, at: g2.answer,
					title: fmt.Sprintf("(a) two grants of %q overlap by %v: %s's promise runs to %s, %s was granted at %s",
						name, limit.Sub(g2.answer).Round(time.Microsecond), g1.owner(), r.at(limit), g2.owner(), r.at(g2.answer)),
					facts: []string{"G1 " + w.describe(g1), "G2 " + w.describe(g2), "hints: " + strings.Join(tags, "; ")},
					from:  earliest(p.at, g2.r.start, g2.answer).Add(-w.p.KeyTTL - time.Second),
					to:    latest(p.at, g2.answer).Add(500 * time.Millisecond),
				}
				vs = append(vs, v)
				break // the first overlap of G1 is enough
			}
		}
	}
	return vs
}

// overlapCause guesses why G1's promise outlived its keys, for the
// tallies; tags list everything that may have played a part.
func (w *world) overlapCause(g1, g2 *grant) (string, []string) {
	r := w.rec
	var tags []string
	cause := ""
	note := func(c, tag string) {
		tags = append(tags, tag)
		if cause == "" {
			cause = c
		}
	}
	if strings.HasPrefix(g1.latest().src, memberOwn) {
		setLimit := time.Time{}
		for _, p := range g1.promises {
			if !strings.HasPrefix(p.src, memberOwn) {
				setLimit = latest(setLimit, p.vu)
			}
		}
		if !setLimit.After(g2.answer) {
			note("G1-set-lock-own-valid_until-only", fmt.Sprintf("only the lock's own valid_until (Info.Locks, List) outlived G2's grant; the set's ran to %s", r.at(setLimit)))
		}
	}
	for _, t := range g1.lowered {
		if t.Before(g2.answer) {
			note("G1-heartbeat-lowered-ttl", fmt.Sprintf("G1's heartbeat at %s LOWERED its ttl", r.at(t)))
			break
		}
	}
	for _, f := range r.faults {
		if f.kind == "restart-empty" && f.end.After(g1.answer.Add(-w.p.KeyTTL)) && f.end.Before(g2.answer) {
			note("master-restarted-empty", fmt.Sprintf("%s restarted EMPTY at %s (killed %s)", f.target, r.at(f.end), r.at(f.start)))
		}
	}
	// A renewal that re-created G1's keys after its published validity
	// had run out.
	for _, k := range r.keys {
		if !k.created() || ownerOfValue(k.value) != g1.owner() || !strings.HasPrefix(k.op, "extend") || k.at.After(g2.answer.Add(time.Second)) {
			continue
		}
		var before time.Time
		for _, p := range g1.promises {
			if p.at.Before(k.at) && p.vu.After(before) {
				before = p.vu
			}
		}
		if !before.IsZero() && k.at.After(before) {
			note("G1-renewal-recreated-keys-after-valid_until", fmt.Sprintf("m%d: a renewal (%s, sent %s) RE-CREATED G1's key at %s, after G1's valid_until %s had passed",
				k.master+1, k.op, r.at(k.send), r.at(k.at), r.at(before)))
			break
		}
	}
	status := "G1-still-held"
	switch {
	case g1.endReason != "":
		status = "G1-ended-" + string(g1.endReason)
	case g1.vanished:
		status = "G1-vanished-lapsed"
	case g1.lapsing:
		status = "G1-lapsed"
	case !g1.endAt.IsZero():
		status = "G1-ended (" + g1.endHow + ")"
	}
	if !g1.maxHoldAt.IsZero() && g1.maxHoldAt.Before(g2.answer) {
		tags = append(tags, "G1 reached its max_hold at "+r.at(g1.maxHoldAt))
		if g1.endReason == "" {
			status = "G1-ended-max_hold"
		}
	}
	tags = append(tags, status)
	if cause == "" {
		cause = status
	}
	return cause, tags
}

// checkFences is check (b).
func checkFences(w *world) []violation {
	r := w.rec
	var vs []violation
	for name, gs := range grantsByName(r) {
		for _, g2 := range gs {
			var worst *grant
			for _, g1 := range gs {
				if g1 != g2 && g1.answer.Before(g2.r.start) && g2.fence <= g1.fence && (worst == nil || g1.fence > worst.fence) {
					worst = g1
				}
			}
			if worst == nil {
				continue
			}
			vs = append(vs, violation{
				check: "b", class: "b/fence-not-above-earlier-grant", name: name, at: g2.answer,
				title: fmt.Sprintf("(b) fence order of %q: %s (asked %s) got fence %d, not above %d of %s granted at %s",
					name, g2.owner(), r.at(g2.r.start), g2.fence, worst.fence, worst.owner(), r.at(worst.answer)),
				facts: []string{"G1 " + w.describe(worst), "G2 " + w.describe(g2)},
				from:  worst.answer.Add(-time.Second), to: g2.answer.Add(500 * time.Millisecond),
			})
		}
	}
	return vs
}

// tenureGrants lists the grants by their tenure (the value the masters
// hold for them), a set's grant by its locks'.
func tenureGrants(r *recorder) map[string][]*grant {
	out := map[string][]*grant{}
	for _, q := range r.requests {
		if q.g == nil {
			continue
		}
		for _, g := range q.g.all() {
			if g.tenure != "" && g.members == nil {
				out[g.tenure] = append(out[g.tenure], g)
			}
		}
	}
	return out
}

// tenureOver is when the tenure of gs was over for its callers: the last
// of them knew its lease over, and the linger that may follow passed
// (zero while one of them did not know). g is the grant that ended last.
func (w *world) tenureOver(gs []*grant) (time.Time, *grant) {
	var last *grant
	for _, g := range gs {
		if g.endAt.IsZero() {
			return time.Time{}, nil
		}
		if last == nil || g.endAt.After(last.endAt) {
			last = g
		}
	}
	over := last.endAt
	if w.p.Linger > 0 && last.r.kind() == kindLock {
		over = over.Add(w.p.Linger + lingerSlack)
	}
	return over, last
}

// lingerSlack is the time between a linger's end and its release's
// sending: a timer and a goroutine, no round.
const lingerSlack = 50 * time.Millisecond

// checkKeys is checks (c) and (c2).
func checkKeys(w *world) []violation {
	r := w.rec
	var vs []violation
	reported := map[string]bool{}
	byTenure := tenureGrants(r)
	for _, k := range r.keys {
		if !k.created() {
			continue
		}
		gs, ok := byTenure[k.value]
		if !ok {
			continue // a value no caller was granted: a failed try, released by its own round
		}
		over, g := w.tenureOver(gs)
		if g == nil {
			continue
		}
		var v violation
		switch {
		case k.send.After(over):
			v = violation{check: "c", class: "c/write-sent-after-end-by-" + k.op,
				title: fmt.Sprintf("(c) m%d: %s sent at %s (by %s) created a key of the tenure of %s, whose last caller %s knew it over at %s (%s)%s",
					k.master+1, k.op, r.at(k.send), k.sidecar, ownerOfValue(k.value), g.owner(), r.at(g.endAt), g.endHow, lingerNote(w, over, g))}
		case strings.HasPrefix(k.op, "extend") && k.at.After(over):
			v = violation{check: "c2", class: "c2/ghost-key-renewal-landed-after-end",
				title: fmt.Sprintf("(c2) m%d: a renewal (%s, sent %s by %s) landed at %s and RE-CREATED the key of the tenure of %s, whose last caller %s knew it over at %s (%s)%s: a ghost key until its ttl runs out",
					k.master+1, k.op, r.at(k.send), k.sidecar, r.at(k.at), ownerOfValue(k.value), g.owner(), r.at(g.endAt), g.endHow, lingerNote(w, over, g))}
		default:
			continue
		}
		if reported[v.check+k.value] {
			continue
		}
		reported[v.check+k.value] = true
		v.name, v.at = nameOfKey(k.key), k.at
		for _, x := range gs {
			v.facts = append(v.facts, "lease "+w.describe(x))
		}
		v.from, v.to = earliest(g.endAt, k.send).Add(-time.Second), k.at.Add(w.p.KeyTTL+time.Second)
		vs = append(vs, v)
	}
	return vs
}

// lingerNote says when the linger after the tenure's last lease ended.
func lingerNote(w *world, over time.Time, g *grant) string {
	if over.Equal(g.endAt) {
		return ""
	}
	return fmt.Sprintf(", and its linger ran out at %s", w.rec.at(over))
}

// checkLiveness is check (d).
func checkLiveness(w *world) []violation {
	r := w.rec
	p := w.p
	bound := p.KeyTTL + time.Second
	settle := p.KeyTTL + 2*p.HealthInterval + 500*time.Millisecond
	var disturbed []interval
	disturbed = append(disturbed, interval{w.t0, w.t0.Add(2 * p.KeyTTL)})
	for _, f := range r.faults {
		disturbed = append(disturbed, interval{f.start, f.end.Add(settle)})
	}
	for _, iv := range r.disturbed {
		disturbed = append(disturbed, interval{iv.from, iv.to.Add(p.HealthInterval)})
	}
	disturbed = append(disturbed, interval{w.stopAt, w.stopAt.Add(time.Hour)})
	closedAt := map[string]time.Time{}
	for _, e := range r.entries {
		if e.name == "" && strings.HasPrefix(e.text, "sidecar ") && strings.Contains(e.text, " closed ") {
			closedAt[strings.Fields(e.text)[1]] = e.at
		}
	}

	quiet := subtract([]interval{{w.t0, w.stopAt}}, disturbed)
	w.quiet = 0
	for _, s := range quiet {
		w.quiet += s.to.Sub(s.from)
	}
	w.judged = 0
	var vs []violation
	for name, gs := range grantsByName(r) {
		if strings.Contains(name, "#") {
			continue // a semaphore's slot or a writer: only locks are judged
		}
		var busy []interval
		for _, g := range gs {
			busy = append(busy, interval{g.answer, w.busyUntil(g, closedAt)})
		}
		busy = append(busy, w.setsTaking(name)...)
		for _, q := range r.requests {
			if q.name != name || q.kind() != kindLock || q.req.Wait == 0 || q.end.IsZero() {
				continue
			}
			segs := subtract([]interval{{q.start, q.end}}, append(slices.Clone(busy), disturbed...))
			for _, s := range segs {
				w.judged += s.to.Sub(s.from)
			}
			for _, s := range segs {
				if s.to.Sub(s.from) < bound {
					continue
				}
				outcome := "was granted at " + r.at(q.end)
				if q.err != nil {
					outcome = fmt.Sprintf("gave up at %s with %v", r.at(q.end), shortErr(q.err))
				}
				vs = append(vs, violation{
					check: "d", class: "d/free-name-not-granted-within-bound", name: name, at: s.from.Add(bound),
					title: fmt.Sprintf("(d) %q was free and the masters quiet from %s to %s (%v > bound %v) while %s waited; it %s",
						name, r.at(s.from), r.at(s.to), s.to.Sub(s.from).Round(time.Millisecond), bound, q.owner, outcome),
					facts: []string{fmt.Sprintf("waiter %s via %s (%s) asked %s", q.owner, q.sidecar, describeReq(q.req), r.at(q.start))},
					from:  s.from.Add(-p.KeyTTL - time.Second), to: s.from.Add(bound + time.Second),
				})
				break
			}
		}
	}
	return vs
}

// setsTaking spans the acquires of sets that have the lock name: a set
// holds its first locks, unseen, while it waits for the next, and
// releases them, unseen, when it fails.
func (w *world) setsTaking(name string) []interval {
	var out []interval
	for _, q := range w.rec.requests {
		if q.kind() == kindSet && slices.Contains(strings.Split(q.name, ","), name) {
			end := q.end
			if end.IsZero() {
				end = w.stopAt
			}
			out = append(out, interval{q.start, end})
		}
	}
	return out
}

// busyUntil is the latest a grant's lease may have lived, as far as the
// history tells.
func (w *world) busyUntil(g *grant, closedAt map[string]time.Time) time.Time {
	end := w.stopAt
	if !g.endAt.IsZero() {
		e := g.endAt
		if strings.HasPrefix(g.endHow, "lapse") {
			e = e.Add(200 * time.Millisecond) // the lapse timer, then the release round
		}
		end = earliest(end, e)
	}
	if !g.maxHoldAt.IsZero() {
		end = earliest(end, g.maxHoldAt.Add(200*time.Millisecond))
	}
	if c, ok := closedAt[g.r.sidecar]; ok && c.After(g.answer) {
		end = earliest(end, c)
	}
	return end
}

// subtract removes cuts from spans.
func subtract(spans, cuts []interval) []interval {
	for _, c := range cuts {
		var out []interval
		for _, s := range spans {
			if !c.to.After(s.from) || !s.to.After(c.from) {
				out = append(out, s)
				continue
			}
			if c.from.After(s.from) {
				out = append(out, interval{s.from, c.from})
			}
			if s.to.After(c.to) {
				out = append(out, interval{c.to, s.to})
			}
		}
		spans = out
	}
	return spans
}

func earliest(ts ...time.Time) time.Time {
	var e time.Time
	for _, t := range ts {
		if !t.IsZero() && (e.IsZero() || t.Before(e)) {
			e = t
		}
	}
	return e
}

func latest(ts ...time.Time) time.Time {
	var l time.Time
	for _, t := range ts {
		if t.After(l) {
			l = t
		}
	}
	return l
}

// report renders the findings of one seed: the first few in full, with
// the history of the name in their window, the rest one line each.
// replay is the command line that runs the history again (a seed, or a
// scenario test).
func report(w *world, vs []violation, traces int, replay string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "SIM seed %d broke %d promise(s): %s\n", w.seed, len(vs), strings.Join(classesOf(vs), ", "))
	fmt.Fprintf(&b, "  params: %s\n", w.p)
	fmt.Fprintf(&b, "  replay: %s\n", replay)
	for i, v := range vs {
		if i >= traces {
			fmt.Fprintf(&b, "  also at %s: %s\n", w.since(v.at), v.title)
			continue
		}
		fmt.Fprintf(&b, "\n  %s\n", v.title)
		for _, f := range v.facts {
			fmt.Fprintf(&b, "    %s\n", f)
		}
		from := latest(v.from, w.t0)
		fmt.Fprintf(&b, "    history of %q (and run-wide events) from %s to %s:\n", v.name, w.since(from), w.since(v.to))
		for _, l := range w.rec.lines(v.name, from, v.to, 90, true) {
			fmt.Fprintf(&b, "  %s\n", l)
		}
	}
	return b.String()
}

// checkWaits is check (e): a waiting acquire that answered no quorum before
// its wait ran out gave up on a promise to ride over the outage.
func checkWaits(w *world) []violation {
	var vs []violation
	for _, q := range w.rec.requests {
		if q.req.Wait == 0 || !errors.Is(q.err, lease.ErrNoQuorum) {
			continue
		}
		if early := q.start.Add(q.req.Wait).Sub(q.end); early > 0 {
			vs = append(vs, violation{
				check: "e", class: "e/wait-gave-up-on-no-quorum", name: q.name, at: q.end,
				title: fmt.Sprintf("%s waited %v of its wait=%v and answered no quorum", q.owner, q.end.Sub(q.start), q.req.Wait),
				facts: []string{q.err.Error()}, from: q.start, to: q.end,
			})
		}
	}
	return vs
}

// checkPermits is check (f): at each grant of a semaphore, count the
// grants standing then (answered by then, promised beyond it); the first
// instant with more than its permits is reported.
func checkPermits(w *world) []violation {
	r := w.rec
	var vs []violation
	for name, gs := range grantsOfKind(r, kindSemaphore) {
		permits := gs[0].r.req.Permits
		for i, g := range gs {
			var standing []*grant
			for _, h := range gs[:i+1] {
				if standsUntil(h).After(g.answer) {
					standing = append(standing, h)
				}
			}
			if len(standing) <= permits {
				continue
			}
			var facts []string
			from := g.answer
			for _, h := range standing {
				facts = append(facts, "holder "+w.describe(h))
				from = earliest(from, h.answer)
			}
			vs = append(vs, violation{
				check: "f", class: "f/more-holders-than-permits", name: name + "#", at: g.answer,
				title: fmt.Sprintf("(f) the semaphore %q (permits %d) has %d holders at %s, when %s was granted",
					name, permits, len(standing), r.at(g.answer), g.owner()),
				facts: facts, from: from.Add(-time.Second), to: g.answer.Add(500 * time.Millisecond),
			})
			break // the first instant is enough
		}
	}
	return vs
}

// checkReaders is check (g): for a reader and a writer of one read/write
// lock, the one answered first stands no later than the other's answer.
func checkReaders(w *world) []violation {
	r := w.rec
	writers := grantsOfKind(r, kindWriter)
	var vs []violation
	for name, readers := range grantsOfKind(r, kindReader) {
		for _, rd := range readers {
			for _, wr := range writers[name] {
				g1, g2 := wr, rd
				if rd.answer.Before(wr.answer) {
					g1, g2 = rd, wr
				}
				limit := standsUntil(g1)
				if !limit.After(g2.answer) {
					continue
				}
				cause, tags := w.overlapCause(g1, g2)
				vs = append(vs, violation{
					check: "g", class: "g/reader-overlaps-writer/" + cause, name: name + "#rw", at: g2.answer,
					title: fmt.Sprintf("(g) a reader and a writer of %q overlap by %v: %s's promise runs to %s, %s was granted at %s",
						name, limit.Sub(g2.answer).Round(time.Microsecond), g1.owner(), r.at(limit), g2.owner(), r.at(g2.answer)),
					facts: []string{"reader " + w.describe(rd), "writer " + w.describe(wr), "hints: " + strings.Join(tags, "; ")},
					from:  earliest(g1.latest().at, g2.r.start, g2.answer).Add(-w.p.KeyTTL - time.Second),
					to:    latest(g1.latest().at, g2.answer).Add(500 * time.Millisecond),
				})
				break // the first overlap of the reader is enough
			}
		}
	}
	return vs
}
