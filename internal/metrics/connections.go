package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// ListenerStats are one listener's connection counts (connlimit.Stats,
// copied by the caller so that this package does not depend on it).
type ListenerStats struct {
	Open, Max int
	// Refused connections were answered 429 overloaded at the cap;
	// ShedNew (never sent a request) and ShedIdle (idle keep-alive) were
	// closed to make room for a new one.
	Refused, ShedNew, ShedIdle uint64
}

var (
	connOpenDesc = prometheus.NewDesc("sidelock_connections_open",
		"Open connections of a listener (api: the lock API, at most SIDELOCK_MAX_CONNS; admin: probes and scrapes).",
		[]string{"listener"}, nil)
	connMaxDesc = prometheus.NewDesc("sidelock_connections_max",
		"The cap on a listener's open connections.",
		[]string{"listener"}, nil)
	connOverloadDesc = prometheus.NewDesc("sidelock_connections_overload_total",
		"Connections turned away or closed at a listener's cap, by action: refused (every connection was busy in a request: answered 429 overloaded and closed), "+
			"shed_new (a connection that never sent a request, closed to make room), shed_idle (an idle keep-alive connection, closed to make room).",
		[]string{"listener", "action"}, nil)
)

// connCollector reads the listeners' counts at scrape time.
type connCollector struct {
	listeners map[string]func() ListenerStats
}

// RegisterListeners exports the connection counts of the listeners, by
// name, each read from its function at every scrape.
func RegisterListeners(reg prometheus.Registerer, listeners map[string]func() ListenerStats) error {
	return reg.Register(&connCollector{listeners: listeners})
}

func (c *connCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- connOpenDesc
	ch <- connMaxDesc
	ch <- connOverloadDesc
}

func (c *connCollector) Collect(ch chan<- prometheus.Metric) {
	for name, stats := range c.listeners {
		s := stats()
		ch <- prometheus.MustNewConstMetric(connOpenDesc, prometheus.GaugeValue, float64(s.Open), name)
		ch <- prometheus.MustNewConstMetric(connMaxDesc, prometheus.GaugeValue, float64(s.Max), name)
		for action, n := range map[string]uint64{"refused": s.Refused, "shed_new": s.ShedNew, "shed_idle": s.ShedIdle} {
			ch <- prometheus.MustNewConstMetric(connOverloadDesc, prometheus.CounterValue, float64(n), name, action)
		}
	}
}
