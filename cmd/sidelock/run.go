package main

import (
	"github.com/sidelock/sidelock/internal/config"

	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/lmittmann/tint"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/sidelock/sidelock/httpapi"
	"github.com/sidelock/sidelock/internal/health"
	"github.com/sidelock/sidelock/internal/lease"
	"github.com/sidelock/sidelock/internal/metrics"
	"github.com/sidelock/sidelock/pkg/redlock"
	"github.com/sidelock/sidelock/pkg/redlock/memnode"
	"github.com/sidelock/sidelock/pkg/redlock/redisnode"
)

// run is the whole program; main only supplies the process's context,
// arguments, environment and streams.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	dev := fs.Bool("dev", false, "run with 3 in-memory masters (same as SIDELOCK_DEV=true)")
	showVersion := fs.Bool("version", false, "print the version and exit")
	fs.Usage = func() { usage(fs, stderr) }
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if *showVersion {
		fmt.Fprintln(stdout, "sidelock", version)
		return nil
	}
	switch sub := fs.Arg(0); sub {
	case "", "serve":
	case "exec":
		return runExec(ctx, fs.Args()[1:], getenv, stdout, stderr)
	case execGuardCommand: // hidden: runs an exec's command (exec_guard.go)
		return runExecGuard(fs.Args()[1:])
	case "injector":
		return runInjector(ctx, fs.Args()[1:], getenv, stdout, stderr)
	default:
		return fmt.Errorf("unknown command %q (commands: serve, exec, injector)", sub)
	}
	cfg, err := config.Load()
	if err != nil {
		return err
	}
	cfg.Dev = cfg.Dev || *dev
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("invalid configuration:\n%w", err)
	}
	return serve(ctx, cfg, getenv, stdout, stderr)
}

func usage(fs *flag.FlagSet, w io.Writer) {
	fmt.Fprintf(w, "usage: sidelock [-dev] [serve]\n       sidelock exec [flags] NAME -- COMMAND [ARGS...]   (sidelock exec -h)\n       sidelock injector [flags]   (sidelock injector -h)\n\nflags:\n")
	fs.PrintDefaults()
	fmt.Fprintf(w, "\nconfiguration (environment):\n")
	_ = config.Usage(w)
}

// serve runs the sidecar until ctx ends, then ends every held lease.
func serve(ctx context.Context, cfg config.Config, getenv func(string) string, stdout, stderr io.Writer) error {
	log := newLogger(cfg, getenv, stderr)
	redis.SetLogger(redisLogger{log}) // go-redis logs globally; route it through slog
	current, previous, err := cfg.Groups()
	if err != nil {
		return err
	}
	if err := checkConnBudget(cfg.MaxConns, cfg.RedisMaxConns, countMasters(cfg, config.UnionGroups(current, previous)), openFileLimit()); err != nil {
		return err
	}
	groups, err := buildGroups(cfg, config.UnionGroups(current, previous))
	defer closeGroups(groups)
	if err != nil {
		return err
	}
	nodes := allNodes(groups)
	if err := checkIndependence(ctx, nodes, log); err != nil {
		return err
	}
	locker, err := newLocker(groups, current, previous)
	if err != nil {
		return err
	}
	checker, err := health.New(nodes, groups[0].locker.Quorum(), health.Config{
		Interval: cfg.HealthInterval, InfoMaxAge: cfg.HealthInfoMaxAge, Timeout: cfg.NodeTimeout, OnChange: logHealthChange(log),
		RestartGuard: cfg.EffectiveRestartGuard(), MastersPersistent: cfg.MastersPersistent, Fencing: cfg.Fencing,
		SetEligible: setEligible(groups), Logger: log,
		Groups: healthGroups(groups), ReadyPolicy: health.ReadyPolicy(cfg.ReadyPolicy),
	})
	if err != nil {
		return err
	}
	// Two rounds before any listener opens: until the guards have judged
	// the masters, none counts towards a quorum, and a verdict holds only
	// over the connections a master had when it was observed, which the
	// first round is the one to open.
	checker.Check(ctx)
	checker.Check(ctx)
	reg := prometheus.NewRegistry()
	var leases *lease.Manager
	m := metrics.New(reg, metrics.Sources{
		LocksHeld: func() int { return leases.Len() }, Waiters: func() int { return leases.Waiters() }, Health: checker.Report,
		Masters: masterStats(nodes),
	})
	observeQueueWaits(nodes, m)
	if err := checkMembership(ctx, cfg, groups, log); err != nil {
		return err
	}
	leases, err = lease.NewManager(locker, lease.Config{
		KeyPrefix: cfg.KeyPrefix, KeyTTL: cfg.KeyTTL, DefaultTTL: cfg.DefaultTTL,
		MaxTTL: cfg.MaxTTL, MaxWait: cfg.MaxWait, MaxHold: cfg.MaxHold, MaxLocks: cfg.MaxLocks, MaxWaiters: cfg.MaxWaiters, MaxWaitersPerName: cfg.MaxWaitersPerName,
		NoQuorumRetry: cfg.NoQuorumRetry, QuorumUp: func() bool { return checker.Report().Ready }, Observer: m, Logger: log,
	})
	if err != nil {
		return err
	}

	lns, err := listen(cfg, reg)
	if err != nil {
		return err
	}
	api := newHTTPServer(httpapi.NewServer(log, leases, m, httpapi.WithAPIToken(cfg.APIToken), httpapi.WithFramingCheck(lns.framing.Ambiguous)), log)
	admin := newHTTPServer(httpapi.NewAdminServer(log, checker, promhttp.HandlerFor(reg, promhttp.HandlerOpts{})), log)
	api.ConnState, admin.ConnState = lns.api.ConnState, lns.admin.ConnState // the caps shed only idle connections

	checkCtx, stopChecks := context.WithCancel(context.WithoutCancel(ctx))
	defer stopChecks()
	go checker.Run(checkCtx)
	go watchMembership(checkCtx, cfg, groups, checker, log)
	serveErr := make(chan error, 2)
	go func() { serveErr <- api.Serve(lns.api) }()
	go func() { serveErr <- admin.Serve(lns.admin) }()

	log.Info("sidelock started", "version", version, "api", lns.api.Addr().String(), "admin", lns.admin.Addr().String(),
		"masters", len(nodes), "groups", len(current), "migrating", len(previous) > 0, "dev", cfg.Dev, "api_token", cfg.APIToken != "")
	if cfg.Dev {
		printQuickStart(stdout, lns.api.Addr().String())
	}

	select {
	case <-ctx.Done():
	case err := <-serveErr:
		log.Error("listener failed", "err", err)
	}
	return shutdown(cfg, log, leases, api, admin)
}

// shutdown stops taking acquisitions, ends every held lease (leaving its
// keys to lapse at the valid_until it promised), then closes the
// listeners, all within the shutdown timeout.
func shutdown(cfg config.Config, log *slog.Logger, leases *lease.Manager, servers ...*http.Server) error {
	ctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	held := leases.Len()
	err := leases.Close(ctx)
	log.Info("shutting down", "leases_ended", held, "err", err)
	for _, s := range servers {
		if e := s.Shutdown(ctx); e != nil {
			s.Close()
		}
	}
	return err
}

// newHTTPServer applies the timeouts both listeners share. Clients are on
// loopback, where a request's headers take microseconds: a connection
// that has not sent them within ReadHeaderTimeout, or sits idle past
// IdleTimeout, only holds a descriptor, buffers and a goroutine (and a
// place under SIDELOCK_MAX_CONNS), and reconnecting costs a client ~50µs.
func newHTTPServer(h http.Handler, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 2 * time.Second,
		ReadTimeout:       30 * time.Second,
		IdleTimeout:       30 * time.Second,
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
}

// buildNodes connects to the masters (in-memory ones in dev mode). A node
// is given the master's host:port alone, as that is what it shows in
// health reports and metric labels; its credentials go to AUTH only.
func buildNodes(cfg config.Config, masters []config.MasterAddr) ([]redlock.Node, error) {
	if cfg.Dev {
		nodes := make([]redlock.Node, config.DevMasters)
		for i := range nodes {
			nodes[i] = memnode.New(fmt.Sprintf("memory-%d", i+1))
		}
		return nodes, nil
	}
	tlsCfg, err := cfg.TLSConfig()
	if err != nil {
		return nil, err
	}
	nodes := make([]redlock.Node, len(masters))
	for i, m := range masters {
		username, password := m.Credentials(cfg)
		nodes[i] = redisnode.New(redisnode.Options{
			Addr: m.String(), Username: username, Password: password, TLS: tlsCfg,
			MaxConns: cfg.RedisMaxConns,
		})
	}
	return nodes, nil
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

func newLogger(cfg config.Config, getenv func(string) string, w io.Writer) *slog.Logger {
	level, _ := config.ParseLevel(cfg.LogLevel) // validated already
	if cfg.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level}))
	}
	return slog.New(tint.NewTextHandler(w, &tint.Options{Level: level, TimeFormat: time.TimeOnly, NoColor: !colourful(w, getenv)}))
}

// colourful is true for a terminal, unless NO_COLOR is set.
func colourful(w io.Writer, getenv func(string) string) bool {
	if getenv("NO_COLOR") != "" {
		return false
	}
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func printQuickStart(w io.Writer, apiAddr string) {
	base := "http://" + apiAddr
	fmt.Fprintf(w, "sidelock dev mode: 3 in-memory masters, lock API on %s. Try:\n", base)
	fmt.Fprintf(w, "  curl -s -X POST '%s/locks/demo?ttl=30s'\n", base)
	fmt.Fprintf(w, "  curl -i -X DELETE -H 'Lock-Token: <token from above>' %s/locks/demo\n", base)
}

// redisLogger sends go-redis's own messages (failed dials, pool events) to
// slog at debug level: the health checker already reports masters that are
// down, once per round, at the right level.
type redisLogger struct{ log *slog.Logger }

func (l redisLogger) Printf(ctx context.Context, format string, v ...any) {
	l.log.DebugContext(ctx, fmt.Sprintf(format, v...), "component", "go-redis")
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
