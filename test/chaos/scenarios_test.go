//go:build linux

package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sidelock/sidelock/internal/ctxsleep"
)

// scenario is one fault (or a mix of them) and what must hold through it.
type scenario struct {
	name string
	// exceeds names the Redlock (or sidelock) assumption the fault
	// breaks; empty when the fault stays within them, and then no two
	// critical sections may overlap.
	exceeds string
	// dataLoss: a master loses acknowledged writes, so fences are not
	// guaranteed either (reported, not required).
	dataLoss bool
	durable  bool // masters with appendonly + appendfsync always
	// releasesReach: every master stays reachable, so a dead caller's
	// keys must go at its lease's lapse, not one key ttl later.
	releasesReach bool
	ci            bool // part of the CI subset
	mix           []clientKind
	fault         func(r *run, mode string)
	// extra expectations of this scenario
	extra func(r *run, res result) []string
}

func (sc scenario) within() bool { return sc.exceeds == "" }

func (sc scenario) assumptions() string {
	if sc.within() {
		return "within"
	}
	return "exceeded: " + sc.exceeds
}

func (sc scenario) checkExtra(r *run, res result) []string {
	if sc.extra == nil {
		return nil
	}
	return sc.extra(r, res)
}

// faultTime is how long a fault lasts: longer than the key ttl in the
// full suite, so locks held across it must survive renewals or be lost.
func faultTime(mode string) time.Duration {
	if mode == "full" {
		return 3 * time.Second
	}
	return 2500 * time.Millisecond
}

// scenarios is the suite, in the order of the results table.
func scenarios() []scenario {
	return []scenario{
		{name: "baseline (no fault)", durable: true, ci: true, fault: func(*run, string) {}},
		{name: "kill -9 2/5 masters, restart (persistent)", durable: true, ci: true, fault: killMasters(2, false), extra: grantsContinue},
		{name: "kill -9 2/5 masters, restart empty (no persistence)", ci: true, fault: killMasters(2, false), extra: grantsContinue},
		{name: "SIGSTOP 2/5 masters beyond the node timeout", durable: true, ci: true, fault: stopMasters(2), extra: grantsContinue},
		{name: "kill -9 3/5 masters (majority), restart (persistent)", durable: true, ci: true, fault: majorityDown(false), extra: majorityExpectations},
		{name: "kill -9 3/5 masters (majority), restart empty (no persistence)", fault: majorityDown(false), extra: majorityExpectations},
		{name: "restart 2/5 persistent masters with their data wiped", durable: true, dataLoss: true,
			exceeds: "a master that reports appendfsync always lost its data (disk loss): no restart probation applies",
			fault:   killMasters(2, true), extra: grantsContinue},
		{name: "compound: 2 masters down, then 2 others wiped (the holders lose their majority)", durable: true, dataLoss: true,
			exceeds: "two durable masters lose their data while two others are down, so the keys of grants made meanwhile survive on one master only",
			fault:   wipeTheSurvivors},
		{name: "latency: RTT +20ms sidecar0→all, +240ms sidecar1→2 masters", durable: true, fault: latency, extra: grantsKeepFlowing},
		{name: "lossy links: 20% of reads 200ms late, sidecars 0,1 → 3 masters", durable: true, fault: lossy, extra: grantsKeepFlowing},
		{name: "partition: sidecar0 / 2 masters (blackhole), sidecar1 / 2 (reset)", durable: true, ci: true, fault: partitionMinority, extra: grantsContinue},
		{name: "partition: sidecar0 cut from 3/5 masters", durable: true, ci: true, fault: partitionMajority, extra: isolatedSidecarExpectations},
		{name: "kill -9 of a sidecar holding locks, restart", durable: true, ci: true, fault: killSidecar},
		{name: "SIGTERM of a sidecar holding locks (graceful shutdown), restart", durable: true, ci: true, fault: terminateSidecar},
		{name: "SIGSTOP of a sidecar holding locks past the key ttl", durable: true, fault: stopSidecar},
		{name: "clients killed mid-hold (kill -9 holders, dead heartbeaters)", durable: true, ci: true, releasesReach: true, fault: killClients},
		{name: "burst: 10x callers", durable: true, ci: true, fault: burst},
		{name: "paused clients act past valid_until", durable: true, mix: []clientKind{heartbeat, heartbeat, holder, holder, pauser, pauser, pauser, trier},
			exceeds: "a client paused past valid_until (GC, stopped VM) acts on an expired lock: only the fence protects the resource",
			fault:   func(r *run, mode string) { r.beginFault(); r.sleep(2 * faultTime(mode)); r.endFault() }, extra: pausedExpectations},
		abuseScenario(), // test/chaos/abuse_test.go
		{name: "mixed: random faults within the assumptions", durable: true, ci: true, fault: mixed},
	}
}

// killMasters kills n random masters (kill -9), keeps them down for the
// fault time and restarts them, wiping their data first if asked.
func killMasters(n int, wipe bool) func(*run, string) {
	return func(r *run, mode string) {
		down := r.pickMasters(n)
		r.beginFault()
		for _, i := range down {
			r.c.masters[i].Kill()
			if wipe {
				if err := r.c.masters[i].wipe(); err != nil {
					r.t.Error(err)
				}
			}
		}
		r.note("killed masters %v", down)
		r.sleep(faultTime(mode))
		for _, i := range down {
			r.c.masters[i].Restart(r.t)
		}
		r.endFault()
		time.Sleep(2 * healthInterval) // a health round has judged them
		r.noteEligibility("after the restart")
	}
}

// noteEligibility notes which masters sidecar 0 keeps out of its quorums
// and why (the restart probation, for masters that may have lost keys).
func (r *run) noteEligibility(when string) {
	res, err := adminClient.Get(r.c.sidecars[0].admin + "/readyz")
	if err != nil {
		return
	}
	defer res.Body.Close()
	var report struct {
		Masters []struct {
			Addr               string `json:"addr"`
			Eligible           bool   `json:"eligible"`
			Problem            string `json:"problem"`
			ProbationRemaining string `json:"probation_remaining"`
		} `json:"masters"`
	}
	if json.NewDecoder(res.Body).Decode(&report) != nil {
		return
	}
	var out []string
	for i, m := range report.Masters {
		if !m.Eligible {
			out = append(out, fmt.Sprintf("master %d out (%s, %s left)", i, m.Problem, m.ProbationRemaining))
		}
	}
	if len(out) == 0 {
		out = append(out, "every master counts")
	}
	r.note("%s, sidecar0's /readyz: %s", when, strings.Join(out, "; "))
}

// stopMasters freezes n masters with SIGSTOP, far beyond the 50ms node
// timeout, then resumes them.
func stopMasters(n int) func(*run, string) {
	return func(r *run, mode string) {
		down := r.pickMasters(n)
		r.beginFault()
		for _, i := range down {
			r.c.masters[i].Stop()
		}
		r.sleep(faultTime(mode))
		for _, i := range down {
			r.c.masters[i].Cont()
		}
		r.endFault()
		r.note("SIGSTOP masters %v for %v", down, faultTime(mode))
	}
}

// majorityDown kills 3 of 5 masters: /readyz must turn 503 and acquires
// fail fast; after the restart, service must come back within seconds.
func majorityDown(wipe bool) func(*run, string) {
	return func(r *run, mode string) {
		down := r.pickMasters(3)
		r.beginFault()
		for _, i := range down {
			r.c.masters[i].Kill()
			if wipe {
				_ = r.c.masters[i].wipe()
			}
		}
		killed := time.Now()
		r.watchReadiness(killed, false, "503")
		r.sleep(faultTime(mode))
		for _, i := range down {
			r.c.masters[i].Restart(r.t)
		}
		r.endFault()
		r.watchReadiness(time.Now(), true, "200 again")
	}
}

// watchReadiness waits (bounded) until every sidecar's /readyz says want,
// and notes how long it took from since.
func (r *run) watchReadiness(since time.Time, want bool, what string) {
	deadline := since.Add(10 * time.Second)
	for _, car := range r.c.sidecars {
		for {
			code := car.readyz()
			if (code == 200) == want && code != 0 {
				break
			}
			if time.Now().After(deadline) {
				r.t.Errorf("sidecar %d: /readyz not %s within 10s", car.idx, what)
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	r.note("/readyz %s on every sidecar %v after the masters went %s", what, time.Since(since).Round(time.Millisecond), map[bool]string{false: "down", true: "back"}[want])
}

// pickMasters picks n masters at random (safe from concurrent faults).
func (r *run) pickMasters(n int) []int {
	r.rngM.Lock()
	idx := r.rng.Perm(len(r.c.masters))[:n]
	r.rngM.Unlock()
	slices.Sort(idx)
	return idx
}

// latency slows sidecar 0's paths by 10ms each way (a round trip 20ms
// longer, within the 50ms node timeout) and two of sidecar 1's by 120ms
// each way (beyond it: for sidecar 1 those masters are as good as down).
func latency(r *run, mode string) {
	r.beginFault()
	for _, p := range r.c.sidecars[0].proxies {
		p.set(netFault{latency: 10 * time.Millisecond})
	}
	slow := r.pickMasters(2)
	for _, i := range slow {
		r.c.sidecars[1].proxies[i].set(netFault{latency: 120 * time.Millisecond})
	}
	r.sleep(faultTime(mode))
	r.healNetwork()
	r.endFault()
}

// lossy delays a fifth of the reads on three paths of sidecars 0 and 1 by
// a retransmission timeout.
func lossy(r *run, mode string) {
	r.beginFault()
	for _, car := range r.c.sidecars[:2] {
		for _, i := range r.pickMasters(3) {
			car.proxies[i].set(netFault{lossRate: 0.2})
		}
	}
	r.sleep(faultTime(mode))
	r.healNetwork()
	r.endFault()
}

// partitionMinority cuts sidecar 0 from two masters silently and sidecar 1
// from two others with resets; both keep a majority.
func partitionMinority(r *run, mode string) {
	r.beginFault()
	perm := r.rng.Perm(numMasters)
	for _, i := range perm[:2] {
		r.c.sidecars[0].proxies[i].set(netFault{blackhole: true})
	}
	for _, i := range perm[2:4] {
		r.c.sidecars[1].proxies[i].set(netFault{reset: true})
	}
	r.sleep(faultTime(mode))
	r.healNetwork()
	r.endFault()
}

// partitionMajority cuts sidecar 0 from three masters (silently) for
// longer than the key ttl: its locks are lost at valid_until, its clients
// stop, the others take the locks once the keys lapse.
func partitionMajority(r *run, mode string) {
	r.beginFault()
	for _, i := range r.pickMasters(3) {
		r.c.sidecars[0].proxies[i].set(netFault{blackhole: true})
	}
	cut := time.Now()
	for r.c.sidecars[0].readyz() != 503 && time.Since(cut) < 5*time.Second {
		time.Sleep(10 * time.Millisecond)
	}
	r.note("isolated sidecar0 /readyz 503 after %v", time.Since(cut).Round(time.Millisecond))
	r.sleep(faultTime(mode))
	r.healNetwork()
	r.endFault()
}

func (r *run) healNetwork() {
	for _, car := range r.c.sidecars {
		for _, p := range car.proxies {
			p.heal()
		}
	}
}

// killSidecar kills sidecar 0 with kill -9 while its clients hold locks,
// and starts it again after more than a key ttl.
func killSidecar(r *run, mode string) {
	r.waitForLocksOn(0)
	r.beginFault()
	r.killSidecar(0)
	r.sleep(faultTime(mode))
	r.restartSidecar(0)
	r.endFault()
}

// terminateSidecar sends SIGTERM to sidecar 0 while its clients hold
// locks, as a pod's deletion does, and starts it again after the fault
// time. Whatever the shutdown does with the locks, no other client may be
// granted one before a valid_until the sidecar published (the oracle's
// promise check).
func terminateSidecar(r *run, mode string) {
	r.waitForLocksOn(0)
	open := len(r.o.activeOn(0))
	r.beginFault()
	began := time.Now()
	exited := r.c.sidecars[0].terminate(shutdownTimeout + 5*time.Second)
	r.note("SIGTERM of sidecar0 holding %d locks: exited on its own %v, after %v", open, exited, time.Since(began).Round(time.Millisecond))
	if !exited {
		r.t.Errorf("sidecar0 still running %v after SIGTERM (shutdown timeout %v): killed", shutdownTimeout+5*time.Second, shutdownTimeout)
	}
	r.sleep(faultTime(mode))
	r.restartSidecar(0)
	r.endFault()
}

// stopSidecar freezes sidecar 0 (SIGSTOP) for twice the key ttl while its
// clients hold locks: their grants run out; clients that respect
// valid_until stop acting, and the other sidecars take the locks.
func stopSidecar(r *run, mode string) {
	r.waitForLocksOn(0)
	open := r.o.activeOn(0)
	r.beginFault()
	r.c.sidecars[0].stop()
	at := time.Now()
	for _, s := range open {
		r.o.sidecarDied(s.target, s.owner, at, "sidecar paused")
	}
	r.note("SIGSTOP of sidecar0 holding %d locks, for %v", len(open), 2*keyTTL)
	r.sleep(2 * keyTTL)
	r.c.sidecars[0].cont()
	r.o.froze(0, at, time.Now())
	r.endFault()
}

// waitForLocksOn waits (bounded) until clients of sidecar i hold a lock.
func (r *run) waitForLocksOn(i int) {
	deadline := time.Now().Add(3 * time.Second)
	for len(r.o.activeOn(i)) == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
}

// killClients kills holder processes with kill -9 mid-hold, and makes
// heartbeat workers die mid-section (no heartbeat, no release).
func killClients(r *run, mode string) {
	r.beginFault()
	end := time.Now().Add(faultTime(mode))
	heartbeaters := r.workersOf(heartbeat)
	var holders sync.WaitGroup
	for time.Now().Before(end) && r.ctx.Err() == nil {
		heartbeaters[r.rng.IntN(len(heartbeaters))].abandon.Store(true)
		car := r.c.sidecars[r.rng.IntN(len(r.c.sidecars))]
		name := hotNames[r.rng.IntN(len(hotNames))]
		holdFor := time.Duration(50+r.rng.IntN(250)) * time.Millisecond
		holders.Go(func() { r.holdAndKill(car, name, holdFor) })
		r.sleep(400 * time.Millisecond)
	}
	holders.Wait()
	r.endFault()
}

// holdAndKill runs a holder process, and kills it holdFor after it holds.
func (r *run) holdAndKill(car *sidecarProc, name string, holdFor time.Duration) {
	owner := fmt.Sprintf("p%d", r.holderSeq.Add(1))
	h, ok := startHolder(r.ctx, car, name, owner, r.o)
	if !ok {
		return
	}
	s := r.o.enter(lock(name), owner, -1, car.idx, h.grant().fence)
	time.Sleep(holdFor)
	at := h.kill()
	r.o.leave(s, at, "killed")
	r.o.died(lock(name), owner, at, "holder process", time.Time{})
}

// burst adds nine times the normal callers for the fault time.
func burst(r *run, mode string) {
	ctx, cancel := context.WithCancel(r.ctx)
	defer cancel()
	r.beginFault()
	var extra []clientKind
	for range 9 {
		extra = append(extra, normalMix...)
	}
	ws := r.spawn(ctx, extra)
	r.note("burst of %d extra callers (10x)", len(ws))
	r.sleep(faultTime(mode))
	cancel()
	r.endFault()
}

// mixed injects random faults, at most two masters down at once and one
// sidecar or network fault at a time, for a while.
func mixed(r *run, mode string) {
	length := 20 * time.Second
	if mode == "full" {
		length = 60 * time.Second
	}
	ctx, cancel := context.WithTimeout(r.ctx, length)
	defer cancel()
	r.beginFault()
	var wg sync.WaitGroup
	wg.Go(func() { r.masterFaults(ctx) })
	wg.Go(func() { r.otherFaults(ctx) })
	wg.Wait()
	r.c.healAll()
	r.endFault()
}

// masterFaults kills, freezes or restarts one or two masters at a time.
func (r *run) masterFaults(ctx context.Context) {
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	for ctx.Err() == nil {
		down := r.pickMasters(1 + rng.IntN(2))
		hold := time.Duration(500+rng.IntN(2000)) * time.Millisecond
		if rng.IntN(2) == 0 {
			for _, i := range down {
				r.c.masters[i].Kill()
			}
			ctxsleep.For(ctx, hold)
			for _, i := range down {
				// Not Restart: this is not the test's goroutine, which
				// alone may stop the test (t.Fatal); healAll retries.
				if err := r.c.masters[i].TryRestart(); err != nil {
					r.t.Errorf("mixed: master %d: %v", i, err)
				}
			}
			r.note("mixed: kill -9 masters %v for %v", down, hold)
		} else {
			for _, i := range down {
				r.c.masters[i].Stop()
			}
			ctxsleep.For(ctx, hold)
			for _, i := range down {
				r.c.masters[i].Cont()
			}
			r.note("mixed: SIGSTOP masters %v for %v", down, hold)
		}
		ctxsleep.For(ctx, time.Duration(200+rng.IntN(800))*time.Millisecond)
	}
}

// otherFaults picks network, sidecar and client faults one at a time.
func (r *run) otherFaults(ctx context.Context) {
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 2))
	faults := []func(context.Context, *rand.Rand){
		r.mixedNetFault, r.mixedNetFault, r.mixedSidecarKill, r.mixedSidecarStop, r.mixedClientKills, r.mixedBurst,
	}
	for ctx.Err() == nil {
		faults[rng.IntN(len(faults))](ctx, rng)
		ctxsleep.For(ctx, time.Duration(200+rng.IntN(800))*time.Millisecond)
	}
}

func (r *run) mixedNetFault(ctx context.Context, rng *rand.Rand) {
	car := r.c.sidecars[rng.IntN(len(r.c.sidecars))]
	kinds := []netFault{{latency: 20 * time.Millisecond}, {latency: 150 * time.Millisecond}, {lossRate: 0.2}, {blackhole: true}, {reset: true}}
	f := kinds[rng.IntN(len(kinds))]
	paths := r.pickMasters(1 + rng.IntN(3)) // sometimes a majority: that sidecar loses its quorum
	for _, i := range paths {
		car.proxies[i].set(f)
	}
	hold := time.Duration(500+rng.IntN(2500)) * time.Millisecond
	ctxsleep.For(ctx, hold)
	for _, i := range paths {
		car.proxies[i].heal()
	}
	r.note("mixed: %v on sidecar%d→masters %v for %v", f, car.idx, paths, hold)
}

func (r *run) mixedSidecarKill(ctx context.Context, rng *rand.Rand) {
	i := rng.IntN(len(r.c.sidecars))
	r.killSidecar(i)
	ctxsleep.For(ctx, time.Duration(500+rng.IntN(2500))*time.Millisecond)
	r.restartSidecar(i)
}

func (r *run) mixedSidecarStop(ctx context.Context, rng *rand.Rand) {
	i := rng.IntN(len(r.c.sidecars))
	hold := time.Duration(500+rng.IntN(3500)) * time.Millisecond
	r.c.sidecars[i].stop()
	at := time.Now()
	ctxsleep.For(ctx, hold)
	r.c.sidecars[i].cont()
	r.o.froze(i, at, time.Now())
	r.note("mixed: SIGSTOP sidecar%d for %v", i, hold)
}

func (r *run) mixedClientKills(ctx context.Context, rng *rand.Rand) {
	var holders sync.WaitGroup
	for range 3 {
		car := r.c.sidecars[rng.IntN(len(r.c.sidecars))]
		name := hotNames[rng.IntN(len(hotNames))]
		holders.Go(func() { r.holdAndKill(car, name, time.Duration(50+rng.IntN(250))*time.Millisecond) })
	}
	if hb := r.workersOf(heartbeat); len(hb) > 0 {
		hb[rng.IntN(len(hb))].abandon.Store(true)
	}
	holders.Wait()
	r.note("mixed: 3 holder processes killed mid-hold, a heartbeat client died")
}

func (r *run) mixedBurst(ctx context.Context, rng *rand.Rand) {
	bctx, cancel := context.WithCancel(ctx)
	var extra []clientKind
	for range 4 {
		extra = append(extra, normalMix...)
	}
	ws := r.spawn(bctx, extra)
	hold := time.Duration(1000+rng.IntN(2000)) * time.Millisecond
	ctxsleep.For(ctx, hold)
	cancel()
	r.note("mixed: burst of %d extra callers for %v", len(ws), hold)
}

// wipeTheSurvivors breaks Redlock's assumption on purpose: two masters
// go down; grants made meanwhile hold keys on the other three only; then
// two of those three restart with their data wiped (a lost disk behind
// "appendfsync always"), while the first two come back. Four masters now
// lack the live holders' keys, and another sidecar can win a majority.
func wipeTheSurvivors(r *run, mode string) {
	perm := r.rng.Perm(numMasters)
	down, wiped := perm[:2], perm[2:4]
	r.beginFault()
	for _, i := range down {
		r.c.masters[i].Kill()
	}
	r.sleep(keyTTL) // every live grant is now on the other three only
	for _, i := range wiped {
		r.c.masters[i].Kill()
		if err := r.c.masters[i].wipe(); err != nil {
			r.t.Error(err)
		}
	}
	for _, i := range append(slices.Clone(wiped), down...) {
		r.c.masters[i].Restart(r.t)
	}
	r.note("masters %v down for %v, then %v wiped and all four restarted", down, keyTTL, wiped)
	r.sleep(faultTime(mode))
	r.endFault()
}

// grantsKeepFlowing: degraded paths slow some sidecars, but locks are
// still granted during the fault.
func grantsKeepFlowing(r *run, res result) []string {
	if res.v.grantsInFault == 0 {
		return []string{"no grant during the fault"}
	}
	return nil
}

// grantsContinue: with a minority of masters (or paths) failing, locks
// keep being granted during the fault.
func grantsContinue(r *run, res result) []string {
	if res.v.grantsInFault == 0 {
		return []string{"no grant during the fault: a minority down must not stop the service"}
	}
	if res.v.faultAvail < 0.8 {
		return []string{fmt.Sprintf("availability %.0f%% during the fault, want at least 80%%", 100*res.v.faultAvail)}
	}
	return nil
}

// majorityExpectations: acquires refused quickly (503 no_quorum), and
// readiness noted by watchReadiness. Quickly: within the try-once retry
// budget and the round that overran it (at once once /readyz is 503).
func majorityExpectations(r *run, res result) []string {
	var out []string
	if res.v.failures["no_quorum"] == 0 {
		out = append(out, "no 503 no_quorum while a majority of masters was down")
	}
	if limit := noQuorumRetry + 3*nodeTimeout; res.v.failedProbeP99 > limit {
		out = append(out, fmt.Sprintf("refused acquires answered in p99 %v, want fast (≤%v: the retry budget and a round)", res.v.failedProbeP99, limit))
	}
	r.note("refused acquires answered in p99 %v", res.v.failedProbeP99.Round(time.Millisecond))
	return out
}

// isolatedSidecarExpectations: the other sidecars keep granting.
func isolatedSidecarExpectations(r *run, res result) []string {
	if res.v.grantsInFault == 0 {
		return []string{"no grant during the partition: the other sidecars keep a majority"}
	}
	return nil
}

// pausedExpectations: stale writes are caught by the fence once a newer
// holder wrote.
func pausedExpectations(r *run, res result) []string {
	r.note("stale writes after a pause: %d rejected by the fence, %d accepted (no newer holder had written yet); %d overlaps",
		res.v.staleRejected, res.v.staleAccepted, res.v.overlaps)
	if res.v.staleRejected+res.v.staleAccepted == 0 {
		return []string{"no paused client wrote: the scenario did not exercise the fence"}
	}
	return nil
}
