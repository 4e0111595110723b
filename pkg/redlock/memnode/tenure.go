package memnode

import (
	"context"
	"strconv"
	"time"
)

// Holder records and waiter marks (redlock's tenure.go), kept as the
// Redis node keeps them: each in an entry of its own key, encoded in the
// value (as member records are), so expiry, sweeping, Restart and Close
// treat them like keys.

// Mirrors of redlock's types (memnode does not import redlock).
type (
	// TenureKeys mirrors redlock.TenureKeys.
	TenureKeys = struct{ Key, Fence, Holder, Marks string }
	// HolderRecord mirrors redlock.HolderRecord.
	HolderRecord = struct {
		Value        string
		Fence        int64
		Grant, Owner string
		Idle         bool
		IdleTTL      time.Duration
		Channel      string
		Seq          int64
	}
	// WaiterMark mirrors redlock.WaiterMark.
	WaiterMark = struct {
		Sidecar string
		Arrival int64
		TTL     time.Duration
	}
	// TakeArgs mirrors redlock.TakeArgs.
	TakeArgs = struct {
		Value     string
		TTL       time.Duration
		From      string
		Fencing   int8
		Proposal  int64
		Block     int64
		Retention time.Duration
		Holder    HolderRecord
		Mark      WaiterMark
	}
	// TakeAnswer mirrors redlock.TakeAnswer.
	TakeAnswer = struct {
		Acquired  bool
		HolderTTL time.Duration
		Fence     int64
		Committed bool
		Prev      int64
		Idle      bool
		IdleTTL   time.Duration
		ByMark    bool
		Oldest    WaiterMark
	}
	// NoteAnswer mirrors redlock.NoteAnswer.
	NoteAnswer = struct {
		Written bool
		Oldest  WaiterMark
	}
	// HolderRead mirrors redlock.HolderRead.
	HolderRead = struct {
		Value   string
		TTL     time.Duration
		Counter int64
		Record  HolderRecord
	}
)

// Fencing modes, as redlock numbers them.
const (
	fenceNone   int8 = 0
	fenceAtOnce int8 = 2
)

const (
	recordMagic = "\x00sidelock-holder\x00"
	marksMagic  = "\x00sidelock-marks\x00"
)

// storedRecord is a holder record as stored: an idle one lingers until a
// time on the node's clock.
type storedRecord struct {
	HolderRecord
	IdleUntil time.Time
}

// storedMark is one mark as stored.
type storedMark struct {
	Arrival   int64
	ExpiresAt time.Time
}

// TakeTenure implements redlock.TenureNode.
func (n *Node) TakeTenure(ctx context.Context, keys TenureKeys, a TakeArgs) (TakeAnswer, error) {
	if err := n.enter(ctx, "take"); err != nil {
		return TakeAnswer{}, err
	}
	n.mu.Lock()
	ans, calls := n.takeLocked(keys, a, n.now())
	n.mu.Unlock()
	for _, f := range calls {
		f()
	}
	return ans, nil
}

// takeLocked is take_tenure.lua's step; it returns the publications to
// make once n.mu is released. The caller holds n.mu.
func (n *Node) takeLocked(keys TenureKeys, a TakeArgs, now time.Time) (TakeAnswer, []func()) {
	held, ok := n.lookup(keys.Key, now)
	cur := ""
	if ok {
		cur = held.value
	}
	if a.From != "" && cur == a.From {
		cur = "" // a hand-over: the giver's key counts as free
	}
	marks := n.marks(keys.Marks, now)
	oldest := oldestMark(marks, a.Mark.Sidecar, now)
	leaveMark := func() {
		if a.Mark.TTL > 0 {
			n.putMark(keys.Marks, marks, a.Mark, now)
		}
	}
	if cur != "" && cur != a.Value {
		ans := TakeAnswer{HolderTTL: held.expiresAt.Sub(now), Oldest: oldest}
		rec, found := n.record(keys.Holder, cur, now)
		if found && rec.Idle && now.Before(rec.IdleUntil) {
			ans.Idle, ans.IdleTTL = true, rec.IdleUntil.Sub(now)
		}
		leaveMark()
		var calls []func()
		if found && rec.Channel != "" && (a.Mark.TTL > 0 || ans.Idle) {
			calls = n.publishLocked(rec.Channel, wantedPayload(keys.Key, a.Mark, a.Holder.Channel))
		}
		return ans, calls
	}
	if cur == "" && oldest.Arrival != 0 && olderThan(oldest, a.Mark) {
		leaveMark()
		return TakeAnswer{HolderTTL: oldest.TTL, ByMark: true, Oldest: oldest}, nil
	}
	n.store(keys.Key, a.Value, a.TTL, now)
	delete(marks, a.Mark.Sidecar) // its place in line is taken
	n.storeMarks(keys.Marks, marks, now)
	ans := TakeAnswer{Acquired: true, Oldest: oldest}
	if a.Fencing == fenceNone {
		n.putRecord(keys.Holder, a.Holder, a.Value, 0, a.Retention, now)
		return ans, nil
	}
	counter := n.counter(keys.Fence, now)
	floor := max(counter, now.UnixMicro())
	block := max(a.Block, 1)
	first := a.Proposal - block + 1
	switch {
	case a.Fencing == fenceAtOnce:
		first = max(floor, a.Proposal) + 1
	case first <= floor:
		ans.Fence = floor
		return ans, nil
	}
	top := first + block - 1
	n.store(keys.Fence, strconv.FormatInt(top, 10), a.Retention, now)
	n.putRecord(keys.Holder, a.Holder, a.Value, first, a.Retention, now)
	ans.Fence, ans.Committed, ans.Prev = top, true, counter
	return ans, nil
}

// wantedPayload is what take_tenure.lua publishes: "w <arrival> <mark
// ttl ms> <reply channel> <key>".
func wantedPayload(key string, m WaiterMark, replyTo string) string {
	ms := int64(0)
	if m.TTL > 0 {
		ms = int64((m.TTL + time.Millisecond - 1) / time.Millisecond)
	}
	return "w " + strconv.FormatInt(m.Arrival, 10) + " " + strconv.FormatInt(ms, 10) + " " + replyTo + " " + key
}

// olderThan tells whether mark a is older than b (ties by sidecar).
func olderThan(a, b WaiterMark) bool {
	return a.Arrival < b.Arrival || a.Arrival == b.Arrival && a.Sidecar < b.Sidecar
}

// CommitTenure implements redlock.TenureNode.
func (n *Node) CommitTenure(ctx context.Context, keys TenureKeys, value string, top int64, rec HolderRecord, retention time.Duration) (bool, error) {
	if err := n.enter(ctx, "commit fence"); err != nil {
		return false, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	now := n.now()
	if held, ok := n.lookup(keys.Key, now); !ok || held.value != value {
		return false, nil
	}
	n.store(keys.Fence, strconv.FormatInt(max(top, n.counter(keys.Fence, now)), 10), retention, now)
	n.putRecord(keys.Holder, rec, value, rec.Fence, retention, now)
	return true, nil
}

// NoteHolder implements redlock.TenureNode.
func (n *Node) NoteHolder(ctx context.Context, keys TenureKeys, rec HolderRecord, self string, retention time.Duration) (NoteAnswer, error) {
	if err := n.enter(ctx, "note holder"); err != nil {
		return NoteAnswer{}, err
	}
	n.mu.Lock()
	now := n.now()
	ans := NoteAnswer{Oldest: oldestMark(n.marks(keys.Marks, now), self, now)}
	held, ok := n.lookup(keys.Key, now)
	if prev, found := n.record(keys.Holder, rec.Value, now); !ok || held.value != rec.Value || found && prev.Seq >= rec.Seq {
		n.mu.Unlock()
		return ans, nil
	}
	n.storeRecord(keys.Holder, rec, retention, now)
	calls := n.publishLocked(keys.Holder, "holder")
	n.mu.Unlock()
	for _, f := range calls {
		f()
	}
	ans.Written = true
	return ans, nil
}

// ReleaseTenure implements redlock.TenureNode.
func (n *Node) ReleaseTenure(ctx context.Context, keys TenureKeys, value string, mark WaiterMark, notify string) (bool, error) {
	if err := n.enter(ctx, "release"); err != nil {
		return false, err
	}
	n.mu.Lock()
	now := n.now()
	marks := n.marks(keys.Marks, now)
	if mark.TTL > 0 {
		n.putMark(keys.Marks, marks, mark, now)
	} else {
		delete(marks, mark.Sidecar)
		n.storeMarks(keys.Marks, marks, now)
	}
	released, calls := n.releaseLocked(keys.Key, value, now, func(now time.Time) {
		if _, ok := n.record(keys.Holder, value, now); ok {
			delete(n.entries, keys.Holder)
		}
	})
	if released && notify != "" {
		calls = append(calls, n.publishLocked(notify, "r "+keys.Key)...)
	}
	n.mu.Unlock()
	for _, f := range calls {
		f()
	}
	return released, nil
}

// RemoveMark implements redlock.TenureNode.
func (n *Node) RemoveMark(ctx context.Context, keys TenureKeys, sidecar string) error {
	if err := n.enter(ctx, "remove mark"); err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	now := n.now()
	marks := n.marks(keys.Marks, now)
	delete(marks, sidecar)
	n.storeMarks(keys.Marks, marks, now)
	return nil
}

// GetHolder implements redlock.TenureNode.
func (n *Node) GetHolder(ctx context.Context, keys TenureKeys) (HolderRead, error) {
	if err := n.enter(ctx, "get"); err != nil {
		return HolderRead{}, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	now := n.now()
	r := HolderRead{Counter: n.counter(keys.Fence, now)}
	if held, ok := n.lookup(keys.Key, now); ok {
		r.Value, r.TTL = held.value, held.expiresAt.Sub(now)
	}
	if e, ok := n.lookup(keys.Holder, now); ok {
		if rec, ok := decodeRecord(e); ok {
			r.Record = rec.HolderRecord
			if rec.Idle {
				r.Record.IdleTTL = max(0, rec.IdleUntil.Sub(now))
			}
		}
	}
	return r, nil
}

// WatchMessages implements redlock.MessageWatcher: notify runs on the
// publishing goroutine before the publishing call returns.
func (n *Node) WatchMessages(channel string, notify func(payload string)) (cancel func()) {
	return n.watchChannel(channel, &watcher{message: notify})
}

// record reads the holder record at key when it belongs to value. The
// caller holds n.mu.
func (n *Node) record(key, value string, now time.Time) (storedRecord, bool) {
	e, ok := n.lookup(key, now)
	if !ok {
		return storedRecord{}, false
	}
	rec, ok := decodeRecord(e)
	return rec, ok && rec.Value == value
}

// putRecord writes the record of a fence commit: held, by value, with
// fence, sequence 0. The caller holds n.mu.
func (n *Node) putRecord(key string, rec HolderRecord, value string, fence int64, retention time.Duration, now time.Time) {
	rec.Value, rec.Fence, rec.Idle, rec.IdleTTL, rec.Seq = value, fence, false, 0, 0
	n.storeRecord(key, rec, retention, now)
}

// storeRecord writes rec (idle for rec.IdleTTL when Idle). The caller
// holds n.mu.
func (n *Node) storeRecord(key string, rec HolderRecord, retention time.Duration, now time.Time) {
	s := storedRecord{HolderRecord: rec}
	if rec.Idle {
		s.IdleUntil = now.Add(rec.IdleTTL)
	}
	s.IdleTTL = 0
	n.storeData(key, recordMagic, s, retention, now)
}

func decodeRecord(e entry) (storedRecord, bool) {
	rec, ok := e.data.(storedRecord)
	return rec, ok
}

// marks reads the marks at key, without the expired ones: a copy the
// caller may change and store. The caller holds n.mu.
func (n *Node) marks(key string, now time.Time) map[string]storedMark {
	marks := map[string]storedMark{}
	if e, ok := n.lookup(key, now); ok {
		if stored, ok := e.data.(map[string]storedMark); ok {
			for sc, m := range stored {
				if now.Before(m.ExpiresAt) {
					marks[sc] = m
				}
			}
		}
	}
	return marks
}

// putMark leaves or refreshes mark (for mark.TTL, rounded up to whole
// milliseconds as a key's). The caller holds n.mu.
func (n *Node) putMark(key string, marks map[string]storedMark, mark WaiterMark, now time.Time) {
	ms := max((mark.TTL+time.Millisecond-1)/time.Millisecond, 1)
	marks[mark.Sidecar] = storedMark{Arrival: mark.Arrival, ExpiresAt: now.Add(ms * time.Millisecond)}
	n.storeMarks(key, marks, now)
}

// storeMarks writes marks, expiring with the last of them. The caller
// holds n.mu.
func (n *Node) storeMarks(key string, marks map[string]storedMark, now time.Time) {
	if len(marks) == 0 {
		delete(n.entries, key)
		return
	}
	var last time.Time
	for _, m := range marks {
		if m.ExpiresAt.After(last) {
			last = m.ExpiresAt
		}
	}
	n.storeData(key, marksMagic, marks, last.Sub(now), now)
}

// oldestMark is the oldest live mark of a sidecar other than self (zero:
// none), with its remaining ttl.
func oldestMark(marks map[string]storedMark, self string, now time.Time) WaiterMark {
	var best WaiterMark
	for sc, m := range marks {
		cand := WaiterMark{Sidecar: sc, Arrival: m.Arrival, TTL: m.ExpiresAt.Sub(now)}
		if sc != self && (best.Arrival == 0 || olderThan(cand, best)) {
			best = cand
		}
	}
	return best
}
