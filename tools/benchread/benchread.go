// Package benchread reads `go test -bench` output (with x/perf/benchfmt)
// into every value of each benchmark and unit, for the tools that turn
// benchmark runs into tables (report, scale-model).
package benchread

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/perf/benchfmt"
	"golang.org/x/perf/benchmath"
)

// Results are every value of each benchmark and unit, keyed "name|unit":
// the name without "Benchmark" and the -GOMAXPROCS suffix, the unit as
// the benchmark wrote it.
type Results map[string][]float64

// Read takes `go test -bench` output; lines benchfmt cannot read are
// reported to warn (with fileName and their line number) and skipped.
func Read(r io.Reader, fileName string, warn io.Writer) (Results, error) {
	res := Results{}
	br := benchfmt.NewReader(r, fileName)
	for br.Scan() {
		switch rec := br.Result().(type) {
		case *benchfmt.SyntaxError:
			fmt.Fprintf(warn, "skipping %v\n", rec)
		case *benchfmt.Result:
			name := Name(rec.Name)
			for _, v := range rec.Values {
				unit, val := v.Unit, v.Value
				if v.OrigUnit != "" { // as written, not benchfmt's tidied sec/op or B
					unit, val = v.OrigUnit, v.OrigValue
				}
				res[name+"|"+unit] = append(res[name+"|"+unit], val)
			}
		}
	}
	return res, br.Err()
}

// ReadFile is Read of the file at path.
func ReadFile(path string, warn io.Writer) (Results, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Read(bytes.NewReader(data), path, warn)
}

// Name is a result's name without its -GOMAXPROCS suffix.
func Name(n benchfmt.Name) string {
	base, parts := n.Parts()
	if len(parts) > 0 && strings.HasPrefix(string(parts[len(parts)-1]), "-") {
		parts = parts[:len(parts)-1]
	}
	var b strings.Builder
	b.Write(base)
	for _, p := range parts {
		b.Write(p)
	}
	return b.String()
}

// Median of a benchmark's unit over its runs, as benchstat reports it
// (the mean of the middle two for an even count), and whether it was
// measured.
func (r Results) Median(name, unit string) (float64, bool) {
	vs := r[name+"|"+unit]
	if len(vs) == 0 {
		return 0, false
	}
	s := benchmath.NewSample(vs, &benchmath.DefaultThresholds)
	return benchmath.AssumeNothing.Summary(s, 0.95).Center, true
}

// Has reports whether any line of a benchmark (or its sub-benchmarks)
// was read.
func (r Results) Has(prefix string) bool {
	for k := range r {
		if strings.HasPrefix(k, prefix) {
			return true
		}
	}
	return false
}
