// Package starvation tells this process's own delays from a remote's: it
// reads the Go runtime's scheduling latencies, so a timeout that happened
// while goroutines waited long to run can be blamed on the sidecar (local
// overload) rather than on the master it was waiting for. It is public,
// beside package redlock, because package redisnode judges its calls with
// it (and the sidecar's health checks too).
package starvation

import (
	"runtime/metrics"
	"sync"
	"time"
)

// Telling the sidecar's slowness from the master's.
//
// A call that times out after it was sent has not necessarily waited for
// the master: on a sidecar whose CPUs are saturated (a burst of requests
// on two cores), the goroutine that writes the pipeline and reads its
// reply waits its turn to run, and so, on a shared host, may the master.
// The Go runtime measures the first directly: how long goroutines wait to
// run once runnable (/sched/latencies:seconds). When a sizeable share of
// them waited a tenth of the call's budget or more while the call was out,
// the sidecar was too late to judge the master, and the call fails as
// local overload (redlock.ErrOverloaded) instead of a master timeout. An
// idle sidecar waiting on a master that hangs shows no such latencies, so
// that stays a master timeout.

const schedLatencies = "/sched/latencies:seconds"

// starvedShare is the share of goroutine wake-ups that must have been late
// for the sidecar to count as starved: 1%, far above an idle or merely
// busy process (none), far below a saturated one (measured: p99 of 25ms
// under a 1,000-request burst on two cores).
const starvedShare = 100 // 1 in starvedShare

// Reading is how many goroutine wake-ups the runtime sampled so far,
// and how many of them waited at least late to run.
type Reading struct {
	late        time.Duration
	slow, total uint64
	valid       bool
}

// Probe reads the runtime's scheduling latencies (about half a
// microsecond, so once per batch is cheap) into a reused sample.
type Probe struct {
	mu     sync.Mutex
	sample []metrics.Sample
}

// NewProbe returns a Probe.
func NewProbe() *Probe {
	return &Probe{sample: []metrics.Sample{{Name: schedLatencies}}}
}

// Read counts the wake-ups so far, and those at least late; nothing when
// late is zero (no threshold to judge by).
func (p *Probe) Read(late time.Duration) Reading {
	if late <= 0 {
		return Reading{}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	metrics.Read(p.sample)
	if p.sample[0].Value.Kind() != metrics.KindFloat64Histogram {
		return Reading{} // not supported by this runtime
	}
	h := p.sample[0].Value.Float64Histogram()
	r := Reading{late: late, valid: true}
	for i, n := range h.Counts {
		r.total += n
		if h.Buckets[i] >= late.Seconds() { // bucket i is [Buckets[i], Buckets[i+1])
			r.slow += n
		}
	}
	return r
}

// StarvedSince reports whether, between then and now, enough goroutine
// wake-ups were late (then.late or more) for the sidecar's own delays to
// explain a timeout.
func (p *Probe) StarvedSince(then Reading) bool {
	if !then.valid {
		return false
	}
	now := p.Read(then.late)
	total, slow := now.total-then.total, now.slow-then.slow
	return total > 0 && slow*starvedShare >= total
}
