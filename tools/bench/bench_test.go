// Package bench measures sidelock against real redis-server masters on
// loopback: latency of acquire+release through the HTTP API and through the
// engine alone, and the sidecar's memory. Run with `make bench`; CI only
// compiles and runs each once (-benchtime=1x) so they keep working.
package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/sidelock/sidelock/internal/config"
	"github.com/sidelock/sidelock/internal/lease"
	"github.com/sidelock/sidelock/internal/redistest"
	"github.com/sidelock/sidelock/internal/sidecar/inprocess"
	"github.com/sidelock/sidelock/pkg/redlock"
	"github.com/sidelock/sidelock/pkg/redlock/redisnode"
)

// benchNodeTimeout replaces the 50 ms production default: on a loaded
// 2-core machine a saturated master can take longer, and a benchmark
// should show that as latency, not fail on it. redsync's own default
// (5% of a 10 s expiry) is the same 500 ms.
const benchNodeTimeout = 500 * time.Millisecond

// measured is a measurement window or a settling pause: as given in `make bench`, a tenth of
// it in `make bench-smoke` (-short), which only checks that every benchmark still runs (its
// figures mean nothing; they come from `make bench`).
func measured(d time.Duration) time.Duration {
	if testing.Short() {
		return d / 10
	}
	return d
}

func redisMasters(b *testing.B, n int) []redlock.Node {
	b.Helper()
	servers := redistest.StartN(b, n)
	nodes := make([]redlock.Node, n)
	for i, s := range servers {
		nodes[i] = redisnode.New(redisnode.Options{Addr: s.Addr()})
		b.Cleanup(func() { nodes[i].Close() })
	}
	return nodes
}

// redisMastersSharing opens new clients to the same masters: another pod's
// connections.
func redisMastersSharing(b *testing.B, nodes []redlock.Node) []redlock.Node {
	b.Helper()
	out := make([]redlock.Node, len(nodes))
	for i, n := range nodes {
		out[i] = redisnode.New(redisnode.Options{Addr: n.Addr()})
		b.Cleanup(func() { out[i].Close() })
	}
	return out
}

// newSidecar serves the lock API over nodes with fencing on, as shipped.
func newSidecar(b *testing.B, nodes []redlock.Node) *httptest.Server {
	return newSidecarFencing(b, nodes, true)
}

func newSidecarFencing(b *testing.B, nodes []redlock.Node, fencing bool) *httptest.Server {
	return newSidecarTuned(b, nodes, func(c *config.Config) { c.Fencing = fencing })
}

// newSidecarTuned serves the lock API over nodes, its configuration
// changed by tune after the bench's own settings.
func newSidecarTuned(b *testing.B, nodes []redlock.Node, tune func(*config.Config)) *httptest.Server {
	b.Helper()
	srv := httptest.NewServer(benchAPITuned(b, nodes, tune))
	b.Cleanup(srv.Close)
	return srv
}

// benchAPI is the lock API of a fresh sidecar assembled in process
// (package inprocess) on nodes.
func benchAPI(b *testing.B, nodes []redlock.Node, fencing bool) http.Handler {
	return benchAPITuned(b, nodes, func(c *config.Config) { c.Fencing = fencing })
}

func benchAPITuned(b *testing.B, nodes []redlock.Node, tune func(*config.Config)) http.Handler {
	b.Helper()
	return inprocess.Start(b, inprocess.Options{Nodes: nodes, Config: func(c *config.Config) {
		c.KeyPrefix, c.NodeTimeout, c.MaxWait = "bench:", benchNodeTimeout, time.Minute
		c.MaxLocks, c.MaxWaiters = lease.DefaultMaxLocks, lease.DefaultMaxWaiters // the lease package's, not the chart's
		tune(c)
	}}).Handler()
}

// newUnixSidecar serves the lock API (fencing on) on a Unix socket, as
// SIDELOCK_LISTEN_ADDR=unix://… does, and returns a base URL and a client
// that reach it.
func newUnixSidecar(b *testing.B, nodes []redlock.Node) (*http.Client, string) {
	b.Helper()
	path := filepath.Join(b.TempDir(), "api.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(benchAPI(b, nodes, true))
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	b.Cleanup(srv.Close)
	dial := func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}
	return &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4, DialContext: dial}}, "http://sidelock"
}

// latencies records one duration per iteration and reports percentiles.
type latencies []time.Duration

func (l latencies) report(b *testing.B) { l.reportAs(b, "") }

// reportAs reports p50 and p99 in microseconds, named after what.
func (l latencies) reportAs(b *testing.B, what string) {
	if len(l) == 0 {
		return
	}
	if what != "" {
		what += "-"
	}
	slices.Sort(l)
	at := func(q float64) float64 { return float64(l[int(q*float64(len(l)-1))].Microseconds()) }
	b.ReportMetric(at(0.50), what+"p50-µs")
	b.ReportMetric(at(0.99), what+"p99-µs")
}

// reportMaxAs reports the longest, in microseconds, named after what.
func (l latencies) reportMaxAs(b *testing.B, what string) {
	if len(l) > 0 {
		b.ReportMetric(float64(slices.Max(l).Microseconds()), what+"-max-µs")
	}
}

// BenchmarkHTTPAcquireRelease is one caller's uncontended POST then DELETE
// through the lock API, with the sidecar's HTTP server, lease manager and
// Redlock over N real masters.
func BenchmarkHTTPAcquireRelease(b *testing.B) {
	for _, n := range []int{1, 3, 5} {
		b.Run(fmt.Sprintf("masters=%d", n), func(b *testing.B) {
			srv := newSidecar(b, redisMasters(b, n))
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
			lat := make(latencies, 0, b.N)
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				start := time.Now()
				if pairHTTP(b, client, srv.URL, fmt.Sprintf("bench/%d", i%1024)) {
					lat = append(lat, time.Since(start))
				}
			}
			lat.report(b)
			reportErrors(b)
		})
	}
}

// BenchmarkFencingCost is the uncontended HTTP pair over three masters
// with fencing off and on, in one run: fencing adds a second round to the
// masters on acquire.
func BenchmarkFencingCost(b *testing.B) {
	nodes := redisMasters(b, 3)
	for _, fencing := range []bool{false, true} {
		b.Run(fmt.Sprintf("fencing=%v", fencing), func(b *testing.B) {
			srv := newSidecarFencing(b, nodes, fencing)
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
			lat := make(latencies, 0, b.N)
			for i := 0; b.Loop(); i++ {
				name := fmt.Sprintf("fence/%d", i%1024)
				start := time.Now()
				tok, ok := acquireHTTP(b, client, srv.URL, name)
				if ok {
					lat = append(lat, time.Since(start))
					releaseHTTP(b, client, srv.URL, name, tok)
				}
			}
			lat.reportAs(b, "acquire")
			reportErrors(b)
		})
	}
}

// BenchmarkEngineAcquireRelease is the same pair through the Redlock engine
// alone: the floor the HTTP layer adds to.
func BenchmarkEngineAcquireRelease(b *testing.B) {
	for _, n := range []int{1, 3, 5} {
		b.Run(fmt.Sprintf("masters=%d", n), func(b *testing.B) {
			locker, err := redlock.New(redisMasters(b, n), redlock.Config{NodeTimeout: benchNodeTimeout})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			lat := make(latencies, 0, b.N)
			for i := 0; b.Loop(); i++ {
				start := time.Now()
				key := fmt.Sprintf("engine/%d", i%1024)
				if _, err := locker.Acquire(ctx, key, "v", 10*time.Second); err != nil {
					countError(b, "acquire %s: %v", key, err)
					continue
				}
				if err := locker.Release(ctx, key, "v"); err != nil {
					countError(b, "release %s: %v", key, err)
					continue
				}
				lat = append(lat, time.Since(start))
			}
			lat.report(b)
			reportErrors(b)
		})
	}
}

// acquireHTTP takes the lock of a free name; any answer but 200 is an
// error of the run (counted), and false.
func acquireHTTP(b *testing.B, c *http.Client, base, name string) (string, bool) {
	tok, status := postAcquire(b, c, base+"/locks/"+name+"?ttl=10s")
	if status != http.StatusOK && status != 0 {
		countError(b, "acquire of free %s: %d", name, status)
	}
	return tok, status == http.StatusOK
}

// tryAcquireHTTPQuiet posts to url and reports whether it got the lock.
func tryAcquireHTTPQuiet(c *http.Client, url string) (string, bool) {
	res, err := c.Post(url, "", nil)
	if err != nil {
		return "", false
	}
	defer res.Body.Close()
	_, _ = io.Copy(io.Discard, res.Body)
	return "", res.StatusCode == http.StatusOK
}

// tryAcquireHTTP posts to url; false means 409 (held), or an error of the
// run (counted).
func tryAcquireHTTP(b *testing.B, c *http.Client, url string) (string, bool) {
	tok, status := postAcquire(b, c, url)
	if status != http.StatusOK && status != http.StatusConflict && status != 0 {
		countError(b, "acquire: %d", status)
	}
	return tok, status == http.StatusOK
}

// postAcquire posts to url and returns a 200's token and the status; a
// transport error is counted and returned as status 0.
func postAcquire(b *testing.B, c *http.Client, url string) (string, int) {
	res, err := c.Post(url, "", nil)
	if err != nil {
		countError(b, "acquire: %v", err)
		return "", 0
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK {
		return "", res.StatusCode
	}
	// A byte scan keeps JSON decoding out of the client side of the loop.
	const key = `"token":"`
	i := bytes.Index(body, []byte(key))
	if i < 0 || len(body) < i+len(key)+32 {
		countError(b, "acquire: 200 without a token: %s", body)
		return "", 0
	}
	i += len(key)
	return string(body[i : i+32]), http.StatusOK
}

// pairHTTP is one acquire+release of a free name; errors are counted.
func pairHTTP(b *testing.B, c *http.Client, base, name string) bool {
	tok, ok := acquireHTTP(b, c, base, name)
	return ok && releaseHTTP(b, c, base, name, tok)
}

func releaseHTTP(b *testing.B, c *http.Client, base, name, tok string) bool {
	return releaseURL(b, c, base+"/locks/"+name, tok)
}

// releaseURL deletes the lease at url (a lock's or a semaphore's path);
// any answer but 204 is an error of the run (counted), and false.
func releaseURL(b *testing.B, c *http.Client, url, tok string) bool {
	req, _ := http.NewRequest(http.MethodDelete, url, nil)
	req.Header.Set("Lock-Token", tok)
	res, err := c.Do(req)
	if err != nil {
		countError(b, "release: %v", err)
		return false
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusNoContent {
		countError(b, "release: %d", res.StatusCode)
		return false
	}
	return true
}
