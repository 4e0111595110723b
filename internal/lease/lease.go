package lease

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// lease is one caller's grant, held through this sidecar: what it is,
// its timing, and every valid_until it publishes. The keys it holds on the
// masters, their renewal and their validity belong to its tenure
// (tenure.go), which a plain lock's leases may share one after another.
// A lease has no goroutine of its own (thousands of held locks would cost
// a stack each): the Manager's renewer renews its tenure in batches
// (renewer.go), timers end it when its caller's lease lapses or its cap
// is reached, and op.mu serialises what changes it — heartbeats, release
// and its end — so one lease's operations happen one at a time (holding
// op.mu across that lease's own round to the masters is the point) while
// other leases proceed.
//
// Its fields fall in three groups, by the lock that guards them: what the
// lease is (set before it is published, never changed: no lock), op
// (op.mu) and pub (the Manager's lock).
type lease struct {
	m *Manager

	// What the lease is.
	t       *tenure // the keys it holds
	name    string  // the caller's name for it
	res     string  // what it holds, and its key in the Manager's maps (target.resource)
	kind    Kind    // the kind its request stated (Request.kind)
	permits int     // 0 but for a semaphore
	mode    Mode    // "" but for a read/write lock
	slot    int     // 1..permits for a semaphore, 1..MaxReaders for a reader, else 0
	token   string
	owner   string
	grantID string // the random part of its value on the masters; unique per grant
	// replay lets a retried acquire with the same Idempotency-Key and
	// parameters find this lease again.
	replay     replayKey
	acquiredAt time.Time
	fence      int64
	// hold: the caller's connection keeps the lease; no heartbeat needed.
	hold bool
	// capAt ends the lease whatever the caller does (max_hold; zero: no cap).
	capAt time.Time

	op  leaseOp
	pub leasePub
}

// leaseOp is what the lease's own operations serialise on. op.mu is a
// plain mutex, not a lock a ctx can abandon: waiting for it is bounded
// (see the package documentation), and test/sim's virtual clock counts on
// sidelock holding only sync.Mutexes across rounds to the masters (see
// its doc.go).
type leaseOp struct {
	mu         sync.Mutex
	ended      bool
	lapseTimer *time.Timer // the caller's lease running out (nil for a hold)
	capTimer   *time.Timer // max_hold (nil without one)
}

// leasePub is guarded by the Manager's lock: what the caller was told,
// and what decides what it may be told next.
type leasePub struct {
	// ttl and expiresAt are the caller's lease (written under op.mu too).
	ttl       time.Duration
	expiresAt time.Time
	// promised is the latest valid_until ever published: it is never
	// taken back (a caller whose answer was lost still believes it), so
	// the keys are kept until then whatever later answers say.
	promised time.Time
	// endAt, once set (the lease's set ended, lockset.go), caps every
	// later promise: the lease ends then.
	endAt time.Time
	// set is the lock set the lease is one lock of (lockset.go).
	set         *lockSet
	subscribers map[*subscriber]struct{}
	// expiringSent: the caller was warned that renewal keeps failing
	// (cleared by the next success).
	expiringSent bool
}

// tokenBytes is the size of a token and of a grant's id: 128 bits from
// crypto/rand.
const tokenBytes = 16

func newLease(m *Manager, req Request, slot int) (*lease, error) {
	token := req.token
	var err error
	if token == "" {
		if token, err = newSecret(); err != nil {
			return nil, err
		}
	}
	id := req.grantID
	if id == "" {
		if id, err = newSecret(); err != nil {
			return nil, err
		}
	}
	now := time.Now()
	return &lease{
		m:          m,
		name:       req.Name,
		res:        req.target().resource(slot),
		kind:       req.kind,
		permits:    req.Permits,
		mode:       req.Mode,
		slot:       slot,
		token:      token,
		owner:      req.Owner,
		grantID:    id,
		replay:     replayKeyOf(req),
		acquiredAt: now,
		hold:       req.Hold,
		capAt:      m.maxHoldAt(now, req.MaxHold),
		pub:        leasePub{ttl: req.TTL, expiresAt: now.Add(req.TTL)},
	}, nil
}

// maxHoldAt is when a lease acquired at now must end, from the request's
// cap and the Manager's (the smaller wins; zero means none).
func (m *Manager) maxHoldAt(now time.Time, requested time.Duration) time.Time {
	limit := m.cfg.MaxHold
	if requested > 0 && (limit == 0 || requested < limit) {
		limit = requested
	}
	if limit == 0 {
		return time.Time{}
	}
	return now.Add(limit)
}

// newSecret returns 128 random bits as hex.
func newSecret() (string, error) {
	b := make([]byte, tokenBytes)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("reading random bytes: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// The value stored on the masters is "<random id>:<owner>": unique per
// grant, so only this grant can extend or release the key, and carrying the
// owner so any sidecar can say who holds a lock. It is not the token.
func masterValue(id, owner string) string { return id + ":" + owner }

// hasToken compares in constant time, so response timing leaks nothing.
func (l *lease) hasToken(token string) bool {
	return subtle.ConstantTimeCompare([]byte(l.token), []byte(token)) == 1
}

// startTimers arms the lapse and the cap; called once, when the lease is
// published.
func (l *lease) startTimers() {
	if !l.hold {
		l.op.lapseTimer = time.AfterFunc(time.Until(l.pub.expiresAt), l.onLapseTimer)
	}
	if !l.capAt.IsZero() {
		l.op.capTimer = time.AfterFunc(time.Until(l.capAt), func() { l.finish(EndMaxHold, nil) })
	}
}

// onLapseTimer ends the lease unless a heartbeat moved its expiry
// meanwhile, and not before the latest promise it made (lapseAtLocked).
func (l *lease) onLapseTimer() {
	l.op.mu.Lock()
	defer l.op.mu.Unlock()
	if l.op.ended {
		return
	}
	if wait := l.untilLapse(); wait > 0 {
		l.op.lapseTimer.Reset(wait)
		return
	}
	l.finishLocked(EndExpired, nil)
}

// untilLapse is how long until the lease may lapse, for its timer.
func (l *lease) untilLapse() time.Duration {
	l.m.mu.Lock()
	defer l.m.mu.Unlock()
	return time.Until(l.lapseAtLocked())
}

// retryHintLocked is how long until the lease ends if its caller says
// nothing more (a refused caller's Retry-After): unknown (0) for a held
// lease, which lives as long as a connection. The caller holds the
// Manager's lock.
func (l *lease) retryHintLocked(now time.Time) time.Duration {
	if l.hold {
		return 0
	}
	return max(0, l.lapseAtLocked().Sub(now))
}

// lapseAtLocked is when a heartbeat lease may lapse: its expiry, or its
// latest promise if later (a heartbeat that lowered the ttl shortens later
// promises, not earlier ones). The caller holds the Manager's lock.
func (l *lease) lapseAtLocked() time.Time { return later(l.pub.expiresAt, l.pub.promised) }

// callerLeaseOver tells whether the caller's lease ran out at now: a
// heartbeat or a release then answers ErrLeaseGone, and the lapse ends the
// lease once no promise stands. A held lease runs out only with its
// connection.
func (l *lease) callerLeaseOver(now time.Time) bool {
	l.m.mu.Lock()
	defer l.m.mu.Unlock()
	return !l.hold && !now.Before(l.pub.expiresAt)
}

// errLapsing: a heartbeat came after the caller's lease ran out, while
// the lease waits for its lapse.
var errLapsing = fmt.Errorf("%w: the caller's lease ran out", ErrLeaseGone)

// heartbeat is the caller's extend: it fails once the lease has ended, and
// a heartbeat that finds the lock lost ends it. A ctx that ended while the
// heartbeat queued behind another operation on the lease leaves the lease
// untouched; one that ends during the round is extend's to answer.
func (l *lease) heartbeat(ctx context.Context, ttl time.Duration) (Info, error) {
	l.op.mu.Lock()
	defer l.op.mu.Unlock()
	if l.op.ended || l.ending() {
		return Info{}, ErrLeaseGone
	}
	if err := ctx.Err(); err != nil {
		return Info{}, err
	}
	info, err := l.extend(ctx, ttl)
	switch {
	case errors.Is(err, errLapsing):
		// The caller's lease ran out; the lapse ends it, once no promise
		// stands (deleting the keys now could break one).
		return Info{}, ErrLeaseGone
	case errors.Is(err, ErrLeaseGone):
		l.finishLocked(EndLost, err)
		return Info{}, err
	}
	// The expiry moved, even if the round was cut short (err is ctx's).
	if l.op.lapseTimer != nil {
		l.op.lapseTimer.Reset(l.untilLapse())
	}
	return info, err
}

// extend pushes the caller's lease out and confirms the lock on a quorum.
// A failed confirmation keeps the lease (its earlier validity still
// stands) and answers with that earlier valid_until; only a lost lock ends
// it. A confirmation cut short by ctx answers ctx's error: the caller's
// lease stays pushed out, every promise stands, and the tenure keeps its
// place in the renewal grid, so the renewer goes on renewing it; the round
// says nothing about the masters, so it is neither counted nor answered as
// a failed renewal.
func (l *lease) extend(ctx context.Context, ttl time.Duration) (Info, error) {
	l.m.mu.Lock()
	now := time.Now()
	if !now.Before(l.pub.expiresAt) {
		l.m.mu.Unlock()
		return Info{}, errLapsing
	}
	if ttl != 0 {
		l.pub.ttl = ttl
		l.t.cutTTLLocked(l.m.keyTTL(ttl))
	}
	l.pub.expiresAt = now.Add(l.pub.ttl)
	l.m.mu.Unlock()
	err := l.t.confirm(ctx)
	if cut := endedBy(ctx); err != nil && !errors.Is(err, ErrLeaseGone) && cut != nil {
		return Info{}, cut
	}
	l.m.obs.Renewal(err == nil)
	if errors.Is(err, ErrLeaseGone) {
		return Info{}, err
	}
	l.m.mu.Lock()
	e := l.t.renewalDoneLocked(err)
	l.m.mu.Unlock()
	l.publish(e)
	return l.info(true), nil
}

// release is the caller's release. Once it has the lease to itself, the
// end runs whole: ctx is not looked at again (see end). It does not wait
// for the masters: the lease ends here, and its keys pass to the next
// caller of this sidecar, linger, or are released in the background
// (tenure.go).
//
// A lease only waiting for its last promise to pass (its caller's lease ran
// out) answers ErrLeaseGone, as a heartbeat does then, and keeps its keys
// until the lapse: 410 is final for a token. A caller that releases in a
// finally block after a 410 would otherwise delete the keys while a
// valid_until published to it, which its other workers may still act on,
// stands (found by the chaos suite's promise oracle). A lock set asks the
// same of its set as a whole (LockSets.Release).
func (l *lease) release(ctx context.Context) error {
	l.op.mu.Lock()
	defer l.op.mu.Unlock()
	if l.op.ended || l.callerLeaseOver(time.Now()) {
		return ErrLeaseGone
	}
	if err := ctx.Err(); err != nil {
		return err // ended while queued behind another operation: still held
	}
	l.finishLocked(EndReleased, nil)
	return nil
}

// finish ends the lease for reason, once.
func (l *lease) finish(reason EndReason, cause error) {
	l.op.mu.Lock()
	defer l.op.mu.Unlock()
	if !l.op.ended {
		l.finishLocked(reason, cause)
	}
}

func (l *lease) finishLocked(reason EndReason, cause error) {
	l.op.ended = true
	if l.op.lapseTimer != nil {
		l.op.lapseTimer.Stop()
	}
	if l.op.capTimer != nil {
		l.op.capTimer.Stop()
	}
	l.end(reason, cause)
	l.m.wg.Done()
}

// lose ends the lease as lost, off the renewer's goroutine.
func (l *lease) lose(err error) { go l.finish(EndLost, err) }

// end forgets the lease, tells its subscribers, and lets its tenure go on
// (tenure.go): to the next caller of this sidecar, a linger, or a release
// on the masters in the background, never on the caller's path. At
// shutdown the keys are left to lapse instead: the caller may still act
// until the validity it was promised, and deleting them would let another
// take the lock before then.
func (l *lease) end(reason EndReason, cause error) {
	l.freezeSiblings()
	m := l.m
	m.mu.Lock()
	if m.leases[l.res] == l {
		delete(m.leases, l.res)
	}
	valid := l.promiseLocked()
	next := l.t.afterLeaseLocked(l, reason)
	l.closeSubscribersLocked(reason, valid)
	m.mu.Unlock()
	m.changed(l)
	if next != nil {
		m.changed(next)
	}
	m.obs.Ended(reason)
	l.logEnd(reason, cause, valid)
	l.endSiblings(reason, cause)
}

// logAttrs names the lease in log lines: its name and owner, and for a
// semaphore's permit its slot of how many, for a read/write lock its side.
// Never the token.
func (l *lease) logAttrs() []any {
	switch l.kind {
	case KindSemaphore:
		return []any{"semaphore", l.name, "owner", l.owner, "slot", l.slot, "permits", l.permits}
	case KindRWLock:
		return []any{"rwlock", l.name, "owner", l.owner, "mode", string(l.mode), "slot", l.slot}
	}
	return []any{"name", l.name, "owner", l.owner}
}

// errNoCause stands for the cause of a loss that was not given one, so
// that "lock lost" always says something (every caller of lose and of
// finish with EndLost passes its cause).
var errNoCause = errors.New("no cause recorded")

// logEnd says how the lease ended. A loss, with its cause, is a warning;
// a cap reached is not a loss: it is a warning only when the sidecar's
// SIDELOCK_MAX_HOLD cut a lease its caller did not ask to cap as short (a
// release that misses its quorum is logged by the tenure, tenure.go).
// Never the token.
func (l *lease) logEnd(reason EndReason, cause error, valid time.Time) {
	if reason == EndReleased && !l.m.log.Enabled(context.Background(), slog.LevelDebug) {
		return // the common end, logged at debug only: build nothing for it on every release
	}
	log, attrs := l.m.log, l.logAttrs()
	switch reason {
	case EndLost:
		if cause == nil {
			cause = errNoCause
		}
		log.Warn("lock lost", append(attrs, "cause", cause.Error())...)
	case EndMaxHold:
		capped := l.capAt.Sub(l.acquiredAt)
		if l.m.cfg.MaxHold > 0 && capped == l.m.cfg.MaxHold {
			log.Warn("lock ended: it reached the sidecar's cap, SIDELOCK_MAX_HOLD", append(attrs, "max_hold", capped)...)
		} else {
			log.Info("lock ended: it reached the max_hold its caller asked for", append(attrs, "max_hold", capped)...)
		}
	case EndShutdown:
		log.Info("lock left to lapse: the sidecar is shutting down", append(attrs, "valid_until", valid)...)
	case EndExpired:
		log.Info("lease expired: its caller stopped extending it", attrs...)
	default:
		log.Debug("lock released", append(attrs, "reason", string(reason))...)
	}
}

// logAcquisition says at debug how an acquisition ended: granted, held by
// another (409), or refused otherwise, with the outcome its metric counts.
// Never the token, nor the idempotency key.
func (m *Manager) logAcquisition(req Request, info Info, err error, elapsed time.Duration) {
	if !m.log.Enabled(context.Background(), slog.LevelDebug) {
		return // build nothing on every acquisition when debug is off
	}
	outcome := outcomeOf(err)
	attrs := []any{"name", req.Name, "owner", req.Owner, "outcome", string(outcome), "elapsed", elapsed.Round(time.Microsecond)}
	if req.rounds != nil && req.kind == KindLock {
		attrs = append(attrs, "rounds", *req.rounds) // to the masters: 0 when granted on keys this sidecar held
	}
	switch outcome {
	case OutcomeAcquired:
		m.log.Debug("lock acquired", append(attrs, "fence", info.Fence, "valid_until", info.ValidUntil, "hold", req.Hold)...)
	case OutcomeHeld:
		m.log.Debug("lock not acquired: held by another", attrs...)
	default:
		m.log.Debug("lock not acquired", append(attrs, "err", err)...)
	}
}

// promiseLocked is validUntilLocked, published: every answer and event
// that carries a valid_until gets it here, and the latest is kept (by the
// lease, and by its tenure, whose key ttl cuts respect it). The caller
// holds the Manager's lock.
func (l *lease) promiseLocked() time.Time {
	v := l.validUntilLocked()
	l.pub.promised = later(l.pub.promised, v)
	l.t.promised = later(l.t.promised, v)
	return v
}

// validUntilLocked is the promise the lease can make now: its keys'
// validity, never past the caller's lease (which ends it) or its cap. The
// caller holds the Manager's lock.
func (l *lease) validUntilLocked() time.Time {
	v := l.t.keys.validUntil
	if !l.hold {
		v = earlier(v, l.pub.expiresAt)
	}
	if !l.capAt.IsZero() {
		v = earlier(v, l.capAt)
	}
	if !l.pub.endAt.IsZero() {
		v = earlier(v, l.pub.endAt)
	}
	return v
}

func (l *lease) info(withToken bool) Info {
	l.m.mu.Lock()
	defer l.m.mu.Unlock()
	return l.infoLocked(withToken)
}

// infoLocked describes the lease; its ValidUntil is a promise (see
// promiseLocked). The caller holds the Manager's lock.
func (l *lease) infoLocked(withToken bool) Info {
	in := Info{
		Name:           l.name,
		Permits:        l.permits,
		Slot:           l.slot,
		Mode:           l.mode,
		Owner:          l.owner,
		TTL:            l.pub.ttl,
		AcquiredAt:     l.acquiredAt,
		LeaseExpiresAt: l.pub.expiresAt,
		ValidUntil:     l.promiseLocked(),
		Fence:          l.fence,
		Hold:           l.hold,
		MaxHoldAt:      l.capAt,
		Tenure:         l.t.value,
	}
	if withToken {
		in.Token = l.token
	}
	return in
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func earlier(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
