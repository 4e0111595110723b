package lease

import (
	"context"
	"errors"
	mrand "math/rand/v2"
	"time"

	"github.com/sidelock/sidelock/pkg/redlock"
)

// Waiting for a held lock.
//
// Callers waiting for one name on this sidecar form a FIFO queue. Only the
// head goes to the masters; the others wait for their turn, so a sidecar
// never contends with itself. The head retries when it is woken:
//   - by a release announced through the masters' Pub/Sub (another pod let
//     go), or by a lease of this sidecar ending (this pod let go);
//   - when the holder's keys would lapse if it stopped renewing (the hint a
//     failed acquire returns), which catches holders that died;
//   - by a jittered fallback poll, since Pub/Sub is best-effort;
//   - after a short random back-off when a round found no majority for
//     anyone (a split vote), so racing sidecars do not livelock;
//   - after a back-off when a round found no quorum of masters at all (a
//     master paused, restarting or on probation): the wait rides over it,
//     and only a wait that ends without a quorum answers no quorum.
// A waiter that leaves (its wait or its context ended) leaves the queue and,
// if it was the head, hands the turn to the next.

// WakeSource says what woke a waiting head, for metrics.
type WakeSource string

// Wake sources.
const (
	WakePubSub WakeSource = "pubsub" // a release announced by a master
	WakeLocal  WakeSource = "local"  // a lease of this sidecar ended
	WakeExpiry WakeSource = "expiry" // the holder's keys could have lapsed
	WakePoll   WakeSource = "poll"   // the fallback poll
	WakeSplit  WakeSource = "split"  // back-off after a split vote
	WakeRetry  WakeSource = "retry"  // back-off after a round without quorum
	// WakeHandOver: the lock was handed over to the waiter (handover.go).
	WakeHandOver WakeSource = "handover"
)

// Waiting back-offs.
const (
	pollLo  = 250 * time.Millisecond
	pollHi  = 750 * time.Millisecond
	splitLo = 2 * time.Millisecond
	splitHi = 30 * time.Millisecond
	// expirySlack lets the holder's keys really be gone before retrying.
	expirySlack = 5 * time.Millisecond
	// After a round without quorum: long enough for a health round to
	// judge a master that reconnected, short enough to catch its return.
	retryLo = 20 * time.Millisecond
	retryHi = 100 * time.Millisecond
)

// queue is the FIFO of callers waiting for one name.
type queue struct {
	waiters   []*waiter
	wake      chan WakeSource // 1-buffered: wake-ups coalesce
	stopWatch func()
	permits   int // a semaphore's, asked by every waiter (0 for a lock)
	// marked: a head's try may have left this sidecar's mark on the
	// masters (tenure.go), to be removed when the queue empties. Guarded
	// by the Manager's lock.
	marked bool
}

type waiter struct {
	turn   chan struct{} // closed when the waiter becomes the head
	req    Request       // what it waits for: a hand-over grants it this
	handed chan *lease   // 1-buffered: a lock handed over to it (handover.go)
	// arrival is when it joined the queue, in µs (its place in line on the
	// masters); deadline is when its wait ends.
	arrival  int64
	deadline time.Time
	left     bool // it left the queue; guarded by the Manager's lock
}

// signal wakes the head without blocking; pending wake-ups coalesce.
func (q *queue) signal(src WakeSource) {
	select {
	case q.wake <- src:
	default:
	}
}

// acquireWaiting joins the name's queue and, once at its head, retries
// until the lock is granted, the deadline passes or ctx ends.
func (m *Manager) acquireWaiting(ctx context.Context, req Request, deadline time.Time) (Info, error) {
	id := req.target().queue()
	q, w, err := m.enqueue(req, id, deadline)
	if err != nil {
		return Info{}, err
	}
	defer m.dequeue(id, q, w)
	// Every try of the head keeps its place in line on the masters.
	req.arrival, req.markUntil = w.arrival, deadline
	expired := time.NewTimer(time.Until(deadline))
	defer expired.Stop()
	select {
	case <-w.turn:
	case l := <-w.handed:
		return m.handedOver(l), nil
	case <-expired.C:
		return Info{}, &HeldError{}
	case <-ctx.Done():
		return Info{}, ctx.Err()
	case <-m.stopping:
		return Info{}, ErrShuttingDown
	}
	for outage := 0; ; {
		m.mu.Lock()
		q.marked = q.marked || req.kind == KindLock
		m.mu.Unlock()
		info, err := m.tryAcquire(ctx, req, true)
		pause, timerSource, again := m.nextTry(err, outage)
		if !again {
			return info, err
		}
		if errors.Is(err, ErrNoQuorum) {
			outage++
		} else {
			outage = 0
		}
		t := time.NewTimer(pause)
		select {
		case l := <-w.handed:
			t.Stop()
			return m.handedOver(l), nil
		case src := <-q.wake:
			m.obs.Wakeup(src)
		case <-t.C:
			m.obs.Wakeup(timerSource)
		case <-expired.C:
			t.Stop()
			return Info{}, err
		case <-ctx.Done():
			t.Stop()
			return Info{}, ctx.Err()
		case <-m.stopping:
			t.Stop()
			return Info{}, ErrShuttingDown
		}
		t.Stop()
	}
}

// handedOver is the answer of a waiter a lease was handed over to.
func (m *Manager) handedOver(l *lease) Info {
	m.obs.Wakeup(WakeHandOver)
	return l.info(true)
}

// nextTry says whether a waiting head tries again after err, how long it
// sleeps without a wake-up, and what to call that wake-up. It tries again
// while the lock is held elsewhere and while there is no quorum, backing
// off after the outage-th round in a row without one.
func (m *Manager) nextTry(err error, outage int) (time.Duration, WakeSource, bool) {
	var held *HeldError
	var overloaded *OverloadedError
	switch {
	case errors.As(err, &held):
		if held.Idle {
			// Another sidecar only lingers on it, and was asked to let go:
			// its release (announced) wakes the head, else the linger's end.
			return held.IdleFor + expirySlack, WakeExpiry, true
		}
		if held.RetryAfter == 0 {
			return jitter(splitLo, splitHi), WakeSplit, true
		}
		poll := jitter(pollLo, pollHi)
		if lapse := held.RetryAfter + expirySlack; lapse < poll {
			return lapse, WakeExpiry, true
		}
		return poll, WakePoll, true
	case errors.Is(err, ErrNoQuorum):
		return outageBackoff(noQuorumPause(err), outage), WakeRetry, true
	case errors.As(err, &overloaded):
		// This sidecar was too busy: a caller that asked to wait keeps
		// its place and tries again after the hint (overload.go).
		return overloaded.RetryAfter, WakeRetry, true
	}
	return 0, "", false
}

// outageBackoff doubles a waiting head's pause for every round in a row
// that found no quorum, up to the fallback poll's: an outage costs the
// masters a few calls a second per waiting name, not dozens.
func outageBackoff(pause time.Duration, outage int) time.Duration {
	return min(pause<<min(outage, 5), pollHi)
}

// noQuorumPause is the back-off after a round without quorum: until the
// masters a guard holds out are due back, if that is soon, else a short
// jittered pause (other wake-ups still come).
func noQuorumPause(err error) time.Duration {
	pause := jitter(retryLo, retryHi)
	var qe *redlock.QuorumError
	if errors.As(err, &qe) && qe.RetryAfter > 0 {
		pause = min(qe.RetryAfter+expirySlack, jitter(pollLo, pollHi))
	}
	return pause
}

// enqueue appends a waiter for req to the queue id, creating the queue
// (and its release watch on every key req may take) for the first one,
// who is the head at once. A queue full at MaxWaitersPerName refuses: one
// hot name must not take every waiting slot of the sidecar from the
// others.
func (m *Manager) enqueue(req Request, id string, deadline time.Time) (*queue, *waiter, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	q, ok := m.queues[id]
	if ok && len(q.waiters) >= m.cfg.MaxWaitersPerName {
		return nil, nil, &LimitError{Err: ErrTooManyWaitersForName, Max: m.cfg.MaxWaitersPerName, RetryAfter: limitRetryAfter}
	}
	if !ok {
		q = &queue{wake: make(chan WakeSource, 1), permits: req.Permits}
		q.stopWatch = m.watchReleases(req.target().resources(), func() { q.signal(WakePubSub) })
		m.queues[id] = q
	}
	w := &waiter{turn: make(chan struct{}), req: req, handed: make(chan *lease, 1), arrival: time.Now().UnixMicro(), deadline: deadline}
	q.waiters = append(q.waiters, w)
	if len(q.waiters) == 1 {
		close(w.turn)
	}
	m.waiting++
	return q, w, nil
}

// dequeue removes a waiter; a departing head hands the turn to the next,
// and the last one out drops the queue and its watch. A lease handed over
// to the waiter that it did not take is released.
func (m *Manager) dequeue(name string, q *queue, w *waiter) {
	m.mu.Lock()
	orphan := w.leaveLocked()
	m.dequeueLocked(name, q, w)
	m.mu.Unlock()
	if orphan != nil {
		orphan.finish(EndReleased, nil)
	}
}

func (m *Manager) dequeueLocked(name string, q *queue, w *waiter) {
	m.waiting--
	for i, x := range q.waiters {
		if x != w {
			continue
		}
		q.waiters = append(q.waiters[:i], q.waiters[i+1:]...)
		if i == 0 && len(q.waiters) > 0 {
			close(q.waiters[0].turn)
		}
		break
	}
	if len(q.waiters) == 0 {
		delete(m.queues, name)
		q.stopWatch()
		if q.marked {
			// Nobody of this sidecar waits any more: its mark goes.
			key := m.cfg.KeyPrefix + name
			m.goLocked(func() { _ = m.locker.RemoveMark(context.Background(), key, m.id) })
		}
	}
}

// watchReleases watches the releases of every resource in ids; notify
// must not block.
func (m *Manager) watchReleases(ids []string, notify func()) (cancel func()) {
	cancels := make([]func(), len(ids))
	for i, id := range ids {
		cancels[i] = m.locker.WatchReleases(m.cfg.KeyPrefix+id, notify)
	}
	return func() {
		for _, c := range cancels {
			c()
		}
	}
}

// wakeQueueLocked tells name's waiting head that a lease of this sidecar
// ended. The caller holds m.mu.
func (m *Manager) wakeQueueLocked(name string) {
	if q, ok := m.queues[name]; ok {
		q.signal(WakeLocal)
	}
}

// Waiters is the number of callers waiting for a lock on this sidecar.
func (m *Manager) Waiters() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.waiting
}

// jitter is a random pause in [lo, hi], so that sidecars backing off
// together do not retry together.
func jitter(lo, hi time.Duration) time.Duration {
	return lo + mrand.N(hi-lo+1)
}
