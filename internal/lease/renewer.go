package lease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sidelock/sidelock/pkg/redlock"
)

// Batched renewal. Leases do not renew themselves: each waits in a slot of
// a renewal grid (renewQuantum wide), and the Manager's one renewer
// goroutine extends every lease whose slot has come with one ExtendMany
// call per master. Thousands of held locks then cost a few script calls
// per tick, not a round trip each. A lease is renewed every third of its
// key ttl (never later: slots round down); after a failed renewal it is
// retried every tenth, until its validity runs out and it is lost. A
// caller's heartbeat is a renewal too (lease.extend): its verdict is
// applied by the same code, and moves the lease to a later slot.

// renewQuantum is the width of a renewal slot and the renewer's tick.
const renewQuantum = 50 * time.Millisecond

func slotOf(t time.Time) int64 { return t.UnixNano() / int64(renewQuantum) }

// scheduleLocked puts l in the slot of at. The caller holds m.mu.
func (m *Manager) scheduleLocked(l *lease, at time.Time) {
	if l.renewSlot == -1 {
		return // ended
	}
	s := slotOf(at)
	l.renewSlot = s
	if len(m.renewals) == 0 {
		select { // wake an idle renewer
		case m.renewWake <- struct{}{}:
		default:
		}
	}
	m.renewals[s] = append(m.renewals[s], l)
}

// renewLoop is the renewer: it ticks until the Manager closes. While no
// lease waits in the grid it stops ticking: a pod holding nothing costs no
// CPU (measured in docs/scale.md, a 50ms tick costs an idle sidecar about
// 0.4 ms/s).
func (m *Manager) renewLoop() {
	defer close(m.renewerDone)
	t := time.NewTicker(renewQuantum)
	defer t.Stop()
	for {
		if m.gridEmpty() {
			t.Stop()
			select {
			case <-m.stopping:
				return
			case <-m.renewWake:
			}
			t.Reset(renewQuantum)
		}
		select {
		case <-m.stopping:
			return
		case <-t.C:
			m.renewDue(time.Now())
		}
	}
}

func (m *Manager) gridEmpty() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.renewals) == 0
}

// renewDue renews every live lease whose slot has come. The round has no
// caller to bound it: each call to a master is bounded by the locker's
// node timeout.
func (m *Manager) renewDue(now time.Time) {
	start, due, items := m.takeDue(now)
	if len(due) == 0 {
		return
	}
	grants, errs := m.locker.ExtendMany(context.Background(), items)
	for i, l := range due {
		m.renewed(l, start, grants[i], errs[i])
	}
}

// takeDue removes the due leases from the grid and marks them as being
// renewed (a release waits for the answers). A lease whose validity has
// already run out is lost, not renewed: the lock may have been free; one
// whose caller's lease ran out waits for its lapse unrenewed. The
// round's start is read under the lock, after any ttl cut it must respect.
func (m *Manager) takeDue(now time.Time) (time.Time, []*lease, []redlock.ExtendItem) {
	m.mu.Lock()
	defer m.mu.Unlock()
	start := time.Now()
	current := slotOf(now)
	var due []*lease
	var items []redlock.ExtendItem
	for s, ls := range m.renewals {
		if s > current {
			continue
		}
		delete(m.renewals, s)
		for _, l := range ls {
			if l.renewSlot != s || m.leases[l.res] != l {
				continue // rescheduled or ended since
			}
			if !start.Before(l.keysValidUntil) {
				l.lose(errValidityRanOut)
				continue
			}
			if !l.hold && !start.Before(l.expiresAt) {
				// The caller's lease ran out and it is told so; its keys
				// already outlast every promise, and the lapse ends it.
				continue
			}
			l.renewing = make(chan struct{})
			due = append(due, l)
			items = append(items, redlock.ExtendItem{Key: l.key, Value: l.value, TTL: l.keyTTL})
		}
	}
	return start, due, items
}

// errValidityRanOut is the cause of a loss found before a renewal: every
// round since the last success failed (no quorum), and the validity it
// granted has passed.
var errValidityRanOut = fmt.Errorf("%w: its validity ran out before a renewal reached a quorum", ErrLeaseGone)

// renewed applies one lease's renewal result, then lets a release waiting
// for it go ahead.
func (m *Manager) renewed(l *lease, start time.Time, g redlock.Grant, err error) {
	defer l.renewedDone()
	m.obs.Renewal(err == nil)
	if applied := l.applyRenewal(start, g, err); errors.Is(applied, ErrLeaseGone) {
		l.lose(applied)
		return
	}
	m.mu.Lock()
	e := l.renewalDoneLocked(err)
	m.mu.Unlock()
	l.publish(e)
}

// renewedDone ends the batch renewal in flight for l.
func (l *lease) renewedDone() {
	l.m.mu.Lock()
	defer l.m.mu.Unlock()
	if l.renewing != nil {
		close(l.renewing)
		l.renewing = nil
	}
}

// applyRenewal records the verdict of an extend round that began at start
// (read under the Manager's lock, after the ttl it used). A round that ends
// after the keys' validity has run out loses the lease even if it
// succeeded: the lock may have been free, and granted and released,
// meanwhile. A grant moves the validity later, never beyond what a ttl cut
// made since the round began allows. The error matches ErrLeaseGone when
// the lease is lost.
func (l *lease) applyRenewal(start time.Time, g redlock.Grant, err error) error {
	l.m.mu.Lock()
	defer l.m.mu.Unlock()
	// The errors are one line each: they are the cause "lock lost" logs.
	ranOut := !time.Now().Before(l.keysValidUntil)
	switch {
	case errors.Is(err, redlock.ErrNotHeld):
		return fmt.Errorf("%w: %w", ErrLeaseGone, err)
	case ranOut && err != nil:
		return fmt.Errorf("%w: the renewal ended after the lock's validity ran out: %w", ErrLeaseGone, err)
	case ranOut:
		return fmt.Errorf("%w: the renewal ended after the lock's validity ran out", ErrLeaseGone)
	case err != nil:
		return err
	}
	v := g.ValidUntil
	if start.Before(l.cutAt) {
		v = earlier(v, l.cutCap)
	}
	l.keysValidUntil = later(l.keysValidUntil, v)
	return nil
}

// renewalDoneLocked schedules the next renewal after one that succeeded
// (a renewal interval on) or failed (a retry interval on, never past the
// validity), and returns the event to publish: renewed, expiring or none.
// Heartbeats and the renewer share it. The caller holds the Manager's lock.
func (l *lease) renewalDoneLocked(err error) Event {
	now := time.Now()
	if err == nil {
		l.m.scheduleLocked(l, now.Add(l.renewInterval()))
		return l.renewedLocked()
	}
	left := l.keysValidUntil.Sub(now)
	l.m.scheduleLocked(l, now.Add(min(l.retryInterval(), max(left, 0))))
	return l.renewalFailedLocked(err)
}

// renewedLocked notes a successful renewal and returns its event. The
// caller holds the Manager's lock.
func (l *lease) renewedLocked() Event {
	l.expiringSent = false
	if l.wantKeyTTL < l.keyTTL {
		l.cutKeyTTLLocked(l.wantKeyTTL) // an earlier promise may have passed
	}
	return Event{Kind: EventRenewed, ValidUntil: l.promiseLocked()}
}

// renewalFailedLocked notes a failed renewal and returns the event to
// publish, if any: the first time the validity is within the margin, the
// caller is warned while it can still stop in time. The caller holds the
// Manager's lock.
func (l *lease) renewalFailedLocked(cause error) Event {
	left := time.Until(l.keysValidUntil)
	if l.expiringSent || left > l.expiringMargin() {
		return Event{}
	}
	l.expiringSent = true
	valid := l.promiseLocked()
	l.m.log.Warn("lock expiring: renewals keep failing", append(l.logAttrs(),
		"valid_for", left.Round(time.Millisecond), "cause", cause)...)
	return Event{Kind: EventExpiring, ValidUntil: valid}
}

// renewInterval is a third of the key ttl: two more tries fit before the
// key would lapse.
func (l *lease) renewInterval() time.Duration { return l.keyTTL / 3 }

// retryInterval spaces renewals after a failed one.
func (l *lease) retryInterval() time.Duration { return max(l.keyTTL/10, 10*time.Millisecond) }

// expiringMargin is how close to the end of its validity a lease whose
// renewals keep failing warns its caller (EventExpiring): a renewal
// interval, so a caller has about a third of the key ttl to stop.
func (l *lease) expiringMargin() time.Duration { return l.renewInterval() }
