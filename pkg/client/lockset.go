package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// A lock set is several locks taken all or nothing under one lease: one
// token, one fence per lock. Its calls mirror the lock's, on
// /locksets/{names}, the names joined by "," in any order: the sidecar
// takes them in one canonical (sorted) order, so overlapping sets cannot
// deadlock. Each lock of a held set is an ordinary lock (GET /locks/{name}
// names the set's owner), held by the set until the set's valid_until.

// SetLease is a granted lock set: the set's lease, whose Name is the
// canonical set name and ValidUntil the earliest of its locks' (it has no
// Fence of its own), and its locks in canonical order.
type SetLease struct {
	Lease
	Locks []SetLock `json:"locks"`
}

// SetLock is one lock of a granted set.
type SetLock struct {
	Name       string    `json:"name"`
	Fence      int64     `json:"fence"`
	ValidUntil time.Time `json:"valid_until"`
}

// HeldSet is a lock set held for as long as its connection is open; Locks
// are its Held.Lease's.
type HeldSet struct {
	*Held
	Locks []SetLock
}

// lockSetPath is the set's resource: each name escaped as a lock name is,
// joined by "," (which lock names cannot contain).
func lockSetPath(names []string) string {
	escaped := make([]string, len(names))
	for i, n := range names {
		escaped[i] = lockPath(n)
	}
	return "/locksets/" + strings.Join(escaped, ",")
}

// AcquireLockSet takes every lock of names, waiting up to opts.Wait in
// all while any is held (ErrLockHeld); a refused set leaves none held.
func (c *Client) AcquireLockSet(ctx context.Context, names []string, opts Options) (SetLease, error) {
	res, err := c.do(ctx, http.MethodPost, lockSetPath(names), opts.query(false), "", opts.IdempotencyKey)
	if err != nil {
		return SetLease{}, err
	}
	return decodeSetLease(res)
}

// ExtendLockSet is the set's heartbeat: it extends every lock of it (by
// ttl when non-zero). names may come in any order.
func (c *Client) ExtendLockSet(ctx context.Context, names []string, token string, ttl time.Duration) (SetLease, error) {
	q := url.Values{}
	if ttl > 0 {
		q.Set("ttl", ttl.String())
	}
	res, err := c.do(ctx, http.MethodPut, lockSetPath(names), q, token, "")
	if err != nil {
		return SetLease{}, err
	}
	return decodeSetLease(res)
}

// ReleaseLockSet gives every lock of the set up.
func (c *Client) ReleaseLockSet(ctx context.Context, names []string, token string) error {
	return c.release(ctx, lockSetPath(names), token)
}

// HoldLockSet takes the set and keeps it for as long as the connection is
// open, as Hold does a lock; the stream ends when any of its locks ends.
func (c *Client) HoldLockSet(ctx context.Context, names []string, opts Options) (*HeldSet, error) {
	h, err := c.hold(ctx, lockSetPath(names), opts.query(true), opts.IdempotencyKey)
	if err != nil {
		return nil, err
	}
	return &HeldSet{Held: h, Locks: h.Lease.Locks}, nil
}

func decodeSetLease(res *http.Response) (SetLease, error) {
	defer res.Body.Close()
	var l SetLease
	if err := json.NewDecoder(res.Body).Decode(&l); err != nil {
		return SetLease{}, fmt.Errorf("sidelock: decoding the lock set's lease: %w", err)
	}
	return l, nil
}
