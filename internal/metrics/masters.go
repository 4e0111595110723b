package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// MasterStats is one Redis master's connections and pipelining as seen by
// this sidecar (redisnode.Stats, copied by the caller so that this package
// does not depend on the Redis client).
type MasterStats struct {
	Addr string // the master label
	// CommandConns and Subscriptions are the open connections of each kind.
	CommandConns, Subscriptions int
	// InFlightPipelines are batches of lock calls being sent; QueuedCalls
	// wait for one of them to finish.
	InFlightPipelines, QueuedCalls int
	// Calls and Batches count lock calls and the pipelines that sent them.
	Calls, Batches uint64
}

// queueWaitBuckets span a call that found its pipeline free (10µs) to
// one that queued behind many round trips (100ms, two node timeouts), in
// 1-2.5-5 steps.
var queueWaitBuckets = []float64{10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3}

// masterConns collects the per-master connection figures: the gauges and
// counters are read from Sources.Masters at scrape, the queue-wait
// histogram is fed by each master's observer (Metrics.ObserveQueueWait).
type masterConns struct {
	stats     func() []MasterStats // nil: no Redis masters (dev mode)
	queueWait *prometheus.HistogramVec
}

var (
	masterConnectionsDesc = prometheus.NewDesc("sidelock_master_connections",
		"Open connections to a master, by kind: command (lock calls, pings, server info; at most SIDELOCK_REDIS_MAX_CONNS) or subscription (release notifications; at most 1).",
		[]string{"master", "kind"}, nil)
	masterPipelinesDesc = prometheus.NewDesc("sidelock_master_pipelines_in_flight",
		"Pipelines of coalesced lock calls being sent to a master (at most SIDELOCK_REDIS_MAX_CONNS - 1).",
		[]string{"master"}, nil)
	masterQueuedDesc = prometheus.NewDesc("sidelock_master_queued_calls",
		"Lock calls waiting for a free pipeline to a master.",
		[]string{"master"}, nil)
	masterCallsDesc = prometheus.NewDesc("sidelock_master_calls_total",
		"Lock calls (scripts) sent to a master.",
		[]string{"master"}, nil)
	masterBatchesDesc = prometheus.NewDesc("sidelock_master_batches_total",
		"Round trips that carried the lock calls to a master; calls_total / batches_total is how many calls share one.",
		[]string{"master"}, nil)
)

func newMasterConns(stats func() []MasterStats) *masterConns {
	return &masterConns{
		stats: stats,
		queueWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sidelock_master_queue_wait_seconds",
			Help:    "Time lock calls waited for a free pipeline to a master, from being queued to being sent.",
			Buckets: queueWaitBuckets,
		}, []string{"master"}),
	}
}

// ObserveQueueWait returns the queue-wait observer of one master, for
// redisnode.Options.OnQueueWait. Its histogram series is made here, so
// that observing is one Observe with no label lookup, and the series is
// exported (empty) before the first call.
func (m *Metrics) ObserveQueueWait(master string) func(time.Duration) {
	h := m.masters.queueWait.WithLabelValues(master)
	return func(d time.Duration) { h.Observe(d.Seconds()) }
}

func (c *masterConns) Describe(ch chan<- *prometheus.Desc) {
	c.queueWait.Describe(ch)
	for _, d := range []*prometheus.Desc{masterConnectionsDesc, masterPipelinesDesc, masterQueuedDesc, masterCallsDesc, masterBatchesDesc} {
		ch <- d
	}
}

func (c *masterConns) Collect(ch chan<- prometheus.Metric) {
	c.queueWait.Collect(ch)
	if c.stats == nil {
		return
	}
	for _, s := range c.stats() {
		ch <- prometheus.MustNewConstMetric(masterConnectionsDesc, prometheus.GaugeValue, float64(s.CommandConns), s.Addr, "command")
		ch <- prometheus.MustNewConstMetric(masterConnectionsDesc, prometheus.GaugeValue, float64(s.Subscriptions), s.Addr, "subscription")
		ch <- prometheus.MustNewConstMetric(masterPipelinesDesc, prometheus.GaugeValue, float64(s.InFlightPipelines), s.Addr)
		ch <- prometheus.MustNewConstMetric(masterQueuedDesc, prometheus.GaugeValue, float64(s.QueuedCalls), s.Addr)
		ch <- prometheus.MustNewConstMetric(masterCallsDesc, prometheus.CounterValue, float64(s.Calls), s.Addr)
		ch <- prometheus.MustNewConstMetric(masterBatchesDesc, prometheus.CounterValue, float64(s.Batches), s.Addr)
	}
}
