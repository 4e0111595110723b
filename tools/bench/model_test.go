package bench

import (
	"context"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sidelock/sidelock/internal/config"
	"github.com/sidelock/sidelock/internal/health"
	"github.com/sidelock/sidelock/internal/lease"
	"github.com/sidelock/sidelock/internal/membership"
	"github.com/sidelock/sidelock/internal/redistest"
	"github.com/sidelock/sidelock/internal/sidecar"
	"github.com/sidelock/sidelock/internal/sidecar/inprocess"
	"github.com/sidelock/sidelock/pkg/redlock"
	"github.com/sidelock/sidelock/pkg/redlock/redisnode"
	"github.com/sidelock/sidelock/tools/scale"
)

// BenchmarkCostModel measures the inputs of the fleet cost model in
// docs/scale.md: CPU per lock operation on the masters and in the sidecar,
// the background cost of a sidecar (health rounds, member-list checks,
// renewer ticks), connections and memory per sidecar, per held lock and per connection.
// tools/scale-model reads these lines; BenchmarkScaleSim (tools/scale)
// checks the model against hundreds of sidecars at once.
//
// The fleet regime sets how each is measured. A pod makes a few
// operations per second, so a sidecar's calls never meet in its
// pipeliner: every figure has ONE caller per connection, never coalesced
// calls. A master of a large fleet, though, serves many such connections
// at once, and Redis spends less per command when several clients'
// commands arrive in one event-loop wake-up; so the masters' per-operation
// and per-health-round costs are taken with many independent connections
// busy together (callers=16, health every 50 ms from 50 sidecars, i.e. the
// rate of 1000 pods), and the same costs from one lone caller are kept
// beside them to show the difference. The sidecar's own costs are taken
// from one caller and a health round per second, as in a pod.
//
// Redis figures are per master (the masters' total CPU divided by their
// number), read from the kernel's account of the redis-server process;
// sidecar figures are this process's CPU, which also holds the caller (a
// minimal raw HTTP client, a few percent of the total).
func BenchmarkCostModel(b *testing.B) {
	b.Run("ops/path=engine/masters=3/callers=1", func(b *testing.B) { costOfEngineOps(b, 3, 1) })
	b.Run("ops/path=engine/masters=5/callers=1", func(b *testing.B) { costOfEngineOps(b, 5, 1) })
	b.Run(fmt.Sprintf("ops/path=engine/masters=3/callers=%d", fleetCallers), func(b *testing.B) { costOfEngineOps(b, 3, fleetCallers) })
	b.Run(fmt.Sprintf("ops/path=engine/masters=5/callers=%d", fleetCallers), func(b *testing.B) { costOfEngineOps(b, 5, fleetCallers) })
	b.Run("ops/path=http/masters=3", func(b *testing.B) { costOfHTTPOps(b, 3) })
	b.Run("ops/path=http/masters=5", func(b *testing.B) { costOfHTTPOps(b, 5) })
	b.Run("renewal/batch=1", func(b *testing.B) { costOfRenewal(b, 1) })
	b.Run("renewal/batch=100", func(b *testing.B) { costOfRenewal(b, 100) })
	b.Run("health-round/ping-only", func(b *testing.B) { costOfHealthRounds(b, true) })
	b.Run("health-round/full", func(b *testing.B) { costOfHealthRounds(b, false) })
	b.Run("member-check/callers=1", func(b *testing.B) { costOfMemberChecks(b, 1, 0) })
	b.Run(fmt.Sprintf("member-check/callers=%d", fleetCallers), func(b *testing.B) { costOfMemberChecks(b, fleetCallers, 0) })
	b.Run("member-check/paced", func(b *testing.B) { costOfMemberChecks(b, 1, lonePace) })
	b.Run(fmt.Sprintf("background/sidecars=%d/health=none", backgroundSidecars), costOfTicks)
	for _, interval := range []time.Duration{time.Second, 50 * time.Millisecond} {
		b.Run(fmt.Sprintf("background/sidecars=%d/health=%v/rounds=info", backgroundSidecars, interval), func(b *testing.B) { costOfHealth(b, interval, -1) })
		b.Run(fmt.Sprintf("background/sidecars=%d/health=%v/rounds=ping", backgroundSidecars, interval), func(b *testing.B) { costOfHealth(b, interval, time.Hour) })
	}
	b.Run("connections", costOfConnections)
	b.Run(fmt.Sprintf("memory/conns=%d", memoryConns), costOfConnectionMemory)
	b.Run(fmt.Sprintf("memory/locks=%d", memoryLocks), costOfHeldLockMemory)
}

// fleetCallers is how many independent callers, each on connections of
// its own, stand for the many pods a master serves at once.
const fleetCallers = 16

// meteredMasters is a set of real masters with their meters.
type meteredMasters struct {
	addrs  []string
	meters []*scale.Master
}

func startMeteredMasters(b *testing.B, n int) *meteredMasters {
	b.Helper()
	ms := &meteredMasters{}
	for _, s := range redistest.StartN(b, n) {
		m, err := scale.NewMaster(context.Background(), s.Addr(), s.Pid())
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { m.Close() })
		ms.addrs = append(ms.addrs, s.Addr())
		ms.meters = append(ms.meters, m)
	}
	return ms
}

// nodes opens a sidecar's connections to the masters.
func (ms *meteredMasters) nodes(b *testing.B) []redlock.Node {
	nodes := make([]redlock.Node, len(ms.addrs))
	for i, a := range ms.addrs {
		nodes[i] = redisnode.New(redisnode.Options{Addr: a})
		b.Cleanup(func() { nodes[i].Close() })
	}
	return nodes
}

func (ms *meteredMasters) locker(b *testing.B) *redlock.Locker {
	l, err := redlock.New(ms.nodes(b), redlock.Config{Fencing: true, NodeTimeout: benchNodeTimeout})
	if err != nil {
		b.Fatal(err)
	}
	return l
}

// cpu is the masters' CPU time, summed.
func (ms *meteredMasters) cpu(b *testing.B) time.Duration {
	var total time.Duration
	for _, m := range ms.meters {
		d, err := m.CPU()
		if err != nil {
			b.Fatal(err)
		}
		total += d
	}
	return total
}

// sum adds one integer reading over the masters.
func (ms *meteredMasters) sum(b *testing.B, read func(*scale.Master) (int64, error)) int64 {
	var total int64
	for _, m := range ms.meters {
		v, err := read(m)
		if err != nil {
			b.Fatal(err)
		}
		total += v
	}
	return total
}

func (ms *meteredMasters) usedMemory(b *testing.B) int64 {
	return ms.sum(b, func(m *scale.Master) (int64, error) { return m.UsedMemory(context.Background()) })
}

// outputBytes and outputMark are the masters' output, summed, before and
// after the reading's own reply (see scale.Master.OutputMark): a window's
// output is outputBytes at its end, read first, less outputMark at its
// start, read last.
func (ms *meteredMasters) outputBytes(b *testing.B) int64 {
	return ms.sum(b, func(m *scale.Master) (int64, error) { return m.OutputBytes(context.Background()) })
}

func (ms *meteredMasters) outputMark(b *testing.B) int64 {
	return ms.sum(b, func(m *scale.Master) (int64, error) { return m.OutputMark(context.Background()) })
}

// wakeups and commands count the masters' event-loop wake-ups and the
// requests they served (see scale.Master.Wakeups), summed.
func (ms *meteredMasters) wakeups(b *testing.B) int64 {
	return ms.sum(b, func(m *scale.Master) (int64, error) { return m.Wakeups() })
}

func (ms *meteredMasters) commands(b *testing.B) int64 {
	return ms.sum(b, func(m *scale.Master) (int64, error) { return m.RoundTrips(context.Background()) })
}

// allCommands counts every command the masters ran for clients, those the
// scripts call inside Redis included (see scale.Master.Commands), summed.
func (ms *meteredMasters) allCommands(b *testing.B) int64 {
	return ms.sum(b, func(m *scale.Master) (int64, error) { return m.Commands(context.Background()) })
}

func (ms *meteredMasters) clients(b *testing.B) int64 {
	return ms.sum(b, func(m *scale.Master) (int64, error) {
		c, err := m.Clients(context.Background())
		return int64(c.Total), err
	})
}

// cpuSpan is the CPU spent during some work, this process's and the
// masters', and the time it took.
type cpuSpan struct{ proc, redis, wall time.Duration }

func (s *cpuSpan) add(o cpuSpan) { s.proc += o.proc; s.redis += o.redis; s.wall += o.wall }

// less takes off what idle would have spent in the same time: the
// masters' own housekeeping and this process's background (the runtime,
// the renewer's tick), which the model counts apart.
func (s cpuSpan) less(idle cpuSpan) cpuSpan {
	share := func(d time.Duration) time.Duration {
		return time.Duration(float64(d) * s.wall.Seconds() / idle.wall.Seconds())
	}
	return cpuSpan{proc: s.proc - share(idle.proc), redis: s.redis - share(idle.redis), wall: s.wall}
}

// measure runs work between two readings of both clocks, nested so that
// reading one is never counted in the other.
func (ms *meteredMasters) measure(b *testing.B, work func()) cpuSpan {
	r0 := ms.cpu(b)
	p0, t0 := scale.ProcessCPU(), time.Now()
	work()
	p1, wall := scale.ProcessCPU(), time.Since(t0)
	return cpuSpan{proc: p1 - p0, redis: ms.cpu(b) - r0, wall: wall}
}

func microseconds(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

// lockOps is one caller's way to acquire and release: through the engine
// or HTTP.
type lockOps struct {
	acquire func(name string) (token string)
	release func(name, token string)
}

// opBatch is how many acquires (then releases) each caller runs between
// two readings: enough that reading the clocks (tens of µs) is lost in
// the work.
const opBatch = 64

// lonePace is the pause before each operation through the lock API: long
// enough that the sidecar, its Go runtime and the masters all go idle in
// between, as in a pod making a few operations per second, so that every
// operation pays for waking them up. Back-to-back operations keep all of
// it warm and cost the sidecar less than half as much.
const lonePace = 5 * time.Millisecond

// idleSample is how long the idle cost taken off paced phases is sampled.
const idleSample = 500 * time.Millisecond

// costOfOps has every caller run opBatch serial acquires, then their
// releases, over the same names, all callers at once, each operation
// after a pause of pace; after the first batch every name already has its
// fence counter, as for a pod reusing its lock names. Acquires and
// releases are measured apart. The pauses are inside the measurement: a
// timer's wake-up costs the caller a few µs.
func costOfOps(b *testing.B, ms *meteredMasters, pace time.Duration, callers []lockOps) {
	names := make([][]string, len(callers))
	tokens := make([][]string, len(callers))
	for w := range callers {
		tokens[w] = make([]string, opBatch)
		for i := range opBatch {
			names[w] = append(names[w], fmt.Sprintf("cost/%d/%d", w, i))
		}
	}
	everyCaller := func(step func(w, i int)) func() {
		return func() {
			var wg sync.WaitGroup
			for w := range callers {
				wg.Go(func() {
					for i := range opBatch {
						if pace > 0 {
							time.Sleep(pace)
						}
						step(w, i)
					}
				})
			}
			wg.Wait()
		}
	}
	acquireAll := everyCaller(func(w, i int) { tokens[w][i] = callers[w].acquire(names[w][i]) })
	releaseAll := everyCaller(func(w, i int) { callers[w].release(names[w][i], tokens[w][i]) })
	var idle cpuSpan // paced phases are mostly pauses: take off their idle cost
	if pace > 0 {
		idle = ms.measure(b, func() { time.Sleep(idleSample) })
	}
	var acquires, releases cpuSpan
	n := 0
	wakeups0, commands0, out0 := ms.wakeups(b), ms.commands(b), ms.outputMark(b)
	for b.Loop() {
		a, r := ms.measure(b, acquireAll), ms.measure(b, releaseAll)
		if pace > 0 {
			a, r = a.less(idle), r.less(idle)
		}
		acquires.add(a)
		releases.add(r)
		n += opBatch * len(callers)
	}
	out := ms.outputBytes(b) - out0
	masters := float64(len(ms.addrs))
	b.ReportMetric(float64(ms.commands(b)-commands0)/float64(ms.wakeups(b)-wakeups0), "redis-requests/wakeup")
	b.ReportMetric(float64(out)/float64(n)/masters, "redis-out-bytes/cycle")
	b.ReportMetric(microseconds(acquires.redis)/float64(n)/masters, "redis-cpu-µs/acquire")
	b.ReportMetric(microseconds(releases.redis)/float64(n)/masters, "redis-cpu-µs/release")
	b.ReportMetric(microseconds(acquires.proc)/float64(n), "sidecar-cpu-µs/acquire")
	b.ReportMetric(microseconds(releases.proc)/float64(n), "sidecar-cpu-µs/release")
}

// costOfEngineOps is a fenced acquire (two rounds) and a release through
// redlock.Locker alone, back to back, by callers each with its own Locker
// and so its own connections, like as many pods. One caller: every
// command wakes the masters, which have only just gone to sleep (the
// fleet's "lone" cost: a command arriving at an otherwise busy master).
// Many at once: several callers' commands share a wake-up (the "warm"
// cost).
func costOfEngineOps(b *testing.B, masters, callers int) {
	ms := startMeteredMasters(b, masters)
	ctx := context.Background()
	ops := make([]lockOps, callers)
	// 16 callers' first calls each open connections to 5 masters, which a
	// starved machine (bench-smoke beside the rest of make test) may not
	// finish within the node timeout: a no-quorum answer is retried, with
	// the same value, as a caller would.
	for w := range ops {
		locker := ms.locker(b)
		ops[w] = lockOps{
			acquire: func(name string) string {
				if err := retryOn(redlock.ErrNoQuorum, func() error { _, err := locker.Acquire(ctx, name, "v", 10*time.Second); return err }); err != nil {
					b.Error(err)
				}
				return "v"
			},
			release: func(name, token string) {
				if err := retryOn(redlock.ErrNoQuorum, func() error { return locker.Release(ctx, name, token) }); err != nil {
					b.Error(err)
				}
			},
		}
	}
	costOfOps(b, ms, 0, ops)
}

// costOfHTTPOps is one caller's POST then DELETE through the lock API
// (newSidecar: the httpapi server, lease manager and fenced Redlock), as a
// pod calls it: paced, so that each operation finds the sidecar idle.
func costOfHTTPOps(b *testing.B, masters int) {
	ms := startMeteredMasters(b, masters)
	srv := newSidecar(b, ms.nodes(b))
	client, err := scale.Dial(srv.Listener.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { client.Close() })
	costOfOps(b, ms, lonePace, []lockOps{{
		acquire: func(name string) string {
			tok, status, err := client.Acquire(name, "ttl=10s")
			if err != nil || status != 200 {
				b.Fatalf("acquire %s: %d %v", name, status, err)
			}
			return tok
		},
		release: func(name, token string) {
			if status, err := client.Release(name, token); err != nil || status != 204 {
				b.Fatalf("release %s: %d %v", name, status, err)
			}
		},
	}})
}

// costOfRenewal is one ExtendMany call per master with batch keys, as the
// renewer sends for the leases due in one 50 ms tick. Batches of 1 and of
// 100 separate the cost of a call from the cost of each key in it.
func costOfRenewal(b *testing.B, batch int) {
	ms := startMeteredMasters(b, 3)
	locker := ms.locker(b)
	ctx := context.Background()
	items := make([]redlock.ExtendItem, batch)
	for i := range items {
		items[i] = redlock.ExtendItem{Key: fmt.Sprintf("renew/%d", i), Value: "v", TTL: 10 * time.Second}
		if _, err := locker.Acquire(ctx, items[i].Key, "v", 10*time.Second); err != nil {
			b.Fatal(err)
		}
	}
	calls := 0
	span := ms.measure(b, func() {
		for b.Loop() {
			if _, errs := locker.ExtendMany(ctx, items); errs[0] != nil {
				b.Fatal(errs[0])
			}
			calls++
		}
	})
	perMaster := float64(calls) * 3
	b.ReportMetric(microseconds(span.redis)/perMaster, "redis-cpu-µs/renewal-call")
	b.ReportMetric(microseconds(span.redis)/perMaster/float64(batch), "redis-cpu-µs/renewal")
	b.ReportMetric(microseconds(span.proc)/float64(calls), "sidecar-cpu-µs/renewal-call")
	b.ReportMetric(microseconds(span.proc)/float64(calls*batch), "sidecar-cpu-µs/renewal")
}

// costOfHealthRounds is the health checker's round (every master pinged
// and its ServerInfo read: INFO server, INFO replication, CONFIG GET
// appendonly and appendfsync, one pipeline), or pings alone, which shows
// what the ServerInfo read adds.
func costOfHealthRounds(b *testing.B, pingOnly bool) {
	ms := startMeteredMasters(b, 3)
	nodes := ms.nodes(b)
	locker, err := redlock.New(nodes, redlock.Config{Fencing: true, NodeTimeout: benchNodeTimeout})
	if err != nil {
		b.Fatal(err)
	}
	checker, err := health.New([]*redlock.Locker{locker}, health.Config{Timeout: benchNodeTimeout, Fencing: true})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	round := func() { checker.Check(ctx) }
	if pingOnly {
		round = func() { pingAll(ctx, nodes) }
	}
	round() // dial
	rounds := 0
	out0 := ms.outputMark(b)
	span := ms.measure(b, func() {
		for b.Loop() {
			round()
			rounds++
		}
	})
	perMaster := float64(rounds) * 3
	b.ReportMetric(microseconds(span.redis)/perMaster, "redis-cpu-µs/health-round")
	b.ReportMetric(microseconds(span.proc)/perMaster, "sidecar-cpu-µs/health-round")
	b.ReportMetric(float64(ms.outputBytes(b)-out0)/perMaster, "redis-out-bytes/health-round")
}

// pingAll pings every node in parallel, as a health round does.
func pingAll(ctx context.Context, nodes []redlock.Node) {
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, benchNodeTimeout)
			defer cancel()
			_ = n.Ping(ctx)
		})
	}
	wg.Wait()
}

// costOfMemberChecks is the sidecar's member-list check of its group
// (internal/sidecar: membership.Check records the group's list on each of
// its masters with one script and reads back the live lists, every 10 s
// and once at start-up), by callers each with connections of its own,
// like as many sidecars, all recording the same list under the same key
// as the sidecars of one group do, each check back to back (pace 0) or
// after a pause of pace. callers=1 is the lone Redis cost (every request
// wakes the master), callers=fleetCallers the warm one, as for lock
// operations; paced, the sidecar's CPU as a pod pays it, its runtime idle
// before each check (the idle cost taken off, as in costOfOps).
func costOfMemberChecks(b *testing.B, callers int, pace time.Duration) {
	ms := startMeteredMasters(b, 3)
	cfg, err := config.Load()
	if err != nil {
		b.Fatal(err)
	}
	group := strings.Join(slices.Sorted(slices.Values(ms.addrs)), ",") // an unnamed group's name
	ttl := sidecar.MembershipTTL(cfg)                                  // as the sidecar sets it
	ctx := context.Background()
	check := func(nodes []redlock.Node) {
		res, err := membership.Check(ctx, cfg.KeyPrefix, group, ms.addrs, nodes, ttl, 4*benchNodeTimeout)
		if err != nil || len(res.Answered) != len(nodes) {
			b.Fatalf("member-list check: %v (answered %v of %d)", err, res.Answered, len(nodes))
		}
	}
	groups := make([][]redlock.Node, callers)
	for w := range groups {
		groups[w] = ms.nodes(b)
		check(groups[w]) // dial, and load the script
	}
	batch := func() {
		var wg sync.WaitGroup
		for w := range groups {
			wg.Go(func() {
				for range opBatch {
					if pace > 0 {
						time.Sleep(pace)
					}
					check(groups[w])
				}
			})
		}
		wg.Wait()
	}
	var idle cpuSpan
	if pace > 0 {
		idle = ms.measure(b, func() { time.Sleep(idleSample) })
	}
	var total cpuSpan
	checks := 0
	wakeups0, rt0, cmds0, out0 := ms.wakeups(b), ms.commands(b), ms.allCommands(b), ms.outputMark(b)
	for b.Loop() {
		span := ms.measure(b, batch)
		if pace > 0 {
			span = span.less(idle)
		}
		total.add(span)
		checks += opBatch * callers
	}
	out := ms.outputBytes(b) - out0
	rt, cmds := ms.commands(b)-rt0, ms.allCommands(b)-cmds0
	perMaster := float64(checks) * float64(len(ms.addrs))
	b.ReportMetric(microseconds(total.redis)/perMaster, "redis-cpu-µs/member-check")
	b.ReportMetric(float64(out)/perMaster, "redis-out-bytes/member-check")
	b.ReportMetric(float64(rt)/perMaster, "redis-round-trips/member-check")
	b.ReportMetric(float64(cmds)/perMaster, "redis-commands/member-check")
	b.ReportMetric(float64(rt)/float64(ms.wakeups(b)-wakeups0), "redis-requests/wakeup")
	b.ReportMetric(microseconds(total.proc)/perMaster, "sidecar-cpu-µs/member-check")
}

// backgroundSidecars is how many sidecars share a background
// measurement: enough that their background shows well above the masters'
// own.
const backgroundSidecars = 50

// backgroundWindow is one background measurement; one iteration is one
// window. Two seconds, so that the masters' own housekeeping (≈2 ms/s
// here) and the moment each sidecar's round falls average out.
const backgroundWindow = 2 * time.Second

// costOfTicks measures the masters with no client at all, then sidecars
// whose only background is the lease renewer's 50 ms tick.
func costOfTicks(b *testing.B) {
	ms := startMeteredMasters(b, 3)
	var alone, ticks cpuSpan
	windows := 0
	for b.Loop() {
		alone.add(ms.measure(b, func() { time.Sleep(measured(backgroundWindow)) }))
		sidecars := startSidecars(b, ms.addrs, backgroundSidecars, -1, 0)
		// Settle: start-up work goes on for a moment after New returns
		// (Run starting the listeners, the collection of what starting 50
		// sidecars left behind) and would land in the window at tens of
		// µs/s per sidecar, against the few µs/s of the tick measured here.
		time.Sleep(measured(time.Second))
		ticks.add(ms.measure(b, func() { time.Sleep(measured(backgroundWindow)) }))
		closeSidecars(b, sidecars)
		windows++
	}
	seconds := float64(windows) * measured(backgroundWindow).Seconds()
	b.ReportMetric(microseconds(alone.redis)/seconds/float64(len(ms.addrs)), "redis-idle-cpu-µs/s")
	b.ReportMetric(microseconds(ticks.proc)/seconds/backgroundSidecars, "sidecar-tick-cpu-µs/s")
}

// warmCycles is how many lock cycles each background sidecar makes first.
const warmCycles = 5

// costOfHealth runs backgroundSidecars full sidecars, each having made a
// few lock cycles (so both its command connections are open and its
// buffers used, as in a pod that locks), with health rounds every interval spread
// over the interval. At 1 s it is the pods' own regime: the sidecar's CPU
// and memory, and connections per master. At 50 ms the masters see as many
// rounds per second as 1000 pods send: their cost per round at fleet scale.
// infoMaxAge is SIDELOCK_HEALTH_INFO_MAX_AGE: negative, every round reads
// the server info (rounds=info); an hour, every measured round only pings
// (rounds=ping). The shipped setting mixes the two, which the model does.
func costOfHealth(b *testing.B, interval, infoMaxAge time.Duration) {
	ms := startMeteredMasters(b, 3)
	aloneFor := measured(time.Second)
	alone := ms.measure(b, func() { time.Sleep(aloneFor) })
	heap0, rss0 := scale.LiveHeap(), settledRSS(b)
	clients0 := ms.clients(b)
	sidecars := startSidecars(b, ms.addrs, backgroundSidecars, interval, infoMaxAge)
	defer closeSidecars(b, sidecars)
	callers := make([]*scale.Client, len(sidecars))
	for i, s := range sidecars {
		// A name of its own: another pod sees a release a round after
		// its DELETE's answer (docs/api.md), so the next sidecar's
		// try-once of the same name could still meet it.
		warm := fmt.Sprintf("warm/%d", i)
		callers[i] = cycleOnce(b, s.Addr, warm)
		defer callers[i].Close()
		for range warmCycles - 1 {
			cycle(b, callers[i], warm)
		}
	}
	time.Sleep(max(2*interval, time.Second)) // every sidecar has checked
	heap1, rss1 := scale.LiveHeap(), settledRSS(b)
	clients1 := ms.clients(b)
	var busy cpuSpan
	rounds0, wakeups0, commands0, scripts0 := ms.healthRounds(b), ms.wakeups(b), ms.commands(b), ms.scriptRuns(b)
	out0 := ms.outputMark(b)
	start := time.Now()
	for b.Loop() {
		busy.add(ms.measure(b, func() { time.Sleep(measured(backgroundWindow)) }))
	}
	seconds := time.Since(start).Seconds()
	out := ms.outputBytes(b) - out0
	rounds := float64(ms.healthRounds(b) - rounds0) // per master, summed
	masters := float64(len(ms.addrs))
	redisIdle := microseconds(alone.redis) / masters / aloneFor.Seconds() // per master per second
	b.ReportMetric((microseconds(busy.redis)-redisIdle*masters*seconds)/rounds, "redis-cpu-µs/health-round")
	b.ReportMetric(float64(out)/rounds, "redis-out-bytes/health-round")
	b.ReportMetric(float64(ms.commands(b)-commands0)/float64(ms.wakeups(b)-wakeups0), "redis-requests/wakeup")
	b.ReportMetric(rounds/masters/seconds/backgroundSidecars, "health-rounds/s/sidecar")
	// No lock operation runs in the window, so every script run is a
	// member-list check: 0 while the windows end before the first periodic
	// check, 10 s after start-up, so that the rounds are costed alone.
	b.ReportMetric(float64(ms.scriptRuns(b)-scripts0)/masters/seconds/backgroundSidecars, "member-checks/s/sidecar")
	b.ReportMetric(microseconds(busy.proc)/seconds/backgroundSidecars, "sidecar-cpu-µs/s")
	b.ReportMetric(float64(clients1-clients0)/masters/backgroundSidecars, "conns/sidecar")
	b.ReportMetric(float64(int64(heap1)-int64(heap0))/backgroundSidecars, "sidecar-heap-bytes/sidecar")
	b.ReportMetric(float64(rss1-rss0)/backgroundSidecars, "sidecar-rss-bytes/sidecar")
}

// healthRounds is how many health rounds the masters served, summed: a
// round is a server-info read (INFO server, INFO replication and two
// CONFIG GETs in one pipeline; nothing else sends CONFIG GET) or a PING
// (which the lock path never sends).
func (ms *meteredMasters) healthRounds(b *testing.B) int64 {
	return ms.sum(b, func(m *scale.Master) (int64, error) {
		infos, err := m.CommandCalls(context.Background(), "config|get")
		if err != nil {
			return 0, err
		}
		pings, err := m.CommandCalls(context.Background(), "ping")
		return infos/2 + pings, err
	})
}

// scriptRuns is how many scripts the masters ran (EVALSHA and EVAL),
// summed.
func (ms *meteredMasters) scriptRuns(b *testing.B) int64 {
	return ms.sum(b, func(m *scale.Master) (int64, error) {
		sha, err := m.CommandCalls(context.Background(), "evalsha")
		if err != nil {
			return 0, err
		}
		eval, err := m.CommandCalls(context.Background(), "eval")
		return sha + eval, err
	})
}

// startSidecars starts n full sidecars with health rounds every interval
// (negative: none), their first rounds spread over one interval as pods
// started at different moments check at different moments; infoMaxAge as
// scale.SidecarConfig's HealthInfoMaxAge.
func startSidecars(b *testing.B, addrs []string, n int, interval, infoMaxAge time.Duration) []*scale.Sidecar {
	out := make([]*scale.Sidecar, n)
	for i := range out {
		s, err := scale.StartSidecar(addrs, scale.SidecarConfig{
			HealthInterval: interval, HealthInfoMaxAge: infoMaxAge, NodeTimeout: benchNodeTimeout,
			FirstCheckAfter: max(interval, 0) * time.Duration(i) / time.Duration(n),
		})
		if err != nil {
			b.Fatal(err)
		}
		out[i] = s
	}
	return out
}

func closeSidecars(b *testing.B, sidecars []*scale.Sidecar) {
	for _, s := range sidecars {
		if err := s.Close(context.Background()); err != nil {
			b.Error(err)
		}
	}
}

func settledRSS(b *testing.B) int64 {
	rss, err := scale.SettledRSS()
	if err != nil {
		b.Fatal(err)
	}
	return rss
}

// costOfConnections counts, with CLIENT LIST on one master, the
// connections one sidecar keeps to it: idle (health rounds only), after
// lock operations, while a caller waits for a held lock (the release
// subscription), and once the wait is over.
func costOfConnections(b *testing.B) {
	ms := startMeteredMasters(b, 3)
	holder := ms.locker(b) // another pod, holding the lock the caller waits for
	ctx := context.Background()
	var idle, active, waiting, after, pubsubWaiting, pubsubAfter float64
	for b.Loop() {
		if _, err := holder.Acquire(ctx, "sidelock:conn/held", "other", 10*time.Second); err != nil {
			b.Fatal(err)
		}
		before := countClients(b, ms.meters[0])
		s := startSidecars(b, ms.addrs, 1, time.Second, 0)[0]
		time.Sleep(300 * time.Millisecond) // the first health round
		idle = float64(countClients(b, ms.meters[0]).Total - before.Total)
		cycleOnce(b, s.Addr, "conn/free").Close()
		active = float64(countClients(b, ms.meters[0]).Total - before.Total)
		done := waitInBackground(b, s.Addr, "conn/held")
		time.Sleep(300 * time.Millisecond)
		c := countClients(b, ms.meters[0])
		waiting, pubsubWaiting = float64(c.Total-before.Total), float64(c.PubSub-before.PubSub)
		if err := holder.Release(ctx, "sidelock:conn/held", "other"); err != nil {
			b.Fatal(err)
		}
		<-done
		time.Sleep(time.Second) // the wait's subscription is dropped asynchronously
		c = countClients(b, ms.meters[0])
		after, pubsubAfter = float64(c.Total-before.Total), float64(c.PubSub-before.PubSub)
		closeSidecars(b, []*scale.Sidecar{s})
	}
	b.ReportMetric(idle, "conns-idle/sidecar")
	b.ReportMetric(active, "conns-active/sidecar")
	b.ReportMetric(waiting, "conns-waiting/sidecar")
	b.ReportMetric(after, "conns-after-wait/sidecar")
	b.ReportMetric(pubsubWaiting, "subscribed-waiting/sidecar")
	b.ReportMetric(pubsubAfter, "subscribed-after-wait/sidecar")
}

func countClients(b *testing.B, m *scale.Master) scale.Clients {
	c, err := m.Clients(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	return c
}

// cycleOnce acquires and releases name through the lock API at addr and
// returns the caller's connection, still open.
func cycleOnce(b *testing.B, addr, name string) *scale.Client {
	c, err := scale.Dial(addr)
	if err != nil {
		b.Fatal(err)
	}
	cycle(b, c, name)
	return c
}

// cycle acquires and releases name through c.
func cycle(b *testing.B, c *scale.Client, name string) {
	tok, status, err := c.Acquire(name, "ttl=10s")
	if err != nil || status != 200 {
		b.Fatalf("acquire %s: %d %v", name, status, err)
	}
	if status, err := c.Release(name, tok); err != nil || status != 204 {
		b.Fatalf("release %s: %d %v", name, status, err)
	}
}

// waitInBackground asks for name with wait=5s, releases it once granted,
// and closes the returned channel.
func waitInBackground(b *testing.B, addr, name string) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := scale.Dial(addr)
		if err != nil {
			b.Error(err)
			return
		}
		defer c.Close()
		tok, status, err := c.Acquire(name, "ttl=10s&wait=5s")
		if err != nil || status != 200 {
			b.Errorf("waiting acquire %s: %d %v", name, status, err)
			return
		}
		_, _ = c.Release(name, tok)
	}()
	return done
}

// memoryConns is how many connections the per-connection memory is
// averaged over: half kept busy, half left idle.
const memoryConns = 500

// connSettle is how long the connections live before they are measured:
// Redis frees the query buffer of a client idle for 2 s and shrinks reply
// buffers to their peak use over the last few seconds, so a connection's
// memory depends on how often it is used.
const connSettle = 6 * time.Second

// costOfConnectionMemory opens memoryConns connections to one master.
// Half send a command every 500 ms, as a sidecar's connections do while
// health rounds run every second; half are left idle, as connections to
// masters a pod rarely uses are. After connSettle it reports CLIENT LIST's
// tot-mem per connection of each kind, and used_memory's growth per
// connection (both kinds) as a check.
func costOfConnectionMemory(b *testing.B) {
	ms := startMeteredMasters(b, 1)
	var busy, idle, perConn float64
	for b.Loop() {
		used0 := ms.usedMemory(b)
		idleConns := openNamedConns(b, ms.addrs[0], "idle", memoryConns/2)
		busyConns := openNamedConns(b, ms.addrs[0], "busy", memoryConns/2)
		for deadline := time.Now().Add(connSettle); time.Now().Before(deadline); {
			time.Sleep(500 * time.Millisecond)
			pingEach(b, busyConns)
		}
		perConn = float64(ms.usedMemory(b)-used0) / memoryConns
		c := countClients(b, ms.meters[0])
		busy = float64(c.ByName["busy"].Memory) / float64(c.ByName["busy"].Count)
		idle = float64(c.ByName["idle"].Memory) / float64(c.ByName["idle"].Count)
		for _, c := range append(idleConns, busyConns...) {
			c.Close()
		}
	}
	b.ReportMetric(busy, "redis-bytes/busy-conn")
	b.ReportMetric(idle, "redis-bytes/idle-conn")
	b.ReportMetric(perConn, "redis-bytes/conn")
}

// openNamedConns opens n connections named name (CLIENT SETNAME).
func openNamedConns(b *testing.B, addr, name string, n int) []net.Conn {
	conns := make([]net.Conn, 0, n)
	for range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			b.Fatal(err)
		}
		conns = append(conns, c)
		command(b, c, "CLIENT SETNAME "+name+"\r\n", "+OK\r\n")
	}
	return conns
}

func pingEach(b *testing.B, conns []net.Conn) {
	for _, c := range conns {
		command(b, c, "PING\r\n", "+PONG\r\n")
	}
}

// command sends an inline command and reads its short, known reply.
func command(b *testing.B, c net.Conn, cmd, reply string) {
	if _, err := c.Write([]byte(cmd)); err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, len(reply))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != reply {
		b.Fatalf("%q: %q %v", cmd, buf, err)
	}
}

// memoryLocks is how many held locks the per-lock memory is averaged over.
const memoryLocks = 3000

// costOfHeldLockMemory first reports what loading the scripts costs a
// master (once, whatever the fleet). Then it holds memoryLocks locks
// through a lease manager and reports, per lock, the masters' used_memory
// (the key and its fence counter) and the sidecar's live heap; then
// releases them and reports what stays on the masters per released name:
// the fence counter, kept for the fence retention (1 h) after the last
// grant.
func costOfHeldLockMemory(b *testing.B) {
	ms := startMeteredMasters(b, 3)
	masters := float64(len(ms.addrs))
	scripts := scriptMemory(b, ms) / masters
	m := inprocess.Start(b, inprocess.Options{Nodes: ms.nodes(b), Config: func(c *config.Config) {
		c.KeyPrefix, c.NodeTimeout, c.DefaultTTL = "mem:", benchNodeTimeout, time.Hour
		c.MaxLocks, c.MaxWaiters = lease.DefaultMaxLocks, lease.DefaultMaxWaiters // the lease package's, not the chart's
	}}).Leases()
	ctx := context.Background()
	hold := func(name string) lease.Info {
		info, err := m.Acquire(ctx, lease.Request{Name: name})
		if err != nil {
			b.Fatal(err)
		}
		return info
	}
	warm := hold("warm") // the manager's connections are open before the baseline
	if err := m.Release(ctx, warm.Name, warm.Token); err != nil {
		b.Fatal(err)
	}
	var perLock, perFence, heapPerLock float64
	for iter := 0; b.Loop(); iter++ {
		used0, heap0 := ms.usedMemory(b), scale.LiveHeap()
		infos := make([]lease.Info, memoryLocks)
		acquireMany(b, memoryLocks, func(i int) (err error) {
			infos[i], err = m.Acquire(ctx, lease.Request{Name: fmt.Sprintf("mem/%d/%d", iter, i)})
			return err
		})
		time.Sleep(measured(1100 * time.Millisecond)) // connection buffers settle
		used1, heap1 := ms.usedMemory(b), scale.LiveHeap()
		acquireMany(b, memoryLocks, func(i int) error { return m.Release(ctx, infos[i].Name, infos[i].Token) })
		time.Sleep(measured(1100 * time.Millisecond))
		used2 := ms.usedMemory(b)
		perLock = float64(used1-used0) / memoryLocks / masters
		perFence = float64(used2-used0) / memoryLocks / masters
		heapPerLock = float64(int64(heap1)-int64(heap0)) / memoryLocks
	}
	b.ReportMetric(scripts, "redis-bytes/scripts")
	b.ReportMetric(perLock, "redis-bytes/lock")
	b.ReportMetric(perFence, "redis-bytes/fence-counter")
	b.ReportMetric(heapPerLock, "sidecar-heap-bytes/lock")
}

// scriptMemory is the masters' used_memory growth, summed, from running
// every script a sidecar runs once (each is loaded on first use): the lock
// scripts and the member-list check's, measured after the connections
// that ran them are closed.
func scriptMemory(b *testing.B, ms *meteredMasters) float64 {
	used0 := ms.usedMemory(b)
	nodes := make([]redlock.Node, len(ms.addrs))
	for i, a := range ms.addrs {
		nodes[i] = redisnode.New(redisnode.Options{Addr: a})
	}
	locker, err := redlock.New(nodes, redlock.Config{Fencing: true, NodeTimeout: benchNodeTimeout})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if _, err := locker.Acquire(ctx, "scripts", "v", 10*time.Second); err != nil {
		b.Fatal(err)
	}
	locker.ExtendMany(ctx, []redlock.ExtendItem{{Key: "scripts", Value: "v", TTL: 10 * time.Second}})
	if _, err := locker.Inspect(ctx, "scripts"); err != nil {
		b.Fatal(err)
	}
	if err := locker.Release(ctx, "scripts", "v"); err != nil {
		b.Fatal(err)
	}
	if _, err := membership.Check(ctx, "sidelock:", "scripts", ms.addrs, nodes, time.Minute, benchNodeTimeout); err != nil {
		b.Fatal(err)
	}
	for _, n := range nodes {
		n.Close()
	}
	time.Sleep(200 * time.Millisecond) // the server frees closed clients
	// The fence counter of "scripts" and the member-list record stay: a few
	// hundred bytes of the sum.
	return float64(ms.usedMemory(b) - used0)
}
