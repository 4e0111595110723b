package redisnode_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sidelock/sidelock/internal/redistest"
	"github.com/sidelock/sidelock/pkg/redlock"
	"github.com/sidelock/sidelock/pkg/redlock/redisnode"
)

// A lock name that is acquired and released leaves one key on each master:
// its fence counter, kept for the fence retention after the last grant
// (SIDELOCK_FENCE_RETENTION) and then dropped by Redis. This measures what
// one counter costs a master (the README's sizing guidance quotes it) and
// checks that churned names cost nothing once the retention has passed.
func TestFenceCountersOfChurnedNamesLapseAfterRetention(t *testing.T) {
	srv := redistest.Start(t)
	raw := rawClient(t, srv)
	ctx := context.Background()
	node := newNode(t, redisnode.Options{Addr: srv.Addr()})
	churn := func(prefix string, names int, retention time.Duration) {
		l, err := redlock.New([]redlock.Node{node}, redlock.Config{Fencing: true, FenceRetention: retention, NodeTimeout: 2 * time.Second}) // a busy machine must not fail a measurement
		if err != nil {
			t.Fatal(err)
		}
		for i := range names {
			key := fmt.Sprintf("%sjobs/run-%06d", prefix, i)
			if _, err := l.Acquire(ctx, key, "v", 10*time.Second); err != nil {
				t.Fatal(err)
			}
			if err := l.Release(ctx, key, "v"); err != nil {
				t.Fatal(err)
			}
		}
	}

	churn("warm:", 1, time.Minute) // loads the scripts before measuring
	raw.FlushAll(ctx)
	const names = 10000
	before := usedMemory(t, raw)
	churn("sidelock:", names, time.Hour)
	if n := raw.DBSize(ctx).Val(); n != names {
		t.Fatalf("%d keys after %d names came and went, want one fence counter each", n, names)
	}
	perName := float64(usedMemory(t, raw)-before) / names
	t.Logf("one fence counter costs a master about %.0f bytes (used_memory over %d names)", perName, names)
	if perName > 200 {
		t.Errorf("a fence counter costs %.0f bytes, more than the README's sizing allows (200)", perName)
	}
	if ttl := raw.PTTL(ctx, redlock.FenceKey("sidelock:jobs/run-000000")).Val(); ttl <= 0 || ttl > time.Hour {
		t.Fatalf("a fence counter's ttl is %v, want within (0, 1h]", ttl)
	}

	raw.FlushAll(ctx)
	const retention = time.Second
	churn("short:", 500, retention)
	deadline := time.Now().Add(retention + 10*time.Second)
	for raw.DBSize(ctx).Val() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d fence counters are still there 10s after their retention", raw.DBSize(ctx).Val())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// usedMemory is the master's used_memory (INFO memory), in bytes.
func usedMemory(t *testing.T, raw *redis.Client) int64 {
	t.Helper()
	info, err := raw.Info(context.Background(), "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no used_memory in INFO memory")
	return 0
}
