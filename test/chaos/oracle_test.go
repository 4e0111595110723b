//go:build linux

package chaos

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	fencedresource "github.com/sidelock/sidelock/examples/fenced-resource"
	"github.com/sidelock/sidelock/pkg/client"
	"github.com/sidelock/sidelock/pkg/redlock"
	"github.com/sidelock/sidelock/pkg/redlock/redisnode"
	"github.com/sidelock/sidelock/test/leasecheck"
)

// The oracle records what every client saw, on the test's monotonic clock
// (all clients live in this process, so their clock readings are
// comparable), and judges it afterwards.
//
//   - A critical section runs from the moment a client has a valid grant
//     to the moment it stops acting: it released, learnt the lock was
//     lost, or reached the grant's valid_until (clients never act after
//     it: each write is checked against it first).
//   - Two critical sections of one name that overlap are a mutual
//     exclusion violation.
//   - A grant whose fence is not above that of a critical section that
//     ended before it began is a fence-order violation. (The resource
//     itself never accepts a lower fence than it has seen: that is its
//     rule.) A write by a holder within its validity that the resource
//     rejects means two holders overlapped and the fence caught the
//     older one; it is counted apart.
//   - A write after valid_until (only the "paused client" scenario does
//     that, on purpose) is stale; the resource must reject it once a newer
//     holder has written.
//   - Every valid_until a sidecar publishes is a promise: until then, no
//     one else is granted the name. The acquire answer, every heartbeat
//     (PUT) answer and every "renewed" event of a held stream carries one;
//     each grant's promise runs to the latest valid_until ever published
//     to it, or to the moment its client began to give it up (DELETE
//     sent, held connection closed), whichever is first. A loss notice
//     (410 lease_gone, a "lost" event, a stream cut by a dying sidecar)
//     does not end it: the client did not let go, so an earlier end means
//     the sidecar promised more than it kept. A grant of the same name
//     whose answer arrived while an earlier promise stood is a broken
//     promise. These times are wall-clock readings on one machine (the
//     clients' receive times and the sidecars' valid_until), which share
//     a clock.
//   - "One name" above is what a grant holds exclusively (target): a lock,
//     or one slot of a semaphore, itself a lock. A semaphore of N permits
//     is also judged whole: no more than N of its sections open at once,
//     no grant while N earlier promises stand (semaphore_test.go).
//   - A leader election is a lock like any other; what the watchers of
//     it were told is judged against the grants (election_test.go).
//   - A read/write lock's writer is a lock like any other; its reads are
//     judged against its writes: none open (sections) or promised
//     (valid_untils) while a write is, writers' fences rising in grant
//     order (rwlock_test.go).
//   - A lock set's grant is one grant of each of its locks, with the
//     set's valid_until and the lock's own fence: the lock checks apply
//     to each; and no lock of a set is held by anyone else while the set
//     holds it (lockset_test.go).
type oracle struct {
	// masters are direct connections to the masters (no proxy), to see
	// when a dead holder's key is gone.
	masters []*redisnode.Node
	watches sync.WaitGroup

	mu       sync.Mutex
	sections []*section
	writes   []write
	failures map[string]int
	// failuresOn are the failures by the sidecar that answered them.
	failuresOn map[int]map[string]int
	probes     []probe
	deaths     []death
	stores     map[string]*fencedresource.Store // by target.exclusive
	promises   []*promise
	// attempts, observations and freezes are what the watches of the
	// leader election are judged by (election_test.go).
	attempts     map[string]time.Time // when each owner label was first asked for
	observations []observation
	freezes      []freeze
	// malformedAnswers are grants whose answer lacked what its kind
	// promises (a reader's slot, a writer's fence, a set's locks).
	malformedAnswers []malformedAnswer
}

// malformedAnswer is a grant's answer that did not have its kind's shape.
type malformedAnswer struct {
	target
	what string
}

// malformed records a grant whose answer was not of its kind's shape.
func (o *oracle) malformed(t target, what string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.malformedAnswers = append(o.malformedAnswers, malformedAnswer{target: t, what: what})
}

// target is what a grant holds: a lock, one slot of a semaphore (each
// slot is a lock of its own, see internal/lease/semaphore.go), a read or
// the write of a read/write lock, or one lock of a lock set. A worker
// takes a whole set (lockSet), whose grant the oracle records as one grant
// of each of its locks (members).
type target struct {
	name    string
	permits int // the semaphore's permits; 0 for the other kinds
	// slot is the slot held: a semaphore's 1..permits, a reader's
	// 1..64; 0 for the other kinds (or before the grant).
	slot int
	mode client.Mode // a read/write lock's side; "" for the other kinds
	// set is a lock set's canonical name: of the set a worker takes (then
	// name is empty), or of the set a lock was granted with.
	set string
}

// lock is the target of a lock name.
func lock(name string) target { return target{name: name} }

func (t target) isSemaphore() bool { return t.permits > 0 }

func (t target) isRWLock() bool { return t.mode != "" }

func (t target) isWriter() bool { return t.mode == client.Exclusive }

// isSet tells a whole lock set (what a worker asks for) from one of its
// locks (inSet).
func (t target) isSet() bool { return t.set != "" && t.name == "" }

func (t target) inSet() bool { return t.set != "" && t.name != "" }

// exclusive names what at most one grant holds at a time: the lock (of a
// set or not), the semaphore's slot, or the read/write lock's writer. The
// exclusive checks (overlaps, fence order, broken promises, the fenced
// resource) group by it; a read holds nothing exclusively ("") and is
// judged against the writes (rwlock_test.go).
func (t target) exclusive() string {
	switch {
	case t.isSemaphore():
		return fmt.Sprintf("semaphore %s slot %d", t.name, t.slot)
	case t.isWriter():
		return "rwlock " + t.name + " writer"
	case t.isRWLock():
		return ""
	}
	return t.name
}

// holding says what a grant held, for the reports.
func (t target) holding() string {
	switch {
	case t.isSemaphore():
		return fmt.Sprintf("slot %d", t.slot)
	case t.isWriter():
		return "the write"
	case t.isRWLock():
		return fmt.Sprintf("a read, slot %d", t.slot)
	case t.inSet():
		return t.name + " of the set " + t.set
	}
	return t.name
}

// key is where the masters keep it: a semaphore's slot is
// "<name>#<slot>", a read/write lock's writer "<name>#w" and a reader
// "<name>#r<slot>" (internal/lease/target.go).
func (t target) key() string {
	switch {
	case t.isSemaphore():
		return keyPrefix + t.name + "#" + strconv.Itoa(t.slot)
	case t.isWriter():
		return keyPrefix + t.name + "#w"
	case t.isRWLock():
		return keyPrefix + t.name + "#r" + strconv.Itoa(t.slot)
	}
	return keyPrefix + t.name
}

// promise is one grant as its valid_untils describe it.
type promise struct {
	target
	owner   string
	sidecar int
	kind    string // the client: heartbeat, holder, trier, pauser, holder process
	fence   int64
	granted time.Time // wall clock: the acquire answer arrived
	// until is the latest valid_until published to the grant, by what
	// (acquire, heartbeat, renewed), and how many valid_untils it got.
	until     time.Time
	untilBy   string
	published int
	// released is when the client began to give the grant up; zero when
	// it never did (it died, or learnt the lock was gone).
	released time.Time
	// history is every valid_until published to it, and fate how it
	// ended when the client did not release it: for the report.
	history []publication
	fate    string
}

// publication is one valid_until a grant received, and when.
type publication struct {
	by             string
	at, validUntil time.Time
}

// end is when the promise stopped standing.
func (p *promise) end() time.Time {
	if !p.released.IsZero() && p.released.Before(p.until) {
		return p.released
	}
	return p.until
}

// wallNow is the wall clock, without the monotonic reading, so it
// compares with the valid_untils the sidecars publish.
func wallNow() time.Time { return time.Now().Round(0) }

// granted records a grant whose acquire answer arrived at (wall clock)
// with validUntil.
func (o *oracle) granted(t target, owner, kind string, sidecar int, fence int64, at, validUntil time.Time) *promise {
	p := &promise{target: t, owner: owner, kind: kind, sidecar: sidecar, fence: fence,
		granted: at.Round(0), until: validUntil, untilBy: "acquire", published: 1,
		history: []publication{{by: "acquire", at: at.Round(0), validUntil: validUntil}}}
	o.mu.Lock()
	o.promises = append(o.promises, p)
	o.mu.Unlock()
	return p
}

// promised records one more valid_until published to a grant (by a
// heartbeat answer or a renewed event).
func (o *oracle) promised(p *promise, validUntil time.Time, by string) {
	at := wallNow()
	o.mu.Lock()
	defer o.mu.Unlock()
	p.published++
	p.history = append(p.history, publication{by: by, at: at, validUntil: validUntil})
	if validUntil.After(p.until) {
		p.until, p.untilBy = validUntil, by
	}
}

// kept records why a grant's client did not release it.
func (o *oracle) kept(p *promise, fate string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if p.fate == "" {
		p.fate = fate
	}
}

// releasing records that the client began to give the grant up at (the
// first call wins).
func (o *oracle) releasing(p *promise, at time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if p.released.IsZero() {
		p.released = at.Round(0)
	}
}

type section struct {
	target
	owner       string // unique per grant: the owner label on the masters
	client      int
	sidecar     int
	fence       int64
	enter, exit time.Time
	reason      string // why it ended: done, lost, validity, sidecar_gone, killed
}

type write struct {
	target   string // exclusive
	client   int
	fence    int64
	at       time.Time
	stale    bool // after the writer's valid_until
	accepted bool
}

// probe is one try-once acquisition of a private name, for availability.
type probe struct {
	sidecar int
	at      time.Time
	took    time.Duration
	ok      bool
	cause   string
}

// death is a holder that died (its process, or its sidecar) at a moment,
// and how long a majority of masters kept its key afterwards.
type death struct {
	name string
	at   time.Time
	what string
	// lapse is when the dead caller's lease lapses on a sidecar that
	// outlives it (its lease_expires_at or latest valid_until, whichever
	// is later); zero when the sidecar died, or the connection held it.
	lapse time.Time
	// sidecarDied: the holder's sidecar died (or froze) with it; else
	// the sidecar lives on and releases the keys itself.
	sidecarDied bool
	heldFor     time.Duration
	released    bool
}

// allowed is how long the dead holder's key may stay on a majority. A
// caller whose sidecar lives is released when its lease lapses (a held
// connection's at once): with every master reachable (reached), that is
// all. When the release cannot reach a majority (masters stopped or cut
// off), or the sidecar died, the keys go when the last write before then
// expires, one key ttl later (docs/guarantees.md).
func (d death) allowed(reached bool) time.Duration {
	lapse := max(0, d.lapse.Sub(d.at))
	if reached && !d.sidecarDied {
		return lapse
	}
	return keyTTL + lapse
}

func newOracle() *oracle {
	return &oracle{failures: map[string]int{}, failuresOn: map[int]map[string]int{}, stores: map[string]*fencedresource.Store{},
		attempts: map[string]time.Time{}}
}

func (o *oracle) enter(t target, owner string, client, sidecar int, fence int64) *section {
	s := &section{target: t, owner: owner, client: client, sidecar: sidecar, fence: fence, enter: time.Now()}
	o.mu.Lock()
	o.sections = append(o.sections, s)
	o.mu.Unlock()
	return s
}

// leave ends a critical section at the given moment (never after now).
func (o *oracle) leave(s *section, at time.Time, reason string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if s.exit.IsZero() {
		s.exit, s.reason = at, reason
	}
}

// write performs a write at the target's fenced resource (one per lock,
// semaphore slot and read/write lock's writer) and records it. A reader
// only reads: it writes nothing.
func (o *oracle) write(t target, client int, fence int64, stale bool) bool {
	if t.exclusive() == "" {
		return true
	}
	at := time.Now()
	ok := o.store(t.exclusive()).Write(fence, "written by a chaos client")
	o.mu.Lock()
	o.writes = append(o.writes, write{target: t.exclusive(), client: client, fence: fence, at: at, stale: stale, accepted: ok})
	o.mu.Unlock()
	return ok
}

// store is the fenced resource of what a grant holds exclusively.
func (o *oracle) store(exclusive string) *fencedresource.Store {
	o.mu.Lock()
	defer o.mu.Unlock()
	s, ok := o.stores[exclusive]
	if !ok {
		s = &fencedresource.Store{}
		o.stores[exclusive] = s
	}
	return s
}

// fail records a failed acquisition through sidecar car.
func (o *oracle) fail(car int, cause string) {
	o.mu.Lock()
	o.failures[cause]++
	if o.failuresOn[car] == nil {
		o.failuresOn[car] = map[string]int{}
	}
	o.failuresOn[car][cause]++
	o.mu.Unlock()
}

func (o *oracle) recordProbe(p probe) {
	o.mu.Lock()
	o.probes = append(o.probes, p)
	o.mu.Unlock()
}

// died records that the holder of name (owner) died at a moment while its
// sidecar lives on (lapse: when its lease lapses there; zero for a held
// connection), and watches the masters until its key is gone from a
// majority.
func (o *oracle) died(t target, owner string, at time.Time, what string, lapse time.Time) {
	o.recordDeath(death{name: t.exclusive(), at: at, what: what, lapse: lapse}, t, owner)
}

// sidecarDied is died for the holders of a sidecar that died or froze.
func (o *oracle) sidecarDied(t target, owner string, at time.Time, what string) {
	o.recordDeath(death{name: t.exclusive(), at: at, what: what, sidecarDied: true}, t, owner)
}

// recordDeath watches d's key leave the masters, then records d.
func (o *oracle) recordDeath(d death, t target, owner string) {
	o.watches.Go(func() {
		d.heldFor, d.released = o.watchRelease(t, owner, d.at)
		o.mu.Lock()
		o.deaths = append(o.deaths, d)
		o.mu.Unlock()
	})
}

// watchRelease polls the masters (bounded) until fewer than a majority
// hold name for owner.
func (o *oracle) watchRelease(t target, owner string, since time.Time) (time.Duration, bool) {
	deadline := since.Add(3 * keyTTL)
	for {
		if !o.heldBy(t, owner) {
			return time.Since(since), true
		}
		if time.Now().After(deadline) {
			return time.Since(since), false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// heldBy is whether a majority of the masters hold t for owner: the
// holder record of the key's value names it (a sidecar hands a lock from
// caller to caller under one value, and lingers on it when nobody holds
// it: internal/lease/tenure.go), or, without one, the value does
// ("<grant id>:<owner>"). A master that does not answer counts as not
// holding it: a stopped master's keys expire by the clock, so they are
// gone when it resumes.
func (o *oracle) heldBy(t target, owner string) bool {
	n := 0
	for _, m := range o.masters {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		r, err := m.GetHolder(ctx, redlock.TenureKeysOf(t.key()))
		cancel()
		_, got, _ := strings.Cut(r.Value, ":")
		if rec := r.Record; rec.Value == r.Value && r.Value != "" {
			got = rec.Owner
			if rec.Idle {
				got = ""
			}
		}
		if err == nil && r.Value != "" && got == owner {
			n++
		}
	}
	return n > len(o.masters)/2
}

// activeOn returns the open critical sections of sidecar's clients.
func (o *oracle) activeOn(sidecar int) []section {
	o.mu.Lock()
	defer o.mu.Unlock()
	var open []section
	for _, s := range o.sections {
		if s.sidecar == sidecar && s.exit.IsZero() {
			open = append(open, *s)
		}
	}
	return open
}

// verdict is what the oracle concluded about one scenario.
type verdict struct {
	grants           int
	grantsInFault    int
	failures         map[string]int
	failuresOn       map[int]map[string]int // by sidecar
	overlaps         int
	fenceViolations  int
	liveRejected     int // writes within validity the resource refused
	staleRejected    int
	staleAccepted    int
	availability     float64 // share of probes granted, whole run
	faultAvail       float64 // during the fault window
	recovery         time.Duration
	recovered        bool
	maxHeldForDead   time.Duration
	deathsSeen       []death
	deaths           int
	unreleased       int           // dead holders' keys still on a majority 3 key ttls later
	failedProbeP99   time.Duration // how fast a refused acquire answered
	bySidecar        []float64     // availability of each sidecar, whole run
	worstOverlap     string
	worstFenceReport string
	// promises: grants checked, valid_untils they were published
	// (acquire answers, heartbeat answers, renewed events), and grants
	// answered while an earlier grant's promise stood.
	promiseGrants    int
	promisesChecked  int
	promisesByKind   map[string]int // by the kind of client
	promisesBySource map[string]int // acquire, heartbeat, renewed, expiring, lost
	brokenPromises   int
	worstBrokenBy    time.Duration
	worstPromise     string
	// semaphores and election: their own checks (semaphore_test.go,
	// election_test.go); their grants are in the figures above too.
	semaphores semaphoreVerdict
	election   electionVerdict
	// read/write locks and lock sets: their own checks (rwlock_test.go,
	// lockset_test.go); writers and the locks of sets are in the figures
	// above too.
	rwlocks  rwVerdict
	locksets setVerdict
}

// judge analyses everything recorded. window is the fault; recovery is
// measured from its end.
func (o *oracle) judge(start, faultStart, faultEnd, end time.Time, sidecars int) verdict {
	o.mu.Lock()
	defer o.mu.Unlock()
	v := verdict{failures: maps.Clone(o.failures), failuresOn: map[int]map[string]int{}}
	for car, f := range o.failuresOn {
		v.failuresOn[car] = maps.Clone(f)
	}
	closed := o.closedSections(end)
	v.grants = len(closed)
	for _, s := range closed {
		if !s.enter.Before(faultStart) && s.enter.Before(faultEnd) {
			v.grantsInFault++
		}
	}
	v.overlaps, v.worstOverlap = overlaps(closed)
	v.fenceViolations, v.worstFenceReport = fenceOrder(closed)
	v.promiseGrants, v.promisesByKind, v.promisesBySource = len(o.promises), map[string]int{}, map[string]int{}
	for _, p := range o.promises {
		v.promisesChecked += p.published
		v.promisesByKind[p.kind] += p.published
		for _, h := range p.history {
			v.promisesBySource[h.by]++
		}
	}
	v.brokenPromises, v.worstBrokenBy, v.worstPromise = brokenPromises(o.promises)
	v.semaphores = judgeSemaphores(closed, o.promises)
	v.election = judgeElection(closed, o.promises, o.attempts, o.observations, o.freezes)
	v.rwlocks = judgeRWLocks(closed, o.promises, o.malformedAnswers)
	v.locksets = judgeLockSets(closed, o.promises, o.malformedAnswers)
	for _, w := range o.writes {
		switch {
		case !w.stale && !w.accepted:
			v.liveRejected++
		case w.stale && w.accepted:
			v.staleAccepted++
		case w.stale:
			v.staleRejected++
		}
	}
	v.availability, v.faultAvail, v.failedProbeP99 = o.availability(start, faultStart, faultEnd, end)
	v.recovery, v.recovered = o.recoveryAfter(faultEnd, end, sidecars)
	v.bySidecar = o.availabilityBySidecar(start, end, sidecars)
	v.maxHeldForDead, v.deaths, v.unreleased = o.heldForDead()
	v.deathsSeen = slices.Clone(o.deaths)
	return v
}

// closedSections are the sections with an end; a section still open when
// the run ended is closed at the end.
func (o *oracle) closedSections(end time.Time) []*section {
	out := make([]*section, 0, len(o.sections))
	for _, s := range o.sections {
		c := *s
		if c.exit.IsZero() {
			c.exit, c.reason = end, "run_ended"
		}
		out = append(out, &c)
	}
	return out
}

// overlaps counts sections that began before an earlier section of the
// same name ended (leasecheck.Overlaps) and describes the first.
func overlaps(sections []*section) (int, string) {
	n, first := leasecheck.Overlaps(oracleSections(sections))
	if first == nil {
		return n, ""
	}
	a, b := sections[first.Earlier], sections[first.Later]
	return n, describeOverlap(a.exclusive(), a, b)
}

func describeOverlap(name string, a, b *section) string {
	return fmt.Sprintf("%s granted to %s on sidecar%d (fence %d) while %s on sidecar%d (fence %d) still held it for %v (its section ended by %s)",
		name, b.owner, b.sidecar, b.fence, a.owner, a.sidecar, a.fence, a.exit.Sub(b.enter).Round(time.Millisecond), a.reason)
}

// fenceOrder counts grants whose fence is not above the fence of every
// section of the same name that ended before they began (leasecheck.FenceOrder).
func fenceOrder(sections []*section) (int, string) {
	n, first := leasecheck.FenceOrder(oracleSections(sections))
	if first == nil {
		return n, ""
	}
	s := sections[first.Section]
	return n, fmt.Sprintf("%s: fence %d granted after a section with fence %d had ended", s.exclusive(), s.fence, first.Highest)
}

// oracleSections are the sections as the oracle package judges them: what
// each holds exclusively ("" for reads, not judged).
func oracleSections(sections []*section) []leasecheck.Section {
	out := make([]leasecheck.Section, len(sections))
	for i, s := range sections {
		out[i] = leasecheck.Section{Key: s.exclusive(), Fence: s.fence, Enter: s.enter, Exit: s.exit}
	}
	return out
}

// brokenPromises counts grants answered while an earlier grant of the same
// name still had its promise (leasecheck.BrokenPromises), and describes the
// one that broke a promise by the most.
func brokenPromises(promises []*promise) (n int, worstBy time.Duration, worst string) {
	ps := make([]leasecheck.Promise, len(promises))
	for i, p := range promises {
		ps[i] = leasecheck.Promise{Key: p.exclusive(), Granted: p.granted, End: p.end()}
	}
	n, w := leasecheck.BrokenPromises(ps)
	if w == nil {
		return n, 0, ""
	}
	return n, w.By, describeBroken(promises[w.Earlier], promises[w.Later])
}

func describeBroken(earlier, later *promise) string {
	released := "never released"
	if earlier.fate != "" {
		released += ": " + earlier.fate
	}
	if !earlier.released.IsZero() {
		released = "released " + earlier.released.Sub(later.granted).Round(time.Millisecond).String() + " after the new grant"
	}
	var pubs []string
	for _, h := range earlier.history {
		pubs = append(pubs, fmt.Sprintf("%s received +%v valid_until +%v", h.by,
			h.at.Sub(earlier.granted).Round(time.Millisecond), h.validUntil.Sub(earlier.granted).Round(time.Millisecond)))
	}
	return fmt.Sprintf("%s granted to %s (%s on sidecar%d, fence %d) at %s while %s (%s on sidecar%d, fence %d, granted %s earlier) "+
		"had been promised it until %s — %v later — by its %s (latest of %d valid_untils, relative to its grant: %s); it was %s",
		earlier.exclusive(), later.owner, later.kind, later.sidecar, later.fence, later.granted.Format("15:04:05.000"),
		earlier.owner, earlier.kind, earlier.sidecar, earlier.fence, later.granted.Sub(earlier.granted).Round(time.Millisecond),
		earlier.until.Local().Format("15:04:05.000"), earlier.end().Sub(later.granted).Round(time.Millisecond),
		earlier.untilBy, earlier.published, strings.Join(pubs, "; "), released)
}

// availability is the share of probes granted over the run and during the
// fault, and the 99th percentile latency of refused probes.
func (o *oracle) availability(start, faultStart, faultEnd, end time.Time) (all, fault float64, refusedP99 time.Duration) {
	var n, ok, fn, fok int
	var refused []time.Duration
	for _, p := range o.probes {
		if p.at.Before(start) || p.at.After(end) {
			continue
		}
		n++
		inFault := !p.at.Before(faultStart) && p.at.Before(faultEnd)
		if inFault {
			fn++
		}
		if p.ok {
			ok++
			if inFault {
				fok++
			}
		} else if p.cause == "no_quorum" {
			refused = append(refused, p.took)
		}
	}
	all, fault = ratio(ok, n), ratio(fok, fn)
	if len(refused) > 0 {
		sort.Slice(refused, func(i, j int) bool { return refused[i] < refused[j] })
		refusedP99 = refused[len(refused)*99/100]
	}
	return all, fault, refusedP99
}

func (o *oracle) availabilityBySidecar(start, end time.Time, sidecars int) []float64 {
	n, ok := make([]int, sidecars), make([]int, sidecars)
	for _, p := range o.probes {
		if p.at.Before(start) || p.at.After(end) {
			continue
		}
		n[p.sidecar]++
		if p.ok {
			ok[p.sidecar]++
		}
	}
	out := make([]float64, sidecars)
	for i := range out {
		out[i] = ratio(ok[i], n[i])
	}
	return out
}

func ratio(a, b int) float64 {
	if b == 0 {
		return 1
	}
	return float64(a) / float64(b)
}

// recoveryAfter is how long after the fault ended every sidecar granted a
// probe again.
func (o *oracle) recoveryAfter(faultEnd, end time.Time, sidecars int) (time.Duration, bool) {
	first := make([]time.Time, sidecars)
	for _, p := range o.probes {
		if p.ok && !p.at.Before(faultEnd) && p.at.Before(end) && (first[p.sidecar].IsZero() || p.at.Before(first[p.sidecar])) {
			first[p.sidecar] = p.at.Add(p.took)
		}
	}
	var worst time.Duration
	for _, f := range first {
		if f.IsZero() {
			return 0, false
		}
		worst = max(worst, f.Sub(faultEnd))
	}
	return worst, true
}

// heldForDead is the longest a dead holder's key stayed on a majority of
// the masters, how many holders died, and how many keys never went.
func (o *oracle) heldForDead() (longest time.Duration, deaths, unreleased int) {
	for _, d := range o.deaths {
		longest = max(longest, d.heldFor)
		if !d.released {
			unreleased++
		}
	}
	return longest, len(o.deaths), unreleased
}

// deadOverdue is the most a dead holder's key outstayed its allowance
// (death.allowed), and which death that was.
func deadOverdue(deaths []death, reached bool) (overdue time.Duration, which string) {
	overdue = -keyTTL
	for _, d := range deaths {
		if over := d.heldFor - d.allowed(reached); over > overdue {
			overdue = over
			which = fmt.Sprintf("%s, whose %s died at %s: held %v, allowed %v",
				d.name, d.what, d.at.Format("15:04:05.000"), d.heldFor.Round(time.Millisecond), d.allowed(reached).Round(time.Millisecond))
		}
	}
	return overdue, which
}

// The promise checker on hand-made histories: it runs without a cluster.
func TestBrokenPromisesChecker(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	cases := []struct {
		name    string
		history func(o *oracle)
		broken  int
		by      time.Duration
	}{
		{"released before the next grant", func(o *oracle) {
			p := o.granted(lock("a"), "w1", "heartbeat", 0, 1, at(0), at(2000))
			o.releasing(p, at(10))
			o.granted(lock("a"), "w2", "heartbeat", 1, 2, at(20), at(2020))
		}, 0, 0},
		{"granted while a dead holder's promise stood", func(o *oracle) {
			o.granted(lock("a"), "w1", "heartbeat", 0, 1, at(0), at(2000))
			o.granted(lock("a"), "w2", "holder", 1, 2, at(1000), at(3000))
		}, 1, time.Second},
		{"a heartbeat's later valid_until counts", func(o *oracle) {
			p := o.granted(lock("a"), "w1", "heartbeat", 0, 1, at(0), at(1000))
			o.promised(p, at(3000), "heartbeat")
			o.promised(p, at(1500), "heartbeat") // a lower one does not take it back
			o.releasing(p, at(5000))
			o.granted(lock("a"), "w2", "trier", 1, 2, at(2000), at(4000))
		}, 1, time.Second},
		{"a renewal's valid_until counts until the client let go", func(o *oracle) {
			p := o.granted(lock("a"), "h1", "holder", 0, 1, at(0), at(1000))
			o.promised(p, at(3000), "renewed")
			o.releasing(p, at(1200))
			o.granted(lock("a"), "w2", "heartbeat", 1, 2, at(1300), at(3300))
		}, 0, 0},
		{"granted exactly at valid_until", func(o *oracle) {
			o.granted(lock("a"), "w1", "heartbeat", 0, 1, at(0), at(2000))
			o.granted(lock("a"), "w2", "heartbeat", 1, 2, at(2000), at(4000))
		}, 0, 0},
		{"reads hold nothing alone; a write is a lock of its own", func(o *oracle) {
			o.granted(target{name: "a", mode: client.Shared, slot: 1}, "r1", "rwlock reader heartbeat", 0, 0, at(0), at(2000))
			o.granted(target{name: "a", mode: client.Shared, slot: 1}, "r2", "rwlock reader holder", 1, 0, at(10), at(2010))
			o.granted(target{name: "a", mode: client.Exclusive}, "w1", "rwlock writer heartbeat", 1, 1, at(20), at(2020))
			o.granted(lock("a"), "w2", "heartbeat", 2, 1, at(30), at(2030))
		}, 0, 0},
		{"other names do not interact", func(o *oracle) {
			o.granted(lock("a"), "w1", "heartbeat", 0, 1, at(0), at(2000))
			o.granted(lock("b"), "w2", "heartbeat", 1, 2, at(10), at(2010))
		}, 0, 0},
		{"each later grant inside a promise counts", func(o *oracle) {
			o.granted(lock("a"), "w1", "heartbeat", 0, 1, at(0), at(2000))
			p := o.granted(lock("a"), "w2", "heartbeat", 1, 2, at(500), at(2500))
			o.releasing(p, at(600))
			o.granted(lock("a"), "w3", "heartbeat", 2, 3, at(700), at(2700))
		}, 2, 1500 * time.Millisecond},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := newOracle()
			tc.history(o)
			n, by, worst := brokenPromises(o.promises)
			if n != tc.broken || by != tc.by {
				t.Fatalf("brokenPromises = %d by %v (%s), want %d by %v", n, by, worst, tc.broken, tc.by)
			}
			if n > 0 && worst == "" {
				t.Fatal("no description of the worst broken promise")
			}
		})
	}
}
