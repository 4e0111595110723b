package redlock

import (
	"context"
	"errors"
	"time"
)

// Hand-over. A sidecar whose caller releases a lock while another of its
// callers waits for it can give the lock to the waiting caller without
// letting it go: one round replaces the giver's value with the taker's on
// the masters (HandOverer.HandOver) and commits the taker's fence, where a
// release and a new grant take two rounds or three.
//
// Safety is the acquisition's. On each master a hand-over is the giver's
// release and the taker's acquisition in one atomic step, each safe alone;
// the taker counts only the masters that took its value, judged as Acquire
// judges them (a majority within the validity, drift taken off), and its
// fence is committed on a majority exactly as acquireProposed commits one
// (fence.go), so it is above every fence granted before and below every
// fence granted after.
//
// What it does not do: announce a release. Waiters on other sidecars are
// not woken by a hand-over (the lock was never free), so the caller must
// bound how many it makes in a row (package lease does).

// ErrHandOverUnsupported means a master cannot hand keys over: release
// and acquire instead.
var ErrHandOverUnsupported = errors.New("redlock: a master cannot hand keys over")

// HandOver gives key, held with the value from, to the value to. It is
// granted as Acquire grants, with a fence above floor when fencing is on.
// On failure to is released everywhere, and from is left where it still
// holds the key: the caller releases it.
func (l *Locker) HandOver(ctx context.Context, key, from, to string, ttl time.Duration, floor int64) (Grant, error) {
	if !l.allHandOverers() {
		return Grant{}, ErrHandOverUnsupported
	}
	handOver := func(ctx context.Context, n Node, proposal int64) (Proposal, error) {
		return n.(HandOverer).HandOver(ctx, key, FenceKey(key), from, to, ttl, proposal, l.fenceRetention)
	}
	if l.fencing {
		return l.grantProposed(ctx, key, to, ttl, floor, handOver)
	}
	start := l.now()
	replies := fanOut(ctx, l, func(ctx context.Context, n Node) reply {
		p, err := handOver(ctx, n, 0) // 0 is never above the floor: no counter moves
		return reply{ok: p.Acquired, held: err == nil && !p.Acquired, ttl: p.HolderTTL, err: err}
	})
	t := tally(replies)
	grant, err := l.judge(t, start, ttl)
	if err != nil {
		return Grant{}, l.failAcquire(ctx, key, to, replies, t, err)
	}
	return grant, nil
}

func (l *Locker) allHandOverers() bool {
	for _, n := range l.nodes {
		if _, ok := n.(HandOverer); !ok {
			return false
		}
	}
	return true
}
