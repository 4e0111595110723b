package redisnode

import (
	"context"
	_ "embed"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sidelock/sidelock/pkg/redlock"
)

var (
	//go:embed members.lua
	membersSrc    string
	membersScript = redis.NewScript(membersSrc)
)

var _ redlock.MemberRecorder = (*Node)(nil)

// RecordMembers implements redlock.MemberRecorder with one script run: the
// records are a sorted set at key scored by expiry on the master's clock.
// The live lists come back sorted.
func (n *Node) RecordMembers(ctx context.Context, key, members string, ttl time.Duration) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, n.wrap(ctx, "record members", err)
	}
	live, err := n.pipe.run(ctx, membersScript, []string{key}, members, milliseconds(ttl)).StringSlice()
	if err != nil {
		return nil, n.wrap(ctx, "record members", err)
	}
	slices.Sort(live)
	return live, nil
}
