package scale

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sidelock/sidelock/internal/config"
	"github.com/sidelock/sidelock/internal/lease"
	"github.com/sidelock/sidelock/internal/sidecar"
)

// SidecarConfig sets what a simulated sidecar may differ in from the
// shipped defaults. Zero values take the defaults (config.Load, so a
// SIDELOCK_* variable in the environment applies too).
type SidecarConfig struct {
	KeyPrefix string
	// KeyTTL is SIDELOCK_KEY_TTL (default 10s): held keys renew every third.
	KeyTTL time.Duration
	// HealthInterval is SIDELOCK_HEALTH_INTERVAL (default 1s); negative
	// runs no health round (nor member-list check) at all.
	HealthInterval time.Duration
	// HealthInfoMaxAge is SIDELOCK_HEALTH_INFO_MAX_AGE (default 10s):
	// rounds within it only ping; negative reads the server info every
	// round.
	HealthInfoMaxAge time.Duration
	// FirstCheckAfter delays the first health round and the member-list
	// checks, so that sidecars started together check at different
	// moments, like pods that did not start in the same millisecond.
	FirstCheckAfter time.Duration
	// NodeTimeout bounds each call to a master. The shipped 50 ms is for
	// a real network; a simulation that packs hundreds of sidecars on two
	// cores sets more, so that its own CPU queue shows as latency rather
	// than as failed calls.
	NodeTimeout time.Duration
	// Renewals, if set, counts the background renewals.
	Renewals *RenewalCounter
}

// Sidecar is one sidecar in-process, assembled by package sidecar exactly
// as cmd/sidelock assembles it (its own connections to every master of
// every group, the start-up checks, Redlock with fencing, the health
// checker, the lease manager, the metrics, the member-list checks, and the
// lock API and admin listeners on loopback ports), except that it counts
// the masters at once, which are fresh and would sit out the restart
// probation (the rounds cost the same with it), and that its health rounds
// and member-list checks start after FirstCheckAfter (its first health
// round then, not before it serves).
type Sidecar struct {
	Addr string // the lock API's "127.0.0.1:port"

	sidecar *sidecar.Sidecar
	stop    context.CancelFunc
	done    chan error // Run's result
}

// StartSidecar starts a sidecar over one group of masters at addrs.
func StartSidecar(addrs []string, cfg SidecarConfig) (*Sidecar, error) {
	return StartSidecarGroups([][]string{addrs}, cfg)
}

// StartSidecarGroups starts a sidecar over quorum groups of masters, named
// g0, g1, ... (SIDELOCK_REDIS_GROUPS) when there are several.
func StartSidecarGroups(groups [][]string, cfg SidecarConfig) (*Sidecar, error) {
	c, err := cfg.config(groups)
	if err != nil {
		return nil, err
	}
	first := cfg.FirstCheckAfter
	if cfg.HealthInterval < 0 {
		first = -1 // no checks
	}
	opts := []sidecar.Option{sidecar.WithoutRestartGuard(), sidecar.WithChecksAfter(first)}
	if cfg.Renewals != nil {
		opts = append(opts, sidecar.WithLeaseObserver(func(o lease.Observer) lease.Observer {
			return countingObserver{Observer: o, renewals: cfg.Renewals}
		}))
	}
	sc, err := sidecar.New(context.Background(), c, opts...)
	if err != nil {
		return nil, err
	}
	ctx, stop := context.WithCancel(context.Background())
	s := &Sidecar{Addr: sc.APIAddr(), sidecar: sc, stop: stop, done: make(chan error, 1)}
	go func() { s.done <- sc.Run(ctx) }()
	return s, nil
}

// config is the sidecar's configuration: the shipped defaults, cfg's
// settings, the groups, and loopback listeners on ports of their own.
func (cfg SidecarConfig) config(groups [][]string) (config.Config, error) {
	c, err := config.Load()
	if err != nil {
		return c, err
	}
	c.Dev, c.RedisAddrs, c.RedisGroups, c.RedisGroupsPrev = false, nil, "", ""
	if len(groups) == 1 {
		c.RedisAddrs = groups[0]
	} else {
		parts := make([]string, len(groups))
		for g, addrs := range groups {
			parts[g] = fmt.Sprintf("g%d=%s", g, strings.Join(addrs, ","))
		}
		c.RedisGroups = strings.Join(parts, ";")
	}
	c.ListenAddr, c.AdminAddr = "127.0.0.1:0", "127.0.0.1:0"
	if cfg.KeyPrefix != "" {
		c.KeyPrefix = cfg.KeyPrefix
	}
	if cfg.KeyTTL != 0 {
		c.KeyTTL = cfg.KeyTTL
	}
	if cfg.HealthInterval > 0 {
		c.HealthInterval = cfg.HealthInterval
	}
	switch {
	case cfg.HealthInfoMaxAge < 0:
		c.HealthInfoMaxAge = 0 // every round
	case cfg.HealthInfoMaxAge > 0:
		c.HealthInfoMaxAge = cfg.HealthInfoMaxAge
	}
	if cfg.NodeTimeout != 0 {
		c.NodeTimeout = cfg.NodeTimeout
	}
	if err := c.Validate(); err != nil {
		return c, fmt.Errorf("simulated sidecar: %w", err)
	}
	return c, nil
}

// Close ends every held lease (as on SIGTERM, within the shipped shutdown
// timeout), then stops the health checks and the listeners and closes
// the connections. ctx bounds the wait.
func (s *Sidecar) Close(ctx context.Context) error {
	s.stop()
	defer s.sidecar.Close()
	select {
	case err := <-s.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// RenewalCounter counts successful background renewals of many sidecars.
type RenewalCounter struct{ atomic.Int64 }

// countingObserver is the sidecar's lease observer (its metrics) that also
// counts renewals for the simulation's report.
type countingObserver struct {
	lease.Observer
	renewals *RenewalCounter
}

func (o countingObserver) Renewal(ok bool) {
	o.Observer.Renewal(ok)
	if ok {
		o.renewals.Add(1)
	}
}
