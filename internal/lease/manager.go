// Package lease holds the locks this sidecar takes for its callers, and
// keeps them alive for as long as their callers are.
//
// Two clocks run per lease. The keys on the masters carry a short key ttl
// (default 10s, never more than the caller's ttl), which the Manager's one
// renewer goroutine extends on a quorum about every third of it, with one
// batched call per master per tick for every lease then due (renewer.go):
// a sidecar that dies frees its locks within one key ttl. The caller's
// lease (its ttl) is kept alive by Extend, or for a hold by the caller's
// connection; when it lapses (never before a valid_until already
// promised), renewal stops and the keys are deleted.
//
// A lease has no goroutine of its own (lease.go): the renewer renews it,
// timers end it when its caller's lease lapses or its cap is reached, and
// its mutex serialises its heartbeats, its release and its end, so no two
// operations on one lease race while leases never wait for each other.
//
// Contexts. Acquire, Extend, Release and Inspect, given a ctx that has
// already ended, answer ctx.Err() without touching a lease or the masters
// (a request is still checked first: an invalid one, or a wrong token, is
// answered as such). A ctx that ends later bounds the caller's wait, never
// the lock:
//   - Acquire bounds its wait in the queue and its rounds to the masters,
//     Inspect its round, by ctx. A round cut short answers ctx.Err(), not
//     no quorum (it says nothing about the masters), and a lock granted to
//     a caller whose ctx ended is released at once.
//   - Extend bounds its confirmation round by ctx. Cut short, it answers
//     ctx.Err(); the heartbeat still counts (its ttl and the lease's new
//     expiry stand, as for a heartbeat whose answer was lost), every
//     valid_until already promised stands, and the renewer keeps renewing
//     the lease on its schedule. A round cut short is not counted as a
//     failed renewal.
//   - Release is honoured until it starts to end the lease: a ctx that
//     ended before (or while it queued behind another operation on the
//     lease) leaves the lease held, to be released again or to lapse. Once
//     it starts, the end runs to completion, deletion on the masters
//     included, whatever ctx does: a release cut short would have forgotten
//     the lease, so no token could delete its keys any more.
//   - A lease's operations queue for its mutex without watching ctx (it is
//     looked at again once they have it): the one ahead holds it only until
//     its round to the masters (and, for an end, a batch renewal of the
//     lease in flight) is over, every call bounded by the locker's node
//     timeout.
//   - Close bounds by ctx only its wait for the leases to end; they end.
//
// What is NOT guaranteed: a lease is an advisory lock. ValidUntil is the only
// promise — until then a majority of masters holds the key. If every renewal
// fails until then, the lease is lost: Extend and Release answer ErrLeaseGone
// from that moment, but a caller that does not ask will not know. A caller
// that must not act on a stale lock uses fencing.
package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/sidelock/sidelock/pkg/redlock"
)

// Errors returned by Manager; match with errors.Is.
var (
	ErrInvalid      = errors.New("invalid request")
	ErrLockHeld     = redlock.ErrLockHeld
	ErrNoQuorum     = redlock.ErrNoQuorum
	ErrLeaseGone    = errors.New("lease gone")
	ErrShuttingDown = errors.New("sidecar is shutting down")
)

// HeldError carries the retry hint of ErrLockHeld.
type HeldError = redlock.HeldError

// Limits of a request, enforced by Manager.
const (
	MinTTL = time.Second
	// MaxNoQuorumRetry bounds Config.NoQuorumRetry: a try-once acquire
	// must still fail fast in a real outage.
	MaxNoQuorumRetry = 5 * time.Second
)

// Config configures a Manager; Validate reports bad combinations.
type Config struct {
	KeyPrefix  string        // namespace of keys on the masters (keyprefix.go)
	KeyTTL     time.Duration // longest ttl put on the masters
	DefaultTTL time.Duration // caller ttl when none is asked for
	MaxTTL     time.Duration // longest caller ttl
	MaxWait    time.Duration // longest wait for a held lock
	MaxHold    time.Duration // cap on any lease's life (0: none)
	MaxLocks   int           // live leases at once (0: DefaultMaxLocks); see limits.go
	MaxWaiters int           // callers waiting at once (0: DefaultMaxWaiters)
	// MaxWaitersPerName bounds one name's queue (0: a quarter of
	// MaxWaiters), so one hot name cannot take every waiting slot.
	MaxWaitersPerName int
	// NoQuorumRetry is how long a try-once acquire may keep retrying
	// rounds that found no quorum (0: it answers after one round).
	NoQuorumRetry time.Duration
	// QuorumUp reports whether the health checks last found a quorum (nil:
	// assume so). A try-once acquire does not retry while they did not: a
	// known outage fails at once.
	QuorumUp func() bool
	// MaxAcquireRounds bounds the acquisition rounds in flight to the
	// masters at once, and AdmissionWait how long an acquisition waits for
	// a place before it is refused as overloaded (0: the defaults); see
	// overload.go. Renewals are not bounded.
	MaxAcquireRounds int
	AdmissionWait    time.Duration
	// FenceBlock is how many fences a plain lock's grant reserves on the
	// masters, to hand the lock from caller to caller of this sidecar
	// without a round (0: DefaultFenceBlock; 1: no hand-over without a
	// round); see tenure.go.
	FenceBlock int
	// Linger is how long this sidecar keeps a plain lock's keys after its
	// last caller let go, to grant the next caller of this sidecar at once
	// (0: none); at most MaxLingerShare of the key ttl. See tenure.go.
	Linger time.Duration
	// NoWaiterMarks turns waiter marks off: this sidecar's waiters leave
	// none, and it hands a lock from caller to caller of its own whatever
	// other sidecars' waiters (see tenure.go). Their marks still order
	// this sidecar's takes of a free lock.
	NoWaiterMarks bool
	// FenceRetention is the masters' fence retention (0: an hour), which
	// holder records share: a record is written again well before it.
	FenceRetention time.Duration

	Observer Observer     // nil: none
	Logger   *slog.Logger // nil: discard
	// Changed (nil: none) is told the name of every lock whose lease on
	// this sidecar starts or ends, so its watchers learn at once (package
	// watch). It must not block.
	Changed func(name string)
}

// Validate checks the timing rules that keep renewal sound.
func (c Config) Validate() error {
	if err := ValidateKeyPrefix(c.KeyPrefix); err != nil {
		return fmt.Errorf("key prefix %w", err)
	}
	switch {
	case c.KeyTTL < MinTTL:
		return fmt.Errorf("key ttl %v must be at least %v", c.KeyTTL, MinTTL)
	case c.MaxTTL < MinTTL:
		return fmt.Errorf("max ttl %v must be at least %v", c.MaxTTL, MinTTL)
	case c.KeyTTL > c.MaxTTL:
		return fmt.Errorf("key ttl %v must not exceed max ttl %v", c.KeyTTL, c.MaxTTL)
	case c.DefaultTTL < MinTTL || c.DefaultTTL > c.MaxTTL:
		return fmt.Errorf("default ttl %v must be within [%v, %v]", c.DefaultTTL, MinTTL, c.MaxTTL)
	case c.MaxWait < 0:
		return fmt.Errorf("max wait %v must not be negative", c.MaxWait)
	case c.MaxHold < 0:
		return fmt.Errorf("max hold %v must not be negative", c.MaxHold)
	case c.NoQuorumRetry < 0 || c.NoQuorumRetry > MaxNoQuorumRetry:
		return fmt.Errorf("no-quorum retry %v must be within [0s, %v]", c.NoQuorumRetry, MaxNoQuorumRetry)
	case c.FenceBlock < 0 || c.FenceBlock > MaxFenceBlock:
		return fmt.Errorf("fence block %d must be within [0, %d] (0 takes the default)", c.FenceBlock, MaxFenceBlock)
	case c.Linger < 0 || c.Linger > time.Duration(float64(c.KeyTTL)*MaxLingerShare):
		return fmt.Errorf("linger %v must be within [0s, %v] (%v of the key ttl)", c.Linger, time.Duration(float64(c.KeyTTL)*MaxLingerShare), MaxLingerShare)
	}
	return errors.Join(c.validateLimits(), c.validateAdmission())
}

// Request asks for a lock.
type Request struct {
	Name  string
	Owner string        // free label for humans
	TTL   time.Duration // caller's lease; 0 takes the default
	Wait  time.Duration // how long to wait for a held lock; 0 tries once
	// IdempotencyKey makes a retried acquire safe: while this sidecar holds
	// the name for a lease acquired with the same key, Acquire returns that
	// lease (same token) instead of ErrLockHeld.
	IdempotencyKey string
	// Hold keeps the lease alive without heartbeats, for as long as the
	// caller's connection lives; the caller releases when it closes.
	Hold bool
	// MaxHold caps the lease's whole life, heartbeats or not (0: the
	// Manager's MaxHold). Reaching it ends the lease as lost (max_hold).
	MaxHold time.Duration
	// Permits, for Semaphores.Acquire only, is how many callers may hold
	// the semaphore Name at once (semaphore.go).
	Permits int
	// Mode, for RWLocks.Acquire only, is the side of the read/write lock
	// Name asked for: shared (one of many readers) or exclusive (its one
	// writer); see rwlock.go.
	Mode Mode

	// kind is the kind asked for, stated by the API the request came
	// through (Manager, Semaphores, RWLocks; a lock set's locks are locks)
	// and never inferred from Permits or Mode. Kinds are separate spaces:
	// the lock "x", the semaphore "x" and the read/write lock "x" are
	// unrelated.
	kind Kind

	// grantID, when set, is the random part of the value every try of
	// this request puts on the masters (one per Acquire call): a writer's
	// tries leave their intent under it, and a writer that gives up
	// releases its intent by it.
	grantID string
	// token, when set, is the lease's token: the locks of a set share
	// theirs (lockset.go).
	token string
	// arrival is when the caller came (µs), for its place in line on the
	// masters (its waiter mark, tenure.go); markUntil, when set, is until
	// when a refusal leaves a mark (a waiting caller's deadline).
	arrival   int64
	markUntil time.Time
	// keepOnIdle: a try refused by a sidecar that only lingers on the lock
	// keeps what it took, to try again with the same value (grantID).
	keepOnIdle bool
	// rounds, when set, counts the rounds to the masters the acquisition
	// made (for its debug log line).
	rounds *int
}

// countRounds adds n rounds to the acquisition's count.
func (r Request) countRounds(n int) {
	if r.rounds != nil {
		*r.rounds += n
	}
}

// Info describes a lease held through this sidecar.
type Info struct {
	Name           string
	Token          string // set only in answers to the lease's holder
	Owner          string
	TTL            time.Duration
	AcquiredAt     time.Time
	LeaseExpiresAt time.Time // when the caller's lease lapses without Extend
	ValidUntil     time.Time // until when a quorum holds the key
	Fence          int64     // the grant's fencing token (0 when fencing is off)
	Hold           bool      // kept alive by the caller's connection
	MaxHoldAt      time.Time // when the lease ends whatever happens (zero: never)
	// Tenure is the value the masters hold for the lease: its sidecar's
	// hold of the keys, which several leases of one lock may share, one
	// after another (tenure.go). Not a token, and not published by the
	// API: tests match it to what the masters hold.
	Tenure  string
	Permits int  // a semaphore's permits (0 for a lock)
	Slot    int  // the slot held: 1..Permits for a semaphore, 1..MaxReaders for a reader, else 0
	Mode    Mode // a read/write lock's side ("" for locks and semaphores)
	// Locks are a lock set's locks, by name (each with its own fence and
	// validity); the set's ValidUntil is the earliest of theirs.
	Locks []Info
}

// Status is what the masters say about a lock name.
type Status struct {
	Name       string
	Held       bool
	Owner      string
	ValidUntil time.Time
	Fence      int64
	Slot       int // for a semaphore's holder or a reader: the slot it holds
	// Grant tells grants apart: the random part of the value the masters
	// hold, unique per grant. It is not a token (it can neither extend
	// nor release through the API), but it is not published either.
	Grant string
}

// Manager holds the leases of this sidecar.
type Manager struct {
	locker Locker
	cfg    Config
	obs    Observer
	log    *slog.Logger

	stopping chan struct{}  // closed by Close: every lease ends
	wg       sync.WaitGroup // one per live lease, done when it has ended
	limits   limiter
	admit    *admission // bounds acquisition rounds (overload.go)

	// id names this sidecar to the others on the masters (its waiter
	// marks), and channel is where the masters tell it that another
	// sidecar wants one of its locks, or released one it asked for
	// (tenure.go).
	id, channel string
	// channelUse counts what needs channel watched (tenures of plain
	// locks, acquisitions of them); stopChannel cancels the watch.
	channelUse  int
	stopChannel func()
	channelIdle *time.Timer

	mu      sync.Mutex
	closing bool
	leases  map[string]*lease    // live leases by resource (target.resource)
	tenures map[string]*tenure   // held keys by resource (tenure.go)
	letting map[string][]letting // keys being released, by target.queue (tenure.go)
	// releasing counts the releases under way in the background (letting's
	// entries): past MaxReleasing, a caller's release waits for its own.
	releasing int
	awaiting  map[string][]chan struct{}
	// recentlyLet is when this sidecar last let go of a plain lock's keys,
	// by resource (tenure.go: hot locks linger); recentKept is its size
	// after its last pruning.
	recentlyLet map[string]time.Time
	recentKept  int
	pending     map[string]struct{} // resources being acquired right now
	queues      map[string]*queue   // callers waiting, by target.queue
	waiting     int                 // callers in all queues
	// background counts the work on the masters under way off the
	// callers' paths (releases, hand-overs, notes; tenure.go), which Close
	// waits for; backgroundIdle is signalled when it drops to 0.
	background     int
	backgroundIdle *sync.Cond
	// renewals is the renewal grid: leases by the slot they renew in.
	renewals    map[int64][]*tenure
	renewWake   chan struct{} // 1-buffered: the grid gained its first lease
	renewerDone chan struct{}
}

// NewManager returns a Manager that locks through locker, and starts its
// renewer.
func NewManager(locker Locker, cfg Config) (*Manager, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withLimitDefaults().withAdmissionDefaults().withTenureDefaults()
	obs := cfg.Observer
	if obs == nil {
		obs = nopObserver{}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	id, err := newSecret()
	if err != nil {
		return nil, err
	}
	m := &Manager{
		locker:      newRenewalRetrier(locker), // overload.go
		cfg:         cfg,
		obs:         obs,
		log:         log,
		id:          id,
		channel:     cfg.KeyPrefix + channelMark + id,
		stopping:    make(chan struct{}),
		leases:      make(map[string]*lease),
		tenures:     make(map[string]*tenure),
		letting:     make(map[string][]letting),
		pending:     make(map[string]struct{}),
		queues:      make(map[string]*queue),
		renewals:    make(map[int64][]*tenure),
		renewWake:   make(chan struct{}, 1),
		renewerDone: make(chan struct{}),
		admit:       newAdmission(cfg.MaxAcquireRounds, cfg.AdmissionWait),
	}
	m.backgroundIdle = sync.NewCond(&m.mu)
	// The channel is watched from the first acquire of a lock on (for
	// channelKeep after the last use), not from the start: a pod that never
	// locks holds no subscription. A message in the subscription's first
	// round trip can be missed; each has a bounded fallback (tenure.go).
	go m.renewLoop()
	return m, nil
}

// Acquire takes the lock for req, waiting up to req.Wait in this sidecar's
// FIFO queue for the name while it is held elsewhere. If ctx ends while the
// lock is being granted, the lock is released at once: a departed caller
// never holds a lock.
func (m *Manager) Acquire(ctx context.Context, req Request) (Info, error) {
	req.kind = KindLock
	return m.acquire(ctx, req)
}

// acquire is Acquire for a request of any kind (req.kind).
func (m *Manager) acquire(ctx context.Context, req Request) (Info, error) {
	start := time.Now()
	req, err := m.normalize(req)
	if err != nil {
		m.obs.Acquisition(OutcomeInvalid, 0)
		return Info{}, err
	}
	if err := ctx.Err(); err != nil {
		m.obs.Acquisition(outcomeOf(err), time.Since(start))
		return Info{}, err
	}
	info, replayed, err := m.replay(req)
	if err != nil || replayed {
		m.obs.Acquisition(outcomeOf(err), time.Since(start))
		return info, err
	}
	if req.Mode == ModeExclusive {
		if req.grantID, err = newSecret(); err != nil {
			return Info{}, err
		}
	}
	rounds := 0
	req.rounds = &rounds
	if req.kind == KindLock {
		// A lock another sidecar only lingers on is asked for, and its
		// release announced, on this sidecar's channel (tenure.go).
		m.mu.Lock()
		m.useChannelLocked()
		m.mu.Unlock()
		defer func() {
			m.mu.Lock()
			m.unuseChannelLocked()
			m.mu.Unlock()
		}()
	}
	if req.Wait == 0 {
		info, err = m.tryAcquireOnce(ctx, req, start)
	} else {
		info, err = m.acquireWaitingWithinLimit(ctx, req, start.Add(req.Wait))
		m.obs.Waited(outcomeOf(err), time.Since(start))
	}
	if err != nil {
		m.releaseIntent(req)
	}
	m.obs.Acquisition(outcomeOf(err), time.Since(start))
	m.logAcquisition(req, info, err, time.Since(start))
	return info, err
}

// tryAcquireOnce is a try-once acquire: it answers at once whether the lock
// is free, but one round without quorum (a slow answer, a master judged
// again after reconnecting) is retried while the NoQuorumRetry budget
// since start allows. Masters held out for longer (a restart probation)
// make it fail as soon as the budget cannot cover a retry, and an outage
// the health checks already see (QuorumUp) at once. A lock that another
// sidecar only lingers on (nobody holds it) is asked for, and tried once
// more when that sidecar has let go: one round more than a free lock.
func (m *Manager) tryAcquireOnce(ctx context.Context, req Request, start time.Time) (Info, error) {
	budgetEnd := start.Add(m.cfg.NoQuorumRetry)
	req.arrival = start.UnixMicro()
	if req.kind == KindLock && req.grantID == "" {
		// Every try puts the same value on the masters: a try refused by a
		// sidecar that only lingers keeps what it took, and the next one
		// takes the rest, with no round to undo the first in between.
		var err error
		if req.grantID, err = newSecret(); err != nil {
			return Info{}, err
		}
		req.keepOnIdle = true
	}
	awaitRelease, done := m.expectRelease(req.target().resource(0))
	defer done()
	for {
		info, err := m.tryAcquire(ctx, req, false)
		var held *HeldError
		if errors.As(err, &held) && held.Idle && req.keepOnIdle {
			req.keepOnIdle = false // one more try, which releases what it took if refused
			if err := awaitRelease(ctx, held.IdleOn, min(held.IdleFor, MaxRevokeWait)+expirySlack); err != nil {
				key := m.cfg.KeyPrefix + req.target().resource(0)
				_ = m.locker.ReleaseTenure(context.WithoutCancel(ctx), key, masterValue(req.grantID, req.Owner), redlock.WaiterMark{Sidecar: m.id}, "")
				return Info{}, err
			}
			continue
		}
		if !errors.Is(err, ErrNoQuorum) {
			return info, err
		}
		pause := noQuorumPause(err)
		if time.Now().Add(pause).After(budgetEnd) || (m.cfg.QuorumUp != nil && !m.cfg.QuorumUp()) {
			return info, err
		}
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return Info{}, ctx.Err()
		case <-m.stopping:
			t.Stop()
			return Info{}, ErrShuttingDown
		}
	}
}

// tryAcquire makes one try for req: one round to the masters for a lock
// or a writer, one round per slot tried for a semaphore (semaphore.go) or
// a reader (rwlock.go).
func (m *Manager) tryAcquire(ctx context.Context, req Request, fromQueue bool) (Info, error) {
	switch {
	case req.kind == KindRWLock && req.Mode == ModeShared:
		return m.tryAcquireReader(ctx, req, fromQueue)
	case req.kind == KindSemaphore:
		return m.tryAcquireSemaphore(ctx, req, fromQueue)
	}
	return m.tryAcquireSlot(ctx, req, 0, fromQueue)
}

// tryAcquireSlot makes one round to the masters for a lock or a writer
// (slot 0), one slot of a semaphore or one reader's slot; a lock whose
// keys this sidecar lingers on is granted at once, with no round. A
// caller outside the queue (fromQueue false) does not jump ahead of
// waiters. A caller whose ctx ended during the round holds nothing and
// hears ctx's error, whatever the masters answered: a round cut short
// says nothing about them.
func (m *Manager) tryAcquireSlot(ctx context.Context, req Request, slot int, fromQueue bool) (Info, error) {
	res := req.target().resource(slot)
	for {
		l, letting, err := m.reserve(req, res, fromQueue)
		switch {
		case err != nil:
			return Info{}, err
		case l != nil:
			m.changed(l)
			return l.info(true), nil
		case letting == nil:
		default:
			// This sidecar's own keys of res are being released: wait for
			// the answer rather than meet them on the masters.
			select {
			case <-letting:
				continue
			case <-ctx.Done():
				return Info{}, ctx.Err()
			case <-m.stopping:
				return Info{}, ErrShuttingDown
			}
		}
		break
	}
	l, err := newLease(m, req, slot)
	if err != nil {
		m.unreserve(res)
		return Info{}, err
	}
	t := newTenure(m, l, m.plainLock(req))
	l.t = t
	err = m.acquireAdmitted(ctx, l, req)
	if ctx.Err() != nil && err == nil {
		// The release must run whole although ctx has ended.
		_ = m.locker.ReleaseTenure(context.WithoutCancel(ctx), t.key, t.value, redlock.WaiterMark{Sidecar: m.id}, "")
		err = ctx.Err()
	} else if cut := endedBy(ctx); err != nil && cut != nil {
		err = cut // the failed round released it everywhere (Locker.Acquire)
	}
	if err != nil {
		m.unreserve(res)
		return Info{}, err
	}
	if err := m.start(l); err != nil {
		_ = m.locker.ReleaseTenure(context.WithoutCancel(ctx), t.key, t.value, redlock.WaiterMark{Sidecar: m.id}, "")
		return Info{}, err
	}
	m.changed(l)
	return l.info(true), nil
}

// plainLock tells whether req's keys may make a tenure that outlives its
// lease (tenure.go): a plain lock's, not a lock set's.
func (m *Manager) plainLock(req Request) bool {
	return req.kind == KindLock && req.token == ""
}

// acquireAdmitted runs l's acquisition round once the admission gate lets
// it (overload.go): beyond it, a burst is refused as overloaded instead of
// timing out at the masters as no quorum. A plain lock is taken with a
// block of fences and a place in line (redlock.Locker.Take); on success
// l and its tenure know their keys' validity and fences.
func (m *Manager) acquireAdmitted(ctx context.Context, l *lease, req Request) error {
	leave, err := m.admit.enter(ctx, m.stopping)
	if err != nil {
		return err
	}
	defer leave()
	t := l.t
	var grant redlock.Grant
	switch l.mode {
	case ModeShared:
		grant, err = m.locker.AcquireReader(ctx, t.key, t.value, t.keys.ttl, m.rwKeys(l.name))
	case ModeExclusive:
		grant, err = m.locker.AcquireWriter(ctx, t.value, t.keys.ttl, m.writerKeys(l.name))
	default:
		if t.plain || req.token != "" {
			return m.take(ctx, l, req)
		}
		grant, err = m.locker.Acquire(ctx, t.key, t.value, t.keys.ttl)
	}
	if err != nil {
		return err
	}
	m.mu.Lock()
	t.keys.validUntil, l.fence = grant.ValidUntil, grant.Fence
	t.next, t.top = grant.Fence+1, grant.Fence
	m.mu.Unlock()
	return nil
}

// take takes a lock's keys with a block of fences and the caller's place
// in line (a lock set's lock too, with a block of one: its tenure never
// outlives it). Where the masters cannot keep a tenure (or the key is
// moving between quorum groups), it is a plain acquire, and the tenure a
// plain one.
func (m *Manager) take(ctx context.Context, l *lease, req Request) error {
	t := l.t
	mark := redlock.WaiterMark{}
	if !req.markUntil.IsZero() && m.cfg.waiterMarks() {
		mark = redlock.WaiterMark{TTL: m.markTTL(req.markUntil, time.Now())}
	}
	treq := m.takeRequest(l, t, mark)
	treq.Mark.Arrival, treq.KeepOnIdle = req.arrival, req.keepOnIdle
	if !t.plain {
		treq.Block = 1
	}
	got, err := m.locker.Take(ctx, treq)
	req.countRounds(max(1, got.Rounds))
	if errors.Is(err, redlock.ErrTenureUnsupported) {
		t.plain = false
		var grant redlock.Grant
		if grant, err = m.locker.Acquire(ctx, t.key, t.value, t.keys.ttl); err == nil {
			got = redlock.Tenure{ValidUntil: grant.ValidUntil, First: grant.Fence, Top: grant.Fence}
		}
	}
	if err != nil {
		return err
	}
	m.mu.Lock()
	t.tookLocked(l, got)
	m.mu.Unlock()
	return nil
}

// takeRequest asks for l's keys for tenure t, with mark as the caller's
// place in line (the mark's Arrival is w's, or set by the caller).
func (m *Manager) takeRequest(l *lease, t *tenure, mark redlock.WaiterMark) redlock.TakeRequest {
	mark.Sidecar = m.id
	return redlock.TakeRequest{
		Key: t.key, Value: t.value, TTL: t.keys.ttl, Block: int64(m.cfg.FenceBlock),
		Holder: redlock.HolderRecord{Grant: l.grantID, Owner: l.owner, Channel: m.channel},
		Mark:   mark,
	}
}

// tookLocked records a take's grant: the keys' validity, the block (its
// first fence is l's), and the oldest waiter of another sidecar seen. The
// caller holds m.mu.
func (t *tenure) tookLocked(l *lease, got redlock.Tenure) {
	now := time.Now()
	t.keys.validUntil = got.ValidUntil
	l.t, l.fence = t, got.First
	t.next, t.top, t.granted = got.First+1, got.Top, 1
	t.learnLocked(got.Oldest, "", now)
	if at, ok := t.m.recentlyLet[t.res]; ok && now.Sub(at) < t.m.cfg.hotWindow() {
		t.hot = true
	}
}

// reserve lets one acquisition per resource go to the masters from this
// sidecar; others see it as held without a round trip. A plain lock whose
// keys this sidecar lingers on is granted here at once (l), with the next
// fence of its block; keys of res that this sidecar is releasing make the
// caller wait for the release (letting).
func (m *Manager) reserve(req Request, res string, fromQueue bool) (l *lease, letting <-chan struct{}, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closing {
		return nil, nil, ErrShuttingDown
	}
	if _, queued := m.queues[req.target().queue()]; queued && !fromQueue {
		return nil, nil, &HeldError{}
	}
	if l, ok := m.leases[res]; ok {
		return nil, nil, &HeldError{RetryAfter: l.retryHintLocked(time.Now())}
	}
	if t, ok := m.tenures[res]; ok {
		if t.state != tenureLingering {
			return nil, nil, &HeldError{} // being handed over in a round
		}
		if l, err := m.grantLingeringLocked(t, req); l != nil || err != nil {
			return l, nil, err
		}
	}
	if ls := m.letting[req.target().queue()]; len(ls) > 0 {
		return nil, ls[0].done, nil
	}
	if _, ok := m.pending[res]; ok {
		return nil, nil, &HeldError{}
	}
	if err := m.checkLockLimitLocked(); err != nil {
		return nil, nil, err
	}
	m.pending[res] = struct{}{}
	return nil, nil, nil
}

// grantLingeringLocked grants req the keys t lingers on, with the next
// fence of the block, if it still may (keys valid, a fence left); else
// it lets them go (the caller then waits for that release). The caller
// holds m.mu.
func (m *Manager) grantLingeringLocked(t *tenure, req Request) (*lease, error) {
	if !t.canGrantLocked(time.Now()) {
		t.letGoLocked(redlock.WaiterMark{})
		return nil, nil
	}
	if err := m.checkLockLimitLocked(); err != nil {
		return nil, err
	}
	l, err := newLease(m, req, 0)
	if err != nil {
		return nil, err
	}
	t.grantLocked(l)
	m.startLocked(l, false)
	return l, nil
}

func (m *Manager) unreserve(name string) {
	m.mu.Lock()
	delete(m.pending, name)
	m.mu.Unlock()
}

// start turns a granted reservation into a live lease on a new tenure:
// published by resource, its tenure placed in the renewal grid, its
// timers armed.
func (m *Manager) start(l *lease) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.pending, l.res)
	if m.closing {
		return ErrShuttingDown
	}
	m.startLocked(l, true)
	return nil
}

// startLocked publishes l, whose tenure is new (fresh: it joins the
// renewal grid) or held already. The caller holds m.mu.
func (m *Manager) startLocked(l *lease, fresh bool) {
	t := l.t
	m.leases[l.res] = l
	t.lease, t.state = l, tenureHolding
	if fresh {
		m.tenures[t.res] = t
		m.scheduleLocked(t, l.acquiredAt.Add(t.renewInterval()))
		if t.plain {
			t.usesChannel = true
			m.useChannelLocked()
		}
	}
	m.wg.Add(1) // done when the lease ends
	l.startTimers()
}

// Extend renews the caller's lease, optionally with a new ttl, and confirms
// the lock on a quorum so the answer carries a fresh ValidUntil. See the
// package documentation for what ctx bounds.
func (m *Manager) Extend(ctx context.Context, name, token string, ttl time.Duration) (Info, error) {
	return m.extend(ctx, m.findAmong(target{}), name, token, ttl)
}

// Release ends the caller's lease and deletes the key on the masters. See
// the package documentation for what ctx bounds.
func (m *Manager) Release(ctx context.Context, name, token string) error {
	return m.release(ctx, m.findAmong(target{}), name, token)
}

// finder finds the live lease of a name held with a token, or answers
// ErrLeaseGone (see findAmong).
type finder func(name, token string) (*lease, error)

// findAmong returns the finder among the leases of kind's kind: every
// resource a lease of the name may hold (target.resources) is looked up.
func (m *Manager) findAmong(kind target) finder {
	return func(name, token string) (*lease, error) {
		t := kind
		t.name = name
		m.mu.Lock()
		defer m.mu.Unlock()
		for _, res := range t.resources() {
			if l, ok := m.leases[res]; ok && l.hasToken(token) {
				return l, nil
			}
		}
		return nil, ErrLeaseGone
	}
}

func (m *Manager) extend(ctx context.Context, find finder, name, token string, ttl time.Duration) (Info, error) {
	if ttl != 0 {
		if err := m.checkTTL(ttl); err != nil {
			return Info{}, err
		}
	}
	l, err := find(name, token)
	if err != nil {
		return Info{}, err
	}
	if err := ctx.Err(); err != nil {
		return Info{}, err
	}
	return l.heartbeat(ctx, ttl)
}

func (m *Manager) release(ctx context.Context, find finder, name, token string) error {
	l, err := find(name, token)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := l.release(ctx); err != nil {
		return err
	}
	m.throttleRelease(ctx, l)
	return nil
}

// MaxReleasing is how many releases may be under way in the background
// before a caller's release waits for its own round, as it did before
// releases left the caller's path. Below it a release costs its caller no
// round; past it the sidecar sends more than its masters answer in time
// (a burst of many callers), and the background releases, which no
// admission bounds (overload.go), would crowd out the acquisitions' calls:
// waiting makes the burst's own callers slow down instead.
const MaxReleasing = 16

// throttleRelease waits, while more than MaxReleasing releases are under
// way, until l's own release has been answered (or ctx ends: it goes on
// regardless).
func (m *Manager) throttleRelease(ctx context.Context, l *lease) {
	m.mu.Lock()
	if m.releasing <= MaxReleasing {
		m.mu.Unlock()
		return
	}
	var done <-chan struct{}
	for _, lg := range m.letting[l.t.queue] {
		if lg.value == l.t.value {
			done = lg.done
		}
	}
	m.mu.Unlock()
	if done == nil {
		return // handed over, lingering, or already answered
	}
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// WatchReleases calls notify (which must not block) each time a master
// announces a release of the lock name, or a new holder of it in a holder
// record (a hand-over inside another sidecar), until cancel; see
// redlock.Locker.WatchReleases.
func (m *Manager) WatchReleases(name string, notify func()) (cancel func()) {
	key := m.cfg.KeyPrefix + name
	stopReleases := m.locker.WatchReleases(key, notify)
	stopNotes := m.locker.WatchReleases(redlock.HolderChannel(key), notify)
	return func() { stopReleases(); stopNotes() }
}

// goLocked runs f in the background, counted for Close. The caller holds
// m.mu.
func (m *Manager) goLocked(f func()) {
	m.background++
	go func() {
		f()
		m.mu.Lock()
		m.background--
		if m.background == 0 {
			m.backgroundIdle.Broadcast()
		}
		m.mu.Unlock()
	}()
}

// useChannelLocked counts a use of this sidecar's channel (a plain lock's
// tenure, an acquisition of one), watching it from the first: the masters
// tell it there that another sidecar wants one of its locks, or released
// one it asked for. The caller holds m.mu.
func (m *Manager) useChannelLocked() {
	m.channelUse++
	if m.channelIdle != nil {
		m.channelIdle.Stop()
		m.channelIdle = nil
	}
	if m.stopChannel == nil && !m.closing {
		m.stopChannel = m.locker.WatchChannel(m.channel, m.heard)
	}
}

// channelKeep is how long the channel stays watched after its last use:
// a subscription takes a round trip to become active, and a sidecar that
// locks now and then should not miss the first message of each time.
const channelKeep = 30 * time.Second

// unuseChannelLocked ends a use of the channel; channelKeep after the last
// one, it is no longer watched. The caller holds m.mu.
func (m *Manager) unuseChannelLocked() {
	m.channelUse--
	if m.channelUse > 0 || m.stopChannel == nil {
		return
	}
	m.channelIdle = time.AfterFunc(channelKeep, func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.channelUse == 0 && m.stopChannel != nil {
			m.stopChannel()
			m.stopChannel = nil
		}
	})
}

// changed tells Config.Changed that the lease of a lock started or ended.
func (m *Manager) changed(l *lease) {
	if m.cfg.Changed != nil && l.kind == KindLock {
		m.cfg.Changed(l.name)
	}
}

// Inspect reads the lock's state from the masters.
func (m *Manager) Inspect(ctx context.Context, name string) (Status, error) {
	if err := ValidateName(name); err != nil {
		return Status{}, err
	}
	return m.inspect(ctx, target{name: name}, 0)
}

// inspect reads one resource (a lock, a slot of a semaphore, a side of a
// read/write lock) from the masters.
func (m *Manager) inspect(ctx context.Context, t target, slot int) (Status, error) {
	st, err := m.inspectKey(ctx, t.name, m.cfg.KeyPrefix+t.resource(slot))
	if st.Held {
		st.Slot = slot
	}
	return st, err
}

// inspectKey reads the key of the name from the masters.
func (m *Manager) inspectKey(ctx context.Context, name, key string) (Status, error) {
	if err := ctx.Err(); err != nil {
		return Status{}, err
	}
	h, err := m.locker.Inspect(ctx, key)
	if err != nil {
		if cut := endedBy(ctx); cut != nil {
			return Status{}, cut // cut short: says nothing about the masters
		}
		return Status{}, err
	}
	if !h.Held {
		return Status{Name: name}, nil
	}
	st := Status{Name: name, Held: !h.Idle, ValidUntil: h.ValidUntil, Fence: h.Fence}
	st.Grant, st.Owner, _ = strings.Cut(h.Value, ":")
	if h.Recorded {
		st.Grant, st.Owner = h.Grant, h.Owner
	}
	st = m.knownHolder(st, key, h.Value)
	if !st.Held {
		return Status{Name: name}, nil
	}
	return st, nil
}

// knownHolder is st as this sidecar knows it when it holds key under
// value: its lease, exactly, where the masters' holder record may lag
// behind a hand-over without a round (tenure.go); free while it lingers.
func (m *Manager) knownHolder(st Status, key, value string) Status {
	res, ok := strings.CutPrefix(key, m.cfg.KeyPrefix)
	if !ok {
		return st
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.tenures[res]
	if !ok || t.value != value {
		if m.lettingGoLocked(res, value) {
			return Status{Name: st.Name} // released here; the masters hear of it within a round
		}
		return st
	}
	switch l := t.lease; {
	case l != nil:
		st.Held, st.Grant, st.Owner, st.Fence = true, l.grantID, l.owner, l.fence
	case t.state == tenureLingering:
		st.Held = false
	}
	return st
}

// List returns the live locks of this sidecar by name, without tokens.
func (m *Manager) List() []Info { return m.list(KindLock) }

// list returns the live leases of one kind by name and slot, without
// tokens.
func (m *Manager) list(kind Kind) []Info {
	m.mu.Lock()
	out := make([]Info, 0, len(m.leases))
	for _, l := range m.leases {
		if l.kind == kind {
			out = append(out, l.infoLocked(false))
		}
	}
	m.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].Name != out[j].Name {
			return out[i].Name < out[j].Name
		}
		return out[i].Slot < out[j].Slot
	})
	return out
}

// Len is the number of live leases.
func (m *Manager) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.leases)
}

// Close stops new acquisitions and ends every lease with EndShutdown,
// waiting until they have ended and the renewer has stopped, or ctx ends.
// It does not delete their keys: a caller told of the end may still act
// until the valid_until it was promised, so the keys lapse then (within a
// key ttl) instead. Callers that want a prompt hand-off release before the
// sidecar stops.
func (m *Manager) Close(ctx context.Context) error {
	m.mu.Lock()
	if !m.closing {
		m.closing = true
		close(m.stopping)
	}
	live := make([]*lease, 0, len(m.leases))
	for _, l := range m.leases {
		live = append(live, l)
	}
	// Keys nobody holds (a linger) carry no promise: they are released.
	for _, t := range m.tenures {
		if t.state == tenureLingering {
			t.letGoLocked(redlock.WaiterMark{})
		}
	}
	m.mu.Unlock()
	for _, l := range live {
		go l.finish(EndShutdown, nil)
	}
	done := make(chan struct{})
	go func() {
		m.wg.Wait()
		<-m.renewerDone
		m.mu.Lock()
		for m.background > 0 { // releases, hand-overs and notes under way
			m.backgroundIdle.Wait()
		}
		if m.stopChannel != nil {
			m.stopChannel()
			m.stopChannel = nil
		}
		if m.channelIdle != nil {
			m.channelIdle.Stop()
		}
		m.mu.Unlock()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("ending %d leases: %w", m.Len(), ctx.Err())
	}
}

func (m *Manager) normalize(req Request) (Request, error) {
	if err := ValidateName(req.Name); err != nil {
		return req, err
	}
	if err := ValidateOwner(req.Owner); err != nil {
		return req, asParamError(ParamOwner, err)
	}
	if err := validateIdempotencyKey(req); err != nil {
		return req, err
	}
	if err := checkKindFields(req, req.kind.String()); err != nil {
		return req, err
	}
	if err := m.checkPermits(req); err != nil {
		return req, err
	}
	if req.TTL == 0 {
		req.TTL = m.cfg.DefaultTTL
	}
	if err := m.checkTTL(req.TTL); err != nil {
		return req, err
	}
	if req.MaxHold < 0 || (m.cfg.MaxHold > 0 && req.MaxHold > m.cfg.MaxHold) {
		return req, invalidParam(ParamMaxHold, "max_hold %v must be within [0s, %v]", req.MaxHold, m.cfg.MaxHold)
	}
	if req.Wait < 0 || req.Wait > m.cfg.MaxWait {
		return req, invalidParam(ParamWait, "wait %v must be within [0s, %v]", req.Wait, m.cfg.MaxWait)
	}
	return req, nil
}

func (m *Manager) checkTTL(ttl time.Duration) error {
	if ttl < MinTTL || ttl > m.cfg.MaxTTL {
		return invalidParam(ParamTTL, "ttl %v must be within [%v, %v]", ttl, MinTTL, m.cfg.MaxTTL)
	}
	return nil
}

// keyTTL is the ttl put on the masters for a caller ttl.
func (m *Manager) keyTTL(ttl time.Duration) time.Duration { return min(ttl, m.cfg.KeyTTL) }

func outcomeOf(err error) Outcome {
	switch {
	case err == nil:
		return OutcomeAcquired
	case errors.Is(err, ErrLockHeld):
		return OutcomeHeld
	case errors.Is(err, ErrNoQuorum):
		return OutcomeNoQuorum
	case errors.Is(err, ErrOverloaded):
		return OutcomeOverloaded
	case errors.Is(err, ErrInvalid):
		return OutcomeInvalid
	case errors.Is(err, ErrTooManyLocks), errors.Is(err, ErrTooManyWaiters):
		return OutcomeLimited
	default:
		return OutcomeError
	}
}

// endedBy is ctx's error if ctx has ended or reached its deadline: a
// round's calls can see the deadline pass a moment before ctx reports
// it, and a round that failed then was cut short, not refused.
func endedBy(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return context.DeadlineExceeded
	}
	return nil
}
