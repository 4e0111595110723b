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
func (n *Node) ExtendMany(ctx context.Context, items []ExtendItem) ([]bool, error) {
	if err := n.enter(ctx, "extend many"); err != nil {
		return nil, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	now := n.now()
	out := make([]bool, len(items))
	for i, it := range items {
		if held, ok := n.lookup(it.Key, now); ok && held.value != it.Value {
			continue
		}
		n.store(it.Key, it.Value, it.TTL, now)
		out[i] = true
	}
	return out, nil
}
