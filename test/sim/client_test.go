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
	f         facade
	g         *grant
	name      string
	token     string
	stopWatch func()
}

// facade is the part of the lease Manager's API for one kind of lease:
// the Manager itself for locks, its Semaphores, RWLocks or LockSets.
type facade interface {
	Acquire(ctx context.Context, req lease.Request) (lease.Info, error)
	Extend(ctx context.Context, name, token string, ttl time.Duration) (lease.Info, error)
	Release(ctx context.Context, name, token string) error
	Watch(name, token string) (<-chan lease.Event, func(), error)
}

func (sc *sidecar) facade(k kind) facade {
	switch k {
	case kindSemaphore:
		return sc.mgr.Semaphores()
	case kindReader, kindWriter:
		return sc.mgr.RWLocks()
	case kindSet:
		return sc.mgr.LockSets()
	}
	return sc.mgr
}

// acquire calls Acquire of the request's kind on the slot's sidecar,
// recording the request and its answer.
func (c *client) acquire(ctx context.Context, q lease.Request) (*held, error) {
	q.Owner = c.nextOwner()
	sc := c.slot.current()
	if sc == nil {
		return nil, errNoSidecar
	}
	rq := c.w.rec.acquireStart(sc.name, c.slot.idx, q)
	f := sc.facade(kindOf(q))
	info, err := f.Acquire(ctx, q)
	g := c.w.rec.acquireDone(rq, info, err)
	if err != nil {
		return nil, err
	}
	// A set is extended and released by its canonical name.
	return &held{c: c, sc: sc, f: f, g: g, name: info.Name, token: info.Token}, nil
}

// key is one of the lease's keys on the masters (a set's first lock's).
func (h *held) key() string {
	if len(h.g.members) > 0 {
		return keyPrefix + h.g.members[0].res
	}
	return keyPrefix + h.g.res
}

// watch subscribes to the lease's events and records them until the
// stream ends.
func (h *held) watch() error {
	events, cancel, err := h.f.Watch(h.name, h.token)
	if err != nil {
		h.c.w.rec.add(subject(h.g.r.req), "%s: watch answered %v", h.g.owner(), err)
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
	info, err := h.f.Extend(context.Background(), h.name, h.token, ttl)
	h.c.w.rec.extendDone(h.g, ttl, start, info, err)
	return info, err
}

func (h *held) release(why string) error {
	h.c.w.rec.releaseStart(h.g, why)
	err := h.f.Release(context.Background(), h.name, h.token)
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
