package redisnode_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sidelock/sidelock/internal/redistest"
	"github.com/sidelock/sidelock/pkg/redlock"
	"github.com/sidelock/sidelock/pkg/redlock/nodetest"
	"github.com/sidelock/sidelock/pkg/redlock/redisnode"
)

// TestMain silences go-redis's own logger, which prints a line for every
// failed dial: the failure tests provoke them on purpose, and
// every failure that matters is asserted on through the returned errors.
func TestMain(m *testing.M) {
	redistest.SilenceClientLogs()
	os.Exit(m.Run())
}

// nodeBudget is the per-call timeout the algorithm gives a node.
const nodeBudget = 50 * time.Millisecond

func TestConformance(t *testing.T) {
	srv := redistest.Start(t)
	nodetest.Run(t, func(t *testing.T) redlock.Node {
		return redisnode.New(redisnode.Options{Addr: srv.Addr()})
	})
}

// newNode returns a node on srv that is closed when the test ends.
func newNode(t *testing.T, opts redisnode.Options) *redisnode.Node {
	t.Helper()
	n := redisnode.New(opts)
	t.Cleanup(func() { _ = n.Close() })
	return n
}

// rawClient talks to srv directly, to set up states the Node API cannot.
func rawClient(t *testing.T, srv *redistest.Server) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), Protocol: 2, DisableIdentity: true})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// eventually retries call until it succeeds or timeout passes.
func eventually(t *testing.T, timeout time.Duration, call func(ctx context.Context) error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		err := call(ctx)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("still failing after %v: %v", timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestHolderWithoutExpiryReportsZeroTTL(t *testing.T) {
	srv := redistest.Start(t)
	n := newNode(t, redisnode.Options{Addr: srv.Addr()})
	ctx := t.Context()
	if err := rawClient(t, srv).Set(ctx, "k", "manual", 0).Err(); err != nil {
		t.Fatal(err)
	}

	ok, holderTTL, err := n.Acquire(ctx, "k", "A", time.Minute)
	if err != nil || ok || holderTTL != 0 {
		t.Fatalf("Acquire = %v, %v, %v; want false, 0, nil", ok, holderTTL, err)
	}
	if value, ttl, err := n.Get(ctx, "k"); err != nil || value != "manual" || ttl != 0 {
		t.Fatalf("Get = %q, %v, %v; want manual, 0, nil", value, ttl, err)
	}
}

func TestAuth(t *testing.T) {
	srv := redistest.Start(t, redistest.WithArgs("--requirepass", "s3cret"))
	ctx := t.Context()

	for name, opts := range map[string]redisnode.Options{
		"password":           {Addr: srv.Addr(), Password: "s3cret"},
		"default user (ACL)": {Addr: srv.Addr(), Username: "default", Password: "s3cret"},
	} {
		t.Run(name, func(t *testing.T) {
			n := newNode(t, opts)
			if err := n.Ping(ctx); err != nil {
				t.Fatalf("Ping: %v", err)
			}
			if ok, _, err := n.Acquire(ctx, "k-"+name, "A", time.Minute); err != nil || !ok {
				t.Fatalf("Acquire = %v, %v; want true, nil", ok, err)
			}
		})
	}

	for name, tc := range map[string]struct {
		password, want string
	}{
		"no password":    {"", "NOAUTH"},
		"wrong password": {"wrong", "WRONGPASS"},
	} {
		t.Run(name, func(t *testing.T) {
			n := newNode(t, redisnode.Options{Addr: srv.Addr(), Password: tc.password})
			_, _, err := n.Acquire(ctx, "k", "A", time.Minute)
			if err == nil {
				t.Fatal("Acquire succeeded without valid credentials")
			}
			for _, want := range []string{srv.Addr(), "acquire", tc.want} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not mention %q", err, want)
				}
			}
		})
	}
}

func TestKilledServerFailsWithinBudget(t *testing.T) {
	srv := redistest.Start(t)
	warm := newNode(t, redisnode.Options{Addr: srv.Addr()})
	if err := warm.Ping(t.Context()); err != nil { // leaves a pooled connection
		t.Fatal(err)
	}
	srv.Kill()
	cold := newNode(t, redisnode.Options{Addr: srv.Addr()})

	for name, n := range map[string]*redisnode.Node{"pooled connection": warm, "fresh dial": cold} {
		t.Run(name, func(t *testing.T) {
			for range 3 { // the pooled connection, then dials
				wantFailsWithinBudget(t, n)
			}
		})
	}
}

func TestFrozenServerFailsWithinBudget(t *testing.T) {
	srv := redistest.Start(t)
	n := newNode(t, redisnode.Options{Addr: srv.Addr()})
	if err := n.Ping(t.Context()); err != nil {
		t.Fatal(err)
	}

	srv.Stop() // connections stay open; nothing answers
	defer srv.Cont()
	for range 3 {
		err := wantFailsWithinBudget(t, n)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("err = %v, want errors.Is(err, context.DeadlineExceeded)", err)
		}
	}

	srv.Cont()
	eventually(t, 5*time.Second, n.Ping)
}

// wantFailsWithinBudget makes one Acquire with the algorithm's per-node
// budget and checks that it fails, and fails about when the budget ends.
func wantFailsWithinBudget(t *testing.T, n *redisnode.Node) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), nodeBudget)
	defer cancel()
	start := time.Now()
	_, _, err := n.Acquire(ctx, "k", "A", time.Minute)
	took := time.Since(start)
	if err == nil {
		t.Fatal("Acquire succeeded against a dead server")
	}
	if !strings.Contains(err.Error(), n.Addr()) {
		t.Errorf("error %q does not name the node", err)
	}
	// Generous for -race on a loaded machine, yet far below go-redis's
	// defaults (5s timeouts, 3 retries).
	if took > 500*time.Millisecond {
		t.Errorf("Acquire took %v with a %v budget", took, nodeBudget)
	}
	return err
}

func TestRestartWithoutPersistenceForgetsLocks(t *testing.T) {
	srv := redistest.Start(t)
	n := newNode(t, redisnode.Options{Addr: srv.Addr()})
	if ok, _, err := n.Acquire(t.Context(), "k", "A", time.Minute); err != nil || !ok {
		t.Fatalf("Acquire = %v, %v; want true, nil", ok, err)
	}

	srv.Restart(t)
	// The same client recovers on its own; the master came back empty, so
	// another owner can take the key.
	eventually(t, 5*time.Second, func(ctx context.Context) error {
		ok, _, err := n.Acquire(ctx, "k", "B", time.Minute)
		if err == nil && !ok {
			return errors.New("key still held after a restart without persistence")
		}
		return err
	})
}

func TestRestartWithAppendOnlyKeepsLocks(t *testing.T) {
	srv := redistest.Start(t, redistest.WithAppendOnly())
	n := newNode(t, redisnode.Options{Addr: srv.Addr()})
	if ok, _, err := n.Acquire(t.Context(), "k", "A", time.Minute); err != nil || !ok {
		t.Fatalf("Acquire = %v, %v; want true, nil", ok, err)
	}

	srv.Restart(t)
	eventually(t, 5*time.Second, func(ctx context.Context) error {
		value, _, err := n.Get(ctx, "k")
		if err == nil && value != "A" {
			t.Fatalf("Get after restart = %q, want A", value)
		}
		return err
	})
}

func TestScriptsSurviveScriptFlush(t *testing.T) {
	srv := redistest.Start(t)
	n := newNode(t, redisnode.Options{Addr: srv.Addr()})
	raw := rawClient(t, srv)
	ctx := t.Context()

	runAll := func() {
		t.Helper()
		if ok, _, err := n.Acquire(ctx, "k", "A", time.Minute); err != nil || !ok {
			t.Fatalf("Acquire = %v, %v", ok, err)
		}
		if outcome, err := n.Extend(ctx, "k", "A", time.Minute); err != nil || outcome != redlock.ExtendRenewed {
			t.Fatalf("Extend = %v, %v", outcome, err)
		}
		if value, _, err := n.Get(ctx, "k"); err != nil || value != "A" {
			t.Fatalf("Get = %q, %v", value, err)
		}
		if ok, err := n.Release(ctx, "k", "A"); err != nil || !ok {
			t.Fatalf("Release = %v, %v", ok, err)
		}
	}

	runAll() // loads every script through the NOSCRIPT fallback
	if err := raw.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	runAll() // EVALSHA fails with NOSCRIPT again and must fall back
}

// Concurrent callers share a couple of pipelined connections instead of
// holding one each.
func TestConcurrentCallsCoalesceOntoFewConnections(t *testing.T) {
	srv := redistest.Start(t)
	n := redisnode.New(redisnode.Options{Addr: srv.Addr()})
	defer n.Close()
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			key := fmt.Sprintf("coalesce/%d", i)
			if ok, _, err := n.Acquire(ctx, key, "v", time.Minute); !ok || err != nil {
				t.Errorf("acquire %s: %v %v", key, ok, err)
			}
			if _, err := n.Release(ctx, key, "v"); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	// Count the server's clients with a single connection of our own.
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr(), Protocol: 2, PoolSize: 1, MaxActiveConns: 1})
	defer admin.Close()
	list, err := admin.ClientList(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	const budget = 2 // one pipeline and one for pings and script loads, by default
	if conns := strings.Count(list, "\n") - 1; conns > budget {
		t.Fatalf("%d connections after 200 concurrent callers, want at most %d:\n%s", conns, budget, list)
	}
}
