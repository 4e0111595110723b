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
	prefix string // of every path naming one ("/locks/"), see routes.go
	api    leaseAPI
	list   func() []lease.Info // this sidecar's live leases of the kind
	// defaultMode is the mode of an acquisition that names none: a
	// read/write lock's writer, as flock's default. Which kind takes
	// permits or a mode is lease's to say (its Acquire refuses the others).
	defaultMode lease.Mode
}

// The path prefixes of the kinds.
const (
	locks      = "/locks/"
	semaphores = "/semaphores/"
	rwlocks    = "/rwlocks/"
	locksets   = "/locksets/"
)

// setSeparator joins the lock names of a set in its path and its
// canonical name ("a,b"); lock names cannot contain it.
const setSeparator = ","

func lockKind(m *lease.Manager) kind {
	return kind{prefix: locks, api: m, list: m.List}
}

func semaphoreKind(m *lease.Manager) kind {
	return kind{prefix: semaphores, api: m.Semaphores(), list: m.Semaphores().List}
}

func rwlockKind(m *lease.Manager) kind {
	return kind{prefix: rwlocks, api: m.RWLocks(), list: m.RWLocks().List, defaultMode: lease.ModeExclusive}
}

func locksetKind(m *lease.Manager) kind {
	return kind{prefix: locksets, api: m.LockSets(), list: m.LockSets().List}
}
