package main

import (
	"runtime/debug"
	"testing"
)

// A binary from `go install …@v1.2.3` reports v1.2.3; a stamped build keeps
// its stamp; a build from a work tree says dev.
func TestReleaseVersion(t *testing.T) {
	info := func(v string) func() (*debug.BuildInfo, bool) {
		return func() (*debug.BuildInfo, bool) { return &debug.BuildInfo{Main: debug.Module{Version: v}}, true }
	}
	none := func() (*debug.BuildInfo, bool) { return nil, false }
	for i, c := range []struct {
		stamped string
		info    func() (*debug.BuildInfo, bool)
		want    string
	}{
		{"dev", info("v1.2.3"), "v1.2.3"},
		{"v2.0.0", info("v1.2.3"), "v2.0.0"},
		{"dev", info("(devel)"), "dev"},
		{"dev", info(""), "dev"},
		{"dev", none, "dev"},
	} {
		if got := releaseVersion(c.stamped, c.info); got != c.want {
			t.Errorf("case %d: releaseVersion(%q, …) = %q, want %q", i, c.stamped, got, c.want)
		}
	}
}
