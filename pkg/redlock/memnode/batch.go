package memnode

import (
	"context"
	"time"
)

// ExtendItem mirrors redlock.ExtendItem (memnode does not import redlock);
// see ExtendMany.
type ExtendItem = struct {
	Key   string
	Value string
	TTL   time.Duration
}

// ExtendMany is Extend for many keys in one call (redlock.BatchExtender).
func (n *Node) ExtendMany(ctx context.Context, items []ExtendItem) ([]int8, error) {
	if err := n.enter(ctx, "extend many"); err != nil {
		return nil, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	now := n.now()
	out := make([]int8, len(items))
	for i, it := range items {
		out[i] = n.extendLocked(it.Key, it.Value, it.TTL, now)
	}
	return out, nil
}

// ReleaseItem mirrors redlock.ReleaseItem; see ReleaseMany.
type ReleaseItem = struct {
	Key   string
	Value string
}

// ReleaseMany is Release for many keys in one call (redlock.BatchReleaser).
func (n *Node) ReleaseMany(ctx context.Context, items []ReleaseItem) ([]bool, error) {
	if err := n.enter(ctx, "release many"); err != nil {
		return nil, err
	}
	out := make([]bool, len(items))
	var notify []func()
	n.mu.Lock()
	now := n.now()
	for i, it := range items {
		released, announce := n.releaseLocked(it.Key, it.Value, now, nil)
		out[i], notify = released, append(notify, announce...)
	}
	n.mu.Unlock()
	// Outside the lock, as Release announces.
	for _, f := range notify {
		f()
	}
	return out, nil
}

// ProposalItem mirrors redlock.ProposalItem; see AcquireProposedMany.
type ProposalItem = struct {
	Key, FenceKey, Value string
	TTL                  time.Duration
	Proposal             int64
	Retention            time.Duration
}

// AcquireProposedMany is AcquireProposed for many keys in one call
// (redlock.BatchProposer).
func (n *Node) AcquireProposedMany(ctx context.Context, items []ProposalItem) ([]Proposal, error) {
	if err := n.enter(ctx, "acquire many"); err != nil {
		return nil, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	now := n.now()
	out := make([]Proposal, len(items))
	for i, it := range items {
		out[i] = n.proposeLocked(it.Key, it.FenceKey, it.Value, it.TTL, it.Proposal, it.Retention, now)
	}
	return out, nil
}
