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

// ahead is how far above the clock a proposal meant to be above the fence
// floor is put: the floor is the masters' clock in microseconds at least, so
// a proposal only a millisecond ahead of a grant made just before can fall
// below it on a busy machine (a CI run's TestConformance/HandOver, since
// replaced by TenureHandOver, did).
const ahead = int64(time.Hour / time.Microsecond)

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

func (s *suite) acquireProposed(t *testing.T, f redlock.OneRoundFencer, value string, proposal int64) redlock.Proposal {
	t.Helper()
	p, err := f.AcquireProposed(s.ctx, s.key, s.fenceKey(), value, longTTL, proposal, longTTL)
	if err != nil || !p.Acquired {
		t.Fatalf("AcquireProposed: %+v, %v", p, err)
	}
	return p
}

// A proposal above the floor is committed as the key is taken: the counter
// is the proposal, and the answer names the counter it replaced. One at or
// below the floor takes the key all the same but commits nothing, and the
// answer is the floor, so the caller can commit above it in a second round.
func testFenceProposalAboveTheFloor(t *testing.T, s *suite) {
	f := s.oneRound(t)
	floor := s.acquireFenced(t, f, "A")
	if got := s.acquireProposed(t, f, "A", floor+ahead); !got.Committed || got.Prev != 0 {
		t.Fatalf("a first proposal: %+v, want committed over no counter", got)
	}
	proposal := floor + 2*ahead
	if got := s.acquireProposed(t, f, "A", proposal); !got.Committed || got.Fence != proposal || got.Prev != floor+ahead {
		t.Fatalf("a proposal above the floor %d: %+v, want %d committed over %d", floor, got, proposal, floor+ahead)
	}
	if got := s.counter(t, f); got != proposal {
		t.Fatalf("counter = %d, want the committed proposal %d", got, proposal)
	}
	if _, err := s.node.Release(s.ctx, s.key, "A"); err != nil {
		t.Fatal(err)
	}
	for _, low := range []int64{proposal, proposal - 1, 1} {
		if got := s.acquireProposed(t, f, "B", low); got.Committed || got.Fence != proposal {
			t.Fatalf("a proposal %d not above the floor %d: %+v, want the floor, uncommitted", low, proposal, got)
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
	p, err := f.AcquireProposed(s.ctx, s.key, s.fenceKey(), "B", longTTL, held+1000, longTTL)
	if err != nil || p.Acquired || p.Committed || p.Fence != 0 || p.HolderTTL <= 0 {
		t.Fatalf("AcquireProposed of a held key: %+v, %v; want refused with the holder's ttl", p, err)
	}
	if got := s.counter(t, f); got != held {
		t.Fatalf("counter = %d after a refused grant, want %d", got, held)
	}
}

// Withdrawing a proposal releases the key and puts back the counter it
// replaced (none: no counter), but only while the counter is still that
// proposal and the key still this value's.
func testFenceProposalWithdrawn(t *testing.T, s *suite) {
	f := s.oneRound(t)
	withdraw := func(value string, p redlock.Proposal) bool {
		t.Helper()
		deleted, err := f.WithdrawProposal(s.ctx, s.key, s.fenceKey(), value, p.Fence, p.Prev, longTTL)
		if err != nil {
			t.Fatal(err)
		}
		return deleted
	}
	floor := s.acquireFenced(t, f, "A")
	first := s.acquireProposed(t, f, "A", floor+ahead)
	if !withdraw("A", first) || s.counter(t, f) != 0 {
		t.Fatalf("withdrawn over no counter: counter %d, want none", s.counter(t, f))
	}
	if v, _, err := s.node.Get(s.ctx, s.key); err != nil || v != "" {
		t.Fatalf("key after the withdrawal: %q, %v; want gone", v, err)
	}
	committed := s.acquireCommitted(t, f, "B", 0)
	second := s.acquireProposed(t, f, "B", committed+ahead)
	if withdraw("C", second) || s.counter(t, f) != second.Fence {
		t.Fatalf("withdrawn by another value: counter %d, want %d untouched", s.counter(t, f), second.Fence)
	}
	if !withdraw("B", second) || s.counter(t, f) != committed {
		t.Fatalf("withdrawn: counter %d, want the replaced %d back", s.counter(t, f), committed)
	}
	third := s.acquireProposed(t, f, "D", committed+ahead)
	if ok, err := f.CommitFence(s.ctx, s.key, s.fenceKey(), "D", third.Fence+1, longTTL); err != nil || !ok {
		t.Fatalf("commit: %v %v", ok, err)
	}
	if !withdraw("D", third) || s.counter(t, f) != third.Fence+1 {
		t.Fatalf("withdrawn after a commit above it: counter %d, want %d kept", s.counter(t, f), third.Fence+1)
	}
}
