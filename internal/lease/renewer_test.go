package lease_test

import (
	"context"
	"testing"
	"time"

	"github.com/sidelock/sidelock/internal/lease"
	"github.com/sidelock/sidelock/pkg/redlock"
	"github.com/sidelock/sidelock/pkg/redlock/memnode"
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

// lateRenewals is a master whose batch renewals take effect late: the
// write lands 40ms after it was sent, after a release sent meanwhile.
type lateRenewals struct {
	*memnode.Node
	inFlight chan struct{} // told when a renewal is on its way
}

func (n *lateRenewals) ExtendMany(ctx context.Context, items []memnode.ExtendItem) ([]int8, error) {
	select {
	case n.inFlight <- struct{}{}:
	default:
	}
	time.Sleep(40 * time.Millisecond)
	return n.Node.ExtendMany(context.WithoutCancel(ctx), items)
}

// Item 6 of issue 13: a release that overtakes a batch renewal in flight
// must not leave a ghost key behind (which made the next waiter wait a
// whole key ttl): the renewal writes no absent key back, and the release
// waits for it.
func TestReleaseDuringAnInFlightRenewalLeavesNoGhostKey(t *testing.T) {
	inFlight := make(chan struct{}, 1)
	var nodes []redlock.Node
	var mem []*memnode.Node
	for i := range 3 {
		n := memnodeNamed(i)
		mem = append(mem, n)
		nodes = append(nodes, &lateRenewals{Node: n, inFlight: inFlight})
	}
	locker, err := redlock.New(nodes, redlock.Config{NodeTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	m, err := lease.NewManager(locker, lease.Config{KeyPrefix: "t:", KeyTTL: time.Second, DefaultTTL: 30 * time.Second, MaxTTL: time.Hour, MaxWait: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(context.Background()) })
	in, err := m.Acquire(context.Background(), lease.Request{Name: "ghost"})
	if err != nil {
		t.Fatal(err)
	}
	<-inFlight // the first renewal (at a third of the key ttl) is on its way
	if err := m.Release(context.Background(), "ghost", in.Token); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // past the late renewal's landing
	for i, n := range mem {
		if v, _, _ := n.Get(context.Background(), "t:ghost"); v != "" {
			t.Fatalf("master %d holds the released lease's key again", i)
		}
	}
}
