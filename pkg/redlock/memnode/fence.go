package memnode

import (
	"context"
	"strconv"
	"time"
)

// Fence counters live in the same map as lock keys (under their own fence
// keys), so expiry and sweeping bound them the same way.

// AcquireFenced implements redlock.Fencer.
func (n *Node) AcquireFenced(ctx context.Context, key, fenceKey, value string, ttl time.Duration) (bool, time.Duration, int64, error) {
	if err := n.enter(ctx, "acquire"); err != nil {
		return false, 0, 0, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	now := n.now()
	if holderTTL, taken := n.take(key, value, ttl, now); !taken {
		return false, holderTTL, 0, nil
	}
	return true, 0, max(n.counter(fenceKey, now), now.UnixMicro()), nil
}

// AcquireCommitted implements redlock.OneRoundFencer.
func (n *Node) AcquireCommitted(ctx context.Context, key, fenceKey, value string, ttl time.Duration, above int64, retention time.Duration) (bool, time.Duration, int64, error) {
	if err := n.enter(ctx, "acquire"); err != nil {
		return false, 0, 0, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	now := n.now()
	if holderTTL, taken := n.take(key, value, ttl, now); !taken {
		return false, holderTTL, 0, nil
	}
	fence := max(n.counter(fenceKey, now), now.UnixMicro(), above) + 1
	n.store(fenceKey, strconv.FormatInt(fence, 10), retention, now)
	return true, 0, fence, nil
}

// Proposal mirrors redlock.Proposal (memnode does not import redlock).
type Proposal = struct {
	Acquired  bool
	HolderTTL time.Duration
	Fence     int64
	Committed bool
	Prev      int64
}

// AcquireProposed implements redlock.OneRoundFencer.
func (n *Node) AcquireProposed(ctx context.Context, key, fenceKey, value string, ttl time.Duration, proposal int64, retention time.Duration) (Proposal, error) {
	if err := n.enter(ctx, "acquire"); err != nil {
		return Proposal{}, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.proposeLocked(key, fenceKey, value, ttl, proposal, retention, n.now()), nil
}

// proposeLocked is AcquireProposed's step. The caller holds n.mu.
func (n *Node) proposeLocked(key, fenceKey, value string, ttl time.Duration, proposal int64, retention time.Duration, now time.Time) Proposal {
	if holderTTL, taken := n.take(key, value, ttl, now); !taken {
		return Proposal{HolderTTL: holderTTL}
	}
	prev := n.counter(fenceKey, now)
	if floor := max(prev, now.UnixMicro()); proposal <= floor {
		return Proposal{Acquired: true, Fence: floor}
	}
	n.store(fenceKey, strconv.FormatInt(proposal, 10), retention, now)
	return Proposal{Acquired: true, Fence: proposal, Committed: true, Prev: prev}
}

// WithdrawProposal implements redlock.OneRoundFencer.
func (n *Node) WithdrawProposal(ctx context.Context, key, fenceKey, value string, proposal, prev int64, retention time.Duration) (bool, error) {
	return n.releaseThen(ctx, key, value, func(now time.Time) {
		if n.counter(fenceKey, now) != proposal {
			return // raised since, by this grant's commit round
		}
		if prev == 0 {
			delete(n.entries, fenceKey)
			return
		}
		n.store(fenceKey, strconv.FormatInt(prev, 10), retention, now)
	})
}

// CommitFence implements redlock.Fencer.
func (n *Node) CommitFence(ctx context.Context, key, fenceKey, value string, fence int64, retention time.Duration) (bool, error) {
	if err := n.enter(ctx, "commit fence"); err != nil {
		return false, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	now := n.now()
	if held, ok := n.lookup(key, now); !ok || held.value != value {
		return false, nil
	}
	fence = max(fence, n.counter(fenceKey, now))
	n.store(fenceKey, strconv.FormatInt(fence, 10), retention, now)
	return true, nil
}

// GetFenced implements redlock.Fencer.
func (n *Node) GetFenced(ctx context.Context, key, fenceKey string) (string, time.Duration, int64, error) {
	if err := n.enter(ctx, "get"); err != nil {
		return "", 0, 0, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	now := n.now()
	fence := n.counter(fenceKey, now)
	held, ok := n.lookup(key, now)
	if !ok {
		return "", 0, fence, nil
	}
	return held.value, held.expiresAt.Sub(now), fence, nil
}

// counter reads a fence counter (0 when absent). The caller holds n.mu.
func (n *Node) counter(fenceKey string, now time.Time) int64 {
	e, ok := n.lookup(fenceKey, now)
	if !ok {
		return 0
	}
	c, _ := strconv.ParseInt(e.value, 10, 64)
	return c
}
