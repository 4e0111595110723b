package scale

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sidelock/sidelock/httpapi"
	"github.com/sidelock/sidelock/internal/health"
	"github.com/sidelock/sidelock/internal/lease"
	"github.com/sidelock/sidelock/internal/metrics"
	"github.com/sidelock/sidelock/internal/shard"
	"github.com/sidelock/sidelock/pkg/redlock"
	"github.com/sidelock/sidelock/pkg/redlock/redisnode"
)

// SidecarConfig sets what a simulated sidecar may differ in from the
// shipped defaults. Zero values take the defaults of cmd/sidelock.
type SidecarConfig struct {
	KeyPrefix string
	// KeyTTL is SIDELOCK_KEY_TTL (default 10s): held keys renew every third.
	KeyTTL time.Duration
	// HealthInterval is SIDELOCK_HEALTH_INTERVAL (default 1s); negative
	// runs no health checker at all.
	HealthInterval time.Duration
	// HealthInfoMaxAge is SIDELOCK_HEALTH_INFO_MAX_AGE (default 10s):
	// rounds within it only ping; negative reads the server info every
	// round.
	HealthInfoMaxAge time.Duration
	// FirstCheckAfter delays the first health round, so that sidecars
	// started together check at different moments, like pods that did not
	// start in the same millisecond.
	FirstCheckAfter time.Duration
	// NodeTimeout bounds each call to a master. The shipped 50 ms is for
	// a real network; a simulation that packs hundreds of sidecars on two
	// cores sets more, so that its own CPU queue shows as latency rather
	// than as failed calls.
	NodeTimeout time.Duration
	// Renewals, if set, counts the background renewals.
	Renewals *RenewalCounter
}

// Sidecar is one sidecar stack in-process, assembled as cmd/sidelock's
// serve does: its own Redis connections (one redisnode.Node per master of
// every group), Redlock with fencing (a shard.Router over the groups'
// Lockers when there are several), the health checker,
// the lease manager with its renewer, the Prometheus metrics, and the lock
// API on its own loopback listener. Left out: the start-up independence
// check (once per pod) and the admin listener (nothing scrapes it here).
type Sidecar struct {
	Addr    string         // the lock API's "127.0.0.1:port"
	Nodes   []redlock.Node // every group's masters, group after group
	Manager *lease.Manager

	server     *http.Server
	stopChecks context.CancelFunc
	checks     sync.WaitGroup
}

// StartSidecar starts a sidecar over one group of masters at addrs.
func StartSidecar(addrs []string, cfg SidecarConfig) (*Sidecar, error) {
	return StartSidecarGroups([][]string{addrs}, cfg)
}

// StartSidecarGroups starts a sidecar over quorum groups of masters, wired
// as cmd/sidelock's buildGroups, newLocker, healthGroups and setEligible
// do: one fenced Locker per group, a shard.Router over them when there is
// more than one, and one health checker over every master of every group
// (listed group after group).
func StartSidecarGroups(groups [][]string, cfg SidecarConfig) (*Sidecar, error) {
	cfg = cfg.withDefaults()
	s := &Sidecar{}
	lockers := make([]*redlock.Locker, len(groups))
	for g, addrs := range groups {
		nodes := make([]redlock.Node, len(addrs))
		for i, a := range addrs {
			nodes[i] = redisnode.New(redisnode.Options{Addr: a})
		}
		s.Nodes = append(s.Nodes, nodes...)
		l, err := redlock.New(nodes, redlock.Config{NodeTimeout: cfg.NodeTimeout, Fencing: true})
		if err != nil {
			s.closeNodes()
			return nil, err
		}
		lockers[g] = l
	}
	var locker lease.Locker = lockers[0]
	var healthGroups []health.Group
	if len(groups) > 1 {
		shardGroups := make([]shard.Group, len(groups))
		healthGroups = make([]health.Group, len(groups))
		for g, l := range lockers {
			name := fmt.Sprintf("g%d", g)
			shardGroups[g] = shard.Group{Name: name, Locker: l}
			healthGroups[g] = health.Group{Name: name, Size: len(groups[g]), Quorum: l.Quorum()}
		}
		router, err := shard.New(shardGroups, nil)
		if err != nil {
			s.closeNodes()
			return nil, err
		}
		locker = router
	}
	setEligible := func(i int, e redlock.Eligibility) {
		for g, l := range lockers {
			if i < len(groups[g]) {
				l.SetEligibility(i, e)
				return
			}
			i -= len(groups[g])
		}
	}
	var checker *health.Checker
	if cfg.HealthInterval > 0 {
		// No restart guard: the simulation's masters are fresh and would
		// sit out the probation. The rounds cost the same with it.
		var err error
		checker, err = health.New(s.Nodes, lockers[0].Quorum(), health.Config{
			Interval: cfg.HealthInterval, InfoMaxAge: max(cfg.HealthInfoMaxAge, 0), Timeout: cfg.NodeTimeout, Fencing: true, SetEligible: setEligible,
			Groups: healthGroups,
		})
		if err != nil {
			s.closeNodes()
			return nil, err
		}
	}
	m := metrics.New(prometheus.NewRegistry(), metrics.Sources{
		LocksHeld: func() int { return s.Manager.Len() }, Waiters: func() int { return s.Manager.Waiters() }, Health: reportOf(checker),
		Masters: s.masterStats,
	})
	for _, n := range s.Nodes {
		n.(*redisnode.Node).SetOnQueueWait(m.ObserveQueueWait(n.Addr()))
	}
	var obs lease.Observer = m
	if cfg.Renewals != nil {
		obs = countingObserver{Metrics: m, renewals: cfg.Renewals}
	}
	var err error
	s.Manager, err = lease.NewManager(locker, lease.Config{
		KeyPrefix: cfg.KeyPrefix, KeyTTL: cfg.KeyTTL, DefaultTTL: 30 * time.Second, MaxTTL: time.Hour, MaxWait: 5 * time.Minute,
		MaxHold: 24 * time.Hour, Observer: obs,
	})
	if err != nil {
		s.closeNodes()
		return nil, err
	}
	if err := s.serve(m); err != nil {
		_ = s.Manager.Close(context.Background())
		s.closeNodes()
		return nil, err
	}
	s.startChecks(checker, cfg.FirstCheckAfter)
	return s, nil
}

func (c SidecarConfig) withDefaults() SidecarConfig {
	if c.KeyPrefix == "" {
		c.KeyPrefix = "sidelock:"
	}
	if c.KeyTTL == 0 {
		c.KeyTTL = 10 * time.Second
	}
	if c.HealthInterval == 0 {
		c.HealthInterval = time.Second
	}
	if c.HealthInfoMaxAge == 0 {
		c.HealthInfoMaxAge = 10 * time.Second
	}
	if c.NodeTimeout == 0 {
		c.NodeTimeout = 50 * time.Millisecond
	}
	return c
}

// masterStats is cmd/sidelock's source of the per-master metrics (read
// only when scraped, which the simulation does not do).
func (s *Sidecar) masterStats() []metrics.MasterStats {
	out := make([]metrics.MasterStats, 0, len(s.Nodes))
	for _, n := range s.Nodes {
		st := n.(*redisnode.Node).Stats()
		out = append(out, metrics.MasterStats{
			Addr: n.Addr(), CommandConns: st.CommandConns, Subscriptions: st.Subscriptions,
			InFlightPipelines: st.InFlightPipelines, QueuedCalls: st.QueuedCalls, Calls: st.Calls, Batches: st.Batches,
		})
	}
	return out
}

func reportOf(c *health.Checker) func() health.Report {
	if c == nil {
		return func() health.Report { return health.Report{} }
	}
	return c.Report
}

// serve opens the lock API on a loopback port, with cmd/sidelock's
// server timeouts.
func (s *Sidecar) serve(obs httpapi.RequestObserver) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	s.Addr = ln.Addr().String()
	s.server = &http.Server{
		Handler:           httpapi.NewServer(slog.New(slog.DiscardHandler), s.Manager, obs),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    16 << 10,
	}
	go func() { _ = s.server.Serve(ln) }() // ends with ErrServerClosed at Close
	return nil
}

func (s *Sidecar) startChecks(checker *health.Checker, after time.Duration) {
	ctx, cancel := context.WithCancel(context.Background())
	s.stopChecks = cancel
	if checker == nil {
		return
	}
	s.checks.Go(func() {
		select {
		case <-time.After(after):
			checker.Run(ctx)
		case <-ctx.Done():
		}
	})
}

// Close ends every held lease (as on SIGTERM), then
// stops the health checks and the listener and closes the connections.
func (s *Sidecar) Close(ctx context.Context) error {
	err := s.Manager.Close(ctx)
	s.stopChecks()
	s.checks.Wait()
	err = errors.Join(err, s.server.Shutdown(ctx))
	s.closeNodes()
	return err
}

func (s *Sidecar) closeNodes() {
	for _, n := range s.Nodes {
		_ = n.Close()
	}
}

// RenewalCounter counts successful background renewals of many sidecars.
type RenewalCounter struct{ atomic.Int64 }

// countingObserver is the sidecar's metrics observer that also counts
// renewals for the simulation's report.
type countingObserver struct {
	*metrics.Metrics
	renewals *RenewalCounter
}

func (o countingObserver) Renewal(ok bool) {
	o.Metrics.Renewal(ok)
	if ok {
		o.renewals.Add(1)
	}
}
