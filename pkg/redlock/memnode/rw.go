package memnode

import (
	"context"
	"time"
)

// Read/write locks are ordinary keys in the one map (see redlock.RWNode);
// only the two acquisitions below look at several keys, atomically under
// n.mu as the Redis node's scripts are atomic on the master.

// AcquireReader implements redlock.RWNode.
func (n *Node) AcquireReader(ctx context.Context, key, value string, ttl time.Duration, writerKey, intentKey string) (bool, time.Duration, bool, error) {
	if err := n.enter(ctx, "acquire reader"); err != nil {
		return false, 0, false, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	now := n.now()
	held, ok := n.lookup(key, now)
	// A reader already in stays in, even when a writer has declared its
	// intent since.
	if ok && held.value == value {
		n.store(key, value, ttl, now)
		return true, 0, false, nil
	}
	for _, blocker := range []string{writerKey, intentKey} {
		if e, ok := n.lookup(blocker, now); ok {
			return false, e.expiresAt.Sub(now), false, nil
		}
	}
	if ok {
		return false, held.expiresAt.Sub(now), true, nil
	}
	n.store(key, value, ttl, now)
	return true, 0, false, nil
}

// AcquireWriter implements redlock.RWNode.
func (n *Node) AcquireWriter(ctx context.Context, writerKey, fenceKey, value string, ttl time.Duration, intentKey string, readerKeys []string) (bool, time.Duration, int64, error) {
	if err := n.enter(ctx, "acquire writer"); err != nil {
		return false, 0, 0, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	now := n.now()
	if blocked, longest := n.writerBlocked(writerKey, value, readerKeys, now); blocked {
		// The intent bars new readers while this writer waits.
		n.store(intentKey, value, ttl, now)
		return false, longest, 0, nil
	}
	n.store(writerKey, value, ttl, now)
	// Another writer's intent stays: it still waits.
	if e, ok := n.lookup(intentKey, now); ok && e.value == value {
		delete(n.entries, intentKey)
	}
	return true, 0, max(n.counter(fenceKey, now), now.UnixMicro()), nil
}

// PutBack implements redlock.GuardedRepairer: take's set-if-absent of key,
// refused with nothing written while any of excluders is held.
func (n *Node) PutBack(ctx context.Context, key, value string, ttl time.Duration, excluders []string) (bool, error) {
	if err := n.enter(ctx, "put back"); err != nil {
		return false, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	now := n.now()
	for _, k := range excluders {
		if _, ok := n.lookup(k, now); ok {
			return false, nil
		}
	}
	_, taken := n.take(key, value, ttl, now)
	return taken, nil
}

// writerBlocked reports whether another writer or any reader holds the
// lock, and the longest remaining ttl among them. The caller holds n.mu.
func (n *Node) writerBlocked(writerKey, value string, readerKeys []string, now time.Time) (bool, time.Duration) {
	blocked, longest := false, time.Duration(0)
	if e, ok := n.lookup(writerKey, now); ok && e.value != value {
		blocked, longest = true, e.expiresAt.Sub(now)
	}
	for _, k := range readerKeys {
		if e, ok := n.lookup(k, now); ok {
			blocked, longest = true, max(longest, e.expiresAt.Sub(now))
		}
	}
	return blocked, longest
}
