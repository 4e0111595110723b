package deploy

import (
	"reflect"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/sidelock/sidelock/internal/config"
)

// binaryDir is the sidelock command (its injector settings are read from
// its source, injector_chart_test.go).
const binaryDir = "../../cmd/sidelock"

// The chart and k8s/ set only variables the binary reads, the chart sets
// every one the settings table (internal/config) gives a chart value and
// none other, and its defaults are the table's (or the table's
// ChartDefault, a departure on purpose).
func TestSidecarEnvMatchesBinary(t *testing.T) {
	settings := map[string]config.Setting{}
	for _, s := range config.Settings() {
		settings[s.Env] = s
	}

	// Everything the chart can set: external masters with every option,
	// as one quorum or as quorum groups during a migration (the binary
	// takes SIDELOCK_REDIS_ADDRS or SIDELOCK_REDIS_GROUPS, not both).
	var chartEnv []string
	for _, masters := range []string{
		"externalAddrs: ['a:6379']",
		"externalGroups: [{name: a, addrs: ['a:6379']}, {addrs: ['b:6379']}]\n  previousGroups: [{name: a, addrs: ['a:6379']}]",
	} {
		full, err := render(loadChart(t), parseValues(t, `redis:
  enabled: false
  `+masters+`
  auth: {enabled: true, username: u, password: p}
  tls: {enabled: true, caFile: /ca, certFile: /crt, keyFile: /key}
sidecar:
  apiToken: {existingSecret: lock-api-token}`), releaseName)
		if err != nil {
			t.Fatal(err)
		}
		chartEnv = append(chartEnv, envNames(sidecarOf(t, helmTestPod(t, full.objs)))...)
	}
	chartEnv = slices.Compact(slices.Sorted(slices.Values(chartEnv)))
	for _, name := range slices.Concat(chartEnv, envNames(sidecarOf(t, exampleWorkload(t, buildManifests(t))))) {
		if _, ok := settings[name]; !ok {
			t.Errorf("%s is set but the binary does not read it", name)
		}
	}
	for name, s := range settings {
		switch set := slices.Contains(chartEnv, name); {
		case s.Chart != "" && !set:
			t.Errorf("the binary reads %s, which the settings table says the chart sets from %s, but the chart cannot set it", name, s.Chart)
		case s.Chart == "" && set:
			t.Errorf("the chart sets %s, which the settings table says it never does", name)
		}
	}

	defaults, err := render(loadChart(t), nil, releaseName)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range sidecarOf(t, helmTestPod(t, defaults.objs)).Env {
		s := settings[e.Name]
		want := s.Default
		if s.ChartDefault != nil {
			want = s.ChartDefault
		}
		if e.ValueFrom != nil || want == nil {
			continue
		}
		if got, err := s.Parse(e.Value); err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("chart default %s=%q, the settings table's %q", e.Name, e.Value, config.FormatValue(want))
		}
	}
}

func envNames(c corev1.Container) []string {
	var names []string
	for _, e := range c.Env {
		names = append(names, e.Name)
	}
	return names
}
