package redlock

import (
	"context"
	"time"
)

// Node is one independent lock master as the algorithm sees it: a Redis
// master in production, an in-memory map in dev mode and fast tests. Every
// implementation must pass the conformance suite in package nodetest.
//
// Every method is bounded by ctx; the algorithm gives each call the per-node
// timeout. Values are opaque strings chosen by the caller; a node never
// interprets them.
type Node interface {
	// Addr names the node in health reports, metrics and errors.
	Addr() string

	// Acquire sets key to value with the given ttl when key is absent, and
	// refreshes the ttl when key already holds value (so a retried call is
	// idempotent). When another value holds key it returns acquired=false and
	// the holder's remaining ttl (0 when the key has no expiry).
	Acquire(ctx context.Context, key, value string, ttl time.Duration) (acquired bool, holderTTL time.Duration, err error)

	// Extend resets key's ttl when it holds value. When key is absent (it
	// expired or the node restarted empty) it claims key again with value, so
	// a holder that still owns a quorum repairs a lagging minority. It reports
	// false when another value holds key.
	Extend(ctx context.Context, key, value string, ttl time.Duration) (bool, error)

	// Release deletes key when it holds value and reports whether it did.
	Release(ctx context.Context, key, value string) (bool, error)

	// Get returns key's value and remaining ttl, or "" when key is absent.
	Get(ctx context.Context, key string) (value string, ttl time.Duration, err error)

	// Ping checks that the node answers.
	Ping(ctx context.Context) error

	// Close frees the node's connections.
	Close() error
}
