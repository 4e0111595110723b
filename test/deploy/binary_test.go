package deploy

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

const binaryDir = "../../cmd/sidelock"

// binarySetting is one SIDELOCK_* variable the binary reads.
type binarySetting struct {
	def    string // its default ("" if none)
	hasDef bool
}

// binarySettings reads the SIDELOCK_* variables of the binary from the
// `envconfig:"..."` tags in the sources of cmd/sidelock (parsed, not
// imported: it is package main).
func binarySettings(t *testing.T) map[string]binarySetting {
	t.Helper()
	if _, err := os.Stat(binaryDir); err != nil {
		t.Skipf("no %s yet: %v", binaryDir, err)
	}
	files, err := filepath.Glob(filepath.Join(binaryDir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	settings := map[string]binarySetting{}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			field, ok := n.(*ast.Field)
			if !ok || field.Tag == nil {
				return true
			}
			tag, err := strconv.Unquote(field.Tag.Value)
			if err != nil {
				return true
			}
			st := reflect.StructTag(tag)
			if env, ok := st.Lookup("envconfig"); ok {
				def, hasDef := st.Lookup("default")
				settings["SIDELOCK_"+env] = binarySetting{def, hasDef}
			}
			return true
		})
	}
	if len(settings) == 0 {
		t.Fatalf("no envconfig tags in %s: where did the configuration go?", binaryDir)
	}
	return settings
}

// The chart and k8s/ set only variables the binary reads, the chart can set
// every one it reads, and its defaults are the binary's.
func TestSidecarEnvMatchesBinary(t *testing.T) {
	settings := binarySettings(t)

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
	// SIDELOCK_DEV runs in-memory masters: never in a cluster.
	for name := range settings {
		if name != "SIDELOCK_DEV" && !slices.Contains(chartEnv, name) {
			t.Errorf("the binary reads %s but the chart cannot set it", name)
		}
	}

	// JSON logs are the chart's one deliberate departure from the defaults.
	defaults, err := render(loadChart(t), nil, releaseName)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range sidecarOf(t, helmTestPod(t, defaults.objs)).Env {
		s := settings[e.Name]
		if e.ValueFrom != nil || !s.hasDef || e.Name == "SIDELOCK_LOG_FORMAT" {
			continue
		}
		if !sameSetting(e.Value, s.def) {
			t.Errorf("chart default %s=%q, binary default %q", e.Name, e.Value, s.def)
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

// sameSetting compares two settings as the binary would read them
// ("1h" and "60m" are the same duration).
func sameSetting(a, b string) bool {
	if da, err := time.ParseDuration(a); err == nil {
		db, err := time.ParseDuration(b)
		return err == nil && da == db
	}
	if fa, err := strconv.ParseFloat(a, 64); err == nil {
		fb, err := strconv.ParseFloat(b, 64)
		return err == nil && fa == fb
	}
	return a == b
}
