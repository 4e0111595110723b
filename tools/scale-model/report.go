package main

import (
	"fmt"
	"io"
	"math"
	"strings"
)

// quantity is one row kind of the comparison: what the model predicts for
// a simulated size and what the simulation measured.
type quantity struct {
	name      string
	unit      string
	div       float64 // raw value / div = shown value
	predicted func(in Inputs, run SimRun) float64
	measured  func(run SimRun) float64
}

var quantities = []quantity{
	{"Redis CPU per master", "µs/s", 1,
		func(in Inputs, r SimRun) float64 { return in.PerMaster(r.Fleet()).CPU },
		func(r SimRun) float64 { return r.RedisCPU }},
	{"Redis requests per master", "/s", 1,
		func(in Inputs, r SimRun) float64 { return in.PerMaster(r.Fleet()).Requests },
		func(r SimRun) float64 { return r.RoundTrips }},
	{"connections per master", "", 1,
		func(in Inputs, r SimRun) float64 { return in.PerMaster(r.Fleet()).Conns },
		func(r SimRun) float64 { return r.Clients }},
	{"Redis memory per master", "MB", 1 << 20,
		func(in Inputs, r SimRun) float64 { return in.PerMaster(r.Fleet()).Memory },
		func(r SimRun) float64 { return r.RedisMemory }},
	{"Redis output per master", "KB/s", 1 << 10,
		func(in Inputs, r SimRun) float64 { return in.PerMaster(r.Fleet()).OutBytes },
		func(r SimRun) float64 { return r.RedisOut }},
	{"renewals, all sidecars", "/s", 1,
		func(in Inputs, r SimRun) float64 { return r.Sidecars * r.Held * renewalsPerSecond(r.KeyTTL) },
		func(r SimRun) float64 { return r.Renewals }},
	{"sidecar CPU per sidecar", "µs/s", 1,
		func(in Inputs, r SimRun) float64 { return in.PerPod(r.Fleet()).CPU },
		func(r SimRun) float64 { return r.SimCPU }},
	{"sidecar heap per sidecar", "KB", 1 << 10,
		func(in Inputs, r SimRun) float64 { return in.SidecarHeapOf(r.Fleet()) },
		func(r SimRun) float64 { return r.SimHeap }},
	{"sidecar RSS per sidecar", "KB", 1 << 10,
		func(in Inputs, r SimRun) float64 { return in.SidecarRSS*r.Groups + r.Held*in.SidecarHeapPerLock },
		func(r SimRun) float64 { return r.SimRSS }},
}

// modelError is how far the prediction is from the measurement, as a
// share of the measurement.
func modelError(predicted, measured float64) float64 {
	if measured == 0 {
		return math.NaN()
	}
	return (predicted - measured) / measured
}

// writeComparison writes the predicted-vs-measured table.
func writeComparison(w io.Writer, in Inputs, runs []SimRun) {
	fmt.Fprintln(w, "| quantity | groups × masters | sidecars | predicted | measured | model error |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|")
	for _, q := range quantities {
		show := func(v float64) string { return strings.TrimSpace(num(v/q.div) + " " + q.unit) }
		if q.unit == "" {
			show = count
		}
		for _, r := range runs {
			p, m := q.predicted(in, r), q.measured(r)
			fmt.Fprintf(w, "| %s | %.0f × 3 | %.0f | %s | %s | %s |\n", q.name, r.Groups, r.Sidecars, show(p), show(m), percent(modelError(p, m)))
		}
	}
}

// writeSimContext writes what the simulation achieved, which the model
// takes as given (the rate) or does not predict (latency), and how many
// requests each wake-up of a master served against what independent pods
// would give at the same utilisation (1/(1-u): a request finds the master
// busy with probability u).
func writeSimContext(w io.Writer, runs []SimRun) {
	fmt.Fprintln(w, "| groups × masters | sidecars | cycles/s (per sidecar) | master CPU mean / busiest | per master, least / most loaded group: CPU; requests | requests per wake-up (independent pods would give) | acquire p50 / p99 | cycle p50 / p99 (open loop) | errors | window |")
	fmt.Fprintln(w, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range runs {
		spread := "—"
		if r.Groups > 1 {
			spread = fmt.Sprintf("%.2f / %.2f %%; %s / %s /s", r.GroupCPUMin/1e4, r.GroupCPUMax/1e4, num(r.GroupRTMin), num(r.GroupRTMax))
		}
		fmt.Fprintf(w, "| %.0f × 3 | %.0f | %s (%.2f of %.0f) | %.1f / %.1f %% | %s | %.2f (%.2f) | %s / %s ms | %s / %s ms | %.0f | %.0f s |\n",
			r.Groups, r.Sidecars, num(r.Cycles*r.Sidecars), r.Cycles, r.TargetCycles, r.RedisCPU/1e4, r.RedisCPUMax/1e4, spread,
			r.RequestsPerWakeup, 1/(1-r.RedisCPU/1e6),
			num(r.AcquireP50/1e3), num(r.AcquireP99/1e3), num(r.CycleP50/1e3), num(r.CycleP99/1e3), r.Errors, r.Window)
	}
}

// writeGroupCheck compares each multi-group run with the one-group run of
// the same size: what one master gets with K groups, as a share of what
// it gets with one, predicted and measured. Lock work should fall to 1/K;
// health rounds and connections should not fall at all.
func writeGroupCheck(w io.Writer, in Inputs, runs []SimRun) {
	type ratio struct {
		name      string
		predicted func(Master) float64
		measured  func(SimRun) float64
	}
	ratios := []ratio{
		{"Redis CPU per master, less the idle master's", func(m Master) float64 { return m.CPU - in.RedisIdle }, func(r SimRun) float64 { return r.RedisCPU - in.RedisIdle }},
		{"Redis requests per master", func(m Master) float64 { return m.Requests }, func(r SimRun) float64 { return r.RoundTrips }},
		{fmt.Sprintf("… of which lock operations and renewals (measured: requests less one per sidecar per health interval and one per sidecar per %g s member-list check)", memberCheckEvery),
			func(m Master) float64 { return m.LockReqs }, func(r SimRun) float64 {
				return r.RoundTrips - r.Sidecars/r.HealthInterval - r.Sidecars/memberCheckEvery
			}},
		{"connections per master", func(m Master) float64 { return m.Conns }, func(r SimRun) float64 { return r.Clients }},
		{"Redis memory per master", func(m Master) float64 { return m.Memory }, func(r SimRun) float64 { return r.RedisMemory }},
		{"Redis output per master", func(m Master) float64 { return m.OutBytes }, func(r SimRun) float64 { return r.RedisOut }},
	}
	fmt.Fprintln(w, "| per master | groups | sidecars | predicted K groups / 1 group | measured K groups / 1 group |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|")
	for _, r := range runs {
		if r.Groups == 1 {
			continue
		}
		one := -1
		for i, o := range runs {
			if o.Groups == 1 && o.Sidecars == r.Sidecars {
				one = i
			}
		}
		if one < 0 {
			continue
		}
		o := runs[one]
		// Both predicted at the K-group run's achieved rate, so the ratio
		// is the model's K alone.
		fk, f1 := r.Fleet(), r.Fleet()
		f1.Groups = 1
		mk, m1 := in.PerMaster(fk), in.PerMaster(f1)
		for _, q := range ratios {
			fmt.Fprintf(w, "| %s | %.0f | %.0f | %.2f | %.2f |\n", q.name, r.Groups, r.Sidecars,
				q.predicted(mk)/q.predicted(m1), q.measured(r)/q.measured(o))
		}
	}
}

// writeInputs lists the unit costs the model used.
func writeInputs(w io.Writer, in Inputs) {
	rows := []struct {
		what, value string
	}{
		{"Redis CPU per fenced acquire / release, per master, 16 callers at once (warm): 3 masters", fmt.Sprintf("%s / %s µs", num(in.RedisAcquire), num(in.RedisRelease))},
		{"the same with 5 masters", fmt.Sprintf("%s / %s µs", num(in.RedisAcquire5), num(in.RedisRelease5))},
		{"the same, one lone caller (each command wakes the master): 3 masters", fmt.Sprintf("%s / %s µs", num(in.RedisAcquireLone), num(in.RedisReleaseLone))},
		{"the same with 5 masters", fmt.Sprintf("%s / %s µs", num(in.RedisAcquireLone5), num(in.RedisReleaseLone5))},
		{"the same, 3 masters, each command after 5 ms idle (not used: see the notes)", fmt.Sprintf("%s / %s µs", num(in.RedisAcquireIdle), num(in.RedisReleaseIdle))},
		{"Redis CPU per renewal: per ExtendMany call + per key", fmt.Sprintf("%s + %s µs", num(in.RedisRenewCall), num(in.RedisRenewKey))},
		{"Redis CPU per health round that reads the server info (one pipeline: 2 INFO, 2 CONFIG GET), per master: at 1000 rounds/s (warm) / 50 rounds/s (lone)", fmt.Sprintf("%s / %s µs", num(in.RedisBackground), num(in.RedisBackgroundLone))},
		{"the same for a round that only pings", fmt.Sprintf("%s / %s µs", num(in.RedisPingRound), num(in.RedisPingRoundLone))},
		{fmt.Sprintf("Redis CPU per member-list check (every %g s from every sidecar; one script), per master: 16 callers at once (warm) / one lone caller", memberCheckEvery),
			fmt.Sprintf("%s / %s µs", num(in.RedisMemberCheck), num(in.RedisMemberCheckLone))},
		{"the same, each check after 5 ms idle (not used)", fmt.Sprintf("%s µs", num(in.RedisMemberCheckIdle))},
		{"commands / round trips per member-list check, per master", fmt.Sprintf("%s / %s", num(in.CommandsPerMemberCheck), num(in.RoundTripsPerMemberCheck))},
		{"Redis CPU of a master with no clients", fmt.Sprintf("%s µs/s", num(in.RedisIdle))},
		{"Redis output per cycle / per server-info round / per ping round / per member-list check, per master", fmt.Sprintf("%s / %s / %s / %s bytes", num(in.OutPerCycle), num(in.OutPerHealthRound), num(in.OutPerPingRound), num(in.OutPerMemberCheck))},
		{"connections per sidecar per master (after a wait)", fmt.Sprintf("%s (%s)", num(in.ConnsPerSidecar), num(in.ConnsAfterWait))},
		{"Redis memory per busy / idle connection", fmt.Sprintf("%s / %s KB", num(in.BusyConnBytes/1024), num(in.IdleConnBytes/1024))},
		{"Redis memory per held lock / per released name's fence counter", fmt.Sprintf("%s / %s bytes", num(in.LockBytes), num(in.FenceBytes))},
		{"Redis memory of the scripts (lock and member-list) and their Lua state, per master", fmt.Sprintf("%s KB", num(in.ScriptsBytes/1024))},
		{"sidecar CPU per acquire / release via HTTP, one every 5 ms (a pod's pace), 3 masters", fmt.Sprintf("%s / %s µs", num(in.SidecarAcquire3), num(in.SidecarRelease3))},
		{"the same with 5 masters", fmt.Sprintf("%s / %s µs", num(in.SidecarAcquire5), num(in.SidecarRelease5))},
		{"sidecar CPU per renewal: per call + per key", fmt.Sprintf("%s + %s µs", num(in.SidecarRenewCall), num(in.SidecarRenewKey))},
		{"sidecar CPU per health round, per master: server-info round / ping round", fmt.Sprintf("%s / %s µs", num(in.SidecarHealthRound), num(in.SidecarPingRound))},
		{"sidecar CPU per member-list check, per master, one every 5 ms", fmt.Sprintf("%s µs", num(in.SidecarMemberCheck))},
		{"sidecar CPU of the idle renewer tick", fmt.Sprintf("%s µs/s", num(in.SidecarTick))},
		{"in-process sidecar heap / RSS; heap per held lock", fmt.Sprintf("%s / %s KB; %s bytes", num(in.SidecarHeap/1024), num(in.SidecarRSS/1024), num(in.SidecarHeapPerLock))},
	}
	if in.PodIdleRSS > 0 {
		rows = append(rows, struct{ what, value string }{"sidecar process RSS idle; per held lock", fmt.Sprintf("%s MB; %s KB", num(in.PodIdleRSS/(1<<20)), num(in.PodRSSPerLock/1024))})
	}
	fmt.Fprintln(w, "| input | measured |")
	fmt.Fprintln(w, "|---|---:|")
	for _, r := range rows {
		fmt.Fprintf(w, "| %s | %s |\n", r.what, r.value)
	}
}

// Settings are the knobs the capacity answers are given for.
type Settings struct {
	Name           string
	HealthInterval float64 // seconds
	InfoMaxAge     float64 // seconds (0: the server info read every round)
	Walls          Walls
}

// fleetAt is the capacity questions' fleet: pods that wait for locks now
// and then (3 connections per master), no long-lived locks, names reused.
func fleetAt(masters, groups int, cycles float64, s Settings) Fleet {
	return Fleet{Masters: masters, Groups: groups, Cycles: cycles, Waits: true, KeyTTL: 10, HealthInterval: s.HealthInterval, InfoMaxAge: s.InfoMaxAge, RenewBatch: 1}
}

var capacityRates = []float64{1, 10, 100}

// writeCapacity answers "how large a fleet does one group serve".
func writeCapacity(w io.Writer, in Inputs, s Settings) {
	fmt.Fprintf(w, "| masters per group | cycles per pod per s | CPU wall | connection wall | largest fleet | master CPU there (ops + health + member lists) | master memory there |\n")
	fmt.Fprintln(w, "|---:|---:|---:|---:|---:|---:|---:|")
	for _, masters := range []int{3, 5} {
		for _, rate := range capacityRates {
			c := in.MaxPods(fleetAt(masters, 1, rate, s), s.Walls)
			m := c.AtCapacity
			fmt.Fprintf(w, "| %d | %g | %s pods | %s pods | **%s pods** (%s) | %.0f %% (%.0f + %.0f + %.1f) | %s MB |\n",
				masters, rate, count(c.CPUPods), count(c.ConnsPods), count(c.Pods), c.Binding,
				m.CPU/1e4, m.CPUOps/1e4, m.CPUHealth/1e4, m.CPUMembers/1e4, num(m.Memory/(1<<20)))
		}
	}
}

// writeGroups answers "how many groups for pods at cycles each".
func writeGroups(w io.Writer, in Inputs, pods, cycles float64, settings []Settings) {
	fmt.Fprintln(w, "| settings | masters per group | groups | master CPU (ops + health + member lists) | connections per master | master memory | master output | sidecar CPU | sidecar connections |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, s := range settings {
		for _, masters := range []int{3, 5} {
			f := fleetAt(masters, 1, cycles, s)
			f.Pods = pods
			k := in.GroupsNeeded(f, s.Walls)
			if k == 0 {
				idle := f
				idle.Cycles = 0
				fmt.Fprintf(w, "| %s | %d | **none suffices**: health rounds and member-list checks alone take %.0f %% of a core per master | | | | | | |\n",
					s.Name, masters, in.PerMaster(idle).CPU/1e4)
				continue
			}
			f.Groups = k
			m, p := in.PerMaster(f), in.PerPod(f)
			fmt.Fprintf(w, "| %s | %d | **%d** (%d masters) | %.0f %% (%.0f + %.0f + %.1f) | %s%s | %s MB | %s MB/s | %s µs/s | %s |\n",
				s.Name, masters, k, k*masters, m.CPU/1e4, m.CPUOps/1e4, m.CPUHealth/1e4, m.CPUMembers/1e4,
				count(m.Conns), overLimit(m.Conns, s.Walls.MaxClients), num(m.Memory/(1<<20)), num(m.OutBytes/(1<<20)), num(p.CPU), count(p.Conns))
		}
	}
}

func overLimit(conns, maxClients float64) string {
	if conns > maxClients {
		return fmt.Sprintf(" (over maxclients %s)", num(maxClients))
	}
	return ""
}

// healthSettings are the SIDELOCK_HEALTH_INTERVAL and
// SIDELOCK_HEALTH_INFO_MAX_AGE pairs compared (seconds; 0: every round).
var healthSettings = [][2]float64{{1, 0}, {1, 10}, {1, 60}, {5, 0}, {5, 60}, {10, 0}, {10, 60}, {30, 0}}

// writeHealthCost shows what a fleet that does not lock costs a master per
// 1000 pods: health rounds and member-list checks (every pod of every
// group checks every master).
func writeHealthCost(w io.Writer, in Inputs) {
	fmt.Fprintln(w, "| health interval | server info read | master CPU per 1000 pods (of which member-list checks) | master output per 1000 pods | connection memory per 1000 pods that seldom lock | pods until these alone take 50 % of a core |")
	fmt.Fprintln(w, "|---:|---|---:|---:|---:|---:|")
	for _, hs := range healthSettings {
		f := Fleet{Pods: 1000, Masters: 3, Groups: 1, KeyTTL: 10, HealthInterval: hs[0], InfoMaxAge: hs[1], RenewBatch: 1}
		m := in.PerMaster(f)
		wall := in.largestWithinCPU(f, 0.5)
		fmt.Fprintf(w, "| %g s | %s | %.1f %% (%.2f) | %s KB/s | %s MB | %s |\n", hs[0], infoReads(f), (m.CPU-in.RedisIdle)/1e4, m.CPUMembers/1e4,
			num(m.OutBytes/1024), num((m.Memory-in.ScriptsBytes)/(1<<20)), count(wall))
	}
}

// infoReads says how often a fleet's rounds read the server info.
func infoReads(f Fleet) string {
	if f.infoShare() == 1 {
		return "every round"
	}
	return fmt.Sprintf("every %gth round (max age %g s)", 1/f.infoShare(), f.InfoMaxAge)
}

// writeSideCosts states what a held lock and a fresh lock name cost, for
// readers whose pods hold locks or use many names.
func writeSideCosts(w io.Writer, in Inputs) {
	perHeld := renewalsPerSecond(10) * (in.RedisRenewCall + in.RedisRenewKey)
	cycle := in.RedisAcquire + in.RedisRelease
	fmt.Fprintf(w, "- A held lock renewed on its own (key ttl 10 s) costs each master of its group %s µs/s: as much as %s cycles/s. Renewed in a batch with others, %s µs/s per extra lock.\n",
		num(perHeld), num(perHeld/cycle), num(renewalsPerSecond(10)*in.RedisRenewKey))
	perPods := 1000 / memberCheckEvery
	fmt.Fprintf(w, "- Member-list checks (one script per master of every group from every sidecar every %g s, whatever the settings) bring each master %s requests/s per 1000 pods: %s–%s µs/s of CPU (warm–lone) and %s KB/s of output. A pod spends %s µs/s on them per master.\n",
		memberCheckEvery, num(perPods), num(perPods*in.RedisMemberCheck), num(perPods*in.RedisMemberCheckLone), num(perPods*in.OutPerMemberCheck/1024), num(in.SidecarMemberCheck/memberCheckEvery))
	fmt.Fprintf(w, "- Every lock name released in the last hour keeps a fence counter of %s bytes on each master of its group: a fleet that takes a new name for every cycle at 10 cycles/s per pod leaves %s MB per master per 1000 pods (÷ groups).\n",
		num(in.FenceBytes), num(1000*10*3600*in.FenceBytes/(1<<20)))
}

// num writes a figure with about three significant digits.
func num(v float64) string {
	switch a := math.Abs(v); {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return "—"
	case a >= 100:
		return groupThousands(fmt.Sprintf("%.0f", v))
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

// count writes a whole number of things (pods, connections).
func count(v float64) string { return groupThousands(fmt.Sprintf("%.0f", v)) }

// groupThousands separates thousands with a thin space, as the other
// performance documents do.
func groupThousands(s string) string {
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteString("\u202f")
		}
		b.WriteRune(r)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

func percent(v float64) string {
	if math.IsNaN(v) {
		return "—"
	}
	return fmt.Sprintf("%+.0f %%", v*100)
}
