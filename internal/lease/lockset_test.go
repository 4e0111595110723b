package lease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sidelock/sidelock/internal/lease"
)

func set(names string) lease.Request {
	return lease.Request{Name: names, TTL: 10 * time.Second}
}

// A set is taken whole or not at all: with one of its names held
// elsewhere, none of the others is left held.
func TestLockSetIsAllOrNothing(t *testing.T) {
	f, other := twoSidecars(t)
	ctx := context.Background()
	held, err := other.Acquire(ctx, lease.Request{Name: "c", TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.m.LockSets().Acquire(ctx, set("b,a,c")); !errors.Is(err, lease.ErrLockHeld) {
		t.Fatalf("a set with c held elsewhere: %v, want held", err)
	}
	for _, n := range []string{"a", "b"} {
		eventually(t, 2*time.Second, n+" free after the set failed", func() bool {
			st, err := other.Inspect(ctx, n)
			return err == nil && !st.Held
		})
	}
	if err := other.Release(ctx, "c", held.Token); err != nil {
		t.Fatal(err)
	}
	in, err := f.m.LockSets().Acquire(ctx, set("c,b,a"))
	if err != nil {
		t.Fatal(err)
	}
	if in.Name != "a,b,c" || len(in.Locks) != 3 || in.Token == "" {
		t.Fatalf("set: %+v: want a,b,c with three locks and a token", in)
	}
	for _, l := range in.Locks {
		if l.Fence == 0 || l.ValidUntil.Before(in.ValidUntil) || l.Token != "" {
			t.Fatalf("lock %+v of a set valid until %v: want a fence, no token, a validity no earlier than the set's", l, in.ValidUntil)
		}
		if st, err := other.Inspect(ctx, l.Name); err != nil || !st.Held {
			t.Fatalf("%s seen from another sidecar: %+v, %v", l.Name, st, err)
		}
	}
	if _, err := f.m.LockSets().Extend(ctx, "b,c,a", in.Token, 0); err != nil {
		t.Fatalf("extend by any order of the names: %v", err)
	}
	if err := f.m.LockSets().Release(ctx, "a,b,c", in.Token); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"a", "b", "c"} {
		eventually(t, 2*time.Second, n+" free after the set's release", func() bool {
			st, err := other.Inspect(ctx, n)
			return err == nil && !st.Held
		})
	}
}

// Two callers waiting for overlapping sets, asked in opposite orders,
// both get them in turn: the canonical order leaves no deadlock.
func TestOverlappingLockSetsDoNotDeadlock(t *testing.T) {
	f, other := twoSidecars(t)
	ctx := context.Background()
	const rounds = 5
	errs := make(chan error, 2)
	run := func(m *lease.Manager, names string) {
		for range rounds {
			req := set(names)
			req.Wait = time.Second // managerOver's MaxWait
			in, err := m.LockSets().Acquire(ctx, req)
			if err != nil {
				errs <- err
				return
			}
			time.Sleep(5 * time.Millisecond)
			if err := m.LockSets().Release(ctx, in.Name, in.Token); err != nil {
				errs <- err
				return
			}
		}
		errs <- nil
	}
	go run(f.m, "x,y,z")
	go run(other, "z,y,x")
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// When one lock of a set ends, the set ends: releasing one lock through
// the lock API ends the others, and the set's stream reports one end.
func TestALockSetEndsWhole(t *testing.T) {
	f, _ := twoSidecars(t)
	ctx := context.Background()
	in, err := f.m.LockSets().Acquire(ctx, set("p,q"))
	if err != nil {
		t.Fatal(err)
	}
	events, cancel, err := f.m.LockSets().Watch(in.Name, in.Token)
	if err != nil {
		t.Fatal(err)
	}
	defer cancel()
	if err := f.m.Release(ctx, "q", in.Token); err != nil {
		t.Fatalf("release one lock of the set by the set's token: %v", err)
	}
	var ends int
	for e := range events {
		if e.Kind == lease.EventEnded {
			ends++
			if e.Reason != lease.EndReleased {
				t.Errorf("end reason %s, want released", e.Reason)
			}
		}
	}
	if ends != 1 {
		t.Fatalf("%d end events, want 1", ends)
	}
	eventually(t, 3*time.Second, "p ends with q", func() bool {
		st, err := f.m.Inspect(ctx, "p")
		return err == nil && !st.Held
	})
	if len(f.m.List()) != 0 {
		t.Fatalf("leases left: %+v", f.m.List())
	}
}

// A set whose lease ran out (a lowered ttl, its heartbeats late) is gone
// to its token for a release as for a heartbeat, and its locks stay held
// until the set's first promise has passed.
func TestLockSetReleaseAfterItsLeaseRanOutIsGone(t *testing.T) {
	f, other := twoSidecars(t)
	ctx := context.Background()
	in, err := f.m.LockSets().Acquire(ctx, set("m,n"))
	if err != nil {
		t.Fatal(err)
	}
	ext, err := f.m.LockSets().Extend(ctx, in.Name, in.Token, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(ext.LeaseExpiresAt.Add(50 * time.Millisecond)))
	if _, err := f.m.LockSets().Extend(ctx, in.Name, in.Token, 0); !errors.Is(err, lease.ErrLeaseGone) {
		t.Fatalf("heartbeat after the set's lease ran out: %v, want ErrLeaseGone", err)
	}
	if err := f.m.LockSets().Release(ctx, in.Name, in.Token); !errors.Is(err, lease.ErrLeaseGone) {
		t.Fatalf("release after the heartbeat was answered gone: %v, want ErrLeaseGone", err)
	}
	if time.Until(in.ValidUntil) < 500*time.Millisecond {
		t.Skipf("the machine is too slow for this test: the first promise passed already")
	}
	if _, err := other.Acquire(ctx, lease.Request{Name: "n", TTL: time.Second}); err == nil {
		t.Fatalf("n granted elsewhere while the set's first promise (%v) stood", in.ValidUntil.Format(time.StampMilli))
	}
}

func TestLockSetRefusesBadSets(t *testing.T) {
	f, _ := twoSidecars(t)
	ctx := context.Background()
	for _, name := range []string{"a,a", "a,,b", "a,b/../c", "a b", "0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16"} {
		if _, err := f.m.LockSets().Acquire(ctx, set(name)); !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("set %q: %v, want invalid", name, err)
		}
	}
}

// The set's token works only on the whole set: naming some of its locks
// is no set held, and an Idempotency-Key that replays a lock held on its
// own does not release it when the set fails.
func TestLockSetTokenCoversTheWholeSetOnly(t *testing.T) {
	f, _ := twoSidecars(t)
	ctx := context.Background()
	in, err := f.m.LockSets().Acquire(ctx, set("s1,s2,s3"))
	if err != nil {
		t.Fatal(err)
	}
	for _, part := range []string{"s1,s2", "s3"} {
		if _, err := f.m.LockSets().Extend(ctx, part, in.Token, 0); !errors.Is(err, lease.ErrLeaseGone) {
			t.Errorf("extend %s of the set: %v, want lease gone", part, err)
		}
		if err := f.m.LockSets().Release(ctx, part, in.Token); !errors.Is(err, lease.ErrLeaseGone) {
			t.Errorf("release %s of the set: %v, want lease gone", part, err)
		}
	}
	if _, err := f.m.LockSets().Extend(ctx, "s3,s1,s2", in.Token, 0); err != nil {
		t.Fatalf("the whole set: %v", err)
	}

	const key = "set-key-0123456789abcdef"
	alone, err := f.m.Acquire(ctx, lease.Request{Name: "k1", TTL: 10 * time.Second, IdempotencyKey: key})
	if err != nil {
		t.Fatal(err)
	}
	req := set("k1,s1") // s1 is held by the set above: the set fails
	req.IdempotencyKey = key
	if _, err := f.m.LockSets().Acquire(ctx, req); err == nil {
		t.Fatal("a set with a held name was granted")
	}
	if _, err := f.m.Extend(ctx, "k1", alone.Token, 0); err != nil {
		t.Fatalf("the lock held on its own, replayed into the failed set: %v (it must not be released)", err)
	}
}
