package redlock

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Fencing tokens.
//
// Every grant of a key gets a fence F: a number strictly greater than the
// fence of every grant of that key that finished before this one began.
// A protected resource that rejects writes carrying a fence lower than one
// it has seen is then safe from a holder that was paused past its lease.
//
// How (two rounds, or one with a proposal, below):
//
//  1. Acquire: each master atomically sets the key (if free) and, in the
//     same step, reads its floor: max(counter, clock in µs). F is the
//     largest floor among the answers, plus one.
//  2. Commit: each master raises its counter to F (keeping the larger), but
//     only while it still holds the key for this grant. The grant is final
//     only when a majority committed.
//
// With a single master (OneRoundFencer) both steps are one: the master
// takes the key, reads its floor and commits F in the same atomic step,
// and being the whole majority, its commit is final at once; the argument
// below holds with M0 = M1 = that master.
//
// With several masters (all OneRoundFencers) the Locker first proposes a
// fence P: its clock in µs plus proposalLead, and above any floor it was
// asked for. Each master takes the key and, in the same atomic step,
// commits P only if P is above its floor. When a majority committed P, P
// is final at once: it was committed on a majority, each master of it
// while it held the key for this grant, which is all the argument below
// asks of M0. Otherwise the commit round runs as above, with F above
// every floor read and above P (so above the counters that committed
// it). A proposal only saves a round; whether it is committed depends on
// clocks (a caller whose clock runs behind a master's, or behind another
// caller's recent proposal, gets two rounds), its correctness does not.
//
// Why F is greater than any earlier final fence F0: F0 was committed on a
// majority M0, each master of M0 while it held the key for that grant, so
// before this grant could take the key there. This grant's acquire majority
// M1 intersects M0; on a master of both, the floor read atomically with
// taking the key is at least F0. So F ≥ F0+1. Failed grants commit nothing
// on a majority, so only final grants move the counters that matter.
//
// Bounded memory: a counter expires FenceRetention after its last commit.
// Once it is gone a master's floor is its clock in µs, which is above every
// fence issued more than a retention ago — provided no master's clock runs
// more than FenceRetention behind another's (a generous bound for NTP-run
// machines; the default is an hour). Fences are therefore roughly µs since
// the epoch (about 1.7e15): they fit an int64 and a JSON/JavaScript number.
//
// A master that loses its data (restart without persistence) loses its
// counters too; the clock floor still puts it above old fences under the
// same clock assumption, and the restart guard keeps it out of quorums.
// Proposals put fences up to proposalLead (plus the caller's clock error)
// ahead of the masters' clocks, well within that bound.

// fenceKeySuffix uses '#', which lock names may not contain, so a fence key
// never collides with a lock's key.
const fenceKeySuffix = "#fence"

// FenceKey is where masters keep key's fence counter.
func FenceKey(key string) string { return key + fenceKeySuffix }

const defaultFenceRetention = time.Hour

// ErrFencingUnsupported means a node cannot keep fence counters.
var ErrFencingUnsupported = errors.New("redlock: fencing is on but a master does not support it")

func checkFencers(nodes []Node) error {
	for _, n := range nodes {
		if _, ok := n.(Fencer); !ok {
			return fmt.Errorf("%w: %s", ErrFencingUnsupported, n.Addr())
		}
	}
	return nil
}

// AcquireAbove is Acquire whose fence, when fencing is on, is also greater
// than floor. A caller that holds one name in two sets of masters at once
// (quorum groups during a migration, see package shard) uses it to give
// the grant one fence that is above the fences of both sets; with fencing
// off it is plain Acquire.
func (l *Locker) AcquireAbove(ctx context.Context, key, value string, ttl time.Duration, floor int64) (Grant, error) {
	if !l.fencing {
		return l.Acquire(ctx, key, value, ttl)
	}
	return l.acquireFenced(ctx, key, value, ttl, floor)
}

// RaiseFence raises key's fence counter to fence on the masters where value
// holds key, and succeeds when a majority did, so that every later grant of
// key by this Locker gets a fence above it. A no-op when fencing is off.
func (l *Locker) RaiseFence(ctx context.Context, key, value string, fence int64) error {
	if !l.fencing {
		return nil
	}
	_, err := l.commitFence(ctx, key, value, fence, time.Time{}, 0)
	return err
}

// acquireFenced runs both rounds, or the one that does both on a single
// master; on any failure it releases everywhere.
func (l *Locker) acquireFenced(ctx context.Context, key, value string, ttl time.Duration, floor int64) (Grant, error) {
	if one, ok := l.oneRoundFencer(); ok {
		return l.acquireInOneRound(ctx, one, key, value, ttl, floor)
	}
	if l.allOneRoundFencers() {
		return l.acquireProposed(ctx, key, value, ttl, floor)
	}
	start := l.now()
	fenceKey := FenceKey(key)
	replies := fanOut(ctx, l, func(ctx context.Context, n Node) reply {
		ok, holderTTL, floor, err := n.(Fencer).AcquireFenced(ctx, key, fenceKey, value, ttl)
		return reply{ok: ok, held: err == nil && !ok, ttl: holderTTL, fence: floor, err: err}
	})
	return l.grantFenced(ctx, key, value, replies, start, ttl, floor)
}

// oneRoundFencer is the Locker's only master, when it has one and that
// master can take a key and commit its fence at once.
func (l *Locker) oneRoundFencer() (OneRoundFencer, bool) {
	if len(l.nodes) != 1 {
		return nil, false
	}
	one, ok := l.nodes[0].(OneRoundFencer)
	return one, ok
}

// acquireInOneRound grants a fenced key on a single master in one round:
// the fence is committed in the same atomic step that takes the key.
func (l *Locker) acquireInOneRound(ctx context.Context, one OneRoundFencer, key, value string, ttl time.Duration, floor int64) (Grant, error) {
	start := l.now()
	replies := fanOut(ctx, l, func(ctx context.Context, _ Node) reply {
		ok, holderTTL, fence, err := one.AcquireCommitted(ctx, key, FenceKey(key), value, ttl, floor, l.fenceRetention)
		return reply{ok: ok, held: err == nil && !ok, ttl: holderTTL, fence: fence, err: err}
	})
	t := tally(replies)
	grant, err := l.judge(t, start, ttl)
	if err != nil {
		return Grant{}, l.failAcquire(ctx, key, value, replies, t, err)
	}
	grant.Fence = maxFence(replies)
	return grant, nil
}

// proposalLead is how far ahead of the Locker's clock a fence proposal
// is: enough to stay above the masters' clock floors while the call
// travels and when clocks differ a little, small next to FenceRetention.
const proposalLead = time.Second

func (l *Locker) allOneRoundFencers() bool {
	for _, n := range l.nodes {
		if _, ok := n.(OneRoundFencer); !ok {
			return false
		}
	}
	return true
}

// acquireProposed takes the key with a fence proposal; when a majority
// committed it, the grant is final in this one round, else the commit
// round follows (grantFenced).
func (l *Locker) acquireProposed(ctx context.Context, key, value string, ttl time.Duration, floor int64) (Grant, error) {
	start := l.now()
	proposal := max(start.Add(proposalLead).UnixMicro(), floor+1)
	replies := fanOut(ctx, l, func(ctx context.Context, n Node) reply {
		p, err := n.(OneRoundFencer).AcquireProposed(ctx, key, FenceKey(key), value, ttl, proposal, l.fenceRetention)
		return reply{ok: p.Acquired, held: err == nil && !p.Acquired, ttl: p.HolderTTL, fence: p.Fence, committed: p.Committed, prev: p.Prev, err: err}
	})
	if committedBy(replies) < l.quorum {
		return l.grantFenced(ctx, key, value, replies, start, ttl, floor)
	}
	t := tally(replies)
	grant, err := l.judge(t, start, ttl)
	if err != nil {
		return Grant{}, l.failAcquire(ctx, key, value, replies, t, err)
	}
	grant.Fence = proposal
	return grant, nil
}

// withdraw undoes a failed acquisition round: it releases key everywhere,
// and where the round committed a fence proposal (even on a master whose
// answer did not count) it puts back the counter the proposal replaced.
// Left there, a failed grant's proposal would show as the fence of the
// next holder whose key is repaired onto that master.
func (l *Locker) withdraw(ctx context.Context, key, value string, replies []reply) error {
	fenceKey := FenceKey(key)
	return l.releaseEach(ctx, func(ctx context.Context, i int, n Node) (bool, error) {
		if r := replies[i]; r.committed {
			return n.(OneRoundFencer).WithdrawProposal(ctx, key, fenceKey, value, r.fence, r.prev, l.fenceRetention)
		}
		return n.Release(ctx, key, value)
	})
}

// committedBy counts the masters that took the key and committed the
// proposal, among those that count.
func committedBy(replies []reply) int {
	n := 0
	for _, r := range replies {
		if r.ok && r.committed {
			n++
		}
	}
	return n
}

// grantFenced judges a fenced acquisition round and commits the fence
// above the floors it read (and floor); on any failure it releases
// everywhere.
func (l *Locker) grantFenced(ctx context.Context, key, value string, replies []reply, start time.Time, ttl time.Duration, floor int64) (Grant, error) {
	t := tally(replies)
	if _, err := l.judge(t, start, ttl); err != nil {
		return Grant{}, l.failAcquire(ctx, key, value, replies, t, err)
	}
	fence := max(maxFence(replies), floor) + 1
	grant, err := l.commitFence(ctx, key, value, fence, start, ttl)
	if err != nil {
		_ = l.withdraw(ctx, key, value, replies)
		return Grant{}, err
	}
	grant.Fence = fence
	return grant, nil
}

// commitFence runs the commit round. With ttl 0 only the majority is
// judged and start is unused (RaiseFence on a grant whose validity the
// caller already has).
func (l *Locker) commitFence(ctx context.Context, key, value string, fence int64, start time.Time, ttl time.Duration) (Grant, error) {
	fenceKey := FenceKey(key)
	commits := fanOut(ctx, l, func(ctx context.Context, n Node) reply {
		ok, err := n.(Fencer).CommitFence(ctx, key, fenceKey, value, fence, l.fenceRetention)
		return reply{ok: ok, held: err == nil && !ok, err: err}
	})
	t := tally(commits)
	if ttl == 0 {
		if t.ok < l.quorum {
			return Grant{}, fmt.Errorf("committing the fence: %w", l.noQuorum("committed", commits, t))
		}
		return Grant{}, nil
	}
	grant, err := l.judge(t, start, ttl)
	if err != nil {
		return Grant{}, fmt.Errorf("committing the fence: %w", err)
	}
	return grant, nil
}

func maxFence(replies []reply) int64 {
	var m int64
	for _, r := range replies {
		if r.ok && r.fence > m {
			m = r.fence
		}
	}
	return m
}
