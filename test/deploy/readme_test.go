package deploy

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chartutil"
)

// valuesTableRow is one row of the chart README's values table: a key (or
// `a.b.*`, standing for every key under a.b) and its default cell.
type valuesTableRow struct{ key, def string }

var tableRowKey = regexp.MustCompile("^\\| `([A-Za-z.*]+)` \\| ([^|]*) \\|")

// readmeValuesTable reads the rows of the "## Values" table of the chart's
// README.
func readmeValuesTable(t *testing.T) []valuesTableRow {
	t.Helper()
	readme, err := os.ReadFile(filepath.Join(chartDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "\n## Values\n")
	if !ok {
		t.Fatal(`chart README has no "## Values" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	var rows []valuesTableRow
	for line := range strings.SplitSeq(section, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		m := tableRowKey.FindStringSubmatch(line)
		if m == nil {
			t.Errorf("values table row names not exactly one key: %s", line)
			continue
		}
		rows = append(rows, valuesTableRow{m[1], strings.TrimSpace(m[2])})
	}
	return rows
}

// valueKeys lists every key of values.yaml with its default, descending
// into maps except the Kubernetes-shaped ones (kubernetesShaped), whose
// members are the Kubernetes API's, not the chart's.
func valueKeys(defaults map[string]any) map[string]any {
	keys := map[string]any{}
	var walk func(prefix string, m map[string]any)
	walk = func(prefix string, m map[string]any) {
		for k, v := range m {
			keys[prefix+k] = v
			if sub, isMap := v.(map[string]any); isMap && len(sub) > 0 && !slices.Contains(kubernetesShaped, k) {
				walk(prefix+k+".", sub)
			}
		}
	}
	walk("", defaults)
	return keys
}

// defaultCell is how the table writes a scalar or empty default; ok is
// false for values it describes in words (non-empty lists and maps).
func defaultCell(v any) (cell string, ok bool) {
	switch v := v.(type) {
	case string:
		if v == "" {
			return "`\"\"`", true
		}
		return "`" + v + "`", true
	case bool, int, int64, float64:
		return fmt.Sprintf("`%v`", v), true
	case []any:
		return "`[]`", len(v) == 0
	case map[string]any:
		return "`{}`", len(v) == 0
	}
	return "", false
}

// The chart README's values table lists every key of values.yaml (the one
// home of the list), either by name or under a `prefix.*` row, names no
// key values.yaml lacks, and gives each scalar or empty default as
// values.yaml has it.
func TestValuesTableInReadme(t *testing.T) {
	defaults, err := chartutil.ReadValuesFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	keys := valueKeys(defaults)
	rows := readmeValuesTable(t)
	covered := map[string]bool{}
	for _, row := range rows {
		if prefix, isGroup := strings.CutSuffix(row.key, ".*"); isGroup {
			if sub, ok := keys[prefix].(map[string]any); !ok || len(sub) == 0 {
				t.Errorf("README row %s: values.yaml has no map %s", row.key, prefix)
			}
			covered[prefix] = true
			continue
		}
		v, ok := keys[row.key]
		if !ok {
			t.Errorf("README row %s: not a key of values.yaml", row.key)
			continue
		}
		if isGroup(row.key, v) {
			t.Errorf("README row %s: a group of keys; give a row to each, or one to %s.*", row.key, row.key)
		}
		covered[row.key] = true
		if want, scalar := defaultCell(v); scalar && !strings.HasPrefix(row.def, want) {
			t.Errorf("README row %s: default %s, values.yaml has %s", row.key, row.def, want)
		}
	}
	for key, v := range keys {
		if isGroup(key, v) {
			continue // its keys are checked one by one
		}
		if !isCovered(key, covered) {
			t.Errorf("values.yaml key %s has no row in the chart README's values table", key)
		}
	}
}

// isCovered: the key has a row, or one of its parents has a `parent.*` row
// or (a Kubernetes-shaped block) a row of its own.
func isCovered(key string, covered map[string]bool) bool {
	for k := key; ; {
		if covered[k] {
			return true
		}
		i := strings.LastIndex(k, ".")
		if i < 0 {
			return false
		}
		k = k[:i]
	}
}

// isGroup: a non-empty map of the chart's own keys (not Kubernetes-shaped),
// documented key by key.
func isGroup(key string, v any) bool {
	sub, isMap := v.(map[string]any)
	return isMap && len(sub) > 0 && !slices.Contains(kubernetesShaped, key[strings.LastIndex(key, ".")+1:])
}
