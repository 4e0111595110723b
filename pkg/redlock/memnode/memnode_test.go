package memnode

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sidelock/sidelock/internal/fakeclock"
	"github.com/sidelock/sidelock/pkg/redlock"
	"github.com/sidelock/sidelock/pkg/redlock/nodetest"
)

// The assertion lives here, not in memnode.go, so that memnode stays free of
// a dependency on redlock (see the package doc).
var (
	_ redlock.Node           = (*Node)(nil)
	_ redlock.ReleaseWatcher = (*Node)(nil)
	_ redlock.BatchExtender  = (*Node)(nil)
	_ redlock.Fencer         = (*Node)(nil)
	_ redlock.OneRoundFencer = (*Node)(nil)
	_ redlock.TenureNode     = (*Node)(nil)
	_ redlock.RWNode         = (*Node)(nil)
)

func TestConformance(t *testing.T) {
	nodetest.Run(t, func(t *testing.T) redlock.Node { return New("mem-" + t.Name()) })
}

func newFakeClock() *fakeclock.Clock {
	return fakeclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
}

func TestInjectedClockDrivesExpiry(t *testing.T) {
	clock := newFakeClock()
	n := New("mem", WithClock(clock.Now))
	ctx := t.Context()

	if ok, _, err := n.Acquire(ctx, "k", "A", 10*time.Second); err != nil || !ok {
		t.Fatalf("Acquire = %v, %v; want true, nil", ok, err)
	}
	clock.Advance(9 * time.Second)
	ok, holderTTL, err := n.Acquire(ctx, "k", "B", time.Minute)
	if err != nil || ok || holderTTL != time.Second {
		t.Fatalf("Acquire by B after 9s = %v, %v, %v; want false, 1s, nil", ok, holderTTL, err)
	}
	clock.Advance(time.Second)
	if value, ttl, err := n.Get(ctx, "k"); err != nil || value != "" || ttl != 0 {
		t.Fatalf("Get at expiry = %q, %v, %v; want absent", value, ttl, err)
	}
}

func TestTTLRoundsUpToMilliseconds(t *testing.T) {
	clock := newFakeClock()
	n := New("mem", WithClock(clock.Now))
	for ttl, want := range map[time.Duration]time.Duration{
		-time.Second:            time.Millisecond,
		0:                       time.Millisecond,
		time.Nanosecond:         time.Millisecond,
		time.Millisecond:        time.Millisecond,
		1500 * time.Microsecond: 2 * time.Millisecond,
	} {
		key := fmt.Sprint(ttl)
		if _, _, err := n.Acquire(t.Context(), key, "A", ttl); err != nil {
			t.Fatal(err)
		}
		if _, got, _ := n.Get(t.Context(), key); got != want {
			t.Errorf("ttl %v stored as %v, want %v", ttl, got, want)
		}
	}
}

func TestSetDownFailsEveryCallAndKeepsKeys(t *testing.T) {
	n := New("mem-down")
	ctx := t.Context()
	if ok, _, err := n.Acquire(ctx, "k", "A", time.Minute); err != nil || !ok {
		t.Fatalf("Acquire = %v, %v; want true, nil", ok, err)
	}

	n.SetDown(true)
	for name, err := range callAll(ctx, n) {
		if !errors.Is(err, ErrDown) {
			t.Errorf("%s while down: err = %v, want ErrDown", name, err)
		}
		if err != nil && !strings.Contains(err.Error(), "mem-down") {
			t.Errorf("%s while down: error %q does not name the node", name, err)
		}
	}

	n.SetDown(false)
	if value, _, err := n.Get(ctx, "k"); err != nil || value != "A" {
		t.Fatalf("Get after coming back = %q, %v; want A, nil", value, err)
	}
}

func TestSetDelaySlowsCallsAndRespectsContext(t *testing.T) {
	const delay = 300 * time.Millisecond
	n := New("mem-slow")
	n.SetDelay(delay)

	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	start := time.Now()
	for name, err := range callAll(ctx, n) {
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s with a 20ms deadline: err = %v, want DeadlineExceeded", name, err)
		}
	}
	if took := time.Since(start); took >= delay {
		t.Errorf("calls with a 20ms deadline took %v, want them cut short before the %v delay", took, delay)
	}

	start = time.Now()
	if err := n.Ping(t.Context()); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	if took := time.Since(start); took < delay {
		t.Errorf("Ping took %v, want at least the %v delay", took, delay)
	}
}

func TestCloseFailsLaterCalls(t *testing.T) {
	n := New("mem-closed")
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	for name, err := range callAll(t.Context(), n) {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close: err = %v, want ErrClosed", name, err)
		}
	}
}

func TestSweepBoundsMemory(t *testing.T) {
	clock := newFakeClock()
	n := New("mem", WithClock(clock.Now))
	const live = 100
	for i := range live {
		if _, _, err := n.Acquire(t.Context(), fmt.Sprint("live-", i), "A", time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	// Many short-lived keys that nobody reads again: lazy expiry alone
	// would keep them all.
	for i := range 10_000 {
		if _, _, err := n.Acquire(t.Context(), fmt.Sprint("gone-", i), "A", time.Millisecond); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Millisecond)
	}
	n.mu.Lock()
	size := len(n.entries)
	n.mu.Unlock()
	if limit := 2*live + 2*minSweepInterval; size > limit {
		t.Errorf("%d entries after churn, want at most %d", size, limit)
	}
	if value, _, _ := n.Get(t.Context(), "live-7"); value != "A" {
		t.Errorf("sweep removed a live key")
	}
}

// callAll makes every kind of call once and yields each error by name.
func callAll(ctx context.Context, n *Node) map[string]error {
	errs := map[string]error{}
	_, _, errs["Acquire"] = n.Acquire(ctx, "k", "B", time.Minute)
	_, errs["Extend"] = n.Extend(ctx, "k", "B", time.Minute)
	_, errs["Release"] = n.Release(ctx, "k", "B")
	_, _, errs["Get"] = n.Get(ctx, "k")
	errs["Ping"] = n.Ping(ctx)
	return errs
}
