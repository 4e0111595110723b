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
	if held, ok := n.lookup(key, now); ok && held.value != value {
		return false, held.expiresAt.Sub(now), 0, nil
	}
	n.store(key, value, ttl, now)
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
	if held, ok := n.lookup(key, now); ok && held.value != value {
		return false, held.expiresAt.Sub(now), 0, nil
	}
	n.store(key, value, ttl, now)
	fence := max(n.counter(fenceKey, now), now.UnixMicro(), above) + 1
	n.store(fenceKey, strconv.FormatInt(fence, 10), retention, now)
	return true, 0, fence, nil
}

// AcquireProposed implements redlock.OneRoundFencer.
func (n *Node) AcquireProposed(ctx context.Context, key, fenceKey, value string, ttl time.Duration, proposal int64, retention time.Duration) (bool, time.Duration, int64, bool, error) {
	if err := n.enter(ctx, "acquire"); err != nil {
		return false, 0, 0, false, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	now := n.now()
	if held, ok := n.lookup(key, now); ok && held.value != value {
		return false, held.expiresAt.Sub(now), 0, false, nil
	}
	n.store(key, value, ttl, now)
	floor := max(n.counter(fenceKey, now), now.UnixMicro())
	if proposal <= floor {
		return true, 0, floor, false, nil
	}
	n.store(fenceKey, strconv.FormatInt(proposal, 10), retention, now)
	return true, 0, proposal, true, nil
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
