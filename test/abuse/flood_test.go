//go:build linux

package abuse

import (
	"strings"
	"testing"
	"time"
)

// floodResult is phase (a): many idle connections against the lock API
// while the kubelet probes /healthz and holders heartbeat.
type floodResult struct {
	target, accepted, refused, named, skipped int
	refusedBy                                 map[string]int
	openTook                                  time.Duration
	stillOpen                                 int // accepted ones the sidecar had not closed after the hold
	health                                    probeStats
	hb                                        hbStats
	base, peak, after                         procStats // before, the highest during, after closing
	noFileLimit                               uint64    // this process's soft RLIMIT_NOFILE
}

// Admin probe settings: the chart's probes run every second with a 1s
// timeout; polling ten times as often catches shorter stalls.
const (
	probeEvery   = 100 * time.Millisecond
	probeTimeout = time.Second
)

// runFlood opens sz.floodConns idle connections on a fresh sidecar, keeps
// them for sz.floodHold, and closes them.
func runFlood(t *testing.T, e *env, sz sizes) floodResult {
	car := e.sidecar(t, "abuse.flood:")
	r := floodResult{target: sz.floodConns, base: car.stats()}
	// The client ends and a margin for the harness's own descriptors.
	r.noFileLimit = raiseNoFile(uint64(sz.floodConns) + 1024)
	if limit := int(r.noFileLimit) - 512; r.target > limit {
		t.Logf("flood capped at %d connections by this process's RLIMIT_NOFILE %d", limit, r.noFileLimit)
		r.target = limit
	}
	hb, err := startBeaters(car.api, "flood/held", sz.beaters)
	if err != nil {
		t.Fatal(err)
	}
	stopHealth := poll(car.admin+"/healthz", probeEvery, probeTimeout)
	stopSample := sample(car, 200*time.Millisecond)
	f := openIdleConns(strings.TrimPrefix(car.api, "http://"), r.target, 60*time.Second)
	time.Sleep(sz.floodHold)
	r.stillOpen = f.stillOpen()
	r.peak = stopSample()
	f.closeAll()
	time.Sleep(2 * time.Second) // a few beats and probes after the flood
	r.health, r.hb = stopHealth(), hb.stop()
	r.after = car.stats()
	r.accepted, r.refused, r.named, r.skipped, r.refusedBy, r.openTook = f.accepted(), f.refusedTotal(), f.named, f.skipped, f.refused, f.openTook
	car.kill()
	return r
}
