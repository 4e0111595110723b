//go:build linux

package abuse

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/sidelock/sidelock/pkg/client"
)

// probeStats is what a poller of an admin endpoint saw.
type probeStats struct {
	n, failed  int
	maxLatency time.Duration
	statuses   map[int]int // 0: no answer within the timeout
}

// poll GETs url every `every` with a fresh connection and a timeout (as
// the kubelet probes) until the returned stop is called, which returns
// what it saw.
func poll(url string, every, timeout time.Duration) (stop func() probeStats) {
	ctx, cancel := context.WithCancel(context.Background())
	st := probeStats{statuses: map[int]int{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for ctx.Err() == nil {
			began := time.Now()
			code := statusOf(url, timeout)
			st.n++
			st.statuses[code]++
			st.maxLatency = max(st.maxLatency, time.Since(began))
			if code != http.StatusOK {
				st.failed++
			}
			select {
			case <-ctx.Done():
			case <-tick.C:
			}
		}
	}()
	return func() probeStats { cancel(); <-done; return st }
}

// sample reads the sidecar's /proc figures every `every` until the
// returned stop is called, which returns the highest of each.
func sample(s *sidecar, every time.Duration) (stop func() procStats) {
	ctx, cancel := context.WithCancel(context.Background())
	var peak procStats
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			p := s.stats()
			peak.rssKB, peak.hwmKB, peak.fds = max(peak.rssKB, p.rssKB), max(peak.hwmKB, p.hwmKB), max(peak.fds, p.fds)
			select {
			case <-ctx.Done():
			case <-time.After(every):
			}
		}
	}()
	return func() procStats { cancel(); <-done; return peak }
}

// Heartbeat settings of the existing holders: a lease of leaseTTL beaten
// every beatEvery, each beat bounded by beatTimeout (a beat that takes
// longer is a failed one to an application).
const (
	leaseTTL    = 10 * time.Second
	beatEvery   = time.Second
	beatTimeout = 2 * time.Second
)

// hbStats is what the existing holders saw while the sidecar was abused.
type hbStats struct {
	holders, beats, failed, lost int
	causes                       map[string]int
}

// beaters are holders of plain leases that heartbeat, each through a
// client of its own (an application process with its own keep-alive
// connection), whose locks must survive the abuse.
type beaters struct {
	wg     sync.WaitGroup
	cancel context.CancelFunc
	mu     sync.Mutex
	st     hbStats
}

// startBeaters acquires n leases on api under names prefix/i and beats
// them until stop. It fails when a lease cannot be acquired on a calm
// sidecar: then nothing after it would mean anything.
func startBeaters(api, prefix string, n int) (*beaters, error) {
	ctx, cancel := context.WithCancel(context.Background())
	b := &beaters{cancel: cancel, st: hbStats{holders: n, causes: map[string]int{}}}
	for i := range n {
		hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}, Timeout: beatTimeout}
		c := client.New(api, hc)
		name := fmt.Sprintf("%s/%d", prefix, i)
		l, err := c.Acquire(ctx, name, client.Options{TTL: leaseTTL, Owner: "beater"})
		if err != nil {
			b.stop()
			return nil, fmt.Errorf("holder %s: %w", name, err)
		}
		b.wg.Go(func() { b.beat(ctx, c, hc, name, l.Token) })
	}
	return b, nil
}

// beat heartbeats one lease until ctx ends, then releases it. A lease
// answered lease_gone is lost: it stops there.
func (b *beaters) beat(ctx context.Context, c *client.Client, hc *http.Client, name, token string) {
	defer hc.CloseIdleConnections()
	for {
		select {
		case <-ctx.Done():
			rctx, cancel := context.WithTimeout(context.Background(), beatTimeout)
			_ = c.Release(rctx, name, token)
			cancel()
			return
		case <-time.After(beatEvery):
		}
		_, err := c.Extend(ctx, name, token, 0)
		if ctx.Err() != nil {
			continue // stopping, not a failure
		}
		b.record(err)
		if errors.Is(err, client.ErrLeaseGone) {
			return
		}
	}
}

func (b *beaters) record(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.st.beats++
	if err == nil {
		return
	}
	b.st.failed++
	b.st.causes[causeOf(err)]++
	if errors.Is(err, client.ErrLeaseGone) {
		b.st.lost++
	}
}

// stop ends the heartbeats, releases the leases and returns what they saw.
func (b *beaters) stop() hbStats {
	b.cancel()
	b.wg.Wait()
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.st
}

// causeOf names an API answer by status and code ("429 overloaded"), and
// anything else by the network error.
func causeOf(err error) string {
	var apiErr *client.Error
	if errors.As(err, &apiErr) {
		return fmt.Sprintf("%d %s", apiErr.Status, apiErr.Code)
	}
	return errText(err)
}
