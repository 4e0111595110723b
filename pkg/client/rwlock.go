package client

import (
	"context"
	"net/url"
	"time"
)

// A read/write lock is held by many readers (Shared) or by one writer
// (Exclusive), never both at once. Its calls mirror the lock's, on
// /rwlocks/{name}, a keyspace of its own (the read/write lock "x", the
// lock "x" and the semaphore "x" are unrelated). A writer's fence orders
// the writers; a reader's lease says which of the reader slots it holds
// (Lease.Slot) and has no fence. Extend and release find a reader or the
// writer by its token alone.

// Mode is a side of a read/write lock.
type Mode string

// Modes of a read/write lock.
const (
	Shared    Mode = "shared"    // one of many readers
	Exclusive Mode = "exclusive" // the one writer
)

// AcquireRWLock takes the read/write lock name in mode, waiting up to
// opts.Wait while the other side holds it (ErrLockHeld): for a reader a
// writer holding or waiting, for a writer readers or another writer.
func (c *Client) AcquireRWLock(ctx context.Context, name string, mode Mode, opts Options) (Lease, error) {
	return c.acquire(ctx, rwlocks.path(name), rwLockQuery(mode, opts, false), opts.IdempotencyKey)
}

// ExtendRWLock is a reader's or the writer's heartbeat, as Extend is a
// lock's.
func (c *Client) ExtendRWLock(ctx context.Context, name, token string, ttl time.Duration) (Lease, error) {
	return c.extend(ctx, rwlocks.path(name), token, ttl)
}

// ReleaseRWLock gives a read or the write up.
func (c *Client) ReleaseRWLock(ctx context.Context, name, token string) error {
	return c.release(ctx, rwlocks.path(name), token)
}

// HoldRWLock takes the read/write lock in mode and keeps it for as long
// as the connection is open, as Hold does a lock.
func (c *Client) HoldRWLock(ctx context.Context, name string, mode Mode, opts Options) (*Held, error) {
	return c.hold(ctx, rwlocks.path(name), rwLockQuery(mode, opts, true), opts.IdempotencyKey)
}

// RWLockStatus is what the masters say about a read/write lock.
type RWLockStatus struct {
	Name          string       `json:"name"`
	Writer        *SlotHolder  `json:"writer"`  // nil when no writer holds it
	Readers       []SlotHolder `json:"readers"` // by slot
	ReaderCount   int          `json:"reader_count"`
	WriterWaiting bool         `json:"writer_waiting"` // a writer's intent bars new readers
}

// InspectRWLock asks the masters who reads or writes name, and whether a
// writer waits.
func (c *Client) InspectRWLock(ctx context.Context, name string) (RWLockStatus, error) {
	var st RWLockStatus
	err := c.getJSON(ctx, rwlocks.path(name), nil, "the read/write lock's status", &st)
	return st, err
}

// rwLockQuery is a lock's acquisition query plus the mode; an empty mode
// is left to the sidecar's default (exclusive).
func rwLockQuery(mode Mode, opts Options, hold bool) url.Values {
	q := opts.query(hold)
	if mode != "" {
		q.Set("mode", string(mode))
	}
	return q
}
