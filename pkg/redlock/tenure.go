package redlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Tenures: a sidecar's hold of one lock's keys, outliving its callers'
// grants. A caller of package lease gets a lease; the sidecar holds the
// keys under one value for as long as it keeps them (its tenure), and
// may pass the lock from one of its callers to the next without a round
// to the masters. Three things on the masters make that safe and fair:
//
//   - A block of fences. Take commits the TOP of a block of Block fences
//     F..F+Block-1 to the counter (on the majority, as any fence) and the
//     grant's fence is F; the sidecar gives F+1, F+2, ... to the callers it
//     hands the lock to later, with no round. Every later grant anywhere
//     reads, on a master of the intersection of majorities, a floor at
//     least the top, so its fence is above every fence of the block; and
//     a sidecar hands over only while its keys are valid (package lease).
//   - A holder record (HolderKey) names the holder's own fence, grant and
//     owner, since the counter names the block's top. It is written in
//     the same atomic step as every fence commit, and after a hand-over
//     inside the sidecar by a background note (NoteHolder); Inspect reads
//     it when it belongs to the key's current value.
//   - Waiter marks (MarksKey): a sidecar whose waiting caller is refused
//     leaves a mark, its caller's arrival in microseconds on its own clock,
//     and the script publishes "wanted" on the holder's channel (each
//     sidecar hears one channel of its own, named in its records). A free key
//     goes only to the oldest live mark (or a caller older than every live
//     mark), so callers of different sidecars take turns first come,
//     first served (within the sidecars' clock skew), and the holding
//     sidecar hands over inside its pod only to a caller that arrived
//     before every mark it knows of. Every master orders marks alike: the
//     same arrival and sidecar id go to all of them.
//
// A holder record can also say that nobody holds the lock: the sidecar
// lingers on the keys for a moment after its last caller let go, to grant
// the next local caller at once. A refused take of such a key tells the
// caller (HeldError.Idle) after asking the sidecar to let go.

// Suffixes of the keys beside a lock key; '#' cannot appear in a lock
// name, so none collides with a lock's key, nor with a derived key of a
// semaphore ("#<digits>") or a read/write lock ("#w", "#r<digits>", "#i").
const (
	holderKeySuffix = "#h"
	marksKeySuffix  = "#q"
)

// HolderKey is where masters keep key's holder record. It is also the
// channel on which a holder note is announced (HolderChannel).
func HolderKey(key string) string { return key + holderKeySuffix }

// HolderChannel is the channel on which masters announce a new holder
// note of key, so watchers read it again at once.
func HolderChannel(key string) string { return HolderKey(key) }

// MarksKey is where masters keep key's waiter marks.
func MarksKey(key string) string { return key + marksKeySuffix }

// TenureKeysOf names key's keys.
func TenureKeysOf(key string) TenureKeys {
	return TenureKeys{Key: key, Fence: FenceKey(key), Holder: HolderKey(key), Marks: MarksKey(key)}
}

// ErrTenureUnsupported means a master cannot keep holder records and
// marks (or the key is moving between quorum groups): acquire instead.
var ErrTenureUnsupported = errors.New("redlock: a master cannot keep holder records and waiter marks")

// TakeRequest asks Locker.Take for a lock's keys.
type TakeRequest struct {
	Key, Value string
	TTL        time.Duration
	// Floor: the first fence must be above it (a hand-over passes the
	// giver's block top).
	Floor int64
	// Block is how many fences to reserve (at least 1; ignored with
	// fencing off).
	Block int64
	// From: a key held by this value counts as free (a hand-over).
	From string
	// Holder names the taker in the holder record: Grant, Owner and the
	// Channel its sidecar hears "wanted" on.
	Holder HolderRecord
	// Mark is the caller's place (Sidecar, Arrival in µs); with TTL > 0 a
	// refusal leaves or refreshes it.
	Mark WaiterMark
	// KeepOnIdle: a refusal by a holder that only lingers leaves the key
	// where this value took it (a minority), instead of releasing it: the
	// caller tries again with the same value once the holder has let go,
	// or releases it.
	KeepOnIdle bool
}

// Tenure is a granted take.
type Tenure struct {
	// ValidUntil is until when a majority holds the key, as Grant's.
	ValidUntil time.Time
	// First and Top are the reserved block of fences (0 with fencing
	// off): the grant's fence is First.
	First, Top int64
	// Oldest is the oldest live mark of another sidecar any master
	// reported (Arrival 0: none), with its remaining TTL there.
	Oldest WaiterMark
	// Rounds is how many rounds to the masters the take made: 1, or 2
	// when the fence proposal was refused and the commit round followed.
	Rounds int
}

// Take takes req.Key for req.Value, as Acquire does (or, with req.From,
// in place of the value From: a hand-over, never free in between),
// reserving a block of req.Block fences, under the mark rule.
// On failure it has released the key everywhere (its marks stay) and
// returns what Acquire would: a *HeldError (which says whether the holder
// only lingers, or an older waiter's mark refused it), an error matching
// ErrNoQuorum, or an *OverloadedError. ErrTenureUnsupported when a master
// cannot do it.
func (l *Locker) Take(ctx context.Context, req TakeRequest) (Tenure, error) {
	if !l.allTenureNodes() {
		return Tenure{}, ErrTenureUnsupported
	}
	block := max(req.Block, 1)
	start := l.now()
	keys := TenureKeysOf(req.Key)
	args := TakeArgs{Value: req.Value, TTL: req.TTL, From: req.From, Block: block, Retention: l.fenceRetention, Holder: req.Holder, Mark: req.Mark}
	switch {
	case !l.fencing:
		args.Fencing, args.Block = FenceNone, 1
	case len(l.nodes) == 1:
		args.Fencing, args.Proposal = FenceAtOnce, req.Floor
	default:
		args.Fencing = FenceProposed
		args.Proposal = max(start.Add(proposalLead).UnixMicro(), req.Floor+1) + block - 1
	}
	answers := make([]TakeAnswer, len(l.nodes))
	replies := fanOutIndexed(ctx, l, func(ctx context.Context, i int, n Node) reply {
		a, err := n.(TenureNode).TakeTenure(ctx, keys, args)
		answers[i] = a
		return reply{ok: a.Acquired, held: err == nil && !a.Acquired, ttl: a.HolderTTL, fence: a.Fence, committed: a.Committed, prev: a.Prev, err: err}
	})
	t := tally(replies)
	if _, err := l.judge(t, start, req.TTL); err != nil {
		return Tenure{}, l.failTake(ctx, req, replies, answers, t, err)
	}
	got := Tenure{Oldest: oldestMark(answers), Rounds: 1}
	switch {
	case args.Fencing == FenceNone:
	case args.Fencing == FenceProposed && committedBy(replies) < l.quorum:
		// The commit round, for a block above every floor read and above
		// the proposal (so above the counters that committed it).
		got.First = max(maxFence(replies), req.Floor) + 1
		got.Top = got.First + block - 1
		rec := req.Holder
		rec.Fence = got.First
		got.Rounds++
		if _, err := l.commitTenure(ctx, keys, req.Value, got.Top, rec, start, req.TTL); err != nil {
			_ = l.withdraw(ctx, req.Key, req.Value, replies)
			return Tenure{}, err
		}
	case args.Fencing == FenceProposed:
		got.First, got.Top = args.Proposal-block+1, args.Proposal
	default: // FenceAtOnce: the master chose the block
		got.Top = maxFence(replies)
		got.First = got.Top - block + 1
	}
	grant, err := l.judge(tally(replies), start, req.TTL)
	if err != nil {
		_ = l.withdraw(ctx, req.Key, req.Value, replies)
		return Tenure{}, err
	}
	got.ValidUntil = grant.ValidUntil
	return got, nil
}

// failTake is failAcquire for a take: the HeldError also says whether an
// idle holder was asked to let go, or an older waiter's mark refused it.
func (l *Locker) failTake(ctx context.Context, req TakeRequest, replies []reply, answers []TakeAnswer, t counts, err error) error {
	idle := false
	for i, a := range answers {
		idle = idle || replies[i].held && a.Idle
	}
	if idle && req.KeepOnIdle && t.ok+t.held >= l.quorum {
		err = &HeldError{RetryAfter: l.retryAfter(replies, t.held)}
	} else {
		err = l.failAcquire(ctx, req.Key, req.Value, replies, t, err)
	}
	var held *HeldError
	if !errors.As(err, &held) {
		return err
	}
	for i, a := range answers {
		if !replies[i].held {
			continue
		}
		if a.Idle {
			held.Idle = true
			held.IdleOn++
		}
		held.IdleFor = max(held.IdleFor, a.IdleTTL)
		held.ByMark = held.ByMark || a.ByMark
	}
	held.Oldest = oldestMark(answers)
	return held
}

// commitTenure is commitFence for a block: the counter goes to top, and
// the holder record is written with it.
func (l *Locker) commitTenure(ctx context.Context, keys TenureKeys, value string, top int64, rec HolderRecord, start time.Time, ttl time.Duration) (Grant, error) {
	commits := fanOut(ctx, l, func(ctx context.Context, n Node) reply {
		ok, err := n.(TenureNode).CommitTenure(ctx, keys, value, top, rec, l.fenceRetention)
		return reply{ok: ok, held: err == nil && !ok, err: err}
	})
	grant, err := l.judge(tally(commits), start, ttl)
	if err != nil {
		return Grant{}, fmt.Errorf("committing the fence: %w", err)
	}
	return grant, nil
}

// oldestMark is the oldest mark among the answers (Arrival 0: none).
func oldestMark(answers []TakeAnswer) WaiterMark {
	var best WaiterMark
	for _, a := range answers {
		best = olderMark(best, a.Oldest)
	}
	return best
}

// olderMark is the older of two marks, a zero one being none.
func olderMark(a, b WaiterMark) WaiterMark {
	switch {
	case b.Arrival == 0:
		return a
	case a.Arrival == 0, b.Arrival < a.Arrival, b.Arrival == a.Arrival && b.Sidecar < a.Sidecar:
		return b
	}
	return a
}

// NoteHolder writes key's holder record on every master where key still
// holds rec.Value (and no later note of it landed), best-effort, and
// returns the oldest live mark of a sidecar other than self that any
// master reported. It fails only when fewer than a majority wrote it.
func (l *Locker) NoteHolder(ctx context.Context, key string, rec HolderRecord, self string) (WaiterMark, error) {
	if !l.allTenureNodes() {
		return WaiterMark{}, ErrTenureUnsupported
	}
	keys := TenureKeysOf(key)
	var mu sync.Mutex
	var oldest WaiterMark
	replies := fanOut(ctx, l, func(ctx context.Context, n Node) reply {
		a, err := n.(TenureNode).NoteHolder(ctx, keys, rec, self, l.fenceRetention)
		mu.Lock()
		oldest = olderMark(oldest, a.Oldest)
		mu.Unlock()
		return reply{ok: a.Written, err: err}
	})
	if t := tally(replies); t.ok < l.quorum {
		return oldest, fmt.Errorf("holder note: %w", l.noQuorum("wrote", replies, t))
	}
	return oldest, nil
}

// ReleaseTenure is Release that also drops the holder record and, in the
// same step, leaves mark (TTL > 0: this sidecar's next caller keeps its
// place in line) or removes mark.Sidecar's mark. A deleted key is also
// announced on the channel notify (unless ""), where the sidecar that
// asked for it through a "wanted" message (Message.ReplyTo) hears it. Like
// Release it runs whole whatever ctx does.
func (l *Locker) ReleaseTenure(ctx context.Context, key, value string, mark WaiterMark, notify string) error {
	if !l.allTenureNodes() {
		return l.Release(ctx, key, value)
	}
	keys := TenureKeysOf(key)
	return l.releaseEach(ctx, func(ctx context.Context, _ int, n Node) (bool, error) {
		return n.(TenureNode).ReleaseTenure(ctx, keys, value, mark, notify)
	})
}

// RemoveMark removes sidecar's mark on key everywhere, best-effort: one
// that is missed expires with its TTL.
func (l *Locker) RemoveMark(ctx context.Context, key, sidecar string) error {
	if !l.allTenureNodes() {
		return nil
	}
	keys := TenureKeysOf(key)
	return l.releaseEach(ctx, func(ctx context.Context, _ int, n Node) (bool, error) {
		return true, n.(TenureNode).RemoveMark(ctx, keys, sidecar)
	})
}

// MessageKind tells the messages on a sidecar's channel apart.
type MessageKind byte

// Kinds of message.
const (
	// MessageWanted: a caller of another sidecar was refused Key; Mark
	// says since when it waits (Sidecar unknown), ReplyTo where that
	// sidecar hears a release meant for it.
	MessageWanted MessageKind = 'w'
	// MessageReleased: Key, which this sidecar asked for, was released.
	MessageReleased MessageKind = 'r'
)

// Message is one message on a sidecar's channel (TakeRequest's
// Holder.Channel): published by the masters' scripts.
type Message struct {
	Kind    MessageKind
	Key     string
	Mark    WaiterMark
	ReplyTo string
}

// WatchChannel calls notify (which must not block) with every message
// published on a sidecar's channel by any master, until cancel. Each
// master publishes its own, so one event may arrive once per master.
func (l *Locker) WatchChannel(channel string, notify func(Message)) (cancel func()) {
	var cancels []func()
	for _, n := range l.nodes {
		if w, ok := n.(MessageWatcher); ok {
			cancels = append(cancels, w.WatchMessages(channel, func(payload string) {
				if m, ok := ParseMessage(payload); ok {
					notify(m)
				}
			}))
		}
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			for _, c := range cancels {
				c()
			}
		})
	}
}

// ParseMessage reads a message the scripts publish on a sidecar's
// channel: "w <arrival µs> <mark ttl ms> <reply channel> <key>" or
// "r <key>" (keys and channels hold no spaces).
func ParseMessage(payload string) (Message, bool) {
	kind, rest, ok := strings.Cut(payload, " ")
	switch {
	case !ok:
		return Message{}, false
	case kind == "r" && rest != "":
		return Message{Kind: MessageReleased, Key: rest}, true
	case kind != "w":
		return Message{}, false
	}
	f := strings.SplitN(rest, " ", 4)
	if len(f) != 4 || f[3] == "" {
		return Message{}, false
	}
	arrival, err1 := strconv.ParseInt(f[0], 10, 64)
	ms, err2 := strconv.ParseInt(f[1], 10, 64)
	if err1 != nil || err2 != nil {
		return Message{}, false
	}
	return Message{Kind: MessageWanted, Key: f[3], ReplyTo: f[2],
		Mark: WaiterMark{Arrival: arrival, TTL: time.Duration(ms) * time.Millisecond}}, true
}

func (l *Locker) allTenureNodes() bool {
	for _, n := range l.nodes {
		if _, ok := n.(TenureNode); !ok {
			return false
		}
	}
	return true
}

// inspectHolders is Inspect over masters that keep holder records: the
// holder's fence, grant and owner come from the records that belong to
// the majority's value (the newest note among them), and only without
// any such record from the counter, as before blocks (a key an older
// sidecar took).
func (l *Locker) inspectHolders(ctx context.Context, key string) (Holder, error) {
	start := l.now()
	keys := TenureKeysOf(key)
	reads := make([]HolderRead, len(l.nodes))
	replies := fanOutIndexed(ctx, l, func(ctx context.Context, i int, n Node) reply {
		r, err := n.(TenureNode).GetHolder(ctx, keys)
		reads[i] = r
		return reply{ok: err == nil, ttl: r.TTL, err: err, value: r.Value, fence: r.Counter}
	})
	h, err := l.judgeInspect(replies, start)
	if err != nil || !h.Held {
		return h, err
	}
	var rec HolderRecord
	found := false
	for i, r := range reads {
		if replies[i].err == nil && r.Record.Value == h.Value && (!found || r.Record.Seq > rec.Seq) {
			rec, found = r.Record, true
		}
	}
	if found {
		h.Fence, h.Recorded, h.Grant, h.Owner, h.Idle = rec.Fence, true, rec.Grant, rec.Owner, rec.Idle
	}
	return h, nil
}
