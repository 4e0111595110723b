package bench

import (
	"net/http"
	"testing"
	"time"

	"github.com/go-redsync/redsync/v4"

	"github.com/sidelock/sidelock/internal/config"
)

// BenchmarkHotLock is one name taken and released over and over, back to
// back, on three masters (fencing on, as shipped): by one caller of a
// sidecar, by two callers of the same sidecar taking turns (each on its own
// connection; never both at once, so no one waits), and by redsync
// in-process doing the same on one mutex. Issue 18: a sidecar sees every
// caller of its pod, so a hot name need not cost a full Redlock round each
// time. Reported: the pair's p50/p99 as the caller sees it.
func BenchmarkHotLock(b *testing.B) {
	nodes := redisMasters(b, 3)
	srv := newSidecar(b, nodes)
	b.Run("masters=3/sidelock", func(b *testing.B) { hotLockHTTP(b, srv.URL, "hot-1", 1) })
	b.Run("masters=3/sidelock-2-callers", func(b *testing.B) { hotLockHTTP(b, srv.URL, "hot-2", 2) })
	// No linger: each release goes to the masters (off the caller's path),
	// and the next acquire of the name waits for it: what a release off
	// the path alone gains a caller that takes the lock again.
	noLinger := newSidecarTuned(b, nodes, func(c *config.Config) { c.Linger = 0 })
	b.Run("masters=3/sidelock-no-linger", func(b *testing.B) { hotLockHTTP(b, noLinger.URL, "hot-3", 1) })
	b.Run("masters=3/redsync", func(b *testing.B) {
		m := redsyncFor(b, nodes).NewMutex("rs-hot", redsync.WithExpiry(10*time.Second), redsync.WithTries(1))
		redsyncPairs(b, func(int) *redsync.Mutex { return m })
	})
}

// hotLockHTTP takes and releases name through base, the callers (HTTP
// clients of their own) taking turns one pair each.
func hotLockHTTP(b *testing.B, base, name string, callers int) {
	clients := make([]*http.Client, callers)
	for i := range clients {
		clients[i] = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	}
	lat := make(latencies, 0, b.N)
	for i := 0; b.Loop(); i++ {
		start := time.Now()
		if pairHTTP(b, clients[i%callers], base, name) {
			lat = append(lat, time.Since(start))
		}
	}
	lat.report(b)
	reportErrors(b)
}
