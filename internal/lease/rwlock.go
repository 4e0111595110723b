package lease

import (
	"context"
	"errors"
	mrand "math/rand/v2"
	"time"

	"github.com/sidelock/sidelock/pkg/redlock"
)

// Read/write locks: many readers (ModeShared) or one writer
// (ModeExclusive) hold a name at once.
//
// On the masters a read/write lock "x" is a writer key "x#w", one key per
// reader "x#r1" … "x#r64" (MaxReaders: a reader holds one, as a permit
// holds one slot of a semaphore) and an intent key "x#i"; package redlock
// (rwlock.go) admits a reader on a master only while no writer holds it or
// waits for it there, and a writer only while no reader or other writer
// holds it there. A grant needs a majority.
//
// Why no reader overlaps a writer: the two majorities share a master, and
// that master refused whichever of the two came later, so no reader grant
// and writer grant are valid at one instant (under Redlock's assumptions,
// see package redlock). Two writers exclude each other as two holders of a
// lock do, and writers' fences order them after every earlier writer (a
// reader's grant has no fence).
//
// Writers do not starve: a refused writer leaves an intent on the masters
// that refused it, which bars new readers there until the writer is
// admitted, gives up (its intent is then released) or dies (its intent
// lapses within its key ttl). On this sidecar, readers and writers of a
// name wait in one FIFO queue, so a waiting writer also holds back the
// readers that came after it.
//
// Each reader and the writer is otherwise a lease like any other: renewal,
// events, hold, max_hold, idempotency. What a lock does not promise, a
// read/write lock does not either; in particular at most MaxReaders read
// at once (more are refused as held), and a reader that asks for another
// read while a writer waits is refused: never nest a read in a read.

// Mode is a side of a read/write lock.
type Mode string

// Modes.
const (
	ModeShared    Mode = "shared"    // one of many readers
	ModeExclusive Mode = "exclusive" // the one writer
)

// MaxReaders bounds a read/write lock's readers at once: a writer checks
// every reader key on each master in one step.
const MaxReaders = 64

// rwKeys names the keys of the read/write lock name on the masters that a
// reader's acquisition checks: the writer and the intent.
func (m *Manager) rwKeys(name string) redlock.RWKeys {
	writer := target{name: name, kind: KindRWLock, mode: ModeExclusive}
	return redlock.RWKeys{
		Writer: m.cfg.KeyPrefix + writer.resource(0),
		Intent: m.cfg.KeyPrefix + name + kindMark + rwIntent,
	}
}

// writerKeys is rwKeys with every reader key, which a writer's
// acquisition checks.
func (m *Manager) writerKeys(name string) redlock.RWKeys {
	keys := m.rwKeys(name)
	readers := target{name: name, kind: KindRWLock, mode: ModeShared}
	keys.Readers = readers.slotResources(MaxReaders)
	for i, r := range keys.Readers {
		keys.Readers[i] = m.cfg.KeyPrefix + r
	}
	return keys
}

// tryAcquireReader tries reader slots, from a random one, skipping those
// this sidecar holds or is taking, until one is granted. A refusal by a
// writer (holding or waiting) ends the try at once; only a slot that
// another reader holds moves it to the next slot.
func (m *Manager) tryAcquireReader(ctx context.Context, req Request, fromQueue bool) (Info, error) {
	if !fromQueue && m.hasQueue(req.target().queue()) {
		return Info{}, &HeldError{}
	}
	first := mrand.IntN(MaxReaders)
	for i := range MaxReaders {
		slot := (first+i)%MaxReaders + 1
		if m.busy(req.target().resource(slot)) {
			continue
		}
		info, err := m.tryAcquireSlot(ctx, req, slot, true)
		if !errors.Is(err, redlock.ErrReaderKeyHeld) {
			return info, err
		}
	}
	return Info{}, &HeldError{} // MaxReaders read already
}

// busy reports whether this sidecar holds res or is taking it.
func (m *Manager) busy(res string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, held := m.leases[res]
	_, pending := m.pending[res]
	return held || pending
}

// releaseIntent takes back the intent a writer that was not granted may
// have left on the masters, so readers need not wait for it to lapse.
func (m *Manager) releaseIntent(req Request) {
	if req.Mode != ModeExclusive || req.grantID == "" {
		return
	}
	_ = m.locker.Release(context.Background(), m.rwKeys(req.Name).Intent, masterValue(req.grantID, req.Owner))
}

// RWLocks is the Manager's API for read/write locks: the same leases,
// queues, limits and events as locks, found by the lock's name and the
// reader's or writer's token.
type RWLocks struct{ m *Manager }

// RWLocks returns the API of the Manager's read/write locks.
func (m *Manager) RWLocks() RWLocks { return RWLocks{m: m} }

// rwProbe finds leases among both sides of a read/write lock.
var rwProbe = target{kind: KindRWLock, mode: ModeShared}

// Acquire takes the read/write lock req.Name in req.Mode; otherwise it is
// Manager.Acquire.
func (r RWLocks) Acquire(ctx context.Context, req Request) (Info, error) {
	req.kind = KindRWLock
	return r.m.acquire(ctx, req)
}

// Extend is Manager.Extend for a reader or the writer.
func (r RWLocks) Extend(ctx context.Context, name, token string, ttl time.Duration) (Info, error) {
	return r.m.extend(ctx, r.m.findAmong(rwProbe), name, token, ttl)
}

// Release is Manager.Release for a reader or the writer.
func (r RWLocks) Release(ctx context.Context, name, token string) error {
	return r.m.release(ctx, r.m.findAmong(rwProbe), name, token)
}

// Watch is Manager.Watch for a reader or the writer.
func (r RWLocks) Watch(name, token string) (<-chan Event, func(), error) {
	return r.m.watch(r.m.findAmong(rwProbe), name, token)
}

// RWStatus is what the masters say about a read/write lock.
type RWStatus struct {
	Name          string
	Writer        Status   // Held when a writer holds it
	Readers       []Status // the held reader slots, by slot
	WriterWaiting bool     // a majority holds a writer's intent
}

// Inspect reads the writer, every reader slot and the intent of the
// read/write lock name from the masters, in parallel; it fails when any
// of them cannot be read.
func (r RWLocks) Inspect(ctx context.Context, name string) (RWStatus, error) {
	if err := ValidateName(name); err != nil {
		return RWStatus{}, err
	}
	readers := target{name: name, kind: KindRWLock, mode: ModeShared}
	writer := target{name: name, kind: KindRWLock, mode: ModeExclusive}
	reads := make([]func() (Status, error), 0, MaxReaders+2)
	for slot := 1; slot <= MaxReaders; slot++ {
		reads = append(reads, func() (Status, error) { return r.m.inspect(ctx, readers, slot) })
	}
	reads = append(reads,
		func() (Status, error) { return r.m.inspect(ctx, writer, 0) },
		func() (Status, error) { return r.m.inspectKey(ctx, name, r.m.rwKeys(name).Intent) })
	all, err := inspectAll(reads)
	if err != nil {
		return RWStatus{}, err
	}
	st := RWStatus{Name: name, Writer: all[MaxReaders], WriterWaiting: all[MaxReaders+1].Held}
	for _, s := range all[:MaxReaders] {
		if s.Held {
			st.Readers = append(st.Readers, s)
		}
	}
	return st, nil
}

// List returns this sidecar's live readers and writers, by name and slot,
// without tokens.
func (r RWLocks) List() []Info { return r.m.list(KindRWLock) }
