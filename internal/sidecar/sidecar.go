// Package sidecar assembles one sidelock sidecar from its configuration:
// the quorum groups' masters (redisnode, or memnode in dev mode), one
// Redlock Locker per group and a shard.Router over them when there are
// several, the health checker that records its verdicts on each group's
// Locker, the lease manager, the Prometheus metrics, the lock API and
// admin listeners under their connection caps, and the member-list checks
// (package membership). cmd/sidelock runs one per process; the scale
// simulation (tools/scale) runs hundreds in one process, built the same
// way. Assemble builds the same sidecar without its listeners (a Core),
// over masters the caller may give: the in-process assembly of the tests,
// the benchmarks and the examples (package inprocess).
package sidecar

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/sidelock/sidelock/httpapi"
	"github.com/sidelock/sidelock/internal/config"
	"github.com/sidelock/sidelock/internal/health"
	"github.com/sidelock/sidelock/internal/lease"
	"github.com/sidelock/sidelock/internal/metrics"
	"github.com/sidelock/sidelock/pkg/redlock"
	"github.com/sidelock/sidelock/pkg/redlock/redisnode"
)

// Sidecar is one assembled sidecar serving on its listeners. New builds
// it and opens its listeners, Run serves until its context ends and then
// shuts down, and Close releases what New opened.
type Sidecar struct {
	*Core
	lns   listeners
	api   *http.Server
	admin *http.Server

	closeOnce sync.Once
}

// Option varies what New builds, for callers other than cmd/sidelock.
type Option func(*options)

type options struct {
	log            *slog.Logger
	version        string
	noRestartGuard bool
	checksAfter    time.Duration
	delayChecks    bool
	observer       func(lease.Observer) lease.Observer
	nodes          []redlock.Node // the one group's masters (WithNodes)
	healthChanged  func(prev, cur health.Report)
	tuneLeases     func(*lease.Config)
	watchPoll      time.Duration
	redlockNow     func() time.Time // the Lockers' clock (WithRedlockClock)
}

// WithLogger sets the logger (default: discard).
func WithLogger(log *slog.Logger) Option { return func(o *options) { o.log = log } }

// WithVersion sets the version the start-up line logs and
// sidelock_build_info carries (default "unknown").
func WithVersion(v string) Option { return func(o *options) { o.version = v } }

// WithoutRestartGuard counts every master from the start, as dev mode
// does: for masters known to have just started and to stay up (a
// simulation's), which the restart probation would keep out for a key
// ttl. Never for a sidecar whose masters may restart behind its back.
func WithoutRestartGuard() Option { return func(o *options) { o.noRestartGuard = true } }

// WithChecksAfter starts the background checks (the health rounds and
// the member-list checks) d after Run begins, never if d is negative, and
// runs no health round before New returns: for many sidecars started
// together in one process, which would otherwise check the masters in
// step, as pods started at different moments do not. With a restart
// guard no master counts until the first round, so use it
// WithoutRestartGuard.
func WithChecksAfter(d time.Duration) Option {
	return func(o *options) { o.delayChecks, o.checksAfter = true, d }
}

// WithLeaseObserver wraps the lease manager's observer (the metrics), to
// watch its events too.
func WithLeaseObserver(wrap func(lease.Observer) lease.Observer) Option {
	return func(o *options) { o.observer = wrap }
}

// New connects to the masters of cfg's groups and assembles the sidecar
// (Assemble), which then listens on cfg.ListenAddr and cfg.AdminAddr; cfg
// must have passed Validate. It refuses to start on masters that are not
// independent, on a group whose member list is split, and on
// SIDELOCK_MAX_CONNS beyond the open-file limit. Unless
// WithChecksAfter says otherwise, the masters have been judged by two
// health rounds when it returns. ctx bounds the start-up only.
func New(ctx context.Context, cfg config.Config, opts ...Option) (_ *Sidecar, err error) {
	current, previous, err := groupSpecs(cfg, opts)
	if err != nil {
		return nil, err
	}
	all := config.UnionGroups(current, previous)
	if err := checkConnBudget(cfg.MaxConns, cfg.RedisMaxConns, countMasters(cfg, all), openFileLimit()); err != nil {
		return nil, err
	}
	core, err := Assemble(ctx, cfg, opts...)
	if err != nil {
		return nil, err
	}
	s := &Sidecar{Core: core}
	if s.lns, err = listen(cfg, core.reg); err != nil {
		_ = core.leases.Close(context.Background()) // holds nothing yet
		s.Close()
		return nil, err
	}
	s.api = NewHTTPServer(core.Handler(httpapi.WithAPIToken(cfg.APIToken), httpapi.WithFramingCheck(s.lns.framing.Ambiguous)), s.log)
	s.admin = NewHTTPServer(core.AdminHandler(), s.log)
	s.api.ConnState, s.admin.ConnState = s.lns.api.ConnState, s.lns.admin.ConnState // the caps shed only idle connections
	return s, nil
}

// logStartReadiness says what New's health rounds found when it is not
// ready: the rounds log only changes (logHealthChange), and a sidecar
// that starts with its masters down has none, so without this it would
// say nothing while every acquisition answers 503.
func logStartReadiness(log *slog.Logger, r health.Report) {
	if r.Ready {
		return
	}
	for _, n := range r.Nodes {
		switch {
		case !n.Up:
			log.Warn("master down", "master", n.Addr, "err", n.Error)
		case !n.Eligible:
			log.Warn("master kept out of quorums", "master", n.Addr, "problem", n.Problem)
		}
	}
	attrs := []any{"up", r.Up, "eligible", r.Eligible, "masters", len(r.Nodes)}
	if len(r.Groups) > 0 {
		attrs = append(attrs, "ready_policy", string(r.ReadyPolicy), "groups", groupsReady(r.Groups))
	} else {
		attrs = append(attrs, "quorum", r.Quorum)
	}
	log.Warn("not ready at start-up: no quorum of masters may be counted on; acquisitions answer 503 until one is", attrs...)
}

// groupsReady lists the groups as name=ready pairs, for a log line.
func groupsReady(groups []health.GroupState) string {
	parts := make([]string, len(groups))
	for i, g := range groups {
		parts[i] = fmt.Sprintf("%s=%t", g.Name, g.Ready)
	}
	return strings.Join(parts, ",")
}

// APIAddr is the lock API listener's address (host:port).
func (s *Sidecar) APIAddr() string { return s.lns.api.Addr().String() }

// AdminAddr is the admin listener's address (host:port).
func (s *Sidecar) AdminAddr() string { return s.lns.admin.Addr().String() }

// Run serves the lock API and the admin endpoints, with the health rounds
// and the member-list checks in the background, until ctx ends or a
// listener fails; then it shuts down (see shutdown) and returns. Call it
// once, then Close.
func (s *Sidecar) Run(ctx context.Context) error {
	// The background checks go on while the shutdown ends the leases.
	checkCtx, stopChecks := context.WithCancel(context.WithoutCancel(ctx))
	var checks sync.WaitGroup
	defer func() {
		stopChecks()
		checks.Wait()
	}()
	checks.Go(func() { s.RunChecks(checkCtx) })
	serveErr := make(chan error, 2)
	go func() { serveErr <- s.api.Serve(s.lns.api) }()
	go func() { serveErr <- s.admin.Serve(s.lns.admin) }()

	s.log.Info("sidelock started", "version", s.opts.version, "api", s.APIAddr(), "admin", s.AdminAddr(),
		"masters", len(s.nodes), "groups", len(s.current), "migrating", len(s.previous) > 0, "dev", s.cfg.Dev, "api_token", s.cfg.APIToken != "")

	select {
	case <-ctx.Done():
	case err := <-serveErr:
		s.log.Error("listener failed", "err", err)
	}
	return s.shutdown()
}

// shutdown stops taking acquisitions, ends every held lease (leaving its
// keys to lapse at the valid_until it promised), then closes the
// listeners, all within the shutdown timeout.
func (s *Sidecar) shutdown() error {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	defer cancel()
	err := s.endLeases(ctx)
	for _, srv := range []*http.Server{s.api, s.admin} {
		if e := srv.Shutdown(ctx); e != nil {
			srv.Close()
		}
	}
	return err
}

// Close closes the listeners (if Run did not) and the connections to the
// masters. It is safe to call more than once.
func (s *Sidecar) Close() {
	s.closeOnce.Do(func() {
		s.lns.close()
		s.closeNodes()
	})
}

// NewHTTPServer applies the timeouts both listeners share. Clients are on
// loopback, where a request's headers take microseconds: a connection
// that has not sent them within ReadHeaderTimeout, or sits idle past
// IdleTimeout, only holds a descriptor, buffers and a goroutine (and a
// place under SIDELOCK_MAX_CONNS), and reconnecting costs a client ~50µs.
func NewHTTPServer(h http.Handler, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 2 * time.Second,
		ReadTimeout:       30 * time.Second,
		IdleTimeout:       30 * time.Second,
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
}

// masterStats reads each Redis master's connections and pipelining for the
// metrics at scrape time; in-memory masters have none.
func masterStats(nodes []redlock.Node) func() []metrics.MasterStats {
	return func() []metrics.MasterStats {
		var out []metrics.MasterStats
		for _, n := range nodes {
			if rn, ok := n.(*redisnode.Node); ok {
				s := rn.Stats()
				out = append(out, metrics.MasterStats{
					Addr: rn.Addr(), CommandConns: s.CommandConns, Subscriptions: s.Subscriptions,
					InFlightPipelines: s.InFlightPipelines, QueuedCalls: s.QueuedCalls, Calls: s.Calls, Batches: s.Batches,
				})
			}
		}
		return out
	}
}

// observeQueueWaits feeds each Redis master's queue waits into its
// histogram. The nodes are built before the metrics, which read the health
// checker built on them, so the observer is set afterwards; no lock call
// has been made yet (start-up and health checks do not queue).
func observeQueueWaits(nodes []redlock.Node, m *metrics.Metrics) {
	for _, n := range nodes {
		if rn, ok := n.(*redisnode.Node); ok {
			rn.SetOnQueueWait(m.ObserveQueueWait(rn.Addr()))
		}
	}
}

// independenceTimeout bounds the start-up check of the masters' identities.
// A master that has not answered by then is not a reason to refuse: the
// health rounds check it once it answers.
const independenceTimeout = 2 * time.Second

// checkIndependence refuses to start on masters that are definitely not
// independent (two addresses of one server, a replica): Redlock would count
// one server twice, or a replica's borrowed keys. Masters that do not
// answer are logged and checked later by the health rounds.
func checkIndependence(ctx context.Context, nodes []redlock.Node, log *slog.Logger) error {
	ctx, cancel := context.WithTimeout(ctx, independenceTimeout)
	defer cancel()
	unchecked, err := health.CheckIndependence(ctx, nodes)
	for _, e := range unchecked {
		log.Warn("master not checked at start-up; the health rounds check it once it answers", "err", e)
	}
	if err != nil {
		return fmt.Errorf("refusing to start: the masters in SIDELOCK_REDIS_ADDRS are not independent, so a lock could be granted twice:\n  - %s",
			strings.ReplaceAll(err.Error(), "\n", "\n  - "))
	}
	return nil
}

// logHealthChange logs masters going down or up and the quorum changing.
func logHealthChange(log *slog.Logger) func(prev, cur health.Report) {
	return func(prev, cur health.Report) {
		for i, n := range cur.Nodes {
			switch {
			case prev.Nodes[i].Up && !n.Up:
				log.Warn("master down", "master", n.Addr, "err", n.Error)
			case !prev.Nodes[i].Up && n.Up:
				log.Info("master up", "master", n.Addr)
			}
		}
		if prev.Ready != cur.Ready {
			level := slog.LevelInfo
			if !cur.Ready {
				level = slog.LevelError
			}
			log.Log(context.Background(), level, "quorum changed", "ready", cur.Ready, "up", cur.Up, "eligible", cur.Eligible, "quorum", cur.Quorum)
		}
	}
}
