package nodetest

import (
	"testing"
	"time"

	"github.com/sidelock/sidelock/pkg/redlock"
)

// clockTolerance bounds how far the node's clock (a local redis-server, or
// the test's own) may be from the test's when checking a clock floor.
const clockTolerance = time.Minute

// fencer returns the node as a Fencer, or skips the test.
func (s *suite) fencer(t *testing.T) redlock.Fencer {
	t.Helper()
	f, ok := s.node.(redlock.Fencer)
	if !ok {
		t.Skip("the node does not implement redlock.Fencer")
	}
	return f
}

func (s *suite) fenceKey() string { return redlock.FenceKey(s.key) }

func (s *suite) acquireFenced(t *testing.T, f redlock.Fencer, value string) int64 {
	t.Helper()
	ok, _, floor, err := f.AcquireFenced(s.ctx, s.key, s.fenceKey(), value, longTTL)
	if err != nil || !ok {
		t.Fatalf("AcquireFenced: acquired=%v err=%v", ok, err)
	}
	return floor
}

func (s *suite) commit(t *testing.T, f redlock.Fencer, value string, fence int64, retention time.Duration) bool {
	t.Helper()
	ok, err := f.CommitFence(s.ctx, s.key, s.fenceKey(), value, fence, retention)
	if err != nil {
		t.Fatalf("CommitFence: %v", err)
	}
	return ok
}

func (s *suite) counter(t *testing.T, f redlock.Fencer) int64 {
	t.Helper()
	_, _, fence, err := f.GetFenced(s.ctx, s.key, s.fenceKey())
	if err != nil {
		t.Fatalf("GetFenced: %v", err)
	}
	return fence
}

// Without a counter, the floor is the node's clock in microseconds.
func testFenceFloorFollowsClock(t *testing.T, s *suite) {
	f := s.fencer(t)
	floor := s.acquireFenced(t, f, "A")
	if d := time.Duration(floor-time.Now().UnixMicro()) * time.Microsecond; d < -clockTolerance || d > clockTolerance {
		t.Fatalf("floor %d is %v from the clock in µs", floor, d)
	}
	if got := s.counter(t, f); got != 0 {
		t.Fatalf("counter before any commit = %d, want 0", got)
	}
}

// A commit raises the counter but never lowers it, and a counter above
// the clock becomes the floor.
func testFenceCommitKeepsLarger(t *testing.T, s *suite) {
	f := s.fencer(t)
	future := s.acquireFenced(t, f, "A") + int64(time.Hour/time.Microsecond)
	if !s.commit(t, f, "A", future, longTTL) {
		t.Fatal("commit by the holder refused")
	}
	if !s.commit(t, f, "A", future-5, longTTL) {
		t.Fatal("second commit by the holder refused")
	}
	if got := s.counter(t, f); got != future {
		t.Fatalf("counter = %d, want %d (the larger)", got, future)
	}
	if _, err := s.node.Release(s.ctx, s.key, "A"); err != nil {
		t.Fatal(err)
	}
	if floor := s.acquireFenced(t, f, "B"); floor != future {
		t.Fatalf("floor = %d, want the counter %d above the clock", floor, future)
	}
}

// Only the key's holder may commit.
func testFenceCommitNeedsKey(t *testing.T, s *suite) {
	f := s.fencer(t)
	floor := s.acquireFenced(t, f, "A")
	if s.commit(t, f, "B", floor+1, longTTL) {
		t.Fatal("a non-holder committed a fence")
	}
	if _, err := s.node.Release(s.ctx, s.key, "A"); err != nil {
		t.Fatal(err)
	}
	if s.commit(t, f, "A", floor+1, longTTL) {
		t.Fatal("a former holder committed a fence")
	}
	if got := s.counter(t, f); got != 0 {
		t.Fatalf("counter = %d after refused commits", got)
	}
}

// The counter is dropped after its retention, bounding memory.
func testFenceCounterExpires(t *testing.T, s *suite) {
	f := s.fencer(t)
	floor := s.acquireFenced(t, f, "A")
	if !s.commit(t, f, "A", floor+1, shortTTL) {
		t.Fatal("commit refused")
	}
	deadline := time.Now().Add(expiryDeadline)
	for s.counter(t, f) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("counter still there %v after a %v retention", expiryDeadline, shortTTL)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A key held by another value yields no floor.
func testFenceHeldByOther(t *testing.T, s *suite) {
	f := s.fencer(t)
	s.acquireFenced(t, f, "A")
	ok, holderTTL, floor, err := f.AcquireFenced(s.ctx, s.key, s.fenceKey(), "B", longTTL)
	if err != nil || ok || floor != 0 || holderTTL <= 0 {
		t.Fatalf("AcquireFenced by another: ok=%v ttl=%v floor=%d err=%v", ok, holderTTL, floor, err)
	}
}

// oneRound returns the node as a OneRoundFencer, or skips the test.
func (s *suite) oneRound(t *testing.T) redlock.OneRoundFencer {
	t.Helper()
	f, ok := s.node.(redlock.OneRoundFencer)
	if !ok {
		t.Skip("the node does not implement redlock.OneRoundFencer")
	}
	return f
}

func (s *suite) acquireCommitted(t *testing.T, f redlock.OneRoundFencer, value string, above int64) int64 {
	t.Helper()
	ok, _, fence, err := f.AcquireCommitted(s.ctx, s.key, s.fenceKey(), value, longTTL, above, longTTL)
	if err != nil || !ok {
		t.Fatalf("AcquireCommitted: acquired=%v err=%v", ok, err)
	}
	return fence
}

// Taking a key in one round commits its fence at once: the counter is the
// fence, every later grant's fence is larger, and a fence asked to be
// above a given floor is that floor plus one when the floor is larger.
func testFenceOneRoundCommits(t *testing.T, s *suite) {
	f := s.oneRound(t)
	first := s.acquireCommitted(t, f, "A", 0)
	if got := s.counter(t, f); got != first {
		t.Fatalf("counter after a one-round grant = %d, want its fence %d", got, first)
	}
	if _, err := s.node.Release(s.ctx, s.key, "A"); err != nil {
		t.Fatal(err)
	}
	second := s.acquireCommitted(t, f, "B", 0)
	if second <= first {
		t.Fatalf("the next grant's fence %d is not above %d", second, first)
	}
	if floor := s.acquireFenced(t, f, "B"); floor < second {
		t.Fatalf("a two-round grant reads the floor %d, below the committed %d", floor, second)
	}
	above := second + int64(time.Hour/time.Microsecond)
	if got := s.acquireCommitted(t, f, "B", above); got != above+1 {
		t.Fatalf("fence asked above %d = %d, want %d", above, got, above+1)
	}
	if got := s.counter(t, f); got != above+1 {
		t.Fatalf("counter = %d, want %d", got, above+1)
	}
}

// A key held by another is neither taken nor has its counter moved.
func testFenceOneRoundNeedsTheKey(t *testing.T, s *suite) {
	f := s.oneRound(t)
	held := s.acquireCommitted(t, f, "A", 0)
	ok, holderTTL, fence, err := f.AcquireCommitted(s.ctx, s.key, s.fenceKey(), "B", longTTL, held+1000, longTTL)
	if err != nil || ok || fence != 0 || holderTTL <= 0 {
		t.Fatalf("AcquireCommitted of a held key: acquired=%v holderTTL=%v fence=%d err=%v; want refused with the holder's ttl", ok, holderTTL, fence, err)
	}
	if got := s.counter(t, f); got != held {
		t.Fatalf("counter = %d after a refused grant, want %d", got, held)
	}
}

func (s *suite) acquireProposed(t *testing.T, f redlock.OneRoundFencer, value string, proposal int64) (int64, bool) {
	t.Helper()
	ok, _, fence, committed, err := f.AcquireProposed(s.ctx, s.key, s.fenceKey(), value, longTTL, proposal, longTTL)
	if err != nil || !ok {
		t.Fatalf("AcquireProposed: acquired=%v err=%v", ok, err)
	}
	return fence, committed
}

// A proposal above the floor is committed as the key is taken: the counter
// is the proposal. One at or below the floor takes the key all the same
// but commits nothing, and the answer is the floor, so the caller can
// commit above it in a second round.
func testFenceProposalAboveTheFloor(t *testing.T, s *suite) {
	f := s.oneRound(t)
	floor := s.acquireFenced(t, f, "A")
	proposal := floor + int64(time.Hour/time.Microsecond)
	if fence, committed := s.acquireProposed(t, f, "A", proposal); !committed || fence != proposal {
		t.Fatalf("a proposal above the floor %d: fence %d committed %v, want %d committed", floor, fence, committed, proposal)
	}
	if got := s.counter(t, f); got != proposal {
		t.Fatalf("counter = %d, want the committed proposal %d", got, proposal)
	}
	if _, err := s.node.Release(s.ctx, s.key, "A"); err != nil {
		t.Fatal(err)
	}
	for _, low := range []int64{proposal, proposal - 1, 1} {
		fence, committed := s.acquireProposed(t, f, "B", low)
		if committed || fence != proposal {
			t.Fatalf("a proposal %d not above the floor %d: fence %d committed %v, want the floor, uncommitted", low, proposal, fence, committed)
		}
	}
	if got := s.counter(t, f); got != proposal {
		t.Fatalf("counter = %d after refused proposals, want %d", got, proposal)
	}
}

// A key held by another is neither taken nor has its counter moved.
func testFenceProposalNeedsTheKey(t *testing.T, s *suite) {
	f := s.oneRound(t)
	held := s.acquireCommitted(t, f, "A", 0)
	ok, holderTTL, fence, committed, err := f.AcquireProposed(s.ctx, s.key, s.fenceKey(), "B", longTTL, held+1000, longTTL)
	if err != nil || ok || committed || fence != 0 || holderTTL <= 0 {
		t.Fatalf("AcquireProposed of a held key: acquired=%v holderTTL=%v fence=%d committed=%v err=%v; want refused with the holder's ttl", ok, holderTTL, fence, committed, err)
	}
	if got := s.counter(t, f); got != held {
		t.Fatalf("counter = %d after a refused grant, want %d", got, held)
	}
}
