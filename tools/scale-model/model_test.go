package main

import (
	"bytes"
	"fmt"
	"image/png"
	"math"
	"strings"
	"testing"

	"github.com/sidelock/sidelock/tools/benchread"

	"golang.org/x/image/font/sfnt"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
)

// fixedInputs are round unit costs whose products are easy to check by hand.
var fixedInputs = Inputs{
	RedisAcquire: 60, RedisRelease: 40, RedisAcquire5: 80, RedisRelease5: 40,
	// Lone costs equal to the warm ones keep the arithmetic linear; the
	// wake-up term has a test of its own.
	RedisAcquireLone: 60, RedisReleaseLone: 40, RedisAcquireLone5: 80, RedisReleaseLone5: 40, RedisBackgroundLone: 50,
	RedisRenewCall: 10, RedisRenewKey: 2, RedisBackground: 50, RedisIdle: 1000,
	OutPerCycle: 100, OutPerHealthRound: 2000,
	BusyConnBytes: 20000, IdleConnBytes: 2000, LockBytes: 300, FenceBytes: 200, ScriptsBytes: 150000,
	ConnsPerSidecar: 2, ConnsAfterWait: 3,
	SidecarAcquire3: 300, SidecarRelease3: 200, SidecarAcquire5: 500, SidecarRelease5: 300,
	SidecarRenewCall: 40, SidecarRenewKey: 5, SidecarHealthRound: 100, SidecarTick: 200,
	RedisPingRound: 10, RedisPingRoundLone: 10, OutPerPingRound: 10, SidecarPingRound: 20,
	RedisMemberCheck: 30, RedisMemberCheckLone: 30, OutPerMemberCheck: 100, SidecarMemberCheck: 50,
}

var fixedFleet = Fleet{Pods: 100, Masters: 3, Groups: 2, Cycles: 4, Held: 2, RenewBatch: 2, Names: 8, KeyTTL: 10, HealthInterval: 1}

func near(t *testing.T, what string, got, want float64) {
	t.Helper()
	if math.Abs(got-want) > 1e-6*math.Max(1, math.Abs(want)) {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}

func TestPerMasterMultipliesOutTheFleet(t *testing.T) {
	m := fixedInputs.PerMaster(fixedFleet)
	// 100 pods × 4 cycles/s over 2 groups = 200 cycles/s, × (60+40) µs.
	near(t, "ops CPU", m.CPUOps, 20000)
	// 1 held lock per pod per group, alone in its call: 100 × 0.3 calls/s
	// × 10 µs, plus 100 keys × 0.3/s × 2 µs.
	near(t, "renewal CPU", m.CPURenewals, 300+60)
	// Every pod checks every master: 100 × 50 µs per 1 s round.
	near(t, "health CPU", m.CPUHealth, 5000)
	// Every pod records its member list on every master every 10 s: 10
	// checks/s × 30 µs.
	near(t, "member-list CPU", m.CPUMembers, 300)
	near(t, "CPU", m.CPU, 1000+20000+360+5000+300)
	near(t, "connections", m.Conns, 200)
	// The scripts, 2 busy connections per pod, 100 held keys, 100 × 8 / 2
	// fence counters.
	near(t, "memory", m.Memory, 150000+100*2*20000+100*300+400*200)
	near(t, "output", m.OutBytes, 200*100+100*2000+10*100)
	// 3 per cycle, 1 renewal call per pod per 3.3 s, 1 per health round,
	// 1 per member-list check.
	near(t, "requests", m.Requests, 600+30+100+10)
}

func TestWakeUpsCostMoreOnAQuietMaster(t *testing.T) {
	// 1000 commands/s at 100 µs warm, 300 µs when they wake the master:
	// u = (0.1 + 0.2) / (1 + 0.2) = 0.25, and the cost agrees with it.
	l := load{rate: 1000, warm: 100, lone: 300}
	u := utilisation(l)
	near(t, "utilisation", u, 0.25)
	near(t, "cost", l.cost(u), 250000)
	// A trickle pays nearly the lone cost, a flood nearly the warm one.
	trickle := load{rate: 1, warm: 100, lone: 300}
	near(t, "trickle", trickle.cost(utilisation(trickle)), 300*(1-0.0003/1.0002)+100*0.0003/1.0002)
	flood := load{rate: 9000, warm: 100, lone: 300}
	if c := flood.cost(utilisation(flood)) / 9000; c > 130 {
		t.Errorf("a saturated master pays %v µs per command, want close to the warm 100", c)
	}
	in := fixedInputs
	in.RedisAcquireLone, in.RedisReleaseLone = 260, 40 // 200 µs more per cycle when alone
	f := fixedFleet
	f.Held = 0
	m := in.PerMaster(f)
	a := (200*100 + 100*50.0 + 10*30) / 1e6 // cycles, health rounds and member-list checks, warm
	b := 200 * 200.0 / 1e6
	near(t, "ops CPU", m.CPUOps, 200*(100+(1-(a+b)/(1+b))*200))
}

func TestWaitingPodsKeepAnIdleSubscriptionConnection(t *testing.T) {
	f := fixedFleet
	f.Waits = true
	m := fixedInputs.PerMaster(f)
	near(t, "connections", m.Conns, 300)
	near(t, "memory", m.Memory, 150000+100*(2*20000+2000)+100*300+400*200)
}

func TestASlowHealthIntervalLeavesItsConnectionIdle(t *testing.T) {
	f := fixedFleet
	f.HealthInterval = 10
	m := fixedInputs.PerMaster(f)
	near(t, "health CPU", m.CPUHealth, 500)
	// The lock connection still carries 3 × 4/2 + 0.3 requests/s: busy;
	// the health connection, one round per 10 s, is busy 2 s in 10.
	near(t, "memory", m.Memory, 150000+100*(2000+0.2*18000+20000)+100*300+400*200)
	// 0.05 cycles/s over 2 groups (0.075 requests/s), one renewal call
	// per 3.3 s and one member-list check per 10 s: 0.475 requests/s,
	// busy 95 % of the time.
	f.Cycles = 0.05
	near(t, "memory, rare locking", fixedInputs.PerMaster(f).Memory, 150000+100*(2000+0.2*18000+2000+0.95*18000)+100*300+400*200)
}

func TestBatchedRenewalsShareACall(t *testing.T) {
	f := fixedFleet
	f.Groups, f.Held, f.RenewBatch = 1, 4, 4
	// One call per pod per renewal period for 4 keys: 100 × 0.3 × 10 µs
	// + 400 keys × 0.3 × 2 µs.
	near(t, "renewal CPU", fixedInputs.PerMaster(f).CPURenewals, 300+240)
}

func TestPerPodCountsEveryMasterOfEveryGroup(t *testing.T) {
	f := fixedFleet
	f.Masters = 4 // halfway between the 3- and 5-master measurements
	p := fixedInputs.PerPod(f)
	ops := 4 * (400.0 + 250)
	renewals := 2*0.3*40 + 2*0.3*5.0
	health := 8 * 100.0 // 2 groups × 4 masters, one round per second
	members := 8 * 50.0 / 10
	near(t, "pod CPU", p.CPU, ops+renewals+health+members+200)
	near(t, "pod connections", p.Conns, 16)
}

func TestMaxPodsStopsAtTheFirstWall(t *testing.T) {
	f := Fleet{Masters: 3, Groups: 1, Cycles: 10, KeyTTL: 10, HealthInterval: 1, RenewBatch: 1}
	// Per pod per master: 10 × 100 + 50 + 30/10 = 1053 µs/s; budget 0.5 core.
	c := fixedInputs.MaxPods(f, Walls{CPUBudget: 0.5, MaxClients: 10000})
	near(t, "cpu wall", c.CPUPods, math.Floor((500000-1000)/1053.0))
	near(t, "connection wall", c.ConnsPods, 5000)
	if c.Binding != "cpu" || c.Pods != c.CPUPods {
		t.Errorf("binding %q at %v pods, want the cpu wall", c.Binding, c.Pods)
	}
	f.Cycles = 0.1
	c = fixedInputs.MaxPods(f, Walls{CPUBudget: 0.5, MaxClients: 10000})
	if c.Binding != "connections" || c.Pods != 5000 {
		t.Errorf("binding %q at %v pods, want 5000 by connections", c.Binding, c.Pods)
	}
}

func TestGroupsNeededIsTheFewestThatFit(t *testing.T) {
	f := Fleet{Pods: 1000, Masters: 3, Cycles: 10, KeyTTL: 10, HealthInterval: 1, RenewBatch: 1}
	w := Walls{CPUBudget: 0.5}
	// 1000 × 10 × 100 µs / K + 1000 × 50 + 100 × 30 + 1000 ≤ 500 000
	// → K ≥ 2.24.
	if k := fixedInputs.GroupsNeeded(f, w); k != 3 {
		t.Errorf("groups = %d, want 3", k)
	}
	// Health and member lists alone: 10 000 pods × 50 µs/s + 1000 × 30
	// µs/s = 0.53 s/s, over the budget.
	f.Pods = 10000
	if k := fixedInputs.GroupsNeeded(f, w); k != 0 {
		t.Errorf("groups = %d, want 0 (health rounds and member-list checks alone exceed the budget)", k)
	}
	// Member-list checks alone decide it when health rounds are cheap
	// enough: 10 000 × 50/2 + 1000 × 30 + 1000 = 281 000 fits, 10 000 ×
	// 50/2 + 1000 × 250 + 1000 does not.
	f.HealthInterval, f.Cycles = 2, 0
	if k := fixedInputs.GroupsNeeded(f, w); k != 1 {
		t.Errorf("groups = %d, want 1", k)
	}
	in := fixedInputs
	in.RedisMemberCheck, in.RedisMemberCheckLone = 250, 250
	if k := in.GroupsNeeded(f, w); k != 0 {
		t.Errorf("groups = %d, want 0 (member-list checks push the background past the budget)", k)
	}
}

func TestCallAndKeySplitsTheRenewalCost(t *testing.T) {
	call, key := callAndKey(12, 12+99*2)
	near(t, "call", call, 10)
	near(t, "key", key, 2)
}

func TestConnBytesSpreadsTheServersBookkeeping(t *testing.T) {
	busy, idle := connBytes(20000, 2000, 11500)
	near(t, "busy", busy, 20500)
	near(t, "idle", idle, 2500)
}

const sampleBench = `goos: linux
BenchmarkCostModel/ops/path=engine/masters=3/callers=1-2   	 100	 1 ns/op	 90 redis-cpu-µs/acquire	 50 redis-cpu-µs/release
BenchmarkCostModel/ops/path=engine/masters=5/callers=1-2   	 100	 1 ns/op	 95 redis-cpu-µs/acquire	 50 redis-cpu-µs/release
BenchmarkCostModel/ops/path=engine/masters=3/callers=16-2   	 100	 1 ns/op	 60 redis-cpu-µs/acquire	 40 redis-cpu-µs/release	 150 redis-out-bytes/cycle
BenchmarkCostModel/ops/path=engine/masters=3/callers=16-2   	 100	 1 ns/op	 64 redis-cpu-µs/acquire	 40 redis-cpu-µs/release	 150 redis-out-bytes/cycle
BenchmarkCostModel/ops/path=engine/masters=3/callers=16-2   	 100	 1 ns/op	 62 redis-cpu-µs/acquire	 40 redis-cpu-µs/release	 150 redis-out-bytes/cycle
BenchmarkCostModel/ops/path=engine/masters=5/callers=16-2   	 100	 1 ns/op	 70 redis-cpu-µs/acquire	 40 redis-cpu-µs/release
BenchmarkCostModel/ops/path=http/masters=3-2   	 100	 1 ns/op	 300 sidecar-cpu-µs/acquire	 200 sidecar-cpu-µs/release	 150 redis-cpu-µs/acquire	 80 redis-cpu-µs/release
BenchmarkCostModel/ops/path=http/masters=5-2   	 100	 1 ns/op	 500 sidecar-cpu-µs/acquire	 300 sidecar-cpu-µs/release
BenchmarkCostModel/renewal/batch=1-2   	 100	 1 ns/op	 12 redis-cpu-µs/renewal-call	 42 sidecar-cpu-µs/renewal-call
BenchmarkCostModel/renewal/batch=100-2   	 100	 1 ns/op	 210 redis-cpu-µs/renewal-call	 537 sidecar-cpu-µs/renewal-call
BenchmarkCostModel/member-check/callers=1-2   	 100	 1 ns/op	 45 redis-cpu-µs/member-check	 68 redis-out-bytes/member-check	 7 redis-commands/member-check	 1 redis-round-trips/member-check	 50 sidecar-cpu-µs/member-check
BenchmarkCostModel/member-check/callers=16-2   	 100	 1 ns/op	 20 redis-cpu-µs/member-check	 70 redis-out-bytes/member-check	 7 redis-commands/member-check	 1 redis-round-trips/member-check	 25 sidecar-cpu-µs/member-check
BenchmarkCostModel/member-check/paced-2   	 3	 1 ns/op	 110 redis-cpu-µs/member-check	 80 redis-out-bytes/member-check	 7 redis-commands/member-check	 1 redis-round-trips/member-check	 160 sidecar-cpu-µs/member-check
BenchmarkCostModel/background/sidecars=50/health=none-2   	 1	 1 ns/op	 2000 redis-idle-cpu-µs/s	 200 sidecar-tick-cpu-µs/s
BenchmarkCostModel/background/sidecars=50/health=1s/rounds=info-2   	 1	 1 ns/op	 110 redis-cpu-µs/health-round	 1 health-rounds/s/sidecar	 500 sidecar-cpu-µs/s	 1000000 sidecar-heap-bytes/sidecar	 150000 sidecar-rss-bytes/sidecar
BenchmarkCostModel/background/sidecars=50/health=1s/rounds=ping-2   	 1	 1 ns/op	 30 redis-cpu-µs/health-round	 1 health-rounds/s/sidecar	 260 sidecar-cpu-µs/s	 1000000 sidecar-heap-bytes/sidecar	 150000 sidecar-rss-bytes/sidecar
BenchmarkCostModel/background/sidecars=50/health=50ms/rounds=info-2   	 1	 1 ns/op	 40 redis-cpu-µs/health-round	 1000 redis-out-bytes/health-round	 20 health-rounds/s/sidecar
BenchmarkCostModel/background/sidecars=50/health=50ms/rounds=ping-2   	 1	 1 ns/op	 8 redis-cpu-µs/health-round	 7 redis-out-bytes/health-round	 20 health-rounds/s/sidecar
BenchmarkCostModel/connections-2   	 1	 1 ns/op	 2 conns-active/sidecar	 3 conns-after-wait/sidecar
BenchmarkCostModel/memory/conns=500-2   	 1	 1 ns/op	 20000 redis-bytes/busy-conn	 2000 redis-bytes/idle-conn	 11500 redis-bytes/conn
BenchmarkCostModel/memory/locks=3000-2   	 1	 1 ns/op	 300 redis-bytes/lock	 200 redis-bytes/fence-counter	 1000 sidecar-heap-bytes/lock	 200000 redis-bytes/scripts
BenchmarkSidecarIdleRSS-2   	 1	 1 ns/op	 35 10k-held-RSS-MB	 15 idle-RSS-MB
`

// failOnWarning is the warnings' writer for input benchfmt must read whole.
type failOnWarning struct{ t *testing.T }

func (w failOnWarning) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Errorf("warning: %s", p)
	return len(p), nil
}

func TestInputsFromBenchmarkOutput(t *testing.T) {
	r, err := benchread.Read(strings.NewReader(sampleBench), "sample", failOnWarning{t})
	if err != nil {
		t.Fatal(err)
	}
	in, err := inputsFrom(r)
	if err != nil {
		t.Fatal(err)
	}
	near(t, "acquire (median of 3)", in.RedisAcquire, 62)
	near(t, "renew call", in.RedisRenewCall, 10)
	near(t, "renew key", in.RedisRenewKey, 2)
	near(t, "health round at fleet rate", in.RedisBackground, 40)
	near(t, "health round, lone", in.RedisBackgroundLone, 110)
	near(t, "sidecar health round", in.SidecarHealthRound, 100) // (500 − 200) / 3 masters
	near(t, "ping round at fleet rate", in.RedisPingRound, 8)
	near(t, "ping round, lone", in.RedisPingRoundLone, 30)
	near(t, "ping round output", in.OutPerPingRound, 7)
	near(t, "sidecar ping round", in.SidecarPingRound, 20) // (260 − 200) / 3 masters
	near(t, "member check, warm", in.RedisMemberCheck, 20)
	near(t, "member check, lone", in.RedisMemberCheckLone, 45)
	near(t, "member check after 5 ms idle", in.RedisMemberCheckIdle, 110)
	near(t, "member check output (lone caller's)", in.OutPerMemberCheck, 68)
	near(t, "member check commands", in.CommandsPerMemberCheck, 7)
	near(t, "member check round trips", in.RoundTripsPerMemberCheck, 1)
	near(t, "sidecar member check (paced)", in.SidecarMemberCheck, 160)
	near(t, "busy connection", in.BusyConnBytes, 20500)
	near(t, "pod RSS per lock", in.PodRSSPerLock, 20*(1<<20)/10000.0)
}

func TestInputsFromNamesWhatIsMissing(t *testing.T) {
	r, _ := benchread.Read(strings.NewReader(strings.Split(sampleBench, "BenchmarkCostModel/renewal")[0]), "sample", failOnWarning{t})
	_, err := inputsFrom(r)
	if err == nil || !strings.Contains(err.Error(), "renewal/batch=1 redis-cpu-µs/renewal-call") {
		t.Errorf("err = %v, want the missing renewal line named", err)
	}
}

func TestModelErrorIsRelativeToTheMeasurement(t *testing.T) {
	near(t, "error", modelError(110, 100), 0.10)
	near(t, "error", modelError(90, 100), -0.10)
	if !math.IsNaN(modelError(1, 0)) {
		t.Error("an error against 0 must be NaN")
	}
	if got := percent(-0.123); got != "-12 %" {
		t.Errorf("percent = %q", got)
	}
	if got := num(34129); got != "34\u202f129" {
		t.Errorf("num = %q", got)
	}
}

func TestFigureRendersAPNG(t *testing.T) {
	runs := []SimRun{{Sidecars: 10, TargetCycles: 2, Cycles: 2, Held: 2, Names: 8, KeyTTL: 10, HealthInterval: 1, RedisCPU: 5000, Clients: 20, RedisMemory: 1 << 20, SimCPU: 3000}}
	fig := plotFigure(fixedInputs, runs, options{current: Settings{Walls: Walls{CPUBudget: 0.5, MaxClients: 10000}}, plotMaxSidecar: 10000})
	var buf bytes.Buffer
	if err := fig.render(&buf); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() != figW || b.Dy() != figH {
		t.Errorf("image is %v", b)
	}
}

// The header and every label are drawn whole: each character has a
// glyph in its font, and the title, the wrapped subtitle and the legend
// fit within the image.
func TestFigureTextFitsAndHasGlyphs(t *testing.T) {
	runs := []SimRun{{Sidecars: 10, TargetCycles: 2, Held: 2, KeyTTL: 10, HealthInterval: 1}, {Sidecars: 10, Groups: 2, TargetCycles: 2, Held: 2, KeyTTL: 10, HealthInterval: 1}}
	fig := plotFigure(fixedInputs, runs, options{current: Settings{Walls: Walls{CPUBudget: 0.5, MaxClients: 10000}}, plotMaxSidecar: 10000})
	width, subtitle := fig.header()
	if len(subtitle) < len(fig.subtitle) {
		t.Fatalf("subtitle %q wrapped to %q", fig.subtitle, subtitle)
	}
	labels, _ := fig.legendEntries()
	legend := vg.Length(0)
	for _, l := range labels {
		legend += legendStyle.Width(l) + vg.Points(34+6+28)
	}
	if legend > width {
		t.Errorf("legend is %v wide, the image %v", legend, width)
	}
	check := func(sty text.Style, s string) {
		t.Helper()
		if w := sty.Width(s); w > width {
			t.Errorf("%q is %v wide, the image %v", s, w, width)
		}
		face := sty.Handler.Cache().Lookup(sty.Font, sty.Font.Size)
		var buf sfnt.Buffer
		for _, r := range s {
			if i, err := face.Face.GlyphIndex(&buf, r); err != nil || i == 0 {
				t.Errorf("no glyph for %q in %q (%s)", r, s, face.Name())
			}
		}
	}
	check(titleStyle, fig.title)
	for _, line := range subtitle {
		check(subtitleStyle, line)
	}
	for _, l := range labels {
		check(legendStyle, l)
	}
	for _, p := range fig.panels {
		check(textStyle(sansBold, 14, black), p.title)
		check(textStyle(sans, 12, black), p.wallLabel)
	}
	check(textStyle(sans, 13, black), fig.xLabel+" 0.01 0.1 1 10 100 1K 10K 100K 1M")
}

func TestMoreGroupsHalveLockLoadButNotHealthOrConnections(t *testing.T) {
	one, two := fixedFleet, fixedFleet
	one.Groups = 1
	m1, m2 := fixedInputs.PerMaster(one), fixedInputs.PerMaster(two)
	near(t, "ops CPU K=2 / K=1", m2.CPUOps/m1.CPUOps, 0.5)
	near(t, "lock requests K=2 / K=1", (m2.LockReqs-100*0.3)/(m1.LockReqs-100*0.3), 0.5)
	near(t, "health CPU", m2.CPUHealth, m1.CPUHealth)
	near(t, "member-list CPU", m2.CPUMembers, m1.CPUMembers)
	near(t, "health and member-list requests", m2.Requests-m2.LockReqs, m1.Requests-m1.LockReqs)
	near(t, "connections", m2.Conns, m1.Conns)
	// 3 requests per cycle (200 cycles/s at K=2), 1 renewal call per pod
	// per 3.3 s, 1 health round per pod per second, 1 member-list check
	// per pod per 10 s.
	near(t, "requests", m2.Requests, 600+30+100+10)
}

func TestSimRunsReadGroupedFleets(t *testing.T) {
	out := `BenchmarkScaleSim/sidecars=100-2 1 1 ns/op 100 sidecars 2 target-cycles/s/sidecar 2 cycles/s/sidecar 2 held/sidecar 8 names/sidecar 10 key-ttl-s 1 health-interval-s 15 window-s 60 renewals/s 40000 redis-cpu-µs/s/master 41000 redis-cpu-max-µs/s/master 200 clients/master 0 subscribed/master 1 redis-bytes/master 1 redis-out-bytes/s/master 1 sim-cpu-µs/s/sidecar 1 sim-heap-bytes/sidecar 1 sim-rss-bytes/sidecar 1 acquire-p50-µs 1 acquire-p99-µs 1 cycle-p50-µs 1 cycle-p99-µs 0 errors 1 redis-requests/wakeup 700 redis-round-trips/s/master
BenchmarkScaleSim/groups=2/sidecars=100-2 1 1 ns/op 100 sidecars 2 groups 2 target-cycles/s/sidecar 2 cycles/s/sidecar 2 held/sidecar 8 names/sidecar 10 key-ttl-s 1 health-interval-s 15 window-s 60 renewals/s 25000 redis-cpu-µs/s/master 26000 redis-cpu-max-µs/s/master 24000 redis-cpu-group-min-µs/s/master 26000 redis-cpu-group-max-µs/s/master 200 clients/master 0 subscribed/master 1 redis-bytes/master 1 redis-out-bytes/s/master 1 sim-cpu-µs/s/sidecar 1 sim-heap-bytes/sidecar 1 sim-rss-bytes/sidecar 1 acquire-p50-µs 1 acquire-p99-µs 1 cycle-p50-µs 1 cycle-p99-µs 0 errors 1 redis-requests/wakeup 400 redis-round-trips/s/master 390 redis-round-trips-group-min/s/master 410 redis-round-trips-group-max/s/master
`
	r, err := benchread.Read(strings.NewReader(out), "out", failOnWarning{t})
	if err != nil {
		t.Fatal(err)
	}
	runs, err := simRuns(r)
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 2 || runs[0].Groups != 1 || runs[1].Groups != 2 || runs[1].Fleet().Groups != 2 || runs[1].GroupCPUMax != 26000 {
		t.Fatalf("runs = %+v", runs)
	}
	var buf bytes.Buffer
	writeGroupCheck(&buf, fixedInputs, runs)
	if !strings.Contains(buf.String(), "| connections per master | 2 | 100 | 1.00 | 1.00 |") {
		t.Errorf("group check:\n%s", buf.String())
	}
}

// With a server-info max age of 10 rounds, one round in ten reads the
// info and nine only ping: health costs a tenth of the info round plus
// nine tenths of the ping round, on the master and in the sidecar.
func TestPingRoundsBetweenInfoReadsCutTheHealthCost(t *testing.T) {
	f := Fleet{Pods: 1000, Masters: 3, Groups: 1, KeyTTL: 10, HealthInterval: 1, RenewBatch: 1}
	every := fixedInputs.PerMaster(f)
	near(t, "health CPU, info every round", every.CPUHealth, 1000*50)
	f.InfoMaxAge = 10
	mixed := fixedInputs.PerMaster(f)
	near(t, "health CPU, info every 10th round", mixed.CPUHealth, 1000*(0.1*50+0.9*10))
	near(t, "output", mixed.OutBytes, 1000*(0.1*2000+0.9*10)+100*100)
	near(t, "requests (one per round either way)", mixed.Requests, every.Requests)
	near(t, "sidecar CPU", fixedInputs.PerPod(f).CPU, 3*(0.1*100+0.9*20)+3*50/10.0+200)
	// Pings keep the regular connection busy; the pipeline, with a
	// server-info read every 10 s, is busy 2 s in 10.
	near(t, "connection memory", fixedInputs.connMemory(f), 20000+2000+0.2*18000)
	for _, c := range []struct{ interval, maxAge, share float64 }{{1, 0, 1}, {1, 10, 0.1}, {1, 9.5, 1.0 / 9}, {1, 10.4, 0.1}, {10, 10, 1}, {10, 60, 1.0 / 6}, {30, 10, 1}} {
		f := Fleet{HealthInterval: c.interval, InfoMaxAge: c.maxAge}
		near(t, fmt.Sprintf("info share at %gs / max age %gs", c.interval, c.maxAge), f.infoShare(), c.share)
	}
}

// Every sidecar records its member list on every master of every group
// every 10 s, whatever the health interval and the number of groups: one
// request per pod per 10 s on each master, and a pod checks all K·M
// masters.
func TestMemberListChecksComeFromEveryPodToEveryMaster(t *testing.T) {
	in := fixedInputs
	in.RedisMemberCheckLone = 90 // 60 µs more when a check wakes the master
	f := Fleet{Pods: 1000, Masters: 3, Groups: 1, KeyTTL: 10, HealthInterval: 1, RenewBatch: 1}
	m := in.PerMaster(f)
	a := (1000*50 + 100*30.0) / 1e6
	b := 100 * 60.0 / 1e6
	near(t, "member-list CPU", m.CPUMembers, 100*(30+(1-(a+b)/(1+b))*60))
	near(t, "requests", m.Requests, 1000+100)
	near(t, "output", m.OutBytes, 1000*2000+100*100)
	f.HealthInterval, f.Groups = 10, 4
	m4 := in.PerMaster(f)
	near(t, "requests at 10 s health over 4 groups", m4.Requests, 100+100)
	near(t, "output at 10 s health over 4 groups", m4.OutBytes, 100*2000+100*100)
	near(t, "sidecar CPU over 4 groups", in.PerPod(f).CPU, 12*100/10.0+12*50/10.0+200)
}
