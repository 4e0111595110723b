package main

import (
	"fmt"
	"math"

	"github.com/sidelock/sidelock/internal/sidecar"
)

// Inputs are the measured unit costs the model multiplies out. Redis
// figures are per master, sidecar figures per sidecar process. Each comes
// from one BenchmarkCostModel line (see fromResults).
type Inputs struct {
	// Redis CPU, µs per master, as a master serving many connections at
	// once spends it (the fleet regime). Per operation at 3 and 5 masters:
	// every master of a group runs the same scripts, so they should agree;
	// both are measured because a busier machine may not.
	RedisAcquire, RedisRelease   float64 // per fenced acquire (2 scripts) and per release, 3 masters
	RedisAcquire5, RedisRelease5 float64 // the same with 5 masters
	RedisRenewCall               float64 // per ExtendMany call, whatever its size
	RedisRenewKey                float64 // per key in an ExtendMany call
	RedisBackground              float64 // per sidecar per health round that reads the server info (one pipeline)
	RedisPingRound               float64 // per sidecar per health round that only pings
	RedisMemberCheck             float64 // per sidecar per member-list check (one script)
	RedisIdle                    float64 // µs/s of a master with no clients
	// The same costs when every command finds the master asleep and wakes
	// it alone (one caller at a time): see utilisation for how both are used.
	RedisAcquireLone, RedisReleaseLone      float64 // 3 masters
	RedisAcquireLone5, RedisReleaseLone5    float64 // 5 masters
	RedisBackgroundLone, RedisPingRoundLone float64
	RedisMemberCheckLone                    float64
	// The same again for commands that find a master idle for 5 ms (a
	// paced caller): shown, not used; see docs/scale.md.
	RedisAcquireIdle, RedisReleaseIdle float64
	RedisMemberCheckIdle               float64

	// Redis output, bytes per master.
	OutPerCycle, OutPerHealthRound, OutPerPingRound, OutPerMemberCheck float64
	// What one member-list check asks of a master: the commands it runs
	// (the script and those it calls) and its round trips. Shown, not
	// used: the model counts one request per check.
	CommandsPerMemberCheck, RoundTripsPerMemberCheck float64

	// Redis memory, bytes per master.
	BusyConnBytes, IdleConnBytes float64 // a connection used at least every ~2 s, or idle longer
	LockBytes                    float64 // a held key and its fence counter
	ScriptsBytes                 float64 // the lock and member-list scripts and the Lua state running them, once per master
	FenceBytes                   float64 // a fence counter left by a released name (kept FenceRetention)

	// Connections each sidecar keeps per master once it has locked (one
	// for health rounds and lone calls, one pipeline), and once it has
	// ever waited for a held lock (+1: the release subscription, kept).
	ConnsPerSidecar, ConnsAfterWait float64

	// Sidecar CPU, µs. Per-operation figures at 3 and 5 masters, through
	// the lock API.
	SidecarAcquire3, SidecarRelease3  float64
	SidecarAcquire5, SidecarRelease5  float64
	SidecarRenewCall, SidecarRenewKey float64
	SidecarHealthRound                float64 // per master per round that reads the server info
	SidecarPingRound                  float64 // per master per round that only pings
	SidecarMemberCheck                float64 // per master per member-list check
	SidecarTick                       float64 // µs/s of the renewer's idle 50 ms tick

	// Sidecar memory, bytes. In-process (the simulation's unit) and, when
	// BenchmarkSidecarIdleRSS ran, a real sidecar process.
	SidecarHeap, SidecarRSS float64 // per in-process sidecar
	SidecarHeapPerLock      float64
	PodIdleRSS              float64 // a sidecar process, idle (0: not measured)
	PodRSSPerLock           float64
}

// Fleet is one deployment: the load and the settings the costs scale with.
type Fleet struct {
	Pods    float64 // sidecars
	Masters int     // per quorum group
	Groups  int     // quorum groups; lock names spread evenly over them
	// Cycles is acquire+release cycles per pod per second, over all groups.
	Cycles float64
	// Held is long-lived locks per pod, renewed every KeyTTL/3.
	Held float64
	// RenewBatch is how many of a pod's held locks in one group share an
	// ExtendMany call (1: each renewed on its own, the worst case).
	RenewBatch float64
	// Names is distinct lock names per pod released within the fence
	// retention (default 1 h): each leaves a fence counter on the masters.
	Names float64
	// Waits is whether pods wait for held locks (a subscription
	// connection to each master, kept once opened).
	Waits bool

	KeyTTL, HealthInterval float64 // seconds
	// InfoMaxAge is SIDELOCK_HEALTH_INFO_MAX_AGE in seconds (0: every
	// round reads the server info): see infoShare.
	InfoMaxAge float64
}

// infoShare is the share of health rounds that read the server info: the
// round nearest the max age (internal/health: the first at which the info is
// within half an interval of it) reads it, the others only ping.
// Reconnections add a few more reads, which the model leaves out.
func (f Fleet) infoShare() float64 {
	if f.InfoMaxAge <= 0 {
		return 1
	}
	return 1 / math.Max(math.Ceil(f.InfoMaxAge/f.HealthInterval-0.5-1e-9), 1)
}

// mix is the cost of an average health round, of info and ping rounds.
func (f Fleet) mix(info, ping float64) float64 {
	s := f.infoShare()
	return s*info + (1-s)*ping
}

// memberCheckEvery is how often, in seconds, every sidecar records each
// group's member list on every master of the group (one script per
// master). No setting changes it.
var memberCheckEvery = sidecar.MembershipEvery.Seconds()

// Master is the load on one master of one group.
type Master struct {
	CPU         float64 // µs/s
	Conns       float64
	Memory      float64 // bytes
	OutBytes    float64 // bytes/s
	Requests    float64 // round trips/s: 3 per cycle, renewal calls, 1 per health round, 1 per member-list check
	LockReqs    float64 // the part of Requests that lock operations and renewals make
	CPUOps      float64 // the parts of CPU: lock operations,
	CPURenewals float64 // renewals,
	CPUHealth   float64 // health rounds and per-client housekeeping,
	CPUMembers  float64 // member-list checks
}

// Pod is the cost of one sidecar.
type Pod struct {
	CPU   float64 // µs/s
	Conns float64 // to all masters
}

// renewalsPerSecond is how often a held lock is renewed: every third of
// the key ttl.
func renewalsPerSecond(keyTTL float64) float64 { return 3 / keyTTL }

// renewCallsPerGroup is one pod's ExtendMany calls per second to one
// group: its held locks there, renewed RenewBatch at a time (a lone lease
// still costs a whole call).
func (f Fleet) renewCallsPerGroup() float64 {
	held := f.Held / float64(f.Groups)
	if held == 0 {
		return 0
	}
	batch := math.Max(math.Min(f.RenewBatch, held), 1)
	return held / batch * renewalsPerSecond(f.KeyTTL)
}

// PerMaster is the model of one master: every sidecar health-checks it
// and records its group's member list on it, and 1/Groups of the fleet's
// lock traffic reaches it.
func (in Inputs) PerMaster(f Fleet) Master {
	groups := float64(f.Groups)
	cycles := f.Pods * f.Cycles / groups
	heldKeys := f.Pods * f.Held / groups
	acquire, release := in.redisOpCost(f.Masters)
	acquireLone, releaseLone := in.redisLoneOpCost(f.Masters)
	renewal := renewalsPerSecond(f.KeyTTL)
	ops := load{rate: cycles, warm: acquire + release, lone: acquireLone + releaseLone}
	health := load{rate: f.Pods / f.HealthInterval,
		warm: f.mix(in.RedisBackground, in.RedisPingRound), lone: f.mix(in.RedisBackgroundLone, in.RedisPingRoundLone)}
	members := load{rate: f.Pods / memberCheckEvery, warm: in.RedisMemberCheck, lone: in.RedisMemberCheckLone}
	// Renewal calls are measured one caller at a time, and counted so.
	renewals := load{rate: 1, warm: f.Pods*f.renewCallsPerGroup()*in.RedisRenewCall + heldKeys*renewal*in.RedisRenewKey}
	renewals.lone = renewals.warm
	busy := utilisation(ops, health, members, renewals)
	m := Master{
		CPUOps:      ops.cost(busy),
		CPURenewals: renewals.cost(busy),
		CPUHealth:   health.cost(busy),
		CPUMembers:  members.cost(busy),
		Conns:       f.Pods * in.connsPerPod(f),
		OutBytes: cycles*in.OutPerCycle + f.Pods*f.mix(in.OutPerHealthRound, in.OutPerPingRound)/f.HealthInterval +
			f.Pods*in.OutPerMemberCheck/memberCheckEvery,
		LockReqs: 3*cycles + f.Pods*f.renewCallsPerGroup(),
	}
	m.Requests = m.LockReqs + f.Pods/f.HealthInterval + f.Pods/memberCheckEvery
	m.CPU = in.RedisIdle + m.CPUOps + m.CPURenewals + m.CPUHealth + m.CPUMembers
	m.Memory = in.ScriptsBytes + in.connMemory(f)*f.Pods + heldKeys*in.LockBytes + f.Pods*f.Names/groups*in.FenceBytes
	return m
}

// load is one kind of work a master does: rate per second, each costing
// warm µs when it finds the master already awake and lone µs when it has
// to wake it.
type load struct{ rate, warm, lone float64 }

// cost is the load's CPU in µs/s when the master is busy that share of
// the time.
func (l load) cost(busy float64) float64 {
	asleep := 1 - math.Min(math.Max(busy, 0), 1) // past 1 the master is saturated
	return l.rate * (l.warm + asleep*math.Max(l.lone-l.warm, 0))
}

// utilisation solves for the share of time a master is busy. Redis spends
// more per command when the command wakes it (the event loop's return from
// epoll_wait, cold caches) than when it arrives while Redis is working
// anyway. With independent pods a command finds the master busy with
// probability equal to its utilisation u, so
//
//	u = A + (1-u)·B,  A = Σ rate·warm,  B = Σ rate·(lone-warm)
//	u = (A + B) / (1 + B)
//
// (in core-seconds per second). It tends to the lone costs for a quiet
// master and to the warm ones for a saturated one.
func utilisation(loads ...load) float64 {
	var a, b float64
	for _, l := range loads {
		a += l.rate * l.warm / 1e6
		b += l.rate * math.Max(l.lone-l.warm, 0) / 1e6
	}
	return (a + b) / (1 + b)
}

func (in Inputs) connsPerPod(f Fleet) float64 {
	if f.Waits {
		return in.ConnsAfterWait
	}
	return in.ConnsPerSidecar
}

// busyWithin is the longest gap between commands for which Redis keeps a
// connection's query buffer (it frees it after 2 s idle).
const busyWithin = 2.0

// connMemory is what one pod's connections take on one master. Of its
// two command connections the regular one carries the health PINGs, the
// member-list checks and the pod's lone lock calls (a lone scripted call
// goes as a plain command on it), the pipeline the server-info reads (a
// pipeline of four commands) and what few batches a pod makes. A
// connection keeps its query buffer for busyWithin after each command, so
// one used r times a second is busy about r·busyWithin of the time (all of
// it from one use every busyWithin on), idle the rest. A subscription
// connection only sees a PING every few seconds and counts as idle.
func (in Inputs) connMemory(f Fleet) float64 {
	byUse := func(perSecond float64) float64 {
		busy := math.Min(perSecond*busyWithin, 1)
		return in.IdleConnBytes + busy*(in.BusyConnBytes-in.IdleConnBytes)
	}
	share := f.infoShare()
	mem := byUse((1-share)/f.HealthInterval+1/memberCheckEvery+f.lockRequestsPerMaster()) + (in.ConnsPerSidecar-1)*byUse(share/f.HealthInterval)
	if f.Waits {
		mem += (in.ConnsAfterWait - in.ConnsPerSidecar) * in.IdleConnBytes
	}
	return mem
}

// lockRequestsPerMaster is one pod's lock requests per second to one
// master of a group: three per cycle (acquire, fence commit, release) and
// its renewal calls there.
func (f Fleet) lockRequestsPerMaster() float64 {
	return 3*f.Cycles/float64(f.Groups) + f.renewCallsPerGroup()
}

// PerPod is the model of one sidecar.
func (in Inputs) PerPod(f Fleet) Pod {
	acquire, release := in.sidecarOpCost(f.Masters)
	masters := float64(f.Groups * f.Masters)
	renewCalls := float64(f.Groups) * f.renewCallsPerGroup()
	cpu := f.Cycles*(acquire+release) +
		renewCalls*in.SidecarRenewCall + f.Held*renewalsPerSecond(f.KeyTTL)*in.SidecarRenewKey +
		masters*f.mix(in.SidecarHealthRound, in.SidecarPingRound)/f.HealthInterval +
		masters*in.SidecarMemberCheck/memberCheckEvery + in.SidecarTick
	return Pod{CPU: cpu, Conns: masters * in.connsPerPod(f)}
}

// redisOpCost is the per-master Redis CPU of an acquire and a release on
// a busy master, interpolated between the 3- and 5-master measurements.
func (in Inputs) redisOpCost(masters int) (acquire, release float64) {
	return between(in.RedisAcquire, in.RedisAcquire5, masters), between(in.RedisRelease, in.RedisRelease5, masters)
}

// redisLoneOpCost is the same for commands that each wake the master.
func (in Inputs) redisLoneOpCost(masters int) (acquire, release float64) {
	return between(in.RedisAcquireLone, in.RedisAcquireLone5, masters), between(in.RedisReleaseLone, in.RedisReleaseLone5, masters)
}

// between interpolates linearly between a figure at 3 and one at 5 masters.
func between(at3, at5 float64, masters int) float64 {
	return at3 + float64(masters-3)/2*(at5-at3)
}

// SidecarHeapOf is one in-process sidecar's heap: mostly go-redis's buffers,
// which grow with the masters it connects to (measured at 3), plus its
// held leases.
func (in Inputs) SidecarHeapOf(f Fleet) float64 {
	return in.SidecarHeap*float64(f.Groups*f.Masters)/3 + f.Held*in.SidecarHeapPerLock
}

// sidecarOpCost interpolates the per-operation sidecar CPU, measured at 3
// and 5 masters, linearly in the number of masters a call fans out to.
func (in Inputs) sidecarOpCost(masters int) (acquire, release float64) {
	return between(in.SidecarAcquire3, in.SidecarAcquire5, masters), between(in.SidecarRelease3, in.SidecarRelease5, masters)
}

// Walls are the limits one master must stay within.
type Walls struct {
	CPUBudget  float64 // share of one core a master may use (Redis runs commands on one thread)
	MaxClients float64 // Redis maxclients (default 10000)
}

// Capacity is the largest fleet one group serves, and what stops it.
type Capacity struct {
	Pods       float64
	CPUPods    float64 // largest fleet by the CPU budget
	ConnsPods  float64 // largest fleet by maxclients
	Binding    string  // "cpu" or "connections"
	AtCapacity Master  // one master's load at Pods
}

// MaxPods solves the model for the largest number of pods within the
// walls. f.Pods is ignored.
func (in Inputs) MaxPods(f Fleet, w Walls) Capacity {
	f.Pods = 1
	c := Capacity{
		CPUPods:   in.largestWithinCPU(f, w.CPUBudget),
		ConnsPods: math.Floor(w.MaxClients / in.PerMaster(f).Conns),
	}
	c.Pods, c.Binding = c.CPUPods, "cpu"
	if c.ConnsPods < c.CPUPods {
		c.Pods, c.Binding = c.ConnsPods, "connections"
	}
	f.Pods = c.Pods
	c.AtCapacity = in.PerMaster(f)
	return c
}

// largestWithinCPU is the largest whole number of pods whose master CPU
// stays within budget (a share of one core); CPU grows with pods, so a
// bisection finds it.
func (in Inputs) largestWithinCPU(f Fleet, budget float64) float64 {
	fits := func(pods float64) bool {
		f.Pods = pods
		return in.PerMaster(f).CPU <= budget*1e6
	}
	lo, hi := 0.0, 1.0
	for fits(hi) {
		if hi > maxPods {
			return hi
		}
		lo, hi = hi, hi*2
	}
	for hi-lo > 1 {
		if mid := math.Floor((lo + hi) / 2); fits(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}

// maxPods bounds the search: a fleet this large is beyond any wall.
const maxPods = 1e9

// GroupsNeeded is the fewest groups whose masters stay within the CPU
// budget for f (f.Groups is ignored), or 0 when no number of groups can:
// the health rounds and member-list checks alone, which every master gets
// from every pod, use up the budget. Connections do not fall with more groups (every sidecar
// connects to every master); see MaxPods and the walls in docs/scale.md.
func (in Inputs) GroupsNeeded(f Fleet, w Walls) int {
	for k := 1; k <= maxGroups; k++ {
		f.Groups = k
		if in.PerMaster(f).CPU <= w.CPUBudget*1e6 {
			return k
		}
	}
	return 0
}

// maxGroups bounds the search: past it the answer is "not by groups".
const maxGroups = 10000

func (c Capacity) String() string {
	return fmt.Sprintf("%.0f pods (%s; cpu %.0f, connections %.0f)", c.Pods, c.Binding, c.CPUPods, c.ConnsPods)
}
