package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Read/write locks: many readers or one writer.
//
// On each master a read/write lock is a writer key, one key per reader
// (RWKeys.Readers: a fixed set, so that a writer can check them all in
// one atomic step) and an intent key; see RWNode for what each master
// admits. A grant needs a majority, as any Redlock grant does.
//
// Why no reader overlaps a writer: a reader's majority and a writer's
// majority share at least one master. On that master the one admitted
// later was admitted while the earlier one's key was there, which the
// master refuses (a reader while a writer key or intent is held, a
// writer while any reader key is held). So, under Redlock's assumptions,
// no reader grant and writer grant are valid at the same instant; two
// writers exclude each other as two holders of one lock do.
//
// Why writers do not starve: a refused writer leaves its intent on every
// master that refused it, and a master with an intent admits no new
// reader; once the readers there leave, the writer is admitted. The
// intent lapses after the writer's ttl unless its next try renews it, and
// a writer that gives up releases it (Release of the intent key with the
// value it tried with).
//
// What is NOT guaranteed: everything Locker does not promise; fences order
// writers only (a reader's grant has none); readers are capped by the
// number of reader keys; and the order in which waiting writers and
// readers are admitted is only first-come per sidecar (package lease).

// RWKeys names one read/write lock's keys on the masters.
type RWKeys struct {
	Writer  string   // held by the writer
	Intent  string   // held by a writer waiting to be admitted
	Readers []string // one per reader, a reader holds one; only a writer's acquisition reads them
}

// ErrReaderKeyHeld is an AcquireReader refused only because other readers
// hold the reader key asked for: another may be free.
var ErrReaderKeyHeld = errors.New("redlock: other readers hold this reader key")

// ErrRWUnsupported means a node cannot keep read/write locks.
var ErrRWUnsupported = errors.New("redlock: a master does not support read/write locks")

func (l *Locker) rwNodes() error {
	for _, n := range l.nodes {
		if _, ok := n.(RWNode); !ok {
			return fmt.Errorf("%w: %s", ErrRWUnsupported, n.Addr())
		}
	}
	return nil
}

// AcquireReader takes key, one of rw.Readers, for value on a majority of
// masters where no writer holds or waits for the lock. Failures are as
// for Acquire (released everywhere; *HeldError when writers, or other
// readers of key, hold too many masters). A reader's grant has no fence.
func (l *Locker) AcquireReader(ctx context.Context, key, value string, ttl time.Duration, rw RWKeys) (Grant, error) {
	if err := l.rwNodes(); err != nil {
		return Grant{}, err
	}
	start := l.now()
	taken := make([]bool, len(l.nodes))
	replies := fanOut(ctx, l, func(ctx context.Context, n Node) reply {
		ok, holderTTL, keyTaken, err := n.(RWNode).AcquireReader(ctx, key, value, ttl, rw.Writer, rw.Intent)
		if keyTaken {
			taken[slices.Index(l.nodes, n)] = true
		}
		return reply{ok: ok, held: err == nil && !ok, ttl: holderTTL, err: err}
	})
	t := tally(replies)
	grant, err := l.judge(t, start, ttl)
	if err == nil {
		return grant, nil
	}
	err = l.failAcquire(ctx, key, value, replies, t, err)
	if errors.Is(err, ErrLockHeld) && onlyKeyTaken(replies, taken) {
		return Grant{}, fmt.Errorf("%w: %w", ErrReaderKeyHeld, err)
	}
	return Grant{}, err
}

// onlyKeyTaken tells whether every master that refused a reader did so
// only because another reader held the key asked for.
func onlyKeyTaken(replies []reply, taken []bool) bool {
	for i, r := range replies {
		if r.held && !taken[i] {
			return false
		}
	}
	return true
}

// AcquireWriter takes rw.Writer for value on a majority of masters that no
// reader or other writer holds, with a fence (when fencing is on) above
// every earlier writer's. Refused, it leaves value's intent where it was
// refused (see the type's doc); failures are otherwise as for Acquire.
func (l *Locker) AcquireWriter(ctx context.Context, value string, ttl time.Duration, rw RWKeys) (Grant, error) {
	return l.AcquireWriterAbove(ctx, value, ttl, rw, 0)
}

// AcquireWriterAbove is AcquireWriter whose fence is also above floor
// (see AcquireAbove).
func (l *Locker) AcquireWriterAbove(ctx context.Context, value string, ttl time.Duration, rw RWKeys, floor int64) (Grant, error) {
	if err := l.rwNodes(); err != nil {
		return Grant{}, err
	}
	key := rw.Writer
	start := l.now()
	fenceKey := FenceKey(key)
	replies := fanOut(ctx, l, func(ctx context.Context, n Node) reply {
		ok, holderTTL, floor, err := n.(RWNode).AcquireWriter(ctx, key, fenceKey, value, ttl, rw.Intent, rw.Readers)
		return reply{ok: ok, held: err == nil && !ok, ttl: holderTTL, fence: floor, err: err}
	})
	if l.fencing {
		return l.grantFenced(ctx, key, value, replies, start, ttl, floor)
	}
	t := tally(replies)
	grant, err := l.judge(t, start, ttl)
	if err != nil {
		return Grant{}, l.failAcquire(ctx, key, value, replies, t, err)
	}
	return grant, nil
}
