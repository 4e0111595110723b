//go:build linux

package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sidelock/sidelock/internal/ctxsleep"
	"github.com/sidelock/sidelock/pkg/client"
)

// Leader election under the same faults as the locks: one campaigner per
// sidecar campaigns for electionName (hold=true, waiting, retried on 409),
// leads for a term and resigns by closing its stream; now and then a
// campaigner process wins and is killed mid-term (kill -9: the kernel
// closes its stream); a watcher per sidecar follows the name
// (GET /locks/{name}?watch=true).
//
// What is judged:
//   - never two leaders: the lock checks (broken promises, overlapping
//     terms, fence order) apply to the campaigners, as to any lock;
//   - every holder a watch names (acquired, or a held state) is one a
//     campaigner asked for, with the term (fence) its grant got, and was
//     not gone long before the watch could have read it;
//   - no watch says the name is free (released, or a free state) while a
//     leader's promise covered the whole time the read could have been
//     made;
//   - a holder first read between its grant's two rounds (its fence not
//     yet committed, so the previous term's) is named again with its own
//     term by the next read: within termFixedWithin, unless the leader
//     left or anything else was reported first.
//
// The watch is an observation (see internal/watch): it may miss a leader
// that came and went between two reads, reports a change late, and its
// valid_until is the masters' word, not a promise. None of that is judged.
// A read is made at most watchWindow before its event arrives: a read is
// one round to the masters, at most twice the node timeout (100 ms here),
// and the rest is slack for a busy machine (the slowest arrival measured,
// from the moment a sidecar first saw a holder, is in the results). Events
// that arrive while the watcher's sidecar is frozen (SIGSTOP), or within
// watchWindow after, are not judged, since the read may be older.

// electionName is the lock the campaigners contend for.
const electionName = "election/leader"

// Campaigns and watches.
const (
	campaignWait = 3 * time.Second        // each attempt's wait
	campaignFor  = 10 * time.Second       // a campaign gives up after (and starts again)
	watchWindow  = 500 * time.Millisecond // a read is made at most this long before its event arrives
	// killedLeaderEvery is the pause between two campaigner processes
	// that are killed once they lead (plus up to as much again).
	killedLeaderEvery = 1500 * time.Millisecond
	// termFixedWithin bounds how soon a watch names a holder read with an
	// uncommitted fence again, with its own: the next read comes within a
	// poll (1 s), and its event within the watch window.
	termFixedWithin = time.Second + watchWindow
	// A leader's term: termBase plus up to as much again, or a short one
	// (shortTerm plus up to 3 times as much) one time in three.
	termBase, shortTerm = 1200 * time.Millisecond, 150 * time.Millisecond
)

// termTime is how long a leader leads before it resigns: mostly longer
// than the watch window, so that what the watches say while a leader
// leads can be judged, and now and then short, so that leaders change
// often.
func (w *worker) termTime() time.Duration {
	if w.rng.IntN(3) == 0 {
		return shortTerm + time.Duration(w.rng.Int64N(int64(3*shortTerm)))
	}
	return termBase + time.Duration(w.rng.Int64N(int64(termBase)))
}

// startElection starts the campaigners, the watchers and the campaigner
// processes to kill, until ctx ends.
func (r *run) startElection(ctx context.Context) {
	r.spawnOn(ctx, []clientKind{campaigner}, []target{lock(electionName)})
	for _, car := range r.c.sidecars {
		r.wg.Go(func() { watchLeader(ctx, car, r.o) })
	}
	r.wg.Go(func() { r.killLeaders(ctx) })
}

// killLeaders now and then runs a campaigner process on a random sidecar
// and kills it (kill -9) a moment after it leads.
func (r *run) killLeaders(ctx context.Context) {
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 3))
	for {
		ctxsleep.For(ctx, killedLeaderEvery+time.Duration(rng.Int64N(int64(killedLeaderEvery))))
		if ctx.Err() != nil {
			return
		}
		car := r.c.sidecars[rng.IntN(len(r.c.sidecars))]
		r.holdAndKill(car, electionName, time.Duration(200+rng.IntN(600))*time.Millisecond)
	}
}

// watchLeader follows electionName on car and records every change, until
// ctx ends. client.Watch reconnects a broken stream itself; a refused one
// (the sidecar is down) is tried again.
func watchLeader(ctx context.Context, car *sidecarProc, o *oracle) {
	hc := &http.Client{}
	defer hc.CloseIdleConnections()
	api := client.New(car.api, hc)
	for ctx.Err() == nil {
		w, err := api.Watch(ctx, electionName)
		if err != nil {
			ctxsleep.For(ctx, 200*time.Millisecond)
			continue
		}
		for c := range w.Changes() {
			o.observed(car.idx, c, wallNow())
		}
	}
}

// observation is one change a watcher was told, and when it arrived (wall
// clock).
type observation struct {
	watcher int // the sidecar watched through
	change  client.Change
	at      time.Time
}

// freeze is a time a sidecar was stopped (SIGSTOP).
type freeze struct {
	sidecar  int
	from, to time.Time
}

// attempted records that owner was first asked for at (wall clock), before
// the request went out.
func (o *oracle) attempted(owner string, at time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := o.attempts[owner]; !ok {
		o.attempts[owner] = at.Round(0)
	}
}

func (o *oracle) observed(watcher int, c client.Change, at time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.observations = append(o.observations, observation{watcher: watcher, change: c, at: at.Round(0)})
}

// froze records that sidecar was stopped from one moment to another.
func (o *oracle) froze(sidecar int, from, to time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.freezes = append(o.freezes, freeze{sidecar: sidecar, from: from.Round(0), to: to.Round(0)})
}

// electionVerdict is what the oracle concluded about the election.
type electionVerdict struct {
	terms int // grants of electionName
	// twoLeaders counts terms granted while an earlier term's promise
	// stood, overlaps terms that overlapped (both are also in the lock
	// figures).
	twoLeaders, overlaps int
	// handovers: terms that began after the previous leader resigned or
	// was killed, and the slowest such hand-over.
	handovers       int
	slowestHandover time.Duration
	watch           watchVerdict
}

// watchVerdict is what the watchers were told, judged.
type watchVerdict struct {
	events, judged int
	// Broken promises of the watch:
	unknownOwner int // a holder no campaigner asked for (before the event arrived)
	staleHolder  int // a holder whose keys were gone long before the read
	fenceAbove   int // a holder's term above the one its grant got
	falseFree    int // free while a leader's promise covered the whole read
	termNotFixed int // a holder left with a term below its grant's while it still led
	// Allowed, counted: a holder whose campaign never heard its answer
	// (the campaign gave up or the run ended), and a term below the
	// grant's (read between the grant's two rounds: the key is taken,
	// its fence not yet committed).
	unconfirmed, fenceBelow int
	// slowest is the longest a new holder's event took to arrive after
	// the sidecar first saw it (since): how stale a read can be here.
	slowest time.Duration
	// The first violation of each sort, described: of a named holder
	// (unknown, stale, term), and of a free report.
	worstHolder, worstFree string
}

func (v watchVerdict) violations() int {
	return v.unknownOwner + v.staleHolder + v.fenceAbove + v.falseFree + v.termNotFixed
}

// judgeElection judges the terms of electionName and what the watchers
// were told about them.
func judgeElection(sections []*section, promises []*promise, attempts map[string]time.Time, obs []observation, freezes []freeze) electionVerdict {
	terms := electionPromises(promises)
	var v electionVerdict
	v.terms = len(terms)
	v.twoLeaders, _, _ = brokenPromises(terms)
	var ts []*section
	for _, s := range sections {
		if !s.isSemaphore() && s.name == electionName {
			ts = append(ts, s)
		}
	}
	v.overlaps, _ = overlaps(ts)
	v.handovers, v.slowestHandover = handovers(terms)
	v.watch = judgeWatch(terms, attempts, obs, freezes)
	return v
}

func electionPromises(promises []*promise) []*promise {
	var out []*promise
	for _, p := range promises {
		if !p.isSemaphore() && p.name == electionName {
			out = append(out, p)
		}
	}
	slices.SortStableFunc(out, func(a, b *promise) int { return a.granted.Compare(b.granted) })
	return out
}

// handovers measures, for every term that followed a leader that gave the
// lock up (resigned, or was killed: its connection closed), how long the
// next grant took.
func handovers(terms []*promise) (n int, slowest time.Duration) {
	for i := 1; i < len(terms); i++ {
		prev, next := terms[i-1], terms[i]
		if prev.released.IsZero() || next.granted.Before(prev.released) {
			continue
		}
		n++
		slowest = max(slowest, next.granted.Sub(prev.released))
	}
	return n, slowest
}

// judgeWatch applies the watch's promises to every change the watchers
// were told.
func judgeWatch(terms []*promise, attempts map[string]time.Time, obs []observation, freezes []freeze) watchVerdict {
	byOwner := map[string]*promise{}
	for _, p := range terms {
		byOwner[p.owner] = p
	}
	var v watchVerdict
	holders := map[int]string{} // the holder each watcher was last told of
	for i, ob := range obs {
		v.events++
		c := ob.change
		told := holders[ob.watcher]
		holders[ob.watcher] = c.Owner
		if frozenWithin(freezes, ob.watcher, ob.at, ob.at) {
			continue
		}
		switch {
		case c.Kind == "acquired" || c.Kind == "state" && c.Held:
			v.judged++
			if c.Owner != told && !c.Since.IsZero() { // a new holder: since is its read
				v.slowest = max(v.slowest, ob.at.Sub(c.Since))
			}
			v.judgeHolder(ob, byOwner[c.Owner], attempts)
			if !frozenWithin(freezes, ob.watcher, ob.at, ob.at.Add(termFixedWithin)) {
				v.judgeTermFixed(ob, nextOf(obs, i), byOwner[c.Owner])
			}
		case c.Kind == "released" || c.Kind == "state" && !c.Held:
			v.judged++
			v.judgeFree(ob, terms)
		}
	}
	return v
}

// nextOf is the observation of the same watcher after obs[i], if any
// (each watcher's are recorded in the order they arrived).
func nextOf(obs []observation, i int) *observation {
	for j := i + 1; j < len(obs); j++ {
		if obs[j].watcher == obs[i].watcher {
			return &obs[j]
		}
	}
	return nil
}

// judgeTermFixed: a holder named with a term below its grant's (read
// before the fence was committed) must be named again with its own term by
// the next read, unless something else came first or it left.
func (v *watchVerdict) judgeTermFixed(ob observation, next *observation, p *promise) {
	if p == nil || ob.change.Fence >= p.fence {
		return
	}
	fixBy := ob.at.Add(termFixedWithin)
	if next != nil && !next.at.After(fixBy) || p.end().Before(fixBy) {
		return
	}
	v.termNotFixed++
	note(&v.worstHolder, "sidecar%d's watch named %s with fence %d at %s and nothing more for %v, while it still led with fence %d (%s)",
		ob.watcher, ob.change.Owner, ob.change.Fence, ob.at.Format("15:04:05.000"), termFixedWithin, p.fence, p.describe())
}

// frozenWithin tells whether the watcher's sidecar was frozen, or had
// been less than watchWindow before, at any moment from one time to
// another: its reads then may be older than watchWindow, or late.
func frozenWithin(freezes []freeze, watcher int, from, to time.Time) bool {
	for _, f := range freezes {
		if f.sidecar == watcher && !to.Before(f.from) && !from.After(f.to.Add(watchWindow)) {
			return true
		}
	}
	return false
}

// judgeHolder: the holder a watch names must be one a campaigner asked for
// before the event arrived, with its grant's term, and not long gone.
func (v *watchVerdict) judgeHolder(ob observation, p *promise, attempts map[string]time.Time) {
	c := ob.change
	asked, ok := attempts[c.Owner]
	switch {
	case !ok || asked.After(ob.at):
		v.unknownOwner++
		note(&v.worstHolder, "sidecar%d's watch named %q (fence %d) as the %s holder at %s, which no campaigner had asked for",
			ob.watcher, c.Owner, c.Fence, c.Kind, ob.at.Format("15:04:05.000"))
	case p == nil:
		v.unconfirmed++
	case c.Fence > p.fence:
		v.fenceAbove++
		note(&v.worstHolder, "sidecar%d's watch named %s with fence %d, its grant's fence is %d", ob.watcher, c.Owner, c.Fence, p.fence)
	case c.Fence < p.fence:
		v.fenceBelow++
	}
	if p != nil && ob.at.Add(-watchWindow).After(goneBy(p)) {
		v.staleHolder++
		note(&v.worstHolder, "sidecar%d's watch named %s as the holder at %s, %v after its keys were gone at the latest (%s)",
			ob.watcher, c.Owner, ob.at.Format("15:04:05.000"), ob.at.Sub(goneBy(p)).Round(time.Millisecond), p.describe())
	}
}

// goneBy is when a grant's keys had lapsed from the masters at the latest:
// a key ttl after the last renewal, which was no later than a renewal
// interval after the last sign of the grant (its answer, a valid_until it
// was given, its release); twice the key ttl covers both.
func goneBy(p *promise) time.Time {
	last := p.granted
	if p.released.After(last) {
		last = p.released
	}
	for _, h := range p.history {
		if h.at.After(last) {
			last = h.at
		}
	}
	return last.Add(2 * keyTTL)
}

// judgeFree: no watch may say the name is free while a leader's promise
// stood over the whole window its read could have been made in.
func (v *watchVerdict) judgeFree(ob observation, terms []*promise) {
	readFrom := ob.at.Add(-watchWindow)
	for _, p := range terms {
		if !p.granted.After(readFrom) && !p.end().Before(ob.at) {
			v.falseFree++
			note(&v.worstFree, "sidecar%d's watch said free (%s %s) at %s while %s",
				ob.watcher, ob.change.Kind, ob.change.Reason, ob.at.Format("15:04:05.000"), p.describe())
			return
		}
	}
}

// note keeps the first violation's description in worst.
func note(worst *string, format string, args ...any) {
	if *worst == "" {
		*worst = fmt.Sprintf(format, args...)
	}
}

// electionText is one scenario's election figures for the results.
func electionText(v electionVerdict) string {
	w := v.watch
	return fmt.Sprintf("%d terms, %d granted while another leader's promise stood, %d overlapping, %d hand-overs (slowest %v); "+
		"watches: %d events (%d judged), %d unknown holders, %d stale holders, %d terms above the grant's, %d left with a lower term, %d false frees; "+
		"%d holders whose campaign never heard its answer, %d terms read before their commit, a new holder's event arrived at most %v after its read",
		v.terms, v.twoLeaders, v.overlaps, v.handovers, v.slowestHandover.Round(time.Millisecond),
		w.events, w.judged, w.unknownOwner, w.staleHolder, w.fenceAbove, w.termNotFixed, w.falseFree, w.unconfirmed, w.fenceBelow,
		w.slowest.Round(time.Millisecond))
}

// The watch judge on hand-made histories: it runs without a cluster.
func TestWatchJudge(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	leader := lock(electionName)
	// A term: l1 asked at 0, granted at 10 (fence 5) until 3000, resigned
	// at 2500; l2 asked at 100 and never heard its answer.
	history := func(o *oracle) {
		o.attempted("l1", at(0))
		p := o.granted(leader, "l1", "campaigner", 0, 5, at(10), at(3000))
		o.releasing(p, at(2500))
		o.attempted("l2", at(100))
	}
	change := func(kind, owner string, fence int64, held bool) client.Change {
		return client.Change{Kind: kind, Name: electionName, Owner: owner, Fence: fence, Held: held}
	}
	cases := []struct {
		name  string
		ob    observation
		check func(v watchVerdict) bool
	}{
		{"the leader, as granted", observation{1, change("acquired", "l1", 5, true), at(20)},
			func(v watchVerdict) bool { return v.violations() == 0 && v.judged == 1 }},
		{"a holder no one asked for", observation{1, change("acquired", "x9", 5, true), at(20)},
			func(v watchVerdict) bool { return v.unknownOwner == 1 }},
		{"a holder told before it asked", observation{1, change("state", "l2", 5, true), at(50)},
			func(v watchVerdict) bool { return v.unknownOwner == 1 }},
		{"a campaign that never heard its answer", observation{1, change("acquired", "l2", 6, true), at(200)},
			func(v watchVerdict) bool { return v.violations() == 0 && v.unconfirmed == 1 }},
		{"a term above the grant's", observation{1, change("acquired", "l1", 6, true), at(20)},
			func(v watchVerdict) bool { return v.fenceAbove == 1 }},
		{"a term read before its commit, never fixed", observation{1, change("acquired", "l1", 4, true), at(20)},
			func(v watchVerdict) bool { return v.fenceBelow == 1 && v.termNotFixed == 1 }},
		{"a holder long gone", observation{1, change("acquired", "l1", 5, true), at(2500 + 2*2000 + 1000 + 100)},
			func(v watchVerdict) bool { return v.staleHolder == 1 }},
		{"free while the promise covered the read", observation{2, change("released", "", 0, false), at(2000)},
			func(v watchVerdict) bool { return v.falseFree == 1 && strings.Contains(v.worstFree, "l1") }},
		{"a free state counts too", observation{2, change("state", "", 0, false), at(2000)},
			func(v watchVerdict) bool { return v.falseFree == 1 }},
		{"free after the resignation", observation{2, change("released", "", 0, false), at(2600)},
			func(v watchVerdict) bool { return v.violations() == 0 }},
		{"free, read maybe before the grant", observation{2, change("released", "", 0, false), at(500)},
			func(v watchVerdict) bool { return v.violations() == 0 && v.judged == 1 }},
		{"free while the watcher's sidecar was frozen", observation{0, change("released", "", 0, false), at(2000)},
			func(v watchVerdict) bool { return v.violations() == 0 && v.judged == 0 }},
		{"unavailable is not judged", observation{2, change("unavailable", "", 0, false), at(2000)},
			func(v watchVerdict) bool { return v.judged == 0 }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := newOracle()
			history(o)
			o.observed(tc.ob.watcher, tc.ob.change, tc.ob.at)
			o.froze(0, at(1500), at(1900)) // sidecar0: judged again from 2900
			v := judgeElection(nil, o.promises, o.attempts, o.observations, o.freezes)
			if !tc.check(v.watch) {
				t.Fatalf("%+v", v.watch)
			}
		})
	}
}

// A holder read before its fence was committed is named again with its
// term by the next read; if it is not, while it still leads, the watch left
// it with the previous term.
func TestWatchJudgeTermFixed(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	judge := func(obs ...observation) watchVerdict {
		o := newOracle()
		o.attempted("l1", at(0))
		p := o.granted(lock(electionName), "l1", "campaigner", 0, 5, at(10), at(3000))
		o.releasing(p, at(2900))
		for _, ob := range obs {
			o.observed(ob.watcher, ob.change, ob.at)
		}
		return judgeElection(nil, o.promises, o.attempts, o.observations, nil).watch
	}
	early := observation{1, client.Change{Kind: "acquired", Owner: "l1", Fence: 4, Held: true}, at(5)}
	fixed := observation{1, client.Change{Kind: "acquired", Owner: "l1", Fence: 5, Held: true}, at(110)}
	other := observation{2, client.Change{Kind: "acquired", Owner: "l1", Fence: 5, Held: true}, at(110)}
	if v := judge(early, fixed); v.violations() != 0 || v.fenceBelow != 1 {
		t.Fatalf("fixed by the next read: %+v", v)
	}
	if v := judge(early, other); v.termNotFixed != 1 {
		t.Fatalf("another watcher's read fixes nothing: %+v", v)
	}
	o := newOracle()
	o.attempted("l1", at(0))
	o.granted(lock(electionName), "l1", "campaigner", 0, 5, at(10), at(3000))
	o.observed(early.watcher, early.change, early.at)
	o.froze(1, at(300), at(1800)) // the watcher's sidecar froze before its next read
	if v := judgeElection(nil, o.promises, o.attempts, o.observations, o.freezes).watch; v.violations() != 0 {
		t.Fatalf("frozen before the next read: %+v", v)
	}
}

// Two leaders at once, and hand-overs, on hand-made terms.
func TestElectionJudge(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	o := newOracle()
	leader := lock(electionName)
	a := o.granted(leader, "a", "campaigner", 0, 1, at(0), at(2000))
	o.releasing(a, at(500))
	o.granted(leader, "b", "campaigner", 1, 2, at(520), at(2520))     // 20ms after a resigned
	o.granted(leader, "c", "campaigner", 2, 3, at(1000), at(3000))    // while b's promise stood
	o.granted(lock("other"), "d", "campaigner", 2, 1, at(10), at(90)) // not the election
	v := judgeElection(nil, o.promises, o.attempts, nil, nil)
	if v.terms != 3 || v.twoLeaders != 1 || v.handovers != 1 || v.slowestHandover != 20*time.Millisecond {
		t.Fatalf("%+v", v)
	}
}

// checkElection: never two leaders is the lock checks' (check); here, the
// watches' promises, and that leaders were elected at all.
func checkElection(sc scenario, v electionVerdict) []string {
	var problems []string
	w := v.watch
	if n := w.unknownOwner + w.staleHolder + w.fenceAbove + w.termNotFixed; n > 0 && !sc.dataLoss {
		problems = append(problems, fmt.Sprintf("%d watched holders were not as granted (%d unknown, %d long gone, %d with a higher term, %d left with a lower one): %s",
			n, w.unknownOwner, w.staleHolder, w.fenceAbove, w.termNotFixed, w.worstHolder))
	}
	if w.falseFree > 0 && sc.within() {
		problems = append(problems, fmt.Sprintf("%d watches said the leader's lock was free while a leader's promise covered the read: %s", w.falseFree, w.worstFree))
	}
	if v.terms == 0 {
		problems = append(problems, "no leader elected at all")
	}
	return problems
}

// kindsTable is the results' table of the semaphores and the election.
func kindsTable(results []result) string {
	var b strings.Builder
	b.WriteString("\n" + kindsHowToRead)
	b.WriteString("| scenario | permits granted | over N in sections | over N promised (valid_untils checked) | terms | two leaders | hand-overs (slowest) | watch events (judged) | watch violations | unconfirmed / term before commit |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range results {
		s, e := r.v.semaphores, r.v.election
		fmt.Fprintf(&b, "| %s | %d | %d | %d (%d) | %d | %d | %d (%v) | %d (%d) | %d | %d / %d |\n",
			r.name, s.grants, s.overN, s.overPromised, s.promisesChecked, e.terms, e.twoLeaders, e.handovers,
			e.slowestHandover.Round(time.Millisecond), e.watch.events, e.watch.judged, e.watch.violations(), e.watch.unconfirmed, e.watch.fenceBelow)
	}
	return b.String()
}

// kindsHowToRead explains the semaphores' and the election's table.
const kindsHowToRead = `Semaphores and leader election ran alongside the locks in every scenario: 4 workers per sidecar on two semaphores
of 2 and 3 permits (heartbeats, a held connection, a try-once caller), one campaigner per sidecar for one leader lock
(plus a campaigner process killed mid-term every 1.5–3 s), and a watcher per sidecar following it.

- **over N in sections / promised** — semaphore critical sections entered while N others were open; permits granted
  while N earlier grants' valid_untils still stood (their promises, as for locks). Each slot is also a lock in the
  table above (overlaps, fence order, broken promises).
- **two leaders** — terms granted while an earlier term's promise stood; **hand-overs** — terms that followed a
  resignation or a killed leader, and the slowest of them.
- **watch violations** — a watched holder no campaigner asked for, one whose keys were gone long before, a term above
  its grant's, or "free" while a leader's promise covered the whole read (events while the watcher's sidecar was
  frozen are not judged). **unconfirmed** — holders whose campaign never heard its answer; **term before commit** —
  a holder read between its grant's two rounds, with the previous term's fence.

`
