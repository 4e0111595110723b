package lease_test

import (
	"context"
	"testing"
	"time"

	"github.com/sidelock/sidelock/internal/lease"
	"github.com/sidelock/sidelock/internal/redistest"
)

// The chaos suite once reported (not reproduced since) a grant answered
// while an earlier holder's promise stood: the holder had lowered its ttl
// to 1s by a heartbeat right after its grant, two of five durable masters
// were killed and restarted moments later, and its next heartbeat was
// answered lease_gone. This replays that sequence against real masters:
// another sidecar must not get the lock before the first grant's
// valid_until, and must get it soon after the holder stops.
func TestLoweredTTLAndDurableRestartsKeepThePromise(t *testing.T) {
	servers := redistest.StartN(t, 5, redistest.WithAppendOnly())
	addrs := make([]string, len(servers))
	for i, s := range servers {
		addrs[i] = s.Addr()
	}
	const keyTTL = 2 * time.Second
	holder := managerOver(t, keyTTL, 100*time.Millisecond, addrs...)
	other := managerOver(t, keyTTL, 100*time.Millisecond, addrs...)
	ctx := context.Background()
	for round := range 2 {
		name := []string{"hot/a", "hot/b"}[round]
		in, err := holder.Acquire(ctx, lease.Request{Name: name, TTL: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := holder.Extend(ctx, name, in.Token, time.Second); err != nil {
			t.Fatal(err)
		}
		for _, i := range []int{round, round + 1} {
			servers[i].Restart(t) // kill -9, then back with its append-only file
		}
		// The holder says nothing more until a late heartbeat, after its
		// 1s lease ran out (answered lease_gone, as in the chaos run); the
		// other tries all along. Every valid_until the holder was answered
		// must hold: the acquire's outlives the lowered ttl.
		promised, lateAt, late := in.ValidUntil, in.AcquiredAt.Add(1200*time.Millisecond), false
		var got time.Time
		for deadline := in.ValidUntil.Add(3 * time.Second); got.IsZero() && time.Now().Before(deadline); {
			if !late && time.Now().After(lateAt) {
				late = true
				if hb, err := holder.Extend(ctx, name, in.Token, time.Second); err == nil {
					promised = later(promised, hb.ValidUntil)
				} else {
					t.Logf("%s: the holder's late heartbeat: %v", name, err)
				}
			}
			if _, err := other.Acquire(ctx, lease.Request{Name: name}); err == nil {
				got = time.Now()
			}
			time.Sleep(20 * time.Millisecond)
		}
		if got.IsZero() {
			t.Fatalf("%s: the other sidecar never got the lock", name)
		}
		if got.Before(promised) {
			t.Fatalf("%s: granted to another %v before the holder's latest valid_until", name, promised.Sub(got))
		}
		t.Logf("%s: granted to another %v after the holder's latest valid_until", name, got.Sub(promised).Round(time.Millisecond))
	}
}
