package lease

import (
	"time"
)

// Events of a lease, for callers that want to learn at once when their
// lock is renewed or lost (server-sent events, `sidelock exec`).

// EventKind names an event.
type EventKind string

// Event kinds.
const (
	EventRenewed EventKind = "renewed" // a quorum confirmed the lock again
	// EventExpiring: renewals keep failing and the validity ends within a
	// renewal interval; stop acting by ValidUntil unless renewed first.
	EventExpiring EventKind = "expiring"
	EventEnded    EventKind = "ended" // the lease is over; Reason says why
)

// Event is one thing that happened to a lease.
type Event struct {
	Kind EventKind
	// ValidUntil is the lease's promise as of the event (renewed, expiring),
	// and for an end at shutdown the promise that still stands: the keys
	// are left to lapse, not deleted, so the caller may finish until then.
	ValidUntil time.Time
	Reason     EndReason // for EventEnded
}

// eventBuffer holds events a slow reader has not taken yet. Renewals and
// warnings are dropped rather than block the renewer or a heartbeat (they
// publish under the Manager's lock); one slot is always kept for the final
// event, so it is never dropped.
const eventBuffer = 8

type subscriber struct{ ch chan Event }

// Watch subscribes to the events of the live lease of the lock name held
// with token. The channel delivers renewed and expiring events, then one
// EventEnded, and is closed after it. cancel stops the subscription early.
func (m *Manager) Watch(name, token string) (events <-chan Event, cancel func(), err error) {
	return m.watch(m.findAmong(target{}), name, token)
}

func (m *Manager) watch(find finder, name, token string) (events <-chan Event, cancel func(), err error) {
	l, err := find(name, token)
	if err != nil {
		return nil, nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.leases[l.res] != l {
		return nil, nil, ErrLeaseGone // ended since: its final event is gone
	}
	s := &subscriber{ch: make(chan Event, eventBuffer)}
	if l.pub.subscribers == nil {
		l.pub.subscribers = make(map[*subscriber]struct{})
	}
	l.pub.subscribers[s] = struct{}{}
	cancel = func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		if _, ok := l.pub.subscribers[s]; ok {
			delete(l.pub.subscribers, s)
			close(s.ch)
		}
	}
	return s.ch, cancel, nil
}

// publish sends a renewal or warning to every subscriber that has room
// for it; a zero Event is nothing to publish.
func (l *lease) publish(e Event) {
	if e.Kind == "" {
		return
	}
	l.m.mu.Lock()
	defer l.m.mu.Unlock()
	for s := range l.pub.subscribers {
		if len(s.ch) < cap(s.ch)-1 {
			s.ch <- e
		}
	}
}

// closeSubscribersLocked delivers the final event and closes every
// subscription. The caller holds the Manager's lock.
func (l *lease) closeSubscribersLocked(reason EndReason, valid time.Time) {
	e := Event{Kind: EventEnded, Reason: reason}
	if reason == EndShutdown {
		e.ValidUntil = valid
	}
	for s := range l.pub.subscribers {
		s.ch <- e
		close(s.ch)
		delete(l.pub.subscribers, s)
	}
}
