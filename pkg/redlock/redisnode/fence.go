package redisnode

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sidelock/sidelock/pkg/redlock"
)

var (
	//go:embed fence_floor.lua
	fenceFloorSrc string
	//go:embed acquire_fenced.lua
	acquireFencedSrc string
	//go:embed raise_counter.lua
	raiseCounterSrc string
	//go:embed commit_fence.lua
	commitFenceSrc string
	//go:embed get_fenced.lua
	getFencedSrc string
	//go:embed acquire_committed.lua
	acquireCommittedSrc string
	//go:embed acquire_proposed.lua
	acquireProposedSrc string
	//go:embed withdraw_proposal.lua
	withdrawProposalSrc string

	acquireFencedScript    = redis.NewScript(fenceFloorSrc + takeKeySrc + acquireFencedSrc)
	commitFenceScript      = redis.NewScript(raiseCounterSrc + commitFenceSrc)
	getFencedScript        = redis.NewScript(getFencedSrc)
	acquireCommittedScript = redis.NewScript(fenceFloorSrc + takeKeySrc + acquireCommittedSrc)
	acquireProposedScript  = redis.NewScript(fenceFloorSrc + takeKeySrc + acquireProposedSrc)
	withdrawProposalScript = redis.NewScript(withdrawProposalSrc)
)

var (
	_ redlock.Fencer         = (*Node)(nil)
	_ redlock.OneRoundFencer = (*Node)(nil)
)

// AcquireFenced implements redlock.Fencer.
func (n *Node) AcquireFenced(ctx context.Context, key, fenceKey, value string, ttl time.Duration) (bool, time.Duration, int64, error) {
	reply, err := n.pipe.run(ctx, acquireFencedScript, []string{key, fenceKey}, value, milliseconds(ttl)).Int64Slice()
	if err != nil {
		return false, 0, 0, n.wrap(ctx, "acquire", err)
	}
	if len(reply) != 3 {
		return false, 0, 0, n.wrap(ctx, "acquire", fmt.Errorf("unexpected script reply %v", reply))
	}
	if reply[0] == 1 {
		return true, 0, reply[2], nil
	}
	return false, time.Duration(reply[1]) * time.Millisecond, 0, nil
}

// AcquireCommitted implements redlock.OneRoundFencer.
func (n *Node) AcquireCommitted(ctx context.Context, key, fenceKey, value string, ttl time.Duration, above int64, retention time.Duration) (bool, time.Duration, int64, error) {
	reply, err := n.pipe.run(ctx, acquireCommittedScript, []string{key, fenceKey}, value, milliseconds(ttl), above, milliseconds(retention)).Int64Slice()
	if err != nil {
		return false, 0, 0, n.wrap(ctx, "acquire", err)
	}
	if len(reply) != 3 {
		return false, 0, 0, n.wrap(ctx, "acquire", fmt.Errorf("unexpected script reply %v", reply))
	}
	if reply[0] == 1 {
		return true, 0, reply[2], nil
	}
	return false, time.Duration(reply[1]) * time.Millisecond, 0, nil
}

// AcquireProposed implements redlock.OneRoundFencer.
func (n *Node) AcquireProposed(ctx context.Context, key, fenceKey, value string, ttl time.Duration, proposal int64, retention time.Duration) (redlock.Proposal, error) {
	reply, err := n.pipe.run(ctx, acquireProposedScript, []string{key, fenceKey}, proposedArgs(value, ttl, proposal, retention)...).Int64Slice()
	return n.proposal(ctx, "acquire", reply, err)
}

// proposal reads an acquire_proposed.lua reply.
func (n *Node) proposal(ctx context.Context, op string, reply []int64, err error) (redlock.Proposal, error) {
	if err != nil {
		return redlock.Proposal{}, n.wrap(ctx, op, err)
	}
	if len(reply) != 5 {
		return redlock.Proposal{}, n.wrap(ctx, op, fmt.Errorf("unexpected script reply %v", reply))
	}
	if reply[0] != 1 {
		return redlock.Proposal{HolderTTL: time.Duration(reply[1]) * time.Millisecond}, nil
	}
	return redlock.Proposal{Acquired: true, Fence: reply[2], Committed: reply[3] == 1, Prev: reply[4]}, nil
}

// WithdrawProposal implements redlock.OneRoundFencer.
func (n *Node) WithdrawProposal(ctx context.Context, key, fenceKey, value string, proposal, prev int64, retention time.Duration) (bool, error) {
	deleted, err := n.pipe.run(ctx, withdrawProposalScript, []string{key, fenceKey}, value, proposal, prev, milliseconds(retention)).Int64()
	if err != nil {
		return false, n.wrap(ctx, "release", err)
	}
	return deleted == 1, nil
}

// CommitFence implements redlock.Fencer.
func (n *Node) CommitFence(ctx context.Context, key, fenceKey, value string, fence int64, retention time.Duration) (bool, error) {
	ok, err := n.pipe.run(ctx, commitFenceScript, []string{key, fenceKey}, value, fence, milliseconds(retention)).Int64()
	if err != nil {
		return false, n.wrap(ctx, "commit fence", err)
	}
	return ok == 1, nil
}

// GetFenced implements redlock.Fencer.
func (n *Node) GetFenced(ctx context.Context, key, fenceKey string) (string, time.Duration, int64, error) {
	reply, err := n.pipe.run(ctx, getFencedScript, []string{key, fenceKey}).Slice()
	if err != nil {
		return "", 0, 0, n.wrap(ctx, "get", err)
	}
	if len(reply) != 3 {
		return "", 0, 0, n.wrap(ctx, "get", fmt.Errorf("unexpected script reply %v", reply))
	}
	value, okV := reply[0].(string)
	pttl, okT := reply[1].(int64)
	counter, okC := reply[2].(string)
	if !okV || !okT || !okC {
		return "", 0, 0, n.wrap(ctx, "get", fmt.Errorf("unexpected script reply %v", reply))
	}
	fence, err := strconv.ParseInt(counter, 10, 64)
	if err != nil {
		return "", 0, 0, n.wrap(ctx, "get", fmt.Errorf("fence counter %q: %w", counter, err))
	}
	return value, time.Duration(pttl) * time.Millisecond, fence, nil
}
