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

// String is what refusals call one of the kind.
func (k Kind) String() string {
	switch k {
	case KindSemaphore:
		return "semaphore"
	case KindRWLock:
		return "read/write lock"
	}
	return "lock"
}

// checkKindFields is the one check of the fields that belong to one kind:
// permits (within [1, MaxPermits]) to a semaphore, a mode (shared or
// exclusive) to a read/write lock, each required there and refused
// elsewhere. A request's kind is the API it came through (Request.kind),
// never inferred from these fields; noun is what the refusals call what
// was asked for (a lock set's locks are locks). The refusals name the HTTP
// paths of the kinds that take the field, as the API's callers see them.
func checkKindFields(req Request, noun string) error {
	switch {
	case req.kind != KindSemaphore && req.Permits != 0:
		return invalidParam(ParamPermits, "a %s takes no permits; permits are a semaphore's (/semaphores/{name})", noun)
	case req.kind != KindRWLock && req.Mode != "":
		return invalidParam(ParamMode, "a %s takes no mode; mode is a read/write lock's (/rwlocks/{name})", noun)
	case req.kind == KindSemaphore && (req.Permits < 1 || req.Permits > MaxPermits):
		return invalidParam(ParamPermits, "a semaphore takes permits: an integer within [1, %d], got %d", MaxPermits, req.Permits)
	case req.kind == KindRWLock && req.Mode != ModeShared && req.Mode != ModeExclusive:
		return invalidParam(ParamMode, "mode must be %q or %q, got %q", ModeShared, ModeExclusive, truncateName(string(req.Mode)))
	}
	return nil
}

// target is what a request asks for: a lock, a permit of a semaphore of
// permits, or a read/write lock in mode. It is the one home of the names a
// kind's leases, queues and keys go by.
type target struct {
	name    string
	kind    Kind
	permits int  // a semaphore's
	mode    Mode // a read/write lock's side
}

func (r Request) target() target {
	return target{name: r.Name, kind: r.kind, permits: r.Permits, mode: r.Mode}
}

func (l *lease) target() target {
	return target{name: l.name, kind: l.kind, permits: l.permits, mode: l.mode}
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
	switch t.kind {
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
	switch t.kind {
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
	switch t.kind {
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
