package lease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sidelock/sidelock/pkg/redlock"
)

// Admission control: overload is named and shed, not blamed on the masters.
//
// Every acquisition round costs this sidecar CPU and a place in each
// master's pipeline queue, and its calls to the masters have a short
// budget (the node timeout). A burst of acquisitions bigger than the
// sidecar can send in time used to turn its own queueing into timeouts,
// reported as 503 no_quorum while the masters were fine. So at most
// MaxAcquireRounds acquisition rounds are in flight at once; a caller beyond
// that waits for a place up to AdmissionWait, and then is refused with
// *OverloadedError (HTTP 429 overloaded, with a retry hint). Time spent
// waiting here is before the round starts, so it counts against nothing:
// the validity is measured from the round's own start.
//
// Renewals never pass this gate: the renewer's batches and callers'
// heartbeats keep the locks already held, which matters more than taking
// new ones (the masters' pipelines also send them first, see redisnode).

// ErrOverloaded is the error of an acquisition refused by the gate, or of
// a round whose calls this sidecar could not send in time (redlock); match
// with errors.Is.
var ErrOverloaded = redlock.ErrOverloaded

// OverloadedError carries ErrOverloaded's retry hint.
type OverloadedError = redlock.OverloadedError

// OutcomeOverloaded is the acquisition outcome of a request refused for
// local overload.
const OutcomeOverloaded Outcome = "overloaded"

const (
	// DefaultMaxAcquireRounds is MaxAcquireRounds' default: one full
	// pipelined batch per master (redisnode sends up to 256 calls in one
	// pipeline, and keeps one pipeline in flight per master by default).
	// So an admitted call waits behind at most the batch in flight, not a
	// queue growing with the burst, and its round stays far inside the
	// node timeout.
	DefaultMaxAcquireRounds = 256
	// DefaultAdmissionWait is AdmissionWait's default: the same order as
	// the try-once retry budget, so a try-once caller still hears quickly,
	// and long enough for the rounds ahead of it to finish a few times
	// over (a round takes a few milliseconds).
	DefaultAdmissionWait = 250 * time.Millisecond
	// MaxAdmissionWait bounds AdmissionWait: an overloaded sidecar must
	// still answer fast.
	MaxAdmissionWait = 5 * time.Second
)

// withAdmissionDefaults fills in the admission defaults.
func (c Config) withAdmissionDefaults() Config {
	if c.MaxAcquireRounds == 0 {
		c.MaxAcquireRounds = DefaultMaxAcquireRounds
	}
	if c.AdmissionWait == 0 {
		c.AdmissionWait = DefaultAdmissionWait
	}
	return c
}

// validateAdmission refuses negative settings (0 takes the default).
func (c Config) validateAdmission() error {
	if c.MaxAcquireRounds < 0 || c.AdmissionWait < 0 || c.AdmissionWait > MaxAdmissionWait {
		return fmt.Errorf("max acquire rounds %d must not be negative, admission wait %v must be within [0s, %v] (0 takes the default)",
			c.MaxAcquireRounds, c.AdmissionWait, MaxAdmissionWait)
	}
	return nil
}

// admission is the gate: a counting semaphore whose waiters are served in
// arrival order (a channel's blocked senders are), so the first refused is
// the one that waited longest.
type admission struct {
	places chan struct{}
	wait   time.Duration
	// after starts the wait's timer (time.NewTimer by default); tests give
	// one they fire themselves.
	after func(time.Duration) (<-chan time.Time, func() bool)
}

func newAdmission(places int, wait time.Duration) *admission {
	return &admission{places: make(chan struct{}, places), wait: wait, after: realTimer}
}

func realTimer(d time.Duration) (<-chan time.Time, func() bool) {
	t := time.NewTimer(d)
	return t.C, t.Stop
}

// enter takes a place for one round, waiting up to the admission wait; the
// caller calls leave when the round is over. It fails with
// *OverloadedError when no place came in time, ctx's error when the caller
// left (before or while waiting: a departed caller takes no place),
// ErrShuttingDown when stopping closes.
func (a *admission) enter(ctx context.Context, stopping <-chan struct{}) (leave func(), err error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	select {
	case a.places <- struct{}{}:
		return a.leave, nil
	default:
	}
	expired, stop := a.after(a.wait)
	defer stop()
	select {
	case a.places <- struct{}{}:
		return a.leave, nil
	case <-expired:
		return nil, &OverloadedError{
			RetryAfter: jitter(a.wait/2, a.wait),
			Detail:     fmt.Sprintf("%d acquisitions already in flight to the masters, no place freed within %v", cap(a.places), a.wait),
		}
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-stopping:
		return nil, ErrShuttingDown
	}
}

func (a *admission) leave() { <-a.places }

// Renewals spoiled by overload are tried again.
//
// A renewal round that failed for local overload said nothing about the
// masters, and the lease it keeps matters more than any new acquisition:
// it is tried again, after a short pause, up to renewalTries times. Each
// try is a whole Extend round, so its grant's validity is measured from
// its own start, and the pauses only make the caller wait (the lease's
// earlier validity still stands while they do).
const (
	renewalTries   = 3
	renewalPauseLo = 5 * time.Millisecond
	renewalPauseHi = 20 * time.Millisecond
)

// renewalRetrier is the Manager's Locker with that retry on renewals.
type renewalRetrier struct {
	Locker
	pause func() time.Duration // between tries
}

func newRenewalRetrier(l Locker) renewalRetrier {
	return renewalRetrier{Locker: l, pause: func() time.Duration { return jitter(renewalPauseLo, renewalPauseHi) }}
}

// Extend is Locker.Extend, tried again while local overload spoils it.
func (r renewalRetrier) Extend(ctx context.Context, key, value string, ttl time.Duration) (redlock.Grant, error) {
	for try := 1; ; try++ {
		g, err := r.Locker.Extend(ctx, key, value, ttl)
		if try == renewalTries || !errors.Is(err, ErrOverloaded) || !r.sleep(ctx) {
			return g, err
		}
	}
}

// ExtendMany is Locker.ExtendMany, with the items local overload spoiled
// tried again.
func (r renewalRetrier) ExtendMany(ctx context.Context, items []redlock.ExtendItem) ([]redlock.Grant, []error) {
	grants, errs := r.Locker.ExtendMany(ctx, items)
	for try := 2; try <= renewalTries; try++ {
		again := overloadedItems(errs)
		if len(again) == 0 || !r.sleep(ctx) {
			break
		}
		retryItems := make([]redlock.ExtendItem, len(again))
		for j, i := range again {
			retryItems[j] = items[i]
		}
		g, e := r.Locker.ExtendMany(ctx, retryItems)
		for j, i := range again {
			grants[i], errs[i] = g[j], e[j]
		}
	}
	return grants, errs
}

// overloadedItems lists the items whose renewal failed for local overload.
func overloadedItems(errs []error) []int {
	var out []int
	for i, err := range errs {
		if errors.Is(err, ErrOverloaded) {
			out = append(out, i)
		}
	}
	return out
}

// sleep pauses between tries; false if ctx ended first.
func (r renewalRetrier) sleep(ctx context.Context) bool {
	t := time.NewTimer(r.pause())
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
