package bench

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sidelock/sidelock/pkg/redlock"
	"github.com/sidelock/sidelock/pkg/redlock/redisnode"
)

// BenchmarkLingeringTryOnce is issue 29's revocation row: a caller of one
// sidecar takes and releases a lock, which its sidecar then lingers on
// (SIDELOCK_LINGER, the default); then a caller of another sidecar
// (another pod) tries once to take it. One iteration is one such try,
// measured against the same try of a free lock ("free"). Reported: the
// share of tries granted (the target: all; a 409 would refuse a lock
// nobody holds), the rounds to the masters each try cost (takes counted
// on the asking sidecar's masters: one more than a free lock's at most),
// and their p50/p99 as the caller sees them.
func BenchmarkLingeringTryOnce(b *testing.B) {
	nodes := redisMasters(b, 3)
	lingering := newSidecar(b, nodes)
	askNodes, takes := countingTakes(b, redisMastersSharing(b, nodes))
	asking := newSidecar(b, askNodes)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	for _, mode := range []string{"lingering", "free"} {
		b.Run(mode, func(b *testing.B) {
			lat := make(latencies, 0, b.N)
			granted, tries := 0, 0
			var rounds int64
			for i := 0; b.Loop(); i++ {
				name := "revoke"
				if mode == "free" {
					name = "free-" + strconv.Itoa(i)
				} else {
					tok, ok := tryAcquireHTTP(b, client, lingering.URL+"/locks/"+name+"?ttl=10s")
					if !ok {
						b.Fatal("the lingering sidecar could not take its lock")
					}
					releaseHTTP(b, client, lingering.URL, name, tok)
					waitIdle(b, client, asking.URL, name)
				}
				before := takes.Load()
				start := time.Now()
				tok, ok := tryAcquireHTTP(b, client, asking.URL+"/locks/"+name+"?ttl=10s")
				lat = append(lat, time.Since(start))
				rounds += takes.Load() - before
				tries++
				if !ok {
					countError(b, "%s: a try-once of a lock nobody holds was refused", mode)
				} else {
					granted++
					releaseHTTP(b, client, asking.URL, name, tok)
					waitFree(b, nodes, name)
				}
			}
			lat.report(b)
			b.ReportMetric(100*float64(granted)/float64(tries), "%granted")
			b.ReportMetric(float64(rounds)/float64(tries)/float64(len(nodes)), "rounds/try")
			reportErrors(b)
		})
	}
}

// heldHTTP tells whether GET /locks/{name} through base says held.
func heldHTTP(b *testing.B, c *http.Client, base, name string) bool {
	res, err := c.Get(base + "/locks/" + name)
	if err != nil {
		countError(b, "inspect: %v", err)
		return false
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return bytes.Contains(body, []byte(`"held":true`))
}

// countingTakes wraps nodes so that every take a master answers counts.
func countingTakes(b *testing.B, nodes []redlock.Node) ([]redlock.Node, *atomic.Int64) {
	b.Helper()
	n := new(atomic.Int64)
	out := make([]redlock.Node, len(nodes))
	for i, node := range nodes {
		out[i] = &takeCounter{Node: node.(*redisnode.Node), n: n}
	}
	return out, n
}

// takeCounter is a master whose takes are counted.
type takeCounter struct {
	*redisnode.Node
	n *atomic.Int64
}

func (c *takeCounter) TakeTenure(ctx context.Context, keys redlock.TenureKeys, a redlock.TakeArgs) (redlock.TakeAnswer, error) {
	c.n.Add(1)
	return c.Node.TakeTenure(ctx, keys, a)
}

// waitIdle waits until the sidecar at base sees the lock free (the
// lingering sidecar's holder note has landed), bounded.
func waitIdle(b *testing.B, c *http.Client, base, name string) {
	b.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if !heldHTTP(b, c, base, name) {
			return
		}
		time.Sleep(200 * time.Microsecond)
	}
	b.Fatalf("%s still held 5s after its release", name)
}

// waitFree waits until no master holds the lock's key (a release in the
// background has landed), bounded.
func waitFree(b *testing.B, nodes []redlock.Node, name string) {
	b.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		held := 0
		for _, n := range nodes {
			if v, _, err := n.Get(context.Background(), "bench:"+name); err == nil && v != "" {
				held++
			}
		}
		if held == 0 {
			return
		}
		time.Sleep(200 * time.Microsecond)
	}
	b.Fatalf("%s still on the masters 5s after its release", name)
}
