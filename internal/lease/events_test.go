package lease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sidelock/sidelock/internal/lease"
)

func nextEvent(t *testing.T, events <-chan lease.Event, within time.Duration) (lease.Event, bool) {
	t.Helper()
	select {
	case e, ok := <-events:
		return e, ok
	case <-time.After(within):
		t.Fatalf("no event within %v", within)
		return lease.Event{}, false
	}
}

func TestWatchDeliversRenewalsThenTheEnd(t *testing.T) {
	f := newFixture(t, time.Second)
	in, err := f.m.Acquire(context.Background(), lease.Request{Name: "w", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	events, cancel, err := f.m.Watch("w", in.Token)
	if err != nil {
		t.Fatal(err)
	}
	defer cancel()
	e, _ := nextEvent(t, events, 2*time.Second)
	if e.Kind != lease.EventRenewed || !e.ValidUntil.After(in.ValidUntil) {
		t.Fatalf("first event %+v, want a renewal past %v", e, in.ValidUntil)
	}
	f.m.Release(context.Background(), "w", in.Token)
	for {
		e, ok := nextEvent(t, events, 2*time.Second)
		if !ok {
			t.Fatal("closed without an end event")
		}
		if e.Kind == lease.EventEnded {
			if e.Reason != lease.EndReleased {
				t.Fatalf("end reason %q", e.Reason)
			}
			break
		}
	}
	if _, ok := nextEvent(t, events, time.Second); ok {
		t.Fatal("channel not closed after the end")
	}
	if _, _, err := f.m.Watch("w", in.Token); !errors.Is(err, lease.ErrLeaseGone) {
		t.Fatalf("watch after the end: %v", err)
	}
}

func TestWatchReportsALostLock(t *testing.T) {
	f := newFixture(t, time.Second)
	in, _ := f.m.Acquire(context.Background(), lease.Request{Name: "w", TTL: time.Minute})
	events, cancel, _ := f.m.Watch("w", in.Token)
	defer cancel()
	f.mem[0].SetDown(true)
	f.mem[1].SetDown(true)
	deadline := time.After(3 * time.Second)
	for {
		select {
		case e := <-events:
			if e.Kind == lease.EventEnded {
				if e.Reason != lease.EndLost {
					t.Fatalf("reason %q, want lost", e.Reason)
				}
				return
			}
		case <-deadline:
			t.Fatal("no lost event")
		}
	}
}

// A held lease needs no heartbeat; max_hold still ends it.
func TestHoldOutlivesItsTTLAndMaxHoldEndsIt(t *testing.T) {
	f := newFixture(t, time.Second)
	in, err := f.m.Acquire(context.Background(), lease.Request{Name: "h", TTL: time.Second, Hold: true, MaxHold: 2500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	events, cancel, _ := f.m.Watch("h", in.Token)
	defer cancel()
	time.Sleep(1500 * time.Millisecond)
	if !f.heldOnMasters(t, "h") {
		t.Fatal("a held lease lapsed after its ttl without heartbeats")
	}
	for e := range events {
		if e.Kind == lease.EventEnded {
			if e.Reason != lease.EndMaxHold {
				t.Fatalf("reason %q, want max_hold", e.Reason)
			}
			break
		}
	}
	eventually(t, 2*time.Second, "the keys released after max_hold", func() bool { return !f.heldOnMasters(t, "h") })
}

func TestNegativeMaxHoldIsInvalid(t *testing.T) {
	f := newFixture(t, time.Second)
	if _, err := f.m.Acquire(context.Background(), lease.Request{Name: "x", MaxHold: -time.Second}); !errors.Is(err, lease.ErrInvalid) {
		t.Fatalf("negative max_hold: %v", err)
	}
}
