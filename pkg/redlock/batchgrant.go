package redlock

import (
	"context"
	"time"
)

// Batched grants and releases: a node that can take or release many keys
// in one call does, per item, exactly what its single call does (the
// conformance suite, package nodetest, holds both shipped nodes to it).
// redisnode also merges the single calls of concurrent callers that fall
// due at once into these batched calls, so that a master runs one script
// per batch instead of one per key.

// ReleaseItem is one key to release in a batch. Like ExtendItem it is an
// alias of a plain struct type, so that nodes need not import this package.
type ReleaseItem = struct {
	Key   string
	Value string
}

// BatchReleaser is implemented by nodes that can release many keys in one
// call, with Release's semantics (and answer) for each.
type BatchReleaser interface {
	ReleaseMany(ctx context.Context, items []ReleaseItem) ([]bool, error)
}

// ProposalItem is one key to take with a fence proposal in a batch: the
// arguments of OneRoundFencer.AcquireProposed.
type ProposalItem = struct {
	Key, FenceKey, Value string
	TTL                  time.Duration
	Proposal             int64
	Retention            time.Duration
}

// BatchProposer is implemented by nodes that can take many keys with
// fence proposals in one call, with AcquireProposed's semantics (and
// answer) for each.
type BatchProposer interface {
	AcquireProposedMany(ctx context.Context, items []ProposalItem) ([]Proposal, error)
}
