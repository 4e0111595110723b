package lease

import "strconv"

// Kind is the kind of thing a lease holds part of. Kinds are separate name
// spaces: the lock "x", the semaphore "x" and the read/write lock "x" are
// unrelated.
type Kind int

// Kinds.
const (
	KindLock      Kind = iota // an exclusive lock
	KindSemaphore             // one permit of a counting semaphore (semaphore.go)
	KindRWLock                // one side of a read/write lock (rwlock.go)
)

// target is what a request asks for: a lock, a permit of a semaphore of
// permits, or a read/write lock in mode. It is the one home of the names a
// kind's leases, queues and keys go by.
type target struct {
	name    string
	permits int
	mode    Mode
}

func (r Request) target() target { return target{name: r.Name, permits: r.Permits, mode: r.Mode} }

func (l *lease) target() target { return target{name: l.name, permits: l.permits, mode: l.mode} }

func (t target) kind() Kind {
	switch {
	case t.mode != "":
		return KindRWLock
	case t.permits > 0:
		return KindSemaphore
	}
	return KindLock
}

// kindMark separates a name from what is derived from it. Lock names
// cannot contain it, so no derived name is ever a lock ("<name>#<i>"),
// nor a derived key's fence key ("<name>#<i>#fence") any lock's
// ("<name>#fence").
const kindMark = "#"

// Derived names of a read/write lock "x": its writer "x#w", its readers
// "x#r1" … "x#r64", its intent "x#i" and its queue "x#rw". A semaphore's
// slots are "x#1" … and its queue "x#", so the two never meet.
const (
	rwWriter = "w"
	rwReader = "r"
	rwIntent = "i"
	rwQueue  = "rw"
)

// resource names what the lease of slot holds, in the Manager's maps and,
// after the key prefix, on the masters: the name for a lock, "<name>#<slot>"
// for a semaphore's slot, "<name>#w" for a read/write lock's writer and
// "<name>#r<slot>" for one of its readers.
func (t target) resource(slot int) string {
	switch t.kind() {
	case KindSemaphore:
		return t.name + kindMark + strconv.Itoa(slot)
	case KindRWLock:
		if t.mode == ModeShared {
			return t.name + kindMark + rwReader + strconv.Itoa(slot)
		}
		return t.name + kindMark + rwWriter
	}
	return t.name
}

// queue names the queue of callers waiting for t: one per lock, per
// semaphore, and per read/write lock (readers and writers queue together,
// first come first served).
func (t target) queue() string {
	switch t.kind() {
	case KindSemaphore:
		return t.name + kindMark
	case KindRWLock:
		return t.name + kindMark + rwQueue
	}
	return t.name
}

// resources lists everything a lease of t's name and kind may hold: the
// lock, every slot of the semaphore, or the writer and every reader of the
// read/write lock (in either mode).
func (t target) resources() []string {
	switch t.kind() {
	case KindSemaphore:
		return t.slotResources(t.permits)
	case KindRWLock:
		readers := t
		readers.mode = ModeShared
		writer := t
		writer.mode = ModeExclusive
		return append(readers.slotResources(MaxReaders), writer.resource(0))
	}
	return []string{t.name}
}

func (t target) slotResources(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = t.resource(i + 1)
	}
	return ids
}
