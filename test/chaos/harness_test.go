//go:build linux

package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sidelock/sidelock/pkg/client"
)

// mode is SIDELOCK_CHAOS: "full" (make chaos, a few minutes), "ci" (the
// subset CI runs, 60–120s) or empty: every chaos test skips, so that
// go test ./... stays fast.
func mode() string { return os.Getenv("SIDELOCK_CHAOS") }

func requireMode(t *testing.T) string {
	t.Helper()
	m := mode()
	switch m {
	case "full", "ci":
		return m
	case "":
		t.Skip("chaos suite: set SIDELOCK_CHAOS=ci or SIDELOCK_CHAOS=full (make chaos)")
	default:
		t.Fatalf("SIDELOCK_CHAOS=%q: want ci or full", m)
	}
	return ""
}

// The hot lock names every worker contends for.
var hotNames = []string{"hot/a", "hot/b", "hot/c"}

// hotLocks are the hot names as targets.
func hotLocks() []target {
	out := make([]target, len(hotNames))
	for i, n := range hotNames {
		out[i] = lock(n)
	}
	return out
}

// Worker mix per sidecar: plain leases with heartbeats, held connections,
// try-once callers (and waiters: every heartbeat and holder worker waits).
var normalMix = []clientKind{heartbeat, heartbeat, heartbeat, holder, holder, holder, trier, trier}

// phases of a scenario run.
type phases struct {
	warm, after time.Duration
}

func phasesFor(m string) phases {
	if m == "full" {
		return phases{warm: 1500 * time.Millisecond, after: 3 * time.Second}
	}
	return phases{warm: time.Second, after: 2 * time.Second}
}

// run is one scenario in progress over its own cluster.
type run struct {
	t        *testing.T
	sc       scenario
	c        *cluster
	o        *oracle
	rng      *rand.Rand
	rngM     sync.Mutex
	ctx      context.Context // the workers' and prober's
	wg       sync.WaitGroup
	workersM sync.Mutex
	workers  []*worker
	nextID   int

	faultStart, faultEnd time.Time
	restarted            map[int]bool // sidecars restarted during the run
	holderSeq            atomic.Int64
	notesM               sync.Mutex
	notes                []string
}

// note records an observation for the results.
func (r *run) note(format string, args ...any) {
	r.notesM.Lock()
	defer r.notesM.Unlock()
	r.notes = append(r.notes, fmt.Sprintf(format, args...))
}

// beginFault and endFault bracket the fault window (the first and last
// call win, so composite faults can call them freely).
func (r *run) beginFault() {
	if r.faultStart.IsZero() {
		r.faultStart = time.Now()
	}
}

func (r *run) endFault() { r.faultEnd = time.Now() }

// spawn starts workers of the given kinds on every sidecar, on the hot
// lock names, under ctx.
func (r *run) spawn(ctx context.Context, kinds []clientKind) []*worker {
	return r.spawnOn(ctx, kinds, hotLocks())
}

// spawnOn starts workers of the given kinds on every sidecar, taking
// turns on targets, under ctx.
func (r *run) spawnOn(ctx context.Context, kinds []clientKind, targets []target) []*worker {
	var out []*worker
	for _, car := range r.c.sidecars {
		for _, k := range kinds {
			r.workersM.Lock()
			w := newWorker(r.nextID, k, car, targets, r.o)
			r.nextID++
			r.workers = append(r.workers, w)
			r.workersM.Unlock()
			out = append(out, w)
			r.wg.Go(func() { w.run(ctx) })
		}
	}
	return out
}

// workersOf returns the running workers of one kind.
func (r *run) workersOf(kind clientKind) []*worker {
	r.workersM.Lock()
	defer r.workersM.Unlock()
	var out []*worker
	for _, w := range r.workers {
		if w.kind == kind {
			out = append(out, w)
		}
	}
	return out
}

// sleep waits for d or the end of the run.
func (r *run) sleep(d time.Duration) {
	select {
	case <-r.ctx.Done():
	case <-time.After(d):
	}
}

// killSidecar is kill -9 of a sidecar: every lock it holds is held for a
// dead caller until its keys lapse.
func (r *run) killSidecar(i int) {
	car := r.c.sidecars[i]
	open := r.o.activeOn(i)
	car.kill()
	at := time.Now()
	for _, s := range open {
		r.o.sidecarDied(s.target, s.owner, at, "sidecar")
	}
	r.note("kill -9 of sidecar %d holding %d locks", i, len(open))
}

// restartSidecar starts a killed sidecar again. It may run on a goroutine
// other than the test's (the mixed scenario's), so it reports a failure
// with t.Error rather than stop the test; healAll tries again.
func (r *run) restartSidecar(i int) {
	if err := r.c.sidecars[i].tryStart(); err != nil {
		r.t.Error(err)
	}
	r.restarted[i] = true
}

// result is one row of the results table.
type result struct {
	name, assumptions string
	v                 verdict
	before, after     []usage
	restarted         map[int]bool
	problems          []string
	notes             []string
	took              time.Duration
}

// runScenario runs sc on a fresh cluster and judges it.
func runScenario(t *testing.T, sc scenario, m string) result {
	began := time.Now()
	p := phasesFor(m)
	c := startCluster(t, sc.durable)
	o := newOracle()
	o.masters = c.directNodes()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	r := &run{t: t, sc: sc, c: c, o: o, ctx: ctx, rng: rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7)), restarted: map[int]bool{}}
	prime(c)
	before := usages(c)
	var probes sync.WaitGroup
	prober(ctx, c.sidecars, o, &probes)
	kinds := normalMix
	if sc.mix != nil {
		kinds = sc.mix
	}
	r.spawn(ctx, kinds)
	r.spawnSemaphoreWorkers(ctx)
	r.spawnRWLockWorkers(ctx)
	r.spawnLockSetWorkers(ctx)
	r.startElection(ctx)
	start := time.Now()
	r.sleep(p.warm)
	sc.fault(r, m)
	if r.faultStart.IsZero() {
		r.faultStart, r.faultEnd = time.Now(), time.Now()
	}
	if r.faultEnd.Before(r.faultStart) {
		r.endFault()
	}
	r.sleep(p.after)
	end := time.Now()
	stop()
	waitBounded(t, &r.wg, 10*time.Second, "workers")
	waitBounded(t, &probes, 5*time.Second, "prober")
	waitBounded(t, &o.watches, 4*keyTTL, "the watches of dead holders' keys")
	c.healAll()
	after := settle(c)
	res := result{name: sc.name, assumptions: sc.assumptions(), v: o.judge(start, r.faultStart, r.faultEnd, end, len(c.sidecars)),
		before: before, after: after, restarted: r.restarted, took: time.Since(began)}
	res.problems = append(check(sc, res), sc.checkExtra(r, res)...)
	res.notes = r.notes
	for _, s := range c.sidecars {
		s.kill()
	}
	return res
}

// waitBounded waits for wg, failing the test after d; it then waits up
// to stragglerWait more, so goroutines that are merely slow still end
// before the test does, while a stuck one fails the test without hanging it.
func waitBounded(t *testing.T, wg *sync.WaitGroup, d time.Duration, what string) {
	if !returnsWithin(wg.Wait, d) {
		t.Errorf("%s still running %v after the run ended", what, d)
		if !returnsWithin(wg.Wait, stragglerWait) {
			t.Errorf("%s still running %v later: left behind", what, stragglerWait)
		}
	}
}

// stragglerWait is how much longer waitBounded waits for late goroutines.
const stragglerWait = 30 * time.Second

// returnsWithin runs wait (a WaitGroup's Wait) and reports whether it returned
// within d. When it did not, the goroutine running it ends only once the
// group does.
func returnsWithin(wait func(), d time.Duration) bool {
	done := make(chan struct{})
	go func() { wait(); close(done) }()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-done:
		return true
	case <-timer.C:
		return false
	}
}

// prime makes each sidecar open what it keeps open for good once used —
// connection pools, the Pub/Sub connection a waiter needs — so that the
// idle figures before and after the storm compare like with like.
func prime(c *cluster) {
	hc := &http.Client{Timeout: 5 * time.Second}
	defer hc.CloseIdleConnections()
	for _, car := range c.sidecars {
		api := client.New(car.api, hc)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		held, err := api.Acquire(ctx, "prime", client.Options{})
		if err == nil {
			waited := make(chan struct{})
			go func() { // a waiter, so the sidecar subscribes for releases
				defer close(waited)
				if l, err := api.Acquire(ctx, "prime", client.Options{Wait: 2 * time.Second}); err == nil {
					_ = api.Release(ctx, "prime", l.Token)
				}
			}()
			time.Sleep(100 * time.Millisecond)
			_ = api.Release(ctx, "prime", held.Token)
			<-waited
		}
		cancel()
	}
}

func usages(c *cluster) []usage {
	out := make([]usage, len(c.sidecars))
	for i, s := range c.sidecars {
		out[i] = s.idle(time.Second)
	}
	return out
}

// settle waits for every sidecar to hold nothing (at most a key ttl and
// a lease ttl after the last client left), then reads its usage.
func settle(c *cluster) []usage {
	out := make([]usage, len(c.sidecars))
	for i, s := range c.sidecars {
		out[i] = s.idle(2*keyTTL + 3*time.Second)
	}
	time.Sleep(500 * time.Millisecond) // connections of the last clients close
	for i, s := range c.sidecars {
		if u := s.usage(); u.ok {
			out[i] = u
		}
	}
	return out
}

// Bounds every scenario is checked against.
const (
	deadHolderSlack = 250 * time.Millisecond // beyond one key ttl: the watch polls every 10ms
	// noQuorumRetry is SIDELOCK_NO_QUORUM_RETRY: how long a try-once
	// acquire retries rounds without quorum before the health checks see
	// the outage (after that it fails at once).
	noQuorumRetry  = 250 * time.Millisecond
	recoveryBound  = 5 * time.Second
	goroutineSlack = 10 // e.g. a pool connection dialled during the storm
	rssSlackMB     = 32
)

// check applies the expectations every scenario shares.
func check(sc scenario, res result) []string {
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	v := res.v
	if v.fenceViolations > 0 && !sc.dataLoss {
		bad("%d fence-order violations: %s", v.fenceViolations, v.worstFenceReport)
	}
	if v.liveRejected > 0 && sc.within() {
		bad("%d writes of holders within their validity rejected by the fence", v.liveRejected)
	}
	if v.overlaps > 0 && sc.within() {
		bad("%d overlapping critical sections: %s", v.overlaps, v.worstOverlap)
	}
	if v.brokenPromises > 0 && !sc.dataLoss {
		bad("%d grants answered while an earlier grant's valid_until still stood (broken promises, %d valid_untils of %d grants checked); the worst by %v: %s",
			v.brokenPromises, v.promisesChecked, v.promiseGrants, v.worstBrokenBy.Round(time.Millisecond), v.worstPromise)
	}
	if v.grants == 0 {
		bad("no grants at all")
	}
	problems = append(problems, checkSemaphores(sc, v.semaphores)...)
	problems = append(problems, checkElection(sc, v.election)...)
	problems = append(problems, checkRWLocks(sc, v.rwlocks)...)
	problems = append(problems, checkLockSets(sc, v.locksets)...)
	if !v.recovered || v.recovery > recoveryBound {
		bad("not every sidecar granted again within %v of the fault's end (recovered %v after %v)", recoveryBound, v.recovered, v.recovery)
	}
	if over, which := deadOverdue(v.deathsSeen, sc.releasesReach); v.deaths > 0 && (over > deadHolderSlack || v.unreleased > 0) {
		bad("a dead holder's key stayed on a majority of masters %v beyond its allowance (%s); %d never left", over.Round(time.Millisecond), which, v.unreleased)
	}
	for i := range res.after {
		b, a := res.before[i], res.after[i]
		if !a.ok {
			bad("sidecar %d: no metrics after the storm", i)
			continue
		}
		if a.held != 0 || a.waiters != 0 {
			bad("sidecar %d still holds %v locks and %v waiters after every client left", i, a.held, a.waiters)
		}
		if !res.restarted[i] && a.goroutines > b.goroutines+goroutineSlack {
			bad("sidecar %d: %v goroutines after the storm, %v before", i, a.goroutines, b.goroutines)
		}
		if !res.restarted[i] && a.rssMB > b.rssMB+rssSlackMB {
			bad("sidecar %d: RSS %.0f MB after the storm, %.0f MB before", i, a.rssMB, b.rssMB)
		}
	}
	return problems
}
