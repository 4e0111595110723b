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

// ReleaseMany releases own keys and leaves others' and absent ones alone,
// one answer per item, in order, announcing each release it made.
func testReleaseMany(t *testing.T, s *suite) {
	b, ok := s.node.(redlock.BatchReleaser)
	if !ok {
		t.Skip("the node does not implement redlock.BatchReleaser")
	}
	own, own2, absent, others := s.key+"/own", s.key+"/own2", s.key+"/absent", s.key+"/others"
	s.mustAcquire(t, own, "A", longTTL)
	s.mustAcquire(t, own2, "A", longTTL)
	s.mustAcquire(t, others, "B", longTTL)
	got, err := b.ReleaseMany(s.ctx, []redlock.ReleaseItem{
		{Key: own, Value: "A"}, {Key: absent, Value: "A"}, {Key: others, Value: "A"}, {Key: own2, Value: "A"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []bool{true, false, false, true}; !slices.Equal(got, want) {
		t.Fatalf("ReleaseMany = %v, want %v (released, absent, another's, released)", got, want)
	}
	s.wantAbsent(t, own)
	s.wantAbsent(t, own2)
	s.wantAbsent(t, absent)
	if v, _, err := s.node.Get(s.ctx, others); err != nil || v != "B" {
		t.Errorf("another's key: %q %v, want it kept", v, err)
	}
}

// AcquireProposedMany takes each item as AcquireProposed would: a free key
// taken with its proposal committed, a held key refused with its holder's
// ttl, a proposal not above the floor taken but not committed.
func testAcquireProposedMany(t *testing.T, s *suite) {
	b, ok := s.node.(redlock.BatchProposer)
	if !ok {
		t.Skip("the node does not implement redlock.BatchProposer")
	}
	f := s.oneRound(t)
	free, held, low := s.key+"/free", s.key+"/held", s.key+"/low"
	s.mustAcquire(t, held, "B", longTTL)
	floor, err := f.AcquireProposed(s.ctx, low, redlock.FenceKey(low), "X", longTTL, 1, longTTL)
	if err != nil || !floor.Acquired {
		t.Fatalf("AcquireProposed: %+v %v", floor, err)
	}
	if _, err := s.node.Release(s.ctx, low, "X"); err != nil {
		t.Fatal(err)
	}
	proposal := floor.Fence + ahead
	item := func(key string) redlock.ProposalItem {
		return redlock.ProposalItem{Key: key, FenceKey: redlock.FenceKey(key), Value: "A", TTL: longTTL, Proposal: proposal, Retention: longTTL}
	}
	lowItem := item(low)
	lowItem.Proposal = 1
	got, err := b.AcquireProposedMany(s.ctx, []redlock.ProposalItem{item(free), item(held), lowItem})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("AcquireProposedMany: %d answers for 3 items", len(got))
	}
	if p := got[0]; !p.Acquired || !p.Committed || p.Fence != proposal || p.Prev != 0 {
		t.Errorf("free key: %+v, want taken with the proposal %d committed over no counter", p, proposal)
	}
	if p := got[1]; p.Acquired || p.Committed || p.HolderTTL <= 0 {
		t.Errorf("held key: %+v, want refused with the holder's ttl", p)
	}
	if p := got[2]; !p.Acquired || p.Committed || p.Fence < floor.Fence {
		t.Errorf("a proposal below the floor: %+v, want taken, uncommitted, with a floor of at least %d", p, floor.Fence)
	}
	for key, want := range map[string]string{free: "A", held: "B", low: "A"} {
		if v, _, err := s.node.Get(s.ctx, key); err != nil || v != want {
			t.Errorf("%s: %q %v, want %q", key, v, err, want)
		}
	}
}
