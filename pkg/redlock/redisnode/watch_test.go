package redisnode_test

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sidelock/sidelock/internal/redistest"
	"github.com/sidelock/sidelock/pkg/redlock/redisnode"
)

// flag is a notify target that records that it fired.
type flag struct{ fired atomic.Int64 }

func (f *flag) notify() { f.fired.Add(1) }

// releaseUntilNotified releases key through releaser until f fires: a watch
// becomes active a round trip after WatchReleases, and after a restart only
// once go-redis has redialled.
func releaseUntilNotified(t *testing.T, releaser *redisnode.Node, key string, f *flag, timeout time.Duration) {
	t.Helper()
	before := f.fired.Load()
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		// Errors are expected while the master restarts; keep trying.
		if ok, _, err := releaser.Acquire(ctx, key, "A", time.Minute); err == nil && ok {
			_, _ = releaser.Release(ctx, key, "A")
		}
		cancel()
		for range 20 {
			if f.fired.Load() > before {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no release announcement of %q within %v", key, timeout)
		}
	}
}

// pubsubState reports how many connections are in subscriber mode on the
// master, and the channels subscribed to, sorted.
func pubsubState(t *testing.T, raw *redis.Client) (conns int, channels []string) {
	t.Helper()
	list, err := raw.ClientList(t.Context()).Result()
	if err != nil {
		t.Fatal(err)
	}
	conns = strings.Count(list, "flags=P")
	channels, err = raw.PubSubChannels(t.Context(), "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(channels)
	return conns, channels
}

// wantChannels waits until the master's subscriptions are exactly want.
func wantChannels(t *testing.T, raw *redis.Client, want ...string) {
	t.Helper()
	sort.Strings(want)
	deadline := time.Now().Add(5 * time.Second)
	for {
		conns, got := pubsubState(t, raw)
		// With no channel left the connection leaves subscriber mode.
		if slices.Equal(got, want) && (conns == 1 || len(want) == 0 && conns == 0) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("subscriber connections %d, channels %q; want 1 connection on %q", conns, got, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestWatchSubscribesOnlyToWatchedKeysOverOneConnection(t *testing.T) {
	srv := redistest.Start(t)
	n := newNode(t, redisnode.Options{Addr: srv.Addr()})
	raw := rawClient(t, srv)
	noop := func() {}

	cancelA1 := n.WatchReleases("a", noop)
	cancelA2 := n.WatchReleases("a", noop) // shares a's subscription
	cancelB := n.WatchReleases("b", noop)
	wantChannels(t, raw, "a", "b")
	if subs, err := raw.PubSubNumSub(t.Context(), "a").Result(); err != nil || subs["a"] != 1 {
		t.Fatalf("PUBSUB NUMSUB a = %v, %v; want 1 subscriber for two watchers", subs, err)
	}

	cancelA1()
	cancelA1()
	wantChannels(t, raw, "a", "b") // a still has a watcher
	cancelA2()
	wantChannels(t, raw, "b")
	cancelB()
	wantChannels(t, raw)

	// Watching again reuses the node's one connection.
	defer n.WatchReleases("c", noop)()
	wantChannels(t, raw, "c")
	list, err := raw.ClientList(t.Context()).Result()
	if err != nil {
		t.Fatal(err)
	}
	if clients := strings.Count(list, "\n"); clients != 2 {
		t.Fatalf("%d connections to the master, want 2 (the node's Pub/Sub one and the test's own):\n%s", clients, list)
	}
}

func TestWatchResubscribesAfterRestart(t *testing.T) {
	srv := redistest.Start(t)
	watcher := newNode(t, redisnode.Options{Addr: srv.Addr()})  // one sidecar
	releaser := newNode(t, redisnode.Options{Addr: srv.Addr()}) // another

	var before, during flag
	defer watcher.WatchReleases("before", before.notify)()
	releaseUntilNotified(t, releaser, "before", &before, 5*time.Second)

	// The master restarts empty and forgets every subscription. A key first
	// watched while it is down must be subscribed once it is back, too.
	srv.Kill()
	defer watcher.WatchReleases("during", during.notify)()
	time.Sleep(100 * time.Millisecond) // let the SUBSCRIBE fail against the dead master
	srv.Restart(t)

	start := time.Now()
	releaseUntilNotified(t, releaser, "before", &before, 5*time.Second)
	releaseUntilNotified(t, releaser, "during", &during, 5*time.Second)
	t.Logf("announcements resumed %v after the master answered again", time.Since(start).Round(time.Millisecond))
	wantChannels(t, rawClient(t, srv), "before", "during")
}

func TestWatchCloseStopsGoroutines(t *testing.T) {
	for _, master := range []string{"up", "killed", "frozen"} {
		t.Run("master "+master, func(t *testing.T) {
			srv := redistest.Start(t)
			// go-redis starts process-wide helpers on first use; let them
			// start before the baseline.
			warm := redisnode.New(redisnode.Options{Addr: srv.Addr()})
			_ = warm.Ping(t.Context())
			_ = warm.Close()
			baseline := settledGoroutines(runtime.NumGoroutine())

			n := redisnode.New(redisnode.Options{Addr: srv.Addr()})
			var f flag
			cancel := n.WatchReleases("k", f.notify)
			n.WatchReleases("other", func() {}) // never cancelled: Close must cope
			releaseUntilNotified(t, n, "k", &f, 5*time.Second)
			switch master {
			case "killed":
				srv.Kill() // go-redis now redials in a loop
				time.Sleep(200 * time.Millisecond)
			case "frozen":
				srv.Stop() // nothing answers, nothing fails
				defer srv.Cont()
				n.WatchReleases("while-frozen", func() {})
				time.Sleep(200 * time.Millisecond)
			}

			closed := make(chan error, 1)
			go func() { closed <- n.Close() }()
			select {
			case err := <-closed:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("Close did not return within 5s")
			}
			cancel() // after Close: harmless
			n.WatchReleases("late", func() { t.Error("notify after Close") })()

			deadline := time.Now().Add(3 * time.Second)
			for runtime.NumGoroutine() > baseline {
				if time.Now().After(deadline) {
					buf := make([]byte, 1<<20)
					t.Fatalf("%d goroutines after Close, %d before the node:\n%s",
						runtime.NumGoroutine(), baseline, buf[:runtime.Stack(buf, true)])
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}

// settledGoroutines waits briefly for goroutines of earlier tests to end,
// so they are not counted against the node under test.
func settledGoroutines(n int) int {
	for range 50 {
		time.Sleep(10 * time.Millisecond)
		if m := runtime.NumGoroutine(); m < n {
			n = m
		} else {
			return n
		}
	}
	return n
}

// TestReleaseWithoutChannelPermission checks a release still succeeds, and
// reports so, for an ACL user that may not publish: the Redis 7 default for
// new users (acl-pubsub-default resetchannels).
func TestReleaseWithoutChannelPermission(t *testing.T) {
	srv := redistest.Start(t)
	ctx := t.Context()
	if err := rawClient(t, srv).Do(ctx, "ACL", "SETUSER", "locker", "on", ">pw", "~*", "+@all", "resetchannels").Err(); err != nil {
		t.Fatal(err)
	}
	n := newNode(t, redisnode.Options{Addr: srv.Addr(), Username: "locker", Password: "pw"})
	if ok, _, err := n.Acquire(ctx, "k", "A", time.Minute); err != nil || !ok {
		t.Fatalf("Acquire = %v, %v; want true, nil", ok, err)
	}
	if ok, err := n.Release(ctx, "k", "A"); err != nil || !ok {
		t.Fatalf("Release = %v, %v; want true, nil", ok, err)
	}
	if value, _, err := n.Get(ctx, "k"); err != nil || value != "" {
		t.Fatalf("Get after Release = %q, %v; want absent", value, err)
	}
}

// TestReleaseNotifyLatency measures how long after Release returns (on one
// sidecar's node) notify runs (on another's), against a real master.
func TestReleaseNotifyLatency(t *testing.T) {
	const rounds = 200
	srv := redistest.Start(t)
	watcher := newNode(t, redisnode.Options{Addr: srv.Addr()})
	releaser := newNode(t, redisnode.Options{Addr: srv.Addr()})
	ctx := t.Context()

	notified := make(chan time.Time, 1)
	var f flag
	defer watcher.WatchReleases("k", func() {
		f.notify()
		select {
		case notified <- time.Now():
		default:
		}
	})()
	releaseUntilNotified(t, releaser, "k", &f, 5*time.Second)
	time.Sleep(50 * time.Millisecond)
	for len(notified) > 0 {
		<-notified
	}

	afterReturn := make([]time.Duration, 0, rounds)
	afterCall := make([]time.Duration, 0, rounds)
	early := 0
	for range rounds {
		if ok, _, err := releaser.Acquire(ctx, "k", "A", time.Minute); err != nil || !ok {
			t.Fatalf("Acquire = %v, %v", ok, err)
		}
		called := time.Now()
		if ok, err := releaser.Release(ctx, "k", "A"); err != nil || !ok {
			t.Fatalf("Release = %v, %v", ok, err)
		}
		returned := time.Now()
		select {
		case at := <-notified:
			// Redis may write the message before the script's reply, so
			// notify can run before Release returns: count that as 0.
			if at.Before(returned) {
				early++
			}
			afterReturn = append(afterReturn, max(at.Sub(returned), 0))
			afterCall = append(afterCall, at.Sub(called))
		case <-time.After(5 * time.Second):
			t.Fatal("no announcement within 5s")
		}
	}
	t.Logf("notify after Release returned: %s (%d of %d ran before it returned)", percentiles(afterReturn), early, rounds)
	t.Logf("notify after Release was called: %s", percentiles(afterCall))
}

func percentiles(d []time.Duration) string {
	slices.Sort(d)
	at := func(p float64) time.Duration { return d[int(p*float64(len(d)-1))] }
	return fmt.Sprintf("n=%d p50=%v p90=%v p99=%v max=%v", len(d), at(0.5), at(0.9), at(0.99), d[len(d)-1])
}

// Once no key is watched for SubscriptionIdle, the subscription's
// connection closes (a pod that waited once keeps 2 connections per master,
// not 3); the next watch opens a new one and hears releases again.
func TestIdleSubscriptionConnectionClosesAndReopens(t *testing.T) {
	srv := redistest.Start(t)
	n := redisnode.New(redisnode.Options{Addr: srv.Addr(), SubscriptionIdle: 200 * time.Millisecond})
	t.Cleanup(func() { n.Close() })
	releaser := redisnode.New(redisnode.Options{Addr: srv.Addr(), ClientName: "releaser"})
	t.Cleanup(func() { releaser.Close() })
	raw := sampler(t, srv, "")
	subs := func() int { return clientCounts(clientList(t, raw), redisnode.DefaultClientName).subscription }

	var f flag
	cancel := n.WatchReleases("k", f.notify)
	releaseUntilNotified(t, releaser, "k", &f, 2*time.Second)
	if got := subs(); got != 1 {
		t.Fatalf("%d subscription connections while watching, want 1", got)
	}
	cancel()
	deadline := time.Now().Add(3 * time.Second)
	for subs() != 0 || n.Stats().Subscriptions != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("subscription connection still open 3s after the last watch ended (CLIENT LIST %d, Stats %d)", subs(), n.Stats().Subscriptions)
		}
		time.Sleep(20 * time.Millisecond)
	}
	var g flag
	defer n.WatchReleases("k", g.notify)()
	releaseUntilNotified(t, releaser, "k", &g, 2*time.Second)
	if f.fired.Load() != 1 {
		t.Errorf("the cancelled watcher fired %d times, want 1", f.fired.Load())
	}
}
