package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sidelock/sidelock/pkg/redlock"
	"github.com/sidelock/sidelock/pkg/redlock/memnode"
)

// frozenMasters have clocks that never move, so the clock floor cannot
// help: monotonic fences must come from the counters and the quorum
// intersection alone.
func frozenMasters(n int) ([]*memnode.Node, []redlock.Node) {
	frozen := time.Unix(1_700_000_000, 0)
	mem := make([]*memnode.Node, n)
	nodes := make([]redlock.Node, n)
	for i := range mem {
		mem[i] = memnode.New(fmt.Sprintf("m%d", i), memnode.WithClock(func() time.Time { return frozen }))
		nodes[i] = mem[i]
	}
	return mem, nodes
}

// Sequential grants, each through a random majority (a random minority is
// down each time), get strictly increasing fences — the case where "INCR on
// each master and take the max" fails, since the next majority may miss
// the master that held the largest value.
func TestFencesIncreaseAcrossChangingMajorities(t *testing.T) {
	for _, n := range []int{3, 5} {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			mem, nodes := frozenMasters(n)
			l, err := redlock.New(nodes, redlock.Config{Fencing: true, Now: time.Now})
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(1, uint64(n)))
			var last int64
			for i := range 300 {
				value := fmt.Sprintf("v%d", i)
				last = grantAboveWithAMinorityDown(t, rng, mem, l, value, last)
				// Clear the key everywhere, as a release plus expiry would;
				// the counters stay, as on masters that keep their data.
				for _, m := range mem {
					m.Release(context.Background(), "k", value)
				}
			}
		})
	}
}

func TestInspectShowsTheHoldersFence(t *testing.T) {
	_, nodes := masters(3)
	l, err := redlock.New(nodes, redlock.Config{Fencing: true})
	if err != nil {
		t.Fatal(err)
	}
	g, err := l.Acquire(context.Background(), "k", "v", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	h, err := l.Inspect(context.Background(), "k")
	if err != nil || !h.Held || h.Fence != g.Fence {
		t.Fatalf("inspect: %+v %v, want fence %d", h, err, g.Fence)
	}
}

// When the counters were dropped (retention passed), the clock floor keeps
// fences above every earlier one.
func TestFencesSurviveCounterExpiry(t *testing.T) {
	_, nodes := masters(3)
	l, err := redlock.New(nodes, redlock.Config{Fencing: true, FenceRetention: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var last int64
	for range 5 {
		g, err := l.Acquire(context.Background(), "k", "v", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if g.Fence <= last {
			t.Fatalf("fence %d after %d", g.Fence, last)
		}
		last = g.Fence
		l.Release(context.Background(), "k", "v")
		time.Sleep(30 * time.Millisecond) // the counters expire
	}
}

type unfencedNode struct{ redlock.Node }

func TestFencingNeedsFencers(t *testing.T) {
	if _, err := redlock.New([]redlock.Node{unfencedNode{memnode.New("a")}}, redlock.Config{Fencing: true}); err == nil {
		t.Fatal("fencing accepted over a node without counters")
	}
}

func TestAcquireAboveAndRaiseFenceCarryAFenceBetweenLockers(t *testing.T) {
	ctx := context.Background()
	_, nodes := frozenMasters(3)
	l, err := redlock.New(nodes, redlock.Config{Fencing: true})
	if err != nil {
		t.Fatal(err)
	}
	floor := int64(9_000_000_000_000_000)
	g, err := l.AcquireAbove(ctx, "k", "v1", 10*time.Second, floor)
	if err != nil || g.Fence != floor+1 {
		t.Fatalf("AcquireAbove: fence %d, %v; want %d", g.Fence, err, floor+1)
	}
	if err := l.RaiseFence(ctx, "k", "v1", floor+100); err != nil {
		t.Fatal(err)
	}
	if err := l.RaiseFence(ctx, "k", "not-the-holder", floor+1000); err == nil {
		t.Error("RaiseFence by a value that does not hold the key succeeded")
	}
	_ = l.Release(ctx, "k", "v1")
	g, err = l.Acquire(ctx, "k", "v2", 10*time.Second)
	if err != nil || g.Fence != floor+101 {
		t.Fatalf("Acquire after RaiseFence: fence %d, %v; want %d", g.Fence, err, floor+101)
	}
}

func TestAcquireAboveWithoutFencingIsAcquire(t *testing.T) {
	_, nodes := frozenMasters(3)
	l, _ := redlock.New(nodes, redlock.Config{})
	g, err := l.AcquireAbove(context.Background(), "k", "v", 10*time.Second, 42)
	if err != nil || g.Fence != 0 {
		t.Fatalf("fence %d, %v; want 0 and no error", g.Fence, err)
	}
	if err := l.RaiseFence(context.Background(), "k", "v", 100); err != nil {
		t.Fatal(err)
	}
}

// commitCounter counts the separate fence-commit rounds a master sees.
type commitCounter struct {
	*memnode.Node
	commits atomic.Int64
}

func (c *commitCounter) CommitFence(ctx context.Context, key, fenceKey, value string, fence int64, retention time.Duration) (bool, error) {
	c.commits.Add(1)
	return c.Node.CommitFence(ctx, key, fenceKey, value, fence, retention)
}

// With a single master a fenced grant is one round, with no separate
// commit, and keeps every promise of the two-round grant: fences strictly
// increase (the clock frozen, so only the committed counter can order
// them), a fence asked above a floor is above it, and a held key is
// refused.
func TestOneMasterGrantsAFencedKeyInOneRound(t *testing.T) {
	ctx := context.Background()
	mem, _ := frozenMasters(1)
	master := &commitCounter{Node: mem[0]}
	l, err := redlock.New([]redlock.Node{master}, redlock.Config{Fencing: true})
	if err != nil {
		t.Fatal(err)
	}
	var last int64
	for i := range 50 {
		value := fmt.Sprintf("v%d", i)
		g, err := l.Acquire(ctx, "k", value, 10*time.Second)
		if err != nil || g.Fence <= last {
			t.Fatalf("grant %d: fence %d, %v; want above %d", i, g.Fence, err, last)
		}
		last = g.Fence
		if _, err := l.Acquire(ctx, "k", "other", 10*time.Second); !errors.Is(err, redlock.ErrLockHeld) {
			t.Fatalf("grant of a held key: %v, want ErrLockHeld", err)
		}
		_ = l.Release(ctx, "k", value)
	}
	if g, err := l.AcquireAbove(ctx, "k", "above", 10*time.Second, last+1000); err != nil || g.Fence != last+1001 {
		t.Fatalf("AcquireAbove: fence %d, %v; want %d", g.Fence, err, last+1001)
	}
	if n := master.commits.Load(); n != 0 {
		t.Fatalf("%d separate commit rounds with one master, want 0", n)
	}
}

// countedMasters wraps n frozen masters, counting separate commit rounds.
func countedMasters(n int) ([]*memnode.Node, []*commitCounter, []redlock.Node) {
	mem, _ := frozenMasters(n)
	counters := make([]*commitCounter, n)
	nodes := make([]redlock.Node, n)
	for i, m := range mem {
		counters[i] = &commitCounter{Node: m}
		nodes[i] = counters[i]
	}
	return mem, counters, nodes
}

func commitRounds(counters []*commitCounter) int64 {
	var n int64
	for _, c := range counters {
		n += c.commits.Load()
	}
	return n
}

// With several masters a grant is one round when a majority commits the
// Locker's proposal, and two when it does not (here: the Locker's clock
// behind the masters' floors). Either way the fence is above every fence
// before it.
func TestSeveralMastersGrantInOneRoundWhenAMajorityCommitsTheProposal(t *testing.T) {
	ctx := context.Background()
	_, counters, nodes := countedMasters(3)
	var clock atomic.Int64 // the Locker's clock, µs after the masters' frozen one
	frozen := time.Unix(1_700_000_000, 0)
	l, err := redlock.New(nodes, redlock.Config{Fencing: true, Now: func() time.Time { return frozen.Add(time.Duration(clock.Load()) * time.Microsecond) }})
	if err != nil {
		t.Fatal(err)
	}
	var last int64
	acquire := func(what string, wantCommits int64) {
		t.Helper()
		before := commitRounds(counters)
		g, err := l.Acquire(ctx, "k", what, 10*time.Second)
		if err != nil || g.Fence <= last {
			t.Fatalf("%s: fence %d, %v; want above %d", what, g.Fence, err, last)
		}
		last = g.Fence
		if got := commitRounds(counters) - before; got != wantCommits {
			t.Fatalf("%s: %d commit calls, want %d", what, got, wantCommits)
		}
		_ = l.Release(ctx, "k", what)
	}
	acquire("first, clock in step", 0)
	clock.Add(1000)
	acquire("clock moved on", 0)
	clock.Store(-int64(time.Hour / time.Microsecond))
	acquire("clock an hour behind", 3)
	acquire("still behind, above the last commit", 3)
}

// Fences strictly increase whatever the callers' clocks say: several
// Lockers over the same masters, each grant through a random majority by a
// Locker whose clock is anywhere from an hour behind to an hour ahead of
// the others', so that proposals are committed by all, some or none of a
// majority. A proposal committed by a minority must not become the fence.
func TestProposedFencesIncreaseWhateverTheCallersClocks(t *testing.T) {
	const n = 3
	mem, counters, nodes := countedMasters(n)
	rng := rand.New(rand.NewPCG(7, 11))
	skews := []time.Duration{-time.Hour, -2 * time.Second, -time.Millisecond, 0, time.Millisecond, 2 * time.Second, time.Hour}
	lockers := make([]*redlock.Locker, len(skews))
	for i, skew := range skews {
		l, err := redlock.New(nodes, redlock.Config{Fencing: true, Now: func() time.Time { return time.Now().Add(skew) }})
		if err != nil {
			t.Fatal(err)
		}
		lockers[i] = l
	}
	var last int64
	oneRound := 0
	for i := range 600 {
		value := fmt.Sprintf("v%d", i)
		before := commitRounds(counters)
		last = grantAboveWithAMinorityDown(t, rng, mem, lockers[rng.IntN(len(lockers))], value, last)
		if commitRounds(counters) == before {
			oneRound++
		}
		for _, m := range mem {
			m.Release(context.Background(), "k", value)
		}
	}
	if oneRound == 0 || oneRound == 600 {
		t.Fatalf("%d of 600 grants in one round: the test must see both kinds", oneRound)
	}
	t.Logf("%d of 600 grants in one round", oneRound)
}

// A grant that fails takes back the proposals it committed. Otherwise a
// loser's proposal, left on the master the winner missed, would show as
// the winner's fence once the winner's renewal puts its key back there.
func TestALosingProposalIsWithdrawn(t *testing.T) {
	ctx := context.Background()
	mem, nodes := frozenMasters(3)
	l, err := redlock.New(nodes, redlock.Config{Fencing: true, Now: time.Now})
	if err != nil {
		t.Fatal(err)
	}
	mem[2].SetDown(true)
	winner, err := l.Acquire(ctx, "k", "winner", 10*time.Second)
	mem[2].SetDown(false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Acquire(ctx, "k", "loser", 10*time.Second); !errors.Is(err, redlock.ErrLockHeld) {
		t.Fatalf("the loser: %v, want ErrLockHeld", err)
	}
	if _, _, counter, _ := mem[2].GetFenced(ctx, "k", redlock.FenceKey("k")); counter != 0 {
		t.Fatalf("the loser left its proposal %d on the master the winner missed", counter)
	}
	if _, err := l.Extend(ctx, "k", "winner", 10*time.Second); err != nil { // repairs master 2
		t.Fatal(err)
	}
	h, err := l.Inspect(ctx, "k")
	if err != nil || h.Value != "winner" || h.Fence != winner.Fence {
		t.Fatalf("inspect: %+v, %v; want the winner with fence %d", h, err, winner.Fence)
	}
}

// grantAboveWithAMinorityDown grants key "k" to value through l while a
// random minority of mem is down, and fails unless the fence is above last.
func grantAboveWithAMinorityDown(t *testing.T, rng *rand.Rand, mem []*memnode.Node, l *redlock.Locker, value string, last int64) int64 {
	t.Helper()
	down := rng.Perm(len(mem))[:rng.IntN(len(mem)/2+1)]
	for _, d := range down {
		mem[d].SetDown(true)
	}
	g, err := l.Acquire(context.Background(), "k", value, 10*time.Second)
	for _, d := range down {
		mem[d].SetDown(false)
	}
	if err != nil {
		t.Fatalf("grant to %s with %v down: %v", value, down, err)
	}
	if g.Fence <= last {
		t.Fatalf("grant to %s fence %d not above the previous %d (down %v)", value, g.Fence, last, down)
	}
	return g.Fence
}
