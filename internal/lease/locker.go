package lease

import (
	"context"
	"time"

	"github.com/sidelock/sidelock/pkg/redlock"
)

// Locker is the lock algorithm the Manager drives: a *redlock.Locker over
// one quorum of masters, or a router that spreads names over several
// quorum groups (package shard). Its methods have redlock.Locker's
// meaning and errors.
type Locker interface {
	Acquire(ctx context.Context, key, value string, ttl time.Duration) (redlock.Grant, error)
	Extend(ctx context.Context, key, value string, ttl time.Duration) (redlock.Grant, error)
	ExtendMany(ctx context.Context, items []redlock.ExtendItem) ([]redlock.Grant, []error)
	AcquireReader(ctx context.Context, key, value string, ttl time.Duration, rw redlock.RWKeys) (redlock.Grant, error)
	AcquireWriter(ctx context.Context, value string, ttl time.Duration, rw redlock.RWKeys) (redlock.Grant, error)
	Release(ctx context.Context, key, value string) error
	// Take, NoteHolder, ReleaseTenure, RemoveMark and WatchChannel keep a
	// tenure's keys, holder record and waiter marks (tenure.go; Take
	// answers ErrTenureUnsupported where it cannot).
	Take(ctx context.Context, req redlock.TakeRequest) (redlock.Tenure, error)
	NoteHolder(ctx context.Context, key string, rec redlock.HolderRecord, self string) (redlock.WaiterMark, error)
	ReleaseTenure(ctx context.Context, key, value string, mark redlock.WaiterMark, notify string) error
	RemoveMark(ctx context.Context, key, sidecar string) error
	WatchChannel(channel string, notify func(redlock.Message)) (cancel func())
	Inspect(ctx context.Context, key string) (redlock.Holder, error)
	WatchReleases(key string, notify func()) (cancel func())
	// Drift is the clock-drift allowance the algorithm takes off a grant
	// for a key ttl: a ttl set on the masters at t holds until at least
	// t + ttl - Drift(ttl) by the sidecar's clock.
	Drift(ttl time.Duration) time.Duration
}

var _ Locker = (*redlock.Locker)(nil)
