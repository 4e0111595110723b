package redlock

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Batched renewal: a sidecar holding thousands of locks renews them in one
// call per master per tick instead of one round (and one script run) per
// lock.

// ExtendItem is one key to extend in a batch. It is an alias of a plain
// struct type so that nodes can implement BatchExtender without importing
// this package (memnode does not, to stay usable from its tests).
type ExtendItem = struct {
	Key   string
	Value string
	TTL   time.Duration
}

// BatchExtender is implemented by nodes that can extend many keys in one
// call, with Extend's semantics (and outcomes) for each.
type BatchExtender interface {
	ExtendMany(ctx context.Context, items []ExtendItem) ([]ExtendOutcome, error)
}

// maxExtendBatch bounds one call's size, so a batch stays far inside the
// node timeout on the master.
const maxExtendBatch = 1000

// ExtendMany extends every item as Extend would, with one call per master
// per maxExtendBatch items. The result for item i is its Grant or its error
// (matching ErrNotHeld or ErrNoQuorum).
func (l *Locker) ExtendMany(ctx context.Context, items []ExtendItem) ([]Grant, []error) {
	grants := make([]Grant, len(items))
	errs := make([]error, len(items))
	for lo := 0; lo < len(items); lo += maxExtendBatch {
		hi := min(lo+maxExtendBatch, len(items))
		l.extendChunk(ctx, items[lo:hi], grants[lo:hi], errs[lo:hi])
	}
	return grants, errs
}

func (l *Locker) extendChunk(ctx context.Context, items []ExtendItem, grants []Grant, errs []error) {
	start := l.now()
	answers := make([][]ExtendOutcome, len(l.nodes))
	nodeErrs := make([]error, len(l.nodes))
	var wg sync.WaitGroup
	for i, n := range l.nodes {
		wg.Go(func() {
			ctx, cancel := nodeContext(ctx, l.nodeTimeout, n)
			defer cancel()
			answers[i], nodeErrs[i] = extendOn(ctx, n, items)
		})
	}
	wg.Wait()
	for i := range l.nodes {
		if nodeErrs[i] == nil {
			nodeErrs[i] = l.counted(i)
		}
	}
	missing := make([][]ExtendItem, len(l.nodes))
	for k, it := range items {
		replies := make([]reply, len(l.nodes))
		for i := range l.nodes {
			switch {
			case nodeErrs[i] != nil:
				replies[i] = reply{err: nodeErrs[i]}
			default:
				replies[i] = extendReply(answers[i][k], nil)
			}
		}
		grants[k], errs[k] = l.judgeExtend(replies, start, it.TTL)
		for i, r := range replies {
			if errs[k] == nil && r.missing {
				missing[i] = append(missing[i], it)
			}
		}
	}
	l.repair(ctx, func(i int) []ExtendItem { return missing[i] })
}

// extendOn extends items on one node: in one call when it can batch.
func extendOn(ctx context.Context, n Node, items []ExtendItem) ([]ExtendOutcome, error) {
	if b, ok := n.(BatchExtender); ok {
		out, err := b.ExtendMany(ctx, items)
		if err == nil && len(out) != len(items) {
			err = fmt.Errorf("%s: %d answers for %d keys", n.Addr(), len(out), len(items))
		}
		return out, err
	}
	out := make([]ExtendOutcome, len(items))
	for i, it := range items {
		outcome, err := n.Extend(ctx, it.Key, it.Value, it.TTL)
		if err != nil {
			return nil, err
		}
		out[i] = outcome
	}
	return out, nil
}
