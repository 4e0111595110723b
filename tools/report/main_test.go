package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/sidelock/sidelock/tools/benchread"
)

func TestTableFromBenchmarkOutput(t *testing.T) {
	out := `goos: linux
pkg: github.com/sidelock/sidelock/tools/bench
BenchmarkUncontended/masters=3/sidelock-2         	     100	   600000 ns/op	       500 p50-µs
BenchmarkUncontended/masters=3/sidelock-2         	     100	   600000 ns/op	       400 p50-µs
BenchmarkUncontended/masters=3/sidelock-2         	     100	   600000 ns/op	       450 p50-µs
BenchmarkUncontended/masters=3/redsync-2          	     100	   300000 ns/op	       300 p50-µs
BenchmarkSidecarIdleRSS-2                         	       1	        1 ns/op	        12 idle-RSS-MB	 30 10k-held-RSS-MB
BenchmarkSidecarIdleRSS-2                         	       1	        1 ns/op	        14 idle-RSS-MB	 50 10k-held-RSS-MB
PASS
ok  	github.com/sidelock/sidelock/tools/bench	10.0s
`
	var warn bytes.Buffer
	r, err := benchread.Read(strings.NewReader(out), "latest.txt", &warn)
	if err != nil || warn.Len() > 0 {
		t.Fatalf("read: %v, warnings %q", err, warn.String())
	}
	var table bytes.Buffer
	write(&table, r)
	for _, want := range []string{
		// the median of three over the one run
		"| uncontended acquire+release p50, 3 masters: sidelock HTTP / redsync in-process | 1.5 × | ≤ 0.75 × | **no** | 450 / 300 p50-µs |",
		// the median of an even count is the mean of the middle two, as benchstat's
		"| idle RSS | 13 MB | ≤ 15 MB | yes | 13 idle-RSS-MB |",
		"| RSS holding 10k locks | 40 MB | ≤ 40 MB | yes | 40 10k-held-RSS-MB |",
		"|   same, 1 master | not measured | | | |",
	} {
		if !strings.Contains(table.String(), want+"\n") {
			t.Errorf("table lacks\n%s\nin\n%s", want, table.String())
		}
	}
}
