package metrics_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sidelock/sidelock/internal/health"
	"github.com/sidelock/sidelock/internal/metrics"
)

func TestMasterConnectionMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	stats := []metrics.MasterStats{
		{Addr: "r1:6379", CommandConns: 2, Subscriptions: 1, InFlightPipelines: 1, QueuedCalls: 17, Calls: 900, Batches: 30},
		{Addr: "r2:6379", CommandConns: 1},
	}
	m := metrics.New(reg, metrics.Sources{
		LocksHeld: func() int { return 0 }, Waiters: func() int { return 0 }, Health: func() health.Report { return health.Report{} },
		Masters: func() []metrics.MasterStats { return stats },
	})
	r1, r2 := m.ObserveQueueWait("r1:6379"), m.ObserveQueueWait("r2:6379")
	r1(5 * time.Microsecond)
	r1(2 * time.Millisecond)
	r1(time.Second)
	_ = r2 // never called: its series is there, empty

	expected := `
# HELP sidelock_master_connections Open connections to a master, by kind: command (lock calls, pings, server info; at most SIDELOCK_REDIS_MAX_CONNS) or subscription (release notifications; at most 1).
# TYPE sidelock_master_connections gauge
sidelock_master_connections{kind="command",master="r1:6379"} 2
sidelock_master_connections{kind="subscription",master="r1:6379"} 1
sidelock_master_connections{kind="command",master="r2:6379"} 1
sidelock_master_connections{kind="subscription",master="r2:6379"} 0
# HELP sidelock_master_pipelines_in_flight Pipelines of coalesced lock calls being sent to a master (at most SIDELOCK_REDIS_MAX_CONNS - 1).
# TYPE sidelock_master_pipelines_in_flight gauge
sidelock_master_pipelines_in_flight{master="r1:6379"} 1
sidelock_master_pipelines_in_flight{master="r2:6379"} 0
# HELP sidelock_master_queued_calls Lock calls waiting for a free pipeline to a master.
# TYPE sidelock_master_queued_calls gauge
sidelock_master_queued_calls{master="r1:6379"} 17
sidelock_master_queued_calls{master="r2:6379"} 0
# HELP sidelock_master_calls_total Lock calls (scripts) sent to a master.
# TYPE sidelock_master_calls_total counter
sidelock_master_calls_total{master="r1:6379"} 900
sidelock_master_calls_total{master="r2:6379"} 0
# HELP sidelock_master_batches_total Round trips that carried the lock calls to a master; calls_total / batches_total is how many calls share one.
# TYPE sidelock_master_batches_total counter
sidelock_master_batches_total{master="r1:6379"} 30
sidelock_master_batches_total{master="r2:6379"} 0
# HELP sidelock_master_queue_wait_seconds Time lock calls waited for a free pipeline to a master, from being queued to being sent.
# TYPE sidelock_master_queue_wait_seconds histogram
sidelock_master_queue_wait_seconds_bucket{master="r1:6379",le="1e-05"} 1
sidelock_master_queue_wait_seconds_bucket{master="r1:6379",le="2.5e-05"} 1
sidelock_master_queue_wait_seconds_bucket{master="r1:6379",le="5e-05"} 1
sidelock_master_queue_wait_seconds_bucket{master="r1:6379",le="0.0001"} 1
sidelock_master_queue_wait_seconds_bucket{master="r1:6379",le="0.00025"} 1
sidelock_master_queue_wait_seconds_bucket{master="r1:6379",le="0.0005"} 1
sidelock_master_queue_wait_seconds_bucket{master="r1:6379",le="0.001"} 1
sidelock_master_queue_wait_seconds_bucket{master="r1:6379",le="0.0025"} 2
sidelock_master_queue_wait_seconds_bucket{master="r1:6379",le="0.005"} 2
sidelock_master_queue_wait_seconds_bucket{master="r1:6379",le="0.01"} 2
sidelock_master_queue_wait_seconds_bucket{master="r1:6379",le="0.025"} 2
sidelock_master_queue_wait_seconds_bucket{master="r1:6379",le="0.05"} 2
sidelock_master_queue_wait_seconds_bucket{master="r1:6379",le="0.1"} 2
sidelock_master_queue_wait_seconds_bucket{master="r1:6379",le="+Inf"} 3
sidelock_master_queue_wait_seconds_sum{master="r1:6379"} 1.002005
sidelock_master_queue_wait_seconds_count{master="r1:6379"} 3
sidelock_master_queue_wait_seconds_bucket{master="r2:6379",le="1e-05"} 0
sidelock_master_queue_wait_seconds_bucket{master="r2:6379",le="2.5e-05"} 0
sidelock_master_queue_wait_seconds_bucket{master="r2:6379",le="5e-05"} 0
sidelock_master_queue_wait_seconds_bucket{master="r2:6379",le="0.0001"} 0
sidelock_master_queue_wait_seconds_bucket{master="r2:6379",le="0.00025"} 0
sidelock_master_queue_wait_seconds_bucket{master="r2:6379",le="0.0005"} 0
sidelock_master_queue_wait_seconds_bucket{master="r2:6379",le="0.001"} 0
sidelock_master_queue_wait_seconds_bucket{master="r2:6379",le="0.0025"} 0
sidelock_master_queue_wait_seconds_bucket{master="r2:6379",le="0.005"} 0
sidelock_master_queue_wait_seconds_bucket{master="r2:6379",le="0.01"} 0
sidelock_master_queue_wait_seconds_bucket{master="r2:6379",le="0.025"} 0
sidelock_master_queue_wait_seconds_bucket{master="r2:6379",le="0.05"} 0
sidelock_master_queue_wait_seconds_bucket{master="r2:6379",le="0.1"} 0
sidelock_master_queue_wait_seconds_bucket{master="r2:6379",le="+Inf"} 0
sidelock_master_queue_wait_seconds_sum{master="r2:6379"} 0
sidelock_master_queue_wait_seconds_count{master="r2:6379"} 0
`
	names := []string{"sidelock_master_connections", "sidelock_master_pipelines_in_flight", "sidelock_master_queued_calls",
		"sidelock_master_calls_total", "sidelock_master_batches_total", "sidelock_master_queue_wait_seconds"}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(expected), names...); err != nil {
		t.Fatal(err)
	}

	// The figures follow the source at every scrape.
	stats = stats[:1]
	stats[0].CommandConns = 0
	changed := `
# HELP sidelock_master_connections Open connections to a master, by kind: command (lock calls, pings, server info; at most SIDELOCK_REDIS_MAX_CONNS) or subscription (release notifications; at most 1).
# TYPE sidelock_master_connections gauge
sidelock_master_connections{kind="command",master="r1:6379"} 0
sidelock_master_connections{kind="subscription",master="r1:6379"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(changed), "sidelock_master_connections"); err != nil {
		t.Fatal(err)
	}
}

// Without Redis masters (dev mode) nothing per master is exported.
func TestMasterConnectionMetricsWithoutMasters(t *testing.T) {
	reg := prometheus.NewRegistry()
	metrics.New(reg, metrics.Sources{
		LocksHeld: func() int { return 0 }, Waiters: func() int { return 0 }, Health: func() health.Report { return health.Report{} },
	})
	if n, err := testutil.GatherAndCount(reg, "sidelock_master_connections", "sidelock_master_queue_wait_seconds"); err != nil || n != 0 {
		t.Fatalf("%d series, %v; want none", n, err)
	}
}
