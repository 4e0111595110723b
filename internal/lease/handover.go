package lease

import (
	"context"
	"errors"
	"time"

	"github.com/sidelock/sidelock/pkg/redlock"
)

// Pod-local hand-over. When a caller releases a lock (DELETE, or its held
// connection closing) while another caller of this sidecar waits at the
// head of that lock's queue, the sidecar gives the lock to the waiter
// without letting it go: one round (redlock.Locker.HandOver) puts the
// waiter's value on the masters in place of the releaser's and commits
// the waiter's fence, where a release, a wake-up and a new grant took two
// rounds or three. The waiter's answer is the new lease, as if its own
// acquire had been granted: a new token, a fence above the releaser's, a
// validity from the hand-over round.
//
// Only plain locks are handed over (not permits, reads, writes or a lock
// set's locks), and only on a release: a lease that lapsed or was lost
// lets go of its keys as before. A hand-over announces no release, so
// waiters on other sidecars are not woken by one: after maxHandOvers in a
// row the lock is released for real, and this sidecar's head is woken by
// the release's announcement, as other sidecars' waiters are, not at once.
// If a caller of another sidecar held the lock lately (this sidecar's head
// was refused by the masters within remoteWindow), the head also holds
// back for Config.HandOverYield, so that the others' waiters get their turn.

// maxHandOvers bounds the hand-overs in a row of one lock on one sidecar.
const maxHandOvers = 8

// DefaultHandOverYield is how long this sidecar's head lets the others try
// first once a chain of hand-overs ends (Config.HandOverYield): a release's
// announcement and a round reach another sidecar's waiter within it on an
// idle machine, and the lock stays free no longer than that when nobody
// else waits. A loaded machine can take longer; the others then get in
// at a later chain's end.
const DefaultHandOverYield = 5 * time.Millisecond

// remoteWindow is how long after this sidecar last saw another sidecar's
// caller hold a lock its chains of hand-overs end with a yield.
const remoteWindow = 10 * time.Second

// letGo lets go of an ended lease's keys: handed over to the waiting head
// on a release when it can be, else released. wakeLocal says whether this
// sidecar's waiting head should be woken at once.
func (l *lease) letGo(reason EndReason) (wakeLocal bool, err error) {
	value := l.value
	if reason == EndReleased {
		h := l.handOver()
		if h.handed {
			return false, nil
		}
		value, wakeLocal = h.holding, !h.chainEnded
	} else {
		wakeLocal = true
	}
	return wakeLocal, l.m.locker.Release(context.Background(), l.key, value)
}

// handOff is how a hand-over went.
type handOff struct {
	handed bool
	// chainEnded: not handed because the queue had maxHandOvers in a row.
	chainEnded bool
	// holding is the value the masters hold when not handed, to release:
	// the releaser's, or the taker's when it left after the round.
	holding string
}

// handOver gives l's keys to the head of its queue, if one waits for a
// plain lock.
func (l *lease) handOver() handOff {
	m := l.m
	m.mu.Lock()
	q, w := m.handOverTargetLocked(l)
	if w == nil {
		h := handOff{holding: l.value}
		if q != nil {
			now := time.Now()
			h.chainEnded = q.handOvers >= maxHandOvers
			q.handOvers = 0
			if h.chainEnded && now.Sub(q.remoteSeen) < remoteWindow {
				q.yieldUntil = now.Add(m.cfg.HandOverYield)
			}
		}
		m.mu.Unlock()
		return h
	}
	m.mu.Unlock()
	next, err := newLease(m, w.req, 0)
	if err != nil {
		return handOff{holding: l.value}
	}
	grant, err := m.locker.HandOver(context.Background(), l.key, l.value, next.value, next.keyTTL, l.fence)
	if err != nil {
		if !errors.Is(err, redlock.ErrHandOverUnsupported) {
			m.log.Debug("hand-over failed; releasing", append(l.logAttrs(), "err", err)...)
		}
		return handOff{holding: l.value} // the taker's value was released by HandOver
	}
	next.keysValidUntil, next.fence = grant.ValidUntil, grant.Fence
	if !m.deliver(q, w, next) {
		return handOff{holding: next.value} // the waiter left meanwhile
	}
	m.changed(next)
	return handOff{handed: true}
}

// handOverTargetLocked is the queue of l's lock and its head, when l can
// be handed to that head: both plain locks, the head still waiting, no
// shutdown under way and the chain not at its bound. The caller holds
// m.mu.
func (m *Manager) handOverTargetLocked(l *lease) (*queue, *waiter) {
	q, ok := m.queues[l.target().queue()]
	if !ok {
		return nil, nil
	}
	if m.closing || l.set != nil || l.kind != KindLock || len(q.waiters) == 0 || q.handOvers >= maxHandOvers {
		return q, nil
	}
	w := q.waiters[0]
	if w.left || w.req.kind != KindLock || w.req.token != "" || len(w.handed) > 0 {
		return q, nil // a lock set's lock (its token is the set's) is taken by the set
	}
	return q, w
}

// deliver publishes next, the lease handed to w, and hands it over,
// unless w left the queue meanwhile or the sidecar is shutting down.
func (m *Manager) deliver(q *queue, w *waiter, next *lease) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if w.left || m.startLocked(next) != nil {
		return false
	}
	q.handOvers++
	w.handed <- next // 1-buffered, and empty: handOverTargetLocked checked
	return true
}

// withHandOverDefaults fills in the hand-over's default.
func (c Config) withHandOverDefaults() Config {
	if c.HandOverYield == 0 {
		c.HandOverYield = DefaultHandOverYield
	}
	return c
}

// noteRemoteHolder records that the masters refused req's lock while no
// lease of this sidecar held it: another sidecar's caller wants it too.
func (m *Manager) noteRemoteHolder(req Request) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if q, ok := m.queues[req.target().queue()]; ok {
		q.remoteSeen = time.Now()
	}
}

// yieldTurn waits, before the head's next try, while its queue yields to
// other sidecars (a lock handed over to it meanwhile ends the wait).
func (m *Manager) yieldTurn(ctx context.Context, q *queue, w *waiter) (*lease, bool, error) {
	m.mu.Lock()
	wait := time.Until(q.yieldUntil)
	m.mu.Unlock()
	if wait <= 0 {
		return nil, false, nil
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case l := <-w.handed:
		return l, true, nil
	case <-t.C:
		return nil, false, nil
	case <-ctx.Done():
		return nil, false, ctx.Err()
	case <-m.stopping:
		return nil, false, ErrShuttingDown
	}
}

// leave marks w gone under m.mu and returns a lease handed to it that it
// did not take: the caller releases it, since a departed caller never
// holds a lock. The caller holds m.mu.
func (w *waiter) leaveLocked() *lease {
	w.left = true
	select {
	case l := <-w.handed:
		return l
	default:
		return nil
	}
}
