package lease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sidelock/sidelock/pkg/redlock"
)

// Batched renewal. Tenures (the keys a sidecar holds, tenure.go) do not
// renew themselves: each waits in a slot of a renewal grid (renewQuantum
// wide), and the Manager's one renewer goroutine extends every tenure
// whose slot has come with one ExtendMany call per master. Thousands of
// held locks then cost a few script calls per tick, not a round trip
// each. A tenure is renewed every third of its key ttl (never later:
// slots round down); after a failed renewal it is retried every tenth,
// until its validity runs out and its lease is lost. A caller's heartbeat
// is a renewal too (lease.extend): its verdict is applied by the same
// code, and moves the tenure to a later slot.

// renewQuantum is the width of a renewal slot and the renewer's tick.
const renewQuantum = 50 * time.Millisecond

func slotOf(t time.Time) int64 { return t.UnixNano() / int64(renewQuantum) }

// scheduleLocked puts t in the slot of at. The caller holds m.mu.
func (m *Manager) scheduleLocked(t *tenure, at time.Time) {
	if t.renewSlot == -1 {
		return // not renewed any more
	}
	s := slotOf(at)
	t.renewSlot = s
	if len(m.renewals) == 0 {
		select { // wake an idle renewer
		case m.renewWake <- struct{}{}:
		default:
		}
	}
	m.renewals[s] = append(m.renewals[s], t)
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

// renewDue renews every tenure whose slot has come. The round has no
// caller to bound it: each call to a master is bounded by the locker's
// node timeout.
func (m *Manager) renewDue(now time.Time) {
	start, due, items := m.takeDue(now)
	if len(due) == 0 {
		return
	}
	grants, errs := m.locker.ExtendMany(context.Background(), items)
	for i, t := range due {
		m.renewed(t, start, grants[i], errs[i])
	}
}

// takeDue removes the due tenures from the grid and marks them as being
// renewed (a release waits for the answers). A tenure whose validity has
// already run out is lost, not renewed: the lock may have been free; one
// whose lease's caller ran out waits for its lapse unrenewed. The
// round's start is read under the lock, after any ttl cut it must respect.
func (m *Manager) takeDue(now time.Time) (time.Time, []*tenure, []redlock.ExtendItem) {
	m.mu.Lock()
	defer m.mu.Unlock()
	start := time.Now()
	current := slotOf(now)
	var due []*tenure
	var items []redlock.ExtendItem
	for s, ts := range m.renewals {
		if s > current {
			continue
		}
		delete(m.renewals, s)
		for _, t := range ts {
			if t.renewSlot != s || m.tenures[t.res] != t {
				continue // rescheduled or gone since
			}
			if !t.validLocked(start) {
				t.loseLocked(errValidityRanOut)
				continue
			}
			if l := t.lease; l != nil && !l.hold && !start.Before(l.pub.expiresAt) {
				// The caller's lease ran out and it is told so; its keys
				// already outlast every promise, and the lapse ends it.
				continue
			}
			t.renewing = make(chan struct{})
			due = append(due, t)
			items = append(items, redlock.ExtendItem{Key: t.key, Value: t.value, TTL: t.keys.ttl})
		}
	}
	return start, due, items
}

// errValidityRanOut is the cause of a loss found before a renewal: every
// round since the last success failed (no quorum), and the validity it
// granted has passed.
var errValidityRanOut = fmt.Errorf("%w: its validity ran out before a renewal reached a quorum", ErrLeaseGone)

// renewed applies one tenure's renewal result, then lets a release waiting
// for it go ahead.
func (m *Manager) renewed(t *tenure, start time.Time, g redlock.Grant, err error) {
	defer t.renewedDone()
	m.obs.Renewal(err == nil)
	if applied := t.applyRenewal(start, g, err); errors.Is(applied, ErrLeaseGone) {
		m.mu.Lock()
		t.loseLocked(applied)
		m.mu.Unlock()
		return
	}
	m.mu.Lock()
	e := t.renewalDoneLocked(err)
	l := t.lease
	m.mu.Unlock()
	if l != nil {
		l.publish(e)
	}
}

// loseLocked ends the tenure's lease as lost (off the renewer's
// goroutine: the end waits for a release round), or, while nobody holds
// it, lets the keys go. The caller holds m.mu.
func (t *tenure) loseLocked(err error) {
	// Nothing more is granted or promised on these keys.
	t.lost = true
	t.keys.validUntil = earlier(t.keys.validUntil, time.Now())
	if t.lease != nil {
		t.lease.lose(err)
		return
	}
	if t.state == tenureLingering {
		t.letGoLocked(redlock.WaiterMark{})
	}
}

// renewedDone ends the batch renewal in flight for t.
func (t *tenure) renewedDone() {
	t.m.mu.Lock()
	defer t.m.mu.Unlock()
	if t.renewing != nil {
		close(t.renewing)
		t.renewing = nil
	}
}

// confirm extends the keys on a quorum, as the renewer does for many, in
// a round bounded by ctx (a caller's heartbeat).
func (t *tenure) confirm(ctx context.Context) error {
	t.m.mu.Lock()
	start, keyTTL := time.Now(), t.keys.ttl
	valid := t.validLocked(start)
	t.m.mu.Unlock()
	if !valid {
		return ErrLeaseGone
	}
	grant, err := t.m.locker.Extend(ctx, t.key, t.value, keyTTL)
	return t.applyRenewal(start, grant, err)
}

// applyRenewal records the verdict of an extend round that began at start
// (read under the Manager's lock, after the ttl it used). A round that ends
// after the keys' validity has run out loses the keys even if it
// succeeded: the lock may have been free, and granted and released,
// meanwhile. A grant moves the validity later, never beyond what a ttl cut
// made since the round began allows. The error matches ErrLeaseGone when
// the keys are lost.
func (t *tenure) applyRenewal(start time.Time, g redlock.Grant, err error) error {
	t.m.mu.Lock()
	defer t.m.mu.Unlock()
	// The errors are one line each: they are the cause "lock lost" logs.
	ranOut := !t.validLocked(time.Now())
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
	if start.Before(t.keys.cutAt) {
		v = earlier(v, t.keys.cutCap)
	}
	t.keys.validUntil = later(t.keys.validUntil, v)
	return nil
}

// renewalDoneLocked schedules the next renewal after one that succeeded
// (a renewal interval on) or failed (a retry interval on, never past the
// validity), and returns the event to publish to its lease: renewed,
// expiring or none. Heartbeats and the renewer share it. The caller holds
// the Manager's lock.
func (t *tenure) renewalDoneLocked(err error) Event {
	now := time.Now()
	if err == nil {
		t.m.scheduleLocked(t, now.Add(t.renewInterval()))
		if t.plain && now.Sub(t.notes.written) > t.m.cfg.recordRefresh() {
			t.noteLocked() // the record's retention must outlast the keys
		}
		return t.renewedLocked()
	}
	left := t.keys.validUntil.Sub(now)
	t.m.scheduleLocked(t, now.Add(min(t.retryInterval(), max(left, 0))))
	return t.renewalFailedLocked(err)
}

// renewedLocked notes a successful renewal and returns its lease's event.
// The caller holds the Manager's lock.
func (t *tenure) renewedLocked() Event {
	if t.keys.wantTTL < t.keys.ttl {
		t.cutTTLLocked(t.keys.wantTTL) // an earlier promise may have passed
	}
	l := t.lease
	if l == nil {
		return Event{}
	}
	l.pub.expiringSent = false
	return Event{Kind: EventRenewed, ValidUntil: l.promiseLocked()}
}

// renewalFailedLocked notes a failed renewal and returns the event to
// publish, if any: the first time the validity is within the margin, the
// lease's caller is warned while it can still stop in time. The caller
// holds the Manager's lock.
func (t *tenure) renewalFailedLocked(cause error) Event {
	l := t.lease
	left := time.Until(t.keys.validUntil)
	if l == nil || l.pub.expiringSent || left > t.expiringMargin() {
		return Event{}
	}
	l.pub.expiringSent = true
	valid := l.promiseLocked()
	t.m.log.Warn("lock expiring: renewals keep failing", append(l.logAttrs(),
		"valid_for", left.Round(time.Millisecond), "cause", cause)...)
	return Event{Kind: EventExpiring, ValidUntil: valid}
}

// renewInterval is a third of the key ttl: two more tries fit before the
// key would lapse.
func (t *tenure) renewInterval() time.Duration { return t.keys.ttl / 3 }

// retryInterval spaces renewals after a failed one.
func (t *tenure) retryInterval() time.Duration { return max(t.keys.ttl/10, 10*time.Millisecond) }

// expiringMargin is how close to the end of its validity a tenure whose
// renewals keep failing warns its lease's caller (EventExpiring): a
// renewal interval, so a caller has about a third of the key ttl to stop.
func (t *tenure) expiringMargin() time.Duration { return t.renewInterval() }
