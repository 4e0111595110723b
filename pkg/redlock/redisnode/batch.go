package redisnode

import (
	"context"
	_ "embed"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/sidelock/sidelock/pkg/redlock"
)

var (
	//go:embed extend_many.lua
	extendManySrc    string
	extendManyScript = redis.NewScript(extendManySrc)
)

var _ redlock.BatchExtender = (*Node)(nil)

// ExtendMany implements redlock.BatchExtender: one script run for all
// items, so renewing many locks costs one round trip and one script call.
func (n *Node) ExtendMany(ctx context.Context, items []redlock.ExtendItem) ([]redlock.ExtendOutcome, error) {
	keys := make([]string, len(items))
	args := make([]any, 0, 2*len(items))
	for i, it := range items {
		keys[i] = it.Key
		args = append(args, it.Value, milliseconds(it.TTL))
	}
	reply, err := n.pipe.run(ctx, extendManyScript, keys, args...).Int64Slice()
	if err != nil {
		return nil, n.wrap(ctx, "extend many", err)
	}
	if len(reply) != len(items) {
		return nil, n.wrap(ctx, "extend many", fmt.Errorf("%d answers for %d keys", len(reply), len(items)))
	}
	out := make([]redlock.ExtendOutcome, len(reply))
	for i, r := range reply {
		if out[i], err = extendOutcome(r); err != nil {
			return nil, n.wrap(ctx, "extend many", err)
		}
	}
	return out, nil
}
