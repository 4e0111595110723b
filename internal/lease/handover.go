package lease

import (
	"context"
	"errors"
	"time"

	"github.com/sidelock/sidelock/pkg/redlock"
)

// What becomes of a tenure when its lease ends (tenure.go has the why):
// the next caller of this sidecar gets it without a round, or in one round
// with a new block; or an older waiter of another sidecar goes first; or
// it lingers; or it is let go.

// afterLeaseLocked decides what becomes of t now that its lease l ended
// for reason, and starts it; it returns the lease handed over without a
// round (nil if none). The caller holds m.mu.
func (t *tenure) afterLeaseLocked(l *lease, reason EndReason) *lease {
	m := t.m
	if t.lease == l {
		t.lease = nil
	}
	switch {
	case t.state == tenureGone:
		return nil
	case reason == EndShutdown:
		t.leaveLocked() // promises may stand on the keys: they lapse
		return nil
	case reason == EndLost || !t.plain || t.lost || l.pub.set != nil || m.closing:
		t.letGoLocked(redlock.WaiterMark{})
		return nil
	}
	// Released, or lapsed or capped once every promise passed: the keys
	// are free for the next caller.
	now := time.Now()
	w := m.handOverTargetLocked(t)
	switch {
	case w == nil:
		if !t.remoteKnownLocked(now) && t.lingerLocked(now) {
			return nil
		}
		t.letGoLocked(redlock.WaiterMark{})
	case !t.validLocked(now) || t.remoteBeforeLocked(w.arrival, now):
		// The keys' validity passed (a sidecar paused past it grants
		// nothing), or another sidecar's waiter arrived first: let go,
		// keeping w's place in line.
		t.letGoLocked(m.markOf(w, now))
	case t.canGrantLocked(now):
		next, err := newLease(m, w.req, 0)
		if err != nil {
			t.letGoLocked(m.markOf(w, now))
			return nil
		}
		t.grantLocked(next)
		m.deliverLocked(w, next, false)
		return next
	default:
		t.handOverInRoundLocked(w)
	}
	return nil
}

// handOverTargetLocked is the waiter t's keys may go to: the head of its
// queue, waiting for a plain lock (a lock set's lock is taken by the set,
// with the set's token), and not handed one already. The caller holds
// m.mu.
func (m *Manager) handOverTargetLocked(t *tenure) *waiter {
	q, ok := m.queues[t.queue]
	if !ok || len(q.waiters) == 0 {
		return nil
	}
	w := q.waiters[0]
	if w.left || w.req.kind != KindLock || w.req.token != "" || len(w.handed) > 0 {
		return nil
	}
	return w
}

// markOf is w's place in line, for a mark left on the masters (none when
// marks are off). The caller holds m.mu.
func (m *Manager) markOf(w *waiter, now time.Time) redlock.WaiterMark {
	if !m.cfg.waiterMarks() {
		return redlock.WaiterMark{}
	}
	return redlock.WaiterMark{Sidecar: m.id, Arrival: w.arrival, TTL: m.markTTL(w.deadline, now)}
}

// deliverLocked publishes next, granted to w, and hands it to w (which
// takes it from w.handed). fresh: next's tenure is new (taken in a round),
// not the one the last lease held. The caller holds m.mu, and checked
// that w has not left.
func (m *Manager) deliverLocked(w *waiter, next *lease, fresh bool) {
	m.startLocked(next, fresh)
	w.handed <- next // 1-buffered, and empty: handOverTargetLocked checked
}

// handOverInRoundLocked hands t's keys to w in one round, with a new
// block (its own is used up): Take with From replaces t's value by a new
// tenure's, under the masters' mark rule. Until the round is answered t
// is held (no caller of this sidecar takes it). A failed round lets the
// keys go, keeping w's place in line. The caller holds m.mu.
func (t *tenure) handOverInRoundLocked(w *waiter) {
	m := t.m
	now := time.Now()
	t.lease = nil
	mark := m.markOf(w, now)
	m.goLocked(func() {
		next, err := newLease(m, w.req, 0)
		if err != nil {
			m.mu.Lock()
			t.letGoLocked(mark)
			m.mu.Unlock()
			return
		}
		nt := newTenure(m, next, true)
		req := m.takeRequest(next, nt, mark)
		req.From, req.Floor = t.value, t.top
		got, err := m.locker.Take(context.Background(), req)
		m.mu.Lock()
		defer m.mu.Unlock()
		if err != nil {
			if !errors.Is(err, ErrLockHeld) {
				m.log.Debug("hand-over failed; releasing", "name", t.res, "err", err)
			}
			t.letGoLocked(mark) // the taker's value was released by Take
			return
		}
		t.goneLocked() // its value is no longer on the masters
		nt.tookLocked(next, got)
		if w.left || m.closing {
			nt.letGoLocked(redlock.WaiterMark{}) // a departed caller never holds a lock
			return
		}
		m.deliverLocked(w, next, true)
		m.changed(next)
	})
}

// leaveLocked marks w gone under m.mu and returns a lease handed to it that
// it did not take: the caller releases it, since a departed caller never
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
