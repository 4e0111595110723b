package lease

import (
	"context"
	"crypto/subtle"
	"errors"
	"sync"
	"time"

	"github.com/sidelock/sidelock/pkg/redlock"
)

// lease is one lock held through this sidecar. It has no goroutine of its
// own (thousands of held locks would cost a stack each): the Manager's
// renewer renews it in batches, timers end it when its caller's lease
// lapses or its cap is reached, and opMu serialises what changes it —
// heartbeats, release and its end — so one lease's operations happen one
// at a time (holding opMu across that lease's own round to the masters is
// the point) while other leases proceed.
type lease struct {
	m     *Manager
	name  string
	key   string
	value string
	token string
	owner string
	// idempotencyKey lets a retried acquire find this lease again.
	idempotencyKey string
	acquiredAt     time.Time
	fence          int64 // set before the lease is published, never changed

	opMu    sync.Mutex
	ended   bool        // guarded by opMu
	lapse   *time.Timer // the caller's lease running out (nil for a hold)
	maxHold *time.Timer // the cap (nil without one)

	// hold: the caller's connection keeps the lease; no heartbeat needed.
	hold bool
	// maxHoldAt ends the lease whatever the caller does (zero: no cap).
	maxHoldAt time.Time

	// Guarded by the Manager's lock: the event subscribers, and the
	// renewal slot the lease waits in (see renewer.go; -1 once ended).
	subscribers map[*subscriber]struct{}
	renewSlot   int64

	// Written under opMu and the Manager's lock; read under the latter.
	ttl        time.Duration
	keyTTL     time.Duration
	expiresAt  time.Time
	validUntil time.Time
}

func newLease(m *Manager, req Request) (*lease, error) {
	token, err := newSecret()
	if err != nil {
		return nil, err
	}
	id, err := newSecret()
	if err != nil {
		return nil, err
	}
	now := m.cfg.Now()
	return &lease{
		m:              m,
		name:           req.Name,
		key:            m.cfg.KeyPrefix + req.Name,
		value:          masterValue(id, req.Owner),
		token:          token,
		owner:          req.Owner,
		idempotencyKey: req.IdempotencyKey,
		acquiredAt:     now,
		ttl:            req.TTL,
		keyTTL:         m.keyTTL(req.TTL),
		expiresAt:      now.Add(req.TTL),
		hold:           req.Hold,
		maxHoldAt:      m.maxHoldAt(now, req.MaxHold),
	}, nil
}

// lapsesIn is how long until the lease ends if its caller says nothing
// more: unknown (0) for a held lease, which lives as long as a connection.
// The caller holds the Manager's lock.
func (l *lease) lapsesIn(now time.Time) time.Duration {
	if l.hold {
		return 0
	}
	return max(0, l.expiresAt.Sub(now))
}

// hasToken compares in constant time, so response timing leaks nothing.
func (l *lease) hasToken(token string) bool {
	return subtle.ConstantTimeCompare([]byte(l.token), []byte(token)) == 1
}

// startTimers arms the lapse and the cap; called once, when the lease is
// published.
func (l *lease) startTimers() {
	if !l.hold {
		l.lapse = time.AfterFunc(l.expiresAt.Sub(l.m.cfg.Now()), l.lapsed)
	}
	if !l.maxHoldAt.IsZero() {
		l.maxHold = time.AfterFunc(l.maxHoldAt.Sub(l.m.cfg.Now()), func() { l.finish(EndMaxHold, nil) })
	}
}

// lapsed ends the lease unless a heartbeat moved its expiry meanwhile.
func (l *lease) lapsed() {
	l.opMu.Lock()
	defer l.opMu.Unlock()
	if l.ended || l.m.cfg.Now().Before(l.snapshot().LeaseExpiresAt) {
		return
	}
	l.finishLocked(EndExpired, nil)
}

// heartbeat is the caller's extend: it fails once the lease has ended, and
// a heartbeat that finds the lock lost ends it.
func (l *lease) heartbeat(ttl time.Duration) (Info, error) {
	l.opMu.Lock()
	defer l.opMu.Unlock()
	if l.ended {
		return Info{}, ErrLeaseGone
	}
	info, err := l.extend(ttl)
	if err != nil {
		l.finishLocked(EndLost, err)
		return Info{}, err
	}
	if l.lapse != nil {
		l.lapse.Reset(l.snapshot().LeaseExpiresAt.Sub(l.m.cfg.Now()))
	}
	return info, nil
}

// release is the caller's release.
func (l *lease) release() error {
	l.opMu.Lock()
	defer l.opMu.Unlock()
	if l.ended {
		return ErrLeaseGone
	}
	l.finishLocked(EndReleased, nil)
	return nil
}

// finish ends the lease for reason, once.
func (l *lease) finish(reason EndReason, cause error) {
	l.opMu.Lock()
	defer l.opMu.Unlock()
	if !l.ended {
		l.finishLocked(reason, cause)
	}
}

func (l *lease) finishLocked(reason EndReason, cause error) {
	l.ended = true
	if l.lapse != nil {
		l.lapse.Stop()
	}
	if l.maxHold != nil {
		l.maxHold.Stop()
	}
	l.end(reason, cause)
	l.m.wg.Done()
}

// lose ends the lease as lost, off the caller's goroutine (the renewer
// must not wait for a release round).
func (l *lease) lose(err error) { go l.finish(EndLost, err) }

// renewInterval is a third of the key ttl: two more tries fit before the
// key would lapse.
func (l *lease) renewInterval() time.Duration { return l.keyTTL / 3 }

// retryInterval spaces renewals after a failed one.
func (l *lease) retryInterval() time.Duration { return max(l.keyTTL/10, 10*time.Millisecond) }

// confirm extends the key on a quorum while the previous grant is still
// valid; after that the lock may have been free and granted to another, so
// it is lost even if the keys could be set again.
func (l *lease) confirm() error {
	now := l.m.cfg.Now()
	if !now.Before(l.snapshot().ValidUntil) {
		return ErrLeaseGone
	}
	grant, err := l.m.locker.Extend(context.Background(), l.key, l.value, l.keyTTL)
	if errors.Is(err, redlock.ErrNotHeld) {
		return errors.Join(ErrLeaseGone, err)
	}
	if err != nil {
		return err
	}
	l.m.mu.Lock()
	l.validUntil = later(l.validUntil, grant.ValidUntil)
	l.m.mu.Unlock()
	return nil
}

// extend is the caller's heartbeat: the lease is pushed out and the lock
// confirmed on a quorum. A failed confirmation keeps the lease (the previous
// grant is still valid) but says so; only a lost lock ends it.
func (l *lease) extend(ttl time.Duration) (Info, error) {
	now := l.m.cfg.Now()
	if !now.Before(l.snapshot().LeaseExpiresAt) {
		return Info{}, ErrLeaseGone
	}
	l.m.mu.Lock()
	if ttl != 0 {
		l.ttl = ttl
		l.keyTTL = l.m.keyTTL(ttl)
	}
	l.expiresAt = now.Add(l.ttl)
	l.m.mu.Unlock()
	err := l.confirm()
	l.m.obs.Renewal(err == nil)
	if errors.Is(err, ErrLeaseGone) {
		return Info{}, err
	}
	if err == nil {
		l.m.mu.Lock()
		l.m.scheduleLocked(l, now.Add(l.renewInterval()))
		l.m.mu.Unlock()
	}
	// A transient miss leaves the lease valid until its last ValidUntil.
	info := l.info(true)
	if err == nil {
		l.publish(Event{Kind: EventRenewed, ValidUntil: info.ValidUntil})
	}
	return info, nil
}

// end releases the key on every master and forgets the lease.
func (l *lease) end(reason EndReason, cause error) {
	err := l.m.locker.Release(context.Background(), l.key, l.value)
	l.m.mu.Lock()
	delete(l.m.leases, l.name)
	l.renewSlot = -1
	l.m.wakeQueueLocked(l.name)
	l.closeSubscribersLocked(reason)
	l.m.mu.Unlock()
	l.m.obs.Ended(reason)
	switch {
	case reason == EndLost || reason == EndMaxHold:
		l.m.log.Warn("lock lost", "name", l.name, "owner", l.owner, "cause", cause)
	case err != nil:
		l.m.log.Warn("release did not reach a quorum; keys lapse after their ttl", "name", l.name, "reason", string(reason), "err", err)
	default:
		l.m.log.Debug("lock released", "name", l.name, "reason", string(reason))
	}
}

// snapshot is the lease's current state, without the token.
func (l *lease) snapshot() Info { return l.info(false) }

func (l *lease) info(withToken bool) Info {
	l.m.mu.Lock()
	defer l.m.mu.Unlock()
	return l.infoLocked(withToken)
}

func (l *lease) infoLocked(withToken bool) Info {
	in := Info{
		Name:           l.name,
		Owner:          l.owner,
		TTL:            l.ttl,
		AcquiredAt:     l.acquiredAt,
		LeaseExpiresAt: l.expiresAt,
		ValidUntil:     l.validUntil,
		Fence:          l.fence,
		Hold:           l.hold,
		MaxHoldAt:      l.maxHoldAt,
	}
	if withToken {
		in.Token = l.token
	}
	return in
}
