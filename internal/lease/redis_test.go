package lease_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sidelock/sidelock/internal/lease"
	"github.com/sidelock/sidelock/internal/redistest"
	"github.com/sidelock/sidelock/pkg/redlock"
	"github.com/sidelock/sidelock/pkg/redlock/redisnode"
)

// The promises a lease makes, each at its edge, against real masters: every
// valid_until an answer or event publishes must be backed by the keys on a
// majority (minus the drift allowance), and by the lease's own end.

// realFixture is a Manager over three real redis-server masters.
type realFixture struct {
	servers []*redistest.Server
	raw     []*redis.Client
	locker  *redlock.Locker
	m       *lease.Manager
	obs     *countingObserver
}

func newRealFixture(t *testing.T, keyTTL time.Duration, tune func(*lease.Config)) *realFixture {
	t.Helper()
	return newRealFixtureWith(t, keyTTL, redistest.NodeTimeoutFor(keyTTL), nil, tune)
}

// newRealFixtureWith is newRealFixture with the masters' node timeout, and
// wrap (if not nil) between the Manager and its locker.
func newRealFixtureWith(t *testing.T, keyTTL, nodeTimeout time.Duration, wrap func(lease.Locker) lease.Locker, tune func(*lease.Config)) *realFixture {
	t.Helper()
	f := &realFixture{servers: redistest.StartN(t, 3), obs: &countingObserver{}}
	nodes := make([]redlock.Node, len(f.servers))
	for i, s := range f.servers {
		n := redisnode.New(redisnode.Options{Addr: s.Addr()})
		t.Cleanup(func() { _ = n.Close() })
		nodes[i] = n
		c := redis.NewClient(&redis.Options{Addr: s.Addr()})
		t.Cleanup(func() { _ = c.Close() })
		f.raw = append(f.raw, c)
	}
	locker, err := redlock.New(nodes, redlock.Config{NodeTimeout: nodeTimeout, Fencing: true})
	if err != nil {
		t.Fatal(err)
	}
	f.locker = locker
	var managed lease.Locker = locker
	if wrap != nil {
		managed = wrap(locker)
	}
	cfg := lease.Config{
		KeyPrefix: "t:", KeyTTL: keyTTL, DefaultTTL: 30 * time.Second, MaxTTL: time.Hour, MaxWait: 10 * time.Second,
		MaxHold: time.Hour, Observer: f.obs,
	}
	if tune != nil {
		tune(&cfg)
	}
	if f.m, err = lease.NewManager(managed, cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.m.Close(context.Background()) })
	return f
}

// newRealFixtureOn is a second sidecar's Manager over f's masters.
func newRealFixtureOn(t *testing.T, f *realFixture, keyTTL time.Duration) *lease.Manager {
	t.Helper()
	addrs := make([]string, len(f.servers))
	for i, s := range f.servers {
		addrs[i] = s.Addr()
	}
	return managerOver(t, keyTTL, redistest.NodeTimeoutFor(keyTTL), addrs...)
}

// managerOver is a sidecar's Manager over the masters at addrs.
func managerOver(t *testing.T, keyTTL, nodeTimeout time.Duration, addrs ...string) *lease.Manager {
	t.Helper()
	nodes := make([]redlock.Node, len(addrs))
	for i, a := range addrs {
		n := redisnode.New(redisnode.Options{Addr: a})
		t.Cleanup(func() { _ = n.Close() })
		nodes[i] = n
	}
	locker, err := redlock.New(nodes, redlock.Config{NodeTimeout: nodeTimeout, Fencing: true})
	if err != nil {
		t.Fatal(err)
	}
	m, err := lease.NewManager(locker, lease.Config{KeyPrefix: "t:", KeyTTL: keyTTL, DefaultTTL: 30 * time.Second, MaxTTL: time.Hour, MaxWait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close(context.Background()) })
	return m
}

// keysBackUntil bounds from above when the keys of name end on a majority
// by this clock, less the drift allowance for masters whose clocks run
// fast: a promise later than that is broken. Each master's end is at most
// its reply's arrival plus its PTTL plus 1ms (PTTL truncates). Zero if a
// majority lacks the keys.
func (f *realFixture) keysBackUntil(t *testing.T, name string) time.Time {
	t.Helper()
	var ends []time.Time
	for _, c := range f.raw {
		pttl, err := c.PTTL(context.Background(), "t:"+name).Result()
		if err == nil && pttl > 0 {
			ttl := pttl + time.Millisecond
			ends = append(ends, time.Now().Add(ttl-f.locker.Drift(ttl)))
		}
	}
	quorum := len(f.raw)/2 + 1
	if len(ends) < quorum {
		return time.Time{}
	}
	// The quorum-th latest end is when the majority ends.
	slices.SortFunc(ends, func(a, b time.Time) int { return b.Compare(a) })
	return ends[quorum-1]
}

// Item 1: a heartbeat that lowers the ttl must not keep the promise the
// longer key ttl made; the keys on the masters now end sooner.
func TestRealHeartbeatThatLowersTheTTLPromisesNoMoreThanTheKeys(t *testing.T) {
	for _, hold := range []bool{false, true} {
		t.Run(fmt.Sprintf("hold=%v", hold), func(t *testing.T) { testLoweredTTL(t, hold) })
	}
}

func testLoweredTTL(t *testing.T, hold bool) {
	f := newRealFixture(t, 10*time.Second, nil)
	in, err := f.m.Acquire(context.Background(), lease.Request{Name: "lower", TTL: 30 * time.Second, Hold: hold})
	if err != nil {
		t.Fatal(err)
	}
	promised := in.ValidUntil
	for _, ttl := range []time.Duration{2 * time.Second, 30 * time.Second, time.Minute} {
		ext, err := f.m.Extend(context.Background(), "lower", in.Token, ttl)
		if err != nil {
			t.Fatal(err)
		}
		promised = later(promised, ext.ValidUntil)
		backed := f.keysBackUntil(t, "lower")
		if promised.After(backed) {
			t.Fatalf("after PUT ttl=%v the keys on a majority end by %v, before the valid_until %v already promised (%v early)",
				ttl, backed.Format(time.StampMilli), promised.Format(time.StampMilli), promised.Sub(backed))
		}
		if !hold && ext.ValidUntil.After(ext.LeaseExpiresAt) {
			t.Fatalf("valid_until %v after the lease's own expiry %v", ext.ValidUntil, ext.LeaseExpiresAt)
		}
	}
}

// A heartbeat that lowers the ttl shortens what later answers promise,
// never what earlier ones did: a caller whose answer was lost still
// believes the old valid_until. Nobody else gets the lock before it, and
// the lease then lapses, without more heartbeats, soon after.
func TestRealLoweredTTLKeepsEarlierPromises(t *testing.T) {
	f := newRealFixture(t, 3*time.Second, nil)
	other := newRealFixtureOn(t, f, 3*time.Second)
	in, err := f.m.Acquire(context.Background(), lease.Request{Name: "kept", TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ext, err := f.m.Extend(context.Background(), "kept", in.Token, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !ext.ValidUntil.Before(in.ValidUntil) {
		t.Fatalf("the lowered ttl did not shorten the new promise: %v, first %v", ext.ValidUntil, in.ValidUntil)
	}
	// A heartbeat after the lowered lease ran out is refused, but must not
	// end the lease and delete its keys while the first promise stands
	// (found by the simulator: TestBug10LateHeartbeatEndsStandingPromise).
	time.Sleep(time.Until(ext.LeaseExpiresAt.Add(50 * time.Millisecond)))
	if _, err := f.m.Extend(context.Background(), "kept", in.Token, 0); !errors.Is(err, lease.ErrLeaseGone) {
		t.Fatalf("heartbeat after the lease ran out: %v, want ErrLeaseGone", err)
	}
	// 410 is final: the caller's release after it (a finally block) is
	// refused too, and must not delete the keys while the first promise
	// stands (found by the chaos suite: a semaphore heartbeat's DELETE).
	if err := f.m.Release(context.Background(), "kept", in.Token); !errors.Is(err, lease.ErrLeaseGone) {
		t.Fatalf("release after the heartbeat was answered gone: %v, want ErrLeaseGone", err)
	}
	// This sidecar's own retry hint points at the lapse, not the expiry.
	var held *lease.HeldError
	if _, err := f.m.Acquire(context.Background(), lease.Request{Name: "kept"}); !errors.As(err, &held) {
		t.Fatalf("acquire on the holder's sidecar: %v, want held", err)
	} else if back := time.Now().Add(held.RetryAfter); back.Before(in.ValidUntil.Add(-50 * time.Millisecond)) {
		t.Fatalf("retry hint %v points before the standing promise %v", back.Format(time.StampMilli), in.ValidUntil.Format(time.StampMilli))
	}
	for time.Now().Before(in.ValidUntil.Add(-50 * time.Millisecond)) {
		if _, err := other.Acquire(context.Background(), lease.Request{Name: "kept"}); err == nil {
			t.Fatalf("granted elsewhere at %v, before the first promise %v", time.Now().Format(time.StampMilli), in.ValidUntil.Format(time.StampMilli))
		}
		time.Sleep(50 * time.Millisecond)
	}
	eventually(t, 2*time.Second, "the lease lapsed after its first promise", func() bool {
		_, err := other.Acquire(context.Background(), lease.Request{Name: "kept"})
		return err == nil
	})
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// Item 3: a renewal that finds the keys gone on every master (they lapsed,
// another caller took and released the lock) re-creates them but must not
// count them: the lease is lost, says so, and its keys do not come back.
func TestRealRenewalNeverResurrectsLapsedKeys(t *testing.T) {
	f := newRealFixture(t, time.Second, nil)
	in, err := f.m.Acquire(context.Background(), lease.Request{Name: "lapsed", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	events, _, err := f.m.Watch("lapsed", in.Token)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range f.raw {
		c.Del(context.Background(), "t:lapsed")
	}
	ended := waitEnded(t, events, 3*time.Second)
	if ended.Reason != lease.EndLost {
		t.Fatalf("the lease ended %q, want lost", ended.Reason)
	}
	for i, c := range f.raw {
		if v, _ := c.Get(context.Background(), "t:lapsed").Result(); v != "" {
			t.Errorf("master %d holds the lapsed lease's key again", i)
		}
	}
	if _, err := f.m.Extend(context.Background(), "lapsed", in.Token, 0); !errors.Is(err, lease.ErrLeaseGone) {
		t.Fatalf("extend after the loss: %v, want ErrLeaseGone", err)
	}
}

// Item 4: max_hold ends the lease and deletes its keys, so no promise may
// run past it; the lease says when it falls.
func TestRealMaxHoldCapsEveryPromise(t *testing.T) {
	f := newRealFixture(t, time.Second, nil)
	in, err := f.m.Acquire(context.Background(), lease.Request{Name: "capped", TTL: time.Minute, MaxHold: 1500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if in.MaxHoldAt.IsZero() || in.ValidUntil.After(in.MaxHoldAt) {
		t.Fatalf("grant: valid_until %v, max_hold_at %v", in.ValidUntil, in.MaxHoldAt)
	}
	events, _, err := f.m.Watch("capped", in.Token)
	if err != nil {
		t.Fatal(err)
	}
	for e := range events {
		if e.Kind == lease.EventRenewed && e.ValidUntil.After(in.MaxHoldAt) {
			t.Fatalf("renewed event promised %v, after max_hold_at %v", e.ValidUntil, in.MaxHoldAt)
		}
		if e.Kind == lease.EventEnded && e.Reason != lease.EndMaxHold {
			t.Fatalf("ended %q, want max_hold", e.Reason)
		}
	}
	if time.Now().Before(in.MaxHoldAt) {
		t.Fatalf("ended before max_hold_at")
	}
}

// Item 8: a caller hears that renewals keep failing before its validity
// ends, not after: an expiring event within the margin, then lost.
func TestRealExpiringArrivesBeforeTheValidityEnds(t *testing.T) {
	f := newRealFixture(t, time.Second, nil)
	in, err := f.m.Acquire(context.Background(), lease.Request{Name: "failing", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	events, _, err := f.m.Watch("failing", in.Token)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range f.servers[:2] {
		s.Stop()
	}
	t.Cleanup(func() {
		for _, s := range f.servers[:2] {
			s.Cont()
		}
	})
	var expiring lease.Event
	var heardAt time.Time
	for e := range events {
		if e.Kind == lease.EventExpiring && expiring.Kind == "" {
			expiring, heardAt = e, time.Now()
		}
		if e.Kind == lease.EventEnded && e.Reason != lease.EndLost {
			t.Fatalf("ended %q, want lost", e.Reason)
		}
	}
	if expiring.Kind == "" {
		t.Fatal("no expiring event before the lease was lost")
	}
	if !heardAt.Before(expiring.ValidUntil) {
		t.Fatalf("expiring heard at %v, not before its valid_until %v", heardAt, expiring.ValidUntil)
	}
	t.Logf("expiring heard %v before valid_until", expiring.ValidUntil.Sub(heardAt).Round(time.Millisecond))
}

// Item 9: a waiting acquire rides over a short loss of quorum (masters
// paused) instead of failing at once; a try-once acquire retries one round
// that found no quorum within its budget.
func TestRealWaitRidesOverAShortLossOfQuorum(t *testing.T) {
	f := newRealFixture(t, time.Second, func(c *lease.Config) { c.NoQuorumRetry = 300 * time.Millisecond })
	for _, s := range f.servers[:2] {
		s.Stop()
	}
	go func() {
		time.Sleep(500 * time.Millisecond)
		for _, s := range f.servers[:2] {
			s.Cont()
		}
	}()
	start := time.Now()
	if _, err := f.m.Acquire(context.Background(), lease.Request{Name: "paused", Wait: 5 * time.Second}); err != nil {
		t.Fatalf("wait=5s while two masters were paused for 0.5s: %v (after %v)", err, time.Since(start))
	}

	f.servers[0].Kill()
	f.servers[1].Stop()
	go func() {
		time.Sleep(80 * time.Millisecond) // more than one node timeout
		f.servers[1].Cont()
	}()
	if _, err := f.m.Acquire(context.Background(), lease.Request{Name: "once"}); err != nil {
		t.Fatalf("try-once while a master was slow for 80ms: %v", err)
	}
	// A real outage still fails fast: well within the retry budget.
	f.servers[1].Kill()
	start = time.Now()
	_, err := f.m.Acquire(context.Background(), lease.Request{Name: "outage"})
	if !errors.Is(err, lease.ErrNoQuorum) {
		t.Fatalf("try-once with 2 of 3 masters dead: %v, want no quorum", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("try-once in an outage took %v", took)
	}
}

func waitEnded(t *testing.T, events <-chan lease.Event, within time.Duration) lease.Event {
	t.Helper()
	deadline := time.After(within)
	for {
		select {
		case e, ok := <-events:
			if !ok {
				t.Fatal("events closed without an end")
			}
			if e.Kind == lease.EventEnded {
				return e
			}
		case <-deadline:
			t.Fatalf("no end within %v", within)
		}
	}
}
