package main

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sidelock/sidelock/internal/redistest"
	"github.com/sidelock/sidelock/internal/sidecartest"
)

// Issue 32: a sidecar starved of CPU must not call healthy masters down.
// Its CPU is limited to 100m (10ms of every 100ms, a cgroup quota: when
// the quota is spent the kernel stalls it for up to 90ms, longer than the
// shipped 50ms node timeout), the masters keep a CPU of their own (a raised
// priority, as on hosts of their own), and it serves try-once acquires at a
// rate it can serve within the quota (about three quarters of it). Then
// /readyz stays 200, no master is called down and no acquire answers 503
// no_quorum: a missed ping is not an outage (SIDELOCK_HEALTH_DOWN_AFTER),
// a connection dropped by a timed-out call and opened again to the same
// server counts at once (redlock.ServerTracker), and a round spoiled by a
// stall is retried within SIDELOCK_NO_QUORUM_RETRY rather than refused on
// a verdict younger than one health round. Some acquires may be shed as
// 429 overloaded, which is what the sidecar's own overload is.
//
// Without the window (SIDELOCK_HEALTH_DOWN_AFTER=0: one missed ping calls a
// master down) it fails every run: masters called down, and in some runs
// /readyz 503 (3 times in 15s) and acquires answered 503 no_quorum (14).
func TestStarvedSidecarCallsNoHealthyMasterDown(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("a load test that judges the sidecar's own speed: make test-load runs it without -race")
	}
	const (
		quota, period = 10 * time.Millisecond, 100 * time.Millisecond
		rate          = 50 // try-once acquires a second, each released at once
		runFor        = 15 * time.Second
	)
	masters := redistest.StartN(t, 3)
	for _, m := range masters {
		if err := m.Prioritize(); err != nil {
			t.Skipf("the masters need a CPU of their own: %v", err)
		}
	}
	// The shipped node timeout, and a try-once retry budget that outlasts a
	// few stalls of the quota: rounds spoiled by the sidecar's own stall
	// are retried, while a health verdict would refuse them at once.
	a := startSidecar(t, masters, "SIDELOCK_KEY_TTL=1s", "SIDELOCK_NODE_TIMEOUT=50ms",
		"SIDELOCK_NO_QUORUM_RETRY=1s", "SIDELOCK_LOG_LEVEL=info")
	waitSettled(t, a, len(masters))
	if err := a.LimitCPU(quota, period); err != nil {
		if errors.Is(err, sidecartest.ErrNoCPULimit) {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	cpuBefore := processCPU(t, a.Pid())
	stop := make(chan struct{})
	notReady := pollReadiness(a, stop)
	outcomes, latencies := tryOnceAtRate(t, a, rate, runFor)
	close(stop)
	cpu := processCPU(t, a.Pid()) - cpuBefore
	slices.Sort(latencies)
	t.Logf("%d try-once acquires a second for %v under a %v/%v CPU quota: %v; sidecar CPU %v (%.0f%% of the quota); "+
		"acquire p50 %v, p99 %v, max %v; /readyz not 200 %d times",
		rate, runFor, quota, period, outcomes, cpu, 100*cpu.Seconds()/(runFor.Seconds()*quota.Seconds()/period.Seconds()),
		percentile(latencies, 0.5), percentile(latencies, 0.99), latencies[len(latencies)-1], notReady.Load())
	for o, n := range outcomes {
		if strings.HasPrefix(o, "503") {
			t.Errorf("%d acquires answered %s while every master was healthy", n, o)
		}
	}
	if n := notReady.Load(); n > 0 {
		t.Errorf("/readyz was not 200 %d times while every master was healthy", n)
	}
	if strings.Contains(a.Log(), "master down") {
		t.Error("a healthy master was called down")
	}
}

// waitSettled waits until every master counts and has been up past the
// key ttl's restart guard with a margin: a younger one that misses a ping
// has its server info read again, which would put it back on probation
// until it is the guard's age.
func waitSettled(t *testing.T, s *sidecar, masters int) {
	t.Helper()
	eventually(t, 15*time.Second, "every master eligible and up 3s", func() bool {
		settled := 0
		for _, m := range s.readyzMasters(t) {
			up, _ := time.ParseDuration(fmt.Sprint(m["uptime"]))
			if m["eligible"] == true && up >= 3*time.Second {
				settled++
			}
		}
		return settled == masters
	})
}

// pollReadiness counts the /readyz answers other than 200, ten a second,
// until stop is closed.
func pollReadiness(s *sidecar, stop <-chan struct{}) *atomic.Int64 {
	var notReady atomic.Int64
	client := &http.Client{Timeout: 5 * time.Second}
	go func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			res, err := client.Get(s.admin + "/readyz")
			if err == nil {
				res.Body.Close()
			}
			if err != nil || res.StatusCode != http.StatusOK {
				notReady.Add(1)
			}
		}
	}()
	return &notReady
}

// tryOnceAtRate sends rate try-once acquires of distinct names a second
// for d, each released once granted, and counts the answers by status and
// code ("200", "429 overloaded", ...), with the acquires' latencies.
func tryOnceAtRate(t *testing.T, s *sidecar, rate int, d time.Duration) (map[string]int, []time.Duration) {
	t.Helper()
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	defer client.CloseIdleConnections()
	var mu sync.Mutex
	outcomes := map[string]int{}
	var latencies []time.Duration
	var wg sync.WaitGroup
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	for i, end := 0, time.Now().Add(d); time.Now().Before(end); i++ {
		<-tick.C
		wg.Go(func() {
			url := fmt.Sprintf("%s/locks/starved/%d", s.api, i)
			start := time.Now()
			code, body := doJSON(t, client, http.MethodPost, url, "")
			took := time.Since(start)
			outcome := fmt.Sprint(code)
			switch {
			case code == http.StatusOK:
				doJSON(t, client, http.MethodDelete, url, fmt.Sprint(body["token"]))
			case body["code"] != nil:
				outcome += fmt.Sprint(" ", body["code"])
				t.Logf("acquire after %v: %d %v", took, code, body["detail"])
			}
			mu.Lock()
			defer mu.Unlock()
			outcomes[outcome]++
			latencies = append(latencies, took)
		})
	}
	wg.Wait()
	return outcomes, latencies
}

func percentile(sorted []time.Duration, q float64) time.Duration {
	return sorted[int(q*float64(len(sorted)-1))]
}

// processCPU is the CPU time process pid has used (user and system), from
// /proc/PID/stat: "pid (comm) state ..." with utime and stime the 14th and
// 15th fields, in clock ticks of 10ms.
func processCPU(t *testing.T, pid int) time.Duration {
	t.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	fields := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+1:]))
	var utime, stime int64
	if _, err := fmt.Sscan(fields[11]+" "+fields[12], &utime, &stime); err != nil {
		t.Fatal(err)
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond
}
