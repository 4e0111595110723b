package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// A flood of watch streams on distinct names fills the sidecar's cap
// (SIDELOCK_MAX_WATCHERS, here 32) and no more: the next is refused as 429 too_many_watchers with a retry hint,
// while a caller's lock keeps being renewed and extended, new locks are
// granted and /healthz answers. Closing the streams frees the cap.
func TestE2EWatchFloodIsBoundedAndCostsNoLock(t *testing.T) {
	const maxWatchers = 32
	s := startSidecar(t, durableMasters(t, 3), "SIDELOCK_KEY_TTL=2s", fmt.Sprintf("SIDELOCK_MAX_WATCHERS=%d", maxWatchers))
	token := s.acquire(t, "/locks/precious?ttl=30s")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: maxWatchers}}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel() // runs before wg.Wait: the streams end first
	opened := make(chan error, maxWatchers)
	for i := range maxWatchers {
		wg.Go(func() { followWatch(ctx, client, fmt.Sprintf("%s/locks/flood/%d?watch=true", s.api, i), opened) })
	}
	for range maxWatchers {
		if err := <-opened; err != nil {
			t.Fatalf("a watch under the cap: %v", err)
		}
	}

	res, err := http.Get(s.api + "/locks/one-too-many?watch=true")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusTooManyRequests || res.Header.Get("Retry-After") == "" {
		t.Fatalf("watch beyond the cap: %d (Retry-After %q), want 429 with a retry hint", res.StatusCode, res.Header.Get("Retry-After"))
	}
	if code, body := s.do(t, "PUT", "/locks/precious", token); code != 200 {
		t.Fatalf("extend under the flood: %d %v", code, body)
	}
	time.Sleep(3 * time.Second) // past a key ttl: the renewer kept the keys
	if code, body := s.do(t, "PUT", "/locks/precious", token); code != 200 {
		t.Fatalf("extend a key ttl into the flood: %d %v", code, body)
	}
	s.acquire(t, "/locks/newcomer")
	if res, err := http.Get(s.admin + "/healthz"); err != nil || res.StatusCode != 200 {
		t.Fatalf("healthz under the flood: %v %v", res, err)
	}

	cancel()
	wg.Wait()
	eventually(t, 5*time.Second, "a watch once the flood closed", func() bool {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.api+"/locks/one-too-many?watch=true", nil)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		defer res.Body.Close()
		return res.StatusCode == http.StatusOK
	})
}

// followWatch opens a watch stream, says on opened once its first event
// (the state) arrived, or why not, and reads it until ctx ends, so the
// stream never backs up.
func followWatch(ctx context.Context, c *http.Client, url string, opened chan<- error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	res, err := c.Do(req)
	if err != nil {
		opened <- err
		return
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		opened <- fmt.Errorf("%s: %d", url, res.StatusCode)
		return
	}
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "event: state") {
			opened <- nil
			for sc.Scan() {
			}
			return
		}
	}
	opened <- fmt.Errorf("%s: the stream ended before its state", url)
}
