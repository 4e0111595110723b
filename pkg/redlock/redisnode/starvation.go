package redisnode

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

// schedReading is how many goroutine wake-ups the runtime sampled so far,
// and how many of them waited at least late to run.
type schedReading struct {
	late        time.Duration
	slow, total uint64
	valid       bool
}

// schedProbe reads the runtime's scheduling latencies (about half a
// microsecond, so once per batch is cheap) into a reused sample.
type schedProbe struct {
	mu     sync.Mutex
	sample []metrics.Sample
}

func newSchedProbe() *schedProbe {
	return &schedProbe{sample: []metrics.Sample{{Name: schedLatencies}}}
}

// read counts the wake-ups so far, and those at least late; nothing when
// late is zero (no threshold to judge by).
func (p *schedProbe) read(late time.Duration) schedReading {
	if late <= 0 {
		return schedReading{}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	metrics.Read(p.sample)
	if p.sample[0].Value.Kind() != metrics.KindFloat64Histogram {
		return schedReading{} // not supported by this runtime
	}
	h := p.sample[0].Value.Float64Histogram()
	r := schedReading{late: late, valid: true}
	for i, n := range h.Counts {
		r.total += n
		if h.Buckets[i] >= late.Seconds() { // bucket i is [Buckets[i], Buckets[i+1])
			r.slow += n
		}
	}
	return r
}

// starvedSince reports whether, between then and now, enough goroutine
// wake-ups were late (then.late or more) for the sidecar's own delays to
// explain a timeout.
func (p *schedProbe) starvedSince(then schedReading) bool {
	if !then.valid {
		return false
	}
	now := p.read(then.late)
	total, slow := now.total-then.total, now.slow-then.slow
	return total > 0 && slow*starvedShare >= total
}
