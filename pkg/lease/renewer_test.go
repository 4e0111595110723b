package lease_test

import (
	"context"
	"testing"
	"time"

	"github.com/sidelock/sidelock/pkg/lease"
)

// The renewer stops ticking when nothing is held; a lease taken after an
// idle spell must still be renewed.
func TestRenewerWakesForALeaseAfterAnIdleSpell(t *testing.T) {
	f := newFixture(t, time.Second)
	first, err := f.m.Acquire(context.Background(), lease.Request{Name: "first", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.m.Release(context.Background(), "first", first.Token); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // the grid empties: the renewer idles
	renewedBefore := f.obs.renewOK.Load()
	if _, err := f.m.Acquire(context.Background(), lease.Request{Name: "second", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2500 * time.Millisecond) // 2.5 key ttls
	if !f.heldOnMasters(t, "second") {
		t.Fatal("a lease taken after an idle spell was not renewed")
	}
	if n := f.obs.renewOK.Load() - renewedBefore; n < 5 {
		t.Errorf("%d renewals in 2.5s with a 1s key ttl, want at least 5", n)
	}
}
