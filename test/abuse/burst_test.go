//go:build linux

package abuse

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/sidelock/sidelock/pkg/client"
)

// burstRound is one burst of concurrent try-once acquires.
type burstRound struct {
	n      int
	counts map[string]int // "200", "429 overloaded", "503 no_quorum", network causes
	took   time.Duration  // from the start signal to the last answer
}

// burstResult is phase (c).
type burstResult struct {
	rounds []burstRound
	hb     hbStats
	ready  probeStats
	peak   procStats
}

// burstTimeout bounds one acquire of the burst: a try-once acquire that
// has not answered by then is a failure to its caller.
const burstTimeout = 15 * time.Second

// runBurst fires sz.rounds bursts of sz.burst concurrent try-once acquires
// of free names on a fresh sidecar, while holders heartbeat and /readyz is
// polled, releasing what each burst got before the next.
func runBurst(t *testing.T, e *env, sz sizes) burstResult {
	car := e.sidecar(t, "abuse.burst:")
	defer car.kill()
	hb, err := startBeaters(car.api, "burst/held", sz.beaters)
	if err != nil {
		t.Fatal(err)
	}
	stopReady := poll(car.admin+"/readyz", probeEvery, probeTimeout)
	stopSample := sample(car, 200*time.Millisecond)
	var r burstResult
	for round := range sz.rounds {
		r.rounds = append(r.rounds, burstOnce(car.api, round, sz.burst))
		time.Sleep(time.Second) // the holders beat between bursts too
	}
	r.peak = stopSample()
	r.ready, r.hb = stopReady(), hb.stop()
	return r
}

// burstOnce starts n try-once acquires at one signal, each over a new
// connection (n callers, not one client's pool), and then releases the
// locks granted.
func burstOnce(api string, round, n int) burstRound {
	tr := &http.Transport{MaxIdleConnsPerHost: n}
	defer tr.CloseIdleConnections()
	c := client.New(api, &http.Client{Transport: tr, Timeout: burstTimeout})
	r := burstRound{n: n, counts: map[string]int{}}
	var mu sync.Mutex
	var granted []client.Lease
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			l, err := c.Acquire(context.Background(), fmt.Sprintf("burst/%d/%d", round, i), client.Options{TTL: leaseTTL})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				r.counts[causeOf(err)]++
				return
			}
			r.counts["200"]++
			granted = append(granted, l)
		})
	}
	began := time.Now()
	close(start)
	wg.Wait()
	r.took = time.Since(began)
	releaseLeases(c, granted)
	return r
}

// releaseLeases gives the burst's locks back, 32 at a time, so each burst
// meets the same sidecar.
func releaseLeases(c *client.Client, leases []client.Lease) {
	sem := make(chan struct{}, 32)
	var wg sync.WaitGroup
	for _, l := range leases {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = c.Release(ctx, l.Name, l.Token)
		})
	}
	wg.Wait()
}
