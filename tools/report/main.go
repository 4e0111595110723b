// Command report turns `go test -bench` output from tools/bench into the
// table of issue #7's targets: each a ratio or a figure measured in the
// same run, with the medians behind it. From tools/ (make bench):
//
//	go run ./report results/latest.txt > results/table.md
package main

import (
	"bytes"
	"fmt"
	"io"
	"os"

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
		return a / b, fmt.Sprintf("%.4g / %.4g %s", a, b, aUnit), true
	}
}

func figure(name, unit string) func(results) (float64, string, bool) {
	return func(r results) (float64, string, bool) {
		v, ok := r.Median(name, unit)
		return v, fmt.Sprintf("%.4g %s", v, unit), ok
	}
}

var targets = []target{
	{"uncontended acquire+release p50, 3 masters: sidelock HTTP / redsync in-process", ratio("Uncontended/masters=3/sidelock", "p50-µs", "Uncontended/masters=3/redsync", "p50-µs"), true, 0.75, "×"},
	{"  same, fencing off", ratio("Uncontended/masters=3/sidelock-nofence", "p50-µs", "Uncontended/masters=3/redsync", "p50-µs"), true, 0.75, "×"},
	{"  same, 1 master", ratio("Uncontended/masters=1/sidelock", "p50-µs", "Uncontended/masters=1/redsync", "p50-µs"), true, 0.75, "×"},
	{"  same, 5 masters", ratio("Uncontended/masters=5/sidelock", "p50-µs", "Uncontended/masters=5/redsync", "p50-µs"), true, 0.75, "×"},
	{"throughput, 64 callers, 3 masters: sidelock / redsync", ratio("Throughput/masters=3/callers=64/sidelock", "pairs/s", "Throughput/masters=3/callers=64/redsync", "pairs/s"), false, 2, "×"},
	{"throughput, 16 callers, 3 masters: sidelock / redsync", ratio("Throughput/masters=3/callers=16/sidelock", "pairs/s", "Throughput/masters=3/callers=16/redsync", "pairs/s"), false, 2, "×"},
	{"throughput, 64 callers, 1 master: sidelock pairs/s (3× Dapr's 5.6k)", figure("Throughput/masters=1/callers=64/sidelock", "pairs/s"), false, 16800, "pairs/s"},
	{"16-way contention, 1 ms holds: lock busy", figure("Contention16/sidelock-wait", "%lock-busy"), false, 85, "%"},
	{"16-way contention: waiters' p99 wait", figure("Contention16/sidelock-wait", "wait-p99-µs"), true, 40000, "µs"},
	{"16-way contention: hand-off p50", figure("Contention16/sidelock-wait", "handoff-p50-µs"), true, 500, "µs"},
	{"16-way contention: share of grants to the previous holder (fairness)", figure("Contention16/sidelock-wait", "%same-holder"), true, 10, "%"},
	{"renewal of 10k held locks: CPU per renewal (sidecar + Redis)", figure("Renewal/locks=10000/sidelock", "cpu-µs/renewal"), true, 10, "µs"},
	{"renewal of 10k held locks: redsync Extend CPU / sidelock CPU", ratio("Renewal/locks=10000/redsync-extend", "cpu-µs/renewal", "Renewal/locks=10000/sidelock", "cpu-µs/renewal"), false, 10, "×"},
	{"idle RSS", figure("SidecarIdleRSS", "idle-RSS-MB"), true, 15, "MB"},
	{"RSS holding 10k locks", figure("SidecarIdleRSS", "10k-held-RSS-MB"), true, 40, "MB"},
	{"process start to /readyz 200", figure("SidecarIdleRSS", "start-to-ready-ms"), true, 100, "ms"},
	{"static binary (-trimpath -s -w)", figure("SidecarIdleRSS", "binary-MB"), true, 20, "MB"},
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: report BENCH_OUTPUT")
		os.Exit(2)
	}
	raw, err := os.ReadFile(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	res, err := benchread.Read(bytes.NewReader(raw), os.Args[1], os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	write(os.Stdout, res)
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
		met := (t.atMost && v <= t.bound) || (!t.atMost && v >= t.bound)
		op := map[bool]string{true: "≤", false: "≥"}[t.atMost]
		fmt.Fprintf(w, "| %s | %.3g %s | %s %.3g %s | %s | %s |\n", t.what, v, t.unit, op, t.bound, t.unit, map[bool]string{true: "yes", false: "**no**"}[met], raw)
	}
}
