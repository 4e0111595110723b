package sim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sidelock/sidelock/internal/health"
	"github.com/sidelock/sidelock/internal/lease"
	"github.com/sidelock/sidelock/internal/membership"
	"github.com/sidelock/sidelock/pkg/redlock"
)

// sidecarConfig is the part of cmd/sidelock's config a sidecar is built
// from, with the same names and the same defaults except the key ttl.
type sidecarConfig struct {
	KeyPrefix         string
	NodeTimeout       time.Duration
	DriftFactor       float64
	DefaultTTL        time.Duration
	MaxTTL            time.Duration
	KeyTTL            time.Duration
	MaxWait           time.Duration
	MaxHold           time.Duration
	Fencing           bool
	FenceRetention    time.Duration
	HealthInterval    time.Duration
	HealthInfoMaxAge  time.Duration
	ShutdownTimeout   time.Duration
	MastersPersistent bool
	RestartGuard      time.Duration
	NoQuorumRetry     time.Duration
	FenceBlock        int
	Linger            time.Duration
	WaiterMarks       bool
}

func configFor(p params) sidecarConfig {
	return sidecarConfig{
		KeyPrefix: keyPrefix, NodeTimeout: p.NodeTimeout, DriftFactor: p.DriftFactor,
		DefaultTTL: 10 * time.Second, MaxTTL: p.MaxTTL, KeyTTL: p.KeyTTL, MaxWait: p.MaxWait, MaxHold: p.MaxHold,
		Fencing: true, FenceRetention: time.Hour, HealthInterval: p.HealthInterval, HealthInfoMaxAge: p.InfoMaxAge,
		ShutdownTimeout: 5 * time.Second, NoQuorumRetry: 250 * time.Millisecond,
		FenceBlock: p.FenceBlock, Linger: p.Linger, WaiterMarks: !p.NoWaiterMarks,
	}
}

// restartGuard is config.Config.EffectiveRestartGuard() outside dev mode.
func (c sidecarConfig) restartGuard() time.Duration {
	if c.RestartGuard == 0 {
		return c.KeyTTL
	}
	return c.RestartGuard
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
	cfg     sidecarConfig
	links   []*link
	locker  *redlock.Locker
	checker *health.Checker
	mgr     *lease.Manager

	stop    context.CancelFunc // the health rounds and the List poller
	workers sync.WaitGroup
	closed  atomic.Bool
}

// start assembles a sidecar as internal/sidecar's New does, for one quorum
// group of every master: the start-up independence check, redlock.New
// with fencing, health.New over the Locker with the restart guard, two
// rounds before serving, the member-list check,
// lease.NewManager (NoQuorumRetry, QuorumUp), then the health rounds and
// the member-list watch in the background. Keep it in step with New and
// Run; metrics, HTTP and quorum groups are left out (this runs in a
// synctest bubble, over simulated masters that are not configured
// addresses, so the assembly itself cannot be used).
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
	ctx := context.Background()

	// New: checkIndependence, bounded like independenceTimeout.
	ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
	_, err := health.CheckIndependence(ictx, nodes)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("refusing to start: %w", err)
	}
	// buildGroups: one Locker per group.
	now := time.Now // a skewed clock keeps its monotonic reading: durations are true
	if w.p.LagBy != 0 && s.idx == w.p.LagSidecar {
		now = func() time.Time { return time.Now().Add(w.p.LagBy) }
	}
	locker, err := redlock.New(nodes, redlock.Config{
		NodeTimeout: cfg.NodeTimeout, DriftFactor: cfg.DriftFactor, Fencing: cfg.Fencing, FenceRetention: cfg.FenceRetention, Now: now,
	})
	if err != nil {
		return nil, err
	}
	checker, err := health.New([]*redlock.Locker{locker}, health.Config{
		Interval: cfg.HealthInterval, InfoMaxAge: cfg.HealthInfoMaxAge, Timeout: cfg.NodeTimeout,
		OnChange:     func(prev, cur health.Report) { w.rec.healthChanged(name, prev, cur) },
		RestartGuard: cfg.restartGuard(), MastersPersistent: cfg.MastersPersistent, Fencing: cfg.Fencing,
		Logger: log, ReadyPolicy: health.ReadyAllGroups,
	})
	if err != nil {
		return nil, err
	}
	// Two rounds before serving: the second judges the masters over the
	// connections the first opened.
	checker.Check(ctx)
	checker.Check(ctx)
	// checkMembership: record this group's master list, refuse a split.
	group, addrs := groupOf(nodes)
	if err := checkMembership(ctx, cfg, group, addrs, nodes); errors.Is(err, membership.ErrSplitMembership) {
		return nil, fmt.Errorf("refusing to start: %w", err)
	}
	mgr, err := lease.NewManager(locker, lease.Config{
		KeyPrefix: cfg.KeyPrefix, KeyTTL: cfg.KeyTTL, DefaultTTL: cfg.DefaultTTL,
		MaxTTL: cfg.MaxTTL, MaxWait: cfg.MaxWait, MaxHold: cfg.MaxHold,
		NoQuorumRetry: cfg.NoQuorumRetry, QuorumUp: func() bool { return checker.Report().Ready }, Logger: log,
		FenceBlock: cfg.FenceBlock, Linger: cfg.Linger, NoWaiterMarks: !cfg.WaiterMarks, FenceRetention: cfg.FenceRetention,
	})
	if err != nil {
		return nil, err
	}
	sc.locker, sc.checker, sc.mgr = locker, checker, mgr
	runCtx, stop := context.WithCancel(ctx)
	sc.stop = stop
	sc.workers.Go(func() { checker.Run(runCtx) })
	sc.workers.Go(func() { watchMembership(runCtx, cfg, group, addrs, nodes, checker, log) })
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
	ctx, cancel := context.WithTimeout(context.Background(), sc.cfg.ShutdownTimeout)
	defer cancel()
	held := sc.mgr.Len()
	err := sc.mgr.Close(ctx)
	sc.stop()
	sc.workers.Wait()
	for _, l := range sc.links {
		_ = l.Close()
	}
	sc.slot.w.rec.sidecarDown(sc.name, held, err)
	return err
}

// groupOf is the one quorum group's name and addresses, as
// internal/config names an unnamed group.
func groupOf(nodes []redlock.Node) (string, []string) {
	addrs := make([]string, len(nodes))
	for i, n := range nodes {
		addrs[i] = n.Addr()
	}
	sorted := slices.Clone(addrs)
	slices.Sort(sorted)
	return strings.Join(sorted, ","), addrs
}

// membershipEvery and the record ttl are internal/sidecar's.
const membershipEvery = 10 * time.Second

func (c sidecarConfig) membershipTTL() time.Duration { return 3*membershipEvery + 2*c.KeyTTL }

// checkMembership is internal/sidecar's checkGroupMembership.
func checkMembership(ctx context.Context, cfg sidecarConfig, group string, addrs []string, nodes []redlock.Node) error {
	_, err := membership.Check(ctx, cfg.KeyPrefix, group, addrs, nodes, cfg.membershipTTL(), cfg.NodeTimeout*4)
	return err
}

// watchMembership is internal/sidecar's: every membershipEvery, veto the
// group while its master list is split.
func watchMembership(ctx context.Context, cfg sidecarConfig, group string, addrs []string, nodes []redlock.Node, checker *health.Checker, log *slog.Logger) {
	t := time.NewTicker(membershipEvery)
	defer t.Stop()
	vetoed := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := checkMembership(ctx, cfg, group, addrs, nodes)
		split := errors.Is(err, membership.ErrSplitMembership)
		switch {
		case split && !vetoed:
			log.Error("quorum group kept out of service: its master list is split", "group", group, "err", err)
			checker.Veto(0, err.Error())
		case !split && vetoed:
			checker.Veto(0, "")
		}
		vetoed = split
	}
}

// errNoSidecar is what a caller gets while its pod has no sidecar.
var errNoSidecar = errors.New("no sidecar running in this pod")
