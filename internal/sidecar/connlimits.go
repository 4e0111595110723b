package sidecar

import (
	"fmt"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sidelock/sidelock/internal/config"
	"github.com/sidelock/sidelock/internal/connlimit"
	"github.com/sidelock/sidelock/internal/framing"
	"github.com/sidelock/sidelock/internal/metrics"
)

// The descriptor budget. The lock API's connections (SIDELOCK_MAX_CONNS)
// get what RLIMIT_NOFILE leaves after everything else the process must
// always be able to open, so that a flood of lock API connections can
// never starve the masters' connections or the admin listener (whose
// /healthz failing would make the kubelet restart the sidecar and drop
// every lock).
const (
	// adminMaxConns caps the admin listener: the kubelet's probes (a
	// connection each) and a few scrapers. Idle and silent connections
	// are shed first, so a scraper keeping one alive never blocks a probe.
	adminMaxConns = 32
	// maxLingering bounds, per listener, the refused connections held
	// open while their 429 answer drains (connlimit.Config.MaxLingering).
	maxLingering = 32
	// lingerTimeout bounds how long one refused connection is held.
	lingerTimeout = 500 * time.Millisecond
	// fdFixed: stdin/out/err, the two listeners, the runtime's epoll and
	// wake-up descriptors, the process collector's /proc reads and TLS
	// files read at start-up, with room to spare.
	fdFixed = 16
	// fdPerMasterExtra: besides SIDELOCK_REDIS_MAX_CONNS command
	// connections, the Pub/Sub connection and one redial in flight.
	fdPerMasterExtra = 2
	// fdSlack covers what is not counted above (a second redial, a
	// connection the kernel has not finished closing).
	fdSlack = 64
)

// FDReserve is how many descriptors a sidecar keeps out of the lock API's
// reach, for masters Redis masters with redisMaxConns command connections
// each (SIDELOCK_REDIS_MAX_CONNS): SIDELOCK_MAX_CONNS must fit in
// RLIMIT_NOFILE beside it.
func FDReserve(redisMaxConns, masters int) int {
	return fdFixed + masters*(redisMaxConns+fdPerMasterExtra) + adminMaxConns + 2*maxLingering + fdSlack
}

// checkConnBudget refuses SIDELOCK_MAX_CONNS beyond what nofile (the soft
// RLIMIT_NOFILE, 0 when unknown) leaves after the reserve. Its fixed
// bounds are checked with every other setting (config.validate); this
// depends on the process's limit and the masters, so it runs at start-up.
func checkConnBudget(maxConns, redisMaxConns, masters int, nofile uint64) error {
	if nofile == 0 {
		return nil
	}
	reserve := FDReserve(redisMaxConns, masters)
	if room := int64(nofile) - int64(reserve); int64(maxConns) > room {
		return fmt.Errorf("SIDELOCK_MAX_CONNS %d does not fit the open-file limit: RLIMIT_NOFILE is %d and %d descriptors are kept for "+
			"the %d masters' connections, the admin listener and slack, which leaves %d; lower SIDELOCK_MAX_CONNS or raise the limit (ulimit -n)",
			maxConns, nofile, reserve, masters, max(room, 0))
	}
	return nil
}

// capConns puts a connection cap on ln; refusals name the setting that
// caps it.
// A connection may be shed at the cap once it has been silent since it
// opened for minSilentToShed (a loopback client sends its request within
// milliseconds, even on a loaded machine), or idle since its last answer
// for minIdleToShed (longer than the gap between a busy caller's
// heartbeats, so their keep-alive connections are not taken from under
// them; a flood of silent connections is still shed within a quarter
// second).
const (
	minSilentToShed = 250 * time.Millisecond
	minIdleToShed   = time.Second
)

func capConns(ln net.Listener, maxConns int, setting string) (*connlimit.Listener, error) {
	detail := fmt.Sprintf("the sidecar has %d connections open (%s), every one busy in a request; retry shortly", maxConns, setting)
	return connlimit.New(ln, connlimit.Config{Max: maxConns, MaxLingering: maxLingering, Linger: lingerTimeout,
		MinSilent: minSilentToShed, MinIdle: minIdleToShed, Refusal: connlimit.OverloadResponse(detail, time.Second)})
}

// listenerStats adapts a listener's counts for the metrics.
func listenerStats(l *connlimit.Listener) func() metrics.ListenerStats {
	return func() metrics.ListenerStats {
		s := l.Stats()
		return metrics.ListenerStats{Open: s.Open, Max: s.Max, Refused: s.Refused, ShedNew: s.ShedNew, ShedIdle: s.ShedIdle}
	}
}

// countMasters is how many Redis masters the sidecar connects to (none in
// dev mode, whose masters are in memory).
func countMasters(cfg config.Config, groups []config.GroupSpec) int {
	if cfg.Dev {
		return 0
	}
	n := 0
	for _, g := range groups {
		n += len(g.Masters)
	}
	return n
}

// listeners are the sidecar's two listeners; framing watches the lock
// API's connections for requests with ambiguous framing.
type listeners struct {
	api, admin *connlimit.Listener
	framing    *framing.Listener
}

// close closes the listeners that are open.
func (l listeners) close() {
	for _, ln := range []*connlimit.Listener{l.api, l.admin} {
		if ln != nil {
			_ = ln.Close()
		}
	}
}

// listen opens the lock API's listener (TCP or a Unix socket, under the
// same caps and framing watch) under SIDELOCK_MAX_CONNS and the admin
// listener (always TCP, for the kubelet's probes) under its own small cap:
// each has its own descriptors, so neither can starve the other.
func listen(cfg config.Config, reg prometheus.Registerer) (listeners, error) {
	apiLn, err := listenAPI(cfg)
	if err != nil {
		return listeners{}, fmt.Errorf("lock API: %w", err)
	}
	adminLn, err := net.Listen("tcp", cfg.AdminAddr)
	if err != nil {
		apiLn.Close()
		return listeners{}, fmt.Errorf("admin listener: %w", err)
	}
	watched := framing.Watch(apiLn)
	var api, admin *connlimit.Listener
	if api, err = capConns(watched, cfg.MaxConns, "SIDELOCK_MAX_CONNS"); err == nil {
		admin, err = capConns(adminLn, adminMaxConns, "the admin listener's cap")
	}
	if err == nil {
		err = metrics.RegisterListeners(reg, map[string]func() metrics.ListenerStats{"api": listenerStats(api), "admin": listenerStats(admin)})
	}
	if err != nil {
		apiLn.Close()
		adminLn.Close()
		return listeners{}, err
	}
	return listeners{api: api, admin: admin, framing: watched}, nil
}
