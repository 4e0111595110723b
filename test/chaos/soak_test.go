//go:build linux

package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// soakFile is where the soak writes its table (in this package's directory).
const soakFile = "soak.md"

// soakSample is every sidecar's usage at one moment of the soak.
type soakSample struct {
	at     time.Duration
	grants int // critical sections begun since the previous sample
	cars   []usage
}

// TestSoak runs steady mixed load (heartbeats, held connections, waiters,
// try-once callers, the availability prober) for SIDELOCK_SOAK (at least
// 10m for make soak) over 5 masters and 3 sidecars, sampling goroutines
// and RSS every SIDELOCK_SOAK_EVERY (default 30s). It fails on a safety
// violation or on goroutines that do not come back down once idle.
func TestSoak(t *testing.T) {
	length, every := soakTimes(t)
	if sidelockBinary == "" {
		dir := t.TempDir()
		sidelockBinary = dir + "/sidelock"
		if err := buildSidelock(sidelockBinary); err != nil {
			t.Fatal(err)
		}
	}
	c := startCluster(t, true)
	o := newOracle()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	r := &run{t: t, c: c, o: o, ctx: ctx, rng: rand.New(rand.NewPCG(3, 5)), restarted: map[int]bool{}}
	prime(c)
	idleBefore := usages(c)
	var probes sync.WaitGroup
	prober(ctx, c.sidecars, o, &probes)
	r.spawn(ctx, append(append([]clientKind{}, normalMix...), normalMix...))
	start := time.Now()
	samples := sampleUntil(ctx, c, o, start, length, every)
	end := time.Now()
	stop()
	waitBounded(t, &r.wg, 10*time.Second, "workers")
	waitBounded(t, &probes, 5*time.Second, "prober")
	idleAfter := settle(c)
	v := o.judge(start, end, end, end, len(c.sidecars))
	table := renderSoak(length, every, samples, idleBefore, idleAfter, v)
	fmt.Println(table)
	if err := os.WriteFile(soakFile, []byte(table), 0o644); err != nil {
		t.Error(err)
	}
	if v.overlaps > 0 || v.fenceViolations > 0 {
		t.Errorf("%d overlaps, %d fence-order violations: %s %s", v.overlaps, v.fenceViolations, v.worstOverlap, v.worstFenceReport)
	}
	if v.brokenPromises > 0 {
		t.Errorf("%d broken promises (%d valid_untils of %d grants checked); the worst by %v: %s",
			v.brokenPromises, v.promisesChecked, v.promiseGrants, v.worstBrokenBy.Round(time.Millisecond), v.worstPromise)
	}
	for i := range idleAfter {
		if idleAfter[i].goroutines > idleBefore[i].goroutines+goroutineSlack {
			t.Errorf("sidecar %d: %v goroutines idle after the soak, %v before", i, idleAfter[i].goroutines, idleBefore[i].goroutines)
		}
	}
}

// soakTimes reads SIDELOCK_SOAK (how long) and SIDELOCK_SOAK_EVERY.
func soakTimes(t *testing.T) (length, every time.Duration) {
	t.Helper()
	raw := os.Getenv("SIDELOCK_SOAK")
	if raw == "" {
		t.Skip("soak: set SIDELOCK_SOAK=10m (make soak)")
	}
	length, err := time.ParseDuration(raw)
	if err != nil || length <= 0 {
		t.Fatalf("SIDELOCK_SOAK=%q is not a positive duration", raw)
	}
	every = 30 * time.Second
	if e := os.Getenv("SIDELOCK_SOAK_EVERY"); e != "" {
		if every, err = time.ParseDuration(e); err != nil || every <= 0 {
			t.Fatalf("SIDELOCK_SOAK_EVERY=%q is not a positive duration", e)
		}
	}
	return length, every
}

// sampleUntil samples every sidecar's usage every period until length.
func sampleUntil(ctx context.Context, c *cluster, o *oracle, start time.Time, length, every time.Duration) []soakSample {
	var out []soakSample
	seen := 0
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return out
		case <-tick.C:
		}
		o.mu.Lock()
		total := len(o.sections)
		o.mu.Unlock()
		s := soakSample{at: time.Since(start), grants: total - seen}
		seen = total
		for _, car := range c.sidecars {
			s.cars = append(s.cars, car.usage())
		}
		out = append(out, s)
		fmt.Printf("soak %v: %d grants; %s\n", s.at.Round(time.Second), s.grants, carsText(s.cars))
		if s.at >= length {
			return out
		}
	}
}

func carsText(cars []usage) string {
	parts := make([]string, len(cars))
	for i, u := range cars {
		parts[i] = fmt.Sprintf("sidecar%d %.0f goroutines %.1f MB (%.0f held, %.0f waiting)", i, u.goroutines, u.rssMB, u.held, u.waiters)
	}
	return strings.Join(parts, "; ")
}

func renderSoak(length, every time.Duration, samples []soakSample, before, after []usage, v verdict) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# sidelock soak — %v of steady mixed load\n\n", length)
	fmt.Fprintf(&b, "Produced by `SIDELOCK_SOAK=%v go test -run Soak ./test/chaos` on %s: %d masters (appendfsync always), %d sidecars, "+
		"%d workers per sidecar (heartbeats, held connections, waiters, try-once) on %d hot names, plus a prober; sampled every %v.\n\n",
		length, time.Now().UTC().Format("2006-01-02"), numMasters, numSidecars, 2*len(normalMix), len(hotNames), every)
	b.WriteString("| time | grants in interval |")
	for i := range before {
		fmt.Fprintf(&b, " sidecar%d goroutines | sidecar%d RSS MB | sidecar%d held/waiting |", i, i, i)
	}
	b.WriteString("\n|---|---|" + strings.Repeat("---|---|---|", len(before)) + "\n")
	row := func(label string, grants string, cars []usage) {
		fmt.Fprintf(&b, "| %s | %s |", label, grants)
		for _, u := range cars {
			fmt.Fprintf(&b, " %.0f | %.1f | %.0f/%.0f |", u.goroutines, u.rssMB, u.held, u.waiters)
		}
		b.WriteString("\n")
	}
	row("idle before", "—", before)
	for _, s := range samples {
		row(s.at.Round(time.Second).String(), fmt.Sprint(s.grants), s.cars)
	}
	row("idle after", "—", after)
	fmt.Fprintf(&b, "\n%d grants, %d mutual-exclusion violations, %d fence-order violations, %d broken promises (%d valid_untils checked), availability %.2f%%, failures %s.\n",
		v.grants, v.overlaps, v.fenceViolations, v.brokenPromises, v.promisesChecked, 100*v.availability, failuresText(v.failures))
	return b.String()
}
