package bench

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// BenchmarkKinds is one caller's uncontended grant and release of each kind
// of lease over HTTP on 3 masters, fencing on as shipped: the exclusive
// lock beside a semaphore's permit (N slots, see internal/lease/semaphore.go),
// a read/write lock's reader and writer (one round each; the writer's
// second round commits its fence, as a lock's does) and a set of three
// locks (three locks' rounds, one after the other).
// A permit of a free semaphore costs one round, as a lock does, whatever
// N; one whose other slots are held elsewhere costs a round per slot
// tried (on average about half of them, from a random start).
func BenchmarkKinds(b *testing.B) {
	nodes := redisMasters(b, 3)
	srv := newSidecar(b, nodes)
	b.Run("lock", func(b *testing.B) {
		grantRelease(b, srv, func(i int) string { return fmt.Sprintf("/locks/k/%d", i%1024) })
	})
	for _, permits := range []int{1, 8} {
		b.Run(fmt.Sprintf("semaphore-permits=%d", permits), func(b *testing.B) {
			grantRelease(b, srv, func(i int) string { return fmt.Sprintf("/semaphores/s%d/%d?permits=%d", permits, i%1024, permits) })
		})
	}
	b.Run("rwlock-shared", func(b *testing.B) {
		grantRelease(b, srv, func(i int) string { return fmt.Sprintf("/rwlocks/r/%d?mode=shared", i%1024) })
	})
	b.Run("rwlock-exclusive", func(b *testing.B) {
		grantRelease(b, srv, func(i int) string { return fmt.Sprintf("/rwlocks/w/%d?mode=exclusive", i%1024) })
	})
	b.Run("lockset-3", func(b *testing.B) {
		grantRelease(b, srv, func(i int) string { return fmt.Sprintf("/locksets/a/%d,b/%d,c/%d", i%1024, i%1024, i%1024) })
	})
	b.Run("semaphore-permits=8-7-held-elsewhere", func(b *testing.B) {
		// A name of its own per run: a sidecar closed at the end of a run
		// leaves its permits' keys to lapse, as at any shutdown.
		name := fmt.Sprintf("/semaphores/busy-%d", time.Now().UnixNano())
		other := newSidecar(b, redisMastersSharing(b, nodes))
		client := &http.Client{}
		for range 7 {
			if _, ok := tryAcquireHTTP(b, client, other.URL+name+"?permits=8&ttl=1h"); !ok {
				b.Fatal("could not hold 7 of 8 permits")
			}
		}
		grantRelease(b, srv, func(int) string { return name + "?permits=8" })
	})
}

// grantRelease acquires the path of iteration i (POST) and releases it
// (DELETE), and reports the pair's latency.
func grantRelease(b *testing.B, srv *httptest.Server, path func(i int) string) {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	lat := make(latencies, 0, b.N)
	for i := 0; b.Loop(); i++ {
		url := srv.URL + path(i)
		start := time.Now()
		tok, status := postAcquire(b, client, url)
		if status != http.StatusOK {
			if status != 0 {
				countError(b, "%s: %d", url, status)
			}
			continue
		}
		path, _, _ := strings.Cut(url, "?") // a release takes the token only
		if releaseURL(b, client, path, tok) {
			lat = append(lat, time.Since(start))
		}
	}
	lat.report(b)
	reportErrors(b)
}
