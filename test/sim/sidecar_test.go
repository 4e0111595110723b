package sim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sidelock/sidelock/internal/config"
	"github.com/sidelock/sidelock/internal/health"
	"github.com/sidelock/sidelock/internal/lease"
	assembly "github.com/sidelock/sidelock/internal/sidecar"
	"github.com/sidelock/sidelock/pkg/redlock"
)

// configFor is the configuration every sidecar of a run gets: the
// settings table's defaults, the run's draws, and the lease limits the
// lease package takes by default (far above what a run asks for).
func configFor(p params) config.Config {
	c := config.Defaults()
	c.KeyPrefix, c.NodeTimeout, c.DriftFactor = keyPrefix, p.NodeTimeout, p.DriftFactor
	c.DefaultTTL, c.MaxTTL, c.KeyTTL, c.MaxWait, c.MaxHold = 10*time.Second, p.MaxTTL, p.KeyTTL, p.MaxWait, p.MaxHold
	c.Fencing, c.FenceRetention, c.HealthInterval, c.HealthInfoMaxAge = true, time.Hour, p.HealthInterval, p.InfoMaxAge
	c.ShutdownTimeout, c.NoQuorumRetry = 5*time.Second, 250*time.Millisecond
	c.MaxLocks, c.MaxWaiters = lease.DefaultMaxLocks, lease.DefaultMaxWaiters
	c.FenceBlock, c.Linger, c.WaiterMarks = p.FenceBlock, p.Linger, !p.NoWaiterMarks
	return c
}

// slot is one pod's sidecar: a SIGTERM ends a generation and a new one
// may start. A partition cuts the pod (every generation's links) off.
type slot struct {
	w           *world
	idx         int
	partitioned atomic.Bool   // cut off from every master
	cut         []atomic.Bool // cut off from one master

	mu   sync.Mutex
	cur  *sidecar
	gens int
}

func (s *slot) current() *sidecar {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur
}

// sidecar is one running sidelock: Locker, health Checker, lease Manager.
type sidecar struct {
	slot    *slot
	name    string
	cfg     config.Config
	links   []*link
	core    *assembly.Core
	checker *health.Checker
	mgr     *lease.Manager

	stop    context.CancelFunc // the health rounds and the List poller
	workers sync.WaitGroup
	closed  atomic.Bool
}

// start assembles a sidecar as internal/sidecar's New does
// (assembly.Assemble: the start-up independence check, the Locker, the
// health checker with the restart guard and its two rounds, the member-list
// check, the lease manager), for one quorum group of every master, over
// this pod's links to the simulated masters; then the health rounds and
// the member-list watch run in the background, as in Run. Only the
// listeners are left out: this runs in a synctest bubble, on its virtual
// clock.
func (s *slot) start() (*sidecar, error) {
	w := s.w
	s.mu.Lock()
	s.gens++
	gen := s.gens
	name := fmt.Sprintf("s%dg%d", s.idx+1, gen)
	s.mu.Unlock()
	cfg := configFor(w.p)
	sc := &sidecar{slot: s, name: name, cfg: cfg}
	log := slog.New(&logHandler{r: w.rec, sidecar: name})
	nodes := make([]redlock.Node, len(w.masters))
	for i, m := range w.masters {
		l := &link{w: w, m: m, sidecar: name, slot: s.idx, id: w.rnd(0x11c, uint64(s.idx), uint64(gen), uint64(i)), cutoff: &s.partitioned, cut: &s.cut[i]}
		m.mu.Lock()
		m.links = append(m.links, l)
		m.mu.Unlock()
		sc.links = append(sc.links, l)
		nodes[i] = l
	}
	w.rec.sidecarUp(name)
	opts := []assembly.Option{assembly.WithNodes(nodes...), assembly.WithLogger(log),
		assembly.WithHealthObserver(func(prev, cur health.Report) { w.rec.healthChanged(name, prev, cur) })}
	if w.p.LagBy != 0 && s.idx == w.p.LagSidecar {
		// A skewed clock keeps its monotonic reading: durations are true.
		opts = append(opts, assembly.WithRedlockClock(func() time.Time { return time.Now().Add(w.p.LagBy) }))
	}
	core, err := assembly.Assemble(context.Background(), cfg, opts...)
	if err != nil {
		return nil, err
	}
	sc.core, sc.checker, sc.mgr = core, core.Checker(), core.Leases()
	runCtx, stop := context.WithCancel(context.Background())
	sc.stop = stop
	sc.workers.Go(func() { core.RunChecks(runCtx) })
	sc.workers.Go(func() { sc.pollList(runCtx) })
	s.mu.Lock()
	s.cur = sc
	s.mu.Unlock()
	return sc, nil
}

// pollList records the valid_until every List shows (of locks, the
// locks of sets among them, permits, readers and writers): a List answer
// is a promise too.
func (sc *sidecar) pollList(ctx context.Context) {
	r := sc.slot.w.rng(0x1157, uint64(sc.slot.idx), hashString(sc.name))
	for {
		t := time.NewTimer(between(r, 100*time.Millisecond, time.Second))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		for _, infos := range [][]lease.Info{sc.mgr.List(), sc.mgr.Semaphores().List(), sc.mgr.RWLocks().List()} {
			sc.slot.w.rec.listed(sc.name, infos)
		}
	}
}

// shutdown is the SIGTERM path of Run: Manager.Close within the
// shutdown timeout, then the health rounds stop and the connections close.
func (sc *sidecar) shutdown() error {
	if !sc.closed.CompareAndSwap(false, true) {
		return nil
	}
	s := sc.slot
	s.mu.Lock()
	if s.cur == sc {
		s.cur = nil
	}
	s.mu.Unlock()
	held := sc.mgr.Len()
	err := sc.core.Close() // within the shutdown timeout; the links are ours
	sc.stop()
	sc.workers.Wait()
	for _, l := range sc.links {
		_ = l.Close()
	}
	sc.slot.w.rec.sidecarDown(sc.name, held, err)
	return err
}

// errNoSidecar is what a caller gets while its pod has no sidecar.
var errNoSidecar = errors.New("no sidecar running in this pod")
