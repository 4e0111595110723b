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
