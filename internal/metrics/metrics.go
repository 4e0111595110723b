// Package metrics exports sidelock's Prometheus metrics. It observes the
// lease manager and the HTTP layer through small interfaces and reads the
// held-lock count and master health when scraped. Lock names and tokens are
// never labels.
package metrics

import (
	"runtime"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/sidelock/sidelock/internal/health"
	"github.com/sidelock/sidelock/internal/lease"
)

// Sources are read at scrape time, except Version.
type Sources struct {
	// Version is the build's version (cmd/sidelock's main.version), the
	// version label of sidelock_build_info.
	Version   string
	LocksHeld func() int
	Waiters   func() int
	// WatchStreams counts the open watch streams (nil: none are served).
	WatchStreams func() int
	Health       func() health.Report
	Masters      func() []MasterStats // per Redis master; nil when there are none
}

// Metrics implements lease.Observer and the HTTP request observer.
type Metrics struct {
	acquire   *prometheus.HistogramVec
	wait      *prometheus.HistogramVec
	wakeups   *prometheus.CounterVec
	renewals  *prometheus.CounterVec
	ended     *prometheus.CounterVec
	lost      prometheus.Counter
	overload  prometheus.Counter
	requests  *prometheus.CounterVec
	durations *prometheus.HistogramVec
	masters   *masterConns
}

// latencyBuckets span a loopback round (100µs) to a long wait (10s).
var latencyBuckets = prometheus.ExponentialBucketsRange(0.0001, 10, 16)

// New registers every sidelock metric, plus the Go and process collectors,
// on reg.
func New(reg prometheus.Registerer, src Sources) *Metrics {
	m := &Metrics{
		acquire: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sidelock_acquire_duration_seconds", Help: "Time to answer an acquisition, by outcome: acquired, held, no_quorum, overloaded, invalid, limited (a sidecar limit refused it), error (anything else, such as a caller that went away).", Buckets: latencyBuckets,
		}, []string{"outcome"}),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sidelock_wait_duration_seconds", Help: "Time callers that asked to wait spent waiting for a lock, by outcome: acquired, held (the wait ran out), no_quorum, overloaded, limited (too many waiters), error (anything else, such as a caller that went away).", Buckets: latencyBuckets,
		}, []string{"outcome"}),
		wakeups: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sidelock_wakeups_total", Help: "Wake-ups of a waiting queue's head, by source: pubsub (a master announced a release), local (a lease of this sidecar ended), expiry (the holder's keys could have lapsed), poll (the fallback poll), split (back-off after a split vote), retry (back-off after a round without quorum or refused as overloaded), handover (a releasing caller of this sidecar handed the lock to the waiter).",
		}, []string{"source"}),
		renewals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sidelock_renewals_total", Help: "Renewal rounds of held locks on the masters, the background renewer's and heartbeats', by outcome: ok, failed (not granted by a quorum: retried while the validity lasts, lost at once if another value holds the lock).",
		}, []string{"outcome"}),
		ended: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sidelock_releases_total", Help: "Leases ended, by reason: released (by the caller), expired (the caller stopped extending), lost (the lock could not be kept), max_hold (the lease reached its cap), shutdown (the sidecar stopped). All but shutdown delete the keys on the masters; at shutdown they are left to lapse, not before the valid_until promised.",
		}, []string{"reason"}),
		lost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sidelock_locks_lost_total", Help: "Locks lost: a renewal or heartbeat found the lock held by another value, or no quorum before the validity ran out (sidelock_releases_total{reason=\"lost\"}; max_hold is not counted here).",
		}),
		overload: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sidelock_overloaded_total", Help: "Acquisitions refused with 429 overloaded: this sidecar could not get their round to the masters in time (a burst beyond what it can serve), as opposed to no_quorum (the masters).",
		}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sidelock_http_requests_total", Help: "HTTP requests by route pattern, method and status code.",
		}, []string{"route", "method", "code"}),
		durations: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sidelock_http_request_duration_seconds", Help: "HTTP request latency by route pattern and method.", Buckets: latencyBuckets,
		}, []string{"route", "method"}),
		masters: newMasterConns(src.Masters),
	}
	m.startAtZero()
	reg.MustRegister(buildInfo(src.Version), m.acquire, m.wait, m.wakeups, m.renewals, m.ended, m.lost, m.overload, m.requests, m.durations, m.masters,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sidelock_locks_held", Help: "Leases currently held through this sidecar: locks and semaphores' permits.",
		}, func() float64 { return float64(src.LocksHeld()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sidelock_watch_streams", Help: "Open watch streams (GET /locks/{name}?watch=true) on this sidecar; each watched name costs a read of the masters every second.",
		}, func() float64 {
			if src.WatchStreams == nil {
				return 0
			}
			return float64(src.WatchStreams())
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sidelock_waiters", Help: "Callers currently waiting for a lock on this sidecar.",
		}, func() float64 { return float64(src.Waiters()) }),
		&mastersCollector{report: src.Health},
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return m
}

// The label values of the families whose labels form a closed set: each
// series is exported from start, at 0, so that rate() sees its first
// increase and absent() tells a missing sidecar from a quiet one. They are
// the lease package's constants (TestEveryLabelValueIsListed checks none
// is missing) and what each family's Help lists.
var (
	acquireOutcomes = []lease.Outcome{
		lease.OutcomeAcquired, lease.OutcomeHeld, lease.OutcomeNoQuorum, lease.OutcomeOverloaded,
		lease.OutcomeInvalid, lease.OutcomeLimited, lease.OutcomeError,
	}
	// waitOutcomes lack invalid: a request is checked before it waits.
	waitOutcomes = []lease.Outcome{
		lease.OutcomeAcquired, lease.OutcomeHeld, lease.OutcomeNoQuorum, lease.OutcomeOverloaded,
		lease.OutcomeLimited, lease.OutcomeError,
	}
	wakeSources = []lease.WakeSource{
		lease.WakePubSub, lease.WakeLocal, lease.WakeExpiry, lease.WakePoll, lease.WakeSplit, lease.WakeRetry, lease.WakeHandOver,
	}
	endReasons = []lease.EndReason{
		lease.EndReleased, lease.EndExpired, lease.EndLost, lease.EndMaxHold, lease.EndShutdown,
	}
	renewalOutcomes = []string{renewalOK, renewalFailed}
)

const (
	renewalOK     = "ok"
	renewalFailed = "failed"
)

// startAtZero makes every series of the closed label sets above.
func (m *Metrics) startAtZero() {
	for _, o := range acquireOutcomes {
		m.acquire.WithLabelValues(string(o))
	}
	for _, o := range waitOutcomes {
		m.wait.WithLabelValues(string(o))
	}
	for _, s := range wakeSources {
		m.wakeups.WithLabelValues(string(s))
	}
	for _, r := range endReasons {
		m.ended.WithLabelValues(string(r))
	}
	for _, o := range renewalOutcomes {
		m.renewals.WithLabelValues(o)
	}
}

// buildInfo is sidelock_build_info, 1 with the build's version and Go
// version as labels, for joining onto other series and spotting a fleet
// that runs mixed versions.
func buildInfo(version string) prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "sidelock_build_info",
		Help:        "Always 1; the labels say which build runs: version (the release, or dev) and goversion (the Go toolchain that built it).",
		ConstLabels: prometheus.Labels{"version": version, "goversion": runtime.Version()},
	})
	g.Set(1)
	return g
}

// Acquisition implements lease.Observer.
func (m *Metrics) Acquisition(o lease.Outcome, elapsed time.Duration) {
	m.acquire.WithLabelValues(string(o)).Observe(elapsed.Seconds())
	if o == lease.OutcomeOverloaded {
		m.overload.Inc()
	}
}

// Waited implements lease.Observer.
func (m *Metrics) Waited(o lease.Outcome, elapsed time.Duration) {
	m.wait.WithLabelValues(string(o)).Observe(elapsed.Seconds())
}

// Wakeup implements lease.Observer.
func (m *Metrics) Wakeup(src lease.WakeSource) {
	m.wakeups.WithLabelValues(string(src)).Inc()
}

// Renewal implements lease.Observer.
func (m *Metrics) Renewal(ok bool) {
	outcome := renewalFailed
	if ok {
		outcome = renewalOK
	}
	m.renewals.WithLabelValues(outcome).Inc()
}

// Ended implements lease.Observer.
func (m *Metrics) Ended(reason lease.EndReason) {
	m.ended.WithLabelValues(string(reason)).Inc()
	if reason == lease.EndLost {
		m.lost.Inc()
	}
}

// Request records one HTTP request by its route pattern (never the raw
// path, which holds the lock name).
func (m *Metrics) Request(route, method string, code int, elapsed time.Duration) {
	m.requests.WithLabelValues(route, method, strconv.Itoa(code)).Inc()
	m.durations.WithLabelValues(route, method).Observe(elapsed.Seconds())
}

// mastersCollector reads the last health round at scrape time.
type mastersCollector struct{ report func() health.Report }

var (
	masterUpDesc   = prometheus.NewDesc("sidelock_master_up", "Whether a master answered the last health ping (1) or not (0).", []string{"master"}, nil)
	quorumDesc     = prometheus.NewDesc("sidelock_quorum", "Whether a quorum of masters answered the last health round and may be counted on (1) or not (0); with several quorum groups, whether the ready policy (SIDELOCK_READY_POLICY) is met.", nil, nil)
	groupReadyDesc = prometheus.NewDesc("sidelock_group_ready", "With several quorum groups: whether a group has a quorum of masters up and eligible (1) or not (0); names of a group at 0 answer 503.", []string{"group"}, nil)

	masterEligibleDesc = prometheus.NewDesc("sidelock_master_eligible",
		"Whether a master counts towards a quorum (1) or a safety guard keeps it out (0): restart probation, down while a restart could go unnoticed, a replica, or a second address of another master.",
		[]string{"master"}, nil)
	masterDurableDesc = prometheus.NewDesc("sidelock_master_durable",
		"Whether a master keeps acknowledged writes across a crash: 1 (appendonly with appendfsync always), 0 (it may lose them), -1 (unknown: its settings are unreadable or not read yet).",
		[]string{"master"}, nil)
	guardEventsDesc = prometheus.NewDesc("sidelock_guard_events_total",
		"Safety guard findings since start, by guard: restart_probation (a master put on probation), not_durable (a master that may lose writes that matter, once per master), duplicate (a master found to be another's second address), replica (a master found to be a replica).",
		[]string{"guard"}, nil)
)

func (c *mastersCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{masterUpDesc, quorumDesc, groupReadyDesc, masterEligibleDesc, masterDurableDesc, guardEventsDesc} {
		ch <- d
	}
}

func (c *mastersCollector) Collect(ch chan<- prometheus.Metric) {
	r := c.report()
	for _, n := range r.Nodes {
		ch <- prometheus.MustNewConstMetric(masterUpDesc, prometheus.GaugeValue, boolFloat(n.Up), n.Addr)
		ch <- prometheus.MustNewConstMetric(masterEligibleDesc, prometheus.GaugeValue, boolFloat(n.Eligible), n.Addr)
		ch <- prometheus.MustNewConstMetric(masterDurableDesc, prometheus.GaugeValue, durability(n.Durable), n.Addr)
	}
	ch <- prometheus.MustNewConstMetric(quorumDesc, prometheus.GaugeValue, boolFloat(r.Ready))
	for _, g := range r.Groups {
		ch <- prometheus.MustNewConstMetric(groupReadyDesc, prometheus.GaugeValue, boolFloat(g.Ready), g.Name)
	}
	e := r.GuardEvents
	for guard, count := range map[string]int64{
		"restart_probation": e.RestartProbation, "not_durable": e.NotDurable, "duplicate": e.Duplicate, "replica": e.Replica,
	} {
		ch <- prometheus.MustNewConstMetric(guardEventsDesc, prometheus.CounterValue, float64(count), guard)
	}
}

// durability is -1 when unknown rather than absent, so that one alert on
// sidelock_master_durable < 1 covers masters known to lose writes and
// masters that cannot tell.
func durability(durable *bool) float64 {
	if durable == nil {
		return -1
	}
	return boolFloat(*durable)
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
