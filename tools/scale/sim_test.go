package scale

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sidelock/sidelock/internal/ctxsleep"
	"github.com/sidelock/sidelock/internal/redistest"
)

// The fleet simulation: S full sidecars in this process (each with its own
// connections, health checker, lease manager and lock API listener) over
// one group of three real masters (sidecars=S), or over K groups of three
// (groups=K/sidecars=S: 3K masters, names spread over the groups by a
// shard.Router, every master health-checked by every sidecar), each driven by an open-loop caller at
// a fixed rate while also holding a few long-lived locks that the renewer
// keeps alive. What the masters and this process spend is compared with
// the cost model's prediction by tools/scale-model (see docs/scale.md).
//
//	cd tools && go test -run '^$' -bench BenchmarkScaleSim -benchtime 1x ./scale
//
// Run it with -benchtime 1x: one iteration is one whole measurement.
// SIDELOCK_SCALE_WINDOW (a Go duration, default 15s) sets the measuring
// window, for a quick development run.

// The simulated workload. The rate is chosen so that 500 sidecars (and
// their masters) fit a 2-core machine with room to spare: the point is to
// see the costs grow with the fleet, not to saturate this machine.
const (
	simMasters      = 3
	cyclesPerSecond = 2.0 // acquire+release cycles per sidecar per second (Poisson arrivals)
	heldPerSidecar  = 2   // long-lived locks per sidecar, renewed in the background
	namesPerSidecar = 8   // lock names each sidecar cycles through (each keeps a fence counter)
	simKeyTTL       = 10 * time.Second
	simHealthEvery  = time.Second
	simInfoMaxAge   = 10 * time.Second // shipped: a full server-info read every 10th round
	// simNodeTimeout replaces the 50 ms default: hundreds of sidecars on
	// two cores queue for the CPU, and that should show as latency.
	simNodeTimeout = 500 * time.Millisecond
	// warmUp lets every sidecar's first health round pass: their first
	// rounds are spread over a whole server-info max age, so that their
	// info reads fall at independent moments, as in a fleet of pods
	// started at different times (in step, a window would see one read per
	// sidecar or two, and the masters' memory would depend on when it was
	// sampled).
	warmUp        = simInfoMaxAge + 3*time.Second
	defaultWindow = 15 * time.Second
)

// simCases are the simulated fleets: one group at three sizes, and two
// groups (the model's K, never otherwise exercised) at the middle size.
var simCases = []struct{ groups, sidecars int }{
	{1, 10}, {1, 100}, {1, 500},
	{2, 100}, {2, 500},
}

func BenchmarkScaleSim(b *testing.B) {
	window := measuringWindow(b)
	for _, c := range simCases {
		name := fmt.Sprintf("sidecars=%d", c.sidecars)
		if c.groups > 1 {
			name = fmt.Sprintf("groups=%d/%s", c.groups, name)
		}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				runSimulation(b, c.groups, c.sidecars, window)
			}
		})
	}
}

func measuringWindow(b *testing.B) time.Duration {
	v := os.Getenv("SIDELOCK_SCALE_WINDOW")
	if v == "" {
		return defaultWindow
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		b.Fatalf("SIDELOCK_SCALE_WINDOW=%q: want a positive Go duration", v)
	}
	return d
}

// simMasterSet is the groups' masters and their meters, group after
// group (meters[g*simMasters+i] is master i of group g).
type simMasterSet struct {
	groups [][]string
	meters []*Master
}

func startSimMasters(b *testing.B, groups int) *simMasterSet {
	ms := &simMasterSet{groups: make([][]string, groups)}
	for i, s := range redistest.StartN(b, groups*simMasters) {
		m, err := NewMaster(context.Background(), s.Addr(), s.Pid())
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { m.Close() })
		g := i / simMasters
		ms.groups[g] = append(ms.groups[g], s.Addr())
		ms.meters = append(ms.meters, m)
	}
	return ms
}

// snapshot is every counter read at the start and end of the window.
type snapshot struct {
	at         time.Time
	redisCPU   []time.Duration
	redisOut   []int64
	wakeups    int64   // all masters
	requests   []int64 // per master
	processCPU time.Duration
	renewals   int64
}

// snapshot reads every counter. The masters' output is read last at the
// start of the window (the mark, its own reply counted) and first at its
// end, so that the window holds none of the meter's own INFO replies.
func (ms *simMasterSet) snapshot(b *testing.B, renewals *RenewalCounter, atEnd bool) snapshot {
	s := snapshot{at: time.Now(), renewals: renewals.Load()}
	for _, m := range ms.meters {
		var out int64
		if atEnd {
			out = readCount(b, m.OutputBytes)
		}
		cpu, err := m.CPU()
		if err != nil {
			b.Fatal(err)
		}
		wakeups, err := m.Wakeups()
		if err != nil {
			b.Fatal(err)
		}
		requests, err := m.RoundTrips(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		if !atEnd {
			out = readCount(b, m.OutputMark)
		}
		s.redisCPU = append(s.redisCPU, cpu)
		s.redisOut = append(s.redisOut, out)
		s.wakeups += wakeups
		s.requests = append(s.requests, requests)
	}
	s.processCPU = ProcessCPU()
	return s
}

func readCount(b *testing.B, read func(context.Context) (int64, error)) int64 {
	v, err := read(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	return v
}

// baseline is what the masters and this process hold before any sidecar.
type baseline struct {
	used []int64
	heap uint64
	rss  int64
	// processCPU is this process's own CPU per second before any sidecar
	// (the benchmark framework, the meters, the masters' reapers), taken
	// off the sidecars' share.
	processCPU float64
}

// processCPURate is this process's CPU in µs/s over d.
func processCPURate(d time.Duration) float64 {
	start, cpu0 := time.Now(), ProcessCPU()
	time.Sleep(d)
	return float64((ProcessCPU() - cpu0).Microseconds()) / time.Since(start).Seconds()
}

func (ms *simMasterSet) baseline(b *testing.B) baseline {
	var base baseline
	for _, m := range ms.meters {
		used, err := m.UsedMemory(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		base.used = append(base.used, used)
	}
	base.heap = LiveHeap()
	rss, err := SettledRSS()
	if err != nil {
		b.Fatal(err)
	}
	base.rss = rss
	return base
}

func runSimulation(b *testing.B, groups, n int, window time.Duration) {
	ensureFileLimit(b, n, groups*simMasters)
	ms := startSimMasters(b, groups)
	base := ms.baseline(b)
	base.processCPU = processCPURate(time.Second)
	renewals := &RenewalCounter{}
	sidecars := startFleet(b, ms.groups, n, renewals)
	defer stopFleet(b, sidecars)
	holdLocks(b, sidecars)

	ctx, stopLoad := context.WithCancel(context.Background())
	callers := driveFleet(ctx, sidecars)
	time.Sleep(warmUp)
	start := ms.snapshot(b, renewals, false)
	time.Sleep(window)
	end := ms.snapshot(b, renewals, true)
	stopLoad()
	callers.Wait()

	reportSimulation(b, n, ms, base, start, end, sidecars)
}

// startFleet starts n sidecars whose first health rounds are spread over
// one server-info max age, as pods started at different moments check,
// and read the masters' server info, at different moments.
func startFleet(b *testing.B, groups [][]string, n int, renewals *RenewalCounter) []*simSidecar {
	out := make([]*simSidecar, n)
	for i := range out {
		s, err := StartSidecarGroups(groups, SidecarConfig{
			KeyPrefix: "sim:", KeyTTL: simKeyTTL, HealthInterval: simHealthEvery, HealthInfoMaxAge: simInfoMaxAge, NodeTimeout: simNodeTimeout,
			FirstCheckAfter: time.Duration(rand.Int64N(int64(simInfoMaxAge))), Renewals: renewals,
		})
		if err != nil {
			b.Fatal(err)
		}
		out[i] = &simSidecar{id: i, Sidecar: s}
	}
	return out
}

func stopFleet(b *testing.B, sidecars []*simSidecar) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, s := range sidecars {
		wg.Go(func() {
			if err := s.Close(ctx); err != nil {
				b.Errorf("closing sidecar %d: %v", s.id, err)
			}
		})
	}
	wg.Wait()
}

// simSidecar is a sidecar and what its caller recorded.
type simSidecar struct {
	id int
	*Sidecar
	cycles []cycle
}

// cycle is one acquire+release as the caller saw it. Open loop: the cycle
// latency counts from when it was due, so a caller that falls behind shows
// the queueing in the latency instead of silently sending less.
type cycle struct {
	due     time.Time
	acquire time.Duration // request sent to answer
	total   time.Duration // due to release answered
	failed  bool
}

// holdLocks has every sidecar take its long-lived locks (lease ttl 1h,
// renewed by the sidecar every third of the key ttl), 32 sidecars at a time.
func holdLocks(b *testing.B, sidecars []*simSidecar) {
	sem := make(chan struct{}, 32)
	var wg sync.WaitGroup
	for _, s := range sidecars {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			c, err := Dial(s.Addr)
			if err != nil {
				b.Error(err)
				return
			}
			defer c.Close()
			for j := range heldPerSidecar {
				if _, status, err := c.Acquire(fmt.Sprintf("held/%d/%d", s.id, j), "ttl=1h"); err != nil || status != 200 {
					b.Errorf("holding a lock on sidecar %d: %d %v", s.id, status, err)
				}
			}
		})
	}
	wg.Wait()
}

// driveFleet starts one caller per sidecar; they run until ctx ends.
func driveFleet(ctx context.Context, sidecars []*simSidecar) *sync.WaitGroup {
	var wg sync.WaitGroup
	for _, s := range sidecars {
		wg.Go(func() { s.drive(ctx) })
	}
	return &wg
}

// drive is one pod's caller: acquire+release cycles at Poisson arrivals of
// mean rate cyclesPerSecond, over its own keep-alive connection, cycling
// through namesPerSidecar names.
func (s *simSidecar) drive(ctx context.Context) {
	rng := rand.New(rand.NewPCG(uint64(s.id), 42))
	var c *Client
	defer func() {
		if c != nil {
			c.Close()
		}
	}()
	due := time.Now()
	for k := 0; ; k++ {
		due = due.Add(time.Duration(rng.ExpFloat64() / cyclesPerSecond * float64(time.Second)))
		if !ctxsleep.Until(ctx, due) {
			return
		}
		var rec cycle
		c, rec = s.cycleOnce(c, fmt.Sprintf("sim/%d/%d", s.id, k%namesPerSidecar), due)
		s.cycles = append(s.cycles, rec)
	}
}

// cycleOnce acquires and releases name, dialling again after any
// transport error; it returns the client to use next.
func (s *simSidecar) cycleOnce(c *Client, name string, due time.Time) (*Client, cycle) {
	rec := cycle{due: due, failed: true}
	if c == nil {
		var err error
		if c, err = Dial(s.Addr); err != nil {
			return nil, rec
		}
	}
	sent := time.Now()
	tok, status, err := c.Acquire(name, "ttl=10s")
	rec.acquire = time.Since(sent)
	if err != nil {
		c.Close()
		return nil, rec
	}
	if status != 200 {
		return c, rec
	}
	status, err = c.Release(name, tok)
	rec.total = time.Since(due)
	if err != nil {
		c.Close()
		return nil, rec
	}
	rec.failed = status != 204
	return c, rec
}

// reportSimulation reports the window's figures; the model's inputs are
// per master, per sidecar, or per second, as its formulas take them.
func reportSimulation(b *testing.B, n int, ms *simMasterSet, base baseline, start, end snapshot, sidecars []*simSidecar) {
	seconds := end.at.Sub(start.at).Seconds()
	perSidecar := float64(n)
	masters := float64(len(ms.meters))
	b.ReportMetric(perSidecar, "sidecars")
	b.ReportMetric(float64(len(ms.groups)), "groups")
	b.ReportMetric(simMasters, "masters/group")
	b.ReportMetric(cyclesPerSecond, "target-cycles/s/sidecar")
	b.ReportMetric(heldPerSidecar, "held/sidecar")
	b.ReportMetric(namesPerSidecar, "names/sidecar")
	b.ReportMetric(simKeyTTL.Seconds(), "key-ttl-s")
	b.ReportMetric(simHealthEvery.Seconds(), "health-interval-s")
	b.ReportMetric(simInfoMaxAge.Seconds(), "health-info-max-age-s")
	b.ReportMetric(seconds, "window-s")

	reportCycles(b, sidecars, start.at, end.at, seconds)
	b.ReportMetric(float64(end.renewals-start.renewals)/seconds, "renewals/s")

	var cpu, peak time.Duration
	var out int64
	for i := range ms.meters {
		d := end.redisCPU[i] - start.redisCPU[i]
		cpu += d
		peak = max(peak, d)
		out += end.redisOut[i] - start.redisOut[i]
	}
	b.ReportMetric(float64(cpu.Microseconds())/seconds/masters, "redis-cpu-µs/s/master")
	b.ReportMetric(float64(peak.Microseconds())/seconds, "redis-cpu-max-µs/s/master")
	b.ReportMetric(float64(out)/seconds/masters, "redis-out-bytes/s/master")
	var requests float64
	for i := range ms.meters {
		requests += float64(end.requests[i] - start.requests[i])
	}
	b.ReportMetric(requests/seconds/masters, "redis-round-trips/s/master")
	reportGroupSpread(b, ms, start, end, seconds)
	b.ReportMetric(requests/float64(end.wakeups-start.wakeups), "redis-requests/wakeup")
	processCPU := float64((end.processCPU-start.processCPU).Microseconds())/seconds - base.processCPU
	b.ReportMetric(processCPU/perSidecar, "sim-cpu-µs/s/sidecar")

	reportResidents(b, ms, base, perSidecar)
}

// reportGroupSpread reports, per master, the CPU and round trips of the
// least and the most loaded group (each a mean over the group's masters):
// with the names spread evenly they should agree.
func reportGroupSpread(b *testing.B, ms *simMasterSet, start, end snapshot, seconds float64) {
	cpuMin, cpuMax, rtMin, rtMax := math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
	for g := range ms.groups {
		var cpu time.Duration
		var rt int64
		for i := g * simMasters; i < (g+1)*simMasters; i++ {
			cpu += end.redisCPU[i] - start.redisCPU[i]
			rt += end.requests[i] - start.requests[i]
		}
		c := float64(cpu.Microseconds()) / seconds / simMasters
		r := float64(rt) / seconds / simMasters
		cpuMin, cpuMax = min(cpuMin, c), max(cpuMax, c)
		rtMin, rtMax = min(rtMin, r), max(rtMax, r)
	}
	b.ReportMetric(cpuMin, "redis-cpu-group-min-µs/s/master")
	b.ReportMetric(cpuMax, "redis-cpu-group-max-µs/s/master")
	b.ReportMetric(rtMin, "redis-round-trips-group-min/s/master")
	b.ReportMetric(rtMax, "redis-round-trips-group-max/s/master")
}

// reportCycles reports the rate, latencies and failures of the cycles due
// within the window.
func reportCycles(b *testing.B, sidecars []*simSidecar, from, to time.Time, seconds float64) {
	var acquire, total []time.Duration
	failed := 0
	for _, s := range sidecars {
		for _, c := range s.cycles {
			if c.due.Before(from) || !c.due.Before(to) {
				continue
			}
			if c.failed {
				failed++
				continue
			}
			acquire = append(acquire, c.acquire)
			total = append(total, c.total)
		}
	}
	done := float64(len(total))
	b.ReportMetric(done/seconds, "cycles/s")
	b.ReportMetric(done/seconds/float64(len(sidecars)), "cycles/s/sidecar")
	b.ReportMetric(float64(failed), "errors")
	reportPercentiles(b, "acquire", acquire)
	reportPercentiles(b, "cycle", total)
}

func reportPercentiles(b *testing.B, what string, ds []time.Duration) {
	if len(ds) == 0 {
		return
	}
	slices.Sort(ds)
	at := func(q float64) float64 { return float64(ds[int(q*float64(len(ds)-1))].Microseconds()) }
	b.ReportMetric(at(0.50), what+"-p50-µs")
	b.ReportMetric(at(0.99), what+"-p99-µs")
}

// reportResidents reports what stays resident once the window is over:
// connections and memory on the masters, memory in this process. Read
// after the CPU window because a full collection is not free.
func reportResidents(b *testing.B, ms *simMasterSet, base baseline, sidecars float64) {
	var clients, subscribed, used float64
	for i, m := range ms.meters {
		c, err := m.Clients(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		u, err := m.UsedMemory(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		clients += float64(c.Total)
		subscribed += float64(c.PubSub)
		used += float64(u - base.used[i])
	}
	masters := float64(len(ms.meters))
	b.ReportMetric(clients/masters, "clients/master")
	b.ReportMetric(subscribed/masters, "subscribed/master")
	b.ReportMetric(used/masters, "redis-bytes/master")
	heap := LiveHeap()
	rss, err := SettledRSS()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(int64(heap)-int64(base.heap))/sidecars, "sim-heap-bytes/sidecar")
	b.ReportMetric(float64(rss-base.rss)/sidecars, "sim-rss-bytes/sidecar")
}

// ensureFileLimit raises the soft open-file limit for n sidecars: per
// sidecar up to 3 connections per master, its listener and its caller's
// connection at both ends.
func ensureFileLimit(b *testing.B, n, masters int) {
	need := uint64(n*(3*masters+3) + 256)
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		b.Fatal(err)
	}
	if lim.Cur >= need {
		return
	}
	lim.Cur = min(need, lim.Max)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Cur < need {
		b.Fatalf("need %d open files for %d sidecars, the hard limit is %d: raise it (ulimit -Hn)", need, n, lim.Max)
	}
}
