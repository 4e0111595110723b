// Command report turns `go test -bench` output from tools/bench into the
// table of issue 18's targets (and issue 7's it does not restate): each a
// ratio or a figure measured in the same run, with the medians behind it,
// marked met or not. With -update it also puts the table between the
// generated-section markers of each file named. From tools/ (make bench):
//
//	go run ./report -update ../docs/performance.md,../README.md results/latest.txt > results/table.md
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"

	"github.com/sidelock/sidelock/tools/benchread"
)

// results are the benchmark output the table is computed from.
type results = benchread.Results

// target is one row: a figure computed from the medians and its bound.
type target struct {
	what    string
	compute func(r results) (value float64, raw string, ok bool)
	atMost  bool // the figure must be <= bound (else >=)
	bound   float64
	unit    string
}

func ratio(aName, aUnit, bName, bUnit string) func(results) (float64, string, bool) {
	return func(r results) (float64, string, bool) {
		a, okA := r.Median(aName, aUnit)
		b, okB := r.Median(bName, bUnit)
		if !okA || !okB || b == 0 {
			return 0, "", false
		}
		if aUnit != bUnit {
			return a / b, fmt.Sprintf("%.4g %s / %.4g %s", a, aUnit, b, bUnit), true
		}
		return a / b, fmt.Sprintf("%.4g / %.4g %s", a, b, aUnit), true
	}
}

func figure(name, unit string) func(results) (float64, string, bool) {
	return func(r results) (float64, string, bool) {
		v, ok := r.Median(name, unit)
		return v, fmt.Sprintf("%.4g %s", v, unit), ok
	}
}

// unc is the uncontended pair's p50 of a variant over masters.
func unc(masters int, variant string) string {
	return fmt.Sprintf("Uncontended/masters=%d/%s", masters, variant)
}

// Issue 18's targets, and issue 7's rows it does not restate, with their
// bounds. Every ratio is of two medians of the same run.
var targets = []target{
	{"uncontended acquire+release p50, 3 masters: sidelock HTTP / redsync in-process", ratio(unc(3, "sidelock"), "p50-µs", unc(3, "redsync"), "p50-µs"), true, 1, "×"},
	{"  same, fencing off", ratio(unc(3, "sidelock-nofence"), "p50-µs", unc(3, "redsync"), "p50-µs"), true, 0.75, "×"},
	{"  same, over the Unix socket (SIDELOCK_LISTEN_ADDR=unix://…)", ratio(unc(3, "sidelock-unix"), "p50-µs", unc(3, "redsync"), "p50-µs"), true, 1, "×"},
	{"  same, 1 master", ratio(unc(1, "sidelock"), "p50-µs", unc(1, "redsync"), "p50-µs"), true, 1, "×"},
	{"  same, 5 masters", ratio(unc(5, "sidelock"), "p50-µs", unc(5, "redsync"), "p50-µs"), true, 0.75, "×"},
	{"hot lock (one name re-acquired back to back), p50: sidelock, one caller / redsync", ratio("HotLock/masters=3/sidelock", "p50-µs", "HotLock/masters=3/redsync", "p50-µs"), true, 0.3, "×"},
	{"  same, two callers of one sidecar taking turns / redsync", ratio("HotLock/masters=3/sidelock-2-callers", "p50-µs", "HotLock/masters=3/redsync", "p50-µs"), true, 0.3, "×"},
	{"  same, linger off (SIDELOCK_LINGER=0: each acquire a master round, each release answered before its round) / redsync", ratio("HotLock/masters=3/sidelock-no-linger", "p50-µs", "HotLock/masters=3/redsync", "p50-µs"), true, noBound, "×"},
	{"throughput, 64 callers, 3 masters: sidelock / redsync", ratio("Throughput/masters=3/callers=64/sidelock", "pairs/s", "Throughput/masters=3/callers=64/redsync", "pairs/s"), false, 2, "×"},
	{"throughput, 16 callers, 3 masters: sidelock / redsync", ratio("Throughput/masters=3/callers=16/sidelock", "pairs/s", "Throughput/masters=3/callers=16/redsync", "pairs/s"), false, 2, "×"},
	{"throughput, 64 callers, 1 master: sidelock pairs/s (3× Dapr's 5.6k)", figure("Throughput/masters=1/callers=64/sidelock", "pairs/s"), false, 16800, "pairs/s"},
	{"Redis CPU per pair, all 3 masters, one sequential caller: sidelock / redsync", ratio("CPUPerPair/masters=3/sidelock-process", "redis-cpu-µs/pair", "CPUPerPair/masters=3/redsync", "redis-cpu-µs/pair"), true, 0.5, "×"},
	{"sidecar process CPU per pair / redsync's client CPU per pair", ratio("CPUPerPair/masters=3/sidelock-process", "sidecar-cpu-µs/pair", "CPUPerPair/masters=3/redsync", "client-cpu-µs/pair"), true, 1, "×"},
	{"16 callers of one sidecar on one lock, 1 ms holds: lock busy", figure(con("sidelock-wait-one-sidecar"), "%lock-busy"), false, 90, "%"},
	{"  same: hand-off p50 / redsync's hand-off p50", ratio(con("sidelock-wait-one-sidecar"), "handoff-p50-µs", con("redsync"), "handoff-p50-µs"), true, 0.3, "×"},
	{"  the bare HTTP hand-off's (no router, leases or masters), for scale: hand-off p50 / redsync's", ratio(con("http-floor-one-server"), "handoff-p50-µs", con("redsync"), "handoff-p50-µs"), true, noBound, "×"},
	{"16 callers over 2 sidecars (8+8), 1 ms holds: lock busy", figure(con("sidelock-wait"), "%lock-busy"), false, 85, "%"},
	{"  same: share of grants of the sidecar with fewer (45–55 % each)", figure(con("sidelock-wait"), "%grants-least-sidecar"), false, 45, "%"},
	{"  same: waiters' p99 wait / redsync's", ratio(con("sidelock-wait"), "wait-p99-µs", con("redsync"), "wait-p99-µs"), true, 0.05, "×"},
	{"  same: hand-off p50", figure(con("sidelock-wait"), "handoff-p50-µs"), true, 500, "µs"},
	{"  same: share of grants to the previous holder (fairness)", figure(con("sidelock-wait"), "%same-holder"), true, 10, "%"},
	{"16 callers over 4 sidecars (4 each), 1 ms holds: lock busy", figure(con("sidelock-wait-4-sidecars"), "%lock-busy"), false, 75, "%"},
	{"  same: longest wait / redsync's longest wait", ratio(con("sidelock-wait-4-sidecars"), "wait-max-µs", con("redsync"), "wait-max-µs"), true, 0.2, "×"},
	{"another pod's try-once of a lingering lock: share granted (never 409)", figure("LingeringTryOnce/lingering", "%granted"), false, 100, "%"},
	{"  same: rounds to the masters / a free lock's (at most one more)", diff(figure("LingeringTryOnce/lingering", "rounds/try"), figure("LingeringTryOnce/free", "rounds/try")), true, 1, "rounds"},
	{"renewal of 10k held locks: CPU per renewal (sidecar + Redis)", figure("Renewal/locks=10000/sidelock", "cpu-µs/renewal"), true, 10, "µs"},
	{"renewal of 10k held locks: redsync Extend CPU / sidelock CPU", ratio("Renewal/locks=10000/redsync-extend", "cpu-µs/renewal", "Renewal/locks=10000/sidelock", "cpu-µs/renewal"), false, 10, "×"},
	{"idle RSS", figure("SidecarIdleRSS", "idle-RSS-MB"), true, 15, "MB"},
	{"RSS holding 10k locks", figure("SidecarIdleRSS", "10k-held-RSS-MB"), true, 40, "MB"},
	{"process start to /readyz 200", figure("SidecarIdleRSS", "start-to-ready-ms"), true, 100, "ms"},
	{"static binary (-trimpath -s -w)", figure("SidecarIdleRSS", "binary-MB"), true, 20, "MB"},
	{"errors (unexpected answers, transport errors) in all benchmarks, all runs", errorsSum, true, 0, ""},

	// Issue 30: against the floor program (tools/floor: the thinnest sidecar
	// of this design on the same platform, same scripts), and its targets.
	{"issue 30: sidecar process CPU per pair, 3 masters, one sequential caller: sidelock / floor program", ratio(cpu("sidelock-process"), sidecarCPU, cpu("floor-process"), sidecarCPU), true, 1.25, "×"},
	{"issue 30: uncontended pair p50, 3 masters: sidelock / floor program (both over HTTP, in-process)", ratio(unc(3, "sidelock"), "p50-µs", unc(3, "floor"), "p50-µs"), true, 1.15, "×"},
	{"  same, 1 master", ratio(unc(1, "sidelock"), "p50-µs", unc(1, "floor"), "p50-µs"), true, 1.15, "×"},
	{"issue 30: uncontended pair p50, 3 masters: sidelock / redsync in-process", ratio(unc(3, "sidelock"), "p50-µs", unc(3, "redsync"), "p50-µs"), true, 1, "×"},
	{"issue 30: throughput, 64 callers, 3 masters: sidelock / redsync", ratio(tp64("sidelock"), "pairs/s", tp64("redsync"), "pairs/s"), false, 1.5, "×"},
	{"issue 30: Redis CPU per pair, 64 callers, 3 masters: sidelock / redsync", ratio(tp64("sidelock"), redisCPU, tp64("redsync"), redisCPU), true, 0.75, "×"},
	{"  the floor program's, for scale: pair p50, 3 masters / redsync's", ratio(unc(3, "floor"), "p50-µs", unc(3, "redsync"), "p50-µs"), true, noBound, "×"},
	{"  the floor program's: throughput, 64 callers, 3 masters / redsync's", ratio(tp64("floor"), "pairs/s", tp64("redsync"), "pairs/s"), false, noBound, "×"},
	{"  the floor program's: Redis CPU per pair, 64 callers, 3 masters / redsync's", ratio(tp64("floor"), redisCPU, tp64("redsync"), redisCPU), true, noBound, "×"},
	{"  the platform: HTTP exchange alone (no Redis) process CPU per pair / floor program's", ratio(cpu("nethttp-process"), sidecarCPU, cpu("floor-process"), sidecarCPU), true, noBound, "×"},
	{"  the platform: go-redis alone (the floor's scripts, no HTTP) CPU per pair / floor program's", ratio(cpu("goredis"), "client-cpu-µs/pair", cpu("floor-process"), sidecarCPU), true, noBound, "×"},
	{"  the platform: HTTP exchange alone, pair p50 / floor program's", ratio(unc(3, "nethttp"), "p50-µs", unc(3, "floor"), "p50-µs"), true, noBound, "×"},
	{"  the platform: go-redis alone, pair p50 / floor program's", ratio(unc(3, "goredis"), "p50-µs", unc(3, "floor"), "p50-µs"), true, noBound, "×"},
	{"  item 2 at the floor: DELETE answered before its release round, pair p50 / floor program's", ratio(unc(3, "floor-release-after"), "p50-µs", unc(3, "floor"), "p50-µs"), true, noBound, "×"},
}

// con is a variant of BenchmarkContention16.
func con(variant string) string { return "Contention16/" + variant }

// diff is a - b, of two figures of the same run.
func diff(a, b func(results) (float64, string, bool)) func(results) (float64, string, bool) {
	return func(r results) (float64, string, bool) {
		x, rawX, okX := a(r)
		y, rawY, okY := b(r)
		return x - y, rawX + " − " + rawY, okX && okY
	}
}

// noBound marks a row that puts a figure beside the targets without one
// of its own.
var noBound = math.NaN()

// Units and names of the issue 30 rows.
const (
	sidecarCPU = "sidecar-cpu-µs/pair"
	redisCPU   = "redis-cpu-µs/pair"
)

func cpu(variant string) string { return "CPUPerPair/masters=3/" + variant }

// tp64 is the throughput benchmark of 64 callers on 3 masters.
func tp64(variant string) string { return "Throughput/masters=3/callers=64/" + variant }

// errorsSum adds up every "errors" value of the run: each benchmark's
// count in each of its repetitions, since an error in any counts.
func errorsSum(r results) (float64, string, bool) {
	var total float64
	var benchmarks int
	var with []string
	for key, values := range r {
		name, unit, _ := strings.Cut(key, "|")
		if unit != "errors" {
			continue
		}
		benchmarks++
		var n float64
		for _, v := range values {
			n += v
		}
		if n > 0 {
			with = append(with, fmt.Sprintf("%s %g", name, n))
		}
		total += n
	}
	if benchmarks == 0 {
		return 0, "", false
	}
	slices.Sort(with)
	raw := fmt.Sprintf("%d benchmarks counting", benchmarks)
	if len(with) > 0 {
		raw += ": " + strings.Join(with, ", ")
	}
	return total, raw, true
}

func main() {
	update := flag.String("update", "", "comma-separated `files` whose text between "+beginMarker+" and "+endMarker+" becomes the table")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: report [-update FILE,...] BENCH_OUTPUT")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	res, err := benchread.ReadFile(flag.Arg(0), os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var table bytes.Buffer
	write(&table, res)
	if _, err := os.Stdout.Write(table.Bytes()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if *update == "" {
		return
	}
	for _, path := range strings.Split(*update, ",") {
		if err := updateFile(path, table.String()); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
}

func write(w io.Writer, r results) {
	fmt.Fprintln(w, "| target | measured | bound | met | medians |")
	fmt.Fprintln(w, "|---|---|---|---|---|")
	for _, t := range targets {
		v, raw, ok := t.compute(r)
		if !ok {
			fmt.Fprintf(w, "| %s | not measured | | | |\n", t.what)
			continue
		}
		if math.IsNaN(t.bound) {
			fmt.Fprintf(w, "| %s | %s | | — | %s |\n", t.what, withUnit(v, t.unit), raw)
			continue
		}
		met := (t.atMost && v <= t.bound) || (!t.atMost && v >= t.bound)
		op := map[bool]string{true: "≤", false: "≥"}[t.atMost]
		fmt.Fprintf(w, "| %s | %s | %s %s | %s | %s |\n", t.what, withUnit(v, t.unit), op, withUnit(t.bound, t.unit), map[bool]string{true: "yes", false: "**no**"}[met], raw)
	}
}

func withUnit(v float64, unit string) string {
	if unit == "" {
		return fmt.Sprintf("%.3g", v)
	}
	return fmt.Sprintf("%.3g %s", v, unit)
}
