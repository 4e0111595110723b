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

// lease is one lock held through this sidecar: its state, its timing, and
// every valid_until it publishes. It has no goroutine of its own (thousands
// of held locks would cost a stack each): the Manager's renewer renews it
// in batches (renewer.go), timers end it when its caller's lease lapses or
// its cap is reached, and opMu serialises what changes it — heartbeats,
// release and its end — so one lease's operations happen one at a time
// (holding opMu across that lease's own round to the masters is the point)
// while other leases proceed.
type lease struct {
	m    *Manager
	name string // the caller's name for it
	// res is what the lease holds, and its key in the Manager's maps: the
	// name for a lock, one slot of it for a semaphore (semaphore.go).
	res     string
	kind    Kind     // the kind its request stated (Request.kind)
	permits int      // 0 but for a semaphore
	mode    Mode     // "" but for a read/write lock
	slot    int      // 1..permits for a semaphore, 1..MaxReaders for a reader, else 0
	set     *lockSet // the set the lease is one lock of (lockset.go); guarded by the Manager's lock
	key     string
	value   string
	token   string
	owner   string
	// replay lets a retried acquire with the same Idempotency-Key and
	// parameters find this lease again.
	replay     replayKey
	acquiredAt time.Time
	fence      int64 // set before the lease is published, never changed

	// opMu is a plain mutex, not a lock a ctx can abandon: waiting for it
	// is bounded (see the package documentation), and test/sim's virtual
	// clock counts on sidelock holding only sync.Mutexes across rounds to
	// the masters (see its doc.go).
	opMu    sync.Mutex
	ended   bool        // guarded by opMu
	lapse   *time.Timer // the caller's lease running out (nil for a hold)
	maxHold *time.Timer // the cap (nil without one)

	// hold: the caller's connection keeps the lease; no heartbeat needed.
	hold bool
	// maxHoldAt ends the lease whatever the caller does (zero: no cap).
	maxHoldAt time.Time

	// Guarded by the Manager's lock: the event subscribers, the renewal
	// slot the lease waits in (see renewer.go; -1 once ended), and the
	// batch renewal in flight (closed when its answers are applied).
	subscribers map[*subscriber]struct{}
	renewSlot   int64
	renewing    chan struct{}
	// expiringSent: the caller was warned that renewal keeps failing
	// (cleared by the next success).
	expiringSent bool

	// Written under opMu and the Manager's lock; read under the latter.
	ttl       time.Duration
	expiresAt time.Time
	// keyTTL is the ttl put on the masters. It only ever falls during a
	// lease (see cutKeyTTLLocked): a write with a shorter ttl still in
	// flight could otherwise land last and end the keys before a longer
	// validity computed from a later round.
	keyTTL time.Duration
	// keysValidUntil is until when a majority holds the keys, drift taken
	// off: the renewals' grants, never later than a ttl cut allows.
	keysValidUntil time.Time
	// The last cut of keyTTL: when, and the validity a write sent from
	// then on may still leave; rounds that began before it are held to it.
	cutAt, cutCap time.Time
	// wantKeyTTL is the key ttl the caller's ttl asks for, when an earlier
	// promise keeps keyTTL above it for now.
	wantKeyTTL time.Duration
	// promised is the latest valid_until ever published: it is never taken
	// back (a caller whose answer was lost still believes it), so the keys
	// are kept until then whatever later answers say.
	promised time.Time
	// endAt, once set (the lease's set ended, lockset.go), caps every
	// later promise: the lease ends then.
	endAt time.Time
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
		key:        m.cfg.KeyPrefix + req.target().resource(slot),
		value:      masterValue(id, req.Owner),
		token:      token,
		owner:      req.Owner,
		replay:     replayKeyOf(req),
		acquiredAt: now,
		ttl:        req.TTL,
		keyTTL:     m.keyTTL(req.TTL),
		wantKeyTTL: m.keyTTL(req.TTL),
		expiresAt:  now.Add(req.TTL),
		hold:       req.Hold,
		maxHoldAt:  m.maxHoldAt(now, req.MaxHold),
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
		l.lapse = time.AfterFunc(time.Until(l.expiresAt), l.lapsed)
	}
	if !l.maxHoldAt.IsZero() {
		l.maxHold = time.AfterFunc(time.Until(l.maxHoldAt), func() { l.finish(EndMaxHold, nil) })
	}
}

// lapsed ends the lease unless a heartbeat moved its expiry meanwhile, and
// not before the latest promise it made (lapsesAtLocked).
func (l *lease) lapsed() {
	l.opMu.Lock()
	defer l.opMu.Unlock()
	if l.ended {
		return
	}
	if wait := l.lapseIn(); wait > 0 {
		l.lapse.Reset(wait)
		return
	}
	l.finishLocked(EndExpired, nil)
}

// lapseIn is how long until the lease may lapse, for its timer.
func (l *lease) lapseIn() time.Duration {
	l.m.mu.Lock()
	defer l.m.mu.Unlock()
	return time.Until(l.lapsesAtLocked())
}

// lapsesIn is how long until the lease ends if its caller says nothing
// more: unknown (0) for a held lease, which lives as long as a connection.
// The caller holds the Manager's lock.
func (l *lease) lapsesIn(now time.Time) time.Duration {
	if l.hold {
		return 0
	}
	return max(0, l.lapsesAtLocked().Sub(now))
}

// lapsesAtLocked is when a heartbeat lease may lapse: its expiry, or its
// latest promise if later (a heartbeat that lowered the ttl shortens later
// promises, not earlier ones). The caller holds the Manager's lock.
func (l *lease) lapsesAtLocked() time.Time { return later(l.expiresAt, l.promised) }

// ranOut tells whether the caller's lease ran out at now: a heartbeat or a
// release then answers ErrLeaseGone, and the lapse ends the lease once no
// promise stands. A held lease runs out only with its connection.
func (l *lease) ranOut(now time.Time) bool {
	l.m.mu.Lock()
	defer l.m.mu.Unlock()
	return !l.hold && !now.Before(l.expiresAt)
}

// errLapsing: a heartbeat came after the caller's lease ran out, while
// the lease waits for its lapse.
var errLapsing = fmt.Errorf("%w: the caller's lease ran out", ErrLeaseGone)

// heartbeat is the caller's extend: it fails once the lease has ended, and
// a heartbeat that finds the lock lost ends it. A ctx that ended while the
// heartbeat queued behind another operation on the lease leaves the lease
// untouched; one that ends during the round is extend's to answer.
func (l *lease) heartbeat(ctx context.Context, ttl time.Duration) (Info, error) {
	l.opMu.Lock()
	defer l.opMu.Unlock()
	if l.ended || l.ending() {
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
	if l.lapse != nil {
		l.lapse.Reset(l.lapseIn())
	}
	return info, err
}

// extend pushes the caller's lease out and confirms the lock on a quorum.
// A failed confirmation keeps the lease (its earlier validity still
// stands) and answers with that earlier valid_until; only a lost lock ends
// it. A confirmation cut short by ctx answers ctx's error: the caller's
// lease stays pushed out, every promise stands, and the lease keeps its
// place in the renewal grid, so the renewer goes on renewing it; the round
// says nothing about the masters, so it is neither counted nor answered as
// a failed renewal.
func (l *lease) extend(ctx context.Context, ttl time.Duration) (Info, error) {
	l.m.mu.Lock()
	now := time.Now()
	if !now.Before(l.expiresAt) {
		l.m.mu.Unlock()
		return Info{}, errLapsing
	}
	if ttl != 0 {
		l.ttl = ttl
		l.cutKeyTTLLocked(l.m.keyTTL(ttl))
	}
	l.expiresAt = now.Add(l.ttl)
	l.m.mu.Unlock()
	err := l.confirm(ctx)
	if cut := endedBy(ctx); err != nil && !errors.Is(err, ErrLeaseGone) && cut != nil {
		return Info{}, cut
	}
	l.m.obs.Renewal(err == nil)
	if errors.Is(err, ErrLeaseGone) {
		return Info{}, err
	}
	l.m.mu.Lock()
	e := l.renewalDoneLocked(err)
	l.m.mu.Unlock()
	l.publish(e)
	return l.info(true), nil
}

// confirm extends the key on a quorum, as the renewer does for many, in a
// round bounded by ctx.
func (l *lease) confirm(ctx context.Context) error {
	l.m.mu.Lock()
	start, keyTTL := time.Now(), l.keyTTL
	valid := start.Before(l.keysValidUntil)
	l.m.mu.Unlock()
	if !valid {
		return ErrLeaseGone
	}
	grant, err := l.m.locker.Extend(ctx, l.key, l.value, keyTTL)
	return l.applyRenewal(start, grant, err)
}

// release is the caller's release. Once it has the lease to itself, the
// end runs whole: ctx is not looked at again (see end).
//
// A lease only waiting for its last promise to pass (its caller's lease ran
// out) answers ErrLeaseGone, as a heartbeat does then, and keeps its keys
// until the lapse: 410 is final for a token. A caller that releases in a
// finally block after a 410 would otherwise delete the keys while a
// valid_until published to it, which its other workers may still act on,
// stands (found by the chaos suite's promise oracle). A lock set asks the
// same of its set as a whole (LockSets.Release).
func (l *lease) release(ctx context.Context) error {
	l.opMu.Lock()
	defer l.opMu.Unlock()
	if l.ended || l.ranOut(time.Now()) {
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

// lose ends the lease as lost, off the renewer's goroutine (the renewer
// must not wait for a release round).
func (l *lease) lose(err error) { go l.finish(EndLost, err) }

// end forgets the lease and releases its keys on every master, after any
// batch renewal of it in flight has been answered (else the renewal could
// re-create the keys after the release). At shutdown the keys are left to
// lapse instead: the caller may still act until the validity it was
// promised, and deleting them would let another take the lock before then.
//
// The lease is forgotten (so callers learn it is gone) only after that
// renewal, whose repair of a missing key may still be on its way.
//
// The release round is never bounded by a caller's context: once the
// lease is forgotten no token can release its keys again, so a round cut
// short would leave them to block the name for up to a key ttl. Each call
// to a master is bounded by the locker's node timeout instead.
func (l *lease) end(reason EndReason, cause error) {
	l.freezeSiblings()
	l.m.mu.Lock()
	l.renewSlot = -1
	renewing := l.renewing
	l.m.mu.Unlock()
	if renewing != nil {
		<-renewing
	}
	l.m.mu.Lock()
	delete(l.m.leases, l.res)
	valid := l.promiseLocked()
	l.m.mu.Unlock()
	var err error
	wakeLocal := true
	if reason != EndShutdown {
		wakeLocal, err = l.letGo(reason)
	}
	l.m.mu.Lock()
	if wakeLocal {
		l.m.wakeQueueLocked(l.target().queue())
	}
	l.closeSubscribersLocked(reason, valid)
	l.m.mu.Unlock()
	l.m.changed(l)
	l.m.obs.Ended(reason)
	l.logEnd(reason, cause, valid, err)
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

// logEnd says how the lease ended. A loss, with its cause, and a release
// that left keys behind are warnings; a cap reached is not a loss: it is
// a warning only when the sidecar's SIDELOCK_MAX_HOLD cut a lease its
// caller did not ask to cap as short. Never the token.
func (l *lease) logEnd(reason EndReason, cause error, valid time.Time, releaseErr error) {
	if reason == EndReleased && releaseErr == nil && !l.m.log.Enabled(context.Background(), slog.LevelDebug) {
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
		capped := l.maxHoldAt.Sub(l.acquiredAt)
		if l.m.cfg.MaxHold > 0 && capped == l.m.cfg.MaxHold {
			log.Warn("lock ended: it reached the sidecar's cap, SIDELOCK_MAX_HOLD", append(attrs, "max_hold", capped)...)
		} else {
			log.Info("lock ended: it reached the max_hold its caller asked for", append(attrs, "max_hold", capped)...)
		}
	case EndShutdown:
		log.Info("lock left to lapse: the sidecar is shutting down", append(attrs, "valid_until", valid)...)
		return // nothing was deleted
	case EndExpired:
		log.Info("lease expired: its caller stopped extending it", attrs...)
	default:
		log.Debug("lock released", append(attrs, "reason", string(reason))...)
	}
	if releaseErr != nil {
		log.Warn("release did not reach a quorum; keys lapse after their ttl", append(attrs, "reason", string(reason), "err", releaseErr)...)
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
	switch outcome {
	case OutcomeAcquired:
		m.log.Debug("lock acquired", append(attrs, "fence", info.Fence, "valid_until", info.ValidUntil, "hold", req.Hold)...)
	case OutcomeHeld:
		m.log.Debug("lock not acquired: held by another", attrs...)
	default:
		m.log.Debug("lock not acquired", append(attrs, "err", err)...)
	}
}

// cutKeyTTLLocked lowers the key ttl towards want, the one a shorter caller
// ttl asks for, but not so far that the keys could end before the latest
// promise: until that has passed, the cut stops short (and is tried again
// after each renewal). A write with the shorter ttl may land from now on,
// after any write in flight, so the keys may end at now + keyTTL - drift:
// the validity is cut to that at once, and rounds that began earlier are
// held to it. The caller holds the Manager's lock.
func (l *lease) cutKeyTTLLocked(want time.Duration) {
	now := time.Now()
	keyTTL := max(want, l.promised.Sub(now)+l.m.locker.Drift(l.keyTTL))
	l.wantKeyTTL = want
	if keyTTL >= l.keyTTL {
		return
	}
	l.keyTTL = keyTTL
	l.cutAt, l.cutCap = now, now.Add(keyTTL-l.m.locker.Drift(keyTTL))
	l.keysValidUntil = earlier(l.keysValidUntil, l.cutCap)
}

// promiseLocked is validUntilLocked, published: every answer and event
// that carries a valid_until gets it here, and the latest is kept. The
// caller holds the Manager's lock.
func (l *lease) promiseLocked() time.Time {
	v := l.validUntilLocked()
	l.promised = later(l.promised, v)
	return v
}

// validUntilLocked is the promise the lease can make now: the keys'
// validity, never past the caller's lease (which ends it) or its cap. The
// caller holds the Manager's lock.
func (l *lease) validUntilLocked() time.Time {
	v := l.keysValidUntil
	if !l.hold {
		v = earlier(v, l.expiresAt)
	}
	if !l.maxHoldAt.IsZero() {
		v = earlier(v, l.maxHoldAt)
	}
	if !l.endAt.IsZero() {
		v = earlier(v, l.endAt)
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
		TTL:            l.ttl,
		AcquiredAt:     l.acquiredAt,
		LeaseExpiresAt: l.expiresAt,
		ValidUntil:     l.promiseLocked(),
		Fence:          l.fence,
		Hold:           l.hold,
		MaxHoldAt:      l.maxHoldAt,
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
