//go:build linux

package abuse

import "testing"

// The report reads the chart's memory limit and converts it: checked
// without any process, so make test keeps it honest.
func TestChartMemoryLimit(t *testing.T) {
	got := chartMemoryLimit("../../charts/sidelock/values.yaml")
	if got == "" || quantityKB(got) == 0 {
		t.Fatalf("sidecar.resources.limits.memory = %q (%d kB): want a quantity such as 64Mi", got, quantityKB(got))
	}
	for q, kb := range map[string]int{"64Mi": 65536, "1Gi": 1 << 20, "100M": 97656, "512Ki": 512, "lots": 0} {
		if n := quantityKB(q); n != kb {
			t.Errorf("quantityKB(%q) = %d, want %d", q, n, kb)
		}
	}
}
