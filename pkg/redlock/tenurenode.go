package redlock

import (
	"context"
	"time"
)

// What a master keeps for a tenure (tenure.go), beside the lock key and
// its fence counter, and the calls that keep it. Every shape below is an
// alias of a plain struct, so memnode can mirror it without importing this
// package (as it mirrors ExtendItem and Proposal).

// TenureKeys names one lock's keys on a master: the lock key, its fence
// counter (FenceKey), its holder record (HolderKey) and its waiter marks
// (MarksKey).
type TenureKeys = struct{ Key, Fence, Holder, Marks string }

// HolderRecord is the holder record of a lock key: who holds the lock
// under the key's value. A sidecar that reserves a block of fences
// commits the block's top to the counter, so the counter no longer names
// the holder's fence: the record does. It is written in the same atomic
// step as every fence commit, and after a hand-over inside the sidecar
// (which makes no master round) by a later, conditional note.
type HolderRecord = struct {
	// Value is the key's value the record belongs to: a record whose
	// Value is not the key's current value is stale and ignored.
	Value string
	// Fence is the holder's fence (0 with fencing off).
	Fence int64
	// Grant and Owner name the holder: the random id of its grant and
	// its owner label (neither holds a newline, nor does Value or
	// Channel: the Redis node keeps the record as one string of lines).
	Grant, Owner string
	// Idle: nobody holds the lock; the sidecar keeps the key for a
	// linger and lets it go as soon as another sidecar wants it.
	Idle bool
	// IdleTTL is how long an idle holder lingers at most (on reads).
	IdleTTL time.Duration
	// Channel is where a refused acquire publishes "wanted" to the
	// holder's sidecar ("" for none).
	Channel string
	// Seq orders the notes of one value: a note with a Seq not above the
	// record's is stale and dropped. A fence commit writes 0.
	Seq int64
}

// WaiterMark is one sidecar's place in the line for a lock, on a master:
// the arrival of the caller at the head of its queue, in microseconds on
// that sidecar's clock (the same number goes to every master, so all of
// them order marks alike; ties are broken by Sidecar).
type WaiterMark = struct {
	Sidecar string
	Arrival int64
	// TTL is how long the mark lives unless renewed (when written), or
	// how long it has left (when read).
	TTL time.Duration
}

// TakeArgs is one master's part of a Locker.Take.
type TakeArgs = struct {
	Value string
	TTL   time.Duration
	// From: a key held by this value counts as free (a hand-over).
	From string
	// Fencing is FenceNone, FenceProposed or FenceAtOnce.
	Fencing int8
	// Proposal: with FenceProposed, the top of the proposed block,
	// committed only if the block's first fence is above the floor; with
	// FenceAtOnce, the fence asked to be above (the block then starts at
	// max(floor, Proposal)+1).
	Proposal int64
	// Block is how many fences the grant reserves (at least 1).
	Block     int64
	Retention time.Duration
	// Holder is the record to write with a committed fence (the master
	// fills in Value and Fence).
	Holder HolderRecord
	// Mark is the caller's place: Sidecar and Arrival decide the mark
	// rule (a free key goes to the oldest live mark); with TTL > 0 a
	// refusal also leaves or refreshes the mark and tells the holder.
	Mark WaiterMark
}

// Fencing modes of a take.
const (
	FenceNone     int8 = 0
	FenceProposed int8 = 1
	FenceAtOnce   int8 = 2
)

// TakeAnswer is one master's answer to a take.
type TakeAnswer = struct {
	Acquired  bool
	HolderTTL time.Duration // when refused: the holder's (or the older mark's) remaining ttl
	// Fence is the committed block's top when Committed, else the floor
	// read (0 when refused or without fencing).
	Fence     int64
	Committed bool
	Prev      int64 // the counter the committed top replaced (0: none)
	// Idle: refused by a holder that only lingers (HolderRecord.Idle);
	// it was asked to let go, within IdleTTL.
	Idle    bool
	IdleTTL time.Duration
	// ByMark: the key was free, but an older waiter's mark is live.
	ByMark bool
	// Oldest is the oldest live mark of another sidecar (Arrival 0:
	// none), with its remaining TTL.
	Oldest WaiterMark
}

// NoteAnswer is one master's answer to a holder note.
type NoteAnswer = struct {
	Written bool       // the key held the value and the note was not stale
	Oldest  WaiterMark // as in TakeAnswer
}

// HolderRead is one master's view of a lock key for inspection.
type HolderRead = struct {
	Value   string
	TTL     time.Duration
	Counter int64
	Record  HolderRecord // zero when none
}

// TenureNode is implemented by masters that keep holder records and
// waiter marks, so that a sidecar may reserve blocks of fences, hand a
// lock between its own callers without a round, linger, and order the
// waiters of several sidecars (tenure.go). Both shipped nodes do.
type TenureNode interface {
	OneRoundFencer
	MessageWatcher
	// TakeTenure takes keys.Key for a.Value as AcquireProposed (or
	// AcquireCommitted, or Acquire) would, reserving a block of fences,
	// under the mark rule: a free key goes to the oldest live mark, or to
	// a caller older than every live mark; a committed fence writes the
	// holder record in the same atomic step. A key held by another value
	// is refused; with a.Mark.TTL > 0 the refusal leaves the caller's
	// mark and publishes "wanted" on the holder record's channel.
	TakeTenure(ctx context.Context, keys TenureKeys, a TakeArgs) (TakeAnswer, error)
	// CommitTenure is CommitFence for a block: while keys.Key holds
	// value, it raises the counter to top and writes the holder record
	// (with the fence rec.Fence) in one atomic step.
	CommitTenure(ctx context.Context, keys TenureKeys, value string, top int64, rec HolderRecord, retention time.Duration) (bool, error)
	// NoteHolder writes the holder record while keys.Key holds rec.Value
	// and the record's Seq is below rec.Seq, announces it on the holder
	// record's channel (HolderChannel), and reads the marks.
	NoteHolder(ctx context.Context, keys TenureKeys, rec HolderRecord, self string, retention time.Duration) (NoteAnswer, error)
	// ReleaseTenure is Release that also drops the holder record, and
	// leaves (mark.TTL > 0) or removes the mark of mark.Sidecar; a
	// deleted key is also announced on the channel notify (unless "").
	ReleaseTenure(ctx context.Context, keys TenureKeys, value string, mark WaiterMark, notify string) (bool, error)
	// RemoveMark removes sidecar's mark.
	RemoveMark(ctx context.Context, keys TenureKeys, sidecar string) error
	// GetHolder reads the key, its counter and its holder record in one
	// atomic step.
	GetHolder(ctx context.Context, keys TenureKeys) (HolderRead, error)
}

// MessageWatcher is implemented by nodes that deliver the messages
// published on a channel (best-effort, as ReleaseWatcher).
type MessageWatcher interface {
	// WatchMessages calls notify (from any goroutine; it must not block)
	// with each message's payload, until cancel; cancel is idempotent.
	WatchMessages(channel string, notify func(payload string)) (cancel func())
}
