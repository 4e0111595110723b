package lease

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/sidelock/sidelock/pkg/redlock"
)

// A tenure is this sidecar's hold of one resource's keys on the masters:
// the key, the value it holds, the key ttl and until when a majority holds
// the keys (renewals), the block of fences it reserved, and what it knows
// of other sidecars' waiters. A lease is one caller's grant on top of it
// (lease.go). For a permit, a reader or a writer the two live and die
// together; a plain lock's tenure may outlive its leases:
//
//   - Hand-over inside the pod. When a lease of a plain lock ends by a
//     release (or a lapse or max_hold, whose promises have passed) while a
//     caller of this sidecar waits, the next fence of the block is that
//     caller's: a new lease (a new token, a higher fence) on the same keys,
//     with no round to the masters, granted only while the keys are valid.
//     The block used up, the lock is handed over in one round with a new
//     block (redlock.Locker.Take with From).
//   - Waiters of other sidecars. A caller of another sidecar that waits
//     for the lock leaves a mark on the masters, and the holder hears of it
//     ("wanted" on this sidecar's channel, or a take's or a note's answer):
//     a lease ending hands over inside the pod only to a caller that
//     arrived before every mark known; else the keys are released, in the
//     same step leaving a mark for this sidecar's next caller, and the
//     oldest mark's sidecar takes the lock.
//   - Linger. When the last lease ends and nobody waits, the keys are kept
//     for Config.Linger: a caller of this sidecar that asks meanwhile is
//     granted at once, with no round. Only a lock its callers keep taking
//     lingers (several callers took the tenure in turns, or this sidecar let
//     go of it within hotWindow before taking it): a lock taken once is
//     released at once, sparing the masters the linger's note. The holder record says the sidecar
//     only lingers, so another sidecar's refused take asks it to let go
//     ("wanted") and tries once more when it has (queue.go); the end of the
//     linger lets go too.
//
// The argument that this keeps exclusion and fence order is in
// docs/fencing.md (tenures): the block's top is committed on a majority
// before the first grant, every lease is granted only while the keys are
// valid, and leases of one tenure never overlap.

// tenureState is where a tenure is in its life.
type tenureState int

const (
	tenureHolding   tenureState = iota // a lease holds it, or is being handed it in a round
	tenureLingering                    // nobody holds it; a caller of this sidecar may take it at once
	tenureGone                         // let go (or left to lapse): its keys are not this sidecar's to use
)

type tenure struct {
	m     *Manager
	res   string // what it holds, and its key in the Manager's maps (target.resource)
	queue string // the queue of the callers waiting for it (target.queue)
	key   string
	value string // on the masters: the first lease's "<grant id>:<owner>"
	// plain: a plain lock's (not a lock set's, nor taken through both
	// quorum groups of a migration): it may outlive its lease.
	plain bool

	// Guarded by the Manager's lock.
	keys      keyState
	renewSlot int64         // its slot in the renewal grid (renewer.go); -1 once it is not renewed
	renewing  chan struct{} // a batch renewal in flight, closed when its answers are applied
	state     tenureState
	lease     *lease // the lease it holds for (nil while lingering, or letting go)
	// next..top are the fences of its block not yet given (next > top:
	// none left).
	next, top int64
	// promised is the latest valid_until published by any of its leases:
	// a key ttl cut never lets the keys end before it.
	promised time.Time
	// lost: a renewal found the keys gone (or another value on a
	// majority): nothing more is granted on them.
	lost bool
	// hot: this sidecar let go of the resource's keys shortly before it
	// took them (hotWindow); granted counts the leases granted on them.
	// Only a hot tenure, or one several callers took in turns, lingers.
	hot     bool
	granted int
	linger  *time.Timer
	// usesChannel: the tenure counts as a use of the sidecar's channel
	// (where "wanted" comes) until it is gone.
	usesChannel bool
	// remote is the oldest waiter of another sidecar it knows of (Arrival
	// 0: none), until remoteUntil; replyTo is where the last sidecar that
	// asked for it hears the release meant for it.
	remote      redlock.WaiterMark
	remoteUntil time.Time
	replyTo     string
	notes       noteState
}

// keyState is what the masters hold for a tenure, as far as its rounds
// tell: the key ttl put on them and until when a majority holds the keys.
type keyState struct {
	// ttl is the key ttl put on the masters. It only ever falls during a
	// tenure (see cutTTLLocked): a write with a shorter ttl still in
	// flight could otherwise land last and end the keys before a longer
	// validity computed from a later round.
	ttl time.Duration
	// wantTTL is the key ttl its lease's ttl asks for, when an earlier
	// promise keeps ttl above it for now.
	wantTTL time.Duration
	// validUntil is until when a majority holds the keys, drift taken
	// off: the renewals' grants, never later than a ttl cut allows.
	validUntil time.Time
	// The last cut of ttl: when, and the validity a write sent from then
	// on may still leave; rounds that began before it are held to it.
	cutAt, cutCap time.Time
}

// noteState is the holder note of a tenure (redlock.Locker.NoteHolder):
// written in the background after the holder changed without a round,
// one at a time, coalesced. Guarded by the Manager's lock.
type noteState struct {
	seq      int64 // the last note's sequence number (0: the take's record)
	dirty    bool  // the record on the masters is out of date
	writing  bool  // a writer goroutine runs
	lastSent time.Time
	// written is when the record was last written, by the take or a
	// note: it is rewritten well within its retention (recordRefresh).
	written time.Time
}

// newTenure is the tenure l's grant takes: l's key, value and ttl.
func newTenure(m *Manager, l *lease, plain bool) *tenure {
	keyTTL := m.keyTTL(l.pub.ttl)
	return &tenure{
		m: m, res: l.res, queue: l.target().queue(), key: m.cfg.KeyPrefix + l.res, value: masterValue(l.grantID, l.owner), plain: plain,
		keys:  keyState{ttl: keyTTL, wantTTL: keyTTL},
		notes: noteState{written: time.Now()}, // by the take about to be sent
	}
}

// validLocked tells whether the keys are valid at now: only then may a
// lease be granted on them without a round. The caller holds m.mu.
func (t *tenure) validLocked(now time.Time) bool { return now.Before(t.keys.validUntil) }

// grantLocked gives lease l the next fence of the block and makes it the
// tenure's lease. The caller holds m.mu and checked validLocked and
// canGrantLocked.
func (t *tenure) grantLocked(l *lease) {
	l.t, l.fence = t, t.next
	t.next++
	t.granted++
	t.lease, t.state = l, tenureHolding
	if t.linger != nil {
		t.linger.Stop()
		t.linger = nil
	}
	if l.pub.ttl != 0 {
		t.cutTTLLocked(t.m.keyTTL(l.pub.ttl))
	}
	t.noteLocked()
}

// canGrantLocked tells whether a lease may be granted on the tenure at
// now without a round: a plain lock's, with a fence of its block left and
// its keys valid (a sidecar paused past its keys' validity grants
// nothing). The caller holds m.mu.
func (t *tenure) canGrantLocked(now time.Time) bool {
	return t.plain && t.state != tenureGone && !t.lost && t.renewSlot != -1 && t.next <= t.top && t.validLocked(now)
}

// cutTTLLocked lowers the key ttl towards want, the one a shorter caller
// ttl asks for, but not so far that the keys could end before the latest
// promise: until that has passed, the cut stops short (and is tried again
// after each renewal). A write with the shorter ttl may land from now on,
// after any write in flight, so the keys may end at now + ttl - drift:
// the validity is cut to that at once, and rounds that began earlier are
// held to it. The caller holds m.mu.
func (t *tenure) cutTTLLocked(want time.Duration) {
	now := time.Now()
	keyTTL := max(want, t.promised.Sub(now)+t.m.locker.Drift(t.keys.ttl))
	t.keys.wantTTL = want
	if keyTTL >= t.keys.ttl {
		return
	}
	t.keys.ttl = keyTTL
	t.keys.cutAt, t.keys.cutCap = now, now.Add(keyTTL-t.m.locker.Drift(keyTTL))
	t.keys.validUntil = earlier(t.keys.validUntil, t.keys.cutCap)
}

// learnLocked records a waiter of another sidecar: the oldest known wins,
// and a mark is known for as long as it lives. The caller holds m.mu.
func (t *tenure) learnLocked(mark redlock.WaiterMark, replyTo string, now time.Time) {
	if replyTo != "" {
		t.replyTo = replyTo // the release tells the latest sidecar that asked
	}
	if mark.Arrival == 0 || mark.TTL <= 0 || !t.m.cfg.waiterMarks() {
		return
	}
	if t.remote.Arrival != 0 && now.Before(t.remoteUntil) && !olderThan(mark, t.remote) {
		if mark.Arrival == t.remote.Arrival {
			t.remoteUntil = later(t.remoteUntil, now.Add(mark.TTL))
		}
		return
	}
	t.remote, t.remoteUntil = mark, now.Add(mark.TTL)
}

// remoteBeforeLocked tells whether a waiter of another sidecar that the
// tenure knows of arrived before arrival (µs): then it goes first. The
// caller holds m.mu.
func (t *tenure) remoteBeforeLocked(arrival int64, now time.Time) bool {
	return t.remoteKnownLocked(now) && olderThan(t.remote, redlock.WaiterMark{Sidecar: t.m.id, Arrival: arrival})
}

// remoteKnownLocked tells whether the tenure knows of a waiter of another
// sidecar. The caller holds m.mu.
func (t *tenure) remoteKnownLocked(now time.Time) bool {
	return t.remote.Arrival != 0 && now.Before(t.remoteUntil)
}

// olderThan tells whether mark a is older than b (ties by sidecar id, an
// unknown one first: the masters break them alike).
func olderThan(a, b redlock.WaiterMark) bool {
	return a.Arrival < b.Arrival || a.Arrival == b.Arrival && a.Sidecar < b.Sidecar
}

// noteLocked has the holder record brought up to date in the background.
// The caller holds m.mu.
func (t *tenure) noteLocked() {
	if !t.plain || t.state == tenureGone {
		return
	}
	t.notes.dirty = true
	if t.notes.writing {
		return
	}
	t.notes.writing = true
	t.m.goLocked(t.writeNotes)
}

// writeNotes writes holder notes until the record is up to date, one at a
// time (a note cut short by its node timeout may still land after a later
// one: the record's sequence number drops it then). A note's answer tells
// of other sidecars' waiters too.
func (t *tenure) writeNotes() {
	for {
		m := t.m
		m.mu.Lock()
		if !t.notes.dirty || t.state == tenureGone {
			t.notes.writing = false
			m.mu.Unlock()
			return
		}
		if wait := time.Until(t.notes.lastSent.Add(noteSpacing)); wait > 0 {
			// Hand-overs or re-takes of a lingering lock in a row: a note
			// per spacing, not per change. A linger is said idle at once
			// when no note went in the spacing before it (a lease held
			// longer than that, or taken in a round), else at its end.
			m.mu.Unlock()
			time.Sleep(wait)
			continue
		}
		t.notes.dirty = false
		t.notes.seq++
		rec := t.recordLocked()
		t.notes.lastSent = time.Now()
		t.notes.written = t.notes.lastSent
		m.mu.Unlock()
		oldest, _ := m.locker.NoteHolder(context.Background(), t.key, rec, m.id)
		m.mu.Lock()
		now := time.Now()
		t.learnLocked(oldest, "", now)
		if t.state == tenureLingering && t.remoteKnownLocked(now) {
			t.letGoLocked(redlock.WaiterMark{}) // another sidecar waits: the linger ends
		}
		m.mu.Unlock()
	}
}

// recordLocked is the holder record as the tenure stands: its lease's
// fence and name, or idle for the rest of the linger. The caller holds
// m.mu.
func (t *tenure) recordLocked() redlock.HolderRecord {
	rec := redlock.HolderRecord{Value: t.value, Channel: t.m.channel, Seq: t.notes.seq, Fence: t.next - 1}
	switch {
	case t.lease != nil:
		rec.Fence, rec.Grant, rec.Owner = t.lease.fence, t.lease.grantID, t.lease.owner
	case t.state == tenureLingering:
		rec.Idle, rec.IdleTTL = true, max(time.Millisecond, t.m.cfg.Linger)
	}
	return rec
}

// lingerLocked keeps the keys for the linger after the last lease ended,
// if the keys are valid for longer than that: a caller of this sidecar
// that asks meanwhile gets them at once. It reports whether it lingers.
// The caller holds m.mu.
func (t *tenure) lingerLocked(now time.Time) bool {
	linger := t.m.cfg.Linger
	if linger <= 0 || !t.plain || !t.hot && t.granted < 2 || t.next > t.top || !now.Add(linger+t.m.locker.Drift(t.keys.ttl)).Before(t.keys.validUntil) {
		return false
	}
	t.state, t.lease = tenureLingering, nil
	t.linger = time.AfterFunc(linger, t.lingerEnded)
	t.noteLocked()
	return true
}

// lingerEnded lets go of the keys when the linger passed with nobody
// taking them.
func (t *tenure) lingerEnded() {
	t.m.mu.Lock()
	defer t.m.mu.Unlock()
	if t.state == tenureLingering {
		t.letGoLocked(redlock.WaiterMark{})
	}
}

// letGoLocked gives the keys up: the tenure is forgotten at once, and its
// keys are released on the masters in the background, leaving mark for
// this sidecar's next caller (TTL 0: none). Until the release has been
// answered, a caller of this sidecar that asks for the resource waits for
// it (reserve), so it never meets its own sidecar's leftovers; the local
// queue is woken once it has. The caller holds m.mu.
func (t *tenure) letGoLocked(mark redlock.WaiterMark) {
	if mark.TTL > 0 {
		// This sidecar's next caller keeps its place. (Without one, there
		// is no mark of this sidecar to remove: its take removed the last,
		// and a queue that empties removes what a refused try left.)
		mark.Sidecar = t.m.id
	}
	t.goneLocked()
	if t.plain {
		t.m.recentlyLetGoLocked(t.res)
	}
	done := make(chan struct{})
	t.m.letting[t.queue] = append(t.m.letting[t.queue], letting{value: t.value, done: done})
	t.m.releasing++
	replyTo := t.replyTo
	renewing := t.renewing
	t.m.goLocked(func() {
		if renewing != nil {
			<-renewing // a renewal in flight could put a key back after the release
		}
		err := t.m.locker.ReleaseTenure(context.Background(), t.key, t.value, mark, replyTo)
		// This sidecar's callers wait for the first round only: a master
		// that missed it is slow or gone, and waiting longer would only
		// delay their own answer (no quorum, most likely).
		t.m.mu.Lock()
		t.m.letting[t.queue] = slices.DeleteFunc(t.m.letting[t.queue], func(l letting) bool { return l.done == done })
		if len(t.m.letting[t.queue]) == 0 {
			delete(t.m.letting, t.queue)
		}
		t.m.releasing--
		close(done)
		t.m.wakeQueueLocked(t.queue)
		t.m.mu.Unlock()
		// Off the caller's path, a release that missed its quorum (a slow
		// or starved master) can afford to try again: else the keys would
		// block the lock until they lapse.
		for try := 1; err != nil && try < releaseTries; try++ {
			time.Sleep(jitter(retryLo, retryHi))
			err = t.m.locker.ReleaseTenure(context.Background(), t.key, t.value, mark, replyTo)
		}
		if err != nil {
			t.m.log.Warn("release did not reach a quorum; keys lapse after their ttl", "name", t.res, "err", err)
		}
	})
}

// letting is a release of a tenure's keys under way (letGoLocked).
type letting struct {
	value string
	done  chan struct{} // closed once the release has been answered
}

// lettingGoLocked tells whether this sidecar is releasing the keys of
// queue under value. The caller holds m.mu.
func (m *Manager) lettingGoLocked(queue, value string) bool {
	return slices.ContainsFunc(m.letting[queue], func(l letting) bool { return l.value == value })
}

// awaitLetGo waits until this sidecar's releases of keys of queue have
// been answered (each is bounded by the node timeout).
func (m *Manager) awaitLetGo(queue string) {
	for {
		m.mu.Lock()
		ls := m.letting[queue]
		m.mu.Unlock()
		if len(ls) == 0 {
			return
		}
		<-ls[0].done
	}
}

// hotWindow is how soon after this sidecar let go of a lock it must take
// it again for the lock to linger the next time: a linger costs the keys'
// holder note and a later release on the masters, worth it for a lock its
// callers keep taking, not for one taken once.
func (c Config) hotWindow() time.Duration { return max(10*c.Linger, 100*time.Millisecond) }

// recentlyLetGoLocked notes that this sidecar let go of res now. The
// record is pruned of what is too old to matter whenever it has grown past
// twice its size after the last pruning. The caller holds m.mu.
func (m *Manager) recentlyLetGoLocked(res string) {
	now := time.Now()
	if m.recentlyLet == nil {
		m.recentlyLet = make(map[string]time.Time)
	}
	m.recentlyLet[res] = now
	if len(m.recentlyLet) <= 2*m.recentKept+64 {
		return
	}
	for r, at := range m.recentlyLet {
		if now.Sub(at) > m.cfg.hotWindow() {
			delete(m.recentlyLet, r)
		}
	}
	m.recentKept = len(m.recentlyLet)
}

// leaveLocked forgets the tenure without releasing its keys: they lapse
// (shutdown: promises still stand on them). The caller holds m.mu.
func (t *tenure) leaveLocked() { t.goneLocked() }

// goneLocked forgets the tenure: not renewed, not noted, not reused. The
// caller holds m.mu.
func (t *tenure) goneLocked() {
	t.state, t.lease, t.renewSlot = tenureGone, nil, -1
	if t.usesChannel {
		t.usesChannel = false
		t.m.unuseChannelLocked()
	}
	if t.linger != nil {
		t.linger.Stop()
		t.linger = nil
	}
	if t.m.tenures[t.res] == t {
		delete(t.m.tenures, t.res)
	}
}

// heard is a message on this sidecar's channel: another sidecar's caller
// wants a lock this sidecar holds (its mark), or a release this sidecar
// asked for was made.
func (m *Manager) heard(msg redlock.Message) {
	res, ok := strings.CutPrefix(msg.Key, m.cfg.KeyPrefix)
	if !ok {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if msg.Kind == redlock.MessageReleased {
		m.releaseHeardLocked(res)
		return
	}
	t, ok := m.tenures[res]
	if !ok {
		return
	}
	t.learnLocked(msg.Mark, msg.ReplyTo, time.Now())
	if t.state == tenureLingering {
		t.letGoLocked(redlock.WaiterMark{}) // nobody holds it: let go at once
	}
}

// releaseHeardLocked wakes the callers of this sidecar that wait for a
// release of res (awaitRelease, and the queue). The caller holds m.mu.
func (m *Manager) releaseHeardLocked(res string) {
	for _, ch := range m.awaiting[res] {
		select {
		case ch <- struct{}{}: // one per master that released
		default:
		}
	}
	if q, ok := m.queues[res]; ok {
		q.signal(WakePubSub)
	}
}

// expectRelease registers for a release of res announced to this
// sidecar, before a try that may ask a sidecar that only lingers on it to
// let go: the announcements (one per master that releases) can come
// before the try's last answer. wait waits for n of them, at most d; done
// unregisters.
func (m *Manager) expectRelease(res string) (wait func(ctx context.Context, n int, d time.Duration) error, done func()) {
	ch := make(chan struct{}, maxAnnouncements)
	m.mu.Lock()
	if m.awaiting == nil {
		m.awaiting = make(map[string][]chan struct{})
	}
	m.awaiting[res] = append(m.awaiting[res], ch)
	m.mu.Unlock()
	done = func() {
		m.mu.Lock()
		m.awaiting[res] = slices.DeleteFunc(m.awaiting[res], func(c chan struct{}) bool { return c == ch })
		if len(m.awaiting[res]) == 0 {
			delete(m.awaiting, res)
		}
		m.mu.Unlock()
	}
	wait = func(ctx context.Context, n int, d time.Duration) error {
		t := time.NewTimer(d)
		defer t.Stop()
		for range n {
			select {
			case <-ch:
			case <-t.C:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			case <-m.stopping:
				return ErrShuttingDown
			}
		}
		return nil
	}
	return wait, done
}

// Tenure settings and their bounds.
const (
	// DefaultFenceBlock is Config.FenceBlock's default: with 1 ms holds a
	// block lasts a contended lock about 64 ms of hand-overs, each a new
	// fence with no round, for one round per block; fences are µs since the
	// epoch, and a block takes 64 of them.
	DefaultFenceBlock = 64
	// DefaultLinger is the linger the settings table proposes
	// (SIDELOCK_LINGER; lease.Config.Linger's zero is none): long enough
	// to bridge a caller that takes a lock again after a short piece of
	// work, short beside the key ttl (docs/performance.md).
	DefaultLinger = 20 * time.Millisecond
	// MaxFenceBlock bounds Config.FenceBlock: a block reserves fences on
	// the masters' counter, which stays far below 2^53 and near their
	// clock in µs (docs/fencing.md).
	MaxFenceBlock = 1 << 16
	// MaxLingerShare bounds Config.Linger as a share of the key ttl: a
	// sidecar that dies while lingering keeps the name from others until
	// its keys lapse, and a linger is meant to bridge a caller's next
	// acquire, not to hold a lock nobody holds.
	MaxLingerShare = 0.1
	// MaxRevokeWait bounds how long a try-once acquire refused by a
	// sidecar that only lingers waits for its release before its one more
	// try: the holder lets go at once when asked, or when its linger ends.
	MaxRevokeWait = time.Second
	// markLife is how long a waiting caller's mark lives unless its next
	// try renews it: a head tries at least every pollHi, and the mark of
	// a sidecar that died blocks a free lock at most this long.
	markLife = 2 * time.Second
	// channelMark names a sidecar's channel after the key prefix: lock
	// names cannot hold '#', so it is no lock's key nor channel.
	channelMark = "#sidecar:"
	// defaultFenceRetention is Config.FenceRetention's default, as the
	// masters' (redlock).
	defaultFenceRetention = time.Hour
)

// withTenureDefaults fills in the tenure settings' defaults.
func (c Config) withTenureDefaults() Config {
	if c.FenceBlock == 0 {
		c.FenceBlock = DefaultFenceBlock
	}
	if c.FenceRetention == 0 {
		c.FenceRetention = defaultFenceRetention
	}
	return c
}

// waiterMarks tells whether this sidecar leaves and heeds waiter marks.
func (c Config) waiterMarks() bool { return !c.NoWaiterMarks }

// recordRefresh is how often a holder record is written again while its
// keys are held: well within the retention it shares with the counters.
func (c Config) recordRefresh() time.Duration { return c.FenceRetention / 4 }

// markTTL is the life of a mark left at now for a caller waiting until
// deadline: markLife, no longer than the wait.
func (m *Manager) markTTL(deadline, now time.Time) time.Duration {
	return max(time.Millisecond, min(markLife, deadline.Sub(now)))
}

// releaseTries is how many rounds a release in the background makes
// before it leaves the keys to lapse.
const releaseTries = 3

// noteSpacing is the least time between two holder notes of a tenure
// while callers of the pod take it in turns or re-take it as it lingers:
// a note is a round to the masters, which a hand-over inside the pod or a
// linger exists to spare; another pod's GET then names the holder, or the
// linger, within it plus a round.
const noteSpacing = 10 * time.Millisecond

// maxAnnouncements buffers the release announcements one try may wait
// for: one per master of a quorum group, far more than any group has.
const maxAnnouncements = 16
