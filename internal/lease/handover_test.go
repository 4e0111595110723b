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
	"github.com/sidelock/sidelock/pkg/redlock/redisnode"
)

func (o *countingObserver) wakeupsOf(src lease.WakeSource) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.wakeups[src]
}

// waitForWaiters waits (bounded) until n callers wait on m.
func waitForWaiters(t *testing.T, m *lease.Manager, n int) {
	t.Helper()
	eventually(t, 3*time.Second, "the waiter queued", func() bool { return m.Waiters() == n })
}

// roundCounter is a Locker that counts the rounds a sidecar makes to take
// keys (Take, Acquire) and to release them, and can hold its releases
// back.
type roundCounter struct {
	lease.Locker
	takes, releases atomic.Int64
	notes           atomic.Int64
	releaseDelay    atomic.Int64 // ns
	dropReleases    atomic.Bool
}

func (c *roundCounter) Take(ctx context.Context, req redlock.TakeRequest) (redlock.Tenure, error) {
	c.takes.Add(1)
	return c.Locker.Take(ctx, req)
}

func (c *roundCounter) NoteHolder(ctx context.Context, key string, rec redlock.HolderRecord, self string) (redlock.WaiterMark, error) {
	c.notes.Add(1)
	return c.Locker.NoteHolder(ctx, key, rec, self)
}

func (c *roundCounter) Acquire(ctx context.Context, key, value string, ttl time.Duration) (redlock.Grant, error) {
	c.takes.Add(1)
	return c.Locker.Acquire(ctx, key, value, ttl)
}

func (c *roundCounter) ReleaseTenure(ctx context.Context, key, value string, mark redlock.WaiterMark, notify string) error {
	c.releases.Add(1)
	time.Sleep(time.Duration(c.releaseDelay.Load()))
	if c.dropReleases.Load() {
		return nil // acknowledged, never sent
	}
	return c.Locker.ReleaseTenure(ctx, key, value, mark, notify)
}

// sidecarOver is a sidecar's Manager over f's masters, its Locker wrapped
// in a roundCounter, its config tuned.
func sidecarOver(t *testing.T, f *realFixture, keyTTL time.Duration, tune func(*lease.Config)) (*lease.Manager, *roundCounter) {
	t.Helper()
	nodes := make([]redlock.Node, len(f.servers))
	for i, s := range f.servers {
		n := redisnode.New(redisnode.Options{Addr: s.Addr()})
		t.Cleanup(func() { _ = n.Close() })
		nodes[i] = n
	}
	locker, err := redlock.New(nodes, redlock.Config{NodeTimeout: 500 * time.Millisecond, Fencing: true})
	if err != nil {
		t.Fatal(err)
	}
	c := &roundCounter{Locker: locker}
	cfg := lease.Config{KeyPrefix: "t:", KeyTTL: keyTTL, DefaultTTL: 30 * time.Second, MaxTTL: time.Hour, MaxWait: 10 * time.Second}
	if tune != nil {
		tune(&cfg)
	}
	m, err := lease.NewManager(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close(context.Background()) })
	return m, c
}

// counted is a fixture whose Manager's Locker is a roundCounter.
func counted(t *testing.T, keyTTL time.Duration, tune func(*lease.Config)) (*realFixture, *roundCounter) {
	t.Helper()
	var c *roundCounter
	f := newRealFixtureWith(t, keyTTL, 500*time.Millisecond, func(l lease.Locker) lease.Locker {
		c = &roundCounter{Locker: l}
		return c
	}, tune)
	return f, c
}

// A release while another caller of the sidecar waits hands the lock over
// with no round to the masters: the waiter is answered with a lease of its
// own (a new token, the next fence of the block), and another sidecar
// sees the new holder, with its fence, once the holder note has landed.
func TestReleaseHandsTheLockToTheLocalWaiter(t *testing.T) {
	f, c := counted(t, 3*time.Second, nil)
	other := newRealFixtureOn(t, f, 3*time.Second)
	ctx := context.Background()
	first, err := f.m.Acquire(ctx, lease.Request{Name: "h", Owner: "first", TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan lease.Info, 1)
	errs := make(chan error, 1)
	go func() {
		in, err := f.m.Acquire(ctx, lease.Request{Name: "h", Owner: "second", TTL: 10 * time.Second, Wait: 5 * time.Second})
		got <- in
		errs <- err
	}()
	waitForWaiters(t, f.m, 1)
	takes := c.takes.Load()
	if err := f.m.Release(ctx, "h", first.Token); err != nil {
		t.Fatal(err)
	}
	second := <-got
	if err := <-errs; err != nil {
		t.Fatalf("the waiter: %v", err)
	}
	if second.Token == first.Token || second.Fence != first.Fence+1 || second.Owner != "second" || !second.ValidUntil.After(time.Now()) {
		t.Fatalf("handed lease %+v after %+v: want its own token, the next fence, owner second, a validity", second, first)
	}
	if n := c.takes.Load() - takes; n != 0 {
		t.Fatalf("the hand-over took %d rounds to the masters, want none", n)
	}
	if n := f.obs.wakeupsOf(lease.WakeHandOver); n != 1 {
		t.Fatalf("%d hand-overs counted, want 1", n)
	}
	if st, err := f.m.Inspect(ctx, "h"); err != nil || st.Owner != "second" || st.Fence != second.Fence {
		t.Fatalf("h seen from its own sidecar: %+v, %v; want second with fence %d at once", st, err, second.Fence)
	}
	eventually(t, 2*time.Second, "another sidecar sees the new holder and its fence", func() bool {
		st, err := other.Inspect(ctx, "h")
		return err == nil && st.Held && st.Owner == "second" && st.Fence == second.Fence
	})
	if _, err := other.Acquire(ctx, lease.Request{Name: "h", TTL: time.Second}); !errors.Is(err, lease.ErrLockHeld) {
		t.Fatalf("another sidecar's acquire after the hand-over: %v, want held", err)
	}
	if _, err := f.m.Extend(ctx, "h", first.Token, 0); !errors.Is(err, lease.ErrLeaseGone) {
		t.Fatalf("the releaser's token after the hand-over: %v, want gone", err)
	}
	if err := f.m.Release(ctx, "h", second.Token); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Second, "h free once its taker released it", func() bool {
		st, err := other.Inspect(ctx, "h")
		return err == nil && !st.Held
	})
}

// The block used up, the next hand-over is a round to the masters with a
// new block above the last: fences keep rising, one round per block.
func TestABlockUsedUpHandsOverInARound(t *testing.T) {
	f, c := counted(t, 3*time.Second, func(cfg *lease.Config) { cfg.FenceBlock = 2 })
	ctx := context.Background()
	const callers = 6
	held, err := f.m.Acquire(ctx, lease.Request{Name: "b", TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	fences := make(chan int64, callers)
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			in, err := f.m.Acquire(ctx, lease.Request{Name: "b", TTL: 10 * time.Second, Wait: 8 * time.Second})
			if err != nil {
				t.Error(err)
				return
			}
			fences <- in.Fence
			if err := f.m.Release(ctx, "b", in.Token); err != nil {
				t.Error(err)
			}
		})
	}
	waitForWaiters(t, f.m, callers)
	takes := c.takes.Load()
	if err := f.m.Release(ctx, "b", held.Token); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(fences)
	last := held.Fence
	for fence := range fences {
		if fence <= last {
			t.Fatalf("fence %d after %d: not rising", fence, last)
		}
		last = fence
	}
	// Six grants after the first, two fences a block: three rounds.
	if n := c.takes.Load() - takes; n != 3 {
		t.Fatalf("%d rounds for 6 hand-overs with blocks of 2, want 3", n)
	}
}

// A caller of another sidecar that waits is served in its turn: no caller
// of the holding sidecar that arrived after it by more than the time for
// its mark to be heard is granted before it, although that sidecar's
// callers take the lock back to back (each holds it 5 ms and asks again).
func TestAWaiterOfAnotherSidecarIsServedInItsTurn(t *testing.T) {
	f, _ := counted(t, 3*time.Second, nil)
	other, _ := sidecarOver(t, f, 3*time.Second, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type grant struct{ asked, at time.Time }
	var mu sync.Mutex
	var grants []grant
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			for ctx.Err() == nil {
				asked := time.Now()
				in, err := f.m.Acquire(ctx, lease.Request{Name: "turn", TTL: 10 * time.Second, Wait: 5 * time.Second})
				if err != nil {
					continue
				}
				mu.Lock()
				grants = append(grants, grant{asked: asked, at: time.Now()})
				mu.Unlock()
				time.Sleep(5 * time.Millisecond)
				_ = f.m.Release(context.Background(), "turn", in.Token)
			}
		})
	}
	eventually(t, 3*time.Second, "the local callers take turns", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(grants) > 10
	})
	asked := time.Now()
	in, err := other.Acquire(ctx, lease.Request{Name: "turn", TTL: 10 * time.Second, Wait: 5 * time.Second})
	if err != nil {
		t.Fatalf("the other sidecar's caller: %v", err)
	}
	at := time.Now()
	_ = other.Release(context.Background(), "turn", in.Token)
	cancel()
	wg.Wait()
	const heard = 250 * time.Millisecond // its mark reaches the holder: a round, and more under -race and load
	jumped := 0
	for _, g := range grants {
		if g.asked.After(asked.Add(heard)) && g.at.Before(at) {
			jumped++
		}
	}
	if jumped > 0 {
		t.Fatalf("%d callers of the holding sidecar that asked more than %v after the other sidecar's caller were granted before it (it waited %v)", jumped, heard, at.Sub(asked))
	}
}

// A waiter that leaves (its wait ends) while a lock is being handed to it
// never holds it: the lock is free for anyone.
func TestAWaiterThatLeftIsNotLeftHoldingALock(t *testing.T) {
	f, other := twoSidecars(t)
	for round := range 20 {
		held, err := f.m.Acquire(context.Background(), lease.Request{Name: "left", TTL: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			in, err := f.m.Acquire(ctx, lease.Request{Name: "left", TTL: 10 * time.Second, Wait: 5 * time.Second})
			if err == nil {
				err = f.m.Release(context.Background(), "left", in.Token)
			}
			done <- err
		}()
		waitForWaiters(t, f.m, 1)
		go cancel() // races with the hand-over
		if err := f.m.Release(context.Background(), "left", held.Token); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("round %d: the waiter: %v", round, err)
		}
		eventually(t, 2*time.Second, "the lock free after the waiter left", func() bool {
			st, err := other.Inspect(context.Background(), "left")
			return err == nil && !st.Held && len(f.m.List()) == 0
		})
	}
}

// A sidecar whose keys' validity has passed (it was paused past it, and
// its renewer has not noticed yet) grants nothing on them: the waiter goes
// to the masters and gets a fence above the whole block.
func TestNoGrantWithoutARoundOnceTheKeysValidityPassed(t *testing.T) {
	f, c := counted(t, 3*time.Second, func(cfg *lease.Config) { cfg.FenceBlock = 8 })
	ctx := context.Background()
	held, err := f.m.Acquire(ctx, lease.Request{Name: "p", TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan lease.Info, 1)
	go func() {
		in, err := f.m.Acquire(ctx, lease.Request{Name: "p", TTL: 10 * time.Second, Wait: 5 * time.Second})
		if err != nil {
			t.Error(err)
		}
		got <- in
	}()
	waitForWaiters(t, f.m, 1)
	takes := c.takes.Load()
	f.m.PassKeysValidity("p")
	if err := f.m.Release(ctx, "p", held.Token); err != nil {
		t.Fatal(err)
	}
	next := <-got
	if next.Fence <= held.Fence+7 || c.takes.Load() == takes {
		t.Fatalf("granted fence %d after %d (block of 8) with %d rounds: want a round and a fence above the block", next.Fence, held.Fence, c.takes.Load()-takes)
	}
}

// Nor does a sidecar whose lingering keys' validity has passed (it was
// paused past it) grant them to its next caller: that caller goes to the
// masters and gets a fence above the whole block.
func TestNoLingerGrantOnceTheKeysValidityPassed(t *testing.T) {
	f, c := counted(t, 10*time.Second, func(cfg *lease.Config) { cfg.FenceBlock, cfg.Linger = 8, time.Second })
	ctx := context.Background()
	held := lingering(t, f, "paused")
	takes := c.takes.Load()
	f.m.PassKeysValidity("paused")
	next, err := f.m.Acquire(ctx, lease.Request{Name: "paused", TTL: 10 * time.Second, Wait: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if next.Fence <= held.Fence+7 || c.takes.Load() == takes {
		t.Fatalf("granted fence %d after %d (block of 8) with %d rounds: want a round and a fence above the block", next.Fence, held.Fence, c.takes.Load()-takes)
	}
}

// warmUp takes and releases name once on m: a lock this sidecar took
// again soon after letting it go lingers (tenure.go), one taken once does
// not.
func warmUp(t *testing.T, m *lease.Manager, name string) {
	t.Helper()
	in, err := m.Acquire(context.Background(), lease.Request{Name: name, TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Release(context.Background(), name, in.Token); err != nil {
		t.Fatal(err)
	}
}

// lingering takes name on f's sidecar, lets it go, takes it again soon
// and releases it: the keys linger (f's Linger set). It returns that
// second lease.
func lingering(t *testing.T, f *realFixture, name string) lease.Info {
	t.Helper()
	ctx := context.Background()
	warmUp(t, f.m, name)
	eventually(t, time.Second, "a lock taken once released at once", func() bool { return !f.heldOnMasters(t, name) })
	in, err := f.m.Acquire(ctx, lease.Request{Name: name, TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.m.Release(ctx, name, in.Token); err != nil {
		t.Fatal(err)
	}
	if !f.heldOnMasters(t, name) {
		t.Fatal("the lock did not linger")
	}
	return in
}

// With a linger, the next caller of the same sidecar is granted at once
// with the next fence and no round; another sidecar sees the lock free
// meanwhile (nobody holds it); the linger's end releases the keys. A lock
// taken once is let go at once: only one taken again soon lingers.
func TestALingeringLockIsGrantedAtOnce(t *testing.T) {
	const linger = 250 * time.Millisecond
	f, c := counted(t, 3*time.Second, func(cfg *lease.Config) { cfg.Linger = linger })
	other := newRealFixtureOn(t, f, 3*time.Second)
	ctx := context.Background()
	warmUp(t, f.m, "hot")
	eventually(t, time.Second, "a lock taken once released at once", func() bool { return !f.heldOnMasters(t, "hot") })
	first, err := f.m.Acquire(ctx, lease.Request{Name: "hot", TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.m.Release(ctx, "hot", first.Token); err != nil {
		t.Fatal(err)
	}
	takes := c.takes.Load()
	second, err := f.m.Acquire(ctx, lease.Request{Name: "hot", TTL: 10 * time.Second})
	if err != nil || second.Fence != first.Fence+1 || c.takes.Load() != takes {
		t.Fatalf("re-acquired during the linger: %+v %v after %d rounds; want fence %d and no round", second, err, c.takes.Load()-takes, first.Fence+1)
	}
	if err := f.m.Release(ctx, "hot", second.Token); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Second, "another sidecar sees the lock free while it lingers", func() bool {
		st, err := other.Inspect(ctx, "hot")
		return err == nil && !st.Held
	})
	eventually(t, 2*time.Second, "the keys released when the linger ends", func() bool { return !f.heldOnMasters(t, "hot") })
}

// Another sidecar's try-once acquire of a lingering lock is granted, with
// one round more than a free lock's (the first asks the lingering sidecar
// to let go), well before the linger would end by itself: never 409 for a
// lock nobody holds.
func TestATryOnceOfAnotherSidecarRevokesALinger(t *testing.T) {
	const linger = time.Second
	f, _ := counted(t, 10*time.Second, func(cfg *lease.Config) { cfg.Linger = linger })
	other, oc := sidecarOver(t, f, 10*time.Second, nil)
	ctx := context.Background()
	// The sidecar's channel is watched from its first lock on, and for a
	// while after each: take one, and wait until that watch is live (a
	// subscription takes a round trip), as it is on a sidecar in use.
	used, err := other.Acquire(ctx, lease.Request{Name: "used", TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Release(ctx, "used", used.Token); err != nil {
		t.Fatal(err)
	}
	f.awaitChannel(t, other)
	warmUp(t, f.m, "rev")
	for round := range 5 {
		in, err := f.m.Acquire(ctx, lease.Request{Name: "rev", TTL: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if err := f.m.Release(ctx, "rev", in.Token); err != nil {
			t.Fatal(err)
		}
		eventually(t, 2*time.Second, "the lingering sidecar's idle note", func() bool {
			st, err := other.Inspect(ctx, "rev")
			return err == nil && !st.Held && f.heldOnMasters(t, "rev")
		})
		takes := oc.takes.Load()
		start := time.Now()
		got, err := other.Acquire(ctx, lease.Request{Name: "rev", TTL: 10 * time.Second})
		took := time.Since(start)
		if err != nil {
			t.Fatalf("round %d: try-once of a lingering lock: %v", round, err)
		}
		// (One round when a late "wanted" of an earlier round, one per
		// master, already made the lingering sidecar let go.)
		if n := oc.takes.Load() - takes; n > 2 || took > linger/2 {
			t.Fatalf("round %d: granted after %d rounds in %v; want at most 2 (one more than a free lock), well within the %v linger", round, n, took, linger)
		}
		if err := other.Release(ctx, "rev", got.Token); err != nil {
			t.Fatal(err)
		}
		eventually(t, 2*time.Second, "free", func() bool { return !f.heldOnMasters(t, "rev") })
	}
}

// A lock whose sidecar has heard of a waiter of another sidecar does not
// linger when its last caller releases it: the keys go to that waiter, and
// a caller of the same sidecar that asks afterwards is refused, not granted
// at once from a linger ahead of the older mark.
func TestALockWantedElsewhereDoesNotLinger(t *testing.T) {
	f, _ := counted(t, 10*time.Second, func(cfg *lease.Config) { cfg.Linger = time.Second })
	other, _ := sidecarOver(t, f, 10*time.Second, nil)
	ctx := context.Background()
	warmUp(t, f.m, "wanted") // taken again soon: it would linger
	held, err := f.m.Acquire(ctx, lease.Request{Name: "wanted", TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	checked := make(chan struct{})
	waited := make(chan error, 1)
	go func() {
		in, err := other.Acquire(ctx, lease.Request{Name: "wanted", TTL: 10 * time.Second, Wait: 8 * time.Second})
		if err == nil {
			<-checked // held until the other caller has tried
			err = other.Release(ctx, "wanted", in.Token)
		}
		waited <- err
	}()
	eventually(t, 3*time.Second, "the holding sidecar heard of the other sidecar's waiter", func() bool {
		return f.m.KnowsOfAWaiterElsewhere("wanted")
	})
	if err := f.m.Release(ctx, "wanted", held.Token); err != nil {
		t.Fatal(err)
	}
	again, err := f.m.Acquire(ctx, lease.Request{Name: "wanted", TTL: 10 * time.Second})
	close(checked)
	if err == nil {
		_ = f.m.Release(ctx, "wanted", again.Token)
		t.Fatalf("a caller of the holding sidecar that asked after the other sidecar's waiter was granted first (fence %d after %d): the lock lingered", again.Fence, held.Fence)
	}
	if !errors.Is(err, lease.ErrLockHeld) {
		t.Fatalf("the holding sidecar's next try-once: %v, want held", err)
	}
	if err := <-waited; err != nil {
		t.Fatalf("the other sidecar's waiter: %v", err)
	}
}

// A lingering lock is let go as soon as its holder note reads a mark of
// another sidecar's waiter, even one whose "wanted" never reached this
// sidecar (pub/sub drops messages over a broken connection): the mark is
// left here on the masters directly, with no message, while the lock is
// held, and the linger must end well before its time.
func TestALingerEndsOnAMarkItsNoteReads(t *testing.T) {
	const linger = 3 * time.Second
	f, _ := counted(t, 30*time.Second, func(cfg *lease.Config) { cfg.Linger = linger })
	ctx := context.Background()
	warmUp(t, f.m, "noted") // taken again soon: it lingers
	held, err := f.m.Acquire(ctx, lease.Request{Name: "noted", TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	arrival := time.Now().UnixMicro()
	for _, c := range f.raw {
		now, err := c.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		mark := fmt.Sprintf("%d %d", arrival, now.Add(10*time.Second).UnixMilli())
		if err := c.HSet(ctx, "t:noted#q", "another-sidecar", mark).Err(); err != nil {
			t.Fatal(err)
		}
		c.PExpire(ctx, "t:noted#q", 10*time.Second)
	}
	if err := f.m.Release(ctx, "noted", held.Token); err != nil {
		t.Fatal(err)
	}
	eventually(t, linger/2, "the lingering keys let go once the note read the mark", func() bool { return !f.heldOnMasters(t, "noted") })
}

// A release answers once the lease has ended on the sidecar; the keys are
// released on the masters in the background, and an acquire of the same
// name on the same sidecar meanwhile waits for that release instead of
// meeting its own leftovers. A release acknowledged but never sent leaves
// the keys to block the name: this test fails then.
func TestAReleaseIsSentAfterItIsAnswered(t *testing.T) {
	f, c := counted(t, 3*time.Second, nil)
	other := newRealFixtureOn(t, f, 3*time.Second)
	ctx := context.Background()
	c.releaseDelay.Store(int64(200 * time.Millisecond))
	in, err := f.m.Acquire(ctx, lease.Request{Name: "rel", TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := f.m.Release(ctx, "rel", in.Token); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 150*time.Millisecond {
		t.Fatalf("the release answered after %v: it waited for the masters", took)
	}
	again, err := f.m.Acquire(ctx, lease.Request{Name: "rel", TTL: 10 * time.Second})
	if err != nil {
		t.Fatalf("the same sidecar's acquire while its release is under way: %v", err)
	}
	if err := f.m.Release(ctx, "rel", again.Token); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Second, "the keys released on the masters", func() bool { return !f.heldOnMasters(t, "rel") })
	if _, err := other.Acquire(ctx, lease.Request{Name: "rel", TTL: time.Second}); err != nil {
		t.Fatalf("another sidecar after the release: %v", err)
	}
}

// Releases leave the caller's path only while few are under way: past
// that (a burst of callers the masters cannot keep up with), a caller's
// release waits for its own round again, so that the burst slows its own
// callers instead of crowding out acquisitions with background releases.
func TestReleasesWaitOnceManyAreUnderWay(t *testing.T) {
	f, c := counted(t, 3*time.Second, nil)
	ctx := context.Background()
	const delay = 300 * time.Millisecond
	const n = lease.MaxReleasing + 1
	tokens := make([]string, n)
	for i := range n {
		in, err := f.m.Acquire(ctx, lease.Request{Name: fmt.Sprintf("burst-%d", i), TTL: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		tokens[i] = in.Token
	}
	c.releaseDelay.Store(int64(delay))
	for i := range n {
		start := time.Now()
		if err := f.m.Release(ctx, fmt.Sprintf("burst-%d", i), tokens[i]); err != nil {
			t.Fatal(err)
		}
		took := time.Since(start)
		switch {
		case i < lease.MaxReleasing && took > delay/2:
			t.Fatalf("release %d (%d others under way) waited %v for the masters", i, i, took)
		case i == lease.MaxReleasing && took < delay/2:
			t.Fatalf("release %d answered after %v with %d others under way: want it to wait for its round", i, took, i)
		}
	}
}

// A lock held by one caller costs no holder note: the take wrote the
// record, and renewals rewrite it only when its retention needs it.
func TestAHeldLockCostsNoNote(t *testing.T) {
	f, c := counted(t, time.Second, nil)
	ctx := context.Background()
	in, err := f.m.Acquire(ctx, lease.Request{Name: "quiet", TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond) // renewals (a third of the key ttl apart)
	if n := c.notes.Load(); n != 0 {
		t.Fatalf("%d holder notes for a lock held by one caller, want none", n)
	}
	if err := f.m.Release(ctx, "quiet", in.Token); err != nil {
		t.Fatal(err)
	}
}

// Shutdown releases keys nobody holds (a linger): no promise stands on them.
func TestShutdownReleasesALinger(t *testing.T) {
	f, _ := counted(t, 3*time.Second, func(cfg *lease.Config) { cfg.Linger = 300 * time.Millisecond })
	ctx := context.Background()
	lingering(t, f, "bye")
	if err := f.m.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if f.heldOnMasters(t, "bye") {
		t.Fatal("a lingering lock's keys outlived the shutdown")
	}
}

// heldOnMasters tells whether a majority of the masters hold a key of
// name, read directly.
func (f *realFixture) heldOnMasters(t *testing.T, name string) bool {
	t.Helper()
	n := 0
	for _, c := range f.raw {
		if v, err := c.Get(context.Background(), "t:"+name).Result(); err == nil && v != "" {
			n++
		}
	}
	return n > len(f.raw)/2
}

// awaitChannel waits until every master has m's channel subscribed.
func (f *realFixture) awaitChannel(t *testing.T, m *lease.Manager) {
	t.Helper()
	eventually(t, 3*time.Second, "the sidecar's channel watched on every master", func() bool {
		for _, c := range f.raw {
			n, err := c.PubSubNumSub(context.Background(), m.Channel()).Result()
			if err != nil || n[m.Channel()] == 0 {
				return false
			}
		}
		return true
	})
}
