//go:build linux

package clients_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// benchEnv turns TestClientBench on (make bench-clients); it is not part of
// make test: its figures come from windows of seconds.
const benchEnv = "SIDELOCK_CLIENTS_BENCH"

// benchBase is the commit whose clients are the "before" of the figures:
// the Node client on the global fetch, the Python one with a connection per
// call (issue 31).
const benchBase = "22755b1"

// TestClientBench measures the clients against one real sidecar over three
// real redis-server masters, in one run: the Node client's CPU per lock
// (acquire + release) and throughput at 64 and 1 callers beside a bare
// undici keep-alive Pool, bare node:http with a keep-alive Agent, the bare
// global fetch and the client before (benchBase), the modes taking turns in
// short slices within one process (bench.mjs) so that a busy machine weighs
// on each alike; the Python clients' p50 per lock, before and after.
func TestClientBench(t *testing.T) {
	if os.Getenv(benchEnv) == "" {
		t.Skipf("set %s=1 (make bench-clients) to measure the clients", benchEnv)
	}
	node, python := need(t, "node"), need(t, "python3")
	dir := t.TempDir()
	oldNode := filepath.Join(dir, "old-index.mjs")
	gitShow(t, benchBase+":clients/node/index.js", oldNode)
	oldPython := filepath.Join(dir, "python-src")
	gitArchive(t, benchBase, "clients/python/src", dir)
	if err := os.Rename(filepath.Join(dir, "clients/python/src"), oldPython); err != nil {
		t.Fatal(err)
	}
	api := startSidecar(t)
	env := []string{"SIDELOCK_ADDR=" + api, "SIDELOCK_OLD_CLIENT=" + oldNode}
	tools, err := filepath.Abs("../test/clients")
	if err != nil {
		t.Fatal(err)
	}
	const rounds = 3
	modes := []string{"client", "undici", "http", "fetch", "old"}
	fmt.Printf("Node: modes in turn, 16 slices of 300 ms each per mode in one process, %d processes; medians:\n", rounds)
	fmt.Printf("  %-7s %7s %12s %8s %10s %8s %8s %7s\n", "mode", "callers", "CPU µs/pair", "/undici", "pairs/s", "p50 ms", "p99 ms", "errors")
	for _, callers := range []int{64, 1} {
		byMode := map[string][]benchLine{}
		ratios := map[string][]float64{}
		for round := 0; round < rounds; round++ {
			lines := runJSONLines(t, tools, env, node, "bench.mjs", strings.Join(modes, ","), fmt.Sprint(callers), "16", "300")
			undici := lines["undici"].CPU
			for _, mode := range modes {
				byMode[mode] = append(byMode[mode], lines[mode])
				ratios[mode] = append(ratios[mode], lines[mode].CPU/undici)
			}
		}
		for _, mode := range modes {
			rs := byMode[mode]
			fmt.Printf("  %-7s %7d %12.0f %7.2f× %10.0f %8.3f %8.3f %7.0f\n", mode, callers,
				median(rs, func(l benchLine) float64 { return l.CPU }), medianOf(ratios[mode]),
				median(rs, func(l benchLine) float64 { return l.PairsPerS }), median(rs, func(l benchLine) float64 { return l.P50 }),
				median(rs, func(l benchLine) float64 { return l.P99 }), median(rs, func(l benchLine) float64 { return l.Errors }))
		}
	}
	fmt.Println("  /undici: the median of each process's CPU per pair over bare undici's in that process (target for client: ≤ 1.15×)")
	fmt.Printf("Python, one caller, 2000 pairs per run, %d runs each, interleaved; medians:\n", rounds)
	configs := []struct{ label, mode, src string }{
		{"blocking, before (a connection per call)", "blocking", oldPython},
		{"blocking, kept-alive pool", "blocking", ""},
		{"asyncio, kept-alive pool", "async", ""},
	}
	results := make([][]benchLine, len(configs))
	for round := 0; round < rounds; round++ {
		for i, c := range configs {
			var line benchLine
			runJSON(t, tools, append(env, "SIDELOCK_PY_SRC="+c.src), &line, python, "bench.py", c.mode, "2000")
			results[i] = append(results[i], line)
		}
	}
	for i, c := range configs {
		rs := results[i]
		fmt.Printf("  %-42s p50 %.3f ms  p99 %.3f ms  CPU %.0f µs/pair  errors %.0f\n", c.label,
			median(rs, func(l benchLine) float64 { return l.P50 }), median(rs, func(l benchLine) float64 { return l.P99 }),
			median(rs, func(l benchLine) float64 { return l.CPU }), median(rs, func(l benchLine) float64 { return l.Errors }))
	}
}

// benchLine is the JSON line bench.mjs and bench.py print.
type benchLine struct {
	Mode      string  `json:"mode"`
	Callers   float64 `json:"callers"`
	Pairs     float64 `json:"pairs"`
	Errors    float64 `json:"errors"`
	PairsPerS float64 `json:"pairs_per_s"`
	CPU       float64 `json:"cpu_us_per_pair"`
	P50       float64 `json:"p50_ms"`
	P99       float64 `json:"p99_ms"`
}

func median(ls []benchLine, f func(benchLine) float64) float64 {
	vs := make([]float64, len(ls))
	for i, l := range ls {
		vs[i] = f(l)
	}
	return medianOf(vs)
}

func medianOf(vs []float64) float64 {
	vs = slices.Clone(vs)
	slices.Sort(vs)
	return vs[len(vs)/2]
}

// runJSONLines runs a bench script that prints one JSON line per mode.
func runJSONLines(t *testing.T, dir string, env []string, name string, args ...string) map[string]benchLine {
	t.Helper()
	out := map[string]benchLine{}
	for _, l := range strings.Split(strings.TrimSpace(run1(t, dir, env, name, args...)), "\n") {
		var line benchLine
		if err := json.Unmarshal([]byte(l), &line); err != nil {
			t.Fatalf("%s %v: %v in %q", name, args, err, l)
		}
		out[line.Mode] = line
	}
	return out
}

// runJSON runs a bench script in dir and decodes the last line it prints.
func runJSON(t *testing.T, dir string, env []string, into any, name string, args ...string) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(run1(t, dir, env, name, args...)), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), into); err != nil {
		t.Fatalf("%s %v: %v in %q", name, args, err, lines)
	}
}

// run1 runs a bench script in dir and returns what it printed.
func run1(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), append(env, "PYTHONDONTWRITEBYTECODE=1")...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
	return string(out)
}

func gitShow(t *testing.T, object, to string) {
	t.Helper()
	out, err := exec.Command("git", "show", object).Output()
	if err != nil {
		t.Fatalf("git show %s: %v", object, err)
	}
	if err := os.WriteFile(to, out, 0o644); err != nil {
		t.Fatal(err)
	}
}

func gitArchive(t *testing.T, rev, path, dir string) {
	t.Helper()
	cmd := exec.Command("sh", "-c", fmt.Sprintf("git -C .. archive %s %s | tar -x -C %s", rev, path, dir))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git archive: %v\n%s", err, out)
	}
}
