package benchread

import (
	"bytes"
	"strings"
	"testing"
)

func TestReadTakesMediansPerUnitAsWritten(t *testing.T) {
	out := `goos: linux
BenchmarkX/a=1-2   	 100	  5000 ns/op	 3.0 p50-µs	 12 idle-RSS-MB
BenchmarkX/a=1-2   	 100	  7000 ns/op	 1.0 p50-µs	 14 idle-RSS-MB
BenchmarkX/a=1-2   	 100	  6000 ns/op	 2.0 p50-µs	 13 idle-RSS-MB
BenchmarkX/a=1-2   	 --- FAIL
BenchmarkY
PASS`
	var warn bytes.Buffer
	r, err := Read(strings.NewReader(out), "out.txt", &warn)
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := r.Median("X/a=1", "p50-µs"); !ok || v != 2 {
		t.Errorf("median p50 = %v, %v; want 2", v, ok)
	}
	if v, _ := r.Median("X/a=1", "ns/op"); v != 6000 {
		t.Errorf("median ns/op = %v, want 6000 (the unit as written, not benchfmt's sec/op)", v)
	}
	if v, _ := r.Median("X/a=1", "idle-RSS-MB"); v != 13 {
		t.Errorf("median idle-RSS-MB = %v, want 13", v)
	}
	if _, ok := r.Median("Y", "ns/op"); ok {
		t.Error("a benchmark that did not run has a median")
	}
	if !strings.Contains(warn.String(), "out.txt:5") {
		t.Errorf("warnings = %q, want the unreadable line 5 named", warn.String())
	}
	r, _ = Read(strings.NewReader("BenchmarkX-2 1 1 ns/op\nBenchmarkX-2 1 3 ns/op\n"), "even", &bytes.Buffer{})
	if v, _ := r.Median("X", "ns/op"); v != 2 {
		t.Errorf("median of an even count = %v, want 2 (benchstat's)", v)
	}
}
