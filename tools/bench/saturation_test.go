package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sidelock/sidelock/internal/config"
	"github.com/sidelock/sidelock/internal/lease"
	"github.com/sidelock/sidelock/internal/sidecar/inprocess"
	"github.com/sidelock/sidelock/pkg/redlock"
)

// BenchmarkSaturatedTryOnce is issue 13's item 9: 64 callers take and
// release free, distinct names with try-once acquires through HTTP, on
// the shipped 50ms node timeout, so that on a 2-core machine CPU
// saturation makes answers slow. It reports how many acquires answered
// 503 no_quorum per 1,000 pairs, without and with the try-once retry
// budget (SIDELOCK_NO_QUORUM_RETRY). Run with -benchtime 7000x to match
// the figure in the issue; the refusals appear here only with the CPU
// loaded further (two busy loops beside it: 8.0 and 8.9 per 1k pairs
// without the budget, 0 with it).
func BenchmarkSaturatedTryOnce(b *testing.B) {
	nodes := redisMasters(b, 3)
	for _, retry := range []time.Duration{0, 250 * time.Millisecond} {
		b.Run(fmt.Sprintf("no_quorum_retry=%v", retry), func(b *testing.B) {
			srv := saturatedSidecar(b, nodes, retry)
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
			var refused atomic.Int64
			parallelPairs(b, nodes, 64, func(worker, i int) {
				name := fmt.Sprintf("sat/%v/%d/%d", retry, worker, i)
				res, err := client.Post(srv.URL+"/locks/"+name+"?ttl=10s", "", nil)
				if err != nil {
					countError(b, "acquire: %v", err)
					return
				}
				tok, code := tokenOf(res)
				switch code {
				case http.StatusOK:
					releaseHTTP(b, client, srv.URL, name, tok)
				case http.StatusServiceUnavailable:
					refused.Add(1) // what this benchmark measures, not an error of the run
				default:
					countError(b, "acquire of a free name: %d", code)
				}
			})
			b.ReportMetric(1000*float64(refused.Load())/float64(b.N), "503s/1k-pairs")
			reportErrors(b)
		})
	}
}

func saturatedSidecar(b *testing.B, nodes []redlock.Node, retry time.Duration) *httptest.Server {
	b.Helper()
	core := inprocess.Start(b, inprocess.Options{Nodes: nodes, Config: func(c *config.Config) {
		c.KeyPrefix, c.NodeTimeout, c.MaxWait, c.NoQuorumRetry = "bench:", 50*time.Millisecond, time.Minute, retry
		c.MaxLocks, c.MaxWaiters = lease.DefaultMaxLocks, lease.DefaultMaxWaiters // the lease package's, not the chart's
	}})
	srv := httptest.NewServer(core.Handler())
	b.Cleanup(srv.Close)
	return srv
}

// tokenOf reads an acquire answer's token and status.
func tokenOf(res *http.Response) (string, int) {
	defer res.Body.Close()
	var body struct {
		Token string `json:"token"`
	}
	if res.StatusCode == http.StatusOK {
		_ = json.NewDecoder(res.Body).Decode(&body)
	} else {
		_, _ = io.Copy(io.Discard, res.Body)
	}
	return body.Token, res.StatusCode
}
