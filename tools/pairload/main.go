// Command pairload drives acquire+release pairs of distinct names at a
// lock sidecar over keep-alive HTTP, from a number of concurrent callers,
// and prints the pairs' p50 and p99 and the pairs per second: the load
// behind the profiles and the one-off comparisons of docs/performance.md,
// where a process of its own must carry the client (perf, pprof and /proc
// then see the sidecar alone). -api picks the lock API: sidelock's (and
// the floor program's), or Dapr's lock API (daprd's
// /v1.0-alpha1/lock/{store} and unlock).
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "pairload:", err)
		os.Exit(1)
	}
}

func run() error {
	base := flag.String("url", "http://127.0.0.1:8080", "the sidecar's base URL")
	api := flag.String("api", "sidelock", "lock API: sidelock or dapr")
	store := flag.String("store", "lockstore", "Dapr's lock store name (-api dapr)")
	pairs := flag.Int("n", 5000, "pairs to run")
	callers := flag.Int("callers", 1, "concurrent callers, each on its own keep-alive connection")
	warm := flag.Int("warm", 200, "pairs run first, not counted")
	flag.Parse()
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: *callers, MaxConnsPerHost: *callers}}
	var p pairer
	switch *api {
	case "sidelock":
		p = sidelockPair{c: c, base: *base}
	case "dapr":
		p = daprPair{c: c, base: *base, store: *store}
	default:
		return fmt.Errorf("unknown -api %q", *api)
	}
	if _, err := drive(p, *warm, *callers, "warm"); err != nil {
		return err
	}
	start := time.Now()
	lat, err := drive(p, *pairs, *callers, "run")
	if err != nil {
		return err
	}
	elapsed := time.Since(start)
	slices.Sort(lat)
	at := func(q float64) float64 { return float64(lat[int(q*float64(len(lat)-1))].Microseconds()) }
	fmt.Printf("pairs %d callers %d p50-µs %.0f p99-µs %.0f pairs/s %.0f\n", len(lat), *callers, at(0.5), at(0.99), float64(len(lat))/elapsed.Seconds())
	return nil
}

type pairer interface {
	pair(name string) error
}

// drive runs n pairs over callers and returns their latencies; the first
// error stops it.
func drive(p pairer, n, callers int, run string) ([]time.Duration, error) {
	var next atomic.Int64
	lat := make([]time.Duration, n)
	errs := make([]error, callers)
	var wg sync.WaitGroup
	for w := range callers {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				start := time.Now()
				if err := p.pair(fmt.Sprintf("pl-%s-%d-%d", run, w, i)); err != nil {
					errs[w] = err
					return
				}
				lat[i] = time.Since(start)
			}
		})
	}
	wg.Wait()
	return lat, errors.Join(errs...)
}

type sidelockPair struct {
	c    *http.Client
	base string
}

func (s sidelockPair) pair(name string) error {
	body, err := call(s.c, http.MethodPost, s.base+"/locks/"+name+"?ttl=10s", nil, nil, http.StatusOK)
	if err != nil {
		return err
	}
	const key = `"token":"`
	i := bytes.Index(body, []byte(key))
	if i < 0 || len(body) < i+len(key)+32 {
		return fmt.Errorf("acquire %s: no token in %s", name, body)
	}
	tok := string(body[i+len(key) : i+len(key)+32])
	_, err = call(s.c, http.MethodDelete, s.base+"/locks/"+name, nil, map[string]string{"Lock-Token": tok}, http.StatusNoContent)
	return err
}

type daprPair struct {
	c           *http.Client
	base, store string
}

func (d daprPair) pair(name string) error {
	req := []byte(fmt.Sprintf(`{"resourceId":%q,"lockOwner":%q,"expiryInSeconds":10}`, name, name+"-owner"))
	body, err := call(d.c, http.MethodPost, d.base+"/v1.0-alpha1/lock/"+d.store, req, map[string]string{"Content-Type": "application/json"}, http.StatusOK)
	if err != nil {
		return err
	}
	if !bytes.Contains(body, []byte(`"success":true`)) {
		return fmt.Errorf("dapr lock %s: %s", name, body)
	}
	body, err = call(d.c, http.MethodPost, d.base+"/v1.0-alpha1/unlock/"+d.store, req, map[string]string{"Content-Type": "application/json"}, http.StatusOK)
	if err != nil {
		return err
	}
	if !bytes.Contains(body, []byte(`"status":0`)) && !bytes.Contains(body, []byte(`{}`)) {
		return fmt.Errorf("dapr unlock %s: %s", name, body)
	}
	return nil
}

// call makes one request and returns the body of an answer with status want.
func call(c *http.Client, method, url string, body []byte, header map[string]string, want int) ([]byte, error) {
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	res, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	out, err := io.ReadAll(res.Body)
	if err != nil {
		return nil, err
	}
	if res.StatusCode != want {
		return nil, fmt.Errorf("%s %s: %d %s", method, url, res.StatusCode, out)
	}
	return out, nil
}
