// Package redlock implements the Redlock algorithm over N independent lock
// masters: the same key and a random value are set on every master in
// parallel, each call bounded by a short per-node timeout, and the lock is
// held only when a majority (N/2+1) accepted it with time to spare:
//
//	validity = ttl - elapsed - (driftFactor*ttl + 2ms)
//
// When the majority is missed, or the validity is used up, the key is released
// on every master, including those that did not answer, since a lost reply may
// hide a write that did happen.
//
// The package holds no state between calls, logs nothing and knows nothing of
// HTTP or metrics; callers own the values they lock with.
//
// What Redlock does NOT guarantee (and this package cannot add):
//   - It is an advisory lease, not a mutex. A holder paused (GC, swap, a
//     stopped VM) past its validity may still act after someone else acquired
//     the lock. Act only before the validity ends, and use fencing where a
//     stale writer would do harm.
//   - It assumes the masters are independent and keep their keys for the
//     ttl. A master that restarts without persistence forgets keys, and
//     another caller may then win a majority while an old holder still
//     believes it holds the lock.
//   - It assumes clocks advance at nearly the same rate on every machine
//     (the drift factor bounds the difference); it does not need synchronised
//     clocks. Elapsed time is measured with the monotonic clock.
package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Sentinel errors; match them with errors.Is.
var (
	// ErrLockHeld means another value holds the key on enough masters that
	// this caller cannot reach a majority. Use errors.As with *HeldError for
	// a retry hint.
	ErrLockHeld = errors.New("lock held by another owner")
	// ErrNoQuorum means too few masters answered in time, or the validity
	// was used up before the majority was reached.
	ErrNoQuorum = errors.New("no quorum of masters answered in time")
	// ErrNotHeld means an Extend found the key held by another value (or
	// gone) on enough masters that this value no longer holds the lock.
	ErrNotHeld = errors.New("lock no longer held")
)

// HeldError is the error Acquire returns when the lock is held elsewhere.
type HeldError struct {
	// RetryAfter is when the holder's keys lapse on enough masters for a
	// majority to be free, if the holder stops renewing; 0 when unknown
	// (a split vote: retry after a short random back-off).
	RetryAfter time.Duration
	// Idle (Take only): the holder only lingers on the key (nobody holds
	// the lock) and was asked to let go, within IdleFor: wait for the
	// release announcement (at most IdleFor) and try again.
	Idle    bool
	IdleFor time.Duration
	// IdleOn is how many masters refused it so: each announces the
	// release it makes.
	IdleOn int
	// ByMark (Take only): the key was free on some master, but an older
	// waiter of another sidecar has a live mark there.
	ByMark bool
	// Oldest (Take only) is the oldest live mark of another sidecar seen.
	Oldest WaiterMark
}

func (e *HeldError) Error() string { return ErrLockHeld.Error() }

// Is makes errors.Is(err, ErrLockHeld) true.
func (e *HeldError) Is(target error) bool { return target == ErrLockHeld }

// Config tunes the algorithm. Zero values take the defaults.
type Config struct {
	// Name names the quorum group the Locker's masters make up, where
	// there are several (package shard routes names by it, and health
	// reports by it); it plays no part in the algorithm.
	Name string
	// NodeTimeout bounds every call to one master (default 50ms). It must
	// be far below the key ttl, so one slow master cannot eat the validity.
	NodeTimeout time.Duration
	// DriftFactor is the share of the ttl allowed for clock-rate drift
	// between machines (default 0.01); 2ms is always added.
	DriftFactor float64
	// Now reads the clock (default time.Now). It must carry a monotonic
	// reading: validity is computed from differences of its values.
	Now func() time.Time
	// Fencing makes every grant carry a fence: a number greater than the
	// fence of every grant of the key that finished before it began. It
	// costs a second round to the masters on acquire unless the fence
	// proposal is committed in the first (see fence.go).
	Fencing bool
	// FenceRetention is how long a key's fence counter outlives its last
	// grant on a master (default 1h); see fence.go for why it is safe to
	// let it go.
	FenceRetention time.Duration
	// Excluders names, for a key, the keys whose presence on a master
	// must keep a renewal from putting it back there (nil: none): a
	// read/write lock's reader key is excluded by its writer key, its
	// writer key by its reader keys, as their acquisitions are. A key
	// with excluders is put back only by nodes that check them
	// (GuardedRepairer); elsewhere it is left missing.
	Excluders func(key string) []string
}

// Grant tells how long a successful Acquire or Extend may be relied on.
type Grant struct {
	// ValidUntil is the instant until which a majority holds the key for
	// this value, with elapsed time and clock drift already taken off.
	ValidUntil time.Time
	// Fence is the grant's fencing token when fencing is on (0 otherwise).
	Fence int64
}

// Holder is what Inspect read from the masters.
type Holder struct {
	Held       bool      // a majority holds the key for one value
	Value      string    // that value ("" when not held)
	ValidUntil time.Time // until when that majority holds it
	Fence      int64     // the holder's fence, when fencing is on
	// Recorded: a holder record of that value named the holder (see
	// tenure.go): Fence is its fence, Grant and Owner name it, and Idle
	// says that nobody holds the lock (its sidecar only lingers on the
	// key). Without a record, the holder is named by the value and Fence
	// is the counter (a key an older sidecar took).
	Recorded     bool
	Grant, Owner string
	Idle         bool
}

// Locker runs Redlock over a fixed set of masters. It is safe for
// concurrent use.
type Locker struct {
	name        string
	nodes       []Node
	eligible    []atomic.Pointer[Eligibility] // nil: no guard, answers count
	quorum      int
	nodeTimeout time.Duration
	driftFactor float64
	now         func() time.Time
	fencing     bool
	// fenceRetention is how long fence counters outlive their last grant.
	fenceRetention time.Duration
	excluders      func(key string) []string // Config.Excluders
}

const (
	defaultNodeTimeout = 50 * time.Millisecond
	defaultDriftFactor = 0.01
	driftFloor         = 2 * time.Millisecond
)

// MaxDriftFactor bounds Config.DriftFactor (exclusive): at half the ttl
// for drift, a lock's validity would be gone before most rounds end.
const MaxDriftFactor = 0.5

// New returns a Locker over nodes, which must be independent masters.
func New(nodes []Node, cfg Config) (*Locker, error) {
	if len(nodes) == 0 {
		return nil, errors.New("redlock: at least one master is required")
	}
	if cfg.NodeTimeout == 0 {
		cfg.NodeTimeout = defaultNodeTimeout
	}
	if cfg.DriftFactor == 0 {
		cfg.DriftFactor = defaultDriftFactor
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.FenceRetention == 0 {
		cfg.FenceRetention = defaultFenceRetention
	}
	if cfg.Fencing {
		if err := checkFencers(nodes); err != nil {
			return nil, err
		}
	}
	if cfg.NodeTimeout < 0 || cfg.DriftFactor < 0 || cfg.DriftFactor >= MaxDriftFactor {
		return nil, fmt.Errorf("redlock: node timeout %v and drift factor %v must be positive, drift below %v", cfg.NodeTimeout, cfg.DriftFactor, MaxDriftFactor)
	}
	l := &Locker{
		name:           cfg.Name,
		nodes:          nodes,
		eligible:       make([]atomic.Pointer[Eligibility], len(nodes)),
		quorum:         len(nodes)/2 + 1,
		nodeTimeout:    cfg.NodeTimeout,
		driftFactor:    cfg.DriftFactor,
		now:            cfg.Now,
		fencing:        cfg.Fencing,
		fenceRetention: cfg.FenceRetention,
		excluders:      cfg.Excluders,
	}
	return l, nil
}

// Name is the quorum group's name (Config.Name).
func (l *Locker) Name() string { return l.name }

// Quorum is the number of masters that make a majority.
func (l *Locker) Quorum() int { return l.quorum }

// Nodes returns the masters, in configuration order: node i is the one
// SetEligibility(i, ...) judges.
func (l *Locker) Nodes() []Node { return slices.Clone(l.nodes) }

// Drift is the clock-drift allowance for a key ttl.
func (l *Locker) Drift(ttl time.Duration) time.Duration {
	return time.Duration(l.driftFactor*float64(ttl)) + driftFloor
}

// Acquire tries once to set key to value with ttl on a majority. On failure
// it has released the key everywhere and returns a *HeldError (matching
// ErrLockHeld), an error matching ErrNoQuorum (the masters fell short) or
// an *OverloadedError (this sidecar could not ask enough of them in time).
func (l *Locker) Acquire(ctx context.Context, key, value string, ttl time.Duration) (Grant, error) {
	if l.fencing {
		return l.acquireFenced(ctx, key, value, ttl, 0)
	}
	start := l.now()
	replies := fanOut(ctx, l, func(ctx context.Context, n Node) reply {
		ok, holderTTL, err := n.Acquire(ctx, key, value, ttl)
		return reply{ok: ok, held: err == nil && !ok, ttl: holderTTL, err: err}
	})
	t := tally(replies)
	grant, err := l.judge(t, start, ttl)
	if err == nil {
		return grant, nil
	}
	return Grant{}, l.failAcquire(ctx, key, value, replies, t, err)
}

// failAcquire releases a failed acquisition everywhere and says why it
// failed: held elsewhere (with a retry hint) or no quorum. When every
// master answered that another value holds the key, nothing was written
// anywhere and there is nothing to release: a refusal costs one round, not
// two (an answer discounted after the call, see discountIneligible, counts
// as failed, so its master is released).
func (l *Locker) failAcquire(ctx context.Context, key, value string, replies []reply, t counts, err error) error {
	if t.held < t.total {
		_ = l.withdraw(ctx, key, value, replies) // what it misses lapses after ttl
	}
	if t.ok+t.held >= l.quorum && t.held > 0 {
		return &HeldError{RetryAfter: l.retryAfter(replies, t.held)}
	}
	return err
}

// Extend resets the ttl of key on a majority while it holds value. Only
// masters where value still held the key count: where it is missing it may
// have lapsed everywhere, and been granted and released meanwhile, so a key
// is never written back by the extend itself. Once a round has its quorum
// of renewals, nobody else can hold the lock, and the key is put back where
// it was missing (a master that restarted empty), so the lock keeps its
// margin against further failures. It does not release on failure: the
// caller decides whether a failed renewal ends its hold. Errors match
// ErrNotHeld (others hold it; retrying cannot help) or ErrNoQuorum (retry
// while the previous grant is still valid).
func (l *Locker) Extend(ctx context.Context, key, value string, ttl time.Duration) (Grant, error) {
	start := l.now()
	replies := fanOut(ctx, l, func(ctx context.Context, n Node) reply {
		outcome, err := n.Extend(ctx, key, value, ttl)
		return extendReply(outcome, err)
	})
	grant, err := l.judgeExtend(replies, start, ttl)
	if err == nil {
		l.repair(ctx, func(i int) []ExtendItem {
			if replies[i].missing {
				return []ExtendItem{{Key: key, Value: value, TTL: ttl}}
			}
			return nil
		})
	}
	return grant, err
}

// repairWorkers bounds the calls in flight to one master while repairing.
const repairWorkers = 16

// repair puts keys back on the masters where a successful extend found
// them missing (missingOn(i) lists them for node i), with Acquire's
// set-if-absent (putBack), each call bounded by the node timeout. Failures
// are left for the next round.
func (l *Locker) repair(ctx context.Context, missingOn func(i int) []ExtendItem) {
	var wg sync.WaitGroup
	for i, n := range l.nodes {
		items := missingOn(i)
		for w := range min(repairWorkers, len(items)) {
			wg.Go(func() {
				for k := w; k < len(items); k += repairWorkers {
					it := items[k]
					callOne(ctx, l.nodeTimeout, i, n, func(ctx context.Context, _ int, n Node) reply {
						return reply{err: l.putBack(ctx, n, it)}
					})
				}
			})
		}
	}
	wg.Wait()
}

// putBack puts the item's key back on n. A key that others exclude (a read/write
// lock's, Config.Excluders) goes back only where none of them is held,
// checked in the same atomic step, as its acquisition checks them: a
// put-back delayed on its way (a master paused, then resumed) must not
// land beside a writer granted meanwhile, on a master that writer's
// majority counted, for a later renewal to count it too. A node that
// cannot check is left without the key: the margin is thinner, never a
// second holder.
func (l *Locker) putBack(ctx context.Context, n Node, it ExtendItem) error {
	var excluders []string
	if l.excluders != nil {
		excluders = l.excluders(it.Key)
	}
	if len(excluders) == 0 {
		_, _, err := n.Acquire(ctx, it.Key, it.Value, it.TTL)
		return err
	}
	g, ok := n.(GuardedRepairer)
	if !ok {
		return nil
	}
	_, err := g.PutBack(ctx, it.Key, it.Value, it.TTL, excluders)
	return err
}

// judgeExtend is the verdict on one key's extend round: a grant, ErrNotHeld
// when others hold it on too many masters for a quorum, else ErrNoQuorum.
func (l *Locker) judgeExtend(replies []reply, start time.Time, ttl time.Duration) (Grant, error) {
	t := tally(replies)
	grant, err := l.judge(t, start, ttl)
	if err != nil && t.held > len(l.nodes)-l.quorum {
		return Grant{}, fmt.Errorf("%w: %d of %d masters hold another value", ErrNotHeld, t.held, len(l.nodes))
	}
	return grant, err
}

// Release deletes key on every master where it holds value. It runs even
// when ctx is already cancelled, so a departing caller still cleans up, and
// reports ErrNoQuorum when fewer than a majority answered (the rest of the
// keys lapse after their ttl).
func (l *Locker) Release(ctx context.Context, key, value string) error {
	return l.releaseAll(ctx, key, value)
}

// Inspect reads key from every master and reports the value a majority
// holds, if any. It never changes a key. It answers free only when no
// value can hold a majority: a value seen on some masters may also be on
// those that did not answer, and then it answers ErrNoQuorum (neither
// held nor free can be told).
func (l *Locker) Inspect(ctx context.Context, key string) (Holder, error) {
	if l.allTenureNodes() {
		return l.inspectHolders(ctx, key)
	}
	start := l.now()
	replies := fanOut(ctx, l, func(ctx context.Context, n Node) reply {
		if f, ok := n.(Fencer); ok && l.fencing {
			v, ttl, fence, err := f.GetFenced(ctx, key, FenceKey(key))
			return reply{ok: err == nil, ttl: ttl, err: err, value: v, fence: fence}
		}
		v, ttl, err := n.Get(ctx, key)
		return reply{ok: err == nil, ttl: ttl, err: err, value: v}
	})
	return l.judgeInspect(replies, start)
}

// judgeInspect is the verdict on an inspection round (replies carry the
// values, ttls and counters read).
func (l *Locker) judgeInspect(replies []reply, start time.Time) (Holder, error) {
	answered := 0
	for _, r := range replies {
		if r.err == nil {
			answered++
		}
	}
	if answered < l.quorum {
		if err := l.overloaded(replies, answered); err != nil {
			return Holder{}, err
		}
		return Holder{}, fmt.Errorf("%w: %d of %d masters answered, %d needed", ErrNoQuorum, answered, len(l.nodes), l.quorum)
	}
	h := l.majorityHolder(replies, start)
	if !h.Held && l.couldBeHeld(replies) {
		return Holder{}, fmt.Errorf("%w: cannot tell whether the lock is held: %d of %d masters did not answer, enough to make a majority with a value seen",
			ErrNoQuorum, len(l.nodes)-answered, len(l.nodes))
	}
	return h, nil
}

// couldBeHeld tells whether a value that no majority was seen holding
// may still hold a majority, on the masters that did not answer (or do
// not count): then the lock is neither seen held nor known free.
func (l *Locker) couldBeHeld(replies []reply) bool {
	silent, seen := 0, map[string]int{}
	for _, r := range replies {
		switch {
		case r.err != nil:
			silent++
		case r.value != "":
			seen[r.value]++
		}
	}
	for _, n := range seen {
		if n+silent >= l.quorum {
			return true
		}
	}
	return false // (a value on silent masters only cannot make a majority: a majority answered)
}

func (l *Locker) majorityHolder(replies []reply, start time.Time) Holder {
	for _, candidate := range replies {
		if candidate.err != nil || candidate.value == "" {
			continue
		}
		var ttls []time.Duration
		var fence int64
		for _, r := range replies {
			if r.err == nil && r.value == candidate.value {
				ttls = append(ttls, r.ttl)
				fence = max(fence, r.fence)
			}
		}
		if len(ttls) < l.quorum {
			continue
		}
		// The key stays on a majority until the quorum-th longest ttl ends.
		slices.Sort(ttls)
		slices.Reverse(ttls)
		ttl := ttls[l.quorum-1]
		return Holder{Held: true, Value: candidate.value, ValidUntil: start.Add(ttl - l.Drift(ttl)), Fence: fence}
	}
	return Holder{}
}

// judge applies the quorum and validity rules to one round of replies.
func (l *Locker) judge(t counts, start time.Time, ttl time.Duration) (Grant, error) {
	if t.ok < l.quorum {
		return Grant{}, l.noQuorum("accepted", t.replies, t)
	}
	validUntil := start.Add(ttl - l.Drift(ttl))
	if !l.now().Before(validUntil) {
		return Grant{}, fmt.Errorf("%w: the round took longer than the ttl allows", ErrNoQuorum)
	}
	return Grant{ValidUntil: validUntil}, nil
}

// retryAfter is when enough holder keys lapse for a majority to be free:
// the k-th shortest holder ttl, k being how many holders must go.
func (l *Locker) retryAfter(replies []reply, held int) time.Duration {
	mustLapse := held - (len(l.nodes) - l.quorum)
	if mustLapse <= 0 {
		return 0
	}
	var ttls []time.Duration
	for _, r := range replies {
		if r.held {
			ttls = append(ttls, r.ttl)
		}
	}
	slices.Sort(ttls)
	return ttls[mustLapse-1]
}

func (l *Locker) releaseAll(ctx context.Context, key, value string) error {
	return l.releaseEach(ctx, func(ctx context.Context, _ int, n Node) (bool, error) {
		return n.Release(ctx, key, value)
	})
}

// releaseEach runs release on every master, never cut short by ctx's end,
// and needs a majority to have answered.
func (l *Locker) releaseEach(ctx context.Context, release func(context.Context, int, Node) (bool, error)) error {
	replies := fanOutIndexed(context.WithoutCancel(ctx), l, func(ctx context.Context, i int, n Node) reply {
		_, err := release(ctx, i, n)
		return reply{ok: err == nil, err: err}
	})
	if t := tally(replies); t.ok < l.quorum {
		return fmt.Errorf("%w: release reached %d of %d masters", ErrNoQuorum, t.ok, t.total)
	}
	return nil
}

// extendReply turns one master's extend outcome into a reply: renewed
// counts, held by another counts against, a missing key counts for neither.
func extendReply(outcome ExtendOutcome, err error) reply {
	if err != nil {
		return reply{err: err}
	}
	return reply{ok: outcome == ExtendRenewed, held: outcome == ExtendHeldByOther, missing: outcome == ExtendMissing}
}

// reply is one master's answer in a round.
type reply struct {
	ok    bool          // the master did what was asked
	held  bool          // another value holds the key there
	ttl   time.Duration // the holder's remaining ttl, or the key's for Get
	value string        // Get only
	fence int64         // the fence floor (acquire) or counter (get)
	// committed: the acquire also committed the Locker's fence proposal
	// (OneRoundFencer.AcquireProposed); fence is that proposal.
	committed bool
	prev      int64 // the counter a committed proposal replaced
	// missing: an extend found the key absent (and wrote nothing); it
	// counts neither for nor against a quorum.
	missing bool
	err     error // the master did not answer usefully
}

type counts struct {
	ok, held, missing, failed, total int
	replies                          []reply // what was counted, for error messages
}

func tally(replies []reply) counts {
	c := counts{total: len(replies), replies: replies}
	for _, r := range replies {
		switch {
		case r.err != nil:
			c.failed++
		case r.ok:
			c.ok++
		case r.held:
			c.held++
		case r.missing:
			c.missing++
		}
	}
	return c
}

// fanOut calls every master in parallel, each bounded by the node timeout
// (twice that for nodes that queue calls, see overload.go), and waits for
// all of them (each is bounded, so the round is too).
func fanOut(ctx context.Context, l *Locker, call func(context.Context, Node) reply) []reply {
	return fanOutIndexed(ctx, l, func(ctx context.Context, _ int, n Node) reply { return call(ctx, n) })
}

// fanOutIndexed is fanOut whose call also learns the master's index.
func fanOutIndexed(ctx context.Context, l *Locker, call func(context.Context, int, Node) reply) []reply {
	replies := make([]reply, len(l.nodes))
	// The first call runs here: this goroutine's stack has grown already,
	// a new one's grows again through the client's calls (measured: stack
	// growth was a tenth of the sidecar's CPU with one goroutine per master).
	var wg sync.WaitGroup
	for i, n := range l.nodes[1:] {
		wg.Go(func() { replies[i+1] = callOne(ctx, l.nodeTimeout, i+1, n, call) })
	}
	replies[0] = callOne(ctx, l.nodeTimeout, 0, l.nodes[0], call)
	wg.Wait()
	return l.discountIneligible(replies)
}

// discountIneligible turns the answers of nodes that do not count (see
// eligibility.go) into failures, after the call was made (so keys are
// still set and released there).
func (l *Locker) discountIneligible(replies []reply) []reply {
	for i := range replies {
		if replies[i].err != nil {
			continue
		}
		if err := l.counted(i); err != nil {
			// The proposal stays known, so that a failed grant withdraws it.
			replies[i] = reply{err: err, committed: replies[i].committed, fence: replies[i].fence, prev: replies[i].prev}
		}
	}
	return replies
}

func callOne(ctx context.Context, timeout time.Duration, i int, n Node, call func(context.Context, int, Node) reply) reply {
	ctx, cancel := nodeContext(ctx, timeout, n)
	defer cancel()
	return call(ctx, i, n)
}
