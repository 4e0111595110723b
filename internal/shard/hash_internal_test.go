package shard

import (
	"hash/fnv"
	"testing"
)

func TestScoreHashesWithFNV1a(t *testing.T) {
	for _, c := range []struct{ name, key string }{{"a", "sidelock:x"}, {"", ""}, {"group-1", "sidelock:jobs/nightly"}} {
		h := fnv.New64a()
		_, _ = h.Write([]byte(c.name + "\x00" + c.key))
		if got, want := fnv1a(c.name, c.key), h.Sum64(); got != want {
			t.Errorf("fnv1a(%q, %q) = %x, hash/fnv says %x", c.name, c.key, got, want)
		}
	}
}

func BenchmarkPick(b *testing.B) {
	groups := []string{"a", "b", "c", "d"}
	b.ReportAllocs()
	for b.Loop() {
		Pick(groups, "sidelock:orders/nightly-export")
	}
}
