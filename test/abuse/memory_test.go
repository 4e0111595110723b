//go:build linux

package abuse

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sidelock/sidelock/pkg/client"
)

// memPoint is the sidecar's memory with n units of something in place
// (held streams, waiters, idle connections), against a baseline taken on
// the same process just before they were added.
type memPoint struct {
	what     string
	want, n  int // asked for, in place when measured
	base, at procStats
	refused  string // how callers beyond a cap were answered ("—": none was)
}

// perUnitKB is ΔRSS per unit in place.
func (p memPoint) perUnitKB() float64 {
	if p.n == 0 {
		return 0
	}
	return float64(p.at.rssKB-p.base.rssKB) / float64(p.n)
}

// settle lets a few renewal and health rounds run before a reading.
const settle = 1500 * time.Millisecond

// memoryResult is phase (b).
type memoryResult struct {
	held              []memPoint // one per step of sizes.heldSteps, against one baseline
	waitOne, waitMany memPoint
	idle              memPoint
}

// runMemory measures each kind of unit on a fresh sidecar, so that one
// kind's freed memory (which Go keeps) does not hide the next one's cost.
func runMemory(t *testing.T, e *env, sz sizes) memoryResult {
	var r memoryResult
	r.held = measureHeld(t, e, sz.heldSteps)
	r.waitOne = measureWaiters(t, e, sz.waiters, false)
	r.waitMany = measureWaiters(t, e, sz.waiters, true)
	r.idle = measureIdle(t, e, sz.idleConns)
	return r
}

// streamClient gives every held stream and waiter a connection of its
// own, as separate application processes would have.
func streamClient() *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
}

// measureHeld opens hold=true streams on distinct names, step by step.
func measureHeld(t *testing.T, e *env, steps []int) []memPoint {
	car := e.sidecar(t, "abuse.held:")
	time.Sleep(settle)
	base := car.stats()
	hc := streamClient()
	api := client.New(car.api, hc)
	var held []*client.Held
	defer func() { releaseAll(held); hc.CloseIdleConnections(); car.kill() }()
	var out []memPoint
	for _, want := range steps {
		more := holdMany(api, fmt.Sprintf("held/%d", want), want-len(held))
		held = append(held, more...)
		time.Sleep(settle)
		out = append(out, memPoint{what: "held streams", want: want, n: len(held), base: base, at: car.stats()})
	}
	return out
}

// holdMany opens n held streams, 32 at a time, each with a few tries (a
// busy machine may miss the node timeout); it returns those it got.
func holdMany(api *client.Client, prefix string, n int) []*client.Held {
	var mu sync.Mutex
	var out []*client.Held
	var wg sync.WaitGroup
	var next atomic.Int64
	for range 32 {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(n); i = next.Add(1) - 1 {
				for range 3 {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					h, err := api.Hold(ctx, fmt.Sprintf("%s/%d", prefix, i), client.Options{})
					cancel()
					if err == nil {
						mu.Lock()
						out = append(out, h)
						mu.Unlock()
						break
					}
				}
			}
		})
	}
	wg.Wait()
	return out
}

// releaseAll closes held streams, 64 at a time.
func releaseAll(held []*client.Held) {
	sem := make(chan struct{}, 64)
	var wg sync.WaitGroup
	for _, h := range held {
		sem <- struct{}{}
		wg.Go(func() { h.Release(); <-sem })
	}
	wg.Wait()
}

// waiterWait is how long each waiter would wait: far beyond the reading.
const waiterWait = 60 * time.Second

// measureWaiters queues n waiting acquires, all on one held name or each
// on a name of its own. The names of "many" are held by keys set directly
// on the masters (as another pod's sidecar would hold them), so that the
// holders cost this sidecar nothing and the reading is the waiters'.
func measureWaiters(t *testing.T, e *env, n int, many bool) memPoint {
	prefix := "abuse.wait1:"
	if many {
		prefix = "abuse.waitn:"
	}
	car := e.sidecar(t, prefix)
	defer car.kill()
	names := make([]string, n)
	for i := range names {
		names[i] = "wait/one"
		if many {
			names[i] = fmt.Sprintf("wait/%d", i)
		}
	}
	if err := holdOnMasters(e.masters, prefix, uniq(names)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(settle)
	p := memPoint{what: "waiters, one name", want: n, base: car.stats()}
	if many {
		p.what = "waiters, one name each"
	}
	hc := streamClient()
	defer hc.CloseIdleConnections()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	api := client.New(car.api, hc)
	var answered atomic.Int64 // refused at once (a cap), not waiting
	var mu sync.Mutex
	refused := map[string]int{}
	for _, name := range names {
		wg.Go(func() {
			if _, err := api.Acquire(ctx, name, client.Options{Wait: waiterWait}); ctx.Err() == nil {
				answered.Add(1)
				mu.Lock()
				refused[causeOf(err)]++
				mu.Unlock()
			}
		})
	}
	// Every caller is either queued or already answered (a per-name or
	// connection cap refused it).
	settled := func(v float64) bool { return v+float64(answered.Load()) >= float64(n) }
	if !car.waitMetric("sidelock_waiters", 30*time.Second, settled) {
		t.Logf("%s: only %.0f of %d waiters queued within 30s", p.what, car.metric("sidelock_waiters"), n)
	}
	time.Sleep(settle)
	p.n, p.at = int(max(0, car.metric("sidelock_waiters"))), car.stats()
	mu.Lock()
	p.refused = countsText(refused)
	mu.Unlock()
	return p
}

func uniq(names []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, n := range names {
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	return out
}

// holdOnMasters sets each name's key on every master for longer than any
// waiter waits (the value is "<grant id>:<owner>", like a sidecar's).
func holdOnMasters(masters []string, prefix string, names []string) error {
	for _, addr := range masters {
		rc := redis.NewClient(&redis.Options{Addr: addr})
		_, err := rc.Pipelined(context.Background(), func(p redis.Pipeliner) error {
			for _, n := range names {
				p.Set(context.Background(), prefix+n, "abuse:elsewhere", 2*waiterWait)
			}
			return nil
		})
		rc.Close()
		if err != nil {
			return fmt.Errorf("holding names on master %s: %w", addr, err)
		}
	}
	return nil
}

// measureIdle opens n idle keep-alive connections.
func measureIdle(t *testing.T, e *env, n int) memPoint {
	car := e.sidecar(t, "abuse.idle:")
	defer car.kill()
	time.Sleep(settle)
	p := memPoint{what: "idle keep-alive connections", want: n, base: car.stats()}
	f := openIdleConns(strings.TrimPrefix(car.api, "http://"), n, 60*time.Second)
	defer f.closeAll()
	time.Sleep(settle)
	p.n, p.at = f.stillOpen(), car.stats()
	return p
}
