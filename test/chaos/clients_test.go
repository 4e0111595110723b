//go:build linux

package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sidelock/sidelock/pkg/client"
)

// clientKind is how a client keeps its lock.
type clientKind int

const (
	// heartbeat: a plain lease with ttl = the key ttl, kept by PUT every
	// third of it; released with DELETE.
	heartbeat clientKind = iota
	// holder: hold=true; the open connection keeps the lock, renewals
	// arrive as events; closing the connection releases it.
	holder
	// trier: try once (wait=0), back off on 409; otherwise like heartbeat.
	trier
	// pauser: a heartbeat client that, once in a while, stalls past its
	// valid_until (a GC pause, a stopped VM) and then writes anyway: the
	// case no lease can prevent and fencing must catch.
	pauser
	// campaigner: a candidate of a leader election (election_test.go): it
	// campaigns (hold=true, waiting, retried on 409), leads for a term and
	// resigns by closing the stream.
	campaigner
)

func (k clientKind) String() string {
	return [...]string{"heartbeat", "holder", "trier", "pauser", "campaigner"}[k]
}

// Client behaviour.
const (
	waitFor       = 2 * time.Second       // wait for a held lock
	writeEvery    = 10 * time.Millisecond // writes to the resource in a critical section
	requestGrace  = 2 * time.Second       // beyond the wait, for an answer
	heartbeatTime = 500 * time.Millisecond
	releaseTime   = time.Second
)

// Uses of the API whose valid_until is easy to over-promise, mixed into
// the ordinary workers so that the oracle's promise check meets them: a
// quarter of the plain leases heartbeat at once with a ttl below the key
// ttl (their lease then lapses before the acquire's valid_until if the
// client dies or stalls), and a quarter of the held locks ask for a
// max_hold shorter than the key ttl and run into it.
const (
	loweredTTL  = keyTTL / 2
	maxHoldBase = 500 * time.Millisecond // plus up to as much again
)

// worker is one simulated application process using one sidecar.
type worker struct {
	id      int
	kind    clientKind
	car     *sidecarProc
	targets []target // the locks or semaphores it takes turns on
	o       *oracle
	api     *client.Client
	http    *http.Client
	rng     *rand.Rand
	// grants counts acquisitions, for owner labels.
	grants int
	// abandon, when set, makes the worker die in its next critical
	// section: no more heartbeats, no release (a crashed process).
	abandon atomic.Bool
}

func newWorker(id int, kind clientKind, car *sidecarProc, targets []target, o *oracle) *worker {
	tr := &http.Transport{MaxIdleConnsPerHost: 4, DialContext: (&net.Dialer{Timeout: time.Second}).DialContext}
	hc := &http.Client{Transport: tr}
	return &worker{id: id, kind: kind, car: car, targets: targets, o: o, api: client.New(car.api, hc), http: hc,
		rng: rand.New(rand.NewPCG(uint64(id), 42))}
}

// run takes turns until ctx ends.
func (w *worker) run(ctx context.Context) {
	defer w.http.CloseIdleConnections()
	for ctx.Err() == nil {
		t := w.targets[w.rng.IntN(len(w.targets))]
		if w.kind == holder || w.kind == campaigner {
			w.holdOnce(ctx, t)
		} else {
			w.leaseOnce(ctx, t)
		}
	}
}

// nextOwner is a unique owner label per grant, so the masters tell this
// grant's key from the worker's next one.
func (w *worker) nextOwner(prefix string) string {
	w.grants++
	return prefix + strconv.Itoa(w.id) + "." + strconv.Itoa(w.grants)
}

// workTime is how long a critical section lasts: mostly short, sometimes
// longer than the key ttl, so renewals and heartbeats matter. A leader's
// term is longer (termTime).
func (w *worker) workTime() time.Duration {
	if w.kind == campaigner {
		return w.termTime()
	}
	if w.rng.IntN(20) == 0 {
		return 700*time.Millisecond + time.Duration(w.rng.Int64N(int64(1800*time.Millisecond)))
	}
	return 5*time.Millisecond + time.Duration(w.rng.Int64N(int64(45*time.Millisecond)))
}

// grant is a lease as the worker sees it: until deadline (valid_until on
// the test's monotonic clock) it may act. parts are what it holds: one
// target, or each lock of a set; each has its fence, its record in the
// oracle (which every valid_until published to the grant goes to) and its
// critical section.
type grant struct {
	token    string
	deadline time.Time
	parts    []part
	ttl      time.Duration // the heartbeats' ttl; 0: the lease's own
	// lapse is when the lease lapses if its caller says nothing more: the
	// latest lease_expires_at or valid_until it was answered.
	lapse time.Time
}

// answered moves the grant's lapse by an answer: the lease's expiry, its
// valid_until and a set's locks' own.
func (g *grant) answered(a answer) {
	for _, t := range append([]time.Time{a.lease.LeaseExpiresAt, a.lease.ValidUntil}, validUntils(a.locks)...) {
		if t.After(g.lapse) {
			g.lapse = t
		}
	}
}

func validUntils(locks []client.SetLock) []time.Time {
	out := make([]time.Time, len(locks))
	for i, l := range locks {
		out[i] = l.ValidUntil
	}
	return out
}

// part is one thing a grant holds.
type part struct {
	target
	fence   int64
	promise *promise
	section *section
}

// answer is an acquisition's answer: the lease, and a lock set's locks.
type answer struct {
	lease client.Lease
	locks []client.SetLock
}

// deadlineOf turns valid_until (wall clock, same host) into a deadline on
// the monotonic clock.
func deadlineOf(validUntil time.Time) time.Time { return time.Now().Add(time.Until(validUntil)) }

// granted records an acquisition's answer, which arrived at answered, as
// the promises of its parts.
func (w *worker) granted(t target, owner, kind string, a answer, answered time.Time, ttl time.Duration) grant {
	if problem := answerProblem(t, a); problem != "" {
		w.o.malformed(t, owner+": "+problem)
	}
	g := grant{token: a.lease.Token, deadline: deadlineOf(a.lease.ValidUntil), ttl: ttl}
	g.answered(a)
	for _, p := range partsOf(t, a) {
		p.promise = w.o.granted(p.target, owner, kind, w.car.idx, p.fence, answered, a.lease.ValidUntil)
		g.parts = append(g.parts, p)
	}
	w.promisedLocks(&g, a, "acquire")
	return g
}

// promisedLocks records the valid_untils a set's answer gave each of its
// locks, where later than the set's: the sidecar keeps each lock until its
// own (internal/lease/lockset.go), so each is a promise of that lock too.
func (w *worker) promisedLocks(g *grant, a answer, by string) {
	for _, l := range a.locks {
		for _, p := range g.parts {
			if p.name == l.Name && l.ValidUntil.After(a.lease.ValidUntil) {
				w.o.promised(p.promise, l.ValidUntil, by+" (the lock's own)")
			}
		}
	}
}

// answerProblem is what is wrong with an answer's shape for its kind, if
// anything: a read without its slot, a write without a fence, a set
// without one of its locks.
func answerProblem(t target, a answer) string {
	switch {
	case t.isRWLock():
		return rwAnswerProblem(t, a.lease)
	case t.isSet():
		return setAnswerProblem(t, a)
	}
	return ""
}

// partsOf is what an answer grants: the target with the slot and fence
// the lease got, or each lock of a set with its own fence (0 if the
// answer lacks it: answerProblem reports that).
func partsOf(t target, a answer) []part {
	if !t.isSet() {
		t.slot = a.lease.Slot
		return []part{{target: t, fence: a.lease.Fence}}
	}
	fences := map[string]int64{}
	for _, l := range a.locks {
		fences[l.Name] = l.Fence
	}
	var out []part
	for _, m := range t.members() {
		out = append(out, part{target: m, fence: fences[m.name]})
	}
	return out
}

// enter opens a critical section of each part.
func (w *worker) enter(g *grant, owner string) {
	for i := range g.parts {
		p := &g.parts[i]
		p.section = w.o.enter(p.target, owner, w.id, w.car.idx, p.fence)
	}
}

// leave ends the critical section of each part.
func (w *worker) leave(g *grant, at time.Time, reason string) {
	for _, p := range g.parts {
		w.o.leave(p.section, at, reason)
	}
}

// writeAll writes to the fenced resource of each part.
func (w *worker) writeAll(g *grant, stale bool) {
	for _, p := range g.parts {
		w.o.write(p.target, w.id, p.fence, stale)
	}
}

// keptAll records why none of the grant's promises was given up.
func (w *worker) keptAll(g *grant, fate string) {
	for _, p := range g.parts {
		w.o.kept(p.promise, fate)
	}
}

// promisedAll records a valid_until published to the grant.
func (w *worker) promisedAll(g *grant, validUntil time.Time, by string) {
	for _, p := range g.parts {
		w.o.promised(p.promise, validUntil, by)
	}
}

func (w *worker) leaseOnce(ctx context.Context, t target) {
	wait := waitFor
	if w.kind == trier {
		wait = 0
	}
	actx, cancel := context.WithTimeout(ctx, wait+requestGrace)
	owner := w.nextOwner("w")
	kind, ttl := w.kindOf(t), time.Duration(0)
	if w.rng.IntN(4) == 0 {
		kind, ttl = kind+" (ttl lowered)", loweredTTL
	}
	a, err := w.acquire(actx, t, client.Options{TTL: keyTTL, Wait: wait, Owner: owner})
	answered := wallNow()
	cancel()
	if err != nil {
		w.failed(ctx, err)
		return
	}
	g := w.granted(t, owner, kind, a, answered, ttl)
	if !time.Now().Before(g.deadline) {
		w.o.fail(w.car.idx, "late_grant") // answered after its own validity: never act on it
		w.release(t, &g, true)
		return
	}
	w.enter(&g, owner)
	reason, at := w.critical(ctx, t, &g)
	w.leave(&g, at, reason)
	switch reason {
	case "killed":
		w.keptAll(&g, "the client died (no heartbeat, no release)")
		for _, p := range g.parts {
			w.o.died(p.target, owner, at, "client", g.lapse)
		}
		return // a dead process releases nothing
	case "paused":
		w.writeAll(&g, true) // the stale write, after the pause
	case "lost":
		// The sidecar said the lease is gone: the DELETE gives nothing
		// up, and the promise stands until its valid_until.
		w.keptAll(&g, "a heartbeat was answered lease_gone")
		w.release(t, &g, false)
		return
	}
	w.release(t, &g, true)
}

// kindOf names the worker's kind of client for the oracle's reports.
func (w *worker) kindOf(t target) string {
	switch {
	case t.isSemaphore():
		return "semaphore " + w.kind.String()
	case t.isWriter():
		return "rwlock writer " + w.kind.String()
	case t.isRWLock():
		return "rwlock reader " + w.kind.String()
	case t.isSet():
		return "lock set " + w.kind.String()
	}
	return w.kind.String()
}

// acquire, extend, releaseCall and hold are the client's calls for each
// kind of target, which differ only in their paths (and a lock set's
// answer, which has its locks).
func (w *worker) acquire(ctx context.Context, t target, opts client.Options) (answer, error) {
	var l client.Lease
	var err error
	switch {
	case t.isSet():
		s, err := w.api.AcquireLockSet(ctx, t.setNames(), opts)
		return answer{lease: s.Lease, locks: s.Locks}, err
	case t.isRWLock():
		l, err = w.api.AcquireRWLock(ctx, t.name, t.mode, opts)
	case t.isSemaphore():
		l, err = w.api.AcquireSemaphore(ctx, t.name, t.permits, opts)
	default:
		l, err = w.api.Acquire(ctx, t.name, opts)
	}
	return answer{lease: l}, err
}

func (w *worker) extend(ctx context.Context, t target, token string, ttl time.Duration) (answer, error) {
	var l client.Lease
	var err error
	switch {
	case t.isSet():
		s, err := w.api.ExtendLockSet(ctx, t.setNames(), token, ttl)
		return answer{lease: s.Lease, locks: s.Locks}, err
	case t.isRWLock():
		l, err = w.api.ExtendRWLock(ctx, t.name, token, ttl)
	case t.isSemaphore():
		l, err = w.api.ExtendSemaphore(ctx, t.name, token, ttl)
	default:
		l, err = w.api.Extend(ctx, t.name, token, ttl)
	}
	return answer{lease: l}, err
}

func (w *worker) releaseCall(ctx context.Context, t target, token string) error {
	switch {
	case t.isSet():
		return w.api.ReleaseLockSet(ctx, t.setNames(), token)
	case t.isRWLock():
		return w.api.ReleaseRWLock(ctx, t.name, token)
	case t.isSemaphore():
		return w.api.ReleaseSemaphore(ctx, t.name, token)
	}
	return w.api.Release(ctx, t.name, token)
}

func (w *worker) hold(ctx context.Context, t target, opts client.Options) (*client.Held, answer, error) {
	var h *client.Held
	var err error
	switch {
	case w.kind == campaigner:
		h, err = w.api.Campaign(ctx, t.name, opts)
	case t.isSet():
		s, err := w.api.HoldLockSet(ctx, t.setNames(), opts)
		if err != nil {
			return nil, answer{}, err
		}
		return s.Held, answer{lease: s.Lease, locks: s.Locks}, nil
	case t.isRWLock():
		h, err = w.api.HoldRWLock(ctx, t.name, t.mode, opts)
	case t.isSemaphore():
		h, err = w.api.HoldSemaphore(ctx, t.name, t.permits, opts)
	default:
		h, err = w.api.Hold(ctx, t.name, opts)
	}
	if err != nil {
		return nil, answer{}, err
	}
	return h, answer{lease: h.Lease}, nil
}

// critical works until done, lost or out of validity, heartbeating plain
// leases. It returns why it stopped and the last moment it was entitled
// to act.
func (w *worker) critical(ctx context.Context, t target, g *grant) (string, time.Time) {
	done := time.Now().Add(w.workTime())
	beatEvery := keyTTL / 3
	if g.ttl > 0 {
		// At once: the lease's ttl drops below the key ttl while the
		// acquire's valid_until still stands.
		beatEvery = g.ttl / 3
		if lost := w.beat(ctx, t, g); lost {
			return "lost", lostAt(g)
		}
	}
	nextBeat := time.Now().Add(beatEvery)
	pauseAt := time.Time{}
	if w.kind == pauser && w.rng.IntN(4) == 0 {
		pauseAt = time.Now().Add(writeEvery)
	}
	for {
		now := time.Now()
		switch {
		case !now.Before(g.deadline):
			return "validity", g.deadline
		case w.abandon.Load():
			w.abandon.Store(false)
			return "killed", now
		case !pauseAt.IsZero() && !now.Before(pauseAt):
			time.Sleep(time.Until(g.deadline) + keyTTL/2) // stalled past the lease
			return "paused", g.deadline
		case !now.Before(done) || ctx.Err() != nil:
			return "done", now
		}
		w.writeAll(g, false)
		if now.After(nextBeat) {
			if lost := w.beat(ctx, t, g); lost {
				return "lost", lostAt(g)
			}
			nextBeat = time.Now().Add(beatEvery)
		}
		time.Sleep(writeEvery)
	}
}

// lostAt is when a section whose heartbeat was answered lost ended: now,
// or its deadline if that passed while the answer was on its way (it acts
// only between beats, never past the deadline). Counting the wait for the
// answer as acting made a holder look as if it held the lock past its own
// valid_until (an "overlap" with no broken promise).
func lostAt(g *grant) time.Time {
	if now := time.Now(); now.Before(g.deadline) {
		return now
	}
	return g.deadline
}

// beat is one heartbeat; a fresh valid_until moves the deadline. Only a
// definite "gone" ends the section: any other failure leaves the last
// promise standing until its deadline.
func (w *worker) beat(ctx context.Context, t target, g *grant) (lost bool) {
	bctx, cancel := context.WithTimeout(ctx, heartbeatTime)
	defer cancel()
	a, err := w.extend(bctx, t, g.token, g.ttl)
	if errors.Is(err, client.ErrLeaseGone) {
		return true
	}
	if err == nil && a.lease.ValidUntil.After(time.Time{}) {
		g.answered(a)
		w.promisedAll(g, a.lease.ValidUntil, "heartbeat")
		w.promisedLocks(g, a, "heartbeat")
		if d := deadlineOf(a.lease.ValidUntil); d.After(g.deadline) {
			g.deadline = d
		}
	}
	return false
}

// release gives the lease up (DELETE); when ends is set, that ends the
// grant's promises from the moment the DELETE was sent — unless it never
// reached the sidecar (connection refused: a dead sidecar, whose keys stay
// until they expire, so the promises stand).
func (w *worker) release(t target, g *grant, ends bool) {
	ctx, cancel := context.WithTimeout(context.Background(), releaseTime)
	defer cancel()
	sent := wallNow()
	err := w.releaseCall(ctx, t, g.token)
	switch {
	case !ends:
	case errors.Is(err, syscall.ECONNREFUSED):
		w.keptAll(g, "its DELETE was refused (the sidecar was down)")
	default:
		for _, p := range g.parts {
			w.o.releasing(p.promise, sent)
		}
	}
}

// holdOnce holds a lock (or a permit, a read or write, a set) over a
// connection; renewals move the deadline. A campaigner campaigns for it
// instead: its attempts wait longer and are retried on 409 until it leads.
func (w *worker) holdOnce(ctx context.Context, t target) {
	wait, within, owner := waitFor, waitFor+requestGrace, w.nextOwner("h")
	if w.kind == campaigner {
		wait, within, owner = campaignWait, campaignFor, w.nextOwner("leader")
	}
	actx, cancel := context.WithTimeout(ctx, within)
	kind, maxHold := w.kindOf(t), time.Duration(0)
	if w.kind == holder && w.rng.IntN(4) == 0 {
		kind, maxHold = kind+" (max_hold)", maxHoldBase+time.Duration(w.rng.Int64N(int64(maxHoldBase)))
	}
	w.o.attempted(owner, wallNow())
	h, a, err := w.hold(actx, t, client.Options{Wait: wait, Owner: owner, MaxHold: maxHold})
	answered := wallNow()
	cancel()
	if err != nil {
		w.failed(ctx, err)
		return
	}
	g := w.granted(t, owner, kind, a, answered, 0)
	streamEnded := false // the sidecar ended the stream (lost, released, or died)
	defer func() { w.closeHold(h, &g, streamEnded) }()
	if !time.Now().Before(g.deadline) {
		w.o.fail(w.car.idx, "late_grant")
		return
	}
	w.enter(&g, owner)
	done := time.Now().Add(w.workTime())
	if maxHold > 0 {
		done = time.Now().Add(maxHold + maxHoldBase) // runs into the cap
	}
	for {
		now := time.Now()
		if !now.Before(g.deadline) {
			w.leave(&g, g.deadline, "validity")
			return
		}
		if !now.Before(done) || ctx.Err() != nil {
			w.leave(&g, now, "done")
			return
		}
		if streamEnded = w.drainEvents(h, &g); streamEnded {
			w.leave(&g, time.Now(), "lost")
			return
		}
		w.writeAll(&g, false)
		time.Sleep(writeEvery)
	}
}

// drainEvents applies the stream's events and reports whether it ended.
// Every event that carries a valid_until is a promise (renewed; expiring,
// when renewals keep failing; a lost at shutdown, whose valid_until still
// stands); only renewals move the deadline, and never earlier.
func (w *worker) drainEvents(h *client.Held, g *grant) bool {
	for {
		select {
		case e, ok := <-h.Events():
			if !ok {
				return true
			}
			w.recordEvent(g, e)
			switch e.Kind {
			case "released", "lost":
				return true
			case "renewed":
				if d := deadlineOf(e.ValidUntil); d.After(g.deadline) {
					g.deadline = d
				}
			}
		default:
			return false
		}
	}
}

// recordEvent gives the oracle the valid_until an event carries, if any.
func (w *worker) recordEvent(g *grant, e client.Event) {
	if !e.ValidUntil.IsZero() {
		w.promisedAll(g, e.ValidUntil, e.Kind)
	}
}

// closeHold closes a held lock's connection, which releases it, unless
// the sidecar already ended the stream (lost, or the sidecar died): then
// the client gave nothing up and the promises stand until valid_until.
// Events the worker had not read yet still count as published.
func (w *worker) closeHold(h *client.Held, g *grant, ended bool) {
	select {
	case <-h.Done():
		ended = true
	default:
	}
	if ended {
		w.keptAll(g, "the sidecar ended the held stream ("+endOf(h)+")")
	} else {
		at := wallNow()
		for _, p := range g.parts {
			w.o.releasing(p.promise, at)
		}
	}
	h.Release()
	for e := range h.Events() { // closed once the stream ended
		w.recordEvent(g, e)
	}
}

// endOf names a held stream's final event, if it had one yet.
func endOf(h *client.Held) string {
	if e := h.End(); e.Kind != "" {
		return e.Kind + " " + e.Reason
	}
	return "no final event: the connection broke"
}

// failed records a failed acquisition and backs off.
func (w *worker) failed(ctx context.Context, err error) {
	if ctx.Err() != nil {
		return // the run ended, not the lock service
	}
	cause := causeOf(err)
	w.o.fail(w.car.idx, cause)
	pause := 20*time.Millisecond + time.Duration(w.rng.Int64N(int64(80*time.Millisecond)))
	if cause == "sidecar_unreachable" || cause == "client_timeout" {
		pause = 100 * time.Millisecond
	}
	select {
	case <-ctx.Done():
	case <-time.After(pause):
	}
}

// causeOf names why an acquisition failed.
func causeOf(err error) string {
	var apiErr *client.Error
	var netErr *net.OpError
	switch {
	case errors.As(err, &apiErr):
		return apiErr.Code
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return "client_timeout"
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.As(err, &netErr):
		return "sidecar_unreachable" // killed, or closed the connection as it died
	default:
		return "other: " + shorten(err.Error())
	}
}

func shorten(s string) string {
	if len(s) > 60 {
		return s[:60]
	}
	return s
}

// prober tries a private name once every 100ms on every sidecar: the
// share it gets is the availability.
func prober(ctx context.Context, cars []*sidecarProc, o *oracle, wg *sync.WaitGroup) {
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2}}
	for _, car := range cars {
		api := client.New(car.api, hc)
		wg.Go(func() {
			tick := time.NewTicker(100 * time.Millisecond)
			defer tick.Stop()
			for n := 0; ; n++ {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				probeOnce(ctx, api, car.idx, fmt.Sprintf("probe/%d/%d", car.idx, n), o)
			}
		})
	}
}

func probeOnce(ctx context.Context, api *client.Client, sidecar int, name string, o *oracle) {
	pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	l, err := api.Acquire(pctx, name, client.Options{TTL: time.Second})
	p := probe{sidecar: sidecar, at: start, took: time.Since(start), ok: err == nil}
	if err != nil {
		p.cause = causeOf(err)
		if ctx.Err() != nil {
			return // the run ended, not the sidecar
		}
	} else {
		_ = api.Release(pctx, name, l.Token)
	}
	o.recordProbe(p)
}
