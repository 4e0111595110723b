package client

import (
	"context"
	"net/url"
	"strconv"
	"time"
)

// A semaphore lets up to N holders in at once: N independent slots
// (Redlock locks), each held by one of them. Its calls mirror the lock's,
// on /semaphores/{name}, a keyspace of its own (the semaphore "x" and the
// lock "x" are unrelated). Every caller of one semaphore must ask for the
// same number of permits (else ErrPermitsMismatch).

// AcquireSemaphore takes one of name's permits, waiting up to opts.Wait
// while all of them are held (ErrLockHeld). The lease says which slot it
// got (Lease.Slot); extend and release it with its token as a lock's.
func (c *Client) AcquireSemaphore(ctx context.Context, name string, permits int, opts Options) (Lease, error) {
	return c.acquire(ctx, semaphores.path(name), semaphoreQuery(permits, opts, false), opts.IdempotencyKey)
}

// ExtendSemaphore is a permit's heartbeat, as Extend is a lock's.
func (c *Client) ExtendSemaphore(ctx context.Context, name, token string, ttl time.Duration) (Lease, error) {
	return c.extend(ctx, semaphores.path(name), token, ttl)
}

// ReleaseSemaphore gives a permit back.
func (c *Client) ReleaseSemaphore(ctx context.Context, name, token string) error {
	return c.release(ctx, semaphores.path(name), token)
}

// HoldSemaphore takes a permit and keeps it for as long as the connection
// is open, as Hold does a lock.
func (c *Client) HoldSemaphore(ctx context.Context, name string, permits int, opts Options) (*Held, error) {
	return c.hold(ctx, semaphores.path(name), semaphoreQuery(permits, opts, true), opts.IdempotencyKey)
}

// SemaphoreStatus is what the masters say about a semaphore.
type SemaphoreStatus struct {
	Name    string       `json:"name"`
	Permits int          `json:"permits"`
	Held    int          `json:"held"`    // how many permits are held
	Holders []SlotHolder `json:"holders"` // the held slots, by slot
}

// SlotHolder is the holder of one of a semaphore's slots.
type SlotHolder struct {
	Slot       int       `json:"slot"`
	Owner      string    `json:"owner"`
	Fence      int64     `json:"fence"`
	ValidUntil time.Time `json:"valid_until"`
}

// InspectSemaphore asks the masters which of name's permits are held, and
// by whom.
func (c *Client) InspectSemaphore(ctx context.Context, name string, permits int) (SemaphoreStatus, error) {
	var st SemaphoreStatus
	err := c.getJSON(ctx, semaphores.path(name), permitsQuery(permits), "the semaphore's status", &st)
	return st, err
}

// semaphoreQuery is a lock's acquisition query plus the permits.
func semaphoreQuery(permits int, opts Options, hold bool) url.Values {
	q := opts.query(hold)
	q.Set("permits", strconv.Itoa(permits))
	return q
}

func permitsQuery(permits int) url.Values {
	return url.Values{"permits": {strconv.Itoa(permits)}}
}
