package redlock

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Local overload.
//
// A round's per-master budget (Config.NodeTimeout) is meant for the master:
// the network and its script. A sidecar that has more calls than it can
// send at once queues them (redisnode's pipeliner), and under a burst that
// queueing, not the master, used to eat the budget: healthy masters were
// then reported as "no quorum". So:
//
//   - Nodes that queue calls before sending them (QueueingNode) get room to
//     queue: a call's context allows NodeTimeout of queueing plus
//     NodeTimeout once sent (SendTimeout tells the node how long it has
//     once it sends), so a round still ends within twice the node timeout.
//   - A call that could not even be sent in time fails with an error
//     matching ErrOverloaded, and a round that misses its majority only
//     because of such calls fails with *OverloadedError, not *QuorumError:
//     ErrNoQuorum always means the masters.
//
// Validity is untouched: it is still measured from before the round's first
// call was queued, so longer queueing only shortens it.

// ErrOverloaded means this sidecar could not get a call to the masters in
// time: its own queues, not the masters, were the bottleneck. Retrying
// after a pause may succeed; the masters are fine as far as anyone knows.
var ErrOverloaded = errors.New("sidecar overloaded: calls could not be sent to the masters in time")

// OverloadedError is how a round, or an acquisition refused before its
// round, fails for local overload; it matches ErrOverloaded.
type OverloadedError struct {
	// RetryAfter is a suggested pause before trying again.
	RetryAfter time.Duration
	// Detail says what was overloaded.
	Detail string
}

func (e *OverloadedError) Error() string {
	if e.Detail == "" {
		return ErrOverloaded.Error()
	}
	return ErrOverloaded.Error() + ": " + e.Detail
}

// Is makes errors.Is(err, ErrOverloaded) true.
func (e *OverloadedError) Is(target error) bool { return target == ErrOverloaded }

// overloadRetryAfter is the pause suggested after a round that local
// overload spoiled: long enough for a burst's queue to drain (a queue bound
// is one node timeout), short for a caller.
const overloadRetryAfter = 100 * time.Millisecond

// QueueingNode is implemented by nodes that may queue a call inside the
// sidecar before sending it to the master. The Locker then gives their
// calls a node timeout of queueing on top of the node timeout at the
// master (see SendTimeout); the node must fail a call it could not send
// within the queueing share with an error matching ErrOverloaded when the
// wait was its own (the master kept answering meanwhile), and with a
// timeout when it was the master's (its earlier calls hung).
type QueueingNode interface {
	// QueuesCalls marks the interface; it does nothing.
	QueuesCalls()
}

type sendTimeoutKey struct{}

// SendTimeout is how long a call made with ctx may take once it is sent to
// the master, when the Locker left it room to queue first (ok false
// otherwise: the context's deadline bounds the whole call). The call must
// be sent by its deadline minus that, so that the master gets all of it.
func SendTimeout(ctx context.Context) (time.Duration, bool) {
	d, ok := ctx.Value(sendTimeoutKey{}).(time.Duration)
	return d, ok
}

// nodeContext bounds one call to n: the node timeout, plus as much again
// for queueing in the sidecar when n queues calls.
func nodeContext(ctx context.Context, timeout time.Duration, n Node) (context.Context, context.CancelFunc) {
	if _, ok := n.(QueueingNode); ok {
		ctx = context.WithValue(ctx, sendTimeoutKey{}, timeout)
		timeout *= 2
	}
	return context.WithTimeout(ctx, timeout)
}

// overloaded is the error for a round that missed its majority, when the
// masters that could not be asked in time (their calls failed with
// ErrOverloaded) would have made up the shortfall: the round says nothing
// about the masters, so it must not be reported as no quorum. It is nil
// when the masters themselves fell short.
func (l *Locker) overloaded(replies []reply, counted int) error {
	local := 0
	for _, r := range replies {
		if errors.Is(r.err, ErrOverloaded) {
			local++
		}
	}
	if local == 0 || counted+local < l.quorum {
		return nil
	}
	return &OverloadedError{
		RetryAfter: overloadRetryAfter,
		Detail:     fmt.Sprintf("%d of %d masters could not be asked in time, %d answered", local, len(replies), counted),
	}
}
