package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sidelock/sidelock/internal/redistest"
	"github.com/sidelock/sidelock/pkg/redlock/redisnode"
)

// budgetSampler names the test's own CLIENT LIST connections, which are
// never counted.
const budgetSampler = "budget-sampler"

// Issue 9: 200 callers through one sidecar keep each master within the
// connection budget — SIDELOCK_REDIS_MAX_CONNS command connections named
// "sidelock" and one subscription — at every CLIENT LIST sample, and the
// sidecar's metrics say the same.
func TestE2EBudgetHoldsWith200Callers(t *testing.T) {
	for _, maxConns := range []int{2, 4} {
		t.Run("max_conns="+strconv.Itoa(maxConns), func(t *testing.T) { testBudgetE2E(t, maxConns) })
	}
}

// budgetCounts is what CLIENT LIST shows of the sidecar's connections.
type budgetCounts struct{ command, subscription, subscribed int }

func countSidecarConns(list string) budgetCounts {
	var c budgetCounts
	for _, fields := range redistest.ParseClientList(list) {
		switch fields["name"] {
		case redisnode.DefaultClientName:
			c.command++
		case redisnode.DefaultClientName + redisnode.SubscriptionSuffix:
			c.subscription++
		}
		// Subscriber mode, whatever the name: a connection of ours that
		// subscribed without its name would show here.
		if fields["name"] != budgetSampler && (strings.Contains(fields["flags"], "P") || fields["sub"] != "" && fields["sub"] != "0") {
			c.subscribed++
		}
	}
	return c
}

func testBudgetE2E(t *testing.T, maxConns int) {
	const (
		callers  = 200
		loadTime = 3 * time.Second
		maxIters = 2000 // a bound in case the machine is faster than expected
	)
	masters := durableMasters(t, 3)
	s := startSidecar(t, masters, "SIDELOCK_NODE_TIMEOUT=500ms", "SIDELOCK_LOG_LEVEL=info",
		"SIDELOCK_REDIS_MAX_CONNS="+strconv.Itoa(maxConns))
	eventually(t, 10*time.Second, "sidecar ready", func() bool { return s.readyz(t) == 200 })

	samplers := make([]*redis.Client, len(masters))
	for i, m := range masters {
		samplers[i] = redis.NewClient(&redis.Options{Addr: m.Addr(), ClientName: budgetSampler,
			Protocol: 2, DisableIdentity: true, PoolSize: 1, MaxActiveConns: 1})
		defer samplers[i].Close()
	}

	// Sample every master's CLIENT LIST, and now and then the sidecar's
	// metrics, until the callers are done.
	maxSeen := make([]budgetCounts, len(masters))
	var maxMetric float64
	samples := 0
	stop, sampled := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			samples++
			for i, c := range samplers {
				list, err := c.ClientList(context.Background()).Result()
				if err != nil {
					t.Errorf("CLIENT LIST %s: %v", masters[i].Addr(), err)
					continue
				}
				got := countSidecarConns(list)
				if got.command > maxConns || got.subscription > 1 || got.subscribed > 1 {
					t.Errorf("master %s over budget (%d command + 1 subscription): %+v\n%s", masters[i].Addr(), maxConns, got, list)
				}
				maxSeen[i].command = max(maxSeen[i].command, got.command)
				maxSeen[i].subscription = max(maxSeen[i].subscription, got.subscription)
				maxSeen[i].subscribed = max(maxSeen[i].subscribed, got.subscribed)
			}
			if samples%10 == 0 {
				for series, v := range masterSeries(t, s, "sidelock_master_connections") {
					if v > float64(maxConns) || strings.Contains(series, `kind="subscription"`) && v > 1 {
						t.Errorf("/metrics: %s %v, over budget %d", series, v, maxConns)
					}
					if strings.Contains(series, `kind="command"`) {
						maxMetric = max(maxMetric, v)
					}
				}
			}
		}
	}()

	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: callers}}
	defer client.CloseIdleConnections()
	var requests atomic.Int64
	var mu sync.Mutex
	outcomes := map[string]int{} // "role method status" -> count
	record := func(role, method string, code int) {
		requests.Add(1)
		mu.Lock()
		outcomes[fmt.Sprintf("%s %s %d", role, method, code)]++
		mu.Unlock()
	}
	call := func(method, path, token string) (int, string) {
		req, _ := http.NewRequest(method, s.api+path, nil)
		if token != "" {
			req.Header.Set("Lock-Token", token)
		}
		res, err := client.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer res.Body.Close()
		var body struct{ Token string }
		raw, _ := io.ReadAll(res.Body)
		_ = json.Unmarshal(raw, &body)
		return res.StatusCode, body.Token
	}

	deadline := time.Now().Add(loadTime)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			switch role := i % 10; {
			case role < 6: // acquire and release distinct names
				for iter := 0; iter < maxIters && time.Now().Before(deadline); iter++ {
					code, token := call("POST", fmt.Sprintf("/locks/budget/%d/%d?ttl=5s", i, iter), "")
					record("distinct", "POST", code)
					if code == 200 {
						code, _ = call("DELETE", fmt.Sprintf("/locks/budget/%d/%d", i, iter), token)
						record("distinct", "DELETE", code)
					}
				}
			case role < 8: // contend on four shared names, waiting
				name := fmt.Sprintf("/locks/budget/shared/%d", i%4)
				for iter := 0; iter < maxIters && time.Now().Before(deadline); iter++ {
					code, token := call("POST", name+"?ttl=5s&wait=2s", "")
					record("contending", "POST", code)
					if code == 200 {
						time.Sleep(time.Millisecond)
						code, _ = call("DELETE", name, token)
						record("contending", "DELETE", code)
					}
				}
			default: // hold one lock with heartbeats
				name := fmt.Sprintf("/locks/budget/heartbeat/%d", i)
				code, token := call("POST", name+"?ttl=5s", "")
				record("heartbeat", "POST", code)
				if code != 200 {
					return
				}
				for iter := 0; iter < maxIters && time.Now().Before(deadline); iter++ {
					code, _ := call("PUT", name+"?ttl=5s", token)
					record("heartbeat", "PUT", code)
					time.Sleep(5 * time.Millisecond)
				}
				code, _ = call("DELETE", name, token)
				record("heartbeat", "DELETE", code)
			}
		})
	}
	wg.Wait()
	close(stop)
	<-sampled

	// Every answer is a success, a 409 for a waiter whose wait ran out, or
	// an acquisition refused as overloaded (429: on a busy machine 200
	// callers can outrun the sidecar, which must say so rather than blame
	// the masters). A rare 503 is allowed too: with make test's other
	// steps on the same 2 cores, a master's answer to a batch of 200
	// callers' calls can come after the 500ms node timeout (seen once: 1
	// of 1100 requests); more than 1% of the acquisitions would be the
	// sidecar blaming the masters for its own load.
	posts503, posts := 0, 0
	for outcome, n := range outcomes {
		fields := strings.Fields(outcome)
		code, _ := strconv.Atoi(fields[2])
		if fields[1] == "POST" {
			posts += n
			if code == 503 {
				posts503 += n
				continue
			}
		}
		ok := code == 200 || code == 204 || fields[0] == "contending" && fields[1] == "POST" && code == 409 ||
			fields[1] == "POST" && code == 429
		if !ok {
			t.Errorf("%d × %s", n, outcome)
		}
	}
	if posts503*100 > posts {
		t.Errorf("%d of %d acquisitions answered 503: more than 1%%", posts503, posts)
	}
	if samples < 10 {
		t.Errorf("only %d CLIENT LIST samples in %v", samples, loadTime)
	}

	// At rest, the metrics and the masters count the same connections. The
	// sidecar is at rest once the releases it sends after answering DELETE
	// (and the lingers' ends) are done: every call queued has been answered.
	var final map[string]float64
	eventually(t, 5*time.Second, "every queued call answered", func() bool {
		final = masterSeries(t, s, "sidelock_master_")
		for _, m := range masters {
			label := `master="` + m.Addr() + `"`
			if final["sidelock_master_calls_total{"+label+"}"] != final["sidelock_master_queue_wait_seconds_count{"+label+"}"] {
				return false
			}
		}
		return true
	})
	for i, m := range masters {
		got := countSidecarConns(clientList(t, samplers[i]))
		label := `master="` + m.Addr() + `"`
		if cmd := final[`sidelock_master_connections{kind="command",`+label+`}`]; int(cmd) != got.command {
			t.Errorf("master %s: /metrics shows %v command connections, CLIENT LIST %d", m.Addr(), cmd, got.command)
		}
		calls, batches := final["sidelock_master_calls_total{"+label+"}"], final["sidelock_master_batches_total{"+label+"}"]
		waits, waited := final["sidelock_master_queue_wait_seconds_count{"+label+"}"], final["sidelock_master_queue_wait_seconds_sum{"+label+"}"]
		if calls == 0 || batches == 0 || waits != calls {
			t.Errorf("master %s: %v calls, %v batches, %v queue waits observed; want calls > 0 and a wait per call", m.Addr(), calls, batches, waits)
		}
		t.Logf("master %s: max %d command connections named sidelock (budget %d), %d subscription (%d in subscriber mode); %.0f calls in %.0f batches = %.1f calls per round trip, mean queue wait %v",
			m.Addr(), maxSeen[i].command, maxConns, maxSeen[i].subscription, maxSeen[i].subscribed,
			calls, batches, calls/max(batches, 1), time.Duration(waited/max(waits, 1)*float64(time.Second)).Round(time.Microsecond))
	}
	t.Logf("%d HTTP requests by %d callers in %v, %d CLIENT LIST samples per master; max command connections in /metrics %v; outcomes %v",
		requests.Load(), callers, loadTime, samples, maxMetric, outcomes)
	for i := range masters {
		if maxSeen[i].subscription == 0 {
			t.Errorf("master %s: no subscription seen: the waiters did not exercise it", masters[i].Addr())
		}
	}
}

func clientList(t *testing.T, c *redis.Client) string {
	t.Helper()
	list, err := c.ClientList(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return list
}

// masterSeries reads every series of the sidecar's /metrics whose name
// starts with prefix, keyed by name and labels as exposed.
func masterSeries(t *testing.T, s *sidecar, prefix string) map[string]float64 {
	res, err := http.Get(s.admin + "/metrics")
	if err != nil {
		t.Error(err)
		return nil
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	out := map[string]float64{}
	for line := range strings.Lines(string(raw)) {
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		series, value, ok := strings.Cut(strings.TrimSpace(line), " ")
		if f, err := strconv.ParseFloat(value, 64); ok && err == nil {
			out[series] = f
		}
	}
	return out
}
