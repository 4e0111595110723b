package httpapi

import (
	"context"
	"time"

	"github.com/sidelock/sidelock/internal/lease"
)

// leaseAPI is what the handlers need of a kind of lease: the lease
// Manager for locks, its Semaphores for permits, its RWLocks for readers
// and writers, its LockSets for sets of locks.
type leaseAPI interface {
	Acquire(ctx context.Context, req lease.Request) (lease.Info, error)
	Extend(ctx context.Context, name, token string, ttl time.Duration) (lease.Info, error)
	Release(ctx context.Context, name, token string) error
	Watch(name, token string) (<-chan lease.Event, func(), error)
}

// kind is one kind of lease the API serves under a path of its own, with
// the same list, acquire, extend, release and events routes.
type kind struct {
	prefix  string // of every path naming one ("/locks/"), see routes.go
	noun    string // what refusals call one ("lock")
	api     leaseAPI
	list    func() []lease.Info // this sidecar's live leases of the kind
	permits bool                // an acquisition names a semaphore's permits
	mode    bool                // an acquisition takes a read/write lock's mode
}

// The path prefixes of the kinds.
const (
	locks      = "/locks/"
	semaphores = "/semaphores/"
	rwlocks    = "/rwlocks/"
	locksets   = "/locksets/"
)

// The nouns of the kinds, in refusals and in lock_held's detail (encode.go).
const (
	lockNoun      = "lock"
	semaphoreNoun = "semaphore"
	rwlockNoun    = "read/write lock"
	locksetNoun   = "lock set"
)

// setSeparator joins the lock names of a set in its path and its
// canonical name ("a,b"); lock names cannot contain it.
const setSeparator = ","

func lockKind(m *lease.Manager) kind {
	return kind{prefix: locks, noun: lockNoun, api: m, list: m.List}
}

func semaphoreKind(m *lease.Manager) kind {
	return kind{prefix: semaphores, noun: semaphoreNoun, api: m.Semaphores(), list: m.Semaphores().List, permits: true}
}

func rwlockKind(m *lease.Manager) kind {
	return kind{prefix: rwlocks, noun: rwlockNoun, api: m.RWLocks(), list: m.RWLocks().List, mode: true}
}

func locksetKind(m *lease.Manager) kind {
	return kind{prefix: locksets, noun: locksetNoun, api: m.LockSets(), list: m.LockSets().List}
}
