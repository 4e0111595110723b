package lease

import (
	"context"
	"crypto/subtle"
	"errors"
	"time"

	"github.com/sidelock/sidelock/pkg/redlock"
)

// lease is one lock held through this sidecar. Its goroutine (run) is the
// only one that talks to the masters about it or changes its timing.
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
	fence          int64 // set before the goroutine starts, never changed
	ops            chan op
	lost           chan error    // the renewer reports a lost lock here
	done           chan struct{} // closed when the goroutine has ended the lease

	// hold: the caller's connection keeps the lease; no heartbeat needed.
	hold bool
	// maxHoldAt ends the lease whatever the caller does (zero: no cap).
	maxHoldAt time.Time

	// Guarded by the Manager's lock: the event subscribers, and the
	// renewal slot the lease waits in (see renewer.go; -1 once ended).
	subscribers map[*subscriber]struct{}
	renewSlot   int64

	// Written by run only; read under the Manager's or snapshot's lock.
	ttl        time.Duration
	keyTTL     time.Duration
	expiresAt  time.Time
	validUntil time.Time
}

type opKind int

const (
	opExtend opKind = iota
	opRelease
)

type op struct {
	kind  opKind
	ttl   time.Duration
	reply chan opResult
}

type opResult struct {
	info Info
	err  error
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
		ops:            make(chan op),
		lost:           make(chan error, 1),
		done:           make(chan struct{}),
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

// do hands an operation to the lease's goroutine and waits for its answer.
func (l *lease) do(ctx context.Context, o op) (Info, error) {
	o.reply = make(chan opResult, 1)
	select {
	case l.ops <- o:
	case <-l.done:
		return Info{}, ErrLeaseGone
	case <-ctx.Done():
		return Info{}, ctx.Err()
	}
	r := <-o.reply // the goroutine always answers an accepted op
	return r.info, r.err
}

// run owns the lease until it ends: heartbeats, release, lapse, cap,
// shutdown, and the loss the renewer reports. Renewals themselves are
// batched across leases by the Manager's renewer (renewer.go).
func (l *lease) run() {
	defer l.m.wg.Done()
	defer close(l.done)
	lapse := time.NewTimer(l.expiresAt.Sub(l.m.cfg.Now()))
	defer lapse.Stop()
	if l.hold {
		lapse.Stop() // the connection is the heartbeat
	}
	maxHold := l.maxHoldTimer()
	defer maxHold.Stop()
	for {
		select {
		case <-maxHold.C:
			l.end(EndMaxHold, nil)
			return
		case err := <-l.lost:
			l.end(EndLost, err)
			return
		case <-lapse.C:
			l.end(EndExpired, nil)
			return
		case <-l.m.stopping:
			l.end(EndShutdown, nil)
			return
		case o := <-l.ops:
			if o.kind == opRelease {
				l.end(EndReleased, nil)
				o.reply <- opResult{}
				return
			}
			info, err := l.extend(o.ttl)
			o.reply <- opResult{info: info, err: err}
			if err != nil {
				l.end(EndLost, err)
				return
			}
			if !l.hold {
				lapse.Reset(l.expiresAt.Sub(l.m.cfg.Now()))
			}
		}
	}
}

// lose tells the lease's goroutine that the lock is lost.
func (l *lease) lose(err error) {
	select {
	case l.lost <- err:
	default: // already told
	}
}

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
