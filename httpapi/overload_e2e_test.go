package httpapi_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sidelock/sidelock/internal/config"
	"github.com/sidelock/sidelock/internal/lease"
	"github.com/sidelock/sidelock/internal/redistest"
	"github.com/sidelock/sidelock/internal/sidecar"
	"github.com/sidelock/sidelock/internal/sidecar/inprocess"
	"github.com/sidelock/sidelock/pkg/redlock"
	"github.com/sidelock/sidelock/pkg/redlock/redisnode"
)

// Issue 14, item 4: a burst bigger than the sidecar can serve in time is
// the sidecar's overload (429 overloaded), never the masters' fault (503
// no_quorum), and the leases already held keep being renewed through it.

// renewalCounter is a lease.Observer that counts failed renewals
// (heartbeats and the renewer's batches alike).
type renewalCounter struct {
	ok, failed, lost atomic.Int64
}

func (*renewalCounter) Acquisition(lease.Outcome, time.Duration) {}
func (*renewalCounter) Waited(lease.Outcome, time.Duration)      {}
func (*renewalCounter) Wakeup(lease.WakeSource)                  {}
func (c *renewalCounter) Ended(r lease.EndReason) {
	if r == lease.EndLost {
		c.lost.Add(1)
	}
}
func (c *renewalCounter) Renewal(ok bool) {
	if ok {
		c.ok.Add(1)
	} else {
		c.failed.Add(1)
	}
}

// realAPI serves the lock API over real masters with the shipped timing:
// 50ms node timeout, fencing, the 250ms try-once retry budget, and the
// default connection budget.
func realAPI(t *testing.T, servers []*redistest.Server, obs lease.Observer) *httptest.Server {
	t.Helper()
	return realAPIWithin(t, servers, obs, 50*time.Millisecond)
}

// realAPIWithin is realAPI with another node timeout. Tests of what the
// API answers, not of how fast, give the masters more time: on a busy
// machine under the race detector, the 66 reads of each master that a
// read/write lock's inspection makes at once can miss 50ms (429
// overloaded), which says nothing about what those tests check.
func realAPIWithin(t *testing.T, servers []*redistest.Server, obs lease.Observer, nodeTimeout time.Duration) *httptest.Server {
	t.Helper()
	nodes := make([]redlock.Node, len(servers))
	for i, s := range servers {
		n := redisnode.New(redisnode.Options{Addr: s.Addr()})
		t.Cleanup(func() { _ = n.Close() })
		nodes[i] = n
	}
	var opts []sidecar.Option
	if obs != nil {
		opts = append(opts, sidecar.WithLeaseObserver(func(lease.Observer) lease.Observer { return obs }))
	}
	core := inprocess.Start(t, inprocess.Options{Nodes: nodes, Sidecar: opts, Config: func(c *config.Config) {
		c.KeyPrefix, c.NodeTimeout, c.MaxWait, c.NoQuorumRetry = "t:", nodeTimeout, time.Minute, 250*time.Millisecond
	}})
	srv := httptest.NewServer(core.Handler())
	t.Cleanup(srv.Close)
	return srv
}

// outcome is one answer: its status and problem code ("" for a grant), and
// whether a refusal carried Retry-After.
type outcome struct {
	status     int
	code       string
	retryAfter bool
}

func post(client *http.Client, url string) (outcome, string, error) {
	res, err := client.Post(url, "", nil)
	if err != nil {
		return outcome{}, "", err
	}
	defer res.Body.Close()
	var body struct {
		Code  string `json:"code"`
		Token string `json:"token"`
	}
	raw, _ := io.ReadAll(res.Body)
	_ = json.Unmarshal(raw, &body)
	return outcome{status: res.StatusCode, code: body.Code, retryAfter: res.Header.Get("Retry-After") != ""}, body.Token, nil
}

// burst sends n try-once acquires of distinct free names at once and
// counts the answers by status and code.
func burst(t *testing.T, srv *httptest.Server, prefix string, n int) map[outcome]int {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: n}}
	defer client.CloseIdleConnections()
	var mu sync.Mutex
	counts := map[outcome]int{}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			o, _, err := post(client, fmt.Sprintf("%s/locks/%s/%d", srv.URL, prefix, i))
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			counts[o]++
			mu.Unlock()
		})
	}
	close(start)
	wg.Wait()
	return counts
}

// heartbeats acquires k leases and extends each of them every period until
// stop is closed, counting heartbeats that did not answer 200.
func heartbeats(t *testing.T, srv *httptest.Server, k int, period time.Duration, stop <-chan struct{}) (done func() (ok, failed int64)) {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: k}}
	var ok, failed atomic.Int64
	var wg sync.WaitGroup
	for i := range k {
		name := fmt.Sprintf("held/%d", i)
		o, tok, err := post(client, srv.URL+"/locks/"+name)
		if err != nil || o.status != http.StatusOK {
			t.Fatalf("acquire %s: %v %v", name, o, err)
		}
		wg.Go(func() {
			tick := time.NewTicker(period)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				if extend(client, srv.URL+"/locks/"+name, tok) {
					ok.Add(1)
				} else {
					failed.Add(1)
				}
			}
		})
	}
	return func() (int64, int64) { wg.Wait(); client.CloseIdleConnections(); return ok.Load(), failed.Load() }
}

func extend(client *http.Client, url, token string) bool {
	req, err := http.NewRequest(http.MethodPut, url, nil)
	if err != nil {
		return false
	}
	req.Header.Set("Lock-Token", token)
	res, err := client.Do(req)
	if err != nil {
		return false
	}
	defer res.Body.Close()
	_, _ = io.Copy(io.Discard, res.Body)
	return res.StatusCode == http.StatusOK
}

// TestBurstOfTryOnceIsOverloadNotNoQuorum: a thousand try-once acquires of
// free names at once, over three healthy masters, each get a grant or 429
// overloaded with Retry-After, never 503 no_quorum; meanwhile twenty held
// leases heartbeat every 20ms without a failure.
func TestBurstOfTryOnceIsOverloadNotNoQuorum(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("a load test: starts redis-server and saturates the CPU (make test-load runs it without -race)")
	}
	obs := &renewalCounter{}
	srv := realAPI(t, redistest.StartN(t, 3), obs)
	redistest.YieldToMasters(t) // as if the masters had hosts of their own
	stop := make(chan struct{})
	done := heartbeats(t, srv, 20, 20*time.Millisecond, stop)
	counts := burst(t, srv, "burst", 1000)
	close(stop)
	hbOK, hbFailed := done()
	t.Logf("burst: %v; heartbeats: %d ok, %d failed; renewals: %d ok, %d failed", counts, hbOK, hbFailed, obs.ok.Load(), obs.failed.Load())
	for o, n := range counts {
		switch {
		case o.status == http.StatusOK:
		case o.status == http.StatusTooManyRequests && o.code == "overloaded" && o.retryAfter:
		default:
			t.Errorf("%d answers %d %q (Retry-After %v); want only grants and 429 overloaded with Retry-After", n, o.status, o.code, o.retryAfter)
		}
	}
	if counts[outcome{status: http.StatusOK}] == 0 {
		t.Error("no acquire of the burst was granted")
	}
	// Every heartbeat answers 200 and no lease is lost. A renewal round
	// can still be spoiled by the CPU starvation itself after its retries
	// (the lease keeps its earlier validity); they must stay rare.
	if hbFailed > 0 || hbOK == 0 || obs.lost.Load() > 0 {
		t.Errorf("held leases: %d heartbeats failed (%d ok), %d leases lost; want none", hbFailed, hbOK, obs.lost.Load())
	}
	// A renewal round spoiled after its retries costs nothing while the
	// next one succeeds (no lease was lost, checked above); how many are
	// spoiled depends on how starved this machine is (0–2 of ~180 alone,
	// 12 of 182 in a full CI run), so only a majority of failures fails.
	if failed, ok := obs.failed.Load(), obs.ok.Load(); failed >= ok {
		t.Errorf("%d renewals failed, %d succeeded: renewals must keep priority over the burst", failed, ok)
	}
}

// TestMastersDownIsNoQuorumNotOverload: with two of three masters killed,
// try-once acquires answer 503 no_quorum, not overloaded: the admission
// gate and the pipeliner's queue bound must not hide a real outage.
func TestMastersDownIsNoQuorumNotOverload(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	servers := redistest.StartN(t, 3)
	srv := realAPI(t, servers, nil)
	if o, _, err := post(srv.Client(), srv.URL+"/locks/warm"); err != nil || o.status != http.StatusOK {
		t.Fatalf("acquire before the outage: %v %v", o, err)
	}
	servers[0].Kill()
	servers[1].Kill()
	// The outage is established (the sidecar has seen the masters fail)
	// before the burst: calls already queued at the very moment a master
	// dies may still be taken for overload.
	if o, _, err := post(srv.Client(), srv.URL+"/locks/first"); err != nil || o.status != http.StatusServiceUnavailable {
		t.Fatalf("acquire as the outage begins: %v %v", o, err)
	}
	counts := burst(t, srv, "down", 200)
	t.Logf("with 2 of 3 masters down: %v", counts)
	for o, n := range counts {
		if o.status != http.StatusServiceUnavailable || o.code != "no_quorum" {
			t.Errorf("%d answers %d %q; want only 503 no_quorum", n, o.status, o.code)
		}
	}
}
