package lease_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sidelock/sidelock/internal/lease"
	"github.com/sidelock/sidelock/pkg/redlock"
)

// limitedManager is a Manager over three in-memory masters with small
// limits; one name's queue may take every waiting slot.
func limitedManager(t *testing.T, maxLocks, maxWaiters int) *lease.Manager {
	return limitedManagerPerName(t, maxLocks, maxWaiters, maxWaiters)
}

func limitedManagerPerName(t *testing.T, maxLocks, maxWaiters, perName int) *lease.Manager {
	t.Helper()
	nodes := []redlock.Node{memnodeNamed(0), memnodeNamed(1), memnodeNamed(2)}
	locker, err := redlock.New(nodes, redlock.Config{NodeTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	m, err := lease.NewManager(locker, lease.Config{
		KeyPrefix: "t:", KeyTTL: 10 * time.Second, DefaultTTL: 30 * time.Second, MaxTTL: time.Hour, MaxWait: 10 * time.Second,
		MaxLocks: maxLocks, MaxWaiters: maxWaiters, MaxWaitersPerName: perName,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(context.Background()) })
	return m
}

// Beyond MaxLocks a new lock is refused at once with a LimitError; a
// released lease makes room again, and the refusal touched nothing.
func TestMaxLocksRefusesBeyondTheLimit(t *testing.T) {
	m := limitedManager(t, 3, 0)
	ctx := context.Background()
	var tokens []string
	for i := range 3 {
		in, err := m.Acquire(ctx, lease.Request{Name: fmt.Sprintf("l/%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		tokens = append(tokens, in.Token)
	}
	_, err := m.Acquire(ctx, lease.Request{Name: "l/3"})
	var limit *lease.LimitError
	if !errors.Is(err, lease.ErrTooManyLocks) || !errors.As(err, &limit) || limit.Max != 3 || limit.RetryAfter <= 0 {
		t.Fatalf("fourth lock: %v, want ErrTooManyLocks with the limit and a retry hint", err)
	}
	if st, _ := m.Inspect(ctx, "l/3"); st.Held {
		t.Fatal("a refused lock is held on the masters")
	}
	if err := m.Release(ctx, "l/0", tokens[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Acquire(ctx, lease.Request{Name: "l/3"}); err != nil {
		t.Fatalf("after a release: %v", err)
	}
}

// Concurrent acquisitions cannot all slip under MaxLocks.
func TestMaxLocksHoldsUnderConcurrentAcquisitions(t *testing.T) {
	const limit = 5
	m := limitedManager(t, limit, 0)
	var wg sync.WaitGroup
	var mu sync.Mutex
	granted, refused := 0, 0
	for i := range 40 {
		wg.Go(func() {
			_, err := m.Acquire(context.Background(), lease.Request{Name: fmt.Sprintf("c/%d", i)})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				granted++
			case errors.Is(err, lease.ErrTooManyLocks):
				refused++
			default:
				t.Errorf("acquire: %v", err)
			}
		})
	}
	wg.Wait()
	if granted != limit || refused != 40-limit || m.Len() != limit {
		t.Fatalf("granted %d, refused %d, held %d; want %d, %d, %d", granted, refused, m.Len(), limit, 40-limit, limit)
	}
}

// Beyond MaxWaiters a caller asking to wait is refused at once; try-once
// callers are not waiters and still get a plain "held".
func TestMaxWaitersRefusesBeyondTheLimit(t *testing.T) {
	m := limitedManager(t, 0, 2)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	holder, err := m.Acquire(ctx, lease.Request{Name: "w"})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	for range 2 {
		wg.Go(func() { _, _ = m.Acquire(ctx, lease.Request{Name: "w", Wait: 10 * time.Second}) })
	}
	deadline := time.Now().Add(5 * time.Second)
	for m.Waiters() != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("%d waiters queued, want 2", m.Waiters())
		}
		time.Sleep(time.Millisecond)
	}
	start := time.Now()
	_, err = m.Acquire(ctx, lease.Request{Name: "other", Wait: 10 * time.Second})
	if !errors.Is(err, lease.ErrTooManyWaiters) || time.Since(start) > time.Second {
		t.Fatalf("third waiter: %v after %v, want ErrTooManyWaiters at once", err, time.Since(start))
	}
	if _, err := m.Acquire(ctx, lease.Request{Name: "w"}); !errors.Is(err, lease.ErrLockHeld) {
		t.Fatalf("try-once while the waiters are full: %v, want held", err)
	}
	if err := m.Release(ctx, "w", holder.Token); err != nil {
		t.Fatal(err)
	}
	cancel()
}

// A burst of waiters far beyond the limit admits exactly the limit.
func TestMaxWaitersHoldsUnderABurst(t *testing.T) {
	const limit = 4
	m := limitedManager(t, 0, limit)
	ctx, cancel := context.WithCancel(context.Background())
	if _, err := m.Acquire(ctx, lease.Request{Name: "burst"}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	refused := make(chan struct{}, 50)
	for range 50 {
		wg.Go(func() {
			if _, err := m.Acquire(ctx, lease.Request{Name: "burst", Wait: 10 * time.Second}); errors.Is(err, lease.ErrTooManyWaiters) {
				refused <- struct{}{}
			}
		})
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(refused) < 50-limit && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if len(refused) != 50-limit || m.Waiters() != limit {
		t.Errorf("refused %d, waiting %d; want %d, %d", len(refused), m.Waiters(), 50-limit, limit)
	}
	cancel()
	wg.Wait()
	if m.Waiters() != 0 {
		t.Fatalf("%d waiters left after they all left", m.Waiters())
	}
}

func TestNegativeLimitsAreRejected(t *testing.T) {
	good := lease.Config{KeyTTL: 10 * time.Second, DefaultTTL: 30 * time.Second, MaxTTL: time.Hour, MaxWait: time.Minute}
	for _, bad := range []lease.Config{{MaxLocks: -1}, {MaxWaiters: -1}} {
		c := good
		c.MaxLocks, c.MaxWaiters = bad.MaxLocks, bad.MaxWaiters
		if err := c.Validate(); err == nil {
			t.Errorf("limits %d/%d accepted", c.MaxLocks, c.MaxWaiters)
		}
	}
}

// One hot name cannot take every waiting slot: its queue stops at
// MaxWaitersPerName (a quarter of MaxWaiters by default), and a caller
// waiting for another name is still admitted.
func TestWaitersPerNameLeaveRoomForOtherNames(t *testing.T) {
	m := limitedManagerPerName(t, 0, 8, 0) // the default: 2 waiters per name
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, name := range []string{"hot", "cold"} {
		if _, err := m.Acquire(ctx, lease.Request{Name: name}); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for range 2 {
		wg.Go(func() { _, _ = m.Acquire(ctx, lease.Request{Name: "hot", Wait: 10 * time.Second}) })
	}
	for m.Waiters() < 2 {
		time.Sleep(time.Millisecond)
	}
	_, err := m.Acquire(ctx, lease.Request{Name: "hot", Wait: 10 * time.Second})
	var limit *lease.LimitError
	if !errors.Is(err, lease.ErrTooManyWaiters) || !errors.As(err, &limit) || limit.Max != 2 {
		t.Fatalf("third waiter for the hot name: %v, want ErrTooManyWaiters (per name, limit 2)", err)
	}
	cold := make(chan error, 1)
	go func() {
		_, err := m.Acquire(ctx, lease.Request{Name: "cold", Wait: 10 * time.Second})
		cold <- err
	}()
	for m.Waiters() < 3 {
		select {
		case err := <-cold:
			t.Fatalf("a waiter for another name was refused: %v", err)
		default:
			time.Sleep(time.Millisecond)
		}
	}
}
