package sidecar

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sidelock/sidelock/httpapi"
	"github.com/sidelock/sidelock/internal/config"
	"github.com/sidelock/sidelock/internal/ctxsleep"
	"github.com/sidelock/sidelock/internal/health"
	"github.com/sidelock/sidelock/internal/lease"
	"github.com/sidelock/sidelock/internal/metrics"
	"github.com/sidelock/sidelock/internal/watch"
	"github.com/sidelock/sidelock/pkg/redlock"
)

// Core is a sidecar without its listeners: the quorum groups over their
// masters, the health checker, the lease manager, the watch hub, the
// metrics and the handlers of the lock API and the admin endpoints, wired
// as every sidecar is. New serves one on cfg's addresses; the tests, the
// simulator, the benchmarks and the examples run cores in process
// (Assemble), over masters they give it (WithNodes), and in the
// simulator's synctest bubble on its virtual clock.
type Core struct {
	cfg  config.Config
	opts options
	log  *slog.Logger

	// groups are every quorum group the sidecar talks to: the current
	// ones, then those only in the previous list (config.UnionGroups).
	groups            []*redlock.Locker
	current, previous []config.GroupSpec
	nodes             []redlock.Node // every group's masters, group after group

	checker *health.Checker
	leases  *lease.Manager
	watches *watch.Hub // followers of lock names (GET /locks/{name}?watch=true)
	metrics *metrics.Metrics
	reg     *prometheus.Registry

	closeOnce sync.Once
}

// WithNodes makes the sidecar's one quorum group these masters (memnode,
// simulated ones, or nodes another sidecar of the process shares) instead
// of those cfg names; they stay the caller's to close.
func WithNodes(nodes ...redlock.Node) Option { return func(o *options) { o.nodes = nodes } }

// WithHealthObserver is told every change of the health report, instead
// of the log lines the sidecar writes of them.
func WithHealthObserver(changed func(prev, cur health.Report)) Option {
	return func(o *options) { o.healthChanged = changed }
}

// WithLeaseTuning adjusts the lease manager's configuration (what cfg
// does not set: admission...) before it is built.
func WithLeaseTuning(tune func(*lease.Config)) Option {
	return func(o *options) { o.tuneLeases = tune }
}

// WithRedlockClock gives the sidecar's Lockers a clock of their own (it
// must keep a monotonic reading): the simulator runs a sidecar whose fence
// proposals come from a clock that runs behind.
func WithRedlockClock(now func() time.Time) Option { return func(o *options) { o.redlockNow = now } }

// WithWatchPoll sets how often the watch hub reads a watched lock from the
// masters (0: watch.DefaultPoll).
func WithWatchPoll(d time.Duration) Option { return func(o *options) { o.watchPoll = d } }

// Assemble builds a Core from cfg: it connects to the masters of cfg's
// groups (or takes WithNodes'), checks that they are independent, runs
// two health rounds unless WithChecksAfter says otherwise, records the
// member lists (refusing a split) and builds the lease manager over them.
// cfg must have passed Validate, but for the masters with WithNodes. ctx
// bounds the start-up only. Close it once done.
func Assemble(ctx context.Context, cfg config.Config, opts ...Option) (_ *Core, err error) {
	c := &Core{cfg: cfg, opts: options{log: slog.New(slog.DiscardHandler), version: "unknown"}}
	for _, o := range opts {
		o(&c.opts)
	}
	c.log = c.opts.log
	defer func() {
		if err != nil {
			c.closeNodes()
		}
	}()
	if c.current, c.previous, err = groupSpecs(cfg, opts); err != nil {
		return nil, err
	}
	c.groups, err = c.buildGroups(config.UnionGroups(c.current, c.previous))
	for _, g := range c.groups {
		c.nodes = append(c.nodes, g.Nodes()...)
	}
	if err != nil {
		return nil, err
	}
	if err := checkIndependence(ctx, c.nodes, c.log); err != nil {
		return nil, err
	}
	locker, err := newLocker(c.groups, c.current, c.previous)
	if err != nil {
		return nil, err
	}
	if err := c.newChecker(ctx); err != nil {
		return nil, err
	}
	c.reg = prometheus.NewRegistry()
	c.metrics = metrics.New(c.reg, metrics.Sources{
		Version:   c.opts.version,
		LocksHeld: func() int { return c.leases.Len() }, Waiters: func() int { return c.leases.Waiters() }, Health: c.checker.Report,
		WatchStreams: func() int { return c.watches.Streams() }, // scraped once serving, after c.watches is set
		Masters:      masterStats(c.nodes),
	})
	observeQueueWaits(c.nodes, c.metrics)
	if err := c.checkMembership(ctx); err != nil {
		return nil, err
	}
	if c.leases, err = c.newLeases(locker); err != nil {
		return nil, err
	}
	c.watches = watch.New(watch.Config{Source: c.leases, MaxStreams: cfg.MaxWatchers, Poll: c.opts.watchPoll})
	return c, nil
}

// groupSpecs are the quorum groups as configured: cfg's, or the one group
// of WithNodes' masters.
func groupSpecs(cfg config.Config, opts []Option) (current, previous []config.GroupSpec, err error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if o.nodes != nil {
		addrs := make([]string, len(o.nodes))
		for i, n := range o.nodes {
			addrs[i] = n.Addr()
		}
		return []config.GroupSpec{{Name: config.DefaultGroupName(addrs)}}, nil, nil
	}
	return cfg.Groups()
}

func (c *Core) newLeases(locker lease.Locker) (*lease.Manager, error) {
	var obs lease.Observer = c.metrics
	if c.opts.observer != nil {
		obs = c.opts.observer(obs)
	}
	lc := lease.Config{
		KeyPrefix: c.cfg.KeyPrefix, KeyTTL: c.cfg.KeyTTL, DefaultTTL: c.cfg.DefaultTTL,
		MaxTTL: c.cfg.MaxTTL, MaxWait: c.cfg.MaxWait, MaxHold: c.cfg.MaxHold, MaxLocks: c.cfg.MaxLocks, MaxWaiters: c.cfg.MaxWaiters, MaxWaitersPerName: c.cfg.MaxWaitersPerName,
		NoQuorumRetry: c.cfg.NoQuorumRetry, QuorumUp: func() bool { return !c.checker.QuorumLost() }, Observer: obs, Logger: c.log,
		FenceBlock: c.cfg.FenceBlock, Linger: c.cfg.Linger, NoWaiterMarks: !c.cfg.WaiterMarks, FenceRetention: c.cfg.FenceRetention,
		// Leases start and end only once the API serves, after c.watches
		// is set.
		Changed: func(name string) { c.watches.Changed(name) },
	}
	if c.opts.tuneLeases != nil {
		c.opts.tuneLeases(&lc)
	}
	return lease.NewManager(locker, lc)
}

// newChecker builds the health checker over every group and, unless told
// to wait, runs two rounds before any listener opens: until the guards
// have judged the masters, none counts towards a quorum, and a verdict
// holds only over the connections a master had when it was observed,
// which the first round is the one to open.
func (c *Core) newChecker(ctx context.Context) error {
	guard := c.cfg.EffectiveRestartGuard()
	if c.opts.noRestartGuard {
		guard = 0
	}
	changed := c.opts.healthChanged
	if changed == nil {
		changed = logHealthChange(c.log)
	}
	var err error
	c.checker, err = health.New(c.groups, health.Config{
		Interval: c.cfg.HealthInterval, InfoMaxAge: c.cfg.HealthInfoMaxAge, DownAfter: c.cfg.HealthDownAfter,
		Timeout: c.cfg.NodeTimeout, OnChange: changed,
		RestartGuard: guard, MastersPersistent: c.cfg.MastersPersistent, Fencing: c.cfg.Fencing, Logger: c.log,
		ReadyPolicy: health.ReadyPolicy(c.cfg.ReadyPolicy),
	})
	if err != nil {
		return err
	}
	if !c.opts.delayChecks {
		c.checker.Check(ctx)
		c.checker.Check(ctx)
		logStartReadiness(c.log, c.checker.Report())
	}
	return nil
}

// Leases is the sidecar's lease manager.
func (c *Core) Leases() *lease.Manager { return c.leases }

// Checker is the sidecar's health checker.
func (c *Core) Checker() *health.Checker { return c.checker }

// Groups are the sidecar's quorum groups.
func (c *Core) Groups() []*redlock.Locker { return c.groups }

// Watches is the sidecar's hub of lock watchers.
func (c *Core) Watches() *watch.Hub { return c.watches }

// Handler is the lock API over the sidecar's leases, metrics and watches,
// with the further options given.
func (c *Core) Handler(opts ...httpapi.Option) http.Handler {
	opts = append([]httpapi.Option{httpapi.WithWatches(c.watches)}, opts...)
	return httpapi.NewServer(c.log, c.leases, c.metrics, opts...)
}

// AdminHandler serves /healthz, /readyz and /metrics.
func (c *Core) AdminHandler() http.Handler {
	return httpapi.NewAdminServer(c.log, c.checker, promhttp.HandlerFor(c.reg, promhttp.HandlerOpts{}))
}

// RunChecks runs the health rounds and the member-list checks, after
// WithChecksAfter's delay, until ctx ends.
func (c *Core) RunChecks(ctx context.Context) {
	if !c.waitForChecks(ctx) {
		return
	}
	var checks sync.WaitGroup
	checks.Go(func() { c.checker.Run(ctx) })
	checks.Go(func() { c.watchMembership(ctx) })
	checks.Wait()
}

// waitForChecks waits out WithChecksAfter's delay and reports whether
// the background checks are to run.
func (c *Core) waitForChecks(ctx context.Context) bool {
	if !c.opts.delayChecks {
		return true
	}
	return c.opts.checksAfter >= 0 && ctxsleep.For(ctx, c.opts.checksAfter)
}

// endLeases stops taking acquisitions and ends every held lease, leaving
// its keys to lapse at the valid_until it promised, within ctx.
func (c *Core) endLeases(ctx context.Context) error {
	held := c.leases.Len()
	c.watches.Close()
	err := c.leases.Close(ctx)
	c.log.Info("shutting down", "leases_ended", held, "err", err)
	return err
}

// Close ends every lease within the shutdown timeout and closes the
// connections to the masters it opened: the end of a core run in process (a
// Sidecar's Run ends its leases itself). It is safe to call more than
// once.
func (c *Core) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.ShutdownTimeout)
	defer cancel()
	err := c.endLeases(ctx)
	c.closeNodes()
	return err
}

// closeNodes closes the masters the sidecar connected to (not WithNodes').
func (c *Core) closeNodes() {
	if c.opts.nodes != nil {
		return
	}
	c.closeOnce.Do(func() { closeNodes(c.nodes) })
}
