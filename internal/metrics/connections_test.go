package metrics_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sidelock/sidelock/internal/metrics"
)

func TestListenerStatsAreExported(t *testing.T) {
	reg := prometheus.NewRegistry()
	if err := metrics.RegisterListeners(reg, map[string]func() metrics.ListenerStats{
		"api": func() metrics.ListenerStats {
			return metrics.ListenerStats{Open: 3, Max: 200, Refused: 7, ShedNew: 5, ShedIdle: 2}
		},
		"admin": func() metrics.ListenerStats { return metrics.ListenerStats{Max: 32} },
	}); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP sidelock_connections_max The cap on a listener's open connections.
# TYPE sidelock_connections_max gauge
sidelock_connections_max{listener="admin"} 32
sidelock_connections_max{listener="api"} 200
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "sidelock_connections_max"); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName()
			for _, l := range m.GetLabel() {
				key += "," + l.GetName() + "=" + l.GetValue()
			}
			got[key] = m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	for key, v := range map[string]float64{
		"sidelock_connections_open,listener=api":                            3,
		"sidelock_connections_overload_total,action=refused,listener=api":   7,
		"sidelock_connections_overload_total,action=shed_new,listener=api":  5,
		"sidelock_connections_overload_total,action=shed_idle,listener=api": 2,
	} {
		if got[key] != v {
			t.Errorf("%s = %v, want %v (all: %v)", key, got[key], v, got)
		}
	}
}
