package lease_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sidelock/sidelock/internal/ctxsleep"
	"github.com/sidelock/sidelock/internal/lease"
	"github.com/sidelock/sidelock/internal/redistest"
	"github.com/sidelock/sidelock/pkg/redlock"
)

// Contexts, against real masters (see the package documentation): a ctx
// that has ended touches neither a lease nor the masters; one that ends
// during a call bounds the caller's wait, never the lock.

// resetStats clears every master's command counts.
func (f *realFixture) resetStats(t *testing.T) {
	t.Helper()
	for _, c := range f.raw {
		if err := c.ConfigResetStat(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// commandsSinceReset lists the commands the masters from the first-th on
// ran since resetStats, other than the test's own (CONFIG, INFO).
func (f *realFixture) commandsSinceReset(t *testing.T, first int) []string {
	t.Helper()
	var cmds []string
	for i, c := range f.raw[first:] {
		stats, err := c.Info(context.Background(), "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		for line := range strings.Lines(stats) {
			name, _, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":")
			name, _, _ = strings.Cut(name, "|") // Redis 7: config|resetstat
			if !ok || !strings.HasPrefix(line, "cmdstat_") || name == "config" || name == "info" {
				continue
			}
			cmds = append(cmds, fmt.Sprintf("master %d: %s", first+i, strings.TrimSpace(line)))
		}
	}
	return cmds
}

func (f *realFixture) pause(n int) {
	for _, s := range f.servers[:n] {
		s.Stop()
	}
}

func (f *realFixture) resume(n int) {
	for _, s := range f.servers[:n] {
		s.Cont()
	}
}

// A caller whose ctx has already ended is answered ctx.Err() by every
// method, and nothing happens: no command reaches a master, the lease
// keeps its ttl and expiry and stays held, and its holder can still
// release it (once).
func TestRealEndedContextTouchesNothing(t *testing.T) {
	f := newRealFixture(t, 10*time.Second, nil) // no background renewal within the test
	bg := context.Background()
	in, err := f.m.Acquire(bg, lease.Request{Name: "held", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	before := f.m.List()[0]
	ended, cancel := context.WithCancel(bg)
	cancel()
	// The sidecar subscribes to its own channel at its first lock, in the
	// background: let that land before counting what reaches the masters.
	eventually(t, 5*time.Second, "the sidecar's channel subscribed on every master", func() bool {
		for _, c := range f.raw {
			if chans, err := c.PubSubChannels(bg, "*").Result(); err != nil || len(chans) == 0 {
				return false
			}
		}
		return true
	})

	f.resetStats(t)
	for _, req := range []lease.Request{{Name: "free"}, {Name: "free", Wait: time.Second}, {Name: "held", Wait: time.Second}} {
		if _, err := f.m.Acquire(ended, req); !errors.Is(err, context.Canceled) {
			t.Errorf("Acquire(%+v) with an ended ctx: %v, want context.Canceled", req, err)
		}
	}
	if _, err := f.m.Inspect(ended, "held"); !errors.Is(err, context.Canceled) {
		t.Errorf("Inspect with an ended ctx: %v, want context.Canceled", err)
	}
	if _, err := f.m.Extend(ended, "held", in.Token, 2*time.Minute); !errors.Is(err, context.Canceled) {
		t.Errorf("Extend with an ended ctx: %v, want context.Canceled", err)
	}
	if err := f.m.Release(ended, "held", in.Token); !errors.Is(err, context.Canceled) {
		t.Errorf("Release with an ended ctx: %v, want context.Canceled", err)
	}
	if cmds := f.commandsSinceReset(t, 0); len(cmds) > 0 {
		t.Errorf("calls with an ended ctx reached the masters:\n%s", strings.Join(cmds, "\n"))
	}
	// A request that is wrong is still answered as such.
	if _, err := f.m.Extend(ended, "held", "00000000000000000000000000000000", 0); !errors.Is(err, lease.ErrLeaseGone) {
		t.Errorf("Extend with a wrong token and an ended ctx: %v, want ErrLeaseGone", err)
	}

	after := f.m.List()
	if len(after) != 1 || after[0].TTL != before.TTL || !after[0].LeaseExpiresAt.Equal(before.LeaseExpiresAt) {
		t.Fatalf("the lease changed: before %+v, after %+v", before, after)
	}
	if f.keysBackUntil(t, "held").Before(in.ValidUntil) {
		t.Fatal("the keys no longer back the lease's promise")
	}
	if err := f.m.Release(bg, "held", in.Token); err != nil {
		t.Fatalf("the holder's own release afterwards: %v", err)
	}
	eventually(t, 2*time.Second, "the keys released after the release", func() bool { return f.keysBackUntil(t, "held").IsZero() })
	if err := f.m.Release(bg, "held", in.Token); !errors.Is(err, lease.ErrLeaseGone) {
		t.Fatalf("second release: %v, want ErrLeaseGone", err)
	}
	if n := f.obs.released.Load(); n != 1 {
		t.Fatalf("released %d times, want 1", n)
	}
}

// A heartbeat whose ctx ends during its round to the masters (two of three
// paused, a node timeout far longer than the ctx) answers ctx's error as
// soon as the ctx ends, counts no failed renewal, and takes nothing back:
// the lease stays held, its keys back every promise, the renewer goes on
// renewing it, and the next heartbeat is answered.
func TestRealExtendCutShortKeepsTheLeaseAndItsPromises(t *testing.T) {
	f := newRealFixtureWith(t, 3*time.Second, time.Second, nil, nil)
	bg := context.Background()
	in, err := f.m.Acquire(bg, lease.Request{Name: "cut", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	renewedBefore, failedBefore := f.obs.renewOK.Load(), f.obs.renewFailed.Load()

	f.pause(2)
	ctx, cancel := context.WithTimeout(bg, 100*time.Millisecond)
	start := time.Now()
	_, err = f.m.Extend(ctx, "cut", in.Token, 0)
	took := time.Since(start)
	cancel()
	f.resume(2)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("heartbeat cut short: %v, want context.DeadlineExceeded", err)
	}
	if took > 700*time.Millisecond {
		t.Fatalf("the heartbeat took %v: its round outlived its 100ms ctx (node timeout 1s)", took)
	}
	if n := f.obs.renewFailed.Load() - failedBefore; n != 0 {
		t.Fatalf("a round cut short by its caller counted as %d failed renewals", n)
	}
	list := f.m.List()
	if len(list) != 1 || list[0].LeaseExpiresAt.Before(in.LeaseExpiresAt) {
		t.Fatalf("the lease after the cut heartbeat: %+v", list)
	}
	if backed := f.keysBackUntil(t, "cut"); backed.Before(in.ValidUntil) {
		t.Fatalf("the keys end on a majority by %v, before the promise %v", backed, in.ValidUntil)
	}
	// The first background renewal is due a third of the key ttl after
	// the grant.
	eventually(t, 3*time.Second, "renewed in the background", func() bool { return f.obs.renewOK.Load() > renewedBefore })
	ext, err := f.m.Extend(bg, "cut", in.Token, 0)
	if err != nil {
		t.Fatalf("the next heartbeat: %v", err)
	}
	if !ext.ValidUntil.After(in.ValidUntil) {
		t.Fatalf("the next heartbeat promised %v, not after the grant's %v", ext.ValidUntil, in.ValidUntil)
	}
}

// An operation that queued behind another on the same lease (a heartbeat
// stuck on paused masters) and whose ctx ended meanwhile leaves the lease
// untouched: no new ttl, no release.
func TestRealOperationQueuedUntilItsContextEndedLeavesTheLease(t *testing.T) {
	f := newRealFixtureWith(t, 10*time.Second, time.Second, nil, nil)
	bg := context.Background()
	in, err := f.m.Acquire(bg, lease.Request{Name: "queued", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	f.resetStats(t)
	f.pause(2)
	defer f.resume(2)
	slow := make(chan error, 1)
	go func() {
		_, err := f.m.Extend(bg, "queued", in.Token, 0) // waits out the node timeout
		slow <- err
	}()
	// Once its round reaches the master that answers, the slow heartbeat
	// holds the lease.
	eventually(t, time.Second, "the slow heartbeat reached the master not paused", func() bool { return len(f.commandsSinceReset(t, 2)) > 0 })
	ctx, cancel := context.WithTimeout(bg, 100*time.Millisecond)
	defer cancel()
	extended := make(chan error, 1)
	go func() {
		_, err := f.m.Extend(ctx, "queued", in.Token, 2*time.Minute)
		extended <- err
	}()
	released := make(chan error, 1)
	go func() { released <- f.m.Release(ctx, "queued", in.Token) }()
	if err := <-slow; err != nil {
		t.Fatalf("the slow heartbeat: %v", err)
	}
	f.resume(2)
	if err := <-extended; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("queued heartbeat: %v, want context.DeadlineExceeded", err)
	}
	if err := <-released; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("queued release: %v, want context.DeadlineExceeded", err)
	}
	list := f.m.List()
	if len(list) != 1 || list[0].TTL != time.Minute {
		t.Fatalf("the lease after the queued calls gave up: %+v, want it held with its 1m ttl", list)
	}
	if f.keysBackUntil(t, "queued").Before(in.ValidUntil) {
		t.Fatal("the keys no longer back the lease's promise")
	}
}

// slowRelease is a locker whose releases take delay to reach the masters
// and honour their ctx meanwhile, as any locker may: a release bounded by
// an ended ctx would not reach them at all.
type slowRelease struct {
	lease.Locker
	delay time.Duration
}

func (s slowRelease) ReleaseTenure(ctx context.Context, key, value string, mark redlock.WaiterMark, notify string) error {
	if !ctxsleep.For(ctx, s.delay) {
		return ctx.Err()
	}
	return s.Locker.ReleaseTenure(ctx, key, value, mark, notify)
}

func (s slowRelease) Release(ctx context.Context, key, value string) error {
	if !ctxsleep.For(ctx, s.delay) {
		return ctx.Err()
	}
	return s.Locker.Release(ctx, key, value)
}

// A release whose ctx ends once it has begun (a client hanging up during
// DELETE) is not left half done: the lease is forgotten and its keys are
// deleted on every master (in the background: the answer does not wait
// for the masters, and the caller's ctx does not bound that round), the
// answer says it was released, and it is released once.
func TestRealReleaseFinishesOnceBegunWhateverItsContext(t *testing.T) {
	wrap := func(l lease.Locker) lease.Locker { return slowRelease{Locker: l, delay: 300 * time.Millisecond} }
	f := newRealFixtureWith(t, 10*time.Second, redistest.NodeTimeoutFor(10*time.Second), wrap, nil)
	other := newRealFixtureOn(t, f, 10*time.Second)
	bg := context.Background()
	in, err := f.m.Acquire(bg, lease.Request{Name: "bye", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(bg, 50*time.Millisecond)
	defer cancel()
	if err := f.m.Release(ctx, "bye", in.Token); err != nil {
		t.Fatalf("release whose ctx ended during it: %v, want nil (it was released)", err)
	}
	eventually(t, 2*time.Second, "every master lets go of the released key", func() bool {
		for _, c := range f.raw {
			if v, _ := c.Get(bg, "t:bye").Result(); v != "" {
				return false
			}
		}
		return true
	})
	if _, err := other.Acquire(bg, lease.Request{Name: "bye"}); err != nil {
		t.Fatalf("another sidecar right after the release: %v", err)
	}
	if err := f.m.Release(bg, "bye", in.Token); !errors.Is(err, lease.ErrLeaseGone) {
		t.Fatalf("second release: %v, want ErrLeaseGone", err)
	}
	if n := f.obs.released.Load(); n != 1 {
		t.Fatalf("released %d times, want 1", n)
	}
}

// An acquisition whose ctx ends during its round (two masters paused)
// answers ctx's error, not no quorum (the round says nothing about the
// masters), and holds nothing.
func TestRealAcquireCutShortHoldsNothing(t *testing.T) {
	f := newRealFixtureWith(t, 3*time.Second, time.Second, nil, nil)
	bg := context.Background()
	f.pause(2)
	ctx, cancel := context.WithTimeout(bg, 100*time.Millisecond)
	_, err := f.m.Acquire(ctx, lease.Request{Name: "gone"})
	cancel()
	f.resume(2)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("acquire cut short: %v, want context.DeadlineExceeded", err)
	}
	if n := f.m.Len(); n != 0 {
		t.Fatalf("%d leases held for a caller that left", n)
	}
	// Keys a paused master took after the cleanup lapse within a key ttl.
	eventually(t, 4*time.Second, "the name is free again", func() bool {
		in, err := f.m.Acquire(bg, lease.Request{Name: "gone"})
		return err == nil && in.Token != ""
	})
}
