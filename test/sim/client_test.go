package sim

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sidelock/sidelock/internal/lease"
)

// client is one caller process in a pod: it talks to whatever sidecar
// generation runs in its slot, and records everything it is told.
type client struct {
	w    *world
	slot *slot
	id   int
	n    int
}

func (w *world) client(slot, id int) *client { return &client{w: w, slot: w.slots[slot], id: id} }

// nextOwner is a unique owner label per acquire call.
func (c *client) nextOwner() string {
	c.n++
	return fmt.Sprintf("s%dc%dn%d", c.slot.idx+1, c.id+1, c.n)
}

// held is a lease the client holds.
type held struct {
	c         *client
	sc        *sidecar
	g         *grant
	name      string
	token     string
	stopWatch func()
}

// acquire calls Manager.Acquire on the slot's sidecar, recording the
// request and its answer.
func (c *client) acquire(ctx context.Context, q lease.Request) (*held, error) {
	q.Owner = c.nextOwner()
	sc := c.slot.current()
	if sc == nil {
		return nil, errNoSidecar
	}
	rq := c.w.rec.acquireStart(sc.name, c.slot.idx, q)
	info, err := sc.mgr.Acquire(ctx, q)
	g := c.w.rec.acquireDone(rq, info, err)
	if err != nil {
		return nil, err
	}
	return &held{c: c, sc: sc, g: g, name: q.Name, token: info.Token}, nil
}

// watch subscribes to the lease's events and records them until the
// stream ends.
func (h *held) watch() error {
	events, cancel, err := h.sc.mgr.Watch(h.name, h.token)
	if err != nil {
		h.c.w.rec.add(h.name, "%s: watch answered %v", h.g.owner(), err)
		if errors.Is(err, lease.ErrLeaseGone) {
			h.c.w.rec.mu.Lock()
			h.c.w.rec.learnEndLocked(h.g, time.Now(), "watch answered lease gone")
			h.c.w.rec.mu.Unlock()
		}
		return err
	}
	h.stopWatch = cancel
	h.c.w.watchers.Go(func() {
		for e := range events {
			h.c.w.rec.event(h.g, e)
		}
	})
	return nil
}

func (h *held) extend(ttl time.Duration) (lease.Info, error) {
	start := time.Now()
	info, err := h.sc.mgr.Extend(context.Background(), h.name, h.token, ttl)
	h.c.w.rec.extendDone(h.g, ttl, start, info, err)
	return info, err
}

func (h *held) release(why string) error {
	h.c.w.rec.releaseStart(h.g, why)
	err := h.sc.mgr.Release(context.Background(), h.name, h.token)
	h.c.w.rec.releaseDone(h.g, err)
	if h.stopWatch != nil {
		h.stopWatch()
	}
	return err
}

// stop ends the caller's interest without a release: it stops
// heartbeating (the lease lapses at its last LeaseExpiresAt, or its latest
// valid_until if that is later) and, if it vanishes, stops listening too.
func (h *held) stop(vanish bool) {
	r := h.c.w.rec
	r.stopped(h.g, vanish)
	r.mu.Lock()
	if !h.g.r.req.Hold {
		// The lease lapses at its expiry, but not before the latest
		// promise made to the caller: that one still stands.
		r.learnEndLocked(h.g, latest(h.g.expiresAt, h.g.latest().vu), "lapse (the caller stopped heartbeating)")
	}
	r.mu.Unlock()
	if vanish && h.stopWatch != nil {
		h.stopWatch()
	}
}

// ended reports whether the caller has learnt that its lease is over.
func (h *held) ended() bool {
	r := h.c.w.rec
	r.mu.Lock()
	defer r.mu.Unlock()
	return !h.g.endAt.IsZero() && !h.g.endAt.After(time.Now())
}

// lapsesAt is when the lease lapses without heartbeats: its expiry, or
// its latest promise if later.
func (h *held) lapsesAt() time.Time {
	r := h.c.w.rec
	r.mu.Lock()
	defer r.mu.Unlock()
	return latest(h.g.expiresAt, h.g.latest().vu)
}

// sleepCtx sleeps d unless ctx ends first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
