package shard

import (
	"context"
	"time"

	"github.com/sidelock/sidelock/pkg/redlock"
)

// AcquireReader takes a reader's key of the read/write lock rw in its
// group (in both groups while it moves, as Acquire does). Readers have no
// fence.
func (r *Router) AcquireReader(ctx context.Context, key, value string, ttl time.Duration, rw redlock.RWKeys) (redlock.Grant, error) {
	return r.acquireIn(ctx, key, value, func(g *redlock.Locker, _ int64) (redlock.Grant, error) {
		return g.AcquireReader(ctx, key, value, ttl, rw)
	})
}

// AcquireWriter takes the writer's key of rw in its group (in both groups
// while it moves, with one fence above both, as Acquire does).
func (r *Router) AcquireWriter(ctx context.Context, value string, ttl time.Duration, rw redlock.RWKeys) (redlock.Grant, error) {
	return r.acquireIn(ctx, rw.Writer, value, func(g *redlock.Locker, floor int64) (redlock.Grant, error) {
		return g.AcquireWriterAbove(ctx, value, ttl, rw, floor)
	})
}
