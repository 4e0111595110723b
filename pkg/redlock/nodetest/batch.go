package nodetest

import (
	"slices"
	"testing"

	"github.com/sidelock/sidelock/pkg/redlock"
)

// ExtendMany extends own keys, leaves absent ones absent and refuses others',
// one verdict per item, in order.
func testExtendMany(t *testing.T, s *suite) {
	b, ok := s.node.(redlock.BatchExtender)
	if !ok {
		t.Skip("the node does not implement redlock.BatchExtender")
	}
	own, absent, others := s.key+"/own", s.key+"/absent", s.key+"/others"
	if ok, _, err := s.node.Acquire(s.ctx, own, "A", shortTTL); !ok || err != nil {
		t.Fatalf("Acquire: %v %v", ok, err)
	}
	if ok, _, err := s.node.Acquire(s.ctx, others, "B", longTTL); !ok || err != nil {
		t.Fatalf("Acquire: %v %v", ok, err)
	}
	got, err := b.ExtendMany(s.ctx, []redlock.ExtendItem{
		{Key: own, Value: "A", TTL: longTTL},
		{Key: absent, Value: "A", TTL: longTTL},
		{Key: others, Value: "A", TTL: longTTL},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []redlock.ExtendOutcome{redlock.ExtendRenewed, redlock.ExtendMissing, redlock.ExtendHeldByOther}
	if !slices.Equal(got, want) {
		t.Fatalf("ExtendMany = %v, want %v (renewed, missing, held by another)", got, want)
	}
	s.wantAbsent(t, absent)
	for key, want := range map[string]string{own: "A", others: "B"} {
		if v, ttl, err := s.node.Get(s.ctx, key); err != nil || v != want || ttl <= shortTTL {
			t.Errorf("%s: %q ttl %v err %v, want %q with the long ttl", key, v, ttl, err, want)
		}
	}
}
