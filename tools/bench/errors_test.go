package bench

import (
	"sync"
	"sync/atomic"
	"testing"
)

// Errors are counted, not fatal (issue 18: 0 in any run). A request that
// meets a transport error or an answer other than the one the workload
// expects is counted against its benchmark, the first few are logged, and
// the run goes on; each benchmark reports the count as its "errors" metric,
// which tools/report sums over the whole run. Setup still stops at once
// (b.Fatal): a benchmark without its masters or sidecar measures nothing.

// errorTallies holds each running benchmark's count: *testing.B → *atomic.Int64.
var errorTallies sync.Map

func tallyOf(b *testing.B) *atomic.Int64 {
	t, loaded := errorTallies.LoadOrStore(b, new(atomic.Int64))
	if !loaded {
		b.Cleanup(func() { errorTallies.Delete(b) })
	}
	return t.(*atomic.Int64)
}

// countError records one unexpected answer of b's workload; safe from the
// benchmark's callers' goroutines.
func countError(b *testing.B, format string, args ...any) {
	if tallyOf(b).Add(1) <= 3 {
		b.Logf(format, args...)
	}
}

// reportErrors reports the errors b has met so far: in its probe runs of a
// smaller b.N as well as the measured one, since an error in any counts.
func reportErrors(b *testing.B) {
	b.ReportMetric(float64(tallyOf(b).Load()), "errors")
}
