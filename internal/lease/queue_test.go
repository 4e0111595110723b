package lease_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sidelock/sidelock/internal/lease"
	"github.com/sidelock/sidelock/pkg/redlock"
	"github.com/sidelock/sidelock/pkg/redlock/memnode"
)

func memnodeNamed(i int) *memnode.Node { return memnode.New(fmt.Sprintf("m%d", i)) }

// secondSidecar is another Manager over the same masters: another pod.
func (f *fixture) secondSidecar(t *testing.T) (*lease.Manager, *countingObserver) {
	t.Helper()
	var nodes []redlock.Node
	for _, n := range f.mem {
		nodes = append(nodes, n)
	}
	locker, err := redlock.New(nodes, redlock.Config{NodeTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	obs := &countingObserver{}
	m, err := lease.NewManager(locker, lease.Config{KeyPrefix: "t:", KeyTTL: 10 * time.Second, DefaultTTL: 30 * time.Second, MaxTTL: time.Hour, MaxWait: 10 * time.Second, Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(context.Background()) })
	return m, obs
}

func TestWaitersOfOneSidecarAreServedInArrivalOrder(t *testing.T) {
	f := newFixture(t, 10*time.Second)
	holder, err := f.m.Acquire(context.Background(), lease.Request{Name: "fifo"})
	if err != nil {
		t.Fatal(err)
	}
	const n = 6
	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			in, err := f.m.Acquire(context.Background(), lease.Request{Name: "fifo", Wait: 10 * time.Second})
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			time.Sleep(5 * time.Millisecond)
			f.m.Release(context.Background(), "fifo", in.Token)
		})
		eventually(t, time.Second, "waiter queued", func() bool { return f.m.Waiters() == i+1 })
	}
	if err := f.m.Release(context.Background(), "fifo", holder.Token); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for i, got := range order {
		if got != i {
			t.Fatalf("grant order %v, want arrival order", order)
		}
	}
	if f.m.Waiters() != 0 {
		t.Fatalf("%d waiters left", f.m.Waiters())
	}
}

// A waiter on another sidecar is woken by the masters' release
// announcement, well before any poll would fire.
func TestWaiterOnAnotherSidecarWakesOnRelease(t *testing.T) {
	f := newFixture(t, 10*time.Second)
	other, obs := f.secondSidecar(t)
	holder, err := f.m.Acquire(context.Background(), lease.Request{Name: "handoff"})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan time.Time, 1)
	go func() {
		if _, err := other.Acquire(context.Background(), lease.Request{Name: "handoff", Wait: 5 * time.Second}); err != nil {
			t.Error(err)
		}
		got <- time.Now()
	}()
	eventually(t, time.Second, "waiter queued", func() bool { return other.Waiters() == 1 })
	time.Sleep(50 * time.Millisecond) // let the subscription settle
	released := time.Now()
	if err := f.m.Release(context.Background(), "handoff", holder.Token); err != nil {
		t.Fatal(err)
	}
	handoff := (<-got).Sub(released)
	t.Logf("hand-off across sidecars: %v", handoff)
	if handoff > 200*time.Millisecond {
		t.Fatalf("hand-off took %v; the release announcement should wake the waiter", handoff)
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if obs.wakeups[lease.WakePubSub] == 0 {
		t.Fatalf("wake-ups %v, want pubsub", obs.wakeups)
	}
}

// A holder that died stops renewing: its keys lapse and the waiter is
// woken by the expiry hint, without any announcement. The keys lapse
// sooner than the fallback poll's shortest pause (250ms), so only the hint
// can wake the waiter first (with 300ms keys a short poll won 1 run in 40).
func TestWaiterWakesWhenADeadHoldersKeysLapse(t *testing.T) {
	f := newFixture(t, 10*time.Second)
	for _, n := range f.mem {
		n.Acquire(context.Background(), "t:orphan", "dead-holder:", 150*time.Millisecond)
	}
	start := time.Now()
	if _, err := f.m.Acquire(context.Background(), lease.Request{Name: "orphan", Wait: 3 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 140*time.Millisecond || took > 700*time.Millisecond {
		t.Fatalf("acquired after %v, want just after the 150ms keys lapse", took)
	}
	f.obs.mu.Lock()
	defer f.obs.mu.Unlock()
	if f.obs.wakeups[lease.WakeExpiry] == 0 {
		t.Fatalf("wake-ups %v, want expiry", f.obs.wakeups)
	}
}

// A try-once acquire does not jump ahead of this sidecar's waiters.
func TestTryOnceDoesNotJumpTheQueue(t *testing.T) {
	f := newFixture(t, 10*time.Second)
	holder, _ := f.m.Acquire(context.Background(), lease.Request{Name: "q"})
	done := make(chan error, 1)
	go func() {
		_, err := f.m.Acquire(context.Background(), lease.Request{Name: "q", Wait: 5 * time.Second})
		done <- err
	}()
	eventually(t, time.Second, "waiter queued", func() bool { return f.m.Waiters() == 1 })
	f.m.Release(context.Background(), "q", holder.Token)
	if _, err := f.m.Acquire(context.Background(), lease.Request{Name: "q"}); !errors.Is(err, lease.ErrLockHeld) {
		t.Fatalf("try-once got %v while a waiter was queued", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("waiter: %v", err)
	}
}

func TestIdempotentAcquireReturnsTheSameLease(t *testing.T) {
	f := newFixture(t, 10*time.Second)
	first, err := f.m.Acquire(context.Background(), lease.Request{Name: "job", IdempotencyKey: "run-7-0123456789"})
	if err != nil {
		t.Fatal(err)
	}
	again, err := f.m.Acquire(context.Background(), lease.Request{Name: "job", IdempotencyKey: "run-7-0123456789"})
	if err != nil || again.Token != first.Token {
		t.Fatalf("retry: %v, token %q vs %q", err, again.Token, first.Token)
	}
	if _, err := f.m.Acquire(context.Background(), lease.Request{Name: "job", IdempotencyKey: "run-8-0123456789"}); !errors.Is(err, lease.ErrLockHeld) {
		t.Fatalf("another key: %v, want ErrLockHeld", err)
	}
	if _, err := f.m.Acquire(context.Background(), lease.Request{Name: "job"}); !errors.Is(err, lease.ErrLockHeld) {
		t.Fatalf("no key: %v, want ErrLockHeld", err)
	}
	f.m.Release(context.Background(), "job", first.Token)
	if third, err := f.m.Acquire(context.Background(), lease.Request{Name: "job", IdempotencyKey: "run-7-0123456789"}); err != nil || third.Token == first.Token {
		t.Fatalf("after release the key must yield a new lease: %v", err)
	}
}

// Several sidecars racing for one lock over five masters can split the
// vote (nobody reaches three); they back off at random and someone wins.
// Every grant is exclusive and the run finishes: no livelock.
func TestRacingSidecarsNeitherLivelockNorOverlap(t *testing.T) {
	var nodes []redlock.Node
	for i := range 5 {
		nodes = append(nodes, memnodeNamed(i))
	}
	const sidecars, perSidecar, rounds = 4, 2, 15
	var inside, overlaps, grants atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range sidecars {
		locker, _ := redlock.New(nodes, redlock.Config{})
		m, err := lease.NewManager(locker, lease.Config{KeyPrefix: "t:", KeyTTL: 10 * time.Second, DefaultTTL: 30 * time.Second, MaxTTL: time.Hour, MaxWait: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close(context.Background()) })
		for range perSidecar {
			wg.Go(func() {
				for range rounds {
					in, err := m.Acquire(context.Background(), lease.Request{Name: "race", Wait: 30 * time.Second})
					if err != nil {
						t.Error(err)
						return
					}
					if inside.Add(1) > 1 {
						overlaps.Add(1)
					}
					grants.Add(1)
					time.Sleep(time.Millisecond)
					inside.Add(-1)
					m.Release(context.Background(), "race", in.Token)
				}
			})
		}
	}
	wg.Wait()
	t.Logf("%d grants across %d sidecars in %v", grants.Load(), sidecars, time.Since(start))
	if overlaps.Load() != 0 {
		t.Fatalf("%d overlapping grants", overlaps.Load())
	}
	if grants.Load() != sidecars*perSidecar*rounds {
		t.Fatalf("%d grants, want %d", grants.Load(), sidecars*perSidecar*rounds)
	}
}

// Shutdown ends waits at once: a waiter is not left hanging until its
// wait runs out while the sidecar stops.
func TestCloseEndsWaits(t *testing.T) {
	f := newFixture(t, 10*time.Second)
	if _, err := f.m.Acquire(context.Background(), lease.Request{Name: "q"}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 2)
	for range 2 { // the head and one behind it
		go func() {
			_, err := f.m.Acquire(context.Background(), lease.Request{Name: "q", Wait: 10 * time.Second})
			done <- err
		}()
	}
	eventually(t, time.Second, "waiters queued", func() bool { return f.m.Waiters() == 2 })
	start := time.Now()
	f.m.Close(context.Background())
	for range 2 {
		if err := <-done; !errors.Is(err, lease.ErrShuttingDown) {
			t.Fatalf("waiter: %v, want ErrShuttingDown", err)
		}
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("waits ended %v after Close", took)
	}
}

// countingAcquires counts the fenced acquire rounds a master is sent.
type countingAcquires struct {
	*memnode.Node
	calls atomic.Int64
}

func (n *countingAcquires) AcquireFenced(ctx context.Context, key, fenceKey, value string, ttl time.Duration) (bool, time.Duration, int64, error) {
	n.calls.Add(1)
	return n.Node.AcquireFenced(ctx, key, fenceKey, value, ttl)
}

// A waiting head rides over an outage but backs off while it lasts: a
// round without quorum doubles the pause, up to the fallback poll's, so a
// 2s outage costs a master a handful of rounds per waiting name (about 33
// at a flat 20–100ms).
func TestWaitBacksOffThroughAnOutage(t *testing.T) {
	var nodes []redlock.Node
	var counted []*countingAcquires
	for i := range 3 {
		n := &countingAcquires{Node: memnodeNamed(i)}
		n.SetDown(true)
		counted = append(counted, n)
		nodes = append(nodes, n)
	}
	locker, err := redlock.New(nodes, redlock.Config{NodeTimeout: 50 * time.Millisecond, Fencing: true})
	if err != nil {
		t.Fatal(err)
	}
	m, err := lease.NewManager(locker, lease.Config{KeyPrefix: "t:", KeyTTL: time.Second, DefaultTTL: 30 * time.Second, MaxTTL: time.Hour, MaxWait: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(context.Background()) })
	_, err = m.Acquire(context.Background(), lease.Request{Name: "outage", Wait: 2 * time.Second})
	if !errors.Is(err, lease.ErrNoQuorum) {
		t.Fatalf("wait through a 2s outage: %v, want no quorum at its end", err)
	}
	rounds := counted[0].calls.Load()
	t.Logf("%d acquire rounds to a master during a 2s outage", rounds)
	if rounds > 12 {
		t.Fatalf("%d acquire rounds in a 2s outage: the wait does not back off", rounds)
	}
}
