package lease_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sidelock/sidelock/internal/lease"
	"github.com/sidelock/sidelock/internal/redistest"
)

func permit(name string, permits int) lease.Request {
	return lease.Request{Name: name, Permits: permits, TTL: 10 * time.Second}
}

// Two sidecars over three real masters share a semaphore of two permits:
// a third caller is refused until a permit is released, and then gets
// it; holders hold distinct slots, each with its own fence.
func TestSemaphoreAdmitsAtMostPermits(t *testing.T) {
	f := newRealFixture(t, 3*time.Second, nil)
	other := newRealFixtureOn(t, f, 3*time.Second)
	ctx := context.Background()
	a, err := f.m.Semaphores().Acquire(ctx, permit("pay", 2))
	if err != nil {
		t.Fatal(err)
	}
	b, err := other.Semaphores().Acquire(ctx, permit("pay", 2))
	if err != nil {
		t.Fatal(err)
	}
	if a.Slot == b.Slot || a.Slot < 1 || a.Slot > 2 || b.Slot < 1 || b.Slot > 2 || a.Fence == 0 || b.Fence == 0 {
		t.Fatalf("holders %+v and %+v: want distinct slots in 1..2 with fences", a, b)
	}
	if _, err := f.m.Semaphores().Acquire(ctx, permit("pay", 2)); !errors.Is(err, lease.ErrLockHeld) {
		t.Fatalf("third caller: %v, want ErrLockHeld", err)
	}
	st, err := f.m.Semaphores().Inspect(ctx, "pay", 2)
	if err != nil || len(st.Holders) != 2 {
		t.Fatalf("inspect: %+v, %v: want two holders", st, err)
	}
	if _, err := f.m.Inspect(ctx, "pay"); err != nil {
		t.Fatal(err) // the lock "pay" is another thing: free
	} else if lk, _ := f.m.Inspect(ctx, "pay"); lk.Held {
		t.Fatal("the lock pay is held: semaphores and locks must be separate")
	}
	got := make(chan lease.Info, 1)
	go func() {
		req := permit("pay", 2)
		req.Wait = 5 * time.Second
		in, err := f.m.Semaphores().Acquire(ctx, req)
		if err != nil {
			t.Error(err)
		}
		got <- in
	}()
	time.Sleep(50 * time.Millisecond) // let it queue; it must not get in before the release
	select {
	case in := <-got:
		t.Fatalf("a waiter got permit %+v while both were held", in)
	default:
	}
	if err := other.Semaphores().Release(ctx, "pay", b.Token); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-got:
		if c.Slot != b.Slot {
			t.Fatalf("the waiter got slot %d, want the released %d", c.Slot, b.Slot)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("the waiter was not granted the released permit")
	}
	if _, err := f.m.Semaphores().Extend(ctx, "pay", a.Token, 0); err != nil {
		t.Fatalf("extend a permit: %v", err)
	}
	if _, err := f.m.Extend(ctx, "pay", a.Token, 0); !errors.Is(err, lease.ErrLeaseGone) {
		t.Fatalf("a permit's token extended the lock of the same name: %v", err)
	}
}

func TestSemaphoreRefusesBadPermits(t *testing.T) {
	f := newFixture(t, 3*time.Second)
	ctx := context.Background()
	var pe *lease.ParamError
	for _, n := range []int{0, -1, lease.MaxPermits + 1} {
		if _, err := f.m.Semaphores().Acquire(ctx, permit("x", n)); !errors.As(err, &pe) || pe.Param != lease.ParamPermits {
			t.Errorf("permits %d: %v, want a permits ParamError", n, err)
		}
	}
	if _, err := f.m.Semaphores().Acquire(ctx, permit("x", 3)); err != nil {
		t.Fatal(err)
	}
	if _, err := f.m.Semaphores().Acquire(ctx, permit("x", 4)); !errors.Is(err, lease.ErrPermitsMismatch) {
		t.Fatalf("permits 4 while 3 are held: %v, want ErrPermitsMismatch", err)
	}
	if _, err := f.m.Semaphores().Acquire(ctx, permit("x", 3)); err != nil {
		t.Fatalf("permits 3 again: %v", err)
	}
}

// The counter-example the design avoids: three callers that each reach two
// of three masters (a,b / b,c / a,c). A counter per master with majority
// admission lets all three into a semaphore of two permits, as every master
// counts only two; slots admit two.
func TestSemaphoreCounterExample(t *testing.T) {
	servers := redistest.StartN(t, 3)
	dead := deadAddr(t)
	reach := [][3]bool{{true, true, false}, {false, true, true}, {true, false, true}}
	addr := func(caller, master int) string {
		if reach[caller][master] {
			return servers[master].Addr()
		}
		return dead
	}
	ctx := context.Background()

	t.Run("a counter per master admits three", func(t *testing.T) {
		admitted := 0
		for caller := range reach {
			votes := 0
			for master := range servers {
				if reach[caller][master] && naiveCounterAdmits(t, servers[master].Addr(), "naive", 2) {
					votes++
				}
			}
			if votes >= 2 {
				admitted++
			}
		}
		if admitted != 3 {
			t.Fatalf("the naive counter admitted %d; the counter-example needs 3", admitted)
		}
	})

	t.Run("slots admit two", func(t *testing.T) {
		admitted := 0
		for caller := range reach {
			m := managerOver(t, 5*time.Second, 100*time.Millisecond, addr(caller, 0), addr(caller, 1), addr(caller, 2))
			_, err := m.Semaphores().Acquire(ctx, permit("pay", 2))
			switch {
			case err == nil:
				admitted++
			case !errors.Is(err, lease.ErrLockHeld):
				t.Fatalf("caller %d: %v", caller, err)
			}
		}
		if admitted != 2 {
			t.Fatalf("slots admitted %d callers to a semaphore of 2 permits", admitted)
		}
	})
}

// naiveCounterAdmits is the unsafe design: one master raises its count of
// holders when it is below permits.
func naiveCounterAdmits(t *testing.T, addr, key string, permits int) bool {
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	const script = `if tonumber(redis.call('GET', KEYS[1]) or '0') < tonumber(ARGV[1]) then redis.call('INCR', KEYS[1]) return 1 end return 0`
	n, err := c.Eval(context.Background(), script, []string{key}, permits).Int()
	if err != nil {
		t.Fatal(err)
	}
	return n == 1
}

// deadAddr is a loopback address where nothing listens.
func deadAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// Many callers over two sidecars contend for three permits; at no moment
// do more than three hold one by their published validity.
func TestSemaphoreNeverOverAdmits(t *testing.T) {
	f := newRealFixture(t, 2*time.Second, nil)
	managers := []*lease.Manager{f.m, newRealFixtureOn(t, f, 2*time.Second)}
	const permits, callers, rounds = 3, 8, 6
	var mu sync.Mutex
	type hold struct{ from, until time.Time }
	var holds []hold
	var wg sync.WaitGroup
	for c := range callers {
		wg.Go(func() {
			m := managers[c%2]
			for range rounds {
				req := permit("pool", permits)
				req.Wait = time.Second // the second sidecar's most
				in, err := m.Semaphores().Acquire(context.Background(), req)
				for errors.Is(err, lease.ErrLockHeld) {
					in, err = m.Semaphores().Acquire(context.Background(), req)
				}
				if err != nil {
					t.Error(err)
					return
				}
				from := time.Now()
				time.Sleep(5 * time.Millisecond)
				until := time.Now()
				if until.After(in.ValidUntil) {
					t.Errorf("held past its valid_until")
				}
				if err := m.Semaphores().Release(context.Background(), "pool", in.Token); err != nil {
					t.Error(err)
				}
				mu.Lock()
				holds = append(holds, hold{from, until})
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for _, h := range holds {
		overlapping := 0
		for _, o := range holds {
			if o.from.Before(h.until) && h.from.Before(o.until) && !o.from.After(h.from) {
				overlapping++
			}
		}
		if overlapping > permits {
			t.Fatalf("%d holders at %v, more than %d permits", overlapping, h.from, permits)
		}
	}
}
