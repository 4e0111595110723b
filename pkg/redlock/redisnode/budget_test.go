package redisnode_test

import (
	"context"
	"fmt"
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

// samplerName names the tests' own CLIENT LIST connection, so that it is
// never mistaken for one of the node's.
const samplerName = "budget-sampler"

// connCounts is what CLIENT LIST shows of one node's connections.
type connCounts struct {
	command, subscription int // by name: ClientName and ClientName+"-sub"
	subscribed            int // in subscriber mode (flags P), whatever the name
}

// clientCounts counts the connections named name (and name+"-sub") in one
// CLIENT LIST, excluding the sampler's own.
func clientCounts(list, name string) connCounts {
	var c connCounts
	for _, fields := range redistest.ParseClientList(list) {
		switch fields["name"] {
		case name:
			c.command++
		case name + redisnode.SubscriptionSuffix:
			c.subscription++
		}
		if fields["name"] != samplerName && (strings.Contains(fields["flags"], "P") || fields["sub"] != "" && fields["sub"] != "0") {
			c.subscribed++
		}
	}
	return c
}

// sampler reads CLIENT LIST over a single connection of its own.
func sampler(t *testing.T, srv *redistest.Server, password string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{
		Addr: srv.Addr(), Password: password, ClientName: samplerName,
		Protocol: 2, DisableIdentity: true, PoolSize: 1, MaxActiveConns: 1,
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func clientList(t *testing.T, c *redis.Client) string {
	t.Helper()
	list, err := c.ClientList(context.Background()).Result()
	if err != nil {
		t.Error(err)
	}
	return list
}

// The connections carry the client name, with a password too, and the
// name costs one command per connection dialled, not one per call.
func TestClientNameIsSetOncePerConnection(t *testing.T) {
	srv := redistest.Start(t, redistest.WithArgs("--requirepass", "s3cret"))
	admin := sampler(t, srv, "s3cret")
	for _, tc := range []struct{ name, want string }{{"", "sidelock"}, {"pod-a", "pod-a"}} {
		n := newNode(t, redisnode.Options{Addr: srv.Addr(), Password: "s3cret", ClientName: tc.name})
		for i := range 50 {
			if ok, _, err := n.Acquire(t.Context(), "name/"+strconv.Itoa(i), "v", time.Minute); !ok || err != nil {
				t.Fatalf("Acquire = %v, %v", ok, err)
			}
		}
		cancel := n.WatchReleases("name/0", func() {})
		deadline := time.Now().Add(5 * time.Second)
		for {
			got := clientCounts(clientList(t, admin), tc.want)
			if got.command == 1 && got.subscription == 1 && got.subscribed == 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("ClientName %q: %+v in CLIENT LIST, want 1 command and 1 subscribed subscription connection:\n%s",
					tc.name, got, clientList(t, admin))
			}
			time.Sleep(10 * time.Millisecond)
		}
		cancel()
	}

	// Three connections were dialled (and the sampler's): the 100 calls
	// sent no name of their own.
	stats, err := admin.Info(t.Context(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	if setname := redistest.CommandCalls(stats, "client|setname"); setname > 5 {
		t.Errorf("CLIENT SETNAME ran %d times for 5 connections and 100 calls:\n%s", setname, stats)
	}
}

// An ACL user that may not name its connections still locks: the name is
// for observability only.
func TestClientNameRefusedByTheServerIsNoFailure(t *testing.T) {
	srv := redistest.Start(t, redistest.WithArgs("--user", "locker", "on", ">s3cret", "~*", "&*", "+@all", "-client"))
	n := newNode(t, redisnode.Options{Addr: srv.Addr(), Username: "locker", Password: "s3cret"})
	if err := n.Ping(t.Context()); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	if ok, _, err := n.Acquire(t.Context(), "k", "v", time.Minute); !ok || err != nil {
		t.Fatalf("Acquire = %v, %v; want true, nil", ok, err)
	}
	f := &flag{}
	defer n.WatchReleases("w", f.notify)()
	releaseUntilNotified(t, n, "w", f, 5*time.Second)
}

// 200 concurrent callers of every kind of call, with release watchers
// coming and going, never make a node exceed its command-connection budget
// and one subscription on the real server, and Stats agrees with the
// server.
func TestConnectionBudgetHoldsUnderLoad(t *testing.T) {
	for _, maxConns := range []int{0, 4} { // 0: the default, 2
		t.Run(fmt.Sprintf("MaxConns=%d", maxConns), func(t *testing.T) {
			testConnectionBudget(t, maxConns)
		})
	}
}

func testConnectionBudget(t *testing.T, maxConns int) {
	budget := max(maxConns, redisnode.DefaultMaxConns)
	srv := redistest.Start(t)
	admin := sampler(t, srv, "")
	var observed atomic.Int64
	var observedWait atomic.Int64
	n := newNode(t, redisnode.Options{Addr: srv.Addr(), MaxConns: maxConns, OnQueueWait: func(d time.Duration) {
		observed.Add(1)
		observedWait.Add(int64(d))
	}})

	const callers, rounds = 200, 40
	var calls atomic.Uint64
	var maxSeen connCounts
	var maxStats redisnode.Stats
	stop := make(chan struct{})
	sampled := make(chan int)
	go func() {
		samples := 0
		defer func() { sampled <- samples }()
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			got := clientCounts(clientList(t, admin), redisnode.DefaultClientName)
			st := n.Stats()
			samples++
			maxSeen.command = max(maxSeen.command, got.command)
			maxSeen.subscription = max(maxSeen.subscription, got.subscription)
			maxSeen.subscribed = max(maxSeen.subscribed, got.subscribed)
			maxStats.CommandConns = max(maxStats.CommandConns, st.CommandConns)
			maxStats.Subscriptions = max(maxStats.Subscriptions, st.Subscriptions)
			maxStats.InFlightPipelines = max(maxStats.InFlightPipelines, st.InFlightPipelines)
			maxStats.QueuedCalls = max(maxStats.QueuedCalls, st.QueuedCalls)
			if got.command > budget || got.subscription > 1 || got.subscribed > 1 ||
				st.CommandConns > budget || st.Subscriptions > 1 || st.InFlightPipelines > budget-1 {
				t.Errorf("over budget %d: CLIENT LIST %+v, Stats %+v", budget, got, st)
			}
		}
	}()

	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			for r := range rounds {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				key := fmt.Sprintf("budget/%d/%d", i, r)
				unwatch := func() {}
				if i%10 == 0 { // a tenth contend on a few shared keys, and watch them
					key = fmt.Sprintf("budget/shared/%d", i%3)
					unwatch = n.WatchReleases(key, func() {})
				}
				value := strconv.Itoa(i)
				ok, _, err := n.Acquire(ctx, key, value, time.Minute)
				if err != nil {
					t.Errorf("Acquire %s: %v", key, err)
				}
				if ok { // Extend would set a missing key: it repairs a minority
					calls.Add(1)
					if _, err := n.Extend(ctx, key, value, time.Minute); err != nil {
						t.Errorf("Extend %s: %v", key, err)
					}
				}
				calls.Add(3)
				if _, _, err := n.Get(ctx, key); err != nil {
					t.Errorf("Get %s: %v", key, err)
				}
				if released, err := n.Release(ctx, key, value); err != nil || released != ok {
					t.Errorf("Release %s = %v, %v; acquired %v", key, released, err, ok)
				}
				unwatch()
				cancel()
			}
		})
	}
	// Health rounds share the connections: pings on the regular pool,
	// server info as a pipeline of its own.
	wg.Go(func() {
		for range 50 {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			if err := n.Ping(ctx); err != nil {
				t.Errorf("Ping: %v", err)
			}
			if _, err := n.ServerInfo(ctx); err != nil {
				t.Errorf("ServerInfo: %v", err)
			}
			cancel()
		}
	})
	wg.Wait()
	close(stop)
	samples := <-sampled

	st := settledStats(n, calls.Load())
	if st.Calls != calls.Load() || st.Batches == 0 || st.Batches > st.Calls {
		t.Errorf("Stats: %d calls in %d batches, want %d calls in 1..%[3]d batches", st.Calls, st.Batches, calls.Load())
	}
	if st.InFlightPipelines != 0 || st.QueuedCalls != 0 {
		t.Errorf("Stats after the load: %d pipelines in flight, %d calls queued; want 0", st.InFlightPipelines, st.QueuedCalls)
	}
	if observed.Load() != int64(st.Calls) || time.Duration(observedWait.Load()) != st.QueueWait {
		t.Errorf("OnQueueWait saw %d calls waiting %v, Stats %d calls waiting %v",
			observed.Load(), time.Duration(observedWait.Load()), st.Calls, st.QueueWait)
	}
	// At rest, Stats and the server count the same connections.
	final := clientCounts(clientList(t, admin), redisnode.DefaultClientName)
	if final.command != st.CommandConns || final.subscription != st.Subscriptions {
		t.Errorf("CLIENT LIST shows %+v, Stats %d command connections and %d subscriptions", final, st.CommandConns, st.Subscriptions)
	}
	t.Logf("budget %d: %d samples; max seen on the server: %d command, %d subscription (%d subscribed); max in Stats: %d command, %d subscriptions, %d pipelines in flight, %d calls queued",
		budget, samples, maxSeen.command, maxSeen.subscription, maxSeen.subscribed,
		maxStats.CommandConns, maxStats.Subscriptions, maxStats.InFlightPipelines, maxStats.QueuedCalls)
	t.Logf("%d calls in %d batches: %.1f calls per round trip; mean queue wait %v",
		st.Calls, st.Batches, float64(st.Calls)/float64(st.Batches), st.QueueWait/time.Duration(st.Calls))
}

// settledStats is n's Stats once the last batch has been counted (or after
// 2s): a batch is counted after its callers have their replies
// (pipeline.go), so a caller can return before its batch is.
func settledStats(n *redisnode.Node, calls uint64) redisnode.Stats {
	deadline := time.Now().Add(2 * time.Second)
	for {
		st := n.Stats()
		if st.Calls == calls && st.InFlightPipelines == 0 && st.QueuedCalls == 0 || time.Now().After(deadline) {
			return st
		}
		time.Sleep(time.Millisecond)
	}
}
