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

type fixture struct {
	mem    []*memnode.Node
	locker *redlock.Locker
	m      *lease.Manager
	obs    *countingObserver
}

func newFixture(t *testing.T, keyTTL time.Duration) *fixture {
	t.Helper()
	f := &fixture{obs: &countingObserver{}}
	var nodes []redlock.Node
	for i := range 3 {
		n := memnode.New(fmt.Sprintf("m%d", i))
		f.mem = append(f.mem, n)
		nodes = append(nodes, n)
	}
	var err error
	if f.locker, err = redlock.New(nodes, redlock.Config{NodeTimeout: 50 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	f.m, err = lease.NewManager(f.locker, lease.Config{
		KeyPrefix: "t:", KeyTTL: keyTTL, DefaultTTL: 30 * time.Second, MaxTTL: time.Hour, MaxWait: 10 * time.Second, Observer: f.obs,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.m.Close(context.Background()) })
	return f
}

// heldOnMasters reads the lock from the masters, as another sidecar would.
func (f *fixture) heldOnMasters(t *testing.T, name string) bool {
	t.Helper()
	st, err := f.m.Inspect(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return st.Held
}

type countingObserver struct {
	renewOK, renewFailed, lost, expired, released, shutdown, maxHold atomic.Int64
	mu                                                               sync.Mutex
	wakeups                                                          map[lease.WakeSource]int
}

func (o *countingObserver) Waited(lease.Outcome, time.Duration) {}
func (o *countingObserver) Wakeup(src lease.WakeSource) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.wakeups == nil {
		o.wakeups = map[lease.WakeSource]int{}
	}
	o.wakeups[src]++
}

func (o *countingObserver) Acquisition(lease.Outcome, time.Duration) {}
func (o *countingObserver) Renewal(ok bool) {
	if ok {
		o.renewOK.Add(1)
	} else {
		o.renewFailed.Add(1)
	}
}
func (o *countingObserver) Ended(r lease.EndReason) {
	map[lease.EndReason]*atomic.Int64{lease.EndLost: &o.lost, lease.EndExpired: &o.expired, lease.EndReleased: &o.released, lease.EndShutdown: &o.shutdown, lease.EndMaxHold: &o.maxHold}[r].Add(1)
}

func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestAcquireExtendRelease(t *testing.T) {
	f := newFixture(t, 10*time.Second)
	ctx := context.Background()
	in, err := f.m.Acquire(ctx, lease.Request{Name: "orders/42", Owner: "w1", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if len(in.Token) != 32 || in.Owner != "w1" || in.TTL != time.Minute {
		t.Fatalf("info = %+v", in)
	}
	if !in.ValidUntil.After(time.Now()) || !in.LeaseExpiresAt.After(in.ValidUntil) {
		t.Fatalf("valid_until %v should be in the future and before lease expiry %v (key ttl 10s < ttl 1m)", in.ValidUntil, in.LeaseExpiresAt)
	}
	_, err = f.m.Acquire(ctx, lease.Request{Name: "orders/42"})
	if !errors.Is(err, lease.ErrLockHeld) {
		t.Fatalf("second acquire: %v, want ErrLockHeld", err)
	}
	ext, err := f.m.Extend(ctx, "orders/42", in.Token, 2*time.Minute)
	if err != nil || ext.TTL != 2*time.Minute || !ext.LeaseExpiresAt.After(in.LeaseExpiresAt) {
		t.Fatalf("extend: %+v, %v", ext, err)
	}
	if _, err := f.m.Extend(ctx, "orders/42", "00000000000000000000000000000000", 0); !errors.Is(err, lease.ErrLeaseGone) {
		t.Fatalf("extend with a wrong token: %v", err)
	}
	if err := f.m.Release(ctx, "orders/42", in.Token); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Second, "released on the masters", func() bool { return !f.heldOnMasters(t, "orders/42") })
	if err := f.m.Release(ctx, "orders/42", in.Token); !errors.Is(err, lease.ErrLeaseGone) {
		t.Fatalf("second release: %v, want ErrLeaseGone", err)
	}
}

func TestInvalidRequests(t *testing.T) {
	f := newFixture(t, 10*time.Second)
	for _, req := range []lease.Request{
		{Name: ""}, {Name: "a b"}, {Name: "a//b"}, {Name: "/a"}, {Name: "a/../b"}, {Name: string(make([]byte, 257))},
		{Name: "ok", TTL: 500 * time.Millisecond}, {Name: "ok", TTL: 2 * time.Hour}, {Name: "ok", Wait: time.Hour},
		{Name: "ok", Owner: "bad\nowner"}, {Name: "ok", Owner: string(make([]byte, 129))},
	} {
		if _, err := f.m.Acquire(context.Background(), req); !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("%+v: err = %v, want ErrInvalid", req, err)
		}
	}
}

// A lease whose ttl outlives several key ttls stays held while the caller
// heartbeats; the keys on the masters are renewed in the background.
func TestRenewalKeepsALongLeaseHeldPastSeveralKeyTTLs(t *testing.T) {
	f := newFixture(t, time.Second)
	in, err := f.m.Acquire(context.Background(), lease.Request{Name: "long", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		time.Sleep(time.Second)
		if !f.heldOnMasters(t, "long") {
			t.Fatal("lock dropped on the masters while its lease was alive")
		}
	}
	if _, err := f.m.Extend(context.Background(), "long", in.Token, 0); err != nil {
		t.Fatal(err)
	}
	if f.obs.renewOK.Load() < 6 {
		t.Errorf("only %d renewals in 3s with a 1s key ttl", f.obs.renewOK.Load())
	}
}

// Without a heartbeat the lease lapses after its ttl and the key is
// released at once, not after the key ttl.
func TestLeaseLapsesAndReleases(t *testing.T) {
	f := newFixture(t, 10*time.Second)
	start := time.Now()
	if _, err := f.m.Acquire(context.Background(), lease.Request{Name: "short", TTL: time.Second}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 3*time.Second, "lease lapsed and released", func() bool { return !f.heldOnMasters(t, "short") })
	if took := time.Since(start); took < time.Second {
		t.Fatalf("released after %v, before the 1s ttl", took)
	}
	// The lease's keys are released before it is counted as expired: wait
	// for the end to finish rather than race it.
	eventually(t, 3*time.Second, "lease counted as expired and forgotten", func() bool {
		return f.obs.expired.Load() == 1 && f.m.Len() == 0
	})
	if n := f.obs.expired.Load(); n != 1 {
		t.Fatalf("expired=%d, want 1", n)
	}
}

// When a majority of masters stops answering, the lease is lost once its
// validity runs out: counted, forgotten, and answered with ErrLeaseGone.
func TestLeaseIsLostWhenRenewalCannotReachAQuorum(t *testing.T) {
	f := newFixture(t, time.Second)
	in, err := f.m.Acquire(context.Background(), lease.Request{Name: "fragile", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	f.mem[0].SetDown(true)
	f.mem[1].SetDown(true)
	eventually(t, 3*time.Second, "lease lost", func() bool { return f.obs.lost.Load() == 1 })
	if time.Now().Before(in.ValidUntil) {
		t.Fatalf("lost at %v, before its valid_until %v", time.Now(), in.ValidUntil)
	}
	if _, err := f.m.Extend(context.Background(), "fragile", in.Token, 0); !errors.Is(err, lease.ErrLeaseGone) {
		t.Fatalf("extend after loss: %v, want ErrLeaseGone", err)
	}
}

func TestLeaseIsLostAtOnceWhenAnotherHolderTookAMajority(t *testing.T) {
	f := newFixture(t, 3*time.Second)
	in, err := f.m.Acquire(context.Background(), lease.Request{Name: "stolen", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range f.mem[:2] { // two masters restart empty, another caller wins them
		n.SetDown(false)
		v, _, _ := n.Get(context.Background(), "t:stolen")
		n.Release(context.Background(), "t:stolen", v)
		n.Acquire(context.Background(), "t:stolen", "thief:", time.Minute)
	}
	if _, err := f.m.Extend(context.Background(), "stolen", in.Token, 0); !errors.Is(err, lease.ErrLeaseGone) {
		t.Fatalf("extend: %v, want ErrLeaseGone", err)
	}
	eventually(t, time.Second, "loss counted", func() bool { return f.obs.lost.Load() == 1 })
}

func TestConcurrentAcquiresGrantOneHolder(t *testing.T) {
	f := newFixture(t, 10*time.Second)
	var wins atomic.Int64
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			if _, err := f.m.Acquire(context.Background(), lease.Request{Name: "hot"}); err == nil {
				wins.Add(1)
			} else if !errors.Is(err, lease.ErrLockHeld) {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if wins.Load() != 1 {
		t.Fatalf("%d holders of one lock", wins.Load())
	}
}

func TestWaitAcquiresOnceTheHolderReleases(t *testing.T) {
	f := newFixture(t, 10*time.Second)
	first, err := f.m.Acquire(context.Background(), lease.Request{Name: "q"})
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(300*time.Millisecond, func() { f.m.Release(context.Background(), "q", first.Token) })
	start := time.Now()
	if _, err := f.m.Acquire(context.Background(), lease.Request{Name: "q", Wait: 5 * time.Second}); err != nil {
		t.Fatalf("waiting acquire: %v", err)
	}
	if took := time.Since(start); took < 300*time.Millisecond || took > 3*time.Second {
		t.Fatalf("acquired after %v", took)
	}
}

func TestWaitTimesOutCloseToTheWait(t *testing.T) {
	f := newFixture(t, 10*time.Second)
	if _, err := f.m.Acquire(context.Background(), lease.Request{Name: "q"}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err := f.m.Acquire(context.Background(), lease.Request{Name: "q", Wait: 600 * time.Millisecond})
	took := time.Since(start)
	if !errors.Is(err, lease.ErrLockHeld) || took < 600*time.Millisecond || took > 2*time.Second {
		t.Fatalf("err=%v after %v, want ErrLockHeld after about 600ms", err, took)
	}
}

// A caller that goes away while waiting never ends up holding the lock.
func TestDepartedWaiterHoldsNothing(t *testing.T) {
	f := newFixture(t, 10*time.Second)
	first, err := f.m.Acquire(context.Background(), lease.Request{Name: "q"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := f.m.Acquire(ctx, lease.Request{Name: "q", Wait: 5 * time.Second}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want the context's error", err)
	}
	if err := f.m.Release(context.Background(), "q", first.Token); err != nil {
		t.Fatal(err)
	}
	if f.m.Len() != 0 {
		t.Fatal("the departed waiter holds the lock")
	}
	eventually(t, 2*time.Second, "the lock free on the masters", func() bool { return !f.heldOnMasters(t, "q") })
}

// Shutdown tells every caller first, and leaves the keys to lapse at the
// valid_until it promised instead of deleting them: a caller may still act
// until then, so nobody else may take the lock before.
func TestCloseEndsEveryLeaseAndLeavesItsKeysToLapse(t *testing.T) {
	f := newFixture(t, time.Second)
	infos := make([]lease.Info, 5)
	events := make([]<-chan lease.Event, 5)
	for i := range infos {
		in, err := f.m.Acquire(context.Background(), lease.Request{Name: fmt.Sprintf("l%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		infos[i] = in
		if events[i], _, err = f.m.Watch(in.Name, in.Token); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := f.m.Close(ctx); err != nil {
		t.Fatal(err)
	}
	closed := time.Now()
	for i, in := range infos {
		var last lease.Event
		for e := range events[i] {
			last = e
		}
		if last.Kind != lease.EventEnded || last.Reason != lease.EndShutdown || last.ValidUntil.Before(in.ValidUntil) {
			t.Fatalf("%s: last event %+v, want ended/shutdown with the promise (valid until %v) still standing", in.Name, last, in.ValidUntil)
		}
		if time.Now().Before(last.ValidUntil) && !f.heldOnMasters(t, in.Name) {
			t.Fatalf("%s: keys deleted at shutdown while the caller was promised %v", in.Name, last.ValidUntil)
		}
	}
	if _, err := f.m.Acquire(context.Background(), lease.Request{Name: "late"}); !errors.Is(err, lease.ErrShuttingDown) {
		t.Fatalf("acquire after Close: %v", err)
	}
	if f.obs.shutdown.Load() != 5 {
		t.Fatalf("shutdown ends = %d", f.obs.shutdown.Load())
	}
	time.Sleep(time.Until(closed.Add(1100 * time.Millisecond)))
	for _, in := range infos {
		if f.heldOnMasters(t, in.Name) {
			t.Fatalf("%s still held a key ttl after shutdown", in.Name)
		}
	}
}

func TestListShowsLeasesWithoutTokens(t *testing.T) {
	f := newFixture(t, 10*time.Second)
	for _, n := range []string{"b", "a"} {
		if _, err := f.m.Acquire(context.Background(), lease.Request{Name: n, Owner: "me"}); err != nil {
			t.Fatal(err)
		}
	}
	got := f.m.List()
	if len(got) != 2 || got[0].Name != "a" || got[1].Name != "b" || got[0].Token != "" || got[0].Owner != "me" {
		t.Fatalf("List = %+v", got)
	}
}

func TestConfigValidate(t *testing.T) {
	good := lease.Config{KeyPrefix: "t:", KeyTTL: 10 * time.Second, DefaultTTL: 30 * time.Second, MaxTTL: time.Hour, MaxWait: time.Minute}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, mut := range []func(*lease.Config){
		func(c *lease.Config) { c.KeyTTL = 2 * time.Hour },
		func(c *lease.Config) { c.KeyTTL = 100 * time.Millisecond },
		func(c *lease.Config) { c.DefaultTTL = 2 * time.Hour },
		func(c *lease.Config) { c.MaxWait = -1 },
		func(c *lease.Config) { c.FenceBlock = -1 },
		func(c *lease.Config) { c.FenceBlock = lease.MaxFenceBlock + 1 },
		func(c *lease.Config) { c.Linger = -time.Millisecond },
		func(c *lease.Config) { c.Linger = c.KeyTTL/10 + time.Millisecond },
	} {
		c := good
		mut(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("accepted %+v", c)
		}
	}
}
