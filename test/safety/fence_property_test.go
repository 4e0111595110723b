// Package safety holds property tests of sidelock's guarantees under
// faults, against real redis-server masters.
package safety

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sidelock/sidelock/internal/config"
	"github.com/sidelock/sidelock/internal/health"
	"github.com/sidelock/sidelock/internal/lease"
	"github.com/sidelock/sidelock/internal/redistest"
	"github.com/sidelock/sidelock/internal/sidecar/inprocess"
	"github.com/sidelock/sidelock/pkg/redlock"
	"github.com/sidelock/sidelock/pkg/redlock/redisnode"
)

const (
	masters    = 5
	sidecars   = 3
	acquirers  = 6 // two per sidecar
	keyTTL     = time.Second
	runFor     = 6 * time.Second
	chaosEvery = 250 * time.Millisecond
	// healthInterval is the sidecars' health round.
	healthInterval = 50 * time.Millisecond
)

// grant is one acquisition seen by a client: asked at start, granted at end.
type grant struct {
	start, end time.Time
	fence      int64
}

// sidecar is the in-process core of one sidelock: Redlock with fencing,
// the health checker and its guards, and the lease manager.
type sidecar struct {
	leases  *lease.Manager
	checker *health.Checker
}

func startSidecar(t *testing.T, servers []*redistest.Server, persistent bool) *sidecar {
	nodes := make([]redlock.Node, len(servers))
	for i, s := range servers {
		nodes[i] = redisnode.New(redisnode.Options{Addr: s.Addr()})
		t.Cleanup(func() { nodes[i].Close() })
	}
	// Cleanups run last-in first-out: the checks have ended and the
	// leases with them before the nodes they use are closed.
	core := inprocess.Start(t, inprocess.Options{Nodes: nodes, Checks: true, RestartGuard: true, Config: func(c *config.Config) {
		c.KeyPrefix, c.HealthInterval = "prop:", healthInterval
		c.KeyTTL, c.DefaultTTL, c.RestartGuard, c.MaxWait = keyTTL, keyTTL, keyTTL, time.Minute
		c.MastersPersistent, c.HealthInfoMaxAge, c.NoQuorumRetry = persistent, 0, 0
	}})
	return &sidecar{leases: core.Leases(), checker: core.Checker()}
}

// Several acquirers on three sidecars take turns on one lock while a
// chaos loop kills masters (kill -9) and restarts them, keeping a minority
// down at any time. Every grant's fence must exceed the fence of every
// grant that finished before it began.
func TestFencesStayMonotonicWhileMastersCrashAndRestart(t *testing.T) {
	for _, persistent := range []bool{true, false} {
		t.Run(fmt.Sprintf("persistent=%v", persistent), func(t *testing.T) {
			var opts []redistest.Option
			if persistent {
				opts = append(opts, redistest.WithAppendOnly())
			}
			servers := redistest.StartN(t, masters, opts...)
			cars := make([]*sidecar, sidecars)
			for i := range cars {
				cars[i] = startSidecar(t, servers, persistent)
			}
			waitReady(t, cars)
			ctx, cancel := context.WithTimeout(context.Background(), runFor)
			defer cancel()
			// The chaos loop and the acquirers both end before the test
			// goes on: no goroutine of this test outlives it, and only
			// this goroutine fails the test.
			var chaosDone sync.WaitGroup
			var cr chaosReport
			// A restarted master that lost its data sits out its restart
			// probation (one key ttl, noticed within a health round or
			// two): chaos counts it down until then, so that a minority is
			// unavailable at any time, as the availability check assumes.
			var probation time.Duration
			if !persistent {
				probation = keyTTL + 2*healthInterval
			}
			chaosDone.Go(func() { cr = chaos(ctx, servers, probation) })
			grants, failures := contend(ctx, cars)
			chaosDone.Wait()
			for _, err := range cr.errs {
				t.Errorf("chaos: %v", err)
			}
			violations := fenceViolations(grants)
			var events health.GuardEvents
			for _, c := range cars {
				e := c.checker.Report().GuardEvents
				events.RestartProbation += e.RestartProbation
				events.NotDurable += e.NotDurable
			}
			t.Logf("persistent=%v: %d grants, %d master restarts, %d fence-order violations, failures %v, guard events (all sidecars): restart_probation=%d not_durable=%d",
				persistent, len(grants), cr.restarts, violations, failures, events.RestartProbation, events.NotDurable)
			if violations != 0 {
				t.Fatalf("%d fence-order violations", violations)
			}
			if len(grants) < 20 {
				t.Fatalf("only %d grants: the lock should stay available with a minority down", len(grants))
			}
		})
	}
}

func waitReady(t *testing.T, cars []*sidecar) {
	deadline := time.Now().Add(10 * time.Second)
	for _, c := range cars {
		for !c.checker.Report().Ready {
			if time.Now().After(deadline) {
				t.Fatal("sidecars not ready")
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// chaosReport is what the chaos loop did: how many masters it brought
// back, and the restarts that failed (reported by the test's goroutine).
type chaosReport struct {
	restarts int
	errs     []error
}

// chaos kills a random master and restarts it a moment later, never more
// than a minority at once, until ctx ends; it returns only once every
// restart it began has finished. It never touches the test's T: a failed
// restart is returned, for the test to report.
func chaos(ctx context.Context, servers []*redistest.Server, probation time.Duration) chaosReport {
	rng := rand.New(rand.NewPCG(7, 11))
	var mu sync.Mutex
	down := map[int]bool{}
	restarts, errs := 0, []error(nil) // guarded by mu
	tick := time.NewTicker(chaosEvery)
	defer tick.Stop()
	var wg sync.WaitGroup
	for {
		select {
		case <-ctx.Done():
			wg.Wait()
			return chaosReport{restarts: restarts, errs: errs}
		case <-tick.C:
		}
		i := rng.IntN(len(servers))
		mu.Lock()
		if down[i] || len(down) >= len(servers)/2 {
			mu.Unlock()
			continue
		}
		down[i] = true
		mu.Unlock()
		servers[i].Kill()
		downFor := time.Duration(100+rng.IntN(300)) * time.Millisecond // rng stays on this goroutine
		wg.Go(func() {
			time.Sleep(downFor)
			if err := servers[i].TryRestart(); err != nil {
				// It stays down (and counted as down): the minority bound
				// holds, and the test fails once the run ends.
				mu.Lock()
				errs = append(errs, fmt.Errorf("master %d: %w", i, err))
				mu.Unlock()
				return
			}
			time.Sleep(probation)
			mu.Lock()
			restarts++
			delete(down, i)
			mu.Unlock()
		})
	}
}

// contend runs the acquirers until ctx ends and returns every grant and
// the failures by kind.
func contend(ctx context.Context, cars []*sidecar) ([]grant, map[string]int) {
	var mu sync.Mutex
	var grants []grant
	failures := map[string]int{}
	var wg sync.WaitGroup
	for i := range acquirers {
		m := cars[i%len(cars)].leases
		wg.Go(func() {
			for ctx.Err() == nil {
				start := time.Now()
				in, err := m.Acquire(ctx, lease.Request{Name: "hot", Wait: 500 * time.Millisecond})
				end := time.Now()
				mu.Lock()
				if err == nil {
					grants = append(grants, grant{start: start, end: end, fence: in.Fence})
				} else {
					failures[failureKind(err)]++
				}
				mu.Unlock()
				if err != nil {
					time.Sleep(10 * time.Millisecond)
					continue
				}
				time.Sleep(2 * time.Millisecond)
				_ = m.Release(context.Background(), "hot", in.Token)
			}
		})
	}
	wg.Wait()
	return grants, failures
}

func failureKind(err error) string {
	switch {
	case errors.Is(err, lease.ErrLockHeld):
		return "held"
	case errors.Is(err, lease.ErrNoQuorum):
		return "no_quorum"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return "stopped"
	default:
		return "other"
	}
}

// fenceViolations counts grants whose fence is not above that of a grant
// that finished before they began.
func fenceViolations(grants []grant) int {
	byEnd := slices.Clone(grants)
	slices.SortFunc(byEnd, func(a, b grant) int { return a.end.Compare(b.end) })
	byStart := slices.Clone(grants)
	slices.SortFunc(byStart, func(a, b grant) int { return a.start.Compare(b.start) })
	violations, j := 0, 0
	var highest int64
	for _, g := range byStart {
		for j < len(byEnd) && byEnd[j].end.Before(g.start) {
			highest = max(highest, byEnd[j].fence)
			j++
		}
		if g.fence <= highest {
			violations++
		}
	}
	return violations
}
