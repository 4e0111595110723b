package bench

import (
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-redsync/redsync/v4"

	"github.com/sidelock/sidelock/pkg/redlock"
)

// BenchmarkCPUPerPair is issue 18's CPU rows: one sequential caller's
// acquire+release of distinct names on three masters, and the CPU spent per
// pair by each side:
//
//   - sidelock-process: the real binary (fencing on, as shipped) in a
//     process of its own, driven over HTTP from here. Its CPU is read from
//     /proc/<pid>/stat, so the HTTP client's (this process's, reported
//     beside it as client-cpu-µs/pair) is not in it.
//   - redsync: the library in-process; its CPU is this process's
//     (getrusage), the loop around it included, as a library's user pays it.
//   - floor-process and nethttp-process: the floor program (floor_test.go)
//     and its routes with no Redis, measured as sidelock-process is;
//     goredis: the floor's scripts through go-redis in-process, no HTTP.
//
// All report the masters' CPU per pair (INFO cpu, summed over the three).
// Each side's idle background (health rounds, Redis's cron) is in its
// figures: a pod pays it too.
func BenchmarkCPUPerPair(b *testing.B) {
	nodes := redisMasters(b, 3)
	b.Run("masters=3/sidelock-process", func(b *testing.B) {
		s := startBinary(b, sidecarBinary(b), addrsOf(nodes), cpuSidecarEnv...)
		processPairs(b, nodes, s.Pid(), s.API())
	})
	// The floor program (floor_test.go), and the HTTP exchange alone
	// (no Redis): the platform's share of the sidecar's CPU.
	b.Run("masters=3/floor-process", func(b *testing.B) {
		pid, base := startFloor(b, addrsOf(nodes))
		processPairs(b, nodes, pid, base)
	})
	b.Run("masters=3/nethttp-process", func(b *testing.B) {
		pid, base := startFloor(b, nil)
		processPairs(b, nodes, pid, base)
	})
	b.Run("masters=3/redsync", func(b *testing.B) {
		rs := redsyncFor(b, nodes)
		client0, redis0 := cpuSeconds(), redisCPUSeconds(b, nodes)
		for i := 0; b.Loop(); i++ {
			m := rs.NewMutex(fmt.Sprintf("rscpu/%d", i%1024), redsync.WithExpiry(10*time.Second), redsync.WithTries(1))
			if err := m.Lock(); err != nil {
				b.Fatal(err)
			}
			if _, err := m.Unlock(); err != nil {
				b.Fatal(err)
			}
		}
		pairs := float64(b.N)
		b.ReportMetric((cpuSeconds()-client0)*1e6/pairs, "client-cpu-µs/pair")
		b.ReportMetric((redisCPUSeconds(b, nodes)-redis0)*1e6/pairs, "redis-cpu-µs/pair")
	})
	// go-redis alone: the floor's scripts with no HTTP, in this process.
	b.Run("masters=3/goredis", func(b *testing.B) {
		client0, redis0 := cpuSeconds(), redisCPUSeconds(b, nodes)
		goredisPairs(b, nodes)
		pairs := float64(b.N)
		b.ReportMetric((cpuSeconds()-client0)*1e6/pairs, "client-cpu-µs/pair")
		b.ReportMetric((redisCPUSeconds(b, nodes)-redis0)*1e6/pairs, "redis-cpu-µs/pair")
	})
}

// processPairs drives one sequential caller's pairs over HTTP at base,
// served by the process pid, and reports that process's CPU per pair
// (the HTTP client's, this process's, beside it), the masters' and the
// pairs' latency.
func processPairs(b *testing.B, nodes []redlock.Node, pid int, base string) {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	lat := make(latencies, 0, b.N)
	sidecar0, client0, redis0 := processCPUSeconds(b, pid), cpuSeconds(), redisCPUSeconds(b, nodes)
	for i := 0; b.Loop(); i++ {
		start := time.Now()
		if pairHTTP(b, client, base, fmt.Sprintf("cpu/%d", i%1024)) {
			lat = append(lat, time.Since(start))
		}
	}
	pairs := float64(b.N)
	b.ReportMetric((processCPUSeconds(b, pid)-sidecar0)*1e6/pairs, "sidecar-cpu-µs/pair")
	b.ReportMetric((cpuSeconds()-client0)*1e6/pairs, "client-cpu-µs/pair")
	b.ReportMetric((redisCPUSeconds(b, nodes)-redis0)*1e6/pairs, "redis-cpu-µs/pair")
	lat.report(b)
	reportErrors(b)
}

// cpuSidecarEnv is the shipped configuration but for a short key ttl: the
// masters are fresh and not durable, so a sidecar keeps them out of its
// quorum (not ready) for one key ttl (the restart guard); 2s instead of 10s
// keeps that wait short. Durable masters (appendfsync always) would skip it
// but put an fsync in every write, in the Redis CPU this measures. The pairs
// last milliseconds, so the key ttl does not change their work; the node
// timeout is the most the ttl allows (a tenth), for a loaded machine.
var cpuSidecarEnv = []string{"SIDELOCK_KEY_TTL=2s", "SIDELOCK_NODE_TIMEOUT=200ms"}

func addrsOf(nodes []redlock.Node) []string {
	addrs := make([]string, len(nodes))
	for i, n := range nodes {
		addrs[i] = n.Addr()
	}
	return addrs
}

// clockTicks is USER_HZ, the unit of /proc's CPU times: 100 on every Linux
// architecture Go builds for (sysconf(_SC_CLK_TCK) needs cgo).
const clockTicks = 100

// processCPUSeconds is another process's user+system CPU time, all its
// threads, from /proc/<pid>/stat (fields 14 and 15, utime and stime).
func processCPUSeconds(b *testing.B, pid int) float64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// The command name (field 2) is in parentheses and may hold spaces:
	// count the fields after its closing one, which is field 3.
	_, rest, ok := strings.Cut(string(raw), ") ")
	fields := strings.Fields(rest)
	if !ok || len(fields) < 13 {
		b.Fatalf("/proc/%d/stat: %q", pid, raw)
	}
	utime, err1 := strconv.ParseFloat(fields[14-3], 64)
	stime, err2 := strconv.ParseFloat(fields[15-3], 64)
	if err1 != nil || err2 != nil {
		b.Fatalf("/proc/%d/stat: %q", pid, raw)
	}
	return (utime + stime) / clockTicks
}
