package main

import (
	"fmt"
	"math"
	"regexp"
	"sort"
	"strings"

	"github.com/sidelock/sidelock/tools/benchread"
)

// results are the benchmark output the model reads.
type results = benchread.Results

// reader takes medians and remembers which were missing.
type reader struct {
	r       results
	missing []string
}

func (rd *reader) get(name, unit string) float64 {
	v, ok := rd.r.Median(name, unit)
	if !ok {
		rd.missing = append(rd.missing, name+" "+unit)
	}
	return v
}

// The benchmark lines the inputs come from (tools/bench/model_test.go).
const (
	costModel       = "CostModel/"
	opsEngineLone3  = costModel + "ops/path=engine/masters=3/callers=1"
	opsEngineLone5  = costModel + "ops/path=engine/masters=5/callers=1"
	opsEngineFleet3 = costModel + "ops/path=engine/masters=3/callers=16"
	opsEngineFleet5 = costModel + "ops/path=engine/masters=5/callers=16"
	opsHTTP3        = costModel + "ops/path=http/masters=3"
	opsHTTP5        = costModel + "ops/path=http/masters=5"
	renewal1        = costModel + "renewal/batch=1"
	renewal100      = costModel + "renewal/batch=100"
	ticks           = costModel + "background/sidecars=50/health=none"
	healthPod       = costModel + "background/sidecars=50/health=1s/rounds=info"
	healthFleet     = costModel + "background/sidecars=50/health=50ms/rounds=info"
	pingPod         = costModel + "background/sidecars=50/health=1s/rounds=ping"
	pingFleet       = costModel + "background/sidecars=50/health=50ms/rounds=ping"
	memberLone      = costModel + "member-check/callers=1"
	memberFleet     = costModel + "member-check/callers=16"
	memberPaced     = costModel + "member-check/paced"
	connections     = costModel + "connections"
	connMemory      = costModel + "memory/conns=500"
	lockMemory      = costModel + "memory/locks=3000"
	sidecarRSS      = "SidecarIdleRSS"
	renewalBatch    = 100.0
	healthMasters   = 3.0 // masters in the background runs
)

// inputsFrom turns the benchmark medians into model inputs; it fails
// listing every line that is missing. The masters' per-operation and
// per-round costs come in two regimes, many connections busy at once and
// one lone caller (see utilisation); the sidecar's are a lone pod's.
func inputsFrom(r results) (Inputs, error) {
	rd := &reader{r: r}
	var in Inputs
	in.RedisAcquire, in.RedisRelease = rd.get(opsEngineFleet3, "redis-cpu-µs/acquire"), rd.get(opsEngineFleet3, "redis-cpu-µs/release")
	in.RedisAcquire5, in.RedisRelease5 = rd.get(opsEngineFleet5, "redis-cpu-µs/acquire"), rd.get(opsEngineFleet5, "redis-cpu-µs/release")
	in.RedisAcquireLone, in.RedisReleaseLone = rd.get(opsEngineLone3, "redis-cpu-µs/acquire"), rd.get(opsEngineLone3, "redis-cpu-µs/release")
	in.RedisAcquireLone5, in.RedisReleaseLone5 = rd.get(opsEngineLone5, "redis-cpu-µs/acquire"), rd.get(opsEngineLone5, "redis-cpu-µs/release")
	in.OutPerCycle = rd.get(opsEngineFleet3, "redis-out-bytes/cycle")
	in.RedisAcquireIdle, in.RedisReleaseIdle = rd.get(opsHTTP3, "redis-cpu-µs/acquire"), rd.get(opsHTTP3, "redis-cpu-µs/release")
	in.SidecarAcquire3, in.SidecarRelease3 = rd.get(opsHTTP3, "sidecar-cpu-µs/acquire"), rd.get(opsHTTP3, "sidecar-cpu-µs/release")
	in.SidecarAcquire5, in.SidecarRelease5 = rd.get(opsHTTP5, "sidecar-cpu-µs/acquire"), rd.get(opsHTTP5, "sidecar-cpu-µs/release")
	in.RedisRenewCall, in.RedisRenewKey = callAndKey(rd.get(renewal1, "redis-cpu-µs/renewal-call"), rd.get(renewal100, "redis-cpu-µs/renewal-call"))
	in.SidecarRenewCall, in.SidecarRenewKey = callAndKey(rd.get(renewal1, "sidecar-cpu-µs/renewal-call"), rd.get(renewal100, "sidecar-cpu-µs/renewal-call"))
	in.RedisIdle, in.SidecarTick = rd.get(ticks, "redis-idle-cpu-µs/s"), rd.get(ticks, "sidecar-tick-cpu-µs/s")
	in.RedisBackground, in.OutPerHealthRound = rd.get(healthFleet, "redis-cpu-µs/health-round"), rd.get(healthFleet, "redis-out-bytes/health-round")
	in.RedisBackgroundLone = rd.get(healthPod, "redis-cpu-µs/health-round")
	in.RedisPingRound, in.OutPerPingRound = rd.get(pingFleet, "redis-cpu-µs/health-round"), rd.get(pingFleet, "redis-out-bytes/health-round")
	in.RedisPingRoundLone = rd.get(pingPod, "redis-cpu-µs/health-round")
	in.SidecarHealthRound, in.SidecarPingRound = sidecarPerRound(rd, healthPod, in.SidecarTick), sidecarPerRound(rd, pingPod, in.SidecarTick)
	in.RedisMemberCheck, in.RedisMemberCheckLone = rd.get(memberFleet, "redis-cpu-µs/member-check"), rd.get(memberLone, "redis-cpu-µs/member-check")
	in.RedisMemberCheckIdle, in.SidecarMemberCheck = rd.get(memberPaced, "redis-cpu-µs/member-check"), rd.get(memberPaced, "sidecar-cpu-µs/member-check")
	in.OutPerMemberCheck = rd.get(memberLone, "redis-out-bytes/member-check")
	in.CommandsPerMemberCheck, in.RoundTripsPerMemberCheck = rd.get(memberLone, "redis-commands/member-check"), rd.get(memberLone, "redis-round-trips/member-check")
	in.SidecarHeap, in.SidecarRSS = rd.get(healthPod, "sidecar-heap-bytes/sidecar"), rd.get(healthPod, "sidecar-rss-bytes/sidecar")
	in.ConnsPerSidecar, in.ConnsAfterWait = rd.get(connections, "conns-active/sidecar"), rd.get(connections, "conns-after-wait/sidecar")
	in.BusyConnBytes, in.IdleConnBytes = connBytes(rd.get(connMemory, "redis-bytes/busy-conn"), rd.get(connMemory, "redis-bytes/idle-conn"), rd.get(connMemory, "redis-bytes/conn"))
	in.LockBytes, in.FenceBytes = rd.get(lockMemory, "redis-bytes/lock"), rd.get(lockMemory, "redis-bytes/fence-counter")
	in.ScriptsBytes = rd.get(lockMemory, "redis-bytes/scripts")
	in.SidecarHeapPerLock = rd.get(lockMemory, "sidecar-heap-bytes/lock")
	if len(rd.missing) > 0 {
		return in, fmt.Errorf("missing benchmark results:\n  %s", strings.Join(rd.missing, "\n  "))
	}
	addProcessRSS(&in, r)
	return in, nil
}

// sidecarPerRound is the sidecar CPU of one health round of one master,
// from a background run at one round per second: its CPU less the
// renewer's tick, over the rounds it made.
func sidecarPerRound(rd *reader, name string, tick float64) float64 {
	rounds := rd.get(name, "health-rounds/s/sidecar") * healthMasters
	return math0(rd.get(name, "sidecar-cpu-µs/s")-tick) / math.Max(rounds, 1e-9)
}

// callAndKey splits ExtendMany's cost into a per-call and a per-key part
// from calls of 1 and of renewalBatch keys.
func callAndKey(one, batch float64) (call, key float64) {
	key = math0((batch - one) / (renewalBatch - 1))
	return math0(one - key), key
}

// connBytes adds to the CLIENT LIST figure of each kind of connection the
// server's bookkeeping outside it (used_memory per connection minus the
// mean of the two kinds, which were opened in equal numbers).
func connBytes(busy, idle, perConn float64) (float64, float64) {
	overhead := math0(perConn - (busy+idle)/2)
	return busy + overhead, idle + overhead
}

// addProcessRSS fills in a real sidecar process's memory when
// BenchmarkSidecarIdleRSS ran (make bench).
func addProcessRSS(in *Inputs, r results) {
	idle, ok1 := r.Median(sidecarRSS, "idle-RSS-MB")
	held, ok2 := r.Median(sidecarRSS, "10k-held-RSS-MB")
	if ok1 && ok2 {
		in.PodIdleRSS = idle * (1 << 20)
		in.PodRSSPerLock = math0(held-idle) * (1 << 20) / 10000
	}
}

func math0(v float64) float64 { return max(v, 0) }

// SimRun is one size of BenchmarkScaleSim.
type SimRun struct {
	Name                       string // the sub-benchmark: "sidecars=100", "groups=2/sidecars=100"
	Sidecars                   float64
	Groups                     float64 // quorum groups of 3 masters; per-master figures are means over all
	GroupCPUMin, GroupCPUMax   float64 // µs/s per master, of the least and most loaded group
	GroupRTMin, GroupRTMax     float64 // round trips/s per master, likewise
	RoundTrips                 float64 // requests/s per master (a health round counts once)
	TargetCycles, Cycles       float64 // per sidecar per second
	Held, Names                float64 // per sidecar
	KeyTTL, HealthInterval     float64 // seconds
	InfoMaxAge                 float64 // seconds; 0 in outputs from before it existed (every round)
	Window                     float64 // seconds
	Renewals                   float64 // per second, all sidecars
	RedisCPU, RedisCPUMax      float64 // µs/s per master (mean, busiest)
	Clients, Subscribed        float64 // per master
	RedisMemory, RedisOut      float64 // bytes and bytes/s per master
	SimCPU, SimHeap, SimRSS    float64 // per sidecar: µs/s, bytes, bytes
	AcquireP50, AcquireP99     float64 // µs
	CycleP50, CycleP99, Errors float64
	RequestsPerWakeup          float64 // requests the masters served per event-loop wake-up
}

var simName = regexp.MustCompile(`^ScaleSim/((?:groups=\d+/)?sidecars=\d+)\|`)

// simRuns reads every simulated fleet: one group first, smallest first.
func simRuns(r results) ([]SimRun, error) {
	names := map[string]bool{}
	for k := range r {
		if m := simName.FindStringSubmatch(k); m != nil {
			names[m[1]] = true
		}
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("no BenchmarkScaleSim results")
	}
	var runs []SimRun
	for name := range names {
		run, err := simRun(r, "ScaleSim/"+name)
		if err != nil {
			return nil, err
		}
		run.Name = name
		runs = append(runs, run)
	}
	sort.Slice(runs, func(i, j int) bool {
		if runs[i].Groups != runs[j].Groups {
			return runs[i].Groups < runs[j].Groups
		}
		return runs[i].Sidecars < runs[j].Sidecars
	})
	return runs, nil
}

func simRun(r results, name string) (SimRun, error) {
	rd := &reader{r: r}
	g := func(unit string) float64 { return rd.get(name, unit) }
	run := SimRun{
		Sidecars: g("sidecars"), TargetCycles: g("target-cycles/s/sidecar"), Cycles: g("cycles/s/sidecar"),
		Held: g("held/sidecar"), Names: g("names/sidecar"), KeyTTL: g("key-ttl-s"), HealthInterval: g("health-interval-s"),
		Window: g("window-s"), Renewals: g("renewals/s"),
		RedisCPU: g("redis-cpu-µs/s/master"), RedisCPUMax: g("redis-cpu-max-µs/s/master"),
		Clients: g("clients/master"), Subscribed: g("subscribed/master"),
		RedisMemory: g("redis-bytes/master"), RedisOut: g("redis-out-bytes/s/master"),
		SimCPU: g("sim-cpu-µs/s/sidecar"), SimHeap: g("sim-heap-bytes/sidecar"), SimRSS: g("sim-rss-bytes/sidecar"),
		AcquireP50: g("acquire-p50-µs"), AcquireP99: g("acquire-p99-µs"),
		CycleP50: g("cycle-p50-µs"), CycleP99: g("cycle-p99-µs"), Errors: g("errors"),
		RequestsPerWakeup: g("redis-requests/wakeup"), RoundTrips: g("redis-round-trips/s/master"),
		Groups: 1,
	}
	run.InfoMaxAge, _ = r.Median(name, "health-info-max-age-s")
	// Older outputs (one group only) have no group figures.
	if v, ok := r.Median(name, "groups"); ok {
		run.Groups = v
		run.GroupCPUMin, run.GroupCPUMax = g("redis-cpu-group-min-µs/s/master"), g("redis-cpu-group-max-µs/s/master")
		run.GroupRTMin, run.GroupRTMax = g("redis-round-trips-group-min/s/master"), g("redis-round-trips-group-max/s/master")
	} else {
		run.GroupCPUMin, run.GroupCPUMax = run.RedisCPU, run.RedisCPU
		run.GroupRTMin, run.GroupRTMax = run.RoundTrips, run.RoundTrips
	}
	if len(rd.missing) > 0 {
		return run, fmt.Errorf("missing simulation results:\n  %s", strings.Join(rd.missing, "\n  "))
	}
	return run, nil
}

// Fleet is the model's description of the simulated fleet: its groups of
// three masters, the achieved rate, and held locks taken together (so a
// sidecar's in one group renew in one call).
func (s SimRun) Fleet() Fleet {
	return Fleet{
		Pods: s.Sidecars, Masters: 3, Groups: int(s.Groups), Cycles: s.Cycles, Held: s.Held, RenewBatch: s.Held,
		Names: s.Names, KeyTTL: s.KeyTTL, HealthInterval: s.HealthInterval, InfoMaxAge: s.InfoMaxAge,
	}
}
