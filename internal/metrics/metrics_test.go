package metrics_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sidelock/sidelock/internal/health"
	"github.com/sidelock/sidelock/internal/lease"
	"github.com/sidelock/sidelock/internal/metrics"
)

func TestMetricsExported(t *testing.T) {
	reg := prometheus.NewRegistry()
	yes, no := true, false
	report := health.Report{Ready: true, Quorum: 2, Up: 2, Eligible: 2, Nodes: []health.NodeState{
		{Addr: "r1:6379", Up: true, Eligible: true, Durable: &yes},
		{Addr: "r2:6379", Up: true, Eligible: true, Durable: &no},
		{Addr: "r3:6379", Eligible: false},
	}, GuardEvents: health.GuardEvents{RestartProbation: 3, NotDurable: 2, Replica: 1}}
	m := metrics.New(reg, metrics.Sources{LocksHeld: func() int { return 7 }, Waiters: func() int { return 2 }, Health: func() health.Report { return report }})
	m.Acquisition(lease.OutcomeAcquired, time.Millisecond)
	m.Acquisition(lease.OutcomeNoQuorum, time.Millisecond)
	m.Waited(lease.OutcomeAcquired, time.Millisecond)
	m.Wakeup(lease.WakePubSub)
	m.Renewal(true)
	m.Renewal(false)
	m.Ended(lease.EndLost)
	m.Ended(lease.EndReleased)
	m.Request("/locks/*", "POST", 200, time.Millisecond)

	expected := `
# HELP sidelock_master_up Whether a master answered the last health ping (1) or not (0).
# TYPE sidelock_master_up gauge
sidelock_master_up{master="r1:6379"} 1
sidelock_master_up{master="r2:6379"} 1
sidelock_master_up{master="r3:6379"} 0
# HELP sidelock_master_eligible Whether a master counts towards a quorum (1) or a safety guard keeps it out (0): restart probation, down while a restart could go unnoticed, a replica, or a second address of another master.
# TYPE sidelock_master_eligible gauge
sidelock_master_eligible{master="r1:6379"} 1
sidelock_master_eligible{master="r2:6379"} 1
sidelock_master_eligible{master="r3:6379"} 0
# HELP sidelock_master_durable Whether a master keeps acknowledged writes across a crash: 1 (appendonly with appendfsync always), 0 (it may lose them), -1 (unknown: its settings are unreadable or not read yet).
# TYPE sidelock_master_durable gauge
sidelock_master_durable{master="r1:6379"} 1
sidelock_master_durable{master="r2:6379"} 0
sidelock_master_durable{master="r3:6379"} -1
# HELP sidelock_guard_events_total Safety guard findings since start, by guard: restart_probation (a master put on probation), not_durable (a master that may lose writes that matter, once per master), duplicate (a master found to be another's second address), replica (a master found to be a replica).
# TYPE sidelock_guard_events_total counter
sidelock_guard_events_total{guard="duplicate"} 0
sidelock_guard_events_total{guard="not_durable"} 2
sidelock_guard_events_total{guard="replica"} 1
sidelock_guard_events_total{guard="restart_probation"} 3
# HELP sidelock_locks_held Leases currently held through this sidecar: locks and semaphores' permits.
# TYPE sidelock_locks_held gauge
sidelock_locks_held 7
# HELP sidelock_locks_lost_total Locks lost: a renewal or heartbeat found the lock held by another value, or no quorum before the validity ran out (sidelock_releases_total{reason="lost"}; max_hold is not counted here).
# TYPE sidelock_locks_lost_total counter
sidelock_locks_lost_total 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(expected), "sidelock_master_up", "sidelock_master_eligible", "sidelock_master_durable", "sidelock_guard_events_total", "sidelock_locks_held", "sidelock_locks_lost_total"); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"sidelock_quorum", "sidelock_acquire_duration_seconds", "sidelock_renewals_total", "sidelock_waiters", "sidelock_watch_streams", "sidelock_wait_duration_seconds", "sidelock_wakeups_total", "sidelock_releases_total", "sidelock_http_requests_total", "sidelock_http_request_duration_seconds"} {
		if n, err := testutil.GatherAndCount(reg, name); err != nil || n == 0 {
			t.Errorf("%s: %d series, %v", name, n, err)
		}
	}
}
