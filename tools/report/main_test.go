package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/sidelock/sidelock/tools/benchread"
)

func TestTableFromBenchmarkOutput(t *testing.T) {
	out := `goos: linux
pkg: github.com/sidelock/sidelock/tools/bench
BenchmarkUncontended/masters=3/sidelock-2         	     100	   600000 ns/op	       500 p50-µs
BenchmarkUncontended/masters=3/sidelock-2         	     100	   600000 ns/op	       400 p50-µs
BenchmarkUncontended/masters=3/sidelock-2         	     100	   600000 ns/op	       450 p50-µs
BenchmarkUncontended/masters=3/redsync-2          	     100	   300000 ns/op	       300 p50-µs
BenchmarkSidecarIdleRSS-2                         	       1	        1 ns/op	        12 idle-RSS-MB	 30 10k-held-RSS-MB
BenchmarkCPUPerPair/masters=3/sidelock-process-2  	     100	  1000000 ns/op	       500 sidecar-cpu-µs/pair	 100 redis-cpu-µs/pair	 1 errors
BenchmarkCPUPerPair/masters=3/sidelock-process-2  	     100	  1000000 ns/op	       300 sidecar-cpu-µs/pair	 120 redis-cpu-µs/pair	 2 errors
BenchmarkCPUPerPair/masters=3/redsync-2           	     100	   300000 ns/op	       200 client-cpu-µs/pair	 100 redis-cpu-µs/pair
BenchmarkCPUPerPair/masters=3/floor-process-2     	     100	  1000000 ns/op	       320 sidecar-cpu-µs/pair	 100 redis-cpu-µs/pair
BenchmarkCPUPerPair/masters=3/nethttp-process-2   	     100	  1000000 ns/op	        80 sidecar-cpu-µs/pair
BenchmarkHotLock/masters=3/sidelock-2             	     100	   300000 ns/op	       100 p50-µs	 1 errors
BenchmarkSidecarIdleRSS-2                         	       1	        1 ns/op	        14 idle-RSS-MB	 50 10k-held-RSS-MB
PASS
ok  	github.com/sidelock/sidelock/tools/bench	10.0s
`
	var warn bytes.Buffer
	r, err := benchread.Read(strings.NewReader(out), "latest.txt", &warn)
	if err != nil || warn.Len() > 0 {
		t.Fatalf("read: %v, warnings %q", err, warn.String())
	}
	var table bytes.Buffer
	write(&table, r)
	for _, want := range []string{
		// the median of three over the one run
		"| uncontended acquire+release p50, 3 masters: sidelock HTTP / redsync in-process | 1.5 × | ≤ 1 × | **no** | 450 / 300 p50-µs |",
		// the median of an even count is the mean of the middle two, as benchstat's
		"| idle RSS | 13 MB | ≤ 15 MB | yes | 13 idle-RSS-MB |",
		"| RSS holding 10k locks | 40 MB | ≤ 40 MB | yes | 40 10k-held-RSS-MB |",
		"|   same, 1 master | not measured | | | |",
		// another process's CPU against this one's, from the same benchmark run
		"| sidecar process CPU per pair / redsync's client CPU per pair | 2 × | ≤ 1 × | **no** | 400 sidecar-cpu-µs/pair / 200 client-cpu-µs/pair |",
		"| Redis CPU per pair, all 3 masters, one sequential caller: sidelock / redsync | 1.1 × | ≤ 0.5 × | **no** | 110 / 100 redis-cpu-µs/pair |",
		// issue 30: against the floor program, and a row without a bound of its own
		"| issue 30: sidecar process CPU per pair, 3 masters, one sequential caller: sidelock / floor program | 1.25 × | ≤ 1.25 × | yes | 400 / 320 sidecar-cpu-µs/pair |",
		"|   the platform: HTTP exchange alone (no Redis) process CPU per pair / floor program's | 0.25 × | | — | 80 / 320 sidecar-cpu-µs/pair |",
		// every error of every repetition counts, not a median
		"| errors (unexpected answers, transport errors) in all benchmarks, all runs | 4 | ≤ 0 | **no** | 2 benchmarks counting: CPUPerPair/masters=3/sidelock-process 3, HotLock/masters=3/sidelock 1 |",
	} {
		if !strings.Contains(table.String(), want+"\n") {
			t.Errorf("table lacks\n%s\nin\n%s", want, table.String())
		}
	}
}
