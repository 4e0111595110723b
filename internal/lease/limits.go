package lease

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// Limits that protect the sidecar from a caller (or a bug) that takes
// locks or queues waiters without bound: every lease costs memory, its
// timers and a place in the renewer's batched calls to every master, every
// waiter a goroutine (its caller's) and, for the head, rounds to the
// masters. Beyond a limit a request is refused at once, before it touches
// the masters.

// Default limits, used when Config leaves them zero. A pod needing more
// than ten thousand locks at once through one sidecar is almost certainly
// leaking them.
const (
	DefaultMaxLocks   = 10000
	DefaultMaxWaiters = 10000
)

// limitRetryAfter is the back-off suggested to a refused caller: nothing
// says when a lock or a queue slot frees up, so it is a plain pause that
// keeps a retry loop from spinning.
const limitRetryAfter = time.Second

// Errors for requests beyond a limit; match with errors.Is. The *LimitError
// carries the limit.
var (
	ErrTooManyLocks   = errors.New("too many locks held through this sidecar")
	ErrTooManyWaiters = errors.New("too many callers waiting on this sidecar")
	// ErrTooManyWaitersForName is also ErrTooManyWaiters.
	ErrTooManyWaitersForName = fmt.Errorf("%w for this lock name", ErrTooManyWaiters)
)

// OutcomeLimited is the acquisition outcome of a request refused by a limit.
const OutcomeLimited Outcome = "limited"

// LimitError is a request refused because a limit of this sidecar is
// reached.
type LimitError struct {
	Err        error // ErrTooManyLocks or ErrTooManyWaiters
	Max        int
	RetryAfter time.Duration
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("%v (limit %d); release some or retry later", e.Err, e.Max)
}

func (e *LimitError) Unwrap() error { return e.Err }

// withLimitDefaults fills in the default limits.
func (c Config) withLimitDefaults() Config {
	if c.MaxLocks == 0 {
		c.MaxLocks = DefaultMaxLocks
	}
	if c.MaxWaiters == 0 {
		c.MaxWaiters = DefaultMaxWaiters
	}
	if c.MaxWaitersPerName == 0 {
		c.MaxWaitersPerName = max(1, c.MaxWaiters/4)
	}
	return c
}

// validateLimits refuses negative limits (0 takes the default).
func (c Config) validateLimits() error {
	if c.MaxLocks < 0 || c.MaxWaiters < 0 || c.MaxWaitersPerName < 0 {
		return fmt.Errorf("max locks %d, max waiters %d and max waiters per name %d must not be negative (0 takes the default)", c.MaxLocks, c.MaxWaiters, c.MaxWaitersPerName)
	}
	if c.MaxWaiters > 0 && c.MaxWaitersPerName > c.MaxWaiters {
		return fmt.Errorf("max waiters per name %d must not exceed max waiters %d", c.MaxWaitersPerName, c.MaxWaiters)
	}
	return nil
}

// limiter counts what the Manager's lock does not: callers admitted to
// wait, from the moment they are admitted until they leave, so concurrent
// arrivals cannot all slip under the limit.
type limiter struct {
	waiters atomic.Int64
}

// checkLockLimitLocked refuses a new reservation once the live and pending
// leases reach MaxLocks. The caller holds m.mu.
func (m *Manager) checkLockLimitLocked() error {
	if len(m.leases)+len(m.pending) >= m.cfg.MaxLocks {
		return &LimitError{Err: ErrTooManyLocks, Max: m.cfg.MaxLocks, RetryAfter: limitRetryAfter}
	}
	return nil
}

// acquireWaitingWithinLimit admits a caller to wait only while fewer than
// MaxWaiters are waiting.
func (m *Manager) acquireWaitingWithinLimit(ctx context.Context, req Request, deadline time.Time) (Info, error) {
	if m.limits.waiters.Add(1) > int64(m.cfg.MaxWaiters) {
		m.limits.waiters.Add(-1)
		return Info{}, &LimitError{Err: ErrTooManyWaiters, Max: m.cfg.MaxWaiters, RetryAfter: limitRetryAfter}
	}
	defer m.limits.waiters.Add(-1)
	return m.acquireWaiting(ctx, req, deadline)
}
