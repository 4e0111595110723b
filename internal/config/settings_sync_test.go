package config

// The Helm chart cannot read the settings table, so these tests read the
// chart: its values.yaml defaults, its values.schema.json bounds and its
// sidecar template's value-to-variable map must be the table's. (The chart
// rendered, with Helm, is compared with the table in test/deploy.)

import (
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/sidelock/sidelock/internal/lease"
)

var chartDir = filepath.Join("..", "..", "charts", "sidelock")

// chartConfig is the prefix of the chart values that are one variable
// each, as they are.
const chartConfig = "sidecar.config."

// Every setting's default in the chart's values.yaml is the table's (or
// the table's ChartDefault, a departure on purpose), every value the
// table names exists, and every sidecar.config value is a setting.
func TestChartValuesAreTheTablesDefaults(t *testing.T) {
	values := readValues(t)
	named := map[string]bool{}
	for _, s := range Settings() {
		if s.Chart == "" {
			continue
		}
		named[s.Chart] = true
		text, ok := values[s.Chart]
		if !ok {
			t.Errorf("%s: values.yaml has no %s", s.Env, s.Chart)
			continue
		}
		want := s.Default
		if s.ChartDefault != nil {
			want = s.ChartDefault
		}
		switch {
		case strings.HasSuffix(s.Chart, "Port"): // the port of a host:port
			_, port, _ := net.SplitHostPort(want.(string))
			if text != port {
				t.Errorf("values.yaml %s: %s, but %s defaults to %v", s.Chart, text, s.Env, want)
			}
		case want == nil: // no default: the chart leaves it unset
			if !slices.Contains([]string{"", "[]", "false"}, text) {
				t.Errorf("values.yaml %s: %s, but %s has no default", s.Chart, text, s.Env)
			}
		default:
			got, err := s.Parse(text)
			if err != nil || !reflect.DeepEqual(got, want) {
				t.Errorf("values.yaml %s: %s, but the settings table's default for %s is %s (internal/config/settings.go)",
					s.Chart, text, s.Env, FormatValue(want))
			}
		}
	}
	for key := range values {
		if strings.HasPrefix(key, chartConfig) && !named[key] {
			t.Errorf("values.yaml %s is no setting's Chart in the settings table", key)
		}
	}
}

// values.schema.json types and bounds each sidecar.config value as the
// table does, and has no value the table lacks.
func TestChartSchemaIsTheTablesBounds(t *testing.T) {
	schema := readSchema(t)
	props := schema.at(t, "properties", "sidecar", "properties", "config", "properties")
	seen := map[string]bool{}
	for _, s := range Settings() {
		key, ok := strings.CutPrefix(s.Chart, chartConfig)
		if !ok {
			continue
		}
		seen[key] = true
		p, ok := props[key].(map[string]any)
		if !ok {
			t.Errorf("values.schema.json has no sidecar.config.%s (%s)", key, s.Env)
			continue
		}
		if d, _ := p["description"].(string); !strings.HasPrefix(d, s.Env) {
			t.Errorf("values.schema.json sidecar.config.%s: description %q does not start with %s", key, d, s.Env)
		}
		checkSchemaType(t, s, key, p)
		checkSchemaBounds(t, s, key, p)
	}
	for key := range props {
		if !seen[key] {
			t.Errorf("values.schema.json sidecar.config.%s is no setting's Chart in the settings table", key)
		}
	}
}

func checkSchemaType(t *testing.T, s Setting, key string, p map[string]any) {
	t.Helper()
	want := map[reflect.Kind]string{reflect.Int: "integer", reflect.Float64: "number", reflect.Bool: "boolean", reflect.String: "string"}[s.Type().Kind()]
	if s.Type() == durationType {
		if p["$ref"] != "#/definitions/duration" {
			t.Errorf("values.schema.json sidecar.config.%s (%s) is not a #/definitions/duration", key, s.Env)
		}
		return
	}
	if p["type"] != want {
		t.Errorf("values.schema.json sidecar.config.%s (%s) has type %v, want %s", key, s.Env, p["type"], want)
	}
	var enum []string
	for _, v := range asSlice(p["enum"]) {
		enum = append(enum, fmt.Sprint(v))
	}
	if !slices.Equal(slices.Sorted(slices.Values(enum)), slices.Sorted(slices.Values(s.Values))) {
		t.Errorf("values.schema.json sidecar.config.%s: enum %v, the settings table's %s takes %v", key, enum, s.Env, s.Values)
	}
}

// checkSchemaBounds compares the schema's numeric bounds with the table's
// fixed ones (a schema cannot bound a duration, nor by another value).
func checkSchemaBounds(t *testing.T, s Setting, key string, p map[string]any) {
	t.Helper()
	want := map[string]any{}
	for _, b := range []struct {
		bound          *Bound
		incl, excl     string
		isLower, fixed bool
	}{
		{s.Min, "minimum", "exclusiveMinimum", true, s.Min != nil && s.Min.Setting == ""},
		{s.Max, "maximum", "exclusiveMaximum", false, s.Max != nil && s.Max.Setting == ""},
	} {
		if !b.fixed || s.Type() == durationType {
			continue
		}
		name := b.incl
		if b.bound.Exclusive {
			name = b.excl
		}
		want[name] = toFloat(b.bound.Value)
	}
	got := map[string]any{}
	for _, name := range []string{"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"} {
		if v, ok := p[name]; ok {
			got[name] = v
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("values.schema.json sidecar.config.%s bounds %v, but the settings table bounds %s %s (%v)", key, got, s.Env, s.FixedRange(), want)
	}
}

func toFloat(v any) float64 {
	switch v := v.(type) {
	case int:
		return float64(v)
	case float64:
		return v
	}
	panic(v)
}

func asSlice(v any) []any { s, _ := v.([]any); return s }

// The schema's key prefix pattern takes exactly what the sidecar takes
// (lease.ValidateKeyPrefix), up to its length limit.
func TestChartSchemaKeyPrefixIsTheSidecars(t *testing.T) {
	schema := readSchema(t)
	p := schema.at(t, "properties", "sidecar", "properties", "config", "properties", "keyPrefix")
	pattern := regexp.MustCompile(p["pattern"].(string))
	var samples []string
	for n := 0; n <= lease.MaxKeyPrefixLen+2; n++ {
		samples = append(samples, strings.Repeat("a", n), strings.Repeat("a", n)+":")
	}
	for c := range 256 {
		samples = append(samples, string([]byte{byte(c), ':'}), string([]byte{'a', byte(c), ':'}), string([]byte{'a', ':', byte(c)}))
	}
	samples = append(samples, "a:b:", "sidelock:", "team-a:", "a/b.c_d-e:", ":")
	for _, v := range samples {
		if schemaOK, sidecarOK := pattern.MatchString(v), lease.ValidateKeyPrefix(v) == nil; schemaOK != sidecarOK {
			t.Errorf("key prefix %q: values.schema.json takes it %v, the sidecar %v", v, schemaOK, sidecarOK)
		}
	}
}

// The schema names quorum groups as the sidecar does.
func TestChartSchemaGroupNameIsTheSidecars(t *testing.T) {
	p := readSchema(t).at(t, "definitions", "quorumGroup", "properties", "name")
	if p["pattern"] != groupNamePattern.String() {
		t.Errorf("values.schema.json quorumGroup name pattern %v, the sidecar's %s", p["pattern"], groupNamePattern)
	}
}

// The sidecar template sets each sidecar.config value as the variable the
// table says.
func TestChartTemplateSetsTheTablesVariables(t *testing.T) {
	tpl, err := os.ReadFile(filepath.Join(chartDir, "templates", "_sidecar.tpl"))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, m := range regexp.MustCompile(`"(\w+)" "(SIDELOCK_\w+)"`).FindAllStringSubmatch(string(tpl), -1) {
		got[m[1]] = m[2]
	}
	want := map[string]string{}
	for _, s := range Settings() {
		if key, ok := strings.CutPrefix(s.Chart, chartConfig); ok {
			want[key] = s.Env
		}
	}
	delete(got, "caFile") // redis.tls, not sidecar.config
	delete(got, "certFile")
	delete(got, "keyFile")
	keys := maps.Clone(got)
	maps.Copy(keys, want)
	for _, key := range slices.Sorted(maps.Keys(keys)) {
		if got[key] != want[key] {
			t.Errorf("_sidecar.tpl sets sidecar.config.%s as %q, the settings table as %q", key, got[key], want[key])
		}
	}
}

// readValues reads values.yaml into dotted paths and the text of their
// scalars ("[]" and "{}" for empty ones). It is no YAML parser: it knows
// the shape of this file (two-space indentation, one key per line,
// comments on their own lines) and fails on any line it does not.
func readValues(t *testing.T) map[string]string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	line := regexp.MustCompile(`^( *)([A-Za-z][A-Za-z0-9_-]*):(?: +(.*))?$`)
	values := map[string]string{}
	var path []string // keys of the open mappings
	for i, l := range strings.Split(string(data), "\n") {
		if strings.TrimSpace(l) == "" || strings.HasPrefix(strings.TrimSpace(l), "#") {
			continue
		}
		m := line.FindStringSubmatch(l)
		if m == nil || len(m[1])%2 != 0 || len(m[1])/2 > len(path) {
			t.Fatalf("values.yaml:%d: %q is not a line readValues understands", i+1, l)
		}
		path = append(path[:len(m[1])/2], m[2])
		if m[3] == "" {
			continue // a mapping opens
		}
		text := m[3]
		if u, err := strconv.Unquote(text); err == nil {
			text = u
		} else if strings.ContainsAny(text, `"'#`) {
			t.Fatalf("values.yaml:%d: %q is not a scalar readValues understands", i+1, l)
		}
		values[strings.Join(path, ".")] = text
	}
	if len(values) < 50 {
		t.Fatalf("read only %d values from values.yaml", len(values))
	}
	return values
}

type jsonObject map[string]any

func readSchema(t *testing.T) jsonObject {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(chartDir, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var s jsonObject
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// at is the object at the path of keys.
func (o jsonObject) at(t *testing.T, keys ...string) jsonObject {
	t.Helper()
	cur := map[string]any(o)
	for i, k := range keys {
		next, ok := cur[k].(map[string]any)
		if !ok {
			t.Fatalf("values.schema.json has no object at %s", strings.Join(keys[:i+1], "/"))
		}
		cur = next
	}
	return cur
}
