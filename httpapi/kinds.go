package httpapi

import (
	"context"
	"time"

	"github.com/sidelock/sidelock/internal/lease"
)

// leaseAPI is what the handlers need of a kind of lease: the lease
// Manager for locks, its Semaphores for permits.
type leaseAPI interface {
	Acquire(ctx context.Context, req lease.Request) (lease.Info, error)
	Extend(ctx context.Context, name, token string, ttl time.Duration) (lease.Info, error)
	Release(ctx context.Context, name, token string) error
	Watch(name, token string) (<-chan lease.Event, func(), error)
}

// kind is one kind of lease the API serves under a path of its own, with
// the same acquire, extend, release and events routes.
type kind struct {
	prefix  string // of every path naming one ("/locks/"), see routes.go
	api     leaseAPI
	permits bool // an acquisition names a semaphore's permits
}

// The path prefixes of the kinds.
const (
	locks      = "/locks/"
	semaphores = "/semaphores/"
)

func lockKind(m *lease.Manager) kind { return kind{prefix: locks, api: m} }

func semaphoreKind(m *lease.Manager) kind {
	return kind{prefix: semaphores, api: m.Semaphores(), permits: true}
}
