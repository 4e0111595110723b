package benchout_test

import (
	"strings"
	"testing"

	"github.com/sidelock/sidelock/tools/benchout"
)

func TestParseTakesMediansPerUnit(t *testing.T) {
	out := `goos: linux
BenchmarkX/a=1-2   	 100	  5000 ns/op	 3.0 p50-µs
BenchmarkX/a=1-2   	 100	  7000 ns/op	 1.0 p50-µs
BenchmarkX/a=1-2   	 100	  6000 ns/op	 2.0 p50-µs
PASS`
	r, err := benchout.Parse(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := r.Median("X/a=1", "p50-µs"); !ok || v != 2 {
		t.Errorf("median p50 = %v, %v; want 2", v, ok)
	}
	if v, _ := r.Median("X/a=1", "ns/op"); v != 6000 {
		t.Errorf("median ns/op = %v, want 6000", v)
	}
	if _, ok := r.Median("Y", "ns/op"); ok {
		t.Error("a benchmark that did not run has a median")
	}
}
