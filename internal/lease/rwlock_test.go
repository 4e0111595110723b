package lease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sidelock/sidelock/internal/lease"
)

func rw(name string, mode lease.Mode) lease.Request {
	return lease.Request{Name: name, Mode: mode, TTL: 10 * time.Second}
}

// Two sidecars over three real masters: readers share, a writer is kept
// out while any reads and gets in when they leave, with a fence above the
// previous writer's; readers are kept out while it writes.
func TestRWLockReadersShareAndExcludeTheWriter(t *testing.T) {
	f, other := twoSidecars(t)
	ctx := context.Background()
	locks, otherLocks := f.m.RWLocks(), other.RWLocks()

	w1, err := locks.Acquire(ctx, rw("cfg", lease.ModeExclusive))
	if err != nil || w1.Fence == 0 || w1.Mode != lease.ModeExclusive {
		t.Fatalf("first writer: %+v, %v", w1, err)
	}
	if _, err := otherLocks.Acquire(ctx, rw("cfg", lease.ModeShared)); !errors.Is(err, lease.ErrLockHeld) {
		t.Fatalf("a reader while a writer holds: %v, want held", err)
	}
	if err := locks.Release(ctx, "cfg", w1.Token); err != nil {
		t.Fatal(err)
	}
	r1, err := locks.Acquire(ctx, rw("cfg", lease.ModeShared))
	if err != nil {
		t.Fatal(err)
	}
	r2, err := otherLocks.Acquire(ctx, rw("cfg", lease.ModeShared))
	if err != nil {
		t.Fatalf("a second reader: %v", err)
	}
	r3, err := locks.Acquire(ctx, rw("cfg", lease.ModeShared))
	if err != nil {
		t.Fatalf("a third reader on the same sidecar: %v", err)
	}
	if r1.Slot == r3.Slot || r1.Slot < 1 || r1.Slot > lease.MaxReaders {
		t.Fatalf("readers of one sidecar share slot %d", r1.Slot)
	}
	if _, err := otherLocks.Acquire(ctx, rw("cfg", lease.ModeExclusive)); !errors.Is(err, lease.ErrLockHeld) {
		t.Fatalf("a writer while readers hold: %v, want held", err)
	}
	if lk, err := f.m.Inspect(ctx, "cfg"); err != nil || lk.Held {
		t.Fatalf("the lock cfg: %+v, %v: read/write locks and locks must be separate", lk, err)
	}
	st, err := locks.Inspect(ctx, "cfg")
	if err != nil || len(st.Readers) != 3 || st.Writer.Held {
		t.Fatalf("inspect: %+v, %v: want three readers, no writer", st, err)
	}

	got := make(chan lease.Info, 1)
	go func() {
		req := rw("cfg", lease.ModeExclusive)
		req.Wait = 8 * time.Second
		in, err := locks.Acquire(ctx, req)
		if err != nil {
			t.Error(err)
		}
		got <- in
	}()
	eventually(t, 5*time.Second, "the writer's intent", func() bool {
		st, err := locks.Inspect(ctx, "cfg")
		return err == nil && st.WriterWaiting
	})
	// From the other sidecar, so that only the masters (the intent) can
	// refuse it, not this sidecar's queue.
	if _, err := otherLocks.Acquire(ctx, rw("cfg", lease.ModeShared)); !errors.Is(err, lease.ErrLockHeld) {
		t.Fatalf("a new reader while a writer waits: %v, want held (writers must not starve)", err)
	}
	for _, r := range []struct {
		api   lease.RWLocks
		token string
	}{{locks, r1.Token}, {otherLocks, r2.Token}, {locks, r3.Token}} {
		select {
		case w := <-got:
			t.Fatalf("the writer got in while readers held: %+v", w)
		default:
		}
		if err := r.api.Release(ctx, "cfg", r.token); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case w2 := <-got:
		if w2.Fence <= w1.Fence {
			t.Fatalf("writer fences %d then %d: want increasing", w1.Fence, w2.Fence)
		}
		if st, err := locks.Inspect(ctx, "cfg"); err != nil || !st.Writer.Held || st.WriterWaiting || len(st.Readers) != 0 {
			t.Fatalf("inspect with a writer: %+v, %v", st, err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting writer was not granted once the readers left")
	}
}

// A writer that gives up takes its intent back: readers need not wait for
// it to lapse.
func TestRWLockWriterThatGivesUpLetsReadersIn(t *testing.T) {
	f, _ := twoSidecars(t)
	ctx := context.Background()
	locks := f.m.RWLocks()
	r, err := locks.Acquire(ctx, rw("doc", lease.ModeShared))
	if err != nil {
		t.Fatal(err)
	}
	req := rw("doc", lease.ModeExclusive)
	req.Wait = 300 * time.Millisecond
	if _, err := locks.Acquire(ctx, req); !errors.Is(err, lease.ErrLockHeld) {
		t.Fatalf("writer: %v, want held", err)
	}
	if st, err := locks.Inspect(ctx, "doc"); err != nil || st.WriterWaiting {
		t.Fatalf("after the writer gave up: %+v, %v: want no intent left", st, err)
	}
	if _, err := locks.Acquire(ctx, rw("doc", lease.ModeShared)); err != nil {
		t.Fatalf("a reader after the writer gave up: %v", err)
	}
	if err := locks.Release(ctx, "doc", r.Token); err != nil {
		t.Fatal(err)
	}
}

func TestKindsRefuseOtherKindsFields(t *testing.T) {
	f, _ := twoSidecars(t)
	ctx := context.Background()
	for _, c := range []struct {
		req   lease.Request
		param string
	}{
		{rw("x", "read"), lease.ParamMode},
		{lease.Request{Name: "x", TTL: time.Minute}, lease.ParamMode}, // RWLocks needs a mode
		{lease.Request{Name: "x", Mode: lease.ModeShared, Permits: 2, TTL: time.Minute}, lease.ParamPermits},
	} {
		var pe *lease.ParamError
		if _, err := f.m.RWLocks().Acquire(ctx, c.req); !errors.As(err, &pe) || pe.Param != c.param {
			t.Errorf("%+v: %v, want a %s error", c.req, err, c.param)
		}
	}
	// A lock, a semaphore and a lock set refuse a mode; a lock and a read/write lock refuse permits.
	for _, c := range []struct {
		acquire func(context.Context, lease.Request) (lease.Info, error)
		req     lease.Request
		param   string
	}{
		{f.m.Acquire, rw("x", lease.ModeShared), lease.ParamMode},
		{f.m.Semaphores().Acquire, lease.Request{Name: "x", Permits: 2, Mode: lease.ModeShared}, lease.ParamMode},
		{f.m.LockSets().Acquire, rw("x,y", lease.ModeExclusive), lease.ParamMode},
		{f.m.Acquire, lease.Request{Name: "x", Permits: 2}, lease.ParamPermits},
		{f.m.Semaphores().Acquire, lease.Request{Name: "x"}, lease.ParamPermits},
		{f.m.Semaphores().Acquire, lease.Request{Name: "x", Permits: lease.MaxPermits + 1}, lease.ParamPermits},
	} {
		var pe *lease.ParamError
		if _, err := c.acquire(ctx, c.req); !errors.As(err, &pe) || pe.Param != c.param {
			t.Errorf("%+v: %v, want a %s error", c.req, err, c.param)
		}
	}
}

// twoSidecars is two Managers over the same three real masters, with a
// node timeout that a loaded machine running -race still meets.
func twoSidecars(t *testing.T, tune ...func(*lease.Config)) (*realFixture, *lease.Manager) {
	t.Helper()
	const keyTTL, nodeTimeout = 3 * time.Second, 500 * time.Millisecond
	f := newRealFixtureWith(t, keyTTL, nodeTimeout, nil, func(c *lease.Config) {
		for _, fn := range tune {
			fn(c)
		}
	})
	addrs := make([]string, len(f.servers))
	for i, s := range f.servers {
		addrs[i] = s.Addr()
	}
	return f, managerOver(t, keyTTL, nodeTimeout, addrs...)
}

// Readers of several sidecars fill the reader slots: a reader finds the
// one slot left wherever it is, and the next is refused.
func TestRWLockAdmitsMaxReaders(t *testing.T) {
	f, other := twoSidecars(t)
	ctx := context.Background()
	for i := range lease.MaxReaders - 1 {
		if _, err := other.RWLocks().Acquire(ctx, rw("wide", lease.ModeShared)); err != nil {
			t.Fatalf("reader %d: %v", i+1, err)
		}
	}
	last, err := f.m.RWLocks().Acquire(ctx, rw("wide", lease.ModeShared))
	if err != nil {
		t.Fatalf("the last reader, on another sidecar: %v", err)
	}
	if _, err := f.m.RWLocks().Acquire(ctx, rw("wide", lease.ModeShared)); !errors.Is(err, lease.ErrLockHeld) {
		t.Fatalf("reader %d: %v, want held", lease.MaxReaders+1, err)
	}
	if st, err := f.m.RWLocks().Inspect(ctx, "wide"); err != nil || len(st.Readers) != lease.MaxReaders {
		t.Fatalf("inspect: %d readers, %v", len(st.Readers), err)
	}
	if err := f.m.RWLocks().Release(ctx, "wide", last.Token); err != nil {
		t.Fatal(err)
	}
}
