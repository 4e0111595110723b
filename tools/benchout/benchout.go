// Package benchout reads `go test -bench` output into medians, for the
// tools that turn benchmark runs into tables (bench/report,
// cmd/scale-model).
package benchout

import (
	"bufio"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Results maps "benchmark name|unit" to every value seen (one per -count);
// the name is without "Benchmark" and the -GOMAXPROCS suffix.
type Results map[string][]float64

var procSuffix = regexp.MustCompile(`-\d+$`)

// Parse reads benchmark lines; other lines are skipped.
func Parse(r io.Reader) (Results, error) {
	res := Results{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		name := procSuffix.ReplaceAllString(strings.TrimPrefix(f[0], "Benchmark"), "")
		for i := 2; i+1 < len(f); i += 2 {
			if v, err := strconv.ParseFloat(f[i], 64); err == nil {
				res[name+"|"+f[i+1]] = append(res[name+"|"+f[i+1]], v)
			}
		}
	}
	return res, sc.Err()
}

// Median of a benchmark's unit over its runs, and whether it was measured.
func (r Results) Median(name, unit string) (float64, bool) {
	vs := slices.Clone(r[name+"|"+unit])
	if len(vs) == 0 {
		return 0, false
	}
	slices.Sort(vs)
	return vs[len(vs)/2], true
}
