package sim

import (
	"sync"
	"testing"
	"time"

	"github.com/sidelock/sidelock/internal/lease"
)

// Scenarios of tenures (internal/lease/tenure.go): a lock handed between
// callers of one sidecar with no round, then taken by another sidecar.

// A block's fences must all be below the next grant anywhere, even when
// only the counters order them: sidecar 1 takes "x" (a block of 64) and
// hands it to its second caller with the block's next fence, with no
// round; sidecar 2, whose Redlock clock runs 10 minutes behind (its fence
// proposals fall below the masters' floors: its blocks come from the
// commit round, from the counters alone), takes "x" at once after. Its
// fence must be above the handed one. A block that reserved only its first
// fence on the masters (the counter moved by 1) fails it (check b).
func TestTenureBlockIsReservedOnTheMasters(t *testing.T) {
	p := defaultParams()
	p.FenceBlock, p.Linger = 64, 0 // (the scenario's lock does not linger)
	p.LagSidecar, p.LagBy = 1, -10*time.Minute
	w := scenario(t, p, nil, func(t *testing.T, w *world) {
		a1, a2, b := w.client(0, 0), w.client(0, 1), w.client(1, 0)
		time.Sleep(100 * time.Millisecond)
		h1, err := a1.acquire(ctx, lease.Request{Name: "x", TTL: 10 * time.Second})
		if err != nil {
			t.Errorf("the first caller: %v", err)
			return
		}
		handed := make(chan *held, 1)
		w.actors.Go(func() {
			h2, err := a2.acquire(ctx, lease.Request{Name: "x", TTL: 10 * time.Second, Wait: 5 * time.Second})
			if err != nil {
				t.Errorf("the second caller: %v", err)
			}
			handed <- h2
		})
		time.Sleep(20 * time.Millisecond)
		_ = h1.release("")
		h2 := <-handed
		if h2 == nil {
			return
		}
		if h2.g.fence != h1.g.fence+1 {
			t.Errorf("handed over with fence %d after %d: want the block's next, with no round", h2.g.fence, h1.g.fence)
		}
		time.Sleep(20 * time.Millisecond)
		_ = h2.release("")
		hb, err := b.acquire(ctx, lease.Request{Name: "x", TTL: 10 * time.Second, Wait: 5 * time.Second})
		if err != nil {
			t.Errorf("the other sidecar's caller: %v", err)
			return
		}
		_ = hb.release("")
	})
	expectKept(t, w, "a", "b", "c")
}

// A lock handed inside one sidecar while a caller of another waits goes
// to that caller in its turn: sidecar 1's callers take "y" back to back
// (each holds it 30 ms and asks again), and sidecar 2's caller, who came
// after the first of them, is granted before any of them that asked
// later than it by more than a round (its mark heard).
func TestTenureMarksLetAnotherSidecarIn(t *testing.T) {
	p := defaultParams()
	p.FenceBlock, p.Linger = 64, 20*time.Millisecond
	var remoteAsked, remoteGranted time.Time
	type grant struct{ asked, at time.Time }
	var mu sync.Mutex
	var grants []grant
	w := scenario(t, p, nil, func(t *testing.T, w *world) {
		stop := time.Now().Add(3 * time.Second)
		for i := range 3 {
			c := w.client(0, i)
			w.actors.Go(func() {
				for time.Now().Before(stop) {
					asked := time.Now()
					h, err := c.acquire(ctx, lease.Request{Name: "y", TTL: 10 * time.Second, Wait: 5 * time.Second})
					if err != nil {
						continue
					}
					mu.Lock()
					grants = append(grants, grant{asked, time.Now()})
					mu.Unlock()
					time.Sleep(30 * time.Millisecond)
					_ = h.release("")
				}
			})
		}
		time.Sleep(500 * time.Millisecond)
		remoteAsked = time.Now()
		h, err := w.client(1, 0).acquire(ctx, lease.Request{Name: "y", TTL: 10 * time.Second, Wait: 5 * time.Second})
		if err != nil {
			t.Errorf("the other sidecar's caller: %v", err)
			return
		}
		remoteGranted = time.Now()
		_ = h.release("")
	})
	expectKept(t, w, "a", "b", "c")
	jumped := 0
	for _, g := range grants {
		if g.asked.After(remoteAsked.Add(50*time.Millisecond)) && g.at.Before(remoteGranted) {
			jumped++
		}
	}
	if jumped > 0 || remoteGranted.IsZero() {
		t.Errorf("%d callers of sidecar 1 that asked after sidecar 2's caller were granted before it (asked %s, granted %s)\n%s",
			jumped, w.since(remoteAsked), w.since(remoteGranted), history(w, "y"))
	}
}
