// Package nodetest is the conformance suite every redlock.Node must pass.
// The Redlock algorithm's safety rests on each node keeping exactly the
// promises documented on redlock.Node, so every implementation, real or
// in-memory, runs the same checks:
//
//	func TestConformance(t *testing.T) {
//		nodetest.Run(t, func(t *testing.T) redlock.Node { return memnode.New(t.Name()) })
//	}
//
// The suite runs against real time with short ttls and polls with generous
// deadlines, because it also runs under -race on busy CI machines.
package nodetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sidelock/sidelock/pkg/redlock"
)

const (
	// callTimeout bounds each subtest's calls so a hanging node fails the
	// test instead of stalling it until go test's global timeout.
	callTimeout = 10 * time.Second

	// longTTL is a ttl no subtest outlives, so keys it sets never expire
	// while checked.
	longTTL = 10 * time.Second

	// shortTTL is a ttl the expiry subtests wait out.
	shortTTL = 100 * time.Millisecond

	// expiryDeadline bounds how long an expired key may stay visible. Redis
	// expires lazily on access, so a correct node is late only by scheduling
	// noise; the slack is for loaded machines.
	expiryDeadline = 5 * time.Second

	// clockSlack tolerates the node's clock and the test's clock ticking in
	// different millisecond buckets when checking a key did not expire early.
	clockSlack = 10 * time.Millisecond

	// promptly bounds how long a call with a finished context may take.
	promptly = 2 * time.Second
)

// Run checks that the nodes built by newNode behave as redlock.Node
// documents and, if they implement redlock.ReleaseWatcher, that they
// announce releases. newNode is called once per subtest; the node it
// returns is closed when that subtest ends. Subtests run in parallel and
// each uses its own keys, so the nodes may share one backing store (one
// Redis server).
func Run(t *testing.T, newNode func(t *testing.T) redlock.Node) {
	for _, tc := range []struct {
		name string
		test func(t *testing.T, s *suite)
	}{
		{"Addr", testAddr},
		{"Ping", testPing},
		{"GetAbsent", testGetAbsent},
		{"AcquireFreeKey", testAcquireFreeKey},
		{"AcquireHeldByOther", testAcquireHeldByOther},
		{"ReacquireOwnIsIdempotentAndRefreshesTTL", testReacquireOwn},
		{"ExtendOwn", testExtendOwn},
		{"ExtendAbsentWritesNothing", testExtendAbsentWritesNothing},
		{"ExtendOthersFails", testExtendOthersFails},
		{"ReleaseOwn", testReleaseOwn},
		{"ReleaseOthersFails", testReleaseOthersFails},
		{"ReleaseAbsent", testReleaseAbsent},
		{"KeysExpire", testKeysExpire},
		{"ExtendedKeyExpires", testExtendedKeyExpires},
		{"SubMillisecondTTL", testSubMillisecondTTL},
		{"OddBytesRoundTrip", testOddBytes},
		{"KeysAreIndependent", testKeysAreIndependent},
		{"ConcurrentAcquireHasOneWinner", testConcurrentAcquire},
		{"CancelledContext", testCancelledContext},
		{"ExpiredContext", testExpiredContext},
		// Skipped for nodes that do not implement redlock.ReleaseWatcher.
		{"WatchNotifiesOnRelease", testWatchNotifies},
		{"WatchIgnoresOtherKeys", testWatchIgnoresOtherKeys},
		{"WatchIgnoresExpiryAndFailedRelease", testWatchIgnoresNonReleases},
		{"WatchersShareKeyAndCancelAlone", testWatchersAndCancel},
		// Skipped for nodes that do not implement redlock.Fencer.
		{"FenceFloorFollowsTheClock", testFenceFloorFollowsClock},
		{"FenceCommitKeepsTheLarger", testFenceCommitKeepsLarger},
		{"FenceCommitNeedsTheKey", testFenceCommitNeedsKey},
		{"FenceCounterExpires", testFenceCounterExpires},
		{"FenceNotReadForAHeldKey", testFenceHeldByOther},
		// Skipped for nodes that do not implement redlock.OneRoundFencer.
		{"FenceOneRoundCommits", testFenceOneRoundCommits},
		{"FenceOneRoundNeedsTheKey", testFenceOneRoundNeedsTheKey},
		{"FenceProposalCommitsOnlyAboveTheFloor", testFenceProposalAboveTheFloor},
		{"FenceProposalNeedsTheKey", testFenceProposalNeedsTheKey},
		{"FenceProposalWithdrawn", testFenceProposalWithdrawn},
		// Skipped for nodes that do not implement redlock.TenureNode.
		{"TenureTakeReservesABlock", testTenureTakeReservesABlock},
		{"TenureTakeAtOnce", testTenureTakeAtOnce},
		{"TenureCommit", testTenureCommit},
		{"TenureRefusalLeavesAMark", testTenureRefusalLeavesAMark},
		{"TenureMarkRule", testTenureMarkRule},
		{"TenureHandOver", testTenureHandOver},
		{"TenureIdleHolder", testTenureIdleHolder},
		{"TenureNote", testTenureNote},
		{"TenureRelease", testTenureRelease},
		{"TenureUnfenced", testTenureUnfenced},
		// Skipped for nodes that do not implement redlock.BatchExtender.
		{"ExtendManyIsExtendForEach", testExtendMany},
		// Skipped for nodes that do not implement redlock.BatchReleaser or BatchProposer.
		{"ReleaseManyIsReleaseForEach", testReleaseMany},
		{"AcquireProposedManyIsAcquireProposedForEach", testAcquireProposedMany},
		// Skipped for nodes that do not implement redlock.MemberRecorder.
		{"MembersRecorded", testMembersRecorded},
		{"MembersTwoListsLive", testMembersTwoListsLive},
		{"MembersExpire", testMembersExpire},
		{"MembersRefreshNeverShortens", testMembersRefresh},
		{"MembersKeyVanishes", testMembersKeyVanishes},
		{"MembersFinishedContext", testMembersFinishedContext},
		{"ReadWrite", testReadWrite}, // subtests skipped for nodes that are not redlock.RWNode
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			node := newNode(t)
			t.Cleanup(func() {
				if err := node.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
			})
			ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
			t.Cleanup(cancel)
			tc.test(t, &suite{node: node, ctx: ctx, key: keyFor(t)})
		})
	}
}

// suite bundles one subtest's node, context and key with assertion helpers.
type suite struct {
	node redlock.Node
	ctx  context.Context
	key  string
}

// keyFor makes a key unique to the subtest (nodes may share a server) that
// also exercises separators and non-ASCII bytes on every call.
func keyFor(t *testing.T) string {
	return "sidelock:nodetest/" + t.Name() + "/ключ🔒"
}

func (s *suite) acquire(t *testing.T, key, value string, ttl time.Duration) (bool, time.Duration) {
	t.Helper()
	acquired, holderTTL, err := s.node.Acquire(s.ctx, key, value, ttl)
	if err != nil {
		t.Fatalf("Acquire(%q, %q, %v): %v", key, value, ttl, err)
	}
	return acquired, holderTTL
}

func (s *suite) mustAcquire(t *testing.T, key, value string, ttl time.Duration) {
	t.Helper()
	acquired, holderTTL := s.acquire(t, key, value, ttl)
	if !acquired {
		t.Fatalf("Acquire(%q, %q, %v) = false (holder ttl %v), want true", key, value, ttl, holderTTL)
	}
	if holderTTL != 0 {
		t.Errorf("Acquire(%q, %q) succeeded with holderTTL %v, want 0", key, value, holderTTL)
	}
}

// extend reports whether an Extend renewed value's hold on key.
func (s *suite) extend(t *testing.T, key, value string, ttl time.Duration) bool {
	t.Helper()
	return s.extendOutcome(t, key, value, ttl) == redlock.ExtendRenewed
}

func (s *suite) extendOutcome(t *testing.T, key, value string, ttl time.Duration) redlock.ExtendOutcome {
	t.Helper()
	outcome, err := s.node.Extend(s.ctx, key, value, ttl)
	if err != nil {
		t.Fatalf("Extend(%q, %q, %v): %v", key, value, ttl, err)
	}
	return outcome
}

func (s *suite) release(t *testing.T, key, value string) bool {
	t.Helper()
	released, err := s.node.Release(s.ctx, key, value)
	if err != nil {
		t.Fatalf("Release(%q, %q): %v", key, value, err)
	}
	return released
}

func (s *suite) get(t *testing.T, key string) (string, time.Duration) {
	t.Helper()
	value, ttl, err := s.node.Get(s.ctx, key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	return value, ttl
}

// wantHeld checks key holds value with a remaining ttl in (minTTL, longTTL].
func (s *suite) wantHeld(t *testing.T, key, value string, minTTL time.Duration) {
	const maxTTL = longTTL
	t.Helper()
	got, ttl := s.get(t, key)
	if got != value {
		t.Fatalf("Get(%q) value = %q, want %q", key, got, value)
	}
	if ttl <= minTTL || ttl > maxTTL {
		t.Errorf("Get(%q) ttl = %v, want in (%v, %v]", key, ttl, minTTL, maxTTL)
	}
}

func (s *suite) wantAbsent(t *testing.T, key string) {
	t.Helper()
	if got, ttl := s.get(t, key); got != "" || ttl != 0 {
		t.Fatalf("Get(%q) = %q, %v; want absent (\"\", 0)", key, got, ttl)
	}
}

// waitAbsent polls until key is gone and returns when it first saw it gone.
func (s *suite) waitAbsent(t *testing.T, key string) time.Time {
	t.Helper()
	deadline := time.Now().Add(expiryDeadline)
	for {
		value, _ := s.get(t, key)
		now := time.Now()
		if value == "" {
			return now
		}
		if now.After(deadline) {
			t.Fatalf("key %q still holds %q %v after it should have expired", key, value, expiryDeadline)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func testAddr(t *testing.T, s *suite) {
	if s.node.Addr() == "" {
		t.Error("Addr() is empty; it must name the node in reports")
	}
}

func testPing(t *testing.T, s *suite) {
	if err := s.node.Ping(s.ctx); err != nil {
		t.Fatalf("Ping: %v", err)
	}
}

func testGetAbsent(t *testing.T, s *suite) {
	s.wantAbsent(t, s.key)
}

func testAcquireFreeKey(t *testing.T, s *suite) {
	s.mustAcquire(t, s.key, "A", longTTL)
	s.wantHeld(t, s.key, "A", 0)
}

func testAcquireHeldByOther(t *testing.T, s *suite) {
	s.mustAcquire(t, s.key, "A", longTTL)

	acquired, holderTTL := s.acquire(t, s.key, "B", 2*longTTL)
	if acquired {
		t.Fatal("Acquire by B succeeded while A holds the key")
	}
	if holderTTL <= 0 || holderTTL > longTTL {
		t.Errorf("holderTTL = %v, want A's remaining ttl in (0, %v]", holderTTL, longTTL)
	}
	// B's attempt must neither take the key nor touch A's ttl.
	s.wantHeld(t, s.key, "A", 0)
}

func testReacquireOwn(t *testing.T, s *suite) {
	const firstTTL = 2 * time.Second
	s.mustAcquire(t, s.key, "A", firstTTL)
	// A retry after a lost reply must succeed and restart the ttl the
	// caller now counts its validity from.
	s.mustAcquire(t, s.key, "A", longTTL)
	s.wantHeld(t, s.key, "A", firstTTL)
}

func testExtendOwn(t *testing.T, s *suite) {
	const firstTTL = 2 * time.Second
	s.mustAcquire(t, s.key, "A", firstTTL)
	if got := s.extendOutcome(t, s.key, "A", longTTL); got != redlock.ExtendRenewed {
		t.Fatalf("Extend by the holder = %d, want ExtendRenewed", got)
	}
	s.wantHeld(t, s.key, "A", firstTTL)
}

// An absent key is never written back by Extend: it may have lapsed and
// been granted and released meanwhile.
func testExtendAbsentWritesNothing(t *testing.T, s *suite) {
	if got := s.extendOutcome(t, s.key, "A", longTTL); got != redlock.ExtendMissing {
		t.Fatalf("Extend of an absent key = %d, want ExtendMissing", got)
	}
	s.wantAbsent(t, s.key)
}

func testExtendOthersFails(t *testing.T, s *suite) {
	s.mustAcquire(t, s.key, "A", longTTL)
	if got := s.extendOutcome(t, s.key, "B", 2*longTTL); got != redlock.ExtendHeldByOther {
		t.Fatalf("Extend by B while A holds the key = %d, want ExtendHeldByOther", got)
	}
	s.wantHeld(t, s.key, "A", 0)
}

func testReleaseOwn(t *testing.T, s *suite) {
	s.mustAcquire(t, s.key, "A", longTTL)
	if !s.release(t, s.key, "A") {
		t.Fatal("Release by the holder = false, want true")
	}
	s.wantAbsent(t, s.key)
	s.mustAcquire(t, s.key, "B", longTTL)
}

func testReleaseOthersFails(t *testing.T, s *suite) {
	s.mustAcquire(t, s.key, "A", longTTL)
	if s.release(t, s.key, "B") {
		t.Fatal("Release by B succeeded while A holds the key")
	}
	s.wantHeld(t, s.key, "A", 0)
}

func testReleaseAbsent(t *testing.T, s *suite) {
	if s.release(t, s.key, "A") {
		t.Fatal("Release of an absent key = true, want false")
	}
	s.wantAbsent(t, s.key)
}

func testKeysExpire(t *testing.T, s *suite) {
	start := time.Now()
	s.mustAcquire(t, s.key, "A", shortTTL)
	gone := s.waitAbsent(t, s.key)
	if lived := gone.Sub(start); lived < shortTTL-clockSlack {
		t.Errorf("key expired after %v, before its ttl %v", lived, shortTTL)
	}
	// An expired holder no longer owns anything...
	if s.release(t, s.key, "A") {
		t.Error("Release by the expired holder = true, want false")
	}
	// ...and anyone may take the key.
	s.mustAcquire(t, s.key, "B", longTTL)
}

func testExtendedKeyExpires(t *testing.T, s *suite) {
	s.mustAcquire(t, s.key, "A", longTTL)
	start := time.Now()
	// Extend may also shorten: the new ttl replaces the old one.
	if !s.extend(t, s.key, "A", shortTTL) {
		t.Fatal("Extend by the holder = false, want true")
	}
	gone := s.waitAbsent(t, s.key)
	if lived := gone.Sub(start); lived < shortTTL-clockSlack {
		t.Errorf("key expired %v after Extend, before its ttl %v", lived, shortTTL)
	}
}

func testSubMillisecondTTL(t *testing.T, s *suite) {
	// Redis expiries are whole milliseconds; shorter ttls round up to 1ms
	// rather than being rejected or meaning "no expiry".
	for i, ttl := range []time.Duration{0, time.Microsecond, 999 * time.Microsecond} {
		key := fmt.Sprintf("%s/%d", s.key, i)
		s.mustAcquire(t, key, "A", longTTL)
		if !s.extend(t, key, "A", ttl) {
			t.Fatalf("Extend(ttl=%v) by the holder = false, want true", ttl)
		}
		s.waitAbsent(t, key)
		s.mustAcquire(t, key, "A", ttl)
		s.waitAbsent(t, key)
	}
}

func testOddBytes(t *testing.T, s *suite) {
	odd := []string{
		"colon:separated:parts",
		"slash/separated/path",
		"unicode ключ 锁 🔒",
		"space tab\tnewline\ncr\r",
		"quote\"apostrophe'backslash\\",
		"nul\x00byte",
		"invalid utf-8 \xff\xfe",
	}
	for i, raw := range odd {
		key, value := fmt.Sprintf("%s/%d/%s", s.key, i, raw), "value "+raw
		s.mustAcquire(t, key, value, longTTL)
		s.wantHeld(t, key, value, 0)
		if s.release(t, key, value[:len(value)-1]) {
			t.Errorf("Release with a truncated value of %q = true, want false", value)
		}
		if !s.release(t, key, value) {
			t.Errorf("Release(%q, %q) = false, want true", key, value)
		}
		s.wantAbsent(t, key)
	}
}

func testKeysAreIndependent(t *testing.T, s *suite) {
	other := s.key + ":other"
	s.mustAcquire(t, s.key, "A", longTTL)
	s.mustAcquire(t, other, "B", longTTL)
	if !s.release(t, other, "B") {
		t.Fatal("Release of the other key = false, want true")
	}
	s.wantHeld(t, s.key, "A", 0)
}

func testConcurrentAcquire(t *testing.T, s *suite) {
	const contenders = 8
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		winners []string
	)
	for i := range contenders {
		value := fmt.Sprintf("contender-%d", i)
		wg.Go(func() {
			acquired, _, err := s.node.Acquire(s.ctx, s.key, value, longTTL)
			if err != nil {
				t.Errorf("Acquire(%q): %v", value, err)
				return
			}
			if acquired {
				mu.Lock()
				winners = append(winners, value)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(winners) != 1 {
		t.Fatalf("%d contenders acquired the key (%q), want exactly 1", len(winners), winners)
	}
	s.wantHeld(t, s.key, winners[0], 0)
}

func testCancelledContext(t *testing.T, s *suite) {
	ctx, cancel := context.WithCancel(s.ctx)
	cancel()
	checkFinishedContext(t, s, ctx, context.Canceled)
}

func testExpiredContext(t *testing.T, s *suite) {
	ctx, cancel := context.WithDeadline(s.ctx, time.Now().Add(-time.Second))
	defer cancel()
	checkFinishedContext(t, s, ctx, context.DeadlineExceeded)
}

// checkFinishedContext checks every call fails promptly with ctx's error,
// recognisable with errors.Is so the algorithm can tell a timed-out node
// from a broken one, and changes nothing.
func checkFinishedContext(t *testing.T, s *suite, ctx context.Context, want error) {
	calls := []struct {
		name string
		call func() error
	}{
		{"Acquire", func() error { _, _, err := s.node.Acquire(ctx, s.key, "A", longTTL); return err }},
		{"Extend", func() error { _, err := s.node.Extend(ctx, s.key, "A", longTTL); return err }},
		{"Release", func() error { _, err := s.node.Release(ctx, s.key, "A"); return err }},
		{"Get", func() error { _, _, err := s.node.Get(ctx, s.key); return err }},
		{"Ping", func() error { return s.node.Ping(ctx) }},
	}
	for _, c := range calls {
		start := time.Now()
		err := c.call()
		if took := time.Since(start); took > promptly {
			t.Errorf("%s with a finished context took %v, want under %v", c.name, took, promptly)
		}
		if !errors.Is(err, want) {
			t.Errorf("%s with a finished context: err = %v, want errors.Is(err, %v)", c.name, err, want)
		}
	}
	s.wantAbsent(t, s.key)
}
