package sim

import (
	"context"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// params are a run's dimensions, drawn from the seed (or fixed by a
// scenario). Times are virtual.
type params struct {
	Masters  int
	Durable  []bool // per master: appendonly with fsync always
	Sidecars int
	Callers  int // per sidecar
	Names    int

	KeyTTL         time.Duration
	MaxTTL         time.Duration
	MaxWait        time.Duration
	MaxHold        time.Duration
	HealthInterval time.Duration
	InfoMaxAge     time.Duration
	NodeTimeout    time.Duration
	DriftFactor    float64
	MaxDriftRate   float64 // largest clock rate error of a master
	ClockRate      float64 // scenarios: every master's clock runs this much fast
	// The tenure settings (internal/lease/tenure.go): fences a grant
	// reserves, the linger, and whether waiters leave marks.
	FenceBlock    int
	Linger        time.Duration
	NoWaiterMarks bool
	// LagSidecar, when LagBy is not 0, is a sidecar whose Redlock clock
	// (the fence proposals it makes) runs LagBy behind: its proposals fall
	// below the masters' floors, and its grants' blocks come from the
	// commit round, from the counters alone.
	LagSidecar int
	LagBy      time.Duration

	SimTime time.Duration
}

func (p params) String() string {
	var durable []string
	for i, d := range p.Durable {
		if d {
			durable = append(durable, fmt.Sprintf("m%d", i+1))
		}
	}
	ds := "none"
	if len(durable) > 0 {
		ds = strings.Join(durable, ",")
	}
	return fmt.Sprintf("masters=%d (durable: %s) sidecars=%d callers/sidecar=%d names=%d key_ttl=%v max_ttl=%v max_hold=%v health_interval=%v info_max_age=%v node_timeout=%v drift=%.3f (max rate error %.4f) fence_block=%d linger=%v waiter_marks=%v sim_time=%v",
		p.Masters, ds, p.Sidecars, p.Callers, p.Names, p.KeyTTL, p.MaxTTL, p.MaxHold, p.HealthInterval, p.InfoMaxAge, p.NodeTimeout, p.DriftFactor, p.MaxDriftRate,
		p.FenceBlock, p.Linger, !p.NoWaiterMarks, p.SimTime) + p.lagString()
}

func (p params) lagString() string {
	if p.LagBy == 0 {
		return ""
	}
	return fmt.Sprintf(" (sidecar %d's Redlock clock %v behind)", p.LagSidecar+1, p.LagBy)
}

// defaultParams are the scenarios' settings: cmd/sidelock's defaults
// with a short key ttl.
func defaultParams() params {
	return params{
		Masters: 3, Durable: make([]bool, 3), Sidecars: 2, Callers: 1, Names: 1,
		KeyTTL: 3 * time.Second, MaxTTL: time.Minute, MaxWait: 30 * time.Second, MaxHold: time.Minute,
		HealthInterval: time.Second, InfoMaxAge: 10 * time.Second, NodeTimeout: 50 * time.Millisecond,
		DriftFactor: 0.01, SimTime: 20 * time.Second, FenceBlock: 64, Linger: 20 * time.Millisecond,
	}
}

// world is one run: masters, sidecar slots, the history, and the
// randomness everything draws from.
type world struct {
	seed   uint64
	p      params
	t0     time.Time
	stopAt time.Time // when the teardown began
	// Set by the liveness check: how much of the run was quiet, and how
	// much waiting for a free name it could judge.
	quiet, judged time.Duration
	rec           *recorder
	masters       []*master
	slots         []*slot
	stormy        atomic.Bool // background latency spikes on (during storms)
	// virtualOps are the calls whose callers wait their latency in
	// virtual time (see link.do); the others are answered at once.
	virtualOps map[string]bool
	progress   *atomic.Uint64 // bumped by every call, for the watchdog

	inflight sync.WaitGroup // commands on the wire, delayed notifications
	actors   sync.WaitGroup // callers and the nemesis
	watchers sync.WaitGroup // event subscribers

	hooksMu   sync.Mutex
	sendHooks map[hookKey]func()
}

type hookKey struct {
	slot int
	key  string
}

// newWorld builds a world inside a bubble; progress is the bubble's
// watchdog counter (see bubble).
func newWorld(seed uint64, p params, progress *atomic.Uint64) *world {
	w := &world{seed: seed, p: p, t0: time.Now(), sendHooks: map[hookKey]func(){},
		virtualOps: map[string]bool{"acquire": true, "acquire-reader": true, "acquire-writer": true, "commit": true, "note": true, "ping": true, "info": true}, progress: progress}
	w.rec = newRecorder(w.t0)
	for i := range p.Masters {
		w.masters = append(w.masters, newMaster(w, i, w.clockFor(i), p.Durable[i]))
	}
	for i := range p.Sidecars {
		w.slots = append(w.slots, &slot{w: w, idx: i, cut: make([]atomic.Bool, p.Masters)})
	}
	return w
}

// clockFor draws master i's clock: a rate error up to MaxDriftRate
// (at most half the drift factor), an offset of at most a few tens of ms.
func (w *world) clockFor(i int) *driftClock {
	if w.p.ClockRate != 0 {
		return &driftClock{t0: w.t0, lin: w.p.ClockRate}
	}
	if w.p.MaxDriftRate == 0 {
		return nil
	}
	r := w.rng(0xc10c, uint64(i))
	period := 20 + 100*r.Float64() // seconds
	rate := w.p.MaxDriftRate * (0.2 + 0.8*r.Float64())
	return &driftClock{t0: w.t0, amp: rate * period / (2 * math.Pi), period: period, phase: 2 * math.Pi * r.Float64()}
}

// rnd hashes the seed with parts into 64 random bits (splitmix64).
func (w *world) rnd(parts ...uint64) uint64 {
	x := w.seed ^ 0x9e3779b97f4a7c15
	for _, p := range parts {
		x ^= p
		x = mix(x)
	}
	return x
}

func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// rng is a generator of its own for one actor, so actors' draws do not
// depend on each other's order.
func (w *world) rng(parts ...uint64) *rand.Rand {
	return rand.New(rand.NewPCG(w.rnd(parts...), w.rnd(append(parts, 1)...)))
}

func hashString(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}

// latency turns 64 random bits into a call's latency each way: a fast LAN
// normally; 20-150ms each way on a slow master (often beyond the node
// timeout, so answers arrive after the caller gave up); during storms one
// call in 200 takes 30-120ms.
func (w *world) latency(h uint64, slow bool) (time.Duration, time.Duration) {
	r := rand.New(rand.NewPCG(h, h^0xda7a))
	switch {
	case slow:
		return between(r, 20*time.Millisecond, 150*time.Millisecond), between(r, 20*time.Millisecond, 150*time.Millisecond)
	case w.stormy.Load() && r.IntN(200) == 0:
		return between(r, 30*time.Millisecond, 120*time.Millisecond), between(r, 100*time.Microsecond, 2*time.Millisecond)
	default:
		return between(r, 100*time.Microsecond, 4*time.Millisecond), between(r, 100*time.Microsecond, 4*time.Millisecond)
	}
}

func between(r *rand.Rand, lo, hi time.Duration) time.Duration {
	return lo + time.Duration(r.Int64N(int64(hi-lo)+1))
}

// onExtendSent calls f once, when slot's sidecar next sends a batch
// renewal of key to a master (for releases that race a renewal). f runs on
// the sending goroutine and must not block.
func (w *world) onExtendSent(slot int, key string, f func()) (cancel func()) {
	k := hookKey{slot, key}
	w.hooksMu.Lock()
	w.sendHooks[k] = f
	w.hooksMu.Unlock()
	return func() {
		w.hooksMu.Lock()
		delete(w.sendHooks, k)
		w.hooksMu.Unlock()
	}
}

func (w *world) fireSendHooks(slot int, keys []string) {
	w.hooksMu.Lock()
	var fs []func()
	for _, k := range keys {
		if f, ok := w.sendHooks[hookKey{slot, k}]; ok {
			fs = append(fs, f)
			delete(w.sendHooks, hookKey{slot, k})
		}
	}
	w.hooksMu.Unlock()
	for _, f := range fs {
		f() // must not block: it runs on the renewer's goroutine
	}
}

// keyExpiry is when key expires on the last master that holds it, in
// virtual time (zero when none does).
func (w *world) keyExpiry(key string) time.Time {
	var last time.Time
	for _, m := range w.masters {
		v, ttl, err := m.mem.Get(context.Background(), key)
		if err != nil || v == "" {
			continue
		}
		rate := 1.0
		if m.clock != nil {
			rate += m.clock.lin
		}
		last = latest(last, time.Now().Add(time.Duration(float64(ttl)/rate)))
	}
	return last
}

// since is t as an offset from the start of the run, for traces.
func (w *world) since(t time.Time) string { return fmtAt(w.t0, t) }

func fmtAt(t0, t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return fmt.Sprintf("+%.3fs", t.Sub(t0).Seconds())
}

// bubble runs f in a synctest bubble under a wall-clock watchdog: a
// bubble that makes no progress (no call to a master) for stuckAfter of
// wall time is stuck, most likely on a sync.Mutex whose holder waits for
// virtual time (see link.do); rather than hang until the test timeout,
// the watchdog prints every goroutine and panics.
func bubble(t *testing.T, progress *atomic.Uint64, f func(t *testing.T)) {
	done := make(chan struct{})
	defer close(done)
	go func() {
		const stuckAfter = 30 * time.Second
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		last, since := progress.Load(), time.Now()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			if n := progress.Load(); n != last {
				last, since = n, time.Now()
				continue
			}
			if time.Since(since) < stuckAfter {
				continue
			}
			buf := make([]byte, 1<<24)
			buf = buf[:runtime.Stack(buf, true)]
			fmt.Fprintf(os.Stderr, "sim: %s: the bubble made no progress for %v of wall time: it is stuck (a goroutine waiting for a sync.Mutex whose holder waits for virtual time stops the bubble's clock; see link.do). Every goroutine:\n%s\n", t.Name(), stuckAfter, buf)
			panic("sim: " + t.Name() + ": the synctest bubble is stuck")
		}
	}()
	synctest.Test(t, f)
}
