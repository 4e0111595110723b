package redisnode

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
	"github.com/sidelock/sidelock/pkg/redlock"
)

// BenchmarkMergedScripts is what merging a batch's calls into one script
// call saves the master (issue 30, item 3): 64 concurrent callers'
// grant+release pairs through one node, merged as shipped or each call
// sent alone, reporting per pair the script runs, the master's time in
// them (INFO commandstats usec, which leaves out the I/O) and its whole
// CPU (INFO cpu).
func BenchmarkMergedScripts(b *testing.B) {
	srv := redistest.Start(b)
	for _, merge := range []bool{true, false} {
		b.Run(fmt.Sprintf("merge=%v", merge), func(b *testing.B) {
			n := New(Options{Addr: srv.Addr()})
			b.Cleanup(func() { _ = n.Close() })
			n.pipe.unmerged = !merge
			raw := redis.NewClient(&redis.Options{Addr: srv.Addr()})
			b.Cleanup(func() { _ = raw.Close() })
			ctx := context.Background()
			runs0, usec0, cpu0 := scriptStats(b, raw)
			proposal := time.Now().Add(time.Hour).UnixMicro()
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			for range 64 {
				wg.Go(func() {
					for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
						key := fmt.Sprintf("m/%v/%d", merge, i)
						if _, err := n.AcquireProposed(ctx, key, redlock.FenceKey(key), "v", time.Minute, proposal, time.Hour); err != nil {
							b.Error(err)
							return
						}
						if _, err := n.Release(ctx, key, "v"); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			runs, usec, cpu := scriptStats(b, raw)
			pairs := float64(b.N)
			b.ReportMetric(float64(runs-runs0)/pairs, "scripts/pair")
			b.ReportMetric(float64(usec-usec0)/pairs, "script-µs/pair")
			b.ReportMetric((cpu-cpu0)*1e6/pairs, "redis-cpu-µs/pair")
		})
	}
}

// scriptStats reads the master's script runs and their time in µs
// (EVALSHA and EVAL), and its CPU seconds.
func scriptStats(b *testing.B, raw *redis.Client) (runs, usec int64, cpu float64) {
	info, err := raw.Info(context.Background(), "commandstats", "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		k, v, _ := strings.Cut(line, ":")
		switch k {
		case "cmdstat_evalsha", "cmdstat_eval":
			for _, field := range strings.Split(v, ",") {
				name, val, _ := strings.Cut(field, "=")
				x, _ := strconv.ParseInt(val, 10, 64)
				switch name {
				case "calls":
					runs += x
				case "usec":
					usec += x
				}
			}
		case "used_cpu_user", "used_cpu_sys":
			f, _ := strconv.ParseFloat(v, 64)
			cpu += f
		}
	}
	return runs, usec, cpu
}

// TestMergeKeepsTheOrderOfCallsOnOneKey: merging moves a call only when
// no call of another script in the batch touches its keys, so every two
// calls on one key keep their order, while calls on keys no other script
// touches are still merged.
func TestMergeKeepsTheOrderOfCallsOnOneKey(t *testing.T) {
	take := func(key string) *call {
		return &call{script: acquireProposedScript, keys: []string{key, redlock.FenceKey(key)}, args: proposedArgs("v", time.Second, 1, time.Hour)}
	}
	release := func(key string) *call { return &call{script: releaseScript, keys: []string{key}, args: []any{"v"}} }

	// [take a, release k, take k, take b]: the take of k must stay after
	// the release of k; the takes of a and b merge.
	groups, merged := mergeBatch([]*call{take("a"), release("k"), take("k"), take("b")})
	if got := groups[0]; len(got) != 2 || got[0] != 0 || got[1] != 3 {
		t.Errorf("groups = %v, want the takes of a and b (0, 3) merged", groups)
	}
	if merged[2] || len(groups) != 1 {
		t.Errorf("the take of k (2) was merged ahead of the release of k (1): groups %v merged %v", groups, merged)
	}
	// Calls of one script on one key merge, in their order.
	groups, _ = mergeBatch([]*call{release("k"), release("j"), release("k")})
	if got := groups[0]; len(got) != 3 || got[0] != 0 || got[1] != 1 || got[2] != 2 {
		t.Errorf("groups = %v, want the three releases merged in order", groups)
	}
}
