package shard_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/sidelock/sidelock/internal/redistest"
	"github.com/sidelock/sidelock/internal/shard"
	"github.com/sidelock/sidelock/pkg/redlock"
	"github.com/sidelock/sidelock/pkg/redlock/redisnode"
)

// sidecarGroups opens a sidecar's own connections to each group's real
// masters (every sidecar has its own).
func sidecarGroups(t *testing.T, servers map[string][]*redistest.Server, names ...string) []*redlock.Locker {
	t.Helper()
	groups := make([]*redlock.Locker, len(names))
	for i, name := range names {
		nodes := make([]redlock.Node, len(servers[name]))
		for j, s := range servers[name] {
			n := redisnode.New(redisnode.Options{Addr: s.Addr()})
			t.Cleanup(func() { n.Close() })
			nodes[j] = n
		}
		l, err := redlock.New(nodes, redlock.Config{Name: name, Fencing: true, NodeTimeout: 500 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		groups[i] = l
	}
	return groups
}

// grantRecord is one grant as the callers saw it.
type grantRecord struct {
	key        string
	start, end time.Time // acquire began, release began
	fence      int64
}

// exclusivity records holders and grants, and counts overlaps.
type exclusivity struct {
	mu       sync.Mutex
	holder   map[string]string
	grants   []grantRecord
	overlaps int
}

func (e *exclusivity) enter(key, who string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if h, ok := e.holder[key]; ok {
		e.overlaps++
		_ = h
	}
	e.holder[key] = who
}

func (e *exclusivity) leave(g grantRecord) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.holder, g.key)
	e.grants = append(e.grants, g)
}

// fenceViolations counts grants whose fence is not above that of a grant
// of the same key that ended before it began.
func (e *exclusivity) fenceViolations() int {
	bad := 0
	for _, g := range e.grants {
		for _, earlier := range e.grants {
			if earlier.key == g.key && earlier.end.Before(g.start) && earlier.fence >= g.fence {
				bad++
				break
			}
		}
	}
	return bad
}

// hammer runs callers on routers over keys for d: try once, hold 1ms,
// release.
func hammer(ctx context.Context, e *exclusivity, routers []*shard.Router, keys []string, d time.Duration) {
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	for w := range 2 * len(routers) {
		r := routers[w%len(routers)]
		wg.Go(func() {
			for i := 0; time.Now().Before(deadline); i++ {
				key := keys[rand.IntN(len(keys))]
				value := fmt.Sprintf("w%d-%d", w, i)
				start := time.Now()
				g, err := r.Acquire(ctx, key, value, 5*time.Second)
				if err != nil {
					time.Sleep(time.Millisecond)
					continue
				}
				e.enter(key, value)
				time.Sleep(time.Millisecond)
				e.leave(grantRecord{key: key, start: start, end: time.Now(), fence: g.Fence})
				_ = r.Release(ctx, key, value)
			}
		})
	}
	wg.Wait()
}

// TestMigrationOverRealMastersKeepsOneHolder runs a change from groups
// {a, b} to {a, b, c} over nine real masters: sidecars on the old list race
// sidecars in the migration phase, then those race sidecars on the new list
// alone, over keys that move and keys that stay.
func TestMigrationOverRealMastersKeepsOneHolder(t *testing.T) {
	if testing.Short() {
		t.Skip("starts nine redis-server processes")
	}
	ctx := context.Background()
	servers := map[string][]*redistest.Server{}
	for _, name := range []string{"a", "b", "c"} {
		servers[name] = redistest.StartN(t, 3)
	}
	old := func() *shard.Router { return router(t, sidecarGroups(t, servers, "a", "b"), nil) }
	migrating := func() *shard.Router {
		g := sidecarGroups(t, servers, "a", "b", "c")
		return router(t, g, g[:2])
	}
	newList := func() *shard.Router { return router(t, sidecarGroups(t, servers, "a", "b", "c"), nil) }

	before, after := []string{"a", "b"}, []string{"a", "b", "c"}
	keys := []string{
		movingKey(t, after, before, "a", "c"), movingKey(t, after, before, "b", "c"),
		movingKey(t, after, before, "a", "a"), movingKey(t, after, before, "b", "b"),
	}
	e := &exclusivity{holder: map[string]string{}}
	hammer(ctx, e, []*shard.Router{old(), migrating(), old(), migrating()}, keys, 1500*time.Millisecond)
	phase1 := len(e.grants)
	hammer(ctx, e, []*shard.Router{migrating(), newList(), migrating(), newList()}, keys, 1500*time.Millisecond)
	t.Logf("grants: %d (old and migrating), %d (migrating and new); overlaps %d; fence violations %d",
		phase1, len(e.grants)-phase1, e.overlaps, e.fenceViolations())
	if phase1 < 20 || len(e.grants)-phase1 < 20 {
		t.Fatalf("too few grants to judge: %d and %d", phase1, len(e.grants)-phase1)
	}
	if e.overlaps > 0 || e.fenceViolations() > 0 {
		t.Fatalf("%d overlapping holders, %d fence violations", e.overlaps, e.fenceViolations())
	}
}
