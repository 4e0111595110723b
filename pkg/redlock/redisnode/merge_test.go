package redisnode_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sidelock/sidelock/internal/redistest"
	"github.com/sidelock/sidelock/pkg/redlock"
	"github.com/sidelock/sidelock/pkg/redlock/redisnode"
)

// TestMergedCallsEachReachTheMaster: many callers' grants and releases
// that fall due at once are merged into batched script calls (fewer
// script runs than calls), and every one acknowledged was carried out on
// the master: each acknowledged grant holds its key with its proposal
// committed, and each acknowledged release has deleted its key. A merge
// that answered a call it never sent would leave a key behind.
func TestMergedCallsEachReachTheMaster(t *testing.T) {
	srv := redistest.Start(t)
	n := newNode(t, redisnode.Options{Addr: srv.Addr()})
	raw := rawClient(t, srv)
	ctx := t.Context()
	const callers = 200
	proposal := time.Now().Add(time.Hour).UnixMicro()
	key := func(i int) string { return fmt.Sprintf("merge/%d", i) }
	before := scriptRuns(t, raw)

	errs := make(chan error, callers)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			<-start
			errs <- grantThenRelease(ctx, n, raw, key(i), proposal)
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	for i := range callers {
		if v, err := raw.Get(ctx, key(i)).Result(); !errors.Is(err, redis.Nil) {
			t.Fatalf("%s: %q %v after its release was acknowledged, want it gone", key(i), v, err)
		}
	}
	if runs := scriptRuns(t, raw) - before; runs >= 2*callers {
		t.Fatalf("%d script runs for %d calls: none was merged", runs, 2*callers)
	} else {
		t.Logf("%d script runs for %d calls", runs, 2*callers)
	}
}

// grantThenRelease takes key with a fence proposal and releases it,
// checking the master's state after each acknowledgement.
func grantThenRelease(ctx context.Context, n *redisnode.Node, raw *redis.Client, key string, proposal int64) error {
	p, err := n.AcquireProposed(ctx, key, redlock.FenceKey(key), "v-"+key, time.Minute, proposal, time.Hour)
	if err != nil || !p.Acquired || !p.Committed || p.Fence != proposal {
		return fmt.Errorf("%s: AcquireProposed %+v, want taken with %d committed: %w", key, p, proposal, err)
	}
	if v, _ := raw.Get(ctx, key).Result(); v != "v-"+key {
		return fmt.Errorf("%s: %q on the master after an acknowledged grant", key, v)
	}
	if c, _ := raw.Get(ctx, redlock.FenceKey(key)).Result(); c != strconv.FormatInt(proposal, 10) {
		return fmt.Errorf("%s: counter %q after an acknowledged commit of %d", key, c, proposal)
	}
	released, err := n.Release(ctx, key, "v-"+key)
	if err != nil || !released {
		return fmt.Errorf("%s: Release %v: %w", key, released, err)
	}
	return nil
}

// scriptRuns is the number of EVALSHA and EVAL calls the master ran.
func scriptRuns(t *testing.T, raw *redis.Client) int {
	t.Helper()
	info, err := raw.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	runs := 0
	for _, line := range strings.Split(info, "\n") {
		for _, cmd := range []string{"cmdstat_evalsha:calls=", "cmdstat_eval:calls="} {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), cmd); ok {
				calls, _, _ := strings.Cut(rest, ",")
				c, _ := strconv.Atoi(calls)
				runs += c
			}
		}
	}
	return runs
}
