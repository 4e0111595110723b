package lease

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"time"
)

// Counting semaphores: at most N callers hold a name at once.
//
// A semaphore of N permits is N independent locks, its slots
// "<name>#1" … "<name>#N", and a permit is one slot held exclusively, with
// everything a lock has: its own Redlock grant on a majority, renewal,
// fence, events, max_hold.
//
// Why at most N hold at once: each slot is a Redlock lock, so at any
// instant at most one caller holds it validly (under Redlock's
// assumptions, see package redlock), and every holder holds exactly one
// slot of the N. Nothing is counted on the masters.
//
// The obvious design, a counter per master with majority admission, is
// NOT safe: with N=2 and masters a, b, c, grants admitted on {a,b},
// {b,c} and {a,c} are three holders while every master counted only two
// (TestSemaphoreCounterExample shows it against real masters).
//
// What the slots cost: a caller tries slots one round each, from a random
// one (so callers of many sidecars spread out), skipping the slots this
// sidecar holds; a full semaphore answers after up to N rounds. Fences
// order the holders of one slot, not of the semaphore.
//
// Every caller of a semaphore must ask for the same N: a caller asking for
// M < N is admitted only to slots 1..M, and one asking for more widens the
// limit for everybody to its N. A sidecar refuses a request whose permits
// differ from those of its own live holders and waiters of the name
// (ErrPermitsMismatch); it cannot see other sidecars' callers.

// MaxPermits bounds a semaphore's permits: a full semaphore costs a try
// up to MaxPermits rounds to the masters.
const MaxPermits = 64

// ErrPermitsMismatch is a semaphore request whose permits differ from
// those this sidecar's live holders or waiters of the name asked for.
var ErrPermitsMismatch = errors.New("permits differ from those of this semaphore's live holders and waiters")

// checkPermits refuses a semaphore request whose permits (in range:
// checkKindFields) differ from the ones of this sidecar's live holders and
// waiters.
func (m *Manager) checkPermits(req Request) error {
	if req.kind != KindSemaphore {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if q, ok := m.queues[req.target().queue()]; ok && q.permits != req.Permits {
		return fmt.Errorf("%w: waiters asked for %d", ErrPermitsMismatch, q.permits)
	}
	for slot := 1; slot <= MaxPermits; slot++ {
		if l, ok := m.leases[req.target().resource(slot)]; ok && l.permits != req.Permits {
			return fmt.Errorf("%w: holders asked for %d", ErrPermitsMismatch, l.permits)
		}
	}
	return nil
}

// tryAcquireSemaphore tries the slots once each, from a random one, until
// one is granted. When every slot is held it answers a *HeldError whose
// hint is the soonest a slot may lapse (0, unknown, if any slot gave
// none); other errors end the try at once.
func (m *Manager) tryAcquireSemaphore(ctx context.Context, req Request, fromQueue bool) (Info, error) {
	if !fromQueue && m.hasQueue(req.target().queue()) {
		return Info{}, &HeldError{}
	}
	first := mrand.IntN(req.Permits)
	soonest := time.Duration(-1)
	for i := range req.Permits {
		slot := (first+i)%req.Permits + 1
		info, err := m.tryAcquireSlot(ctx, req, slot, true)
		var held *HeldError
		if !errors.As(err, &held) {
			return info, err
		}
		if soonest < 0 || held.RetryAfter < soonest {
			soonest = held.RetryAfter
		}
	}
	return Info{}, &HeldError{RetryAfter: soonest}
}

func (m *Manager) hasQueue(id string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.queues[id]
	return ok
}

// Semaphores is the Manager's API for counting semaphores: the same
// leases, queues, limits and events as locks, found by the semaphore's
// name and the permit's token.
type Semaphores struct{ m *Manager }

// Semaphores returns the API of the Manager's semaphores.
func (m *Manager) Semaphores() Semaphores { return Semaphores{m: m} }

// semaphoreProbe finds leases among every slot a semaphore may have.
var semaphoreProbe = target{kind: KindSemaphore, permits: MaxPermits}

// Acquire takes one permit of the semaphore req.Name, which req.Permits
// callers may hold at once; otherwise it is Manager.Acquire.
func (s Semaphores) Acquire(ctx context.Context, req Request) (Info, error) {
	req.kind = KindSemaphore
	return s.m.acquire(ctx, req)
}

// Extend is Manager.Extend for a permit.
func (s Semaphores) Extend(ctx context.Context, name, token string, ttl time.Duration) (Info, error) {
	return s.m.extend(ctx, s.m.findAmong(semaphoreProbe), name, token, ttl)
}

// Release is Manager.Release for a permit.
func (s Semaphores) Release(ctx context.Context, name, token string) error {
	return s.m.release(ctx, s.m.findAmong(semaphoreProbe), name, token)
}

// Watch is Manager.Watch for a permit.
func (s Semaphores) Watch(name, token string) (<-chan Event, func(), error) {
	return s.m.watch(s.m.findAmong(semaphoreProbe), name, token)
}

// SemaphoreStatus is what the masters say about a semaphore.
type SemaphoreStatus struct {
	Name    string
	Permits int
	Holders []Status // the held slots, by slot
}

// Inspect reads every slot of the semaphore name from the masters, in
// parallel; it fails when any slot cannot be read.
func (s Semaphores) Inspect(ctx context.Context, name string, permits int) (SemaphoreStatus, error) {
	if err := ValidateName(name); err != nil {
		return SemaphoreStatus{}, err
	}
	if permits < 1 || permits > MaxPermits {
		return SemaphoreStatus{}, invalidParam(ParamPermits, "permits %d must be within [1, %d]", permits, MaxPermits)
	}
	t := target{name: name, kind: KindSemaphore, permits: permits}
	reads := make([]func() (Status, error), permits)
	for i := range reads {
		reads[i] = func() (Status, error) { return s.m.inspect(ctx, t, i+1) }
	}
	slots, err := inspectAll(reads)
	if err != nil {
		return SemaphoreStatus{}, err
	}
	st := SemaphoreStatus{Name: name, Permits: permits}
	for _, slot := range slots {
		if slot.Held {
			st.Holders = append(st.Holders, slot)
		}
	}
	return st, nil
}

// List returns this sidecar's live permits, by name and slot, without
// tokens.
func (s Semaphores) List() []Info { return s.m.list(KindSemaphore) }

// inspectAll runs the reads in parallel and returns their statuses in
// order, or the first error.
func inspectAll(reads []func() (Status, error)) ([]Status, error) {
	out := make([]Status, len(reads))
	errs := make([]error, len(reads))
	done := make(chan struct{})
	for i, read := range reads {
		go func() {
			defer func() {
				if r := recover(); r != nil { // a bug answers 500, it does not end the sidecar
					errs[i] = fmt.Errorf("inspecting: %v", r)
				}
				done <- struct{}{}
			}()
			out[i], errs[i] = read()
		}()
	}
	for range reads {
		<-done
	}
	for _, err := range errs {
		if err != nil {
			return nil, err // the first is as telling as all
		}
	}
	return out, nil
}
